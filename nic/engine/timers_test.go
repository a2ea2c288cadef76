package engine

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestTimerHeap drives the heap with random sets, lapses and stops against a
// model of what each timer should do: every timer fires once its deadline has
// come and not before, in the order of the deadlines, a lapsed or stopped one
// never, next is the earliest deadline armed, stop leaves no pointer behind,
// and the heap never holds a timer twice nor allocates once grown.
func TestTimerHeap(t *testing.T) {
	const n = 64
	rng := rand.New(rand.NewPCG(1, 2))
	var th timerHeap
	ts := make([]timer, n)
	for i := range ts {
		ts[i].init(&QP{qpn: uint32(i)}, timerRetransmit)
	}
	type want struct {
		on   bool
		when time.Duration
	}
	model := make([]want, n)
	now := time.Duration(0)
	check := func(step int) {
		t.Helper()
		for i, x := range th.h {
			if x.idx != i {
				t.Fatalf("step %d: heap slot %d holds a timer that says %d", step, i, x.idx)
			}
			if p := (i - 1) / 2; i > 0 && th.h[p].key > x.key {
				t.Fatalf("step %d: slot %d's key %v under a parent's %v", step, i, x.key, th.h[p].key)
			}
			if x.on && x.key > x.when {
				t.Fatalf("step %d: an armed timer keyed %v after its deadline %v", step, x.key, x.when)
			}
		}
		if len(th.h) > n {
			t.Fatalf("step %d: %d timers in the heap, %d exist", step, len(th.h), n)
		}
		for i := range ts {
			if ts[i].armed() != model[i].on {
				t.Fatalf("step %d: timer %d armed %v, want %v", step, i, ts[i].armed(), model[i].on)
			}
		}
	}
	for step := range 200000 {
		i := rng.IntN(n)
		switch op := rng.IntN(10); {
		case op < 5:
			when := now + time.Duration(rng.IntN(1000))
			th.set(&ts[i], when)
			model[i] = want{true, when}
		case op < 8:
			th.lapse(&ts[i])
			model[i].on = false
		case op < 9:
			th.stop(&ts[i])
			model[i].on = false
			if ts[i].idx >= 0 {
				t.Fatalf("step %d: timer %d stopped, still in the heap at %d", step, i, ts[i].idx)
			}
		default:
			now += time.Duration(rng.IntN(200))
			last := time.Duration(-1)
			for x := th.popDue(now); x != nil; x = th.popDue(now) {
				k := int(x.qp.qpn)
				switch {
				case !model[k].on:
					t.Fatalf("step %d: timer %d fired, disarmed", step, k)
				case x.when != model[k].when || x.when > now:
					t.Fatalf("step %d: timer %d fired at %v for %v, set for %v", step, k, now, x.when, model[k].when)
				case x.when < last:
					t.Fatalf("step %d: timer %d (%v) fired after one for %v", step, k, x.when, last)
				}
				last = x.when
				model[k].on = false
			}
			for k, m := range model {
				if m.on && m.when <= now {
					t.Fatalf("step %d: timer %d due at %v did not fire at %v", step, k, m.when, now)
				}
			}
		}
		if step%97 == 0 {
			earliest, any := time.Duration(0), false
			for _, m := range model {
				if m.on && (!any || m.when < earliest) {
					earliest, any = m.when, true
				}
			}
			if got, ok := th.next(); ok != any || ok && got != earliest {
				t.Fatalf("step %d: next %v %v, want %v %v", step, got, ok, earliest, any)
			}
		}
		check(step)
	}
	if a := testing.AllocsPerRun(100, func() {
		th.set(&ts[0], now+5)
		th.set(&ts[0], now+10)
		th.lapse(&ts[0])
		th.set(&ts[1], now+1)
		th.stop(&ts[1])
		th.popDue(now)
	}); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}
