package rdmacm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/verbs"
)

// state is the ID's rdma_cm state (enum rdma_cm_state).
type state int

const (
	stIdle state = iota
	stAddrBound
	stAddrResolved
	stRouteResolved
	stListen
	stConnect // REQ or SIDR_REQ sent, or CONNECT_REQUEST received
	stEstablished
	stDisconnect
	stDestroying
)

// ID is struct rdma_cm_id. Its methods are safe from any goroutine; its events
// come through its EventChannel.
type ID struct {
	ch  *EventChannel
	ps  PortSpace
	ctx any
	n   uint32 // cm-idn

	mu        sync.Mutex
	st        state
	dev       *verbs.Device
	cmgr      *cm.CM
	cmid      *cm.ID
	src       netip.AddrPort
	dst       netip.AddrPort
	sgid      uint8
	qp        *verbs.QP
	qpSRQ     bool // qp was made on an SRQ, which a QP keeps for life
	listening bool
	req       *mad.REQ  // passive: the REQ being answered
	psn       uint32    // the PSN our REQ or REP announces: where we receive from
	param     ConnParam // active: what Connect sent
	link      *connAttr // the connection's QP attributes, once the peer's are known
	removed   bool      // the device went away
	tos       uint8     // SetTOS; a passive ID takes its REQ's
	reuse     bool      // SetReuseAddr
	afonly    bool      // SetAFOnly, when afonlySet
	afonlySet bool
	// port is the ID's place on its port's bind list (ports.go), from bind
	// to Destroy; nil for an attached device's ID, whose port the daemon's
	// rdma_cm holds, and for a passive ID, which binds none (cma's
	// connection IDs share their listener's port).
	port *portOwner
	// DISCONNECTED has been posted: a connection ends once (onCM).
	disconnected bool

	// An attached device's ID: the daemon's, which the calls forward to
	// (attached.go); subs are a listener's on every device, one per attached
	// device.
	att   AttachedID
	attCM AttachedCM
	subs  []attachedSub

	// The ID's multicast joins (mcast.go); mcSeq numbers an attached ID's.
	mcs   []*mcJoin
	mcSeq uint32
}

// CreateID makes an ID on ch for port space ps (rdma_create_id); ctx is the
// consumer's value, returned by Context.
func (ch *EventChannel) CreateID(ctx any, ps PortSpace) (*ID, error) {
	switch ps {
	case PSTCP, PSUDP, PSIB: // PSIB: RC, as librdmacm's rdma_create_id makes it
	default:
		return nil, fmt.Errorf("rdmacm: port space %#x: %w", uint16(ps), verbs.ErrUnsupported)
	}
	if err := ch.addID(); err != nil {
		return nil, err
	}
	return &ID{ch: ch, ps: ps, ctx: ctx, n: idSeq.Add(1) - 1, psn: randPSN()}, nil
}

// Context returns the consumer's value.
func (id *ID) Context() any { return id.ctx }

// Device returns the device the ID is bound to, nil before.
func (id *ID) Device() *verbs.Device { id.mu.Lock(); defer id.mu.Unlock(); return id.dev }

// QP returns the QP CreateQP made, nil before.
func (id *ID) QP() *verbs.QP { id.mu.Lock(); defer id.mu.Unlock(); return id.qp }

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// LocalAddr and PeerAddr are rdma_get_local_addr and rdma_get_peer_addr.
func (id *ID) LocalAddr() netip.AddrPort { id.mu.Lock(); defer id.mu.Unlock(); return id.src }

func (id *ID) PeerAddr() netip.AddrPort { id.mu.Lock(); defer id.mu.Unlock(); return id.dst }

func (id *ID) qpType() verbs.QPType {
	if id.ps == PSUDP {
		return verbs.UD
	}
	return verbs.RC
}

// findDevice returns the device with GID a and its index.
func findDevice(a netip.Addr) (*verbs.Device, uint8, bool) {
	g := verbs.GIDFromAddr(a)
	for _, d := range verbs.Devices() {
		for i, x := range d.GIDs() {
			if x == g {
				return d, uint8(i), true
			}
		}
	}
	return nil, 0, false
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). An
// unspecified address (0.0.0.0, ::) binds no device: a listener on it takes
// connections on every device. The port is reserved in the ID's port space
// until Destroy (cma_get_port): a second bind of an overlapping address on it
// fails with ErrInUse or ErrAddrNotAvail unless both IDs set SetReuseAddr
// and the first does not listen. Port 0 draws an ephemeral port here, which
// LocalAddr names.
func (id *ID) BindAddr(a netip.AddrPort) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st != stIdle {
		return ErrState
	}
	if !a.Addr().IsUnspecified() {
		d, i, ok := findDevice(a.Addr().Unmap())
		if !ok {
			return fmt.Errorf("%w: %v", ErrAddr, a.Addr())
		}
		if err := id.attach(d, i); err != nil {
			return err
		}
	}
	a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	if id.att != nil {
		// The daemon's rdma_cm reserves the port, and picks port 0's.
		b, err := id.att.BindAddr(a)
		if err != nil {
			id.detach()
			return err
		}
		a = b
	} else {
		o, p, err := getPort(id.ps, a, id.reuse, id.afonly, id.afonlySet)
		if err != nil {
			if id.dev != nil {
				id.detach()
			}
			return err
		}
		id.port, a = o, netip.AddrPortFrom(a.Addr(), p)
	}
	id.src = a
	id.st = stAddrBound
	return nil
}

func (id *ID) attach(d *verbs.Device, sgid uint8) error {
	if err := registerClient(); err != nil {
		return err
	}
	if c := attachedCM(d); c != nil {
		a, err := newAttached(c, id)
		if err == nil {
			err = id.setAttachedOptions(a)
		}
		if err != nil {
			if a != nil {
				destroyAttached(c, a)
			}
			return err
		}
		id.att, id.attCM = a, c
	} else {
		c, err := d.CM(cm.Config{})
		if err != nil {
			return err
		}
		id.cmgr = c
	}
	id.dev, id.sgid = d, sgid
	track(id)
	return nil
}

// detach undoes attach, for a call that failed at the daemon.
func (id *ID) detach() {
	if id.att != nil {
		destroyAttached(id.attCM, id.att)
	}
	untrack(id)
	id.dev, id.att, id.attCM, id.cmgr = nil, nil, nil, nil
}

// ResolveAddr picks the local device and address for dst (rdma_resolve_addr):
// src's, if given; else the device whose address dst is (a connection to
// itself); else the one device with an address of dst's family (the first
// for an unspecified dst). An unspecified dst is the chosen device's own
// address. The result comes as ADDR_RESOLVED (or ADDR_ERROR).
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st != stIdle && id.st != stAddrBound {
		return ErrState
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if id.st == stAddrBound && id.dev != nil {
		src = id.src.Addr()
	}
	// The ID's family, the bound address's or the source's, must be dst's
	// (resolve_prepare_src: EINVAL), the unspecified dst's too.
	fam := src
	if id.st == stAddrBound {
		fam = id.src.Addr()
	}
	if fam.IsValid() && fam.Unmap().Is4() != dst.Addr().Is4() {
		return fmt.Errorf("rdmacm: source %v for destination %v: %w", fam, dst.Addr(), verbs.ErrInvalid)
	}
	var d *verbs.Device
	var sgid uint8
	if src.IsValid() && !src.IsUnspecified() {
		var ok bool
		if d, sgid, ok = findDevice(src.Unmap()); !ok {
			return fmt.Errorf("%w: %v", ErrAddr, src)
		}
	} else if dd, i, ok := findDevice(dst.Addr()); ok {
		// One of a device's own addresses: that device, whose frames to
		// itself it loops back (the kernel routes a local address to
		// its own device, rdma_resolve_ip's is_dst_local).
		d, sgid = dd, i
	} else {
		n := 0
		for _, dv := range verbs.Devices() {
			for i, g := range dv.GIDs() {
				if g.Addr().Is4() == dst.Addr().Is4() {
					if n == 0 {
						d, sgid = dv, uint8(i)
					}
					n++
					break
				}
			}
		}
		// The unspecified address takes the first device, not a route
		// (cma_bind_loopback); any other address needs the only one.
		if n == 0 || n > 1 && !dst.Addr().IsUnspecified() {
			return fmt.Errorf("rdmacm: %d devices can reach %v: name a source address: %w", n, dst.Addr(), verbs.ErrInvalid)
		}
	}
	if id.st == stIdle && attachedCM(d) == nil {
		// rdma_resolve_addr binds an idle ID first (cma_bind_addr): to
		// the source address given, else to the unspecified address of
		// dst's family, and port 0, so an ephemeral port, reserved.
		b := netip.IPv4Unspecified()
		if src.IsValid() && !src.IsUnspecified() {
			b = src.Unmap()
		} else if !dst.Addr().Is4() {
			b = netip.IPv6Unspecified()
		}
		o, p, err := getPort(id.ps, netip.AddrPortFrom(b, 0), id.reuse, id.afonly, id.afonlySet)
		if err != nil {
			return err
		}
		id.port, id.src = o, netip.AddrPortFrom(id.src.Addr(), p)
	}
	if id.dev == nil {
		if err := id.attach(d, sgid); err != nil {
			id.releasePort()
			return err
		}
		if id.att != nil && id.st == stAddrBound { // to every device: bind the daemon's ID the same
			if _, err := id.att.BindAddr(id.src); err != nil {
				id.detach()
				return err
			}
		}
	}
	src = id.dev.GIDs()[id.sgid].Addr()
	if dst.Addr().IsUnspecified() {
		// The unspecified address is the device itself: the source GID
		// is the destination's (cma_resolve_loopback).
		dst = netip.AddrPortFrom(src, dst.Port())
	}
	if id.att != nil { // ADDR_RESOLVED comes from the daemon
		if err := id.att.ResolveAddr(src, dst); err != nil {
			return err
		}
		id.src, id.dst = netip.AddrPortFrom(src, id.src.Port()), dst
		return nil
	}
	id.src = netip.AddrPortFrom(src, id.src.Port())
	id.dst = dst
	id.st = stAddrResolved
	id.ch.post(&Event{Type: EventAddrResolved, ID: id})
	return nil
}

// ResolveRoute fixes the path to the resolved address (rdma_resolve_route): on
// RoCE, the port's active MTU and the GIDs. ROUTE_RESOLVED follows.
func (id *ID) ResolveRoute() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st != stAddrResolved {
		return ErrState
	}
	if id.att != nil { // ROUTE_RESOLVED comes from the daemon
		return id.att.ResolveRoute()
	}
	id.st = stRouteResolved
	id.ch.post(&Event{Type: EventRouteResolved, ID: id})
	return nil
}

// CreateQP makes the ID's QP on pd (rdma_create_qp) of the port space's type
// and moves it to INIT (UD: to RTS, with Q_Key UDPQKey).
func (id *ID) CreateQP(pd *verbs.PD, attr verbs.QPInitAttr) (*verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil || id.qp != nil {
		return nil, ErrState
	}
	attr.Type = id.qpType()
	qp, err := pd.CreateQP(attr)
	if err != nil {
		return nil, err
	}
	states := []verbs.QPState{verbs.QPSInit}
	if attr.Type == verbs.UD {
		states = append(states, verbs.QPSRTR, verbs.QPSRTS)
	}
	err = id.modify(qp, states...)
	if err != nil {
		qp.Destroy().Wait()
		return nil, err
	}
	id.qp, id.qpSRQ = qp, attr.SRQ != nil
	return qp, nil
}

// DestroyQP destroys the ID's QP (rdma_destroy_qp).
func (id *ID) DestroyQP() error {
	id.mu.Lock()
	qp := id.qp
	id.qp, id.qpSRQ = nil, false
	id.mu.Unlock()
	if qp == nil {
		return ErrState
	}
	return qp.Destroy().Wait()
}

func randPSN() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) & 0xFFFFFF
}

func (id *ID) serviceID(port uint16) uint64 { return mad.ServiceID(uint16(id.ps), port) }

// cmaHeader is the rdma_cm header of our REQ or SIDR_REQ.
func (id *ID) cmaHeader(p []byte) error {
	h := mad.CMAHeader{Version: mad.CMAVersion, SrcPort: id.src.Port(), Src: id.src.Addr(), Dst: id.dst.Addr()}
	return h.Encode(p)
}

// Connect connects to the resolved peer (rdma_connect): a REQ for RC, a SIDR_REQ
// for UD, with the rdma_cm header and p's private data. ESTABLISHED, REJECTED,
// UNREACHABLE or CONNECT_ERROR follows.
func (id *ID) Connect(p ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st != stRouteResolved {
		return ErrState
	}
	p.SRQ = id.srq(p)
	if id.att != nil {
		if id.ps != PSUDP {
			qpn, err := id.qpn(p)
			if err != nil {
				return err
			}
			p.QPN = qpn
		}
		if err := id.att.Connect(p); err != nil {
			return err
		}
		id.param, id.st = p, stConnect
		return nil
	}
	cmid, err := id.cmgr.NewID(id.onCM)
	if err != nil {
		return err
	}
	gids := id.dev.GIDs()
	src, dst := gids[id.sgid], verbs.GIDFromAddr(id.dst.Addr())
	if id.ps == PSUDP {
		if len(p.PrivateData) > MaxSIDRREQPrivate {
			cmid.Destroy()
			return ErrPrivate
		}
		var priv [mad.SIDRREQPrivateLen]byte
		if err := id.cmaHeader(priv[:]); err != nil {
			cmid.Destroy()
			return err
		}
		copy(priv[mad.CMAHeaderLen:], p.PrivateData)
		err = cmid.SendSIDRREQ(cm.SIDRParam{Src: src, Dst: dst, ServiceID: id.serviceID(id.dst.Port()),
			PKey: 0xffff, Private: priv[:], Timeout: cm.IBTime(id.cmgr.ResponseTimeout()),
			Retries: int(id.cmgr.MaxCMRetries())})
	} else {
		qpn, qerr := id.qpn(p)
		if qerr != nil {
			cmid.Destroy()
			return qerr
		}
		if len(p.PrivateData) > MaxREQPrivate {
			cmid.Destroy()
			return ErrPrivate
		}
		req := &mad.REQ{ServiceID: id.serviceID(id.dst.Port()), LocalQPN: qpn,
			ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
			RemoteCMResponseTimeout: id.cmgr.ResponseTimeout(), LocalCMResponseTimeout: id.cmgr.ResponseTimeout(),
			EndToEndFlowControl: p.FlowControl,
			StartingPSN:         id.psn, RetryCount: min(p.RetryCount, 7), PKey: 0xffff,
			PathMTU: uint8(id.dev.QueryPort().ActiveMTU), RNRRetryCount: min(p.RNRRetryCount, 7),
			MaxCMRetries: id.cmgr.MaxCMRetries(), SRQ: p.SRQ,
			Primary: mad.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: src, RemoteGID: dst,
				HopLimit: 64, TrafficClass: id.tos, LocalACKTimeout: id.cmgr.LocalACKTimeout()}}
		if err := id.cmaHeader(req.PrivateData[:]); err != nil {
			cmid.Destroy()
			return err
		}
		copy(req.PrivateData[mad.CMAHeaderLen:], p.PrivateData)
		err = cmid.SendREQ(req, cm.REQParam{Src: src, Dst: dst})
	}
	if err != nil {
		cmid.Destroy()
		return err
	}
	id.cmid, id.param, id.st = cmid, p, stConnect
	return nil
}

// Listen listens on the bound address and port (rdma_listen); backlog is
// accepted for librdmacm's signature (rdma_cm ignores it as well).
func (id *ID) Listen(backlog int) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st != stAddrBound {
		return ErrState
	}
	if id.att != nil {
		if err := id.att.Listen(backlog); err != nil {
			return err
		}
		id.st = stListen
		return nil
	}
	if err := id.port.listen(); err != nil {
		return err
	}
	if err := listen(id); err != nil {
		id.port.unlisten()
		return err
	}
	if id.dev == nil { // every device: the attached ones' daemons listen too
		for _, d := range verbs.Devices() {
			if c := attachedCM(d); c != nil {
				if err := id.listenAttached(d, c, backlog); err != nil {
					unlisten(id)
					id.port.unlisten()
					id.listening = false
					for _, s := range id.subs {
						destroyAttached(s.cm, s.id)
					}
					id.subs = nil
					return err
				}
			}
		}
	}
	id.st = stListen
	return nil
}

// Accept accepts a CONNECT_REQUEST (rdma_accept). RC: the ID's QP goes to RTR
// and RTS with the REQ's values and a REP goes back; ESTABLISHED follows the RTU.
// Without a QP on the ID, p.QPN names the consumer's QP, which it moves itself
// (InitQPAttr). UD: a SIDR_REP with the QP's number and Q_Key.
func (id *ID) Accept(p ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	p.SRQ = id.srq(p)
	if id.att != nil {
		return id.acceptAttached(p)
	}
	if id.st != stConnect || id.cmid == nil {
		return ErrState
	}
	if id.ps == PSUDP {
		if len(p.PrivateData) > mad.SIDRREPPrivateLen {
			return ErrPrivate
		}
		qpn := p.QPN
		if id.qp != nil && qpn == 0 {
			qpn = id.qp.QPN()
		}
		if err := id.cmid.SendSIDRREP(cm.SIDRSuccess, qpn, UDPQKey, p.PrivateData); err != nil {
			return err
		}
		id.st = stEstablished
		return nil
	}
	if id.req == nil { // an active ID: ib_cm has no REP to send in REP_RCVD
		return ErrState
	}
	if len(p.PrivateData) > mad.REPPrivateLen {
		return ErrPrivate
	}
	qpn, err := id.qpn(p)
	if err != nil {
		return err
	}
	id.link = reqLink(id.req, p.ResponderResources, p.InitiatorDepth)
	if id.qp != nil {
		if err := id.modify(id.qp, verbs.QPSRTR, verbs.QPSRTS); err != nil {
			id.cmid.SendREJ(cm.RejConsumerDefined, nil, nil)
			return err
		}
	}
	rep := &mad.REP{LocalQPN: qpn, StartingPSN: id.psn, ResponderResources: p.ResponderResources,
		InitiatorDepth: p.InitiatorDepth, EndToEndFlowControl: p.FlowControl, RNRRetryCount: min(p.RNRRetryCount, 7),
		SRQ: p.SRQ}
	copy(rep.PrivateData[:], p.PrivateData)
	return id.cmid.SendREP(rep)
}

// Establish completes an active connection whose ID has no QP, after
// CONNECT_RESPONSE (rdma_establish): the RTU goes to the peer, which gets
// ESTABLISHED. The consumer has moved its QP to RTS (InitQPAttr) first.
func (id *ID) Establish() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp != nil || id.ps == PSUDP || id.st != stConnect || id.req != nil || id.link == nil {
		return ErrState
	}
	var err error
	if id.att != nil {
		err = id.att.Establish()
	} else {
		err = id.cmid.SendRTU(nil)
	}
	if err != nil {
		return err
	}
	id.st = stEstablished
	return nil
}

// Notify tells the ID of an event of its QP (rdma_notify, ib_cm_notify).
// verbs.EventCommEst on a passive ID whose REP is answered by data before
// the RTU (lost, or late) establishes the connection: the REP is no longer
// retransmitted and ESTABLISHED follows on the ID's channel, the RTU's when
// it comes late is dropped (cm_establish). Established already it fails
// with ErrIsConn (EISCONN); in any other state, or without a connection
// (rdma_notify: no IB CM ID), with ErrState (EINVAL). Other events fail
// with ErrInvalid: IB_EVENT_PATH_MIG would move the connection to its
// alternate path (cm_migrate), which xrnic never has (RoCE has no LAP).
func (id *ID) Notify(ev verbs.EventType) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.att != nil {
		return id.att.Notify(ev)
	}
	if id.cmid == nil {
		return ErrState
	}
	if ev != verbs.EventCommEst {
		return fmt.Errorf("rdmacm: notify of %v: %w", ev, errs.ErrInvalid)
	}
	switch err := id.cmid.Established(); {
	case errors.Is(err, cm.ErrIsConn):
		return ErrIsConn
	case errors.Is(err, cm.ErrState):
		return ErrState
	default:
		return err
	}
}

// qpn is the QP number a REQ or REP announces: the ID's QP, or for an ID
// without one the consumer's p.QPN (rdma_conn_param's qp_num).
func (id *ID) qpn(p ConnParam) (uint32, error) {
	if id.qp != nil {
		return id.qp.QPN(), nil
	}
	if p.QPN == 0 {
		return 0, fmt.Errorf("rdmacm: no QP on the ID and no QPN in the parameters: %w", errs.ErrInvalid)
	}
	return p.QPN, nil
}

// srq is the SRQ bit a REQ or REP announces: whether the ID's QP has an SRQ,
// as CreateQP recorded it (no query under the ID's lock), or for an ID
// without one the consumer's p.SRQ (librdmacm's rdma_connect and
// rdma_accept).
func (id *ID) srq(p ConnParam) bool {
	if id.qp != nil {
		return id.qpSRQ
	}
	return p.SRQ
}

// reqLink is the connection's attributes from the peer's REQ, with the read
// depths this side grants (ib_cm's, from the REQ until the REP sets them).
func reqLink(req *mad.REQ, respRes, initDepth uint8) *connAttr {
	return &connAttr{remoteQPN: req.LocalQPN, sendPSN: req.StartingPSN, mtu: req.PathMTU,
		ackTimeout: req.Primary.LocalACKTimeout, retry: req.RetryCount, rnrRetry: req.RNRRetryCount,
		respRes: respRes, initDepth: initDepth}
}

// connAttr is what a connected QP's RTR and RTS take from both sides' messages
// (ib_cm's cm_init_qp_rtr_attr and cm_init_qp_rts_attr).
type connAttr struct {
	remoteQPN, sendPSN                                   uint32
	mtu, ackTimeout, retry, rnrRetry, respRes, initDepth uint8
}

// InitQPAttr returns the attributes and mask that move a QP to state for this
// ID's connection (rdma_init_qp_attr), for consumers that keep their QP off the
// ID: INIT at once, RTR and RTS once the peer's REQ or REP is known.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.AttrMask, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qpAttr(state)
}

func (id *ID) qpAttr(state verbs.QPState) (verbs.QPAttr, verbs.AttrMask, error) {
	if id.dev == nil {
		return verbs.QPAttr{}, 0, ErrState
	}
	if id.att != nil {
		return id.att.InitQPAttr(state)
	}
	a := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: state}}
	mask := verbs.AttrState
	l := id.link
	if l == nil && id.req != nil {
		// Passive, before Accept: the REQ's, its read depths the peer's
		// (cm_req_handler), as librdmacm's rdma_accept moves the QP to RTR
		// and RTS before it sends the REP, with its own depths over them.
		l = reqLink(id.req, id.req.InitiatorDepth, id.req.ResponderResources)
	}
	switch {
	case state == verbs.QPSInit:
		a.Attr.Port = 1
		mask |= verbs.AttrPKeyIndex | verbs.AttrPort
		if id.ps == PSUDP {
			a.Attr.QKey = UDPQKey
			mask |= verbs.AttrQKey
		} else {
			mask |= verbs.AttrAccessFlags // none until RTR, as rdma_cm's INIT
		}
	case id.ps == PSUDP && state == verbs.QPSRTR:
	case id.ps == PSUDP && state == verbs.QPSRTS:
		a.Attr.SQPSN = verbs.PSN(id.psn)
		mask |= verbs.AttrSQPSN
	case l == nil:
		return verbs.QPAttr{}, 0, ErrState
	case state == verbs.QPSRTR:
		port := id.dev.QueryPort()
		pathMTU := verbs.MTU(l.mtu)
		if pathMTU == 0 || pathMTU > port.ActiveMTU {
			pathMTU = port.ActiveMTU
		}
		access := uint32(verbs.AccessRemoteWrite)
		if l.respRes > 0 {
			access |= uint32(verbs.AccessRemoteRead | verbs.AccessRemoteAtomic)
		}
		a.Attr.PathMTU, a.Attr.DestQPN, a.Attr.RQPSN = pathMTU, l.remoteQPN, verbs.PSN(id.psn)
		a.Attr.MaxDestRdAtomic, a.Attr.AccessFlags, a.AV = l.respRes, access, id.av()
		mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
			verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer | verbs.AttrAccessFlags
	case state == verbs.QPSRTS:
		a.Attr.SQPSN, a.Attr.Timeout, a.Attr.MaxRdAtomic = verbs.PSN(l.sendPSN), l.ackTimeout, l.initDepth
		a.Attr.RetryCnt, a.Attr.RNRRetry = min(l.retry, 7), min(l.rnrRetry, 7)
		mask |= verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	default:
		return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: no attributes for state %v: %w", state, errs.ErrInvalid)
	}
	return a, mask, nil
}

// modify moves qp through states with the ID's attributes (librdmacm's
// ucma_modify_qp_rtr and _rts, done for the consumer).
func (id *ID) modify(qp *verbs.QP, states ...verbs.QPState) error {
	for _, st := range states {
		a, mask, err := id.qpAttr(st)
		if err == nil {
			err = qp.Modify(&a, mask).Wait()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// av is the address vector to the peer: its GID from our GID index, with the
// hop limit rdma_cm gives a RoCE path, and the type of service: SetTOS's on
// the active side, the REQ's path's on the passive one (cma_set_req_sa_data,
// cm_format_path_from_req).
func (id *ID) av() verbs.AV {
	tc := id.tos
	if id.req != nil {
		tc = id.req.Primary.TrafficClass
	}
	return verbs.AV{DGID: verbs.GIDFromAddr(id.dst.Addr()), SGIDIndex: id.sgid, HopLimit: 64, TrafficClass: tc}
}

// SetTOS sets the type of service of the ID's connections (rdma_set_option
// with RDMA_OPTION_ID_TOS): the traffic class of its REQ's path and of its
// QP's packets (the IPv4 TOS). Set it before Connect.
func (id *ID) SetTOS(tos uint8) {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.tos = tos
	if id.att != nil {
		_ = id.att.SetOption(OptionTOS, uint32(tos)) // rdma_set_service_type cannot fail
	}
}

// SetReuseAddr is rdma_set_reuseaddr (rdma_set_option with
// RDMA_OPTION_ID_REUSEADDR): IDs that both set it may bind one address and
// port, as long as none of them listens (cma_check_port). Setting it is
// allowed in any state, clearing it only before bind: the ID might share
// its port already.
func (id *ID) SetReuseAddr(reuse bool) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if !reuse && id.st != stIdle {
		return ErrState
	}
	if id.att != nil {
		if err := id.att.SetOption(OptionReuseAddr, b2u(reuse)); err != nil {
			return err
		}
	}
	id.reuse = reuse
	if id.port != nil {
		id.port.set(id.reuse, id.port.afonly)
	}
	return nil
}

// SetAFOnly is rdma_set_afonly (RDMA_OPTION_ID_AFONLY), before bind or while
// bound: an IPv6 ID that sets it shares a port with IPv4 IDs that bound it
// (IPv4 IDs are AF-only by default, IPv6 ones not, as bindv6only's default
// 0 makes them in Linux). xrnic has no dual-stack listener, whose IPv4
// requests an IPv6 one would take: a listener on :: takes IPv6 requests
// only, whatever the option; the option changes only which binds conflict
// (cma_check_port).
func (id *ID) SetAFOnly(afonly bool) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st != stIdle && id.st != stAddrBound {
		return ErrState
	}
	if id.att != nil {
		if err := id.att.SetOption(OptionAFOnly, b2u(afonly)); err != nil {
			return err
		}
	}
	id.afonly, id.afonlySet = afonly, true
	if id.port != nil {
		id.port.set(id.reuse, afonly)
	}
	return nil
}

// SetOption is rdma_set_option at level RDMA_OPTION_ID, for the daemon's
// CM_SET_OPTION: TOS, REUSEADDR and AFONLY (ucma_set_option_id); others are
// ErrUnsupported (ENOSYS there).
func (id *ID) SetOption(opt Option, value uint32) error {
	switch opt {
	case OptionTOS:
		id.SetTOS(uint8(value))
		return nil
	case OptionReuseAddr:
		return id.SetReuseAddr(value != 0)
	case OptionAFOnly:
		return id.SetAFOnly(value != 0)
	}
	return fmt.Errorf("rdmacm: option %d: %w", opt, errs.ErrUnsupported)
}

// setAttachedOptions gives a new daemon ID of this one (its own, or a
// listener's on one attached device) the options set so far.
func (id *ID) setAttachedOptions(a AttachedID) error {
	if id.tos != 0 {
		if err := a.SetOption(OptionTOS, uint32(id.tos)); err != nil {
			return err
		}
	}
	if id.reuse {
		if err := a.SetOption(OptionReuseAddr, 1); err != nil {
			return err
		}
	}
	if id.afonlySet {
		return a.SetOption(OptionAFOnly, b2u(id.afonly))
	}
	return nil
}

// releasePort frees the ID's port (cma_release_port, in rdma_destroy_id).
func (id *ID) releasePort() {
	if id.port != nil {
		id.port.release()
		id.port = nil
	}
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// Reject refuses a CONNECT_REQUEST (rdma_reject): a REJ (consumer defined) with
// the private data, or for UD a SIDR_REP with status REJECT.
func (id *ID) Reject(private []byte) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st != stConnect || (id.cmid == nil && id.att == nil) {
		return ErrState
	}
	var err error
	if id.att != nil {
		err = id.att.Reject(private)
	} else if id.ps == PSUDP {
		err = id.cmid.SendSIDRREP(cm.SIDRReject, 0, 0, private)
	} else {
		err = id.cmid.SendREJ(cm.RejConsumerDefined, nil, private)
	}
	if err == nil {
		id.st = stIdle
	}
	return err
}

// Disconnect ends a connection (rdma_disconnect): the QP goes to ERR (its posted
// work requests complete, flushed), then a DREQ, or the DREP to the peer's.
// DISCONNECTED follows (at once when answering). Before ESTABLISHED nothing is
// sent.
func (id *ID) Disconnect() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.ps == PSUDP || (id.cmid == nil && id.att == nil) {
		return ErrState
	}
	if id.qp != nil {
		id.qp.Modify(&verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSErr}}, verbs.AttrState).Wait()
	}
	if id.att != nil {
		if err := id.att.Disconnect(); err != nil {
			return err
		}
		id.st = stDisconnect
		return nil
	}
	switch id.cmid.State() {
	case cm.StateEstablished:
		if err := id.cmid.SendDREQ(nil); err != nil {
			return err
		}
	case cm.StateDREQRcvd:
		if err := id.cmid.SendDREP(nil); err != nil {
			return err
		}
	default:
		// rdma_disconnect: ib_send_cm_dreq and ib_send_cm_drep refuse any
		// other state, and nothing is sent (no REJ); the state stays.
		return nil
	}
	id.st = stDisconnect
	return nil
}

// Destroy destroys the ID (rdma_destroy_id): what the IB CM does for its state
// (REJ, DREQ or DREP), its listener goes, its events not yet taken are
// discarded and a listener's requests not yet taken refused. Its QP is the
// caller's to destroy (DestroyQP).
func (id *ID) Destroy() error {
	id.mu.Lock()
	if id.st == stDestroying {
		id.mu.Unlock()
		return ErrState
	}
	id.st = stDestroying
	cmid, listening, att, subs := id.cmid, id.listening, id.att, id.subs
	id.subs = nil
	id.mcs = nil // the kernel leaves them (cma_leave_mc_groups); the QP is the caller's
	id.releasePort()
	id.mu.Unlock()
	if listening {
		unlisten(id)
	}
	if cmid != nil {
		cmid.Destroy()
	}
	if att != nil {
		destroyAttached(id.attCM, att)
	}
	for _, s := range subs {
		destroyAttached(s.cm, s.id)
	}
	untrack(id)
	id.channel().removeID(id)
	return nil
}
