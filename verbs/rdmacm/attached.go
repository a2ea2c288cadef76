package rdmacm

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/verbs"
)

// On an attached device (verbs.Options.Attach) the CM is the daemon's: its
// rdma_cm runs the process's IDs, as the kernel's rdma_ucm runs librdmacm's,
// and an ID here forwards to its ID there. What librdmacm does in the process
// is done here as for an in-process device: the ID's QP goes through INIT,
// RTR and RTS with the daemon's attributes (rdma_init_qp_attr), a
// CONNECT_RESPONSE is completed in GetEvent (RTR, RTS, rdma_establish), and
// the QP goes to ERR on REJECTED, UNREACHABLE and Disconnect.

// AttachedCM is an attached device's CM. The backend of an attached device
// implements it (verbs/remote's does): Device.Backend.
type AttachedCM interface {
	CreateCMID(ps PortSpace) (AttachedID, error)
	// SetCMEventHandler has h called with the device's CM events, one at a
	// time, in order, on a goroutine of the backend's. rdmacm sets it once.
	SetCMEventHandler(h func(AttachedEvent))
}

// AttachedID is an ID of the daemon's. ConnParam.QPN names the process's QP
// (the daemon refuses another process's). Comparable: events name IDs by it.
type AttachedID interface {
	// BindAddr returns the address bound: port 0's port is the daemon's
	// choice.
	BindAddr(a netip.AddrPort) (netip.AddrPort, error)
	SetOption(opt Option, value uint32) error
	ResolveAddr(src netip.Addr, dst netip.AddrPort) error
	ResolveRoute() error
	Listen(backlog int) error
	Connect(p ConnParam) error
	Accept(p ConnParam) error
	Reject(private []byte) error
	Disconnect() error
	Establish() error
	Notify(ev verbs.EventType) error
	InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.AttrMask, error)
	// JoinMulticast joins group addr; its events name the join by uid.
	JoinMulticast(addr netip.Addr, uid uint32) error
	// LeaveMulticast leaves the join of group addr named uid.
	LeaveMulticast(addr netip.Addr, uid uint32) error
	Destroy() error
}

// AttachedEvent is an attached ID's event. A plain value.
type AttachedEvent struct {
	Type       EventType
	ID, Listen AttachedID // CONNECT_REQUEST: ID is the new one
	Status     int
	Src, Dst   netip.AddrPort
	Param      ConnParam
	UD         UDParam
	MC         uint32 // MULTICAST_JOIN, MULTICAST_ERROR: the join's uid
}

// attachedDev routes an attached device's events to its IDs.
type attachedDev struct {
	c   AttachedCM
	mu  sync.Mutex
	ids map[AttachedID]*ID
}

var attachedDevs = struct {
	sync.Mutex
	m map[AttachedCM]*attachedDev
}{m: map[AttachedCM]*attachedDev{}}

// attachedCM is d's daemon CM, nil for an in-process device.
func attachedCM(d *verbs.Device) AttachedCM {
	c, _ := d.Backend().(AttachedCM)
	return c
}

// routes returns the router of c's events, setting c's handler the first time.
func routes(c AttachedCM) *attachedDev {
	attachedDevs.Lock()
	defer attachedDevs.Unlock()
	r := attachedDevs.m[c]
	if r == nil {
		r = &attachedDev{c: c, ids: map[AttachedID]*ID{}}
		attachedDevs.m[c] = r
		c.SetCMEventHandler(r.event)
	}
	return r
}

// newAttached makes the daemon's ID for id (or for a listener's device, sub).
func newAttached(c AttachedCM, id *ID) (AttachedID, error) {
	a, err := c.CreateCMID(id.ps)
	if err != nil {
		return nil, err
	}
	r := routes(c)
	r.mu.Lock()
	r.ids[a] = id
	r.mu.Unlock()
	return a, nil
}

// destroyAttached destroys the daemon's ID; its events stop reaching id.
func destroyAttached(c AttachedCM, a AttachedID) {
	r := routes(c)
	r.mu.Lock()
	delete(r.ids, a)
	r.mu.Unlock()
	a.Destroy()
}

// event turns the daemon's event into the ID's (on the backend's goroutine:
// it only queues).
func (r *attachedDev) event(ev AttachedEvent) {
	r.mu.Lock()
	id := r.ids[ev.ID]
	l := r.ids[ev.Listen]
	r.mu.Unlock()
	if ev.Type == EventConnectRequest {
		if l == nil {
			ev.ID.Destroy() // its listener is gone
			return
		}
		id = &ID{ps: l.ps, ctx: l.ctx, n: idSeq.Add(1) - 1, st: stConnect, att: ev.ID,
			attCM: r.c, src: ev.Src, dst: ev.Dst}
		id.dev = l.dev
		if id.dev == nil { // a listener on every device: this one's
			id.dev = l.subDev(ev.Listen)
		}
		out := &Event{Type: ev.Type, ID: id, Listen: l, Param: ev.Param, UD: ev.UD}
		if id.dev == nil || !l.queueRequest(out, func() {
			r.mu.Lock()
			r.ids[ev.ID] = id
			r.mu.Unlock()
			track(id)
		}) {
			ev.ID.Destroy()
		}
		return
	}
	if id == nil {
		return // destroyed meanwhile
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.st == stDestroying {
		return
	}
	if ev.Src.IsValid() {
		id.src = ev.Src
	}
	if ev.Dst.IsValid() {
		id.dst = ev.Dst
	}
	out := &Event{Type: ev.Type, ID: id, Status: ev.Status, Param: ev.Param, UD: ev.UD}
	switch ev.Type {
	case EventMulticastJoin, EventMulticastError:
		if out = id.mcastEvent(ev); out == nil {
			return // left meanwhile
		}
	case EventAddrResolved:
		id.st = stAddrResolved
	case EventRouteResolved:
		id.st = stRouteResolved
	case EventConnectResponse:
		id.link = &connAttr{} // the daemon keeps the attributes; Establish may follow
		out.complete = id.qp != nil
	case EventEstablished:
		id.st = stEstablished
	case EventRejected, EventUnreachable, EventConnectError:
		id.qpToErr()
		id.st = stIdle
	case EventDisconnected:
		id.st = stDisconnect
	}
	id.ch.post(out)
}

// subDev is the device of a listener's daemon ID on it.
func (id *ID) subDev(a AttachedID) *verbs.Device {
	id.mu.Lock()
	defer id.mu.Unlock()
	for _, s := range id.subs {
		if s.id == a {
			return s.dev
		}
	}
	return nil
}

// attachedSub is the daemon ID of a listener on every device, on one
// attached device.
type attachedSub struct {
	dev *verbs.Device
	cm  AttachedCM
	id  AttachedID
}

// listenAttached listens on an attached device for id, bound to every device.
func (id *ID) listenAttached(d *verbs.Device, c AttachedCM, backlog int) error {
	a, err := newAttached(c, id)
	if err != nil {
		return err
	}
	err = id.setAttachedOptions(a)
	if err == nil {
		_, err = a.BindAddr(id.src)
	}
	if err == nil {
		err = a.Listen(backlog)
	}
	if err != nil {
		destroyAttached(c, a)
		return err
	}
	id.subs = append(id.subs, attachedSub{d, c, a})
	return nil
}

// acceptAttached is Accept on an attached device: an RC ID's QP goes to RTR
// and RTS before the daemon sends the REP (librdmacm's rdma_accept).
func (id *ID) acceptAttached(p ConnParam) error {
	if id.st != stConnect {
		return ErrState
	}
	if id.qp != nil && p.QPN == 0 {
		p.QPN = id.qp.QPN()
	}
	if id.ps != PSUDP {
		if p.QPN == 0 {
			return fmt.Errorf("rdmacm: no QP on the ID and no QPN in the parameters: %w", errs.ErrInvalid)
		}
		if id.qp != nil {
			if err := id.modifyAccepting(p); err != nil {
				id.att.Reject(nil)
				return err
			}
		}
	}
	if err := id.att.Accept(p); err != nil {
		return err
	}
	if id.ps == PSUDP {
		id.st = stEstablished
	}
	return nil
}

// modifyAccepting moves the ID's QP to RTR and RTS with the daemon's
// attributes and the consumer's read depths over them (librdmacm's
// ucma_modify_qp_rtr and _rts in rdma_accept).
func (id *ID) modifyAccepting(p ConnParam) error {
	for _, st := range []verbs.QPState{verbs.QPSRTR, verbs.QPSRTS} {
		a, mask, err := id.att.InitQPAttr(st)
		if err != nil {
			return err
		}
		if st == verbs.QPSRTR {
			a.Attr.MaxDestRdAtomic = p.ResponderResources
		} else {
			a.Attr.MaxRdAtomic = p.InitiatorDepth
		}
		if err := id.qp.Modify(&a, mask).Wait(); err != nil {
			return err
		}
	}
	return nil
}
