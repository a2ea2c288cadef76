package o2ib

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrnic/xrnic/ndk"
)

// Connection states.
const (
	stConnecting = iota
	stEstablished
	stClosing // no new sends; queued ones aborted; disconnect under way
)

// Work request contexts: the kind in the top byte, an index or cookie below.
const (
	ctxRx   = 1 << 56 // a receive: its buffer's index
	ctxTx   = 2 << 56 // a message send: its buffer's index
	ctxRDMA = 3 << 56 // a PUT's WRITE or a GET's READ: the tx's cookie
	ctxMask = 0xff << 56
)

// Conn is one connection to a peer NI. Safe for concurrent use.
type Conn struct {
	ni   *NI
	refs atomic.Int32
	cq   *ndk.CQ
	qp   *ndk.QP
	mr   *ndk.MR // Credits receive buffers, then the send buffers
	buf  []byte
	cn   *ndk.Connector

	scheduled atomic.Bool // on the scheduler's list
	starving  bool        // waiting for an own RDMA buffer (under the NI's pools.mu)

	mu    sync.Mutex
	state int
	// connecting: the connect or accept has not completed; a close meanwhile
	// sets closeAfter, and the completion hands the connection back to connd.
	connecting, closeAfter bool
	why                    error
	heard                  time.Time      // the peer's last message, or the connection's start
	credits                int            // messages the peer's receives can take
	outCredits             int            // receives posted again, not yet returned
	txFree                 []int          // free send buffers
	sent                   []*tx          // by send buffer: the tx whose message it holds
	maxCredits             int            // the peer's receives: credits never exceed them
	queue                  []*tx          // queued, not posted (O2-4)
	waiting                map[uint64]*tx // PUTs and GETs waiting for the peer, by cookie
	lent                   map[uint64]lent
	cookie                 uint64
}

// lent is an RDMA slot this side lent to a peer's PUT (the sink) or GET (the
// source), until its DONE.
type lent struct {
	slot, length int
}

// tx is a send: one message, or a PUT or GET's several steps. It holds one
// reference from its queueing to its end (O2-4).
type tx struct {
	h      hdr
	data   []byte // IMMEDIATE payload, PUT source, or GET destination
	slot   int    // the RDMA slot it borrowed, or -1
	done   func([]byte, error)
	ending bool // its last message is posted: done when that send completes
	// Under the connection's mu: work requests of it in flight (its message
	// or its RDMA); aborted by a close, it ends once they completed; ended
	// makes sure it ends once.
	posted  int
	aborted bool
	why     error // why it was aborted: the close's reason, or the peer's NAK
	ended   bool
}

// endLocked reports whether t should end now, and marks it ended: it has not
// ended yet and nothing of it is in flight (O2-4: posted sends wait for
// their completion).
func (c *Conn) endLocked(t *tx) bool {
	if t.ended || t.posted > 0 {
		return false
	}
	t.ended = true
	if !t.ending {
		delete(c.waiting, t.h.cookie)
	}
	return true
}

func (ni *NI) txBufs() int { return ni.cfg.Credits + 4 }

// newConn makes a connection's CQ, QP and buffers and posts its receives
// (kiblnd_create_conn): it starts with 1 + Credits references (O2-1).
func (ni *NI) newConn() (*Conn, error) {
	c := &Conn{ni: ni, waiting: map[uint64]*tx{}, lent: map[uint64]lent{}, connecting: true}
	cfg := &ni.cfg
	n := cfg.Credits + ni.txBufs()
	c.sent = make([]*tx, n)
	depth := cfg.Credits + ni.txBufs() + cfg.RDMASlots
	var err error
	c.buf = make([]byte, n*cfg.MsgSize)
	if c.cq, err = ni.ad.CreateCQ(depth, c.notified, nil); err != nil {
		return nil, c.freeObjects(err)
	}
	ch := make(chan error, 1)
	err = ni.pd.CreateQP(ndk.QPOptions{ReceiveCQ: c.cq, InitiatorCQ: c.cq, ReceiveDepth: cfg.Credits,
		InitiatorDepth: ni.txBufs() + cfg.RDMASlots, MaxReceiveSGE: 1, MaxInitiatorSGE: 1},
		func(q *ndk.QP, err error) { c.qp = q; ch <- err })
	if errors.Is(err, ndk.ErrPending) {
		err = <-ch
	}
	if err != nil {
		return nil, c.freeObjects(err)
	}
	if c.mr, err = ni.pd.CreateMR(false, nil); err == nil {
		err = c.mr.Register(c.buf, ndk.AllowLocalWrite, nil)
	}
	if err != nil {
		return nil, c.freeObjects(err)
	}
	for i := range ni.txBufs() {
		c.txFree = append(c.txFree, cfg.Credits+i)
	}
	ni.mu.Lock()
	ni.conns[c] = struct{}{}
	ni.mu.Unlock()
	c.refs.Store(int32(1 + cfg.Credits)) // O2-1
	if err := c.cq.Arm(ndk.NotifyAny); err != nil {
		c.fail(err)
		return nil, err
	}
	for i := range cfg.Credits {
		c.postRx(i)
	}
	return c, nil
}

func (c *Conn) msgBuf(i int) []byte { return c.buf[i*c.ni.cfg.MsgSize : (i+1)*c.ni.cfg.MsgSize] }
func (c *Conn) msgSGE(i, n int) ndk.SGE {
	return c.mr.SGE(uint64(i*c.ni.cfg.MsgSize), uint32(n))
}

// addref and decref count the connection's references; the last hands it to
// connd (O2-7).
func (c *Conn) addref() { c.refs.Add(1) }

func (c *Conn) decref() {
	switch n := c.refs.Add(-1); {
	case n == 0:
		if h := c.ni.testHookZero; h != nil {
			h(c)
		}
		c.ni.toConnd(&c.ni.zombies, c)
	case n < 0:
		panic("o2ib: connection reference count below zero")
	}
}

// Addrs are the connection's local and peer addresses (invalid before its
// connector has them).
func (c *Conn) Addrs() (local, peer netip.AddrPort) {
	if c.cn == nil {
		return
	}
	local, _ = c.cn.GetLocalAddress()
	peer, _ = c.cn.GetPeerAddress()
	return local, peer
}

// Refs is the connection's reference count.
func (c *Conn) Refs() int { return int(c.refs.Load()) }

// postRx posts receive buffer i (kiblnd_post_rx): a reference is held across
// the post, since another goroutine may be closing the connection; a post
// that fails drops the receive's own (O2-3).
func (c *Conn) postRx(i int) {
	c.addref()
	defer c.decref()
	if err := c.qp.Receive(ctxRx|uint64(i), []ndk.SGE{c.msgSGE(i, c.ni.cfg.MsgSize)}); err != nil {
		c.decref() // kiblnd_drop_rx
	}
}

// established puts the connection in service (kiblnd_connreq_done): the
// maker's reference becomes the NI's, dropped by connd after the disconnect.
func (c *Conn) established() {
	c.mu.Lock()
	c.connecting = false
	if c.state != stConnecting {
		after := c.closeAfter
		c.mu.Unlock()
		if after { // closed while connecting: disconnect now
			c.ni.toConnd(&c.ni.closing, c)
		}
		return
	}
	c.state = stEstablished
	c.heard = time.Now()
	c.mu.Unlock()
	c.ni.count(func(s *Stats) { s.Established++ })
	c.checkSends()
}

// fail ends a connection that never got established (O2-2): its maker's
// reference goes, and its QP is flushed so that its receives drop theirs.
func (c *Conn) fail(why error) {
	c.mu.Lock()
	c.connecting = false
	if c.state == stClosing {
		after := c.closeAfter
		c.mu.Unlock()
		if after { // closed while connecting, and never connected
			c.qp.Flush()
			c.decref()
		}
		return
	}
	c.state, c.why = stClosing, why
	q := c.abortLocked()
	c.mu.Unlock()
	c.finishAborted(q)
	if c.qp != nil {
		c.qp.Flush()
	}
	c.decref()
}

// Close disconnects the connection (kiblnd_close_conn): queued sends end with
// ErrClosed, and connd disconnects it and drops the NI's reference.
func (c *Conn) Close() { c.closeFor(ErrClosed, nil) }

// closeFor closes with a reason; count, when not nil, counts it. A
// connection still connecting closes too (a peer may misbehave before its
// Accept completes): connd's disconnect drops the maker's reference, and the
// connect's own completion then finds it closing.
func (c *Conn) closeFor(why error, count func(*Stats)) {
	c.mu.Lock()
	if c.state == stClosing {
		c.mu.Unlock()
		return
	}
	c.state, c.why = stClosing, why
	q := c.abortLocked()
	c.mu.Unlock()
	if count != nil {
		c.ni.count(count)
	}
	c.finishAborted(q)
	c.ni.toConnd(&c.ni.closing, c)
}

// abortLocked takes the queued sends (O2-4: not posted, they are dropped) and
// the PUTs and GETs waiting for their peer with nothing in flight; those
// with a message or RDMA in flight end at its completion, which the close's
// flush brings.
func (c *Conn) abortLocked() []*tx {
	q := append(c.queue, nil)[:len(c.queue)]
	c.queue = nil
	for _, t := range q {
		t.ended = true
	}
	for _, t := range c.waiting {
		t.aborted, t.why = true, c.why
		if c.endLocked(t) {
			q = append(q, t)
		}
	}
	return q
}

func (c *Conn) finishAborted(q []*tx) {
	for _, t := range q {
		c.endTx(t, nil, c.why)
	}
}

// endTx finishes a send: its callback, its slot back, its reference (O2-4).
func (c *Conn) endTx(t *tx, data []byte, err error) {
	if t.slot >= 0 {
		c.ni.release(t.slot)
		t.slot = -1
	}
	if t.done != nil {
		t.done(data, err)
	}
	c.decref()
}

// peerDisconnected is the connector's disconnect event: the peer went.
func (c *Conn) peerDisconnected() { c.closeFor(ErrClosed, nil) }

// Put sends data to the peer: inline when it fits a message, else by the
// peer's buffer and an RDMA WRITE. done runs once the peer has it (or the
// connection failed), on the scheduler goroutine; data must not change
// until then.
func (c *Conn) Put(data []byte, done func(error)) error {
	fin := func(_ []byte, err error) {
		if done != nil {
			done(err)
		}
	}
	switch {
	case len(data) > c.ni.cfg.MaxRDMA:
		return ErrTooLong
	case len(data) <= c.ni.cfg.MsgSize-hdrLen:
		return c.queueTx(&tx{h: hdr{typ: msgImmediate, length: uint32(len(data))}, data: data, slot: -1, done: fin, ending: true})
	}
	return c.queueTx(&tx{h: hdr{typ: msgPutReq, length: uint32(len(data))}, data: data, slot: -1, done: fin})
}

// Get asks the peer for length bytes named key (its OnGet serves them) and
// reads them by RDMA into into[:length]; done runs with them.
func (c *Conn) Get(key uint64, into []byte, done func([]byte, error)) error {
	if len(into) == 0 || len(into) > c.ni.cfg.MaxRDMA {
		return ErrTooLong
	}
	return c.queueTx(&tx{h: hdr{typ: msgGetReq, length: uint32(len(into)), addr: key}, data: into, slot: -1, done: done})
}

// queueTx queues a send (kiblnd_queue_tx_locked): it holds a reference until
// it ends (O2-4).
func (c *Conn) queueTx(t *tx) error {
	c.mu.Lock()
	if c.state == stClosing {
		c.mu.Unlock()
		return ErrClosed
	}
	c.addref()
	c.queue = append(c.queue, t)
	c.mu.Unlock()
	c.checkSends()
	return nil
}

// reply queues a message of the protocol's own (ACK, NAK): on a closing
// connection there is no one to answer.
func (c *Conn) reply(h hdr) { _ = c.queueTx(&tx{h: h, slot: -1, ending: true}) }

// checkSends posts what the credits allow (kiblnd_check_sends_locked).
func (c *Conn) checkSends() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stEstablished {
		return
	}
	for len(c.queue) > 0 && len(c.txFree) > 0 {
		t := c.queue[0]
		// The last credit is kept for a message that returns credits, or
		// both sides could end with none and credits owed (o2iblnd's rule).
		if c.credits == 0 || (c.credits == 1 && c.outCredits == 0 && t.h.typ != msgNoop) {
			break
		}
		if !c.prepareLocked(t) {
			break
		}
		c.queue = c.queue[1:]
		c.postMsgLocked(t)
	}
	// Credits owed and nothing to carry them: a NOOP (kiblnd_need_noop).
	if len(c.queue) == 0 && c.outCredits >= (c.ni.cfg.Credits+1)/2 && c.credits > 0 && len(c.txFree) > 0 {
		c.addref()
		c.postMsgLocked(&tx{h: hdr{typ: msgNoop}, slot: -1, ending: true})
	}
}

// prepareLocked readies a send's first message: a PUT or GET borrows its
// RDMA slot. False: no slot free now.
func (c *Conn) prepareLocked(t *tx) bool {
	switch t.h.typ {
	case msgPutReq, msgGetReq:
		s, ok := c.ni.takeOwn(c)
		if !ok {
			return false
		}
		t.slot = s
		if t.h.typ == msgPutReq {
			copy(c.ni.slotBytes(s, len(t.data)), t.data)
		}
		c.cookie++
		t.h.cookie = c.cookie
		c.waiting[t.h.cookie] = t
	}
	return true
}

// postMsgLocked sends t's message, carrying the credits owed.
func (c *Conn) postMsgLocked(t *tx) {
	i := c.txFree[len(c.txFree)-1]
	c.txFree = c.txFree[:len(c.txFree)-1]
	t.h.credits = uint16(c.outCredits)
	c.outCredits = 0
	c.credits--
	b := c.msgBuf(i)
	t.h.put(b)
	n := hdrLen
	if t.h.typ == msgImmediate {
		n += copy(b[hdrLen:], t.data)
	}
	c.sent[i] = t
	t.posted++
	if err := c.qp.Send(ctxTx|uint64(i), []ndk.SGE{c.msgSGE(i, n)}, 0); err != nil {
		// The QP is failing: its flush ends the connection; this send ends now.
		c.sent[i] = nil
		c.txFree = append(c.txFree, i)
		t.posted--
		if c.endLocked(t) {
			go c.endTx(t, nil, fmt.Errorf("o2ib: send: %w", err))
		}
	}
}

// checkTimeout closes the connection when it waits on a peer that has said
// nothing for the NI's Timeout (kiblnd_check_conns, run by connd).
func (c *Conn) checkTimeout(now time.Time) {
	c.mu.Lock()
	stale := c.state == stEstablished && (len(c.queue) > 0 || len(c.waiting) > 0) && now.Sub(c.heard) > c.ni.cfg.Timeout
	c.mu.Unlock()
	if stale {
		c.closeFor(ErrTimeout, func(s *Stats) { s.TimedOut++ })
	}
}
