// Package clock is the injected time of xrnic: the engine's timers, and next the
// connection manager's MAD retries and ndk's timeouts, read the time and arm
// timers through a Clock, so that state-machine tests run on a Manual clock that
// moves only when told (the pattern of gVisor's tcpip.Clock and faketime).
package clock

import (
	"container/heap"
	"sync"
	"time"
)

// Clock tells the time and runs functions after a delay. Implementations are safe
// for concurrent use.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, on a goroutine of the clock's choosing (never the
	// caller's), after d has passed on this clock.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc. Safe for concurrent use.
type Timer interface {
	// Stop cancels the call; false if it already ran or was stopped.
	Stop() bool
}

// Subscriber is implemented by clocks whose time moves other than in real time: a
// component that sleeps until a deadline of its own (the engine, in link.Wait)
// subscribes a function that wakes it, and the clock calls it after every change.
type Subscriber interface {
	Subscribe(wake func())
}

// System is the real clock. Safe for concurrent use.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (System) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Manual is a clock that moves only when told, for deterministic tests. Timers
// fire during Advance, in deadline order (ties in arming order), each on a new
// goroutine that Advance waits for, so that when Advance returns every function
// that became due has returned; a function may arm and stop timers. Safe for
// concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers manualHeap
	wakes  []func()
}

// NewManual returns a clock set to start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the clock's time.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that fires when Advance reaches now+d.
func (c *Manual) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &manualTimer{c: c, when: c.now.Add(d), seq: c.seq, f: f, index: -1}
	heap.Push(&c.timers, t)
	return t
}

// Pending returns the number of armed timers.
func (c *Manual) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves the clock forward by d, runs the timers that became due, and
// wakes the subscribers.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for len(c.timers) > 0 && !c.timers[0].when.After(end) {
		t := heap.Pop(&c.timers).(*manualTimer)
		if t.when.After(c.now) {
			c.now = t.when
		}
		c.mu.Unlock()
		done := make(chan struct{})
		go func() { defer close(done); t.f() }()
		<-done
		c.mu.Lock()
	}
	c.now = end
	wakes := c.wakes
	c.mu.Unlock()
	for _, w := range wakes {
		w()
	}
}

// Subscribe implements Subscriber.
func (c *Manual) Subscribe(wake func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wakes = append(c.wakes[:len(c.wakes):len(c.wakes)], wake)
}

type manualTimer struct {
	c     *Manual
	when  time.Time
	seq   uint64
	f     func()
	index int // in the heap; -1 when not armed
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.timers, t.index)
	return true
}

type manualHeap []*manualTimer

func (h manualHeap) Len() int { return len(h) }
func (h manualHeap) Less(i, j int) bool {
	if h[i].when.Equal(h[j].when) {
		return h[i].seq < h[j].seq
	}
	return h[i].when.Before(h[j].when)
}
func (h manualHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *manualHeap) Push(x any) {
	t := x.(*manualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *manualHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
