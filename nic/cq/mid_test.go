// The IB midlayer locking rules (shared/reference/RULES.md, MID1-MID7) as they
// apply to completion queues.

package cq

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/goid"
)

// MID1, MID3: Push, Poll and ReqNotify from many goroutines at once never block,
// even while the CQ's handler is blocked, while nobody reads its channel, and
// while the CQ is resized. The watchdog only bounds a hang: the test passes as
// soon as every goroutine has finished, however long that takes under -race.
func TestMID1PushPollReqNotifyNeverBlock(t *testing.T) {
	unblock := make(chan struct{})
	entered := make(chan struct{}, 1)
	blocked := mustNew(t, MaxCQE, Options{Handler: func(*CQ) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-unblock // a handler that never returns until the test lets it
	}})
	t.Cleanup(func() { close(unblock) }) // before blocked's own cleanup (LIFO)

	ch := NewChannel() // nobody calls GetEvent
	unread := mustNew(t, MaxCQE, Options{Channel: ch})
	t.Cleanup(func() {
		closeAndWait(t, unread)
		if err := ch.Close(); err != nil {
			t.Error(err)
		}
	})

	// Park the handler first.
	_ = blocked.ReqNotify(false)
	blocked.Push(wcID(0), false)
	select {
	case <-entered:
	case <-time.After(watchdog):
		t.Fatal("handler never entered")
	}

	const workers, ops = 4, 2000
	var wg sync.WaitGroup
	for _, c := range []*CQ{blocked, unread} {
		for w := range workers {
			wg.Go(func() { // producer
				for i := range ops {
					c.Push(wcID(uint64(w*ops+i)), i%3 == 0)
				}
			})
			wg.Go(func() { // poller
				var buf [16]WC
				for range ops {
					c.Poll(buf[:])
				}
			})
			wg.Go(func() { // arming
				for i := range ops {
					_ = c.ReqNotify(i%2 == 0)
				}
			})
		}
		wg.Go(func() { // resizer: always big enough for everything pushed
			for i := range 50 {
				_ = c.Resize(MaxCQE/2 + i)
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(watchdog):
		t.Fatalf("Push/Poll/ReqNotify blocked for %v:\n%s", watchdog, stacks())
	}
	for _, c := range []*CQ{blocked, unread} {
		if s := c.Stats(); s.Lost != 0 {
			t.Errorf("lost completions: %+v", s)
		}
	}
}

// MID4: N producers and M pollers on one small CQ; every WRID is delivered exactly
// once, and within each Poll batch the WRIDs of one producer are in the order
// they were pushed, across concurrent resizes. Producers take credits so that
// they never overrun the CQ, as QPs sized within the CQ's depth never do.
func TestMID4ConcurrentPollersLoseNothing(t *testing.T) {
	const (
		producers = 4
		pollers   = 4
		perProd   = 5000
		credit    = 511 // the smallest depth the resizer uses
		total     = producers * perProd
	)
	c := mustNew(t, credit, Options{})
	var credits atomic.Int64
	credits.Store(credit)
	seen := make([]atomic.Uint32, total)
	var polled atomic.Int64
	var disorder atomic.Int64

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProd {
				for {
					if n := credits.Load(); n > 0 && credits.CompareAndSwap(n, n-1) {
						break
					}
					time.Sleep(time.Microsecond) // two cores: let a poller run
				}
				id := uint64(p*perProd + i)
				if !c.Push(&WC{WRID: id, QPN: uint32(p)}, false) {
					t.Errorf("Push(%d) overflowed", id)
					return
				}
			}
		})
	}
	stopResize := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Go(func() {
		depths := []int{credit, 1023, 2047, 700}
		for i := 0; ; i++ {
			select {
			case <-stopResize:
				return
			default:
			}
			if err := c.Resize(depths[i%len(depths)]); err != nil {
				t.Errorf("Resize: %v", err)
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	for range pollers {
		wg.Go(func() {
			var buf [32]WC
			for polled.Load() < total {
				n := c.Poll(buf[:])
				if n == 0 {
					time.Sleep(time.Microsecond)
					continue
				}
				var last [producers]int64
				for p := range last {
					last[p] = -1
				}
				for _, wc := range buf[:n] {
					seen[wc.WRID].Add(1)
					if int64(wc.WRID) <= last[wc.QPN] {
						disorder.Add(1)
					}
					last[wc.QPN] = int64(wc.WRID)
				}
				polled.Add(int64(n))
				credits.Add(int64(n))
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(watchdog):
		t.Fatalf("stuck at %d of %d completions:\n%s", polled.Load(), total, stacks())
	}
	close(stopResize)
	rwg.Wait()
	for id := range seen {
		if n := seen[id].Load(); n != 1 {
			t.Errorf("WRID %d delivered %d times, want 1", id, n)
		}
	}
	if n := disorder.Load(); n != 0 {
		t.Errorf("%d completions out of push order within a Poll batch", n)
	}
	if s := c.Stats(); s.Completions != total || s.Polled != total || c.Len() != 0 {
		t.Errorf("Stats %+v, Len %d; want %d pushed and polled, none left", s, c.Len(), total)
	}
}

// MID5: the handler and OnError never run inside the caller's Push, Poll or
// ReqNotify call chain. The test goroutine marks itself while inside those calls;
// the callbacks compare their goroutine id with the caller's.
func TestMID5HandlerNeverInCallersCallChain(t *testing.T) {
	caller := goid.ID()
	var inside atomic.Bool   // set while the test goroutine is inside Push/Poll/ReqNotify
	var inChain atomic.Int64 // callbacks that ran on the caller's goroutine inside a call
	var sameGoroutine atomic.Int64
	var calls atomic.Int64
	errDone := make(chan struct{})
	check := func() {
		calls.Add(1)
		if goid.ID() == caller {
			sameGoroutine.Add(1)
			if inside.Load() {
				inChain.Add(1)
			}
		}
	}
	c := mustNew(t, 63, Options{
		Handler: func(c *CQ) {
			check()
			_ = c.ReqNotify(false) // the usual handler: re-arm, then poll
			var buf [8]WC
			for c.Poll(buf[:]) > 0 {
			}
		},
		OnError: func(*CQ) { check(); close(errDone) },
	})
	call := func(f func()) { inside.Store(true); f(); inside.Store(false) }
	var buf [2]WC
	const rounds = 300
	for i := range rounds {
		// Each round raises one event from inside the caller's calls and waits
		// for its callback, so every callback had the chance to run inline.
		before := calls.Load()
		call(func() { _ = c.ReqNotify(i%2 == 0) })
		call(func() { c.Poll(buf[:]) })
		call(func() { c.Push(wcID(uint64(i)), true) })
		deadline := time.Now().Add(watchdog)
		for calls.Load() == before {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no callback", i)
			}
			time.Sleep(time.Microsecond)
		}
	}
	// Overflow to raise the error event from Push as well. The handler drains
	// concurrently, so push until a Push is refused.
	for ok := true; ok; {
		call(func() { ok = c.Push(wcID(0), false) })
	}
	select {
	case <-errDone:
	case <-time.After(watchdog):
		t.Fatal("OnError not called")
	}
	closeAndWait(t, c)
	if calls.Load() < rounds+1 {
		t.Fatalf("%d callbacks, want at least %d", calls.Load(), rounds+1)
	}
	if n := inChain.Load(); n != 0 {
		t.Errorf("%d callbacks ran inside the caller's Push/Poll/ReqNotify", n)
	}
	if n := sameGoroutine.Load(); n != 0 {
		t.Errorf("%d callbacks ran on the caller's goroutine", n)
	}
	t.Logf("%d callbacks, all on the dispatcher goroutine", calls.Load())
}

// MID6: at most one handler call per CQ at a time, while several producers push
// and several goroutines arm the CQ as fast as they can.
func TestMID6OneHandlerPerCQAtATime(t *testing.T) {
	var inflight, maxInflight, calls atomic.Int64
	c := mustNew(t, MaxCQE, Options{Handler: func(c *CQ) {
		n := inflight.Add(1)
		for {
			m := maxInflight.Load()
			if n <= m || maxInflight.CompareAndSwap(m, n) {
				break
			}
		}
		calls.Add(1)
		_ = c.ReqNotify(false)
		var buf [16]WC
		for c.Poll(buf[:]) > 0 {
		}
		time.Sleep(10 * time.Microsecond) // widen the window for an overlap
		inflight.Add(-1)
	}})
	_ = c.ReqNotify(false)
	const wantCalls = 300
	deadline := time.Now().Add(watchdog)
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Go(func() {
			for i := 0; calls.Load() < wantCalls && time.Now().Before(deadline); i++ {
				if c.Len() > 1000 { // keep well inside the CQ: no overflow
					time.Sleep(time.Microsecond)
					continue
				}
				c.Push(wcID(uint64(p<<32|i)), false)
			}
		})
	}
	wg.Go(func() {
		for calls.Load() < wantCalls && time.Now().Before(deadline) {
			_ = c.ReqNotify(false)
		}
	})
	wg.Wait()
	closeAndWait(t, c)
	if m := maxInflight.Load(); m > 1 {
		t.Errorf("%d handler calls ran at once on one CQ, want at most 1", m)
	}
	if calls.Load() < wantCalls {
		t.Errorf("only %d handler calls in %v, want %d", calls.Load(), watchdog, wantCalls)
	}
	if s := c.Stats(); s.Lost != 0 {
		t.Errorf("lost completions: %+v", s)
	}
	t.Logf("%d handler calls, max in flight %d", calls.Load(), maxInflight.Load())
}

// MID7: a handler blocked on CQ A delays neither the handler of CQ B nor Push on
// A itself.
func TestMID7BlockingHandlerDoesNotStallOtherCQs(t *testing.T) {
	release := make(chan struct{})
	enteredA := make(chan struct{})
	var once sync.Once
	a := mustNew(t, 63, Options{Handler: func(*CQ) {
		once.Do(func() { close(enteredA) })
		<-release
	}})
	// Cleanups run last-in first-out: A's handler is released before A closes.
	t.Cleanup(func() { close(release) })
	gotB := make(chan struct{}, 10)
	b := mustNew(t, 63, Options{Handler: func(c *CQ) {
		_ = c.ReqNotify(false) // re-arm before signalling: the next push fires
		gotB <- struct{}{}
	}})

	_ = a.ReqNotify(false)
	a.Push(wcID(1), false)
	select {
	case <-enteredA:
	case <-time.After(watchdog):
		t.Fatal("handler A never ran")
	}
	// A's handler is now blocked. B's events still flow, several times over.
	_ = b.ReqNotify(false)
	for i := range 3 {
		b.Push(wcID(uint64(i)), false)
		select {
		case <-gotB:
		case <-time.After(watchdog):
			t.Fatalf("handler B event %d stalled behind blocked handler A", i)
		}
	}
	// And A itself still takes completions and arming without blocking.
	for i := range 10 {
		_ = a.ReqNotify(false)
		if !a.Push(wcID(uint64(10+i)), false) {
			t.Fatal("Push on A failed while its handler is blocked")
		}
	}
}

// A handler may close its own CQ (LT5 in the NDK words): no deadlock, and Done
// closes once it has returned.
func TestHandlerMayCloseItsCQ(t *testing.T) {
	closed := make(chan error, 1)
	c, err := New(7, Options{Handler: func(c *CQ) {
		closed <- c.Close()
		// Still safe to use after closing: it answers, it doesn't crash.
		c.Push(wcID(9), false)
		c.Poll(make([]WC, 1))
	}})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.ReqNotify(false)
	c.Push(wcID(1), false)
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close from the handler: %v", err)
		}
	case <-time.After(watchdog):
		t.Fatal("handler not called")
	}
	select {
	case <-c.Done():
	case <-time.After(watchdog):
		t.Fatal("Done not closed after the handler closed the CQ")
	}
}

// A consumer loop in the style of ibv_get_cq_event(3): get, ack, re-arm, poll to
// empty. With producers running concurrently no completion is stranded: every
// one is polled without a final sweep outside the loop.
func TestChannelConsumerLoopStrandsNothing(t *testing.T) {
	ch := NewChannel()
	c := mustNew(t, MaxCQE, Options{Channel: ch})
	const total = 20000
	_ = c.ReqNotify(false)
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			for i := range total / 2 {
				c.Push(wcID(uint64(p*total/2+i)), false)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	got := 0
	var buf [64]WC
	for got < total {
		ec, err := ch.GetEvent(ctx)
		if err != nil {
			t.Fatalf("GetEvent after %d of %d completions: %v", got, total, err)
		}
		ec.AckEvents(1)
		if err := ec.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		for {
			n := ec.Poll(buf[:])
			got += n
			if n < len(buf) {
				break
			}
		}
	}
	wg.Wait()
	// Events raised after the last poll are still owed an acknowledgement.
	drainEvents(t, ch)
	closeAndWait(t, c)
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
}
