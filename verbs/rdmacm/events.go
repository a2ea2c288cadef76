package rdmacm

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/verbs"
)

// onCM turns an IB CM event of a connecting or connected ID into rdma_cm's
// (cma_ib_handler), on RoutineCMEvents; it only queues.
func (id *ID) onCM(ev cm.Event) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st == stDestroying {
		return
	}
	out := &Event{ID: id}
	switch ev.Type {
	case cm.EventREPReceived:
		rep := ev.Msg.(*mad.REP)
		out.Type = EventConnectResponse
		out.Param = repParam(rep)
		// Our REQ offered the port's MTU (0 below), and the REP has no MTU of its own.
		id.link = &connAttr{remoteQPN: rep.LocalQPN, sendPSN: rep.StartingPSN, ackTimeout: id.cmgr.LocalACKTimeout(),
			retry: id.param.RetryCount, rnrRetry: rep.RNRRetryCount, respRes: rep.InitiatorDepth, initDepth: rep.ResponderResources}
		out.complete = id.qp != nil
		// rdma_cm's delayed MRA (cma_ib_handler), in RDMA_CM_CONNECT only:
		// a retried REP draws MRA(24) while the consumer takes its time with
		// this one. A device removal has taken cmid away meanwhile.
		if id.st == stConnect && id.cmid != nil {
			_ = id.cmid.SendMRA(cm.MRAFlagDelay|mraServiceTimeout, nil)
		}
	case cm.EventRTUReceived, cm.EventUserEstablished: // cma_ib_handler: both ESTABLISHED
		out.Type = EventEstablished
		id.st = stEstablished
	case cm.EventREJReceived:
		rej := ev.Msg.(*mad.REJ)
		out.Type, out.Status = EventRejected, int(rej.Reason)
		out.Param.PrivateData = append([]byte(nil), rej.PrivateData[:]...)
		id.qpToErr()
		id.st = stIdle
	case cm.EventREQError, cm.EventREPError:
		out.Type, out.Status = EventUnreachable, -ETIMEDOUT
		id.qpToErr()
		id.st = stIdle
	case cm.EventDREQReceived, cm.EventDREPReceived, cm.EventDREQError:
		// cma_ib_handler reports a connection's end once, as the ID leaves
		// RDMA_CM_CONNECT: a crossing DREQ, or the DREP after it, is not a
		// second DISCONNECTED.
		if id.disconnected {
			return
		}
		id.disconnected = true
		out.Type = EventDisconnected
		switch ev.Type {
		case cm.EventDREQReceived:
			id.st = stDisconnect
		case cm.EventDREQError:
			out.Status = -ETIMEDOUT
		}
	case cm.EventTimeWaitExit:
		out.Type = EventTimeWaitExit
	case cm.EventSIDRREPReceived:
		rep := ev.Msg.(*mad.SIDRREP)
		// cma_sidr_rep_handler: the private data whatever the status.
		out.UD.PrivateData = append([]byte(nil), rep.PrivateData[:]...)
		switch {
		case rep.Status != cm.SIDRSuccess:
			out.Type, out.Status = EventUnreachable, int(rep.Status)
		case rep.QKey != UDPQKey: // cma_set_qkey refuses it: ADDR_ERROR
			out.Type, out.Status = EventAddrError, -EINVAL
		default:
			out.Type = EventEstablished
			out.UD.QPN, out.UD.QKey, out.UD.AV = rep.QPN, rep.QKey, id.av()
			id.st = stEstablished
		}
	case cm.EventSIDRREQError:
		out.Type, out.Status = EventUnreachable, -ETIMEDOUT
	default:
		return // MRA_RECEIVED: the CM extended its timer
	}
	id.ch.post(out)
}

// repParam is the connection parameters a REP gives the active side (ib_cm swaps
// the read depths: the peer's initiator depth is our responder resources).
func repParam(rep *mad.REP) ConnParam {
	return ConnParam{PrivateData: append([]byte(nil), rep.PrivateData[:]...),
		ResponderResources: rep.InitiatorDepth, InitiatorDepth: rep.ResponderResources,
		FlowControl: rep.EndToEndFlowControl, RNRRetryCount: rep.RNRRetryCount, SRQ: rep.SRQ, QPN: rep.LocalQPN}
}

func (id *ID) qpToErr() {
	if id.qp != nil {
		// Notify, not Wait: this runs on the CM's goroutine.
		id.qp.Modify(&verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSErr}}, verbs.AttrState).Notify(func(error) {})
	}
}

// completeConnect finishes an active connection in GetEvent's caller
// (librdmacm's ucma_process_conn_resp): RTR, RTS, RTU, and the event becomes
// ESTABLISHED. If the QP refuses, it goes to ERR, the peer gets a REJ (ib_cm
// sends it when such an ID is destroyed) and the event is CONNECT_ERROR with
// librdmacm's status, -1.
func (id *ID) completeConnect(ev *Event) {
	ev.complete = false
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st != stConnect || (id.cmid == nil && id.att == nil) || id.qp == nil {
		ev.Type, ev.Status = EventConnectError, -EINVAL
		return
	}
	err := id.modify(id.qp, verbs.QPSRTR, verbs.QPSRTS)
	if err == nil && id.att != nil {
		err = id.att.Establish()
	} else if err == nil {
		err = id.cmid.SendRTU(nil)
	}
	if err != nil {
		id.qp.Modify(&verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSErr}}, verbs.AttrState).Wait()
		if id.att != nil {
			id.att.Reject(nil)
		} else {
			id.cmid.SendREJ(cm.RejConsumerDefined, nil, nil)
		}
		id.st = stIdle
		ev.Type, ev.Status = EventConnectError, -1
		return
	}
	id.st = stEstablished
	ev.Type = EventEstablished
}

// The devices' CMs, and the listeners on them.

var reg = struct {
	sync.Mutex
	client    *verbs.Client
	ids       map[*verbs.Device]map[*ID]struct{}
	listeners map[lkey]*listenEntry
	ports     map[portKey]*bindList // ports.go
}{ids: map[*verbs.Device]map[*ID]struct{}{}, listeners: map[lkey]*listenEntry{}, ports: map[portKey]*bindList{}}

type lkey struct {
	c   *cm.CM
	sid uint64
}

// listenEntry is the IB CM listener of one service ID on one device, shared by
// the rdma_cm IDs listening on its port at different addresses.
type listenEntry struct {
	dev  *verbs.Device
	cmid *cm.ID
	ids  []*ID
}

// registerClient registers the package as a client of the devices, once, so
// that their removal reaches the IDs.
func registerClient() error {
	reg.Lock()
	if reg.client != nil {
		reg.Unlock()
		return nil
	}
	reg.client = &verbs.Client{Name: "rdmacm", Add: func(*verbs.Device) {}, Remove: deviceRemoved}
	reg.Unlock()
	return verbs.RegisterClient(reg.client)
}

func track(id *ID) {
	reg.Lock()
	defer reg.Unlock()
	m := reg.ids[id.dev]
	if m == nil {
		m = map[*ID]struct{}{}
		reg.ids[id.dev] = m
	}
	m[id] = struct{}{}
}

func untrack(id *ID) {
	reg.Lock()
	defer reg.Unlock()
	for _, m := range reg.ids {
		delete(m, id)
	}
}

// deviceRemoved is the client's Remove: every ID on the device hears
// DEVICE_REMOVAL and loses its CM state; the QPs are their owners' to destroy.
func deviceRemoved(d *verbs.Device) {
	if c := attachedCM(d); c != nil { // its daemon's IDs went with its session
		attachedDevs.Lock()
		delete(attachedDevs.m, c)
		attachedDevs.Unlock()
	}
	reg.Lock()
	ids := reg.ids[d]
	delete(reg.ids, d)
	for k, l := range reg.listeners {
		if l.dev == d {
			delete(reg.listeners, k)
		}
	}
	reg.Unlock()
	for id := range ids {
		id.mu.Lock()
		cmid := id.cmid
		id.cmid, id.listening, id.removed = nil, false, true
		id.ch.post(&Event{Type: EventDeviceRemoval, ID: id}) // under the lock: a Migrate moves it
		id.mu.Unlock()
		if cmid != nil {
			cmid.Destroy()
		}
	}
}

// listen registers a bound ID: on its device, or on every in-process device
// for an unspecified address (Listen adds the attached ones).
func listen(id *ID) error {
	devs := []*verbs.Device{id.dev}
	if id.dev == nil {
		devs = slices.DeleteFunc(verbs.Devices(), func(d *verbs.Device) bool { return attachedCM(d) != nil })
	}
	sid := id.serviceID(id.src.Port())
	// Whether the port is ours to listen on, the bind list said (BindAddr,
	// then the ID's portOwner.listen): listeners of addresses that do not
	// overlap share the device's IB CM listener.
	reg.Lock()
	defer reg.Unlock()
	for _, d := range devs {
		c, err := d.CM(cm.Config{})
		if err != nil {
			return err
		}
		k := lkey{c, sid}
		if l := reg.listeners[k]; l != nil {
			l.ids = append(l.ids, id)
			continue
		}
		cmid, err := c.NewID(func(ev cm.Event) { onListen(k, d, ev) })
		if err != nil {
			return err
		}
		if err := cmid.Listen(sid); err != nil {
			cmid.Destroy()
			return err
		}
		reg.listeners[k] = &listenEntry{dev: d, cmid: cmid, ids: []*ID{id}}
	}
	id.listening = true
	return nil
}

func unlisten(id *ID) {
	reg.Lock()
	var gone []*cm.ID
	for k, l := range reg.listeners {
		for i, o := range l.ids {
			if o == id {
				l.ids = append(l.ids[:i], l.ids[i+1:]...)
				break
			}
		}
		if len(l.ids) == 0 {
			gone = append(gone, l.cmid)
			delete(reg.listeners, k)
		}
	}
	reg.Unlock()
	for _, c := range gone {
		c.Destroy()
	}
}

// onListen takes a REQ or SIDR_REQ for a service ID we listen on and checks
// what rdma_cm checks (cma_ib_req_handler): its rdma_cm header, its QP type
// against the port space, and a listener for its destination address. A REQ
// that fails is refused as ib_cm refuses one whose handler fails: REJ,
// consumer defined; a SIDR_REQ gets SIDR_REP REJECT.
func onListen(k lkey, d *verbs.Device, ev cm.Event) {
	var private []byte
	sps, _, ok := mad.SplitServiceID(ev.ID.ServiceID())
	ps := PortSpace(sps)
	switch m := ev.Msg.(type) {
	case *mad.REQ:
		private = m.PrivateData[:]
		// RC listeners (the TCP and IB port spaces) take RC REQs only
		// (cma_check_req_qp_type).
		if m.TransportServiceType != 0 || (ps != PSTCP && ps != PSIB) {
			ev.ID.Destroy()
			return
		}
	case *mad.SIDRREQ:
		private = m.PrivateData[:]
		ok = ok && ps == PSUDP
	default:
		return
	}
	h, err := mad.ParseCMAHeader(private)
	if !ok || err != nil || h.Version != mad.CMAVersion ||
		verbs.GIDFromAddr(h.Dst) != ev.Dst || verbs.GIDFromAddr(h.Src) != ev.Src {
		ev.ID.Destroy()
		return
	}
	reg.Lock()
	var l *ID
	if e := reg.listeners[k]; e != nil {
		for _, o := range e.ids {
			if o.src.Addr() == h.Dst || (o.src.Addr().IsUnspecified() && o.src.Addr().Is4() == h.Dst.Is4()) {
				l = o
				break
			}
		}
	}
	reg.Unlock()
	if l == nil || l.ps != ps {
		ev.ID.Destroy()
		return
	}
	sgid := uint8(0)
	for i, g := range d.GIDs() {
		if g == ev.Dst {
			sgid = uint8(i)
		}
	}
	nid := &ID{ps: ps, ctx: l.ctx, n: idSeq.Add(1) - 1, psn: randPSN(), st: stConnect, dev: d, cmgr: k.c, cmid: ev.ID, sgid: sgid,
		src: netip.AddrPortFrom(h.Dst, k.port()), dst: netip.AddrPortFrom(h.Src, h.SrcPort)}
	out := &Event{Type: EventConnectRequest, ID: nid, Listen: l}
	switch m := ev.Msg.(type) {
	case *mad.REQ:
		cp := *m
		nid.req = &cp
		// ib_cm's REQ event swaps the read depths to the receiver's view.
		out.Param = ConnParam{PrivateData: append([]byte(nil), m.PrivateData[mad.CMAHeaderLen:]...),
			ResponderResources: m.InitiatorDepth, InitiatorDepth: m.ResponderResources,
			FlowControl: m.EndToEndFlowControl, RetryCount: m.RetryCount, RNRRetryCount: m.RNRRetryCount,
			SRQ: m.SRQ, QPN: m.LocalQPN}
	case *mad.SIDRREQ:
		out.UD = UDParam{PrivateData: append([]byte(nil), m.PrivateData[mad.CMAHeaderLen:]...)}
	}
	_, rc := ev.Msg.(*mad.REQ)
	if !l.queueRequest(out, func() {
		track(nid)
		ev.ID.SetHandler(nid.onCM)
		if rc {
			// rdma_cm's delayed MRA (cma_ib_req_handler): a retried REQ
			// draws MRA(24) while the consumer takes its time to accept.
			_ = ev.ID.SendMRA(cm.MRAFlagDelay|mraServiceTimeout, nil)
		}
	}) {
		ev.ID.Destroy()
	}
}

// mraServiceTimeout is rdma_cm's (CMA_CM_MRA_SETTING): 2^24 x 4.096 us, about
// 69 s more for a peer whose request the consumer has not answered yet.
const mraServiceTimeout = 24

// queueRequest queues a connection request on the listener's channel, which
// becomes the new ID's; ready runs just before. Under the listener's lock, so
// that a Migrate of the listener takes the request along and a Destroy
// refuses it: the kernel's request is the listener's event until taken
// (ucma_move_events, ucma_cleanup_ctx_events). False when the listener is
// being destroyed.
func (l *ID) queueRequest(out *Event, ready func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st == stDestroying || l.ch.addID() != nil {
		return false
	}
	out.ID.ch = l.ch
	ready()
	l.ch.post(out)
	return true
}

func (k lkey) port() uint16 { return uint16(k.sid) }
