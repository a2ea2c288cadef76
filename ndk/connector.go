package ndk

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// ErrNoPorts is STATUS_TOO_MANY_ADDRESSES: no ephemeral port is free.
var ErrNoPorts = fmt.Errorf("ndk: no free port in %d-%d: %w", ephemeralLo, ephemeralHi, verbs.ErrLimit)

// checkLocal refuses an address the adapter's device does not have
// (STATUS_INVALID_ADDRESS).
func (a *Adapter) checkLocal(ip netip.Addr) error {
	if ip.IsUnspecified() {
		return nil
	}
	for _, g := range a.dev.GIDs() {
		if g.Addr() == ip.Unmap() {
			return nil
		}
	}
	return fmt.Errorf("ndk: %v is not an address of %s: %w", ip, a.dev.Name(), verbs.ErrInvalid)
}

// The connector states.
type cstate int

const (
	cIdle          cstate = iota
	cConnecting           // Connect pending
	cConnected            // Connect completed; CompleteConnect next
	cIncoming             // handed to a listener's connect event
	cAccepting            // Accept pending
	cEstablished          // CompleteConnect or Accept done
	cDisconnecting        // Disconnect pending
	cPeerGone             // the peer disconnected (the disconnect event ran)
	cDone                 // failed, rejected or disconnected
)

// Connector is NDK_CONNECTOR: one connection of a QP, made with Connect,
// ConnectWithSharedEndpoint or, on the passive side, handed to a listener's
// connect event callback. Its methods are safe from any goroutine; a call and
// the CM events of the connector are serialised on its mutex, and completions
// are queued only after the call's work is done, so a callback that closes the
// connector never meets a call still at work on it (LT5-LT7).
type Connector struct {
	n            node
	a            *Adapter
	onDisconnect func()

	mu      sync.Mutex
	st      cstate
	id      *rdmacm.ID
	ep      *endpoint // held by the connector: its own, or a +1 on a listener's or shared endpoint's
	qp      *QP
	req     func(error) // the pending request's completion
	peer    rdmacm.ConnParam
	private []byte
	ird     uint8
	ord     uint8
	lst     *Listener // an incoming connector's listener
}

// testHookConnectReturn runs just before Connect returns ErrPending (LT7's test).
var testHookConnectReturn func()

// CreateConnector is NdkCreateConnector; onDisconnect is the disconnect event
// callback (the peer ended the connection). Synchronous.
func (a *Adapter) CreateConnector(onDisconnect func(), done func(*Connector, error)) (*Connector, error) {
	c := &Connector{a: a, onDisconnect: onDisconnect}
	if err := c.n.init(a, &a.n); err != nil {
		return nil, err
	}
	c.setLifetime()
	return c, nil
}

func (c *Connector) setLifetime() {
	c.n.cancel = c.cancel
	c.n.release = func(fin func(error)) {
		c.mu.Lock()
		id, ep := c.id, c.ep
		c.id, c.ep = nil, nil
		c.mu.Unlock()
		if id != nil {
			c.a.untrack(id) // REJ, DREQ or DREP as the CM's state needs
		}
		if ep != nil {
			ep.unref()
		}
		fin(nil)
	}
}

// cancel runs at close (LT15): a pending Connect or Accept completes with
// ErrCanceled; a connection is ended and its QP flushed.
func (c *Connector) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.st {
	case cEstablished, cConnected, cPeerGone:
		if c.id != nil {
			c.id.Disconnect()
		}
		c.qp.toErr()
	}
	c.st = cDone
	c.completeReq(ErrCanceled)
}

// completeReq queues the pending request's completion. Called with c.mu held;
// nothing of c is touched after it by the caller's call (LT6).
func (c *Connector) completeReq(err error) {
	if req := c.req; req != nil {
		c.req = nil
		c.n.complete(req, err)
	}
}

// Connect is NdkConnect: from src (port 0: an ephemeral port; the connector's
// own endpoint, EP2, EP8) to dst, for qp, with the read limits and private
// data the REQ carries. It returns ErrPending, and done reports the peer's
// answer: nil once the peer accepted (then GetConnectionData and
// CompleteConnect), ErrRefused, ErrTimeout or ErrCanceled. Errors returned
// at once (ErrInUse while src is held, EP5) leave the connector unconnected.
func (c *Connector) Connect(qp *QP, src, dst netip.AddrPort, ird, ord int, private []byte, done func(error)) error {
	if err := c.a.checkLocal(src.Addr()); err != nil {
		return err
	}
	return c.connect(qp, nil, src, dst, ird, ord, private, done)
}

// ConnectWithSharedEndpoint is NdkConnectWithSharedEndpoint: as Connect, from
// the shared endpoint's address and port (EP3), which stays taken until this
// connector is closed too (EP9).
func (c *Connector) ConnectWithSharedEndpoint(qp *QP, s *SharedEndpoint, dst netip.AddrPort, ird, ord int, private []byte, done func(error)) error {
	if s == nil {
		return ErrInvalid
	}
	return c.connect(qp, s, s.ep.ap, dst, ird, ord, private, done)
}

func (c *Connector) connect(qp *QP, s *SharedEndpoint, src, dst netip.AddrPort, ird, ord int, private []byte,
	done func(error)) error {
	if qp == nil || done == nil || len(private) > rdmacm.MaxREQPrivate || ird < 0 || ird > 255 || ord < 0 || ord > 255 {
		return ErrInvalid
	}
	h, err := c.n.holdRequest()
	if err != nil {
		return err
	}
	defer h.release() // after the unlock below
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != cIdle {
		return ErrState
	}
	var ep *endpoint
	if s != nil {
		if err := c.n.attach(&s.n); err != nil {
			return err
		}
		ep = s.ep
		ep.ref()
	} else {
		var err error
		if ep, err = reserve(src); err != nil {
			return err
		}
	}
	id, err := c.a.ch.CreateID(c, rdmacm.PSTCP)
	if err == nil {
		c.a.track(id, c)
		if s != nil {
			// A shared endpoint's connectors bind one address and port
			// (EP3), which the rdma_cm allows IDs that all set reuseaddr
			// and do not listen (cma_check_port); the endpoint's own
			// count keeps others off it (EP9).
			err = id.SetReuseAddr(true)
		}
		if err == nil {
			err = id.BindAddr(ep.ap)
		}
		if err != nil {
			c.a.untrack(id)
		}
	}
	if err != nil {
		ep.unref()
		return err
	}
	c.id, c.ep, c.qp, c.req = id, ep, qp, done
	c.private, c.ird, c.ord = append([]byte(nil), private...), uint8(ird), uint8(ord)
	c.st = cConnecting
	if err := id.ResolveAddr(ep.ap.Addr(), dst); err != nil {
		// Nothing went out: undo, and fail at once.
		c.a.untrack(id)
		ep.unref()
		c.id, c.ep, c.qp, c.req, c.st = nil, nil, nil, nil, cIdle
		return err
	}
	h.keep()
	if testHookConnectReturn != nil {
		c.mu.Unlock()
		testHookConnectReturn()
		c.mu.Lock()
	}
	return ErrPending
}

// cmEvent advances the connector on a CM event of its ID (on the adapter's
// CM goroutine).
func (c *Connector) cmEvent(ev *rdmacm.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.id != ev.ID {
		return // closed meanwhile
	}
	var err error
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		err = c.id.ResolveRoute()
	case rdmacm.EventRouteResolved:
		err = c.id.Connect(rdmacm.ConnParam{QPN: c.qp.QPN(), PrivateData: c.private,
			ResponderResources: c.ird, InitiatorDepth: c.ord, RetryCount: 7, RNRRetryCount: 7})
	case rdmacm.EventConnectResponse:
		if c.st == cConnecting {
			c.peer = ev.Param
			c.st = cConnected
			c.completeReq(nil)
		}
	case rdmacm.EventEstablished:
		if c.st == cAccepting {
			c.st = cEstablished
			c.completeReq(nil)
		}
	case rdmacm.EventRejected:
		err = fmt.Errorf("%w: REJ reason %d", ErrRefused, ev.Status)
	case rdmacm.EventUnreachable:
		err = ErrTimeout
	case rdmacm.EventConnectError, rdmacm.EventAddrError, rdmacm.EventRouteError:
		err = fmt.Errorf("ndk: connection failed (%v, status %d): %w", ev.Type, ev.Status, verbs.ErrUnreachable)
	case rdmacm.EventDisconnected:
		switch c.st {
		case cDisconnecting:
			c.st = cDone
			c.completeReq(nil)
		case cEstablished, cConnected:
			// The peer's DREQ: flush the QP (every posted receive completes,
			// O2-6) and tell the consumer, who answers with Disconnect.
			c.qp.toErr()
			c.st = cPeerGone
			if c.onDisconnect != nil {
				c.n.event(c.onDisconnect)
			}
		case cAccepting:
			err = ErrCanceled
		}
	case rdmacm.EventDeviceRemoval:
		err = ErrCanceled
	}
	if err != nil && c.req != nil {
		c.st = cDone
		c.completeReq(err)
	}
}

// CompleteConnect is NdkCompleteConnect: after Connect completed, the QP goes
// to RTR and RTS with the peer's values and the RTU tells the peer.
// Synchronous.
func (c *Connector) CompleteConnect(done func(error)) error {
	if err := c.n.hold(); err != nil {
		return err
	}
	defer c.n.unhold()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != cConnected {
		return ErrState
	}
	if err := c.moveQP(); err != nil {
		return err
	}
	if err := c.id.Establish(); err != nil {
		return err
	}
	c.st = cEstablished
	return nil
}

func (c *Connector) moveQP() error {
	for _, st := range []verbs.QPState{verbs.QPSRTR, verbs.QPSRTS} {
		a, mask, err := c.id.InitQPAttr(st)
		if err == nil {
			err = c.qp.qp.Modify(&a, mask).Wait()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Accept is NdkAccept of an incoming connection: qp is moved to RTR and RTS
// and the REP goes out. It returns ErrPending; done runs when the peer's RTU
// arrives (nil), or with the error that ended the attempt. The connector
// shares its listener's endpoint (EP1, EP4). Once the listener's close is asked
// for, Accept refuses the request: ErrListenerClosing (EP7).
func (c *Connector) Accept(qp *QP, ird, ord int, private []byte, done func(error)) error {
	if qp == nil || done == nil || len(private) > maxCalleeData || ird < 0 || ird > 255 || ord < 0 || ord > 255 {
		return ErrInvalid
	}
	h, err := c.n.holdRequest()
	if err != nil {
		return err
	}
	defer h.release() // after the unlock below
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != cIncoming {
		return ErrState
	}
	if !c.lst.n.isOpen() {
		// The request came before the listener's close was asked for, but no
		// connection is accepted while that close is pending (EP7).
		c.id.Reject(nil)
		c.st = cDone
		return ErrListenerClosing
	}
	if err := c.id.Accept(rdmacm.ConnParam{QPN: qp.QPN(), PrivateData: private, ResponderResources: uint8(ird),
		InitiatorDepth: uint8(ord), RNRRetryCount: 7}); err != nil {
		return err
	}
	c.qp = qp
	if err := c.moveQP(); err != nil {
		c.id.Reject(nil)
		c.st = cDone
		return err
	}
	c.ep = c.lst.ep
	c.ep.ref()
	c.st, c.req = cAccepting, done
	h.keep()
	return ErrPending
}

// SetDisconnectEvent sets the disconnect event callback of a connector a
// listener handed over (CreateConnector takes it for the others).
func (c *Connector) SetDisconnectEvent(f func()) {
	c.mu.Lock()
	c.onDisconnect = f
	c.mu.Unlock()
}

// Reject is NdkReject of an incoming connection, with private data.
// Synchronous; the consumer closes the connector after.
func (c *Connector) Reject(private []byte) error {
	if len(private) > maxCalleeData {
		return ErrInvalid
	}
	if !c.n.isOpen() {
		return ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != cIncoming {
		return ErrState
	}
	c.st = cDone
	return c.id.Reject(private)
}

// GetConnectionData is NdkGetConnectionData: the peer's read limits and
// private data (of its REQ on the passive side, its REP on the active side).
func (c *Connector) GetConnectionData() (inboundReadLimit, outboundReadLimit int, private []byte, err error) {
	if !c.n.isOpen() {
		return 0, 0, nil, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st == cIdle || c.st == cConnecting {
		return 0, 0, nil, ErrState
	}
	p := c.peer
	return int(p.ResponderResources), int(p.InitiatorDepth), append([]byte(nil), p.PrivateData...), nil
}

// GetLocalAddress and GetPeerAddress are NdkGetLocalAddress and
// NdkGetPeerAddress.
func (c *Connector) GetLocalAddress() (netip.AddrPort, error) {
	if !c.n.isOpen() {
		return netip.AddrPort{}, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.id == nil {
		return netip.AddrPort{}, ErrState
	}
	return c.id.LocalAddr(), nil
}

func (c *Connector) GetPeerAddress() (netip.AddrPort, error) {
	if !c.n.isOpen() {
		return netip.AddrPort{}, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.id == nil {
		return netip.AddrPort{}, ErrState
	}
	return c.id.PeerAddr(), nil
}

// Disconnect is NdkDisconnect: the QP is flushed (its pending requests
// complete, cancelled) and a DREQ goes out; done runs once the peer answered
// or the DREQ timed out. After the peer's disconnect event it answers (DREP)
// and completes at once: nil, no callback; so does it after Connect completed
// and before CompleteConnect, refusing the peer's REP (a REJ).
func (c *Connector) Disconnect(done func(error)) error {
	if done == nil {
		done = func(error) {} // the request is pending all the same
	}
	h, err := c.n.holdRequest()
	if err != nil {
		return err
	}
	defer h.release() // after the unlock below
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.st {
	case cConnected:
		// The REP came, the RTU has not gone (no CompleteConnect): not yet a
		// connection to end with a DREQ. The REP is refused (a REJ, as
		// librdmacm's refusal of a response it cannot complete), and the
		// peer's Accept fails; done at once.
		c.qp.toErr()
		if err := c.id.Reject(nil); err != nil {
			return err
		}
		c.st = cDone
		return nil
	case cEstablished:
		c.qp.toErr()
		if err := c.id.Disconnect(); err != nil {
			return err
		}
		c.st, c.req = cDisconnecting, done
		h.keep()
		return ErrPending
	case cPeerGone:
		c.id.Disconnect()
		c.st = cDone
		return nil
	}
	return ErrState
}

// Close is NdkCloseObject: a pending Connect or Accept completes with
// ErrCanceled, a connection ends, and the endpoint reference goes (EP4, EP8,
// EP9).
func (c *Connector) Close(done func(error)) error { return c.n.close(done) }

// Listener is NDK_LISTENER: connection requests to its address and port come
// to its connect event callback as new connectors, which are its successors:
// its close stays pending until they are closed (EP6), but it refuses new
// requests from the moment close is called (EP7).
type Listener struct {
	n         node
	a         *Adapter
	onConnect func(*Connector)

	mu      sync.Mutex
	id      *rdmacm.ID
	ep      *endpoint
	paused  bool
	backlog []*rdmacm.Event
}

// maxBacklog bounds the requests a paused listener keeps; more are rejected.
const maxBacklog = 64

// CreateListener is NdkCreateListener with its connect event callback.
// Synchronous.
func (a *Adapter) CreateListener(onConnect func(*Connector), done func(*Listener, error)) (*Listener, error) {
	if onConnect == nil {
		return nil, ErrInvalid
	}
	l := &Listener{a: a, onConnect: onConnect}
	if err := l.n.init(a, &a.n); err != nil {
		return nil, err
	}
	l.n.cancel = l.stopListening
	l.n.release = func(fin func(error)) {
		l.mu.Lock()
		ep := l.ep
		l.ep = nil
		l.mu.Unlock()
		if ep != nil {
			ep.unref()
		}
		fin(nil)
	}
	return l, nil
}

// Listen is NdkListen on ap (the listener's implicit endpoint, EP4): ErrInUse
// while ap is held by anything (EP5). Synchronous.
func (l *Listener) Listen(ap netip.AddrPort, done func(error)) error {
	if ap.Port() == 0 {
		return ErrInvalid
	}
	if err := l.a.checkLocal(ap.Addr()); err != nil {
		return err
	}
	if err := l.n.hold(); err != nil {
		return err
	}
	defer l.n.unhold()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ep != nil {
		return ErrState
	}
	ep, err := reserve(ap)
	if err != nil {
		return err
	}
	id, err := l.a.ch.CreateID(l, rdmacm.PSTCP)
	if err == nil {
		l.a.track(id, l)
		if err = id.BindAddr(ep.ap); err == nil {
			err = id.Listen(0)
		}
		if err != nil {
			l.a.untrack(id)
		}
	}
	if err != nil {
		ep.unref()
		return err
	}
	l.id, l.ep = id, ep
	return nil
}

// ControlConnectEvents is NdkControlConnectEvents: while paused, requests wait
// (up to maxBacklog; more are rejected) and are handed over on resume.
func (l *Listener) ControlConnectEvents(pause bool) {
	l.mu.Lock()
	l.paused = pause
	var evs []*rdmacm.Event
	if !pause {
		evs, l.backlog = l.backlog, nil
	}
	l.mu.Unlock()
	for _, ev := range evs {
		l.request(ev)
	}
}

// stopListening runs when close is called: no request is taken from now on
// (EP7), and those waiting are rejected.
func (l *Listener) stopListening() {
	l.mu.Lock()
	id, evs := l.id, l.backlog
	l.id, l.backlog = nil, nil
	l.mu.Unlock()
	if id != nil {
		l.a.untrack(id)
	}
	for _, ev := range evs {
		refuse(ev)
	}
}

func refuse(ev *rdmacm.Event) {
	ev.ID.Reject(nil)
	ev.ID.Destroy()
}

func (l *Listener) cmEvent(ev *rdmacm.Event) {
	if ev.Type != rdmacm.EventConnectRequest {
		return
	}
	l.mu.Lock()
	if l.id == nil {
		l.mu.Unlock()
		refuse(ev)
		return
	}
	if l.paused {
		if len(l.backlog) < maxBacklog {
			l.backlog = append(l.backlog, ev)
		} else {
			refuse(ev)
		}
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.request(ev)
}

// request hands a connection request to the consumer as a new connector, a
// successor of the listener.
func (l *Listener) request(ev *rdmacm.Event) {
	c := &Connector{a: l.a, st: cIncoming, id: ev.ID, peer: ev.Param, lst: l}
	if err := c.n.init(l.a, &l.n); err != nil {
		refuse(ev) // the listener is closing (EP7)
		return
	}
	c.setLifetime()
	l.a.track(ev.ID, c)
	if !l.n.event(func() { l.onConnect(c) }) {
		// Closing after all: the connector goes with the request.
		c.n.close(nil)
	}
}

// Close is NdkCloseObject: new requests are refused at once (EP7); the close
// completes when the accepted connectors are closed (EP6), and then the
// address and port are free again (EP4).
func (l *Listener) Close(done func(error)) error { return l.n.close(done) }
