// The control contract and object lifetimes: the races and ordering faults of
// issue 11, and the two closes (libibverbs' EBUSY, NDKPI's pending close).

package engine

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/goid"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
)

const lifetimeDeadline = 30 * time.Second

var cqWC cq.WC

// waitOp waits for op with a generous deadline that only bounds a hang.
func waitOp(t testing.TB, op *Op) error {
	t.Helper()
	select {
	case <-op.Done():
		return op.Err()
	case <-time.After(lifetimeDeadline):
		t.Fatalf("the Op did not complete")
		return nil
	}
}

// A Dealloc racing a RegMR either refuses with ErrBusy or wins, and then the
// RegMR fails: never an MR in a PD whose Dealloc succeeded. The old check-then-add
// (dead flag, then refs) let 11 in 200,000 rounds through.
func TestDeallocRacesRegMR(t *testing.T) {
	p := newPair(t, pairOpts{})
	buf := make([]byte, 64)
	rounds := 20000 // a check-then-add race shows within a few hundred
	if testing.Short() {
		rounds = 2000
	}
	for i := range rounds {
		pd, err := p.a.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		var m *MR
		var regErr, deallocErr error
		var wg sync.WaitGroup
		wg.Go(func() { m, regErr = pd.RegMR(buf, 0, mr.LocalWrite) })
		wg.Go(func() { deallocErr = pd.Dealloc().Wait() })
		wg.Wait()
		switch {
		case deallocErr == nil && regErr == nil:
			t.Fatalf("round %d: an MR was registered in a PD whose Dealloc succeeded", i)
		case deallocErr == nil:
			if !errors.Is(regErr, ErrClosed) {
				t.Fatalf("round %d: RegMR in a deallocated PD: %v, want ErrClosed", i, regErr)
			}
		case !errors.Is(deallocErr, ErrBusy) || regErr != nil:
			t.Fatalf("round %d: Dealloc %v, RegMR %v", i, deallocErr, regErr)
		default:
			if err := m.Dereg().Wait(); err != nil {
				t.Fatal(err)
			}
			if err := pd.Dealloc().Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r, _ := p.a.Resources(); r.PDs != 0 || len(r.MRs) != 0 {
		t.Fatalf("after the rounds: %d PDs, %d MRs", r.PDs, len(r.MRs))
	}
}

// SRQ.Destroy racing CreateQP on it has the same shape: never a QP attached to a
// destroyed SRQ.
func TestSRQDestroyRacesCreateQP(t *testing.T) {
	p := newPair(t, pairOpts{})
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.a.CreateCQ(16, CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rounds := 5000
	if testing.Short() {
		rounds = 500
	}
	for i := range rounds {
		srq, err := pd.CreateSRQ(SRQAttr{MaxWR: 4})
		if err != nil {
			t.Fatal(err)
		}
		var qp *QP
		var createErr, destroyErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			qp, createErr = pd.CreateQP(QPInitAttr{Type: qpattr.RC, SendCQ: c, RecvCQ: c, SRQ: srq,
				Cap: qpattr.Cap{MaxSendWR: 1, MaxSendSGE: 1}})
		})
		wg.Go(func() { destroyErr = srq.Destroy().Wait() })
		wg.Wait()
		switch {
		case destroyErr == nil && createErr == nil:
			t.Fatalf("round %d: a QP was attached to an SRQ whose Destroy succeeded", i)
		case destroyErr == nil:
			if !errors.Is(createErr, ErrClosed) {
				t.Fatalf("round %d: CreateQP on a destroyed SRQ: %v, want ErrClosed", i, createErr)
			}
		case !errors.Is(destroyErr, ErrBusy) || createErr != nil:
			t.Fatalf("round %d: Destroy %v, CreateQP %v", i, destroyErr, createErr)
		default:
			if err := qp.Destroy().Wait(); err != nil {
				t.Fatal(err)
			}
			if err := srq.Destroy().Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc().Wait(); err != nil {
		t.Fatal(err)
	}
}

// No event of a QP is delivered after its Destroy().Wait() returned (LT14): here
// LAST_WQE_REACHED, queued behind a handler that is still busy when the QP is
// destroyed. The old Destroy completed on the engine goroutine and the event
// came afterwards.
func TestNoEventAfterDestroy(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	destroyed := false
	var late []AsyncEvent
	events := func(ev AsyncEvent) {
		if ev.Type == EventPortActive {
			<-release // hold the queue until the QP is destroyed
			return
		}
		mu.Lock()
		if destroyed && ev.QP != nil {
			late = append(late, ev)
		}
		mu.Unlock()
	}
	p := newPair(t, pairOpts{events: events})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the devices close, which wait for the handler
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(SRQAttr{MaxWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, p.a, nodeOpts{pd: pd, srq: srq})
	for _, s := range []qpattr.State{qpattr.Init, qpattr.Err} {
		a := QPAttr{Attr: qpattr.Attr{State: s, Port: 1}}
		mask := qpattr.AttrState
		if s == qpattr.Init {
			mask |= qpattr.AttrPKeyIndex | qpattr.AttrPort | qpattr.AttrAccessFlags
		}
		if err := n.qp.ModifySync(&a, mask); err != nil {
			t.Fatalf("to %v: %v", s, err)
		}
	}
	// LAST_WQE_REACHED is queued behind the held PORT_ACTIVE.
	if err := waitOp(t, n.qp.Destroy()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	destroyed = true
	mu.Unlock()
	free()
	if err := waitOp(t, p.a.Sync()); err != nil {
		t.Fatal(err)
	}
	// An event queued after everything above is delivered after it: once it has
	// been, nothing of the QP can come any more.
	got := make(chan struct{})
	p.a.DispatchEvent(AsyncEvent{Type: EventGIDChange, Port: 1})
	op := p.a.Sync()
	op.Notify(func(error) { close(got) })
	select {
	case <-got:
	case <-time.After(lifetimeDeadline):
		t.Fatal("the Op callback did not run")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(late) != 0 {
		t.Fatalf("events after Destroy().Wait() returned: %v", late[0].Type)
	}
	if err := srq.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
}

// A close waits for the event of its object that is being delivered, and the
// object's own handler cannot wait for it (LT13, LT11-like): Wait fails with
// ErrDeadlock there and the Op completes when the handler returns.
func TestCloseWaitsForInFlightEvent(t *testing.T) {
	type result struct {
		waitErr error
		op      *Op
	}
	res := make(chan result, 1)
	var srq *SRQ
	var once sync.Once
	p := newPair(t, pairOpts{events: func(ev AsyncEvent) {
		if ev.Type != EventSRQLimitReached {
			return
		}
		once.Do(func() {
			op := ev.SRQ.Close()
			res <- result{op.Wait(), op}
		})
	}})
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if srq, err = pd.CreateSRQ(SRQAttr{MaxWR: 4, Limit: 1}); err != nil {
		t.Fatal(err)
	}
	// A QP on the SRQ takes its only WQE: the limit event.
	a, b := newNode(t, p.a, nodeOpts{pd: pd, srq: srq}), newNode(t, p.b, nodeOpts{})
	connect(t, a, b, connOpts{})
	m, err := pd.RegMR(make([]byte, 64), 0, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srq.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{m.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	send(t, b, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("x")})
	var r result
	select {
	case r = <-res:
	case <-time.After(lifetimeDeadline):
		t.Fatal("no SRQ limit event")
	}
	if !errors.Is(r.waitErr, ErrDeadlock) {
		t.Fatalf("Wait for the SRQ's close in its own event handler: %v, want ErrDeadlock", r.waitErr)
	}
	// The close is pending on the QP, its child (LT8).
	select {
	case <-r.op.Done():
		t.Fatal("the SRQ's close completed while a QP uses it")
	default:
	}
	if _, err := pd.CreateQP(QPInitAttr{Type: qpattr.RC, SendCQ: a.cq, RecvCQ: a.cq, SRQ: srq}); !errors.Is(err, ErrClosed) {
		t.Fatalf("CreateQP on a closing SRQ: %v, want ErrClosed", err)
	}
	if err := waitOp(t, a.qp.Destroy()); err != nil {
		t.Fatal(err)
	}
	if err := waitOp(t, r.op); err != nil {
		t.Fatalf("the SRQ's close: %v", err)
	}
	if err := srq.Destroy().Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Destroy after Close: %v, want ErrClosed", err)
	}
	m.Dereg()
}

// NDKPI's pending close (LT8): a PD closed while an MR and a CQ's QP live
// completes only when the last of them is gone; nothing can be created in it
// meanwhile. libibverbs' Dealloc answers ErrBusy instead and changes nothing.
func TestPendingCloseCompletesWithLastChild(t *testing.T) {
	p := newPair(t, pairOpts{})
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, p.a, nodeOpts{pd: pd})
	if err := pd.Dealloc().Wait(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Dealloc of a PD in use: %v, want ErrBusy", err)
	}
	last, err := pd.RegMR(make([]byte, 8), 0, 0)
	if err != nil {
		t.Fatalf("Dealloc's ErrBusy changed the PD: %v", err)
	}
	cqClose := n.cq.Close()
	pdClose := pd.Close()
	if _, err := pd.RegMR(make([]byte, 8), 0, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("RegMR in a closing PD: %v, want ErrClosed", err)
	}
	if err := pd.Close().Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a second Close: %v, want ErrClosed", err)
	}
	if _, err := p.a.CreateCQ(4, CQOptions{}); err != nil {
		t.Fatalf("the device's other children are not affected: %v", err)
	}
	for _, step := range []func() *Op{n.qp.Destroy, n.mr.Dereg} {
		select {
		case <-pdClose.Done():
			t.Fatal("the PD's close completed while children live")
		default:
		}
		if err := waitOp(t, step()); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitOp(t, cqClose); err != nil {
		t.Fatalf("the CQ's close after its QP: %v", err)
	}
	select {
	case <-pdClose.Done():
		t.Fatal("the PD's close completed while an MR lives")
	default:
	}
	if err := waitOp(t, last.Dereg()); err != nil {
		t.Fatal(err)
	}
	if err := waitOp(t, pdClose); err != nil {
		t.Fatalf("the PD's close after its last child: %v", err)
	}
	if r, _ := p.a.Resources(); r.PDs != 0 {
		t.Fatalf("%d PDs after the close", r.PDs)
	}
}

// Op.Notify runs the callback once, after completion, on RoutineEvents: not the
// caller's goroutine, also for an Op that completed before Notify (LT2, MID5).
func TestOpNotifyRunsOffTheCallersGoroutine(t *testing.T) {
	p := newPair(t, pairOpts{})
	caller := goid.ID()
	type call struct {
		gid uint64
		err error
	}
	got := make(chan call, 2)
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	done := pd.Dealloc()
	if done.Err() != nil {
		t.Fatal(done.Err())
	}
	done.Notify(func(err error) { got <- call{goid.ID(), err} })
	n := newNode(t, p.a, nodeOpts{})
	pending := n.qp.Modify(&QPAttr{Attr: qpattr.Attr{State: qpattr.Reset}}, qpattr.AttrState)
	pending.Notify(func(err error) { got <- call{goid.ID(), err} })
	for range 2 {
		select {
		case c := <-got:
			if c.gid == caller || c.err != nil {
				t.Fatalf("callback on goroutine %d (caller %d) with %v", c.gid, caller, c.err)
			}
		case <-time.After(lifetimeDeadline):
			t.Fatal("a Notify callback did not run")
		}
	}
}

// Device.Close waits for every CQ handler goroutine (LT12): a handler still
// running when Close is called has returned when Close returns. The old Close
// returned at once.
func TestDeviceCloseWaitsForCQHandlers(t *testing.T) {
	p := newPair(t, pairOpts{})
	entered := make(chan struct{})
	release := make(chan struct{})
	var returned sync.WaitGroup
	returned.Add(1)
	var once sync.Once
	c, err := p.a.CreateCQ(4, CQOptions{Handler: func(*CQ) {
		once.Do(func() {
			close(entered)
			<-release
			returned.Done()
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	c.Push(&cqWC, false)
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- p.a.Close() }()
	select {
	case err := <-closed:
		close(release)
		t.Fatalf("Close returned (%v) while a CQ handler ran", err)
	case <-time.After(100 * time.Millisecond): // a bug shows here; a pass never depends on it
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	returned.Wait() // already done: Close waited for it
	if err := c.ReqNotify(false); err != nil {
		t.Fatalf("the CQ stays usable for polling after the device closed: %v", err)
	}
}

// A blocking close from the device's own callbacks fails with ErrDeadlock rather
// than hang (LT11), and leaves the device open.
func TestDeviceCloseFromCallbackIsDeadlock(t *testing.T) {
	got := make(chan error, 2)
	var p *pair
	ready := make(chan struct{})
	p = newPair(t, pairOpts{events: func(ev AsyncEvent) {
		if ev.Type == EventGIDChange {
			<-ready
			got <- p.a.Close()
		}
	}})
	close(ready)
	p.a.DispatchEvent(AsyncEvent{Type: EventGIDChange, Port: 1})
	c, err := p.a.CreateCQ(4, CQOptions{Handler: func(*CQ) { got <- p.a.Close() }})
	if err != nil {
		t.Fatal(err)
	}
	c.ReqNotify(false)
	c.Push(&cqWC, false)
	for range 2 {
		select {
		case err := <-got:
			if !errors.Is(err, ErrDeadlock) {
				t.Fatalf("Close from a callback: %v, want ErrDeadlock", err)
			}
		case <-time.After(lifetimeDeadline):
			t.Fatal("Close from a callback hung")
		}
	}
	if _, err := p.a.AllocPD(); err != nil {
		t.Fatalf("the refused Close closed the device: %v", err)
	}
}

// Misuse of the control operations returns errors wrapping a sentinel: double
// destroys, objects of another PD or device.
func TestControlMisuse(t *testing.T) {
	p := newPair(t, pairOpts{})
	pd1, _ := p.a.AllocPD()
	pd2, _ := p.a.AllocPD()
	srq, err := pd1.CreateSRQ(SRQAttr{MaxWR: 2})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := p.a.CreateCQ(4, CQOptions{})
	if _, err := pd2.CreateQP(QPInitAttr{Type: qpattr.RC, SendCQ: c, RecvCQ: c, SRQ: srq}); !errors.Is(err, ErrWrongPD) {
		t.Errorf("QP with another PD's SRQ: %v", err)
	}
	m, _ := pd1.RegMR(make([]byte, 8), 0, 0)
	ah, err := pd1.CreateAH(AV{DGID: p.b.GIDs()[0]})
	if err != nil {
		t.Fatal(err)
	}
	for name, close := range map[string]func() *Op{"MR": m.Dereg, "AH": ah.Destroy, "SRQ": srq.Destroy,
		"CQ": c.Destroy, "PD": pd2.Dealloc} {
		if err := close().Wait(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := close().Wait(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s closed twice: %v, want ErrClosed", name, err)
		}
	}
	if err := pd1.Dealloc().Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd1.CreateSRQ(SRQAttr{MaxWR: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("SRQ in a deallocated PD: %v", err)
	}
	p.b.Close()
	if _, err := p.b.AllocPD(); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocPD on a closed device: %v", err)
	}
	if _, err := p.b.CreateCQ(1, CQOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateCQ on a closed device: %v", err)
	}
}
