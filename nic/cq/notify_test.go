// Notification: one-shot arming, solicited-only arming, completion channels and
// handlers.

package cq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// expired is a context that is already done: GetEvent with it returns a queued
// event or ctx.Err() without waiting.
func expired() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// drainEvents takes every event queued on ch without waiting, acknowledges it and
// counts it by CQ.
func drainEvents(t testing.TB, ch *Channel) map[*CQ]int {
	t.Helper()
	got := map[*CQ]int{}
	for {
		c, err := ch.GetEvent(expired())
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("GetEvent: %v", err)
			}
			return got
		}
		c.AckEvents(1)
		got[c]++
	}
}

func newChannelCQ(t *testing.T, cqe int) (*Channel, *CQ) {
	t.Helper()
	ch := NewChannel()
	c := mustNew(t, cqe, Options{Channel: ch})
	t.Cleanup(func() {
		closeAndWait(t, c)
		if err := ch.Close(); err != nil {
			t.Errorf("channel Close: %v", err)
		}
	})
	return ch, c
}

func TestReqNotifyIsOneShot(t *testing.T) {
	ch, c := newChannelCQ(t, 63)
	pushN(t, c, 0, 3)
	if n := drainEvents(t, ch)[c]; n != 0 {
		t.Errorf("unarmed CQ raised %d events, want 0", n)
	}
	for range 3 { // arming twice before the event is still one event
		if err := c.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
	}
	pushN(t, c, 3, 5)
	if n := drainEvents(t, ch)[c]; n != 1 {
		t.Errorf("armed CQ raised %d events for 5 pushes, want 1", n)
	}
	if err := c.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	pushN(t, c, 8, 1)
	if n := drainEvents(t, ch)[c]; n != 1 {
		t.Errorf("re-armed CQ raised %d events, want 1", n)
	}
	if s := c.Stats(); s.Events != 2 {
		t.Errorf("Stats.Events = %d, want 2", s.Events)
	}
}

// ibv_get_cq_event(3): completions queued before the arming do not raise an
// event; the consumer polls after arming.
func TestReqNotifyIgnoresQueuedCompletions(t *testing.T) {
	ch, c := newChannelCQ(t, 15)
	pushN(t, c, 0, 4)
	for _, sol := range []bool{false, true} {
		if err := c.ReqNotify(sol); err != nil {
			t.Fatal(err)
		}
	}
	if n := drainEvents(t, ch)[c]; n != 0 {
		t.Errorf("arming a non-empty CQ raised %d events, want 0", n)
	}
	if c.Len() != 4 {
		t.Errorf("Len = %d, want 4", c.Len())
	}
}

// ibv_req_notify_cq(3): with solicited_only an event comes for a completion of a
// message with SE set, or for one whose status is not success.
func TestReqNotifySolicitedOnly(t *testing.T) {
	for _, tt := range []struct {
		name      string
		status    Status
		solicited bool
		want      int
	}{
		{"unsolicited success", Success, false, 0},
		{"solicited success", Success, true, 1},
		{"unsolicited error", RemAccessErr, false, 1},
		{"flush", WRFlushErr, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ch, c := newChannelCQ(t, 15)
			if err := c.ReqNotify(true); err != nil {
				t.Fatal(err)
			}
			c.Push(&WC{WRID: 1, Status: tt.status, Opcode: Recv}, tt.solicited)
			if n := drainEvents(t, ch)[c]; n != tt.want {
				t.Errorf("%d events, want %d", n, tt.want)
			}
			if tt.want == 0 { // still armed: the next solicited one fires
				c.Push(&WC{WRID: 2, Opcode: Recv}, true)
				if n := drainEvents(t, ch)[c]; n != 1 {
					t.Errorf("then solicited push: %d events, want 1", n)
				}
			}
		})
	}
}

// rxe ORs the arming bits: a later next-completion arming widens a solicited one,
// a later solicited one does not narrow a next-completion one.
func TestReqNotifyWidensNeverNarrows(t *testing.T) {
	ch, c := newChannelCQ(t, 15)
	_ = c.ReqNotify(true)
	_ = c.ReqNotify(false)
	pushN(t, c, 0, 1)
	if n := drainEvents(t, ch)[c]; n != 1 {
		t.Errorf("solicited then next, unsolicited push: %d events, want 1", n)
	}
	_ = c.ReqNotify(false)
	_ = c.ReqNotify(true)
	pushN(t, c, 1, 1)
	if n := drainEvents(t, ch)[c]; n != 1 {
		t.Errorf("next then solicited, unsolicited push: %d events, want 1", n)
	}
}

func TestChannelGetEventAndAck(t *testing.T) {
	ch := NewChannel()
	a := mustNew(t, 7, Options{Channel: ch})
	b := mustNew(t, 7, Options{Channel: ch})
	t.Cleanup(func() {
		closeAndWait(t, a)
		closeAndWait(t, b)
		if err := ch.Close(); err != nil {
			t.Error(err)
		}
	})
	// a fires twice, b once; events come out a, b, a: a CQ with more events goes
	// to the back after each one.
	for _, c := range []*CQ{a, b, a} {
		if err := c.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		pushN(t, c, 0, 1)
	}
	var got []*CQ
	for range 3 {
		c, err := ch.GetEvent(expired())
		if err != nil {
			t.Fatalf("GetEvent: %v", err)
		}
		got = append(got, c)
	}
	if got[0] != a || got[1] != b || got[2] != a {
		t.Errorf("event order: got a=%v b=%v a=%v", got[0] == a, got[1] == b, got[2] == a)
	}
	if _, err := ch.GetEvent(expired()); !errors.Is(err, context.Canceled) {
		t.Errorf("GetEvent on an empty channel with a done ctx: %v, want context.Canceled", err)
	}
	if a.UnackedEvents() != 2 || b.UnackedEvents() != 1 {
		t.Errorf("unacked: a %d b %d, want 2 1", a.UnackedEvents(), b.UnackedEvents())
	}
	// Close refuses while events are unacknowledged, as ibv_destroy_cq waits.
	if err := a.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with 2 unacked events: %v, want ErrBusy", err)
	}
	a.AckEvents(1)
	if err := a.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with 1 unacked event: %v, want ErrBusy", err)
	}
	a.AckEvents(1) // events may be acked in several calls
	if err := a.Close(); err != nil {
		t.Errorf("Close with every event acked: %v", err)
	}
	if err := ch.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("channel Close with an open CQ: %v, want ErrBusy", err)
	}
	b.AckEvents(1)
}

func TestAckEventsMisusePanics(t *testing.T) {
	ch, c := newChannelCQ(t, 7)
	_ = c.ReqNotify(false)
	pushN(t, c, 0, 1)
	if _, err := ch.GetEvent(expired()); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AckEvents(%d) with 1 outstanding did not panic", n)
				}
			}()
			c.AckEvents(n)
		}()
	}
	c.AckEvents(1)
	plain := mustNew(t, 1, Options{})
	plain.AckEvents(0) // acknowledging none is always allowed (cleanup code does it)
	defer func() {
		if recover() == nil {
			t.Error("AckEvents(1) on a CQ without channel did not panic")
		}
	}()
	plain.AckEvents(1)
}

// Closing a CQ discards its events still queued on the channel (the kernel's
// ib_uverbs_release_ucq), leaving other CQs' events in place.
func TestCloseDiscardsUndeliveredEvents(t *testing.T) {
	ch := NewChannel()
	var cqs [3]*CQ
	for i := range cqs {
		cqs[i] = mustNew(t, 7, Options{Channel: ch})
	}
	t.Cleanup(func() {
		for _, c := range cqs {
			closeAndWait(t, c)
		}
		if err := ch.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, c := range []*CQ{cqs[0], cqs[1], cqs[2], cqs[1]} {
		_ = c.ReqNotify(false)
		pushN(t, c, 0, 1)
	}
	if err := cqs[1].Close(); err != nil { // middle of the ready list
		t.Fatal(err)
	}
	if err := cqs[2].Close(); err != nil { // tail
		t.Fatal(err)
	}
	// A Push that fired just before Close delivers its event after it: dropped.
	ch.post(cqs[1])
	got := drainEvents(t, ch)
	if len(got) != 1 || got[cqs[0]] != 1 {
		t.Errorf("events after closing two CQs: %v, want only cqs[0] once", got)
	}
	_ = cqs[0].ReqNotify(false) // the list still works after the unlinking
	pushN(t, cqs[0], 1, 1)
	if got := drainEvents(t, ch); got[cqs[0]] != 1 {
		t.Errorf("events after re-arm: %v", got)
	}
}

func TestGetEventBlocksUntilEventOrCancelOrClose(t *testing.T) {
	ch := NewChannel()
	c := mustNew(t, 7, Options{Channel: ch})

	// An event wakes a waiter.
	got := make(chan *CQ)
	go func() {
		c, err := ch.GetEvent(context.Background())
		if err != nil {
			t.Errorf("GetEvent: %v", err)
		}
		got <- c
	}()
	_ = c.ReqNotify(false)
	pushN(t, c, 0, 1)
	select {
	case g := <-got:
		if g != c {
			t.Error("GetEvent returned another CQ")
		}
		g.AckEvents(1)
	case <-time.After(watchdog):
		t.Fatal("GetEvent not woken by an event")
	}

	// Cancellation ends a wait.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { _, err := ch.GetEvent(ctx); errc <- err }()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled GetEvent: %v, want context.Canceled", err)
		}
	case <-time.After(watchdog):
		t.Fatal("GetEvent ignored cancellation")
	}

	// Closing the channel wakes every waiter.
	const waiters = 3
	for range waiters {
		go func() { _, err := ch.GetEvent(context.Background()); errc <- err }()
	}
	closeAndWait(t, c)
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		select {
		case err := <-errc:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("GetEvent on closed channel: %v, want ErrClosed", err)
			}
		case <-time.After(watchdog):
			t.Fatal("GetEvent waiter not woken by channel Close")
		}
	}
	if err := ch.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second channel Close: %v, want ErrClosed", err)
	}
}

// Several waiters, many events raised in bursts: every event is returned exactly
// once and no waiter sleeps while events are queued (the wake token is passed on).
func TestChannelManyWaitersGetEveryEvent(t *testing.T) {
	ch := NewChannel()
	const ncq, rounds = 4, 300
	var cqs []*CQ
	for range ncq {
		cqs = append(cqs, mustNew(t, 1023, Options{Channel: ch}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	counts := map[*CQ]int{}
	total := make(chan struct{}, ncq*rounds)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				c, err := ch.GetEvent(ctx)
				if err != nil {
					return
				}
				c.AckEvents(1)
				mu.Lock()
				counts[c]++
				mu.Unlock()
				total <- struct{}{}
			}
		})
	}
	for r := range rounds {
		for _, c := range cqs {
			if err := c.ReqNotify(false); err != nil {
				t.Fatal(err)
			}
			c.Push(wcID(uint64(r)), false)
			c.Poll(make([]WC, 1))
		}
	}
	deadline := time.After(watchdog)
	for range ncq * rounds {
		select {
		case <-total:
		case <-deadline:
			t.Fatalf("events stuck on the channel: %v", counts)
		}
	}
	cancel()
	wg.Wait()
	for _, c := range cqs {
		if counts[c] != rounds {
			t.Errorf("CQ got %d events, want %d", counts[c], rounds)
		}
		closeAndWait(t, c)
	}
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
}

func TestHandlerFiresOncePerArming(t *testing.T) {
	calls := make(chan *CQ, 10)
	var logMu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}
	c := mustNew(t, 15, Options{Handler: func(c *CQ) { calls <- c }, Logf: logf})
	pushN(t, c, 0, 2) // unarmed: no call
	_ = c.ReqNotify(false)
	pushN(t, c, 2, 3)
	select {
	case got := <-calls:
		if got != c {
			t.Error("handler got another CQ")
		}
	case <-time.After(watchdog):
		t.Fatal("handler not called")
	}
	closeAndWait(t, c) // waits for the dispatcher: every call has returned
	if n := len(calls); n != 0 {
		t.Errorf("handler called %d more times, want once", n)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if want := []string{"cq: dispatcher started", "cq: dispatcher stopped"}; !slices.Equal(logs, want) {
		t.Errorf("dispatcher logs %q, want %q", logs, want)
	}
}

func TestSetHandler(t *testing.T) {
	_, withCh := newChannelCQ(t, 3)
	if err := withCh.SetHandler(func(*CQ) {}); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetHandler on a channel CQ: %v, want ErrInvalid", err)
	}
	c := mustNew(t, 15, Options{})
	calls := make(chan int, 10)
	if err := c.SetHandler(func(*CQ) { calls <- 1 }); err != nil {
		t.Fatal(err)
	}
	_ = c.ReqNotify(false)
	pushN(t, c, 0, 1)
	if got := waitCall(t, calls); got != 1 {
		t.Errorf("first handler: got call from %d", got)
	}
	if err := c.SetHandler(func(*CQ) { calls <- 2 }); err != nil {
		t.Fatal(err)
	}
	_ = c.ReqNotify(false)
	pushN(t, c, 1, 1)
	if got := waitCall(t, calls); got != 2 {
		t.Errorf("replaced handler: got call from %d", got)
	}
	if err := c.SetHandler(nil); err != nil {
		t.Fatal(err)
	}
	_ = c.ReqNotify(false)
	pushN(t, c, 2, 1)
	closeAndWait(t, c)
	if len(calls) != 0 {
		t.Error("removed handler was called")
	}
}

func waitCall(t *testing.T, calls chan int) int {
	t.Helper()
	select {
	case v := <-calls:
		return v
	case <-time.After(watchdog):
		t.Fatal("handler not called")
		return 0
	}
}
