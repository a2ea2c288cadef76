package clock

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestManualFiresInDeadlineOrder(t *testing.T) {
	c := NewManual(time.Unix(100, 0))
	var got []int
	var at []time.Time
	for i, d := range []time.Duration{30, 10, 20, 10} {
		c.AfterFunc(d*time.Millisecond, func() {
			got = append(got, i)
			at = append(at, c.Now())
		})
	}
	c.Advance(15 * time.Millisecond)
	if want := []int{1, 3}; !equal(got, want) {
		t.Fatalf("after 15ms fired %v, want %v", got, want)
	}
	if !at[0].Equal(time.Unix(100, 0).Add(10 * time.Millisecond)) {
		t.Errorf("the 10ms timer saw Now %v, want start+10ms", at[0])
	}
	c.Advance(100 * time.Millisecond)
	if want := []int{1, 3, 2, 0}; !equal(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if c.Pending() != 0 {
		t.Errorf("%d timers pending", c.Pending())
	}
}

func TestManualStopAndRearmFromTimer(t *testing.T) {
	c := NewManual(time.Unix(0, 0))
	var n atomic.Int32
	stopped := c.AfterFunc(time.Second, func() { n.Add(100) })
	if !stopped.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop returned true")
	}
	// A timer that re-arms itself, as a MAD retry does: within one Advance it
	// fires as often as its deadlines fall inside.
	var rearm func()
	rearm = func() {
		if n.Add(1) < 3 {
			c.AfterFunc(time.Second, rearm)
		}
	}
	c.AfterFunc(time.Second, rearm)
	c.Advance(10 * time.Second)
	if n.Load() != 3 {
		t.Fatalf("fired %d times, want 3 (and the stopped one never)", n.Load())
	}
}

func TestManualTimerRunsOffCallerGoroutine(t *testing.T) {
	// AfterFunc's contract: never the caller's goroutine. A function that takes a
	// lock Advance's caller holds would deadlock if run inline; it must not.
	c := NewManual(time.Unix(0, 0))
	ran := make(chan struct{})
	c.AfterFunc(0, func() { close(ran) })
	c.Advance(0)
	select {
	case <-ran:
	default:
		t.Fatal("a due timer had not run when Advance returned")
	}
}

func TestManualSubscribersWoken(t *testing.T) {
	c := NewManual(time.Unix(0, 0))
	var woke atomic.Int32
	c.Subscribe(func() { woke.Add(1) })
	c.Advance(time.Millisecond)
	c.Advance(time.Millisecond)
	if woke.Load() != 2 {
		t.Fatalf("woken %d times, want 2", woke.Load())
	}
}

func TestSystemAfterFunc(t *testing.T) {
	var c Clock = System{}
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("System.AfterFunc never ran")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
