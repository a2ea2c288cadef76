// The IB midlayer rules (shared/reference/RULES.md) over the whole stack: two
// devices on a memory link with connected RC QPs, driven through the verbs. nic/cq
// tests the CQ-internal forms of MID1 and MID4-MID7; client_test.go has MID8-MID10.

package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
)

// gateLink stops its engine: while the gate is shut, ReadBatch, which the engine
// calls on every pass of its loop, blocks.
type gateLink struct {
	link.Link
	mu      sync.Mutex
	shut    chan struct{} // non-nil while shut; closed to open
	entered chan struct{} // closed once the engine is blocked on the shut gate
}

// shutGate shuts the gate and returns a channel closed when the engine is stuck.
func (g *gateLink) shutGate() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut, g.entered = make(chan struct{}), make(chan struct{})
	g.Link.Wake()
	return g.entered
}

func (g *gateLink) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

func (g *gateLink) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	g.mu.Lock()
	shut := g.shut
	if shut != nil {
		select {
		case <-g.entered:
		default:
			close(g.entered)
		}
	}
	g.mu.Unlock()
	if shut != nil {
		<-shut
	}
	return g.Link.ReadBatch(bufs, sizes)
}

// watchdogWait fails the test with every goroutine's stack if fn does not return
// by the deadline: a deadlock detector, not a speed assertion.
func watchdogWait(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatalf("%s did not return: blocked\n%s", what, stacks())
	}
}

// payload is the 16 bytes a test message with id carries: id and its complement.
func payload(id uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, id)
	binary.BigEndian.PutUint64(b[8:], ^id)
	return b
}

// payloadID reads a payload back; false if b is not one.
func payloadID(b []byte) (uint64, bool) {
	if len(b) < 16 {
		return 0, false
	}
	id := binary.BigEndian.Uint64(b)
	return id, binary.BigEndian.Uint64(b[8:]) == ^id
}

// drain polls c until it is empty, calling fn for each completion.
func drain(c *CQ, fn func(*WC)) int {
	var buf [16]WC
	total := 0
	for {
		n := c.Poll(buf[:])
		for i := range n {
			fn(&buf[i])
		}
		total += n
		if n < len(buf) {
			return total
		}
	}
}

// recvSlot is the 64-byte receive buffer of a receive WRID.
const recvSlot = 64

// TestMID1PostPollNotifyAHNeverBlock: PostSend, PostRecv, Poll, ReqNotify and the
// AH verbs return while the device's engine is stopped (they never wait for it),
// from many goroutines at once, and then from inside completion handlers and
// event handlers; every work request completes exactly once.
func TestMID1PostPollNotifyAHNeverBlock(t *testing.T) {
	gate := &gateLink{}
	da, db := memDevicesWrapped(t, func(l link.Link) link.Link { gate.Link = l; return gate })
	defer gate.open() // before every cleanup: they need the engine
	a, b := rcPair(t, da, db, epOpts{}, epOpts{})
	sends, recvs := newLedger(), newLedger() // a to b
	back, aRecvs := newLedger(), newLedger() // b to a
	var received sync.Map                    // payload IDs b received

	postSend := func(qp *QP, l *ledger, id uint64) {
		l.post(id)
		if _, err := qp.PostSend([]SendWR{{WRID: id, Opcode: WRSend, Flags: SendSignaled, InlineData: payload(id)}}); err != nil {
			t.Errorf("PostSend %#x: %v", id, err)
			l.unpost(id)
		}
	}
	var slot atomic.Uint64
	postRecv := func(e *endpoint, l *ledger) {
		id := slot.Add(1) // also the buffer slot
		l.post(id)
		if _, err := e.qp.PostRecv([]RecvWR{{WRID: id, SGL: []SGE{e.mr.SGE(id*recvSlot, recvSlot)}}}); err != nil {
			t.Errorf("PostRecv: %v", err)
			l.unpost(id)
		}
	}
	onRecv := func(e *endpoint, l *ledger) func(*WC) {
		return func(wc *WC) {
			l.complete(wc)
			if wc.Status != WCSuccess {
				return // the ledger reports it
			}
			id, ok := payloadID(e.buf[wc.WRID*recvSlot : wc.WRID*recvSlot+16])
			if !ok || wc.ByteLen != 16 {
				t.Errorf("receive %#x: %d bytes %x", wc.WRID, wc.ByteLen, e.buf[wc.WRID*recvSlot:][:16])
			} else if e == b {
				if _, dup := received.LoadOrStore(id, true); dup {
					t.Errorf("message %#x received twice", id)
				}
			}
		}
	}

	// Phase 1: a's engine is stuck in its link; calls on a return anyway.
	select {
	case <-gate.shutGate():
	case <-time.After(deadline):
		t.Fatal("the engine never reached the gate")
	}
	const workers, perWorker = 4, 32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				postSend(a.qp, sends, uint64(1<<32|w<<16|i))
			}
		})
		wg.Go(func() {
			for range perWorker {
				postRecv(b, recvs)
			}
		})
		wg.Go(func() {
			for range perWorker / 4 {
				postRecv(a, aRecvs) // filled in phase 2
			}
		})
		wg.Go(func() {
			var buf [8]WC
			for i := range 300 {
				if n := a.scq.Poll(buf[:]); n != 0 {
					t.Errorf("%d completions while the engine is stopped", n)
				}
				a.scq.ReqNotify(i%2 == 0)
				a.rcq.ReqNotify(i%3 == 0)
				a.rcq.Poll(buf[:])
			}
		})
		wg.Go(func() {
			for range 50 {
				ah, err := a.pd.CreateAH(AV{DGID: gidB})
				if err != nil {
					t.Errorf("CreateAH: %v", err)
					continue
				}
				if ah.AV().DGID != gidB {
					t.Errorf("AH's AV: %+v", ah.AV())
				}
				ah.Destroy()
			}
		})
	}
	watchdogWait(t, "posting, polling, arming and AH verbs on a stopped engine", wg.Wait)
	gate.open()
	if !waitFor(func() bool {
		drain(a.scq, sends.complete)
		drain(b.rcq, onRecv(b, recvs))
		return sends.pending() == 0 && recvs.pending() == 0
	}) {
		t.Fatalf("after the engine resumed: %d sends and %d receives outstanding", sends.pending(), recvs.pending())
	}

	// Phase 2: the same calls from inside completion handlers and event handlers.
	const chain, toggles = 64, 16
	var chained atomic.Int32
	aHandler := func(c *CQ) {
		fn := func(wc *WC) {
			sends.complete(wc)
			if wc.WRID>>32 == 2 && chained.Load() < chain {
				postRecv(b, recvs)
				postSend(a.qp, sends, 2<<32|uint64(chained.Add(1)))
			}
		}
		drain(c, fn)
		if ah, err := a.pd.CreateAH(AV{DGID: gidB}); err == nil {
			ah.Destroy()
		} else {
			t.Errorf("CreateAH in a completion handler: %v", err)
		}
		c.ReqNotify(false)
		drain(c, fn)
	}
	bHandler := func(c *CQ) {
		drain(c, onRecv(b, recvs))
		c.ReqNotify(false)
		drain(c, onRecv(b, recvs))
	}
	var evID atomic.Uint64
	var toggling atomic.Bool // from the first PORT_ERR on: not Open's PORT_ACTIVE
	defer da.RegisterEventHandler(func(ev AsyncEvent) {
		if ev.Type == EventPortErr {
			toggling.Store(true)
		}
		if !toggling.Load() || ev.Type != EventPortErr && ev.Type != EventPortActive {
			return
		}
		postSend(b.qp, back, 3<<32|evID.Add(1))
		drain(a.rcq, onRecv(a, aRecvs))
		a.rcq.ReqNotify(true)
		if ah, err := a.pd.CreateAH(AV{DGID: gidB}); err == nil {
			ah.Destroy()
		} else {
			t.Errorf("CreateAH in an event handler: %v", err)
		}
	})()
	if err := a.scq.SetHandler(aHandler); err != nil {
		t.Fatal(err)
	}
	if err := b.rcq.SetHandler(bHandler); err != nil {
		t.Fatal(err)
	}
	a.scq.ReqNotify(false)
	b.rcq.ReqNotify(false)
	postRecv(b, recvs)
	postSend(a.qp, sends, 2<<32)
	for range toggles {
		da.Engine().SetPortState(false)
		da.Engine().SetPortState(true)
	}
	if !waitFor(func() bool {
		drain(a.rcq, onRecv(a, aRecvs))
		drain(b.scq, back.complete)
		return chained.Load() == chain && sends.pending() == 0 && recvs.pending() == 0 &&
			back.pending() == 0 && aRecvs.pending() == 0
	}) {
		t.Fatalf("chain %d/%d; outstanding: %d sends, %d receives, %d sends back, %d receives back\n%s",
			chained.Load(), chain, sends.pending(), recvs.pending(), back.pending(), aRecvs.pending(), stacks())
	}
	sends.check(t, workers*perWorker+chain+1)
	recvs.check(t, workers*perWorker+chain+1)
	back.check(t, 2*toggles)
	aRecvs.check(t, 2*toggles)
	n := 0
	received.Range(func(any, any) bool { n++; return true })
	if n != workers*perWorker+chain+1 {
		t.Errorf("b received %d distinct messages, want %d", n, workers*perWorker+chain+1)
	}
}

// TestMID2EventsFromEverywhereArriveInOrder: events dispatched at once from the
// engine goroutine (QP errors, SRQ limit), CQ dispatchers (CQ overflow), arbitrary
// goroutines (SetPortState, DispatchEvent), an event handler and a completion
// handler all arrive, exactly once each, in order per source, without deadlock.
func TestMID2EventsFromEverywhereArriveInOrder(t *testing.T) {
	da, db := memDevices(t)
	var la, lb eventLog
	defer da.RegisterEventHandler(la.handler)()
	defer db.RegisterEventHandler(func(ev AsyncEvent) {
		lb.handler(ev)
		if ev.Type == EventSRQLimitReached { // dispatching from inside a handler
			db.Engine().SetPortState(false)
			db.Engine().SetPortState(true)
		}
	})()

	// The engine's sources: RC pairs whose receivers share an SRQ on b.
	pdB, err := db.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pdB.CreateSRQ(engine.SRQAttr{MaxWR: 64, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the endpoints' cleanups
		srq.Destroy()
		pdB.Dealloc()
	})
	// A completion handler dispatches an event per call (source port 20).
	const handlerPort = 20
	var handlerCalls atomic.Int32
	cqHandler := func(c *CQ) {
		n := handlerCalls.Add(1)
		da.Engine().DispatchEvent(engine.AsyncEvent{Type: alternate(int(n - 1)), Port: handlerPort})
		c.ReqNotify(false)
	}
	const pairs = 3
	var as, bs [pairs]*endpoint
	for i := range pairs {
		oa := epOpts{}
		if i == 0 {
			oa.scqOpts = CQOptions{Handler: cqHandler}
		}
		as[i], bs[i] = rcPair(t, da, db, oa, epOpts{pd: pdB, srq: srq})
	}
	as[0].scq.ReqNotify(false)

	const toggles, dispatchers, perDispatcher, overflows, rounds = 50, 4, 100, 4, 3
	var wg sync.WaitGroup
	wg.Go(func() { // an arbitrary goroutine: port changes
		for range toggles {
			da.Engine().SetPortState(false)
			da.Engine().SetPortState(true)
		}
	})
	for g := range dispatchers { // arbitrary goroutines: ib_dispatch_event
		wg.Go(func() {
			for i := range perDispatcher {
				da.Engine().DispatchEvent(engine.AsyncEvent{Type: alternate(i), Port: uint8(10 + g)})
			}
		})
	}
	cqs := make([]*CQ, overflows)
	for i := range overflows { // CQ dispatchers: overflow
		c, err := da.CreateCQ(1, CQOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Destroy().Wait() })
		cqs[i] = c
		wg.Go(func() {
			for j := range 3 {
				c.Push(&WC{WRID: uint64(j)}, false)
			}
		})
	}
	// The engine goroutine: SRQ limit, rounds times; each makes b's handler toggle
	// b's port.
	a0, b0 := as[0], bs[0]
	for r := range rounds {
		for srq.Len() < 8 {
			id := uint64(srq.Len())
			if _, err := srq.PostRecv([]RecvWR{{WRID: id, SGL: []SGE{b0.mr.SGE(id*recvSlot, recvSlot)}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := srq.Modify(engine.SRQAttr{Limit: 4}, SRQLimit); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			mustPostSend(t, a0.qp, SendWR{WRID: uint64(r*10 + i), Opcode: WRSend, Flags: SendSignaled, InlineData: payload(uint64(i))})
		}
		pollN(t, a0.scq, 5)
		pollN(t, b0.rcq, 5)
		if !waitFor(func() bool { return lb.count(ofType(EventSRQLimitReached)) == r+1 }) {
			t.Fatalf("round %d: %d SRQ limit events", r, lb.count(ofType(EventSRQLimitReached)))
		}
	}
	// The engine goroutine: an access violation on each pair's responder.
	for i := range pairs {
		mustPostSend(t, as[i].qp, SendWR{WRID: 99, Opcode: WRRDMAWrite, Flags: SendSignaled, InlineData: []byte("x"),
			RemoteAddr: bs[i].mr.Addr(), RKey: bs[i].mr.RKey() ^ 0xff})
	}
	for i := range pairs {
		var wc WC
		if !waitFor(func() bool { return drain(as[i].scq, func(w *WC) { wc = *w }) > 0 }) {
			t.Fatalf("pair %d: the bad WRITE never completed", i)
		}
		checkErrWC(t, wc, 99, WCRemAccessErr, as[i].qp.QPN())
	}
	watchdogWait(t, "the dispatching goroutines", wg.Wait)

	// Everything arrives.
	isPort := ofType(EventPortErr, EventPortActive)
	fromPort := func(p uint8) func(AsyncEvent) bool {
		return func(ev AsyncEvent) bool { return ev.Port == p && !isPort(ev) }
	}
	ofQP := func(qp *QP) func(AsyncEvent) bool { return func(ev AsyncEvent) bool { return ev.QP == qp } }
	if !waitFor(func() bool {
		ok := portChanges(la.filter(isPort)) == 2*toggles && portChanges(lb.filter(isPort)) == 2*rounds &&
			la.count(ofType(EventCQErr)) == overflows && la.count(fromPort(handlerPort)) == int(handlerCalls.Load())
		for g := range dispatchers {
			ok = ok && la.count(fromPort(uint8(10+g))) == perDispatcher
		}
		for i := range pairs {
			ok = ok && lb.count(ofQP(bs[i].qp)) == 2
		}
		return ok
	}) {
		t.Fatalf("events missing:\na: %v\nb: %v", summary(la.filter(func(AsyncEvent) bool { return true })),
			summary(lb.filter(func(AsyncEvent) bool { return true })))
	}
	time.Sleep(20 * time.Millisecond) // nothing more comes

	// In order per source, exactly once.
	checkAlternating(t, "a's port events", dropInitial(la.filter(isPort)), EventPortErr, EventPortActive, 2*toggles)
	checkAlternating(t, "b's port events (from b's handler)", dropInitial(lb.filter(isPort)), EventPortErr, EventPortActive, 2*rounds)
	for g := range dispatchers {
		checkAlternating(t, "dispatcher goroutine", la.filter(fromPort(uint8(10+g))), alternate(0), alternate(1), perDispatcher)
	}
	checkAlternating(t, "completion handler", la.filter(fromPort(handlerPort)), alternate(0), alternate(1), int(handlerCalls.Load()))
	if handlerCalls.Load() == 0 {
		t.Errorf("the completion handler never ran")
	}
	seen := map[*CQ]int{}
	for _, ev := range la.filter(ofType(EventCQErr)) {
		seen[ev.CQ]++
	}
	for i, c := range cqs {
		if seen[c] != 1 {
			t.Errorf("CQ %d: %d CQ_ERR events, want 1", i, seen[c])
		}
	}
	limits := lb.filter(ofType(EventSRQLimitReached))
	if len(limits) != rounds {
		t.Errorf("%d SRQ limit events, want %d", len(limits), rounds)
	}
	for _, ev := range limits {
		if ev.SRQ != srq {
			t.Errorf("SRQ limit event for %p, want %p", ev.SRQ, srq)
		}
	}
	for i := range pairs {
		evs := lb.filter(ofQP(bs[i].qp))
		if len(evs) != 2 || evs[0].Type != EventQPAccessErr || evs[1].Type != EventQPLastWQEReached {
			t.Errorf("pair %d's responder: events %v, want [%v %v]", i, summary(evs), EventQPAccessErr, EventQPLastWQEReached)
		}
	}
}

// alternate is the i-th event type of a source that alternates two types.
func alternate(i int) EventType {
	if i%2 == 0 {
		return engine.EventLIDChange
	}
	return engine.EventPKeyChange
}

// dropInitial drops the PORT_ACTIVE Open raised, if the handler saw it: the port
// starts up, so every change sequence of the test starts with PORT_ERR.
func dropInitial(evs []AsyncEvent) []AsyncEvent {
	if len(evs) > 0 && evs[0].Type == EventPortActive {
		return evs[1:]
	}
	return evs
}

func portChanges(evs []AsyncEvent) int { return len(dropInitial(evs)) }

func checkAlternating(t *testing.T, what string, evs []AsyncEvent, first, second EventType, n int) {
	t.Helper()
	if len(evs) != n {
		t.Errorf("%s: %d events, want %d", what, len(evs), n)
	}
	for i, ev := range evs {
		want := first
		if i%2 == 1 {
			want = second
		}
		if ev.Type != want {
			t.Errorf("%s: event %d is %v, want %v: %v", what, i, ev.Type, want, summary(evs))
			return
		}
	}
}

func summary(evs []AsyncEvent) []string {
	s := make([]string, len(evs))
	for i, ev := range evs {
		s[i] = ev.Type.String()
	}
	return s
}

// TestMID3Reentrancy: completion handlers post new work, query and modify their
// QP and re-arm; an event handler queries, modifies and destroys the objects the
// event names and registers and unregisters event handlers.
func TestMID3Reentrancy(t *testing.T) {
	da, db := memDevices(t)
	const n = 100
	var a, b *endpoint
	done := make(chan struct{})
	var aCalls atomic.Int32
	// a sends message i, b answers it, a sends i+1 when the answer arrives: all from
	// the handlers.
	aHandler := func(c *CQ) {
		aCalls.Add(1)
		fn := func(wc *WC) {
			if wc.Status != WCSuccess {
				if wc.Status != WCWRFlushErr { // the cleanup flushes the last receive
					t.Errorf("a: %+v", *wc)
				}
				return
			}
			if wc.Opcode != WCRecv {
				return
			}
			id, ok := payloadID(a.buf[wc.WRID*recvSlot:][:16])
			if !ok || id != wc.WRID-1 {
				t.Errorf("a: answer %d in receive %d", id, wc.WRID)
			}
			if id == n-1 {
				close(done)
				return
			}
			mustPostRecv(t, a.qp, RecvWR{WRID: id + 2, SGL: []SGE{a.mr.SGE((id+2)*recvSlot, recvSlot)}})
			mustPostSend(t, a.qp, SendWR{WRID: id + 1, Opcode: WRSend, Flags: SendSignaled, InlineData: payload(id + 1)})
			if id%10 == 0 { // control operations from the handler
				attr, _, err := a.qp.Query()
				if err != nil || attr.State != QPSRTS {
					t.Errorf("Query in a completion handler: %v, %v", attr.State, err)
				}
				m := QPAttr{Attr: qpattr.Attr{MinRNRTimer: uint8(1 + id%5)}}
				if err := a.qp.ModifySync(&m, qpattr.AttrMinRNRTimer); err != nil {
					t.Errorf("Modify in a completion handler: %v", err)
				}
			}
		}
		drain(c, fn)
		c.ReqNotify(false)
		drain(c, fn)
	}
	bHandler := func(c *CQ) {
		fn := func(wc *WC) {
			if wc.Status != WCSuccess {
				if wc.Status != WCWRFlushErr { // the cleanup flushes the last receive
					t.Errorf("b: %+v", *wc)
				}
				return
			}
			if wc.Opcode != WCRecv {
				return
			}
			id, ok := payloadID(b.buf[wc.WRID*recvSlot:][:16])
			if !ok {
				t.Errorf("b: %+v: %x", *wc, b.buf[wc.WRID*recvSlot:][:16])
				return
			}
			mustPostRecv(t, b.qp, RecvWR{WRID: wc.WRID + 1, SGL: []SGE{b.mr.SGE((wc.WRID+1)*recvSlot, recvSlot)}})
			mustPostSend(t, b.qp, SendWR{WRID: id, Opcode: WRSend, Flags: SendSignaled, InlineData: payload(id)})
		}
		drain(c, fn)
		c.ReqNotify(false)
		drain(c, fn)
	}
	a, b = rcPair(t, da, db, epOpts{oneCQ: true, scqOpts: CQOptions{Handler: func(c *CQ) { aHandler(c) }}},
		epOpts{oneCQ: true, scqOpts: CQOptions{Handler: func(c *CQ) { bHandler(c) }}})
	// Receive WRID k lands in slot k; a's k answers message k-1, b's k is message k.
	mustPostRecv(t, a.qp, RecvWR{WRID: 1, SGL: []SGE{a.mr.SGE(recvSlot, recvSlot)}})
	mustPostRecv(t, b.qp, RecvWR{WRID: 0, SGL: []SGE{b.mr.SGE(0, recvSlot)}})
	a.scq.ReqNotify(false)
	b.scq.ReqNotify(false)
	mustPostSend(t, a.qp, SendWR{WRID: 0, Opcode: WRSend, Flags: SendSignaled, InlineData: payload(0)})
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatalf("ping-pong driven by handlers stalled after %d handler calls\n%s", aCalls.Load(), stacks())
	}

	// An event handler takes the failed QP to RESET, destroys it with its CQ,
	// replaces itself with another handler.
	va, vb := rcPair(t, da, db, epOpts{}, epOpts{})
	victimDone := make(chan struct{})
	var second eventLog
	var firstAfter atomic.Int32
	var unregFirst, unregSecond func()
	var handled atomic.Bool
	var regMu sync.Mutex // orders the handler's use of unregFirst after its assignment
	closed := make(chan string, 2)
	regMu.Lock()
	unregFirst = db.RegisterEventHandler(func(ev AsyncEvent) {
		if handled.Load() {
			firstAfter.Add(1)
			return
		}
		if ev.Type != EventQPAccessErr || ev.QP != vb.qp {
			return
		}
		handled.Store(true)
		defer close(victimDone)
		qp := ev.QP
		if attr, _, err := qp.Query(); err != nil || attr.State != QPSErr {
			t.Errorf("Query in an event handler: %v, %v; want ERR", attr.State, err)
		}
		if err := qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: QPSReset}}, qpattr.AttrState); err != nil {
			t.Errorf("Modify to RESET in an event handler: %v", err)
		}
		if attr, _, err := qp.Query(); err != nil || attr.State != QPSReset {
			t.Errorf("Query after RESET: %v, %v", attr.State, err)
		}
		// The QP's own handler may destroy it (LT5) but not wait for that: the
		// destroy completes when this handler returns. The CQ's close waits for
		// its last QP (LT8), whose destroy the engine may or may not have done
		// yet; both report through Notify.
		qpOp := qp.Destroy()
		if err := qpOp.Wait(); !errors.Is(err, ErrDeadlock) {
			t.Errorf("waiting in the QP's own event handler for its Destroy: %v, want ErrDeadlock", err)
		}
		qpOp.Notify(func(err error) { closed <- fmt.Sprint("QP destroy: ", err) })
		vb.scq.Close().Notify(func(err error) { closed <- fmt.Sprint("CQ close: ", err) })
		if err := vb.mr.Dereg().Wait(); err != nil {
			t.Errorf("Dereg in an event handler: %v", err)
		}
		regMu.Lock()
		unregSecond = db.RegisterEventHandler(second.handler)
		unregFirst()
		regMu.Unlock()
	})
	regMu.Unlock()
	mustPostSend(t, va.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, InlineData: []byte("x"),
		RemoteAddr: vb.mr.Addr(), RKey: vb.mr.RKey() ^ 0xff})
	select {
	case <-victimDone:
	case <-time.After(deadline):
		t.Fatalf("the event handler did not finish\n%s", stacks())
	}
	var got []string
	for range 2 {
		select {
		case s := <-closed:
			got = append(got, s)
		case <-time.After(deadline):
			t.Fatalf("close completions: %q of 2\n%s", got, stacks())
		}
	}
	if slices.Sort(got); !slices.Equal(got, []string{"CQ close: <nil>", "QP destroy: <nil>"}) {
		t.Errorf("close completions %q", got)
	}
	if _, err := vb.qp.PostSend([]SendWR{{Opcode: WRSend}}); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("PostSend on the QP the handler destroyed: %v", err)
	}
	db.Engine().SetPortState(false)
	if !waitFor(func() bool { return second.count(ofType(EventPortErr)) == 1 }) {
		t.Fatalf("the handler registered from inside a handler did not get PORT_ERR")
	}
	regMu.Lock()
	unregSecond()
	regMu.Unlock()
	if n := firstAfter.Load(); n != 0 {
		t.Errorf("the handler that unregistered itself got %d more events", n)
	}
}

// TestMID5NoCallbackInCallersChain: one goroutine makes every call (Modify,
// PostSend, PostRecv, Poll, ReqNotify, CQ Push past overflow, SetPortState,
// DispatchEvent); no completion handler, OnError or event handler ever runs on it.
func TestMID5NoCallbackInCallersChain(t *testing.T) {
	caller := goid()
	var mu sync.Mutex
	ran := map[string]int{}
	var inChain []string
	note := func(kind string) {
		mu.Lock()
		defer mu.Unlock()
		ran[kind]++
		if goid() == caller {
			inChain = append(inChain, kind+"\n"+stacks())
		}
	}
	da, db := memDevices(t)
	defer da.RegisterEventHandler(func(AsyncEvent) { note("event handler a") })()
	defer db.RegisterEventHandler(func(AsyncEvent) { note("event handler b") })()
	cqHandler := func(kind string) func(*CQ) {
		return func(c *CQ) {
			note(kind)
			c.ReqNotify(false)
		}
	}
	a, b := rcPair(t, da, db, epOpts{scqOpts: CQOptions{Handler: cqHandler("send CQ handler")}},
		epOpts{rcqOpts: CQOptions{Handler: cqHandler("receive CQ handler")}})
	small, err := da.CreateCQ(1, CQOptions{OnError: func(*CQ) { note("OnError") }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { small.Destroy().Wait() }()

	const n = 50
	for i := range n {
		a.scq.ReqNotify(i%2 == 0)
		b.rcq.ReqNotify(i%2 == 1)
		mustPostRecv(t, b.qp, RecvWR{WRID: uint64(i), SGL: []SGE{b.mr.SGE(0, recvSlot)}})
		flags := SendSignaled
		if i%2 == 1 {
			flags |= SendSolicited
		}
		mustPostSend(t, a.qp, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: flags, InlineData: payload(uint64(i))})
		for got := 0; got < 2; {
			k := drain(a.scq, func(*WC) {}) + drain(b.rcq, func(*WC) {})
			if k == 0 {
				time.Sleep(10 * time.Microsecond)
			}
			got += k
		}
		da.Engine().SetPortState(i%2 == 1)
		db.Engine().DispatchEvent(engine.AsyncEvent{Type: engine.EventGIDChange, Port: 1})
		if i%10 == 0 {
			m := QPAttr{Attr: qpattr.Attr{MinRNRTimer: 2}}
			if err := a.qp.ModifySync(&m, qpattr.AttrMinRNRTimer); err != nil {
				t.Fatal(err)
			}
		}
		small.Push(&WC{WRID: uint64(i)}, false)
	}
	if !waitFor(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran["event handler a"] > 0 && ran["event handler b"] > 0 && ran["send CQ handler"] > 0 &&
			ran["receive CQ handler"] > 0 && ran["OnError"] > 0
	}) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("some callbacks never ran: %v", ran)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range inChain {
		t.Errorf("a callback ran in the caller's call chain: %s", s)
	}
}

// TestMID7BlockedHandlerDoesNotStallOtherQPs: while QP A's completion handler and
// device b's event handler are blocked, QP B (other CQs, same devices) moves data
// to completion, A's own completions still reach its CQ, and the engine still
// raises events.
func TestMID7BlockedHandlerDoesNotStallOtherQPs(t *testing.T) {
	da, db := memDevices(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before every cleanup: they wait for the handlers
	cqBlocked, evBlocked := make(chan struct{}), make(chan struct{})
	var cqOnce, evOnce sync.Once
	a1, b1 := rcPair(t, da, db, epOpts{scqOpts: CQOptions{Handler: func(*CQ) {
		cqOnce.Do(func() { close(cqBlocked) })
		<-release
	}}}, epOpts{})
	var evs eventLog
	defer db.RegisterEventHandler(func(ev AsyncEvent) {
		evs.handler(ev)
		if ev.Type == EventPortErr {
			evOnce.Do(func() { close(evBlocked) })
			<-release
		}
	})()
	a2, b2 := rcPair(t, da, db, epOpts{}, epOpts{})
	va, vb := rcPair(t, da, db, epOpts{}, epOpts{})

	a1.scq.ReqNotify(false)
	mustPostRecv(t, b1.qp, RecvWR{WRID: 0, SGL: []SGE{b1.mr.SGE(0, recvSlot)}})
	mustPostSend(t, a1.qp, SendWR{WRID: 0, Opcode: WRSend, Flags: SendSignaled, InlineData: payload(0)})
	watchdogWait(t, "SetPortState", func() { db.Engine().SetPortState(false) })
	for _, c := range []chan struct{}{cqBlocked, evBlocked} {
		select {
		case <-c:
		case <-time.After(deadline):
			t.Fatal("a handler never ran")
		}
	}

	// b's engine raises an event behind the blocked handler.
	mustPostSend(t, va.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, InlineData: []byte("x"),
		RemoteAddr: vb.mr.Addr(), RKey: vb.mr.RKey() ^ 0xff})
	checkErrWC(t, pollN(t, va.scq, 1)[0], 1, WCRemAccessErr, va.qp.QPN())

	// QP B moves data meanwhile.
	const msgs, size = 64, 8192
	fill(a2.buf[:msgs*size], 17)
	for i := range msgs {
		mustPostRecv(t, b2.qp, RecvWR{WRID: uint64(i), SGL: []SGE{b2.mr.SGE(uint64(512<<10+i*size), size)}})
	}
	for i := range msgs {
		off := uint64(i * size)
		mustPostSend(t, a2.qp, SendWR{WRID: uint64(2 * i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{a2.mr.SGE(off, size)}, RemoteAddr: b2.mr.Addr() + off, RKey: b2.mr.RKey()})
		mustPostSend(t, a2.qp, SendWR{WRID: uint64(2*i + 1), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a2.mr.SGE(off, size)}})
	}
	for i, wc := range pollN(t, a2.scq, 2*msgs) {
		want := WC{WRID: uint64(i), Opcode: WCRDMAWrite, ByteLen: size, QPN: a2.qp.QPN()}
		if i%2 == 1 {
			want.Opcode = WCSend
		}
		checkWC(t, wc, want)
	}
	for i, wc := range pollN(t, b2.rcq, msgs) {
		checkWC(t, wc, WC{WRID: uint64(i), Opcode: WCRecv, ByteLen: size, QPN: b2.qp.QPN()})
	}
	checkBytes(t, "RDMA WRITE data", b2.buf[:msgs*size], a2.buf[:msgs*size])
	checkBytes(t, "SEND data", b2.buf[512<<10:512<<10+msgs*size], a2.buf[:msgs*size])

	// A's completions still reach its CQ.
	for i := 1; i <= 8; i++ {
		mustPostRecv(t, b1.qp, RecvWR{WRID: uint64(i), SGL: []SGE{b1.mr.SGE(0, recvSlot)}})
		mustPostSend(t, a1.qp, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, InlineData: payload(uint64(i))})
	}
	if got := pollN(t, a1.scq, 9); got[8].WRID != 8 {
		t.Fatalf("A's completions: %+v", got)
	}
	if n := evs.count(ofType(EventQPAccessErr)); n != 0 {
		t.Fatalf("an event was delivered past the blocked handler")
	}
	unblock()
	if !waitFor(func() bool { return evs.count(ofType(EventQPAccessErr)) == 1 }) {
		t.Fatalf("the queued QP_ACCESS_ERR never arrived after the handler returned")
	}
}
