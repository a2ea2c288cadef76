// Package nd is the NetworkDirect SPI's overlapped model over package ndk's
// objects (networkdirect-spi.txt): a Provider lists the addresses it serves
// and opens adapters by address; creation calls are synchronous; every other
// operation that can take time takes an Overlapped and returns nil (done: the
// Overlapped is not used), ndk.ErrPending (the Overlapped completes later) or
// an error (failed: the Overlapped is not used). The package never calls into
// the client: no function here takes a callback, and every notification (a
// CQ's, a disconnect, a connection request) is one the client asked for with
// an Overlapped.
package nd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/xrnic/xrnic/ndk"
	"github.com/xrnic/xrnic/verbs"
)

// ErrPending is ND_PENDING.
var ErrPending = ndk.ErrPending

// ErrNoOverlapped: an overlapped operation was given none (ND5: the client
// always passes one).
var ErrNoOverlapped = fmt.Errorf("nd: nil Overlapped: %w", verbs.ErrInvalid)

// Overlapped is the OVERLAPPED of one operation: it completes once, when the
// operation that returned ErrPending finished. Safe for concurrent use.
type Overlapped struct {
	done chan struct{}
	once sync.Once
	err  error
}

// NewOverlapped returns an Overlapped for one operation.
func NewOverlapped() *Overlapped { return &Overlapped{done: make(chan struct{})} }

// Done is closed when the operation completed.
func (o *Overlapped) Done() <-chan struct{} { return o.done }

// Result is the operation's result once Done is closed
// (GetOverlappedResult).
func (o *Overlapped) Result() error {
	<-o.done
	return o.err
}

// Wait is Result with a deadline.
func (o *Overlapped) Wait(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *Overlapped) complete(err error) {
	o.once.Do(func() {
		o.err = err
		close(o.done)
	})
}

// live counts the providers and adapters open in the process (DllCanUnloadNow).
var live atomic.Int64

// CanUnloadNow is DllCanUnloadNow: true when no provider or adapter is open
// (ND7).
func CanUnloadNow() bool { return live.Load() == 0 }

// Provider is IND2Provider. It may be opened any number of times (ND7).
type Provider struct{ closed atomic.Bool }

// OpenProvider is DllGetClassObject for IND2Provider.
func OpenProvider() *Provider {
	live.Add(1)
	return &Provider{}
}

// QueryAddressList is IND2Provider::QueryAddressList: the addresses of the
// devices registered with verbs (ND2).
func (p *Provider) QueryAddressList() []netip.Addr {
	var out []netip.Addr
	for _, d := range verbs.Devices() {
		for _, g := range d.GIDs() {
			out = append(out, g.Addr())
		}
	}
	return out
}

// OpenAdapter is IND2Provider::OpenAdapter: the adapter of the device that has
// address addr (ND2).
func (p *Provider) OpenAdapter(addr netip.Addr) (*Adapter, error) {
	if p.closed.Load() {
		return nil, ndk.ErrClosed
	}
	for _, d := range verbs.Devices() {
		for _, g := range d.GIDs() {
			if g.Addr() == addr.Unmap() {
				a, err := ndk.OpenAdapter(d)
				if err != nil {
					return nil, err
				}
				live.Add(1)
				return &Adapter{a: a}, nil
			}
		}
	}
	return nil, fmt.Errorf("nd: no adapter has address %v: %w", addr, verbs.ErrNotFound)
}

// Close releases the provider.
func (p *Provider) Close() error {
	if p.closed.Swap(true) {
		return ndk.ErrClosed
	}
	live.Add(-1)
	return nil
}

// Adapter is IND2Adapter. Its creation calls are synchronous (ND6).
type Adapter struct {
	a      *ndk.Adapter
	closed atomic.Bool

	// The adapter's one protection domain, made on first use (ND has no PD
	// object).
	pdOnce sync.Once
	pdv    *ndk.PD
	pdErr  error
}

// Query is IND2Adapter::Query.
func (a *Adapter) Query() (ndk.AdapterInfo, error) { return a.a.QueryAdapterInfo() }

// Close is the adapter's Release: the client has closed its objects first.
func (a *Adapter) Close() error {
	if a.closed.Swap(true) {
		return ndk.ErrClosed
	}
	a.pdOnce.Do(func() {}) // waits for a creation under way, and prevents one after
	if a.pdv != nil {
		ndk.Await(a.pdv.Close)
	}
	err := a.a.Close()
	live.Add(-1)
	return err
}

// CompletionQueue is IND2CompletionQueue.
type CompletionQueue struct {
	cq  *ndk.CQ
	mu  sync.Mutex
	ovs []*Overlapped // the pending Notify requests
}

// CreateCompletionQueue is IND2Adapter::CreateCompletionQueue.
func (a *Adapter) CreateCompletionQueue(depth int) (*CompletionQueue, error) {
	c := &CompletionQueue{}
	cq, err := a.a.CreateCQ(depth, c.fired, nil)
	if err != nil {
		return nil, err
	}
	c.cq = cq
	return c, nil
}

// completePending takes the Notify requests pending in *ovs under mu and
// completes them outside the lock, so that a client woken by one may call in
// at once. All of them: "Multiple requests for notification can be
// outstanding ... All such requests will be completed by the next
// completion event" (IND2CompletionQueue::Notify, and the SRQ's alike).
func completePending(mu *sync.Mutex, ovs *[]*Overlapped, err error) {
	mu.Lock()
	o := *ovs
	*ovs = nil
	mu.Unlock()
	for _, ov := range o {
		ov.complete(err)
	}
}

// forget takes ov out of *ovs, for a Notify whose arming failed.
func forget(mu *sync.Mutex, ovs *[]*Overlapped, ov *Overlapped) {
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(*ovs, ov); i >= 0 {
		*ovs = slices.Delete(*ovs, i, i+1)
	}
}

func (c *CompletionQueue) fired(err error) { completePending(&c.mu, &c.ovs, err) }

// Notify is IND2CompletionQueue::Notify: ov completes at the next completion
// of the kind asked for, with any other Notify pending. A request for any
// completion takes precedence over one for solicited ones: the CQ's arming
// is the union of what its pending requests ask. It returns ErrPending.
func (c *CompletionQueue) Notify(solicitedOnly bool, ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	c.mu.Lock()
	c.ovs = append(c.ovs, ov)
	c.mu.Unlock()
	t := ndk.NotifyAny
	if solicitedOnly {
		t = ndk.NotifySolicited
	}
	if err := c.cq.Arm(t); err != nil {
		forget(&c.mu, &c.ovs, ov)
		return err
	}
	return ErrPending
}

// GetResults is IND2CompletionQueue::GetResults.
func (c *CompletionQueue) GetResults(rs []ndk.Result) int { return c.cq.GetResults(rs) }

// Close releases the CQ; a pending Notify completes with ErrCanceled.
func (c *CompletionQueue) Close() error {
	err := ndk.Await(c.cq.Close)
	c.fired(ndk.ErrCanceled)
	return err
}

// MemoryRegion is IND2MemoryRegion, made on the adapter's one protection
// domain.
type MemoryRegion struct{ mr *ndk.MR }

// pd returns the adapter's protection domain, made on first use.
func (a *Adapter) pd() (*ndk.PD, error) {
	a.pdOnce.Do(func() { a.pdv, a.pdErr = a.a.CreatePD(nil) })
	if a.pdv == nil && a.pdErr == nil {
		return nil, ndk.ErrClosed // the adapter closed first
	}
	return a.pdv, a.pdErr
}

// CreateMemoryRegion is IND2Adapter::CreateMemoryRegion.
func (a *Adapter) CreateMemoryRegion() (*MemoryRegion, error) {
	pd, err := a.pd()
	if err != nil {
		return nil, err
	}
	m, err := pd.CreateMR(false, nil)
	if err != nil {
		return nil, err
	}
	return &MemoryRegion{mr: m}, nil
}

// Register is IND2MemoryRegion::Register. It completes at once (nil: ov is
// not used) or fails.
func (m *MemoryRegion) Register(buf []byte, access ndk.Access, ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	return m.mr.Register(buf, access, nil)
}

// Deregister is IND2MemoryRegion::Deregister.
func (m *MemoryRegion) Deregister(ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	return m.mr.Deregister(nil)
}

// LocalToken, RemoteToken and SGE are the region's keys and an SGE in it.
func (m *MemoryRegion) LocalToken() uint32               { return m.mr.LocalToken() }
func (m *MemoryRegion) RemoteToken() uint32              { return m.mr.RemoteToken() }
func (m *MemoryRegion) Addr() uint64                     { return m.mr.Addr() }
func (m *MemoryRegion) SGE(off uint64, n uint32) ndk.SGE { return m.mr.SGE(off, n) }
func (m *MemoryRegion) Close() error                     { return ndk.Await(m.mr.Close) }

// QueuePair is IND2QueuePair: ndk's QP, its requests as they are.
type QueuePair struct{ *ndk.QP }

// CreateQueuePair is IND2Adapter::CreateQueuePair: synchronous (ND6), the QP
// ready for receives when it returns.
func (a *Adapter) CreateQueuePair(o ndk.QPOptions, rcq, icq *CompletionQueue) (*QueuePair, error) {
	return a.createQueuePair(o, rcq, icq, nil)
}

// CreateQueuePairWithSrq is IND2Adapter::CreateQueuePairWithSrq: as
// CreateQueuePair, its receives taken from srq.
func (a *Adapter) CreateQueuePairWithSrq(o ndk.QPOptions, rcq, icq *CompletionQueue, srq *SharedReceiveQueue) (*QueuePair, error) {
	if srq == nil {
		return nil, fmt.Errorf("nd: no shared receive queue: %w", verbs.ErrInvalid)
	}
	return a.createQueuePair(o, rcq, icq, srq.srq)
}

func (a *Adapter) createQueuePair(o ndk.QPOptions, rcq, icq *CompletionQueue, srq *ndk.SRQ) (*QueuePair, error) {
	pd, err := a.pd()
	if err != nil {
		return nil, err
	}
	o.ReceiveCQ, o.InitiatorCQ = rcq.cq, icq.cq
	type res struct {
		q   *ndk.QP
		err error
	}
	ch := make(chan res, 1)
	done := func(q *ndk.QP, err error) { ch <- res{q, err} }
	if srq != nil {
		err = pd.CreateQPWithSRQ(o, srq, done)
	} else {
		err = pd.CreateQP(o, done)
	}
	if !errors.Is(err, ErrPending) {
		return nil, err
	}
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	return &QueuePair{r.q}, nil
}

// Close releases the QP once its requests are flushed.
func (q *QueuePair) Close() error { return ndk.Await(q.QP.Close) }

// SharedReceiveQueue is IND2SharedReceiveQueue (ND1): receive buffers shared
// by the queue pairs made with CreateQueuePairWithSrq. Its notification, as
// every one here, is asked for with an Overlapped (Notify, ND4): the limit is
// armed only while a Notify is pending.
type SharedReceiveQueue struct {
	srq *ndk.SRQ

	mu        sync.Mutex
	threshold int
	ovs       []*Overlapped // the pending Notify requests
}

// CreateSharedReceiveQueue is IND2Adapter::CreateSharedReceiveQueue:
// synchronous (ND6). Notify completes once fewer than threshold receives are
// posted.
func (a *Adapter) CreateSharedReceiveQueue(depth, maxSGE, threshold int) (*SharedReceiveQueue, error) {
	if threshold < 0 || threshold > depth {
		return nil, fmt.Errorf("nd: notify threshold %d: %w", threshold, verbs.ErrInvalid)
	}
	pd, err := a.pd()
	if err != nil {
		return nil, err
	}
	s := &SharedReceiveQueue{threshold: threshold}
	srq, err := pd.CreateSRQ(depth, maxSGE, 0, s.fired, nil)
	if err != nil {
		return nil, err
	}
	s.srq = srq
	return s, nil
}

func (s *SharedReceiveQueue) fired(err error) { completePending(&s.mu, &s.ovs, err) }

// Notify is IND2SharedReceiveQueue::Notify: ov completes, with any other
// Notify pending, once fewer receives than the threshold are posted. It
// returns ErrPending.
func (s *SharedReceiveQueue) Notify(ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threshold == 0 {
		return fmt.Errorf("nd: no notify threshold: %w", verbs.ErrInvalid)
	}
	if len(s.ovs) == 0 {
		if err := s.srq.Modify(0, s.threshold, nil); err != nil {
			return err
		}
	}
	s.ovs = append(s.ovs, ov)
	return ErrPending
}

// Modify is IND2SharedReceiveQueue::Modify: a new depth and notify
// threshold, 0 keeping either ("If zero, notifyThreshold does not modify the
// threshold"); a new threshold is armed at once when a Notify is pending.
func (s *SharedReceiveQueue) Modify(depth, threshold int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if threshold < 0 {
		return fmt.Errorf("nd: notify threshold %d: %w", threshold, verbs.ErrInvalid)
	}
	limit := 0 // ndk keeps the arming
	if len(s.ovs) > 0 {
		limit = threshold
	}
	if err := s.srq.Modify(depth, limit, nil); err != nil {
		return err
	}
	if threshold > 0 {
		s.threshold = threshold
	}
	return nil
}

// Receive is IND2SharedReceiveQueue::Receive.
func (s *SharedReceiveQueue) Receive(ctx uint64, sgl []ndk.SGE) error { return s.srq.Receive(ctx, sgl) }

// Close releases the SRQ once its queue pairs are closed; a pending Notify
// completes with ErrCanceled.
func (s *SharedReceiveQueue) Close() error {
	err := ndk.Await(s.srq.Close)
	s.fired(ndk.ErrCanceled)
	return err
}

// Connector is IND2Connector. A connector from CreateConnector is used either
// for Connect or, through Listener.GetConnectionRequest, for an incoming one.
type Connector struct {
	a *Adapter

	mu     sync.Mutex
	c      *ndk.Connector
	discOv *Overlapped // the pending NotifyDisconnect
	askOv  *Overlapped // the pending GetConnectionRequest
	gone   bool        // the peer disconnected before NotifyDisconnect
	closed bool
}

// CreateConnector is IND2Adapter::CreateConnector.
func (a *Adapter) CreateConnector() (*Connector, error) {
	if a.closed.Load() {
		return nil, ndk.ErrClosed
	}
	return &Connector{a: a}, nil
}

func (c *Connector) disconnected() {
	c.mu.Lock()
	ov := c.discOv
	c.discOv = nil
	c.gone = ov == nil
	c.mu.Unlock()
	if ov != nil {
		ov.complete(nil)
	}
}

func (c *Connector) conn() (*ndk.Connector, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return nil, ndk.ErrState
	}
	return c.c, nil
}

// Connect is IND2Connector::Connect: ErrPending, ov completing with the
// peer's answer (then CompleteConnect).
func (c *Connector) Connect(qp *QueuePair, src, dst netip.AddrPort, ird, ord int, private []byte, ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	c.mu.Lock()
	if c.c == nil {
		nc, err := c.a.a.CreateConnector(c.disconnected, nil)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		c.c = nc
	}
	nc := c.c
	c.mu.Unlock()
	return nc.Connect(qp.QP, src, dst, ird, ord, private, ov.complete)
}

// CompleteConnect is IND2Connector::CompleteConnect (nil: done).
func (c *Connector) CompleteConnect(ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	nc, err := c.conn()
	if err != nil {
		return err
	}
	return nc.CompleteConnect(nil)
}

// Accept is IND2Connector::Accept of the request GetConnectionRequest gave.
func (c *Connector) Accept(qp *QueuePair, ird, ord int, private []byte, ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	nc, err := c.conn()
	if err != nil {
		return err
	}
	return nc.Accept(qp.QP, ird, ord, private, ov.complete)
}

// Reject is IND2Connector::Reject.
func (c *Connector) Reject(private []byte) error {
	nc, err := c.conn()
	if err != nil {
		return err
	}
	return nc.Reject(private)
}

// GetConnectionData is IND2Connector::GetConnectionData.
func (c *Connector) GetConnectionData() (ird, ord int, private []byte, err error) {
	nc, err := c.conn()
	if err != nil {
		return 0, 0, nil, err
	}
	return nc.GetConnectionData()
}

// GetLocalAddress and GetPeerAddress are IND2Connector's.
func (c *Connector) GetLocalAddress() (netip.AddrPort, error) {
	nc, err := c.conn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	return nc.GetLocalAddress()
}

func (c *Connector) GetPeerAddress() (netip.AddrPort, error) {
	nc, err := c.conn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	return nc.GetPeerAddress()
}

// NotifyDisconnect is IND2Connector::NotifyDisconnect: ov completes when the
// peer disconnects (at once if it already has: nil).
func (c *Connector) NotifyDisconnect(ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ndk.ErrClosed // Close has completed the pending one: none would complete this
	case c.discOv != nil:
		return errNotifyPending // replaced, the first would never complete
	case c.gone:
		return nil
	}
	c.discOv = ov
	return ErrPending
}

var errNotifyPending = fmt.Errorf("nd: a NotifyDisconnect is pending already: %w", ndk.ErrState)

// Disconnect is IND2Connector::Disconnect.
func (c *Connector) Disconnect(ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	nc, err := c.conn()
	if err != nil {
		return err
	}
	return nc.Disconnect(ov.complete)
}

// Close releases the connector (a pending NotifyDisconnect completes with
// ErrCanceled).
func (c *Connector) Close() error {
	c.mu.Lock()
	nc, ov, ask := c.c, c.discOv, c.askOv
	c.c, c.discOv, c.askOv, c.closed = nil, nil, nil, true
	c.mu.Unlock()
	var err error
	if nc != nil {
		err = ndk.Await(nc.Close)
	}
	if ov != nil {
		ov.complete(ndk.ErrCanceled)
	}
	if ask != nil {
		// Its listener skips it from now on (give): no request is handed to a
		// closed connector, and its Overlapped completes once (LT14).
		ask.complete(ndk.ErrCanceled)
	}
	return err
}

// Listener is IND2Listener: requests wait in the listener (ndk's paused
// backlog) until GetConnectionRequest asks for one.
type Listener struct {
	a *Adapter
	l *ndk.Listener

	mu      sync.Mutex
	waiting []*ndk.Connector
	asks    []ask
	closed  bool // Close was called: requests are refused (EP7)
}

type ask struct {
	c  *Connector
	ov *Overlapped
}

// CreateListener is IND2Adapter::CreateListener.
func (a *Adapter) CreateListener() (*Listener, error) {
	l := &Listener{a: a}
	nl, err := a.a.CreateListener(l.request, nil)
	if err != nil {
		return nil, err
	}
	l.l = nl
	return l, nil
}

// Listen is IND2Listener::Listen.
func (l *Listener) Listen(ap netip.AddrPort) error { return l.l.Listen(ap, nil) }

func (l *Listener) request(nc *ndk.Connector) {
	for {
		l.mu.Lock()
		if l.closed || len(l.asks) == 0 && len(l.waiting) >= 64 {
			// A request that comes as Close runs (or after it) is refused
			// here: left in waiting, it would hold the listener's close for
			// ever (EP6, EP7).
			l.mu.Unlock()
			nc.Reject(nil)
			nc.Close(nil)
			return
		}
		if len(l.asks) == 0 {
			l.waiting = append(l.waiting, nc)
			l.mu.Unlock()
			return
		}
		a := l.asks[0]
		l.asks = l.asks[1:]
		l.mu.Unlock()
		if l.give(a, nc) {
			return
		}
	}
}

// give hands nc to the connector of ask a, unless that connector was closed
// meanwhile (its ask is canceled): false then, and nc is still the caller's.
func (l *Listener) give(a ask, nc *ndk.Connector) bool {
	if !a.c.takeAsk(a.ov, nc) {
		return false
	}
	nc.SetDisconnectEvent(a.c.disconnected)
	a.ov.complete(nil)
	return true
}

// takeAsk ends c's GetConnectionRequest ov, c becoming nc (nil: canceled),
// unless c's Close ended it first (it clears askOv): then false, and ov is not
// the caller's to complete (LT14: it completes once).
func (c *Connector) takeAsk(ov *Overlapped, nc *ndk.Connector) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.askOv != ov {
		return false
	}
	c.c, c.askOv = nc, nil
	return true
}

// GetConnectionRequest is IND2Listener::GetConnectionRequest: c becomes the
// next incoming connection; ErrPending, ov completing when there is one.
func (l *Listener) GetConnectionRequest(c *Connector, ov *Overlapped) error {
	if ov == nil {
		return ErrNoOverlapped
	}
	if c == nil {
		return ndk.ErrInvalid
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ndk.ErrClosed
	}
	c.mu.Lock() // under l.mu: nothing takes them the other way round
	if c.closed || c.c != nil || c.askOv != nil {
		c.mu.Unlock()
		l.mu.Unlock()
		return ndk.ErrState // closed, connected already, or asking already
	}
	c.askOv = ov
	c.mu.Unlock()
	if len(l.waiting) > 0 {
		nc := l.waiting[0]
		l.waiting = l.waiting[1:]
		l.mu.Unlock()
		if !l.give(ask{c, ov}, nc) { // closed meanwhile: the next ask may take it
			l.request(nc)
		}
		return ErrPending
	}
	l.asks = append(l.asks, ask{c, ov})
	l.mu.Unlock()
	return ErrPending
}

// Close releases the listener: requests waiting are refused, asks complete
// with ErrCanceled.
func (l *Listener) Close() error {
	l.mu.Lock()
	waiting, asks := l.waiting, l.asks
	l.waiting, l.asks, l.closed = nil, nil, true
	l.mu.Unlock()
	for _, nc := range waiting {
		nc.Reject(nil)
		ndk.Await(nc.Close)
	}
	for _, a := range asks {
		if a.c.takeAsk(a.ov, nil) {
			a.ov.complete(ndk.ErrCanceled)
		}
	}
	return ndk.Await(l.l.Close)
}
