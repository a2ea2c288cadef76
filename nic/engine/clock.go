// The injected clock.

package engine

import (
	"sync"
	"time"
)

// Clock tells the engine the time. The engine computes its timer deadlines from Now
// and sleeps in link.Wait until the earliest; a clock that can jump (ManualClock)
// wakes the engine through Subscribe. Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// Subscriber is implemented by clocks whose time moves other than in real time: the
// device calls Subscribe once with a function that wakes its engine, and the clock
// calls it after every change.
type Subscriber interface {
	Subscribe(wake func())
}

// SystemClock is the real clock. Safe for concurrent use.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a clock that moves only when told, for deterministic timer tests.
// Safe for concurrent use.
type ManualClock struct {
	mu    sync.Mutex
	now   time.Time
	wakes []func()
}

// NewManualClock returns a clock set to start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and wakes the subscribed engines.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	wakes := c.wakes
	c.mu.Unlock()
	for _, w := range wakes {
		w()
	}
}

// Subscribe implements Subscriber.
func (c *ManualClock) Subscribe(wake func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wakes = append(c.wakes[:len(c.wakes):len(c.wakes)], wake)
}
