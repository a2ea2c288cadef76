// Deferred delivery of completion and error events: the channel enqueue and the
// per-CQ dispatcher goroutine that runs the consumer's handlers.

package cq

import (
	"fmt"

	"github.com/xrnic/xrnic/internal/goid"
)

// SetHandler installs (or, with nil, removes) the completion handler; see
// Options.Handler for when and where it runs. A handler call already running
// finishes with the old handler. It fails with ErrInvalid on a CQ created with a
// Channel and with ErrClosed after Close.
func (c *CQ) SetHandler(h func(*CQ)) error {
	if c.ch != nil {
		return fmt.Errorf("cq: SetHandler on a CQ with a completion channel: %w", ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return fmt.Errorf("cq: SetHandler: %w", ErrClosed)
	}
	if h == nil {
		c.handler.Store(nil)
		return nil
	}
	c.handler.Store(&h)
	c.startLocked()
	return nil
}

// startLocked starts the dispatcher goroutine once. c.mu is held.
func (c *CQ) startLocked() {
	if c.started || c.quiet {
		return
	}
	c.started = true
	go c.routineDispatch()
}

// raiseEvent delivers one completion event after Push released the CQ's lock:
// to the channel, or to the dispatcher. Neither waits nor allocates, and neither
// runs consumer code here (MID5).
func (c *CQ) raiseEvent() {
	if c.ch != nil {
		c.ch.post(c)
		return
	}
	if c.handler.Load() == nil {
		return
	}
	c.pendComp.Store(true)
	c.wake()
}

// raiseError delivers IBV_EVENT_CQ_ERR to OnError through the dispatcher. Push
// calls it once, on the transition to the overrun state.
func (c *CQ) raiseError() {
	if c.onError == nil {
		return
	}
	c.pendErr.Store(true)
	c.wake()
}

// wake makes the dispatcher run at least once more. The kick channel holds one
// token, so a burst of firings while the handler runs costs one more pass, and
// the send never blocks.
func (c *CQ) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// routineDispatch is the CQ's dispatcher: the only goroutine that calls its
// handler and OnError, one call at a time (MID6), so a handler that blocks holds
// up only this CQ (MID7). It ends when Close closes stop; no call starts after
// Close, and done is closed when the last call has returned.
func (c *CQ) routineDispatch() {
	if c.logf != nil {
		c.logf("cq: dispatcher started")
		defer c.logf("cq: dispatcher stopped")
	}
	defer close(c.done)
	c.dispatcherID.Store(goid.ID())
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		// The flags are cleared before the calls, so a firing during a call sets
		// them again and its kick brings us back: nothing is lost.
		if c.quietA.Load() {
			return
		}
		if c.pendErr.Swap(false) && !c.closed.Load() {
			c.onError(c)
		}
		if c.pendComp.Swap(false) && !c.closed.Load() {
			if h := c.handler.Load(); h != nil {
				(*h)(c)
			}
		}
	}
}
