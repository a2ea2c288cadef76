// Completion channels (ibv_comp_channel): where armed CQs queue their events for a
// consumer that waits in GetEvent.

package cq

import (
	"context"
	"fmt"
	"sync"
)

// Channel is a completion event channel, ibv_comp_channel. Each time an armed CQ
// created with this Channel fires, one event for that CQ is queued here; GetEvent
// returns events one at a time, each naming its CQ, and every event returned must
// be acknowledged with CQ.AckEvents before the CQ can be closed.
//
// Queueing an event takes the channel's mutex briefly and never blocks or
// allocates: a CQ's events are a counter and the CQ itself is the list node, so a
// channel holds any number of events in constant memory. Events of one CQ come
// out in the order they were raised; CQs are served in the order they first had
// an undelivered event.
//
// Concurrency: all methods are safe for concurrent use. Several goroutines may
// wait in GetEvent at once; each event goes to exactly one of them.
type Channel struct {
	mu sync.Mutex
	// Guarded by mu.
	head, tail *CQ // ready list: CQs with chPending > 0, linked through chNext
	ncq        int // CQs created with this channel and not yet closed
	closed     bool

	wake chan struct{} // one token: "the ready list may be non-empty"
	done chan struct{} // closed by Close
}

// NewChannel creates a completion channel (ibv_create_comp_channel).
func NewChannel() *Channel {
	return &Channel{
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
}

// GetEvent waits for the next completion event and returns its CQ
// (ibv_get_cq_event). It is the one call of this package that blocks. It returns
// an event already queued even if ctx is done, so an expired context makes it a
// non-blocking poll of the channel; otherwise it returns ctx.Err() when ctx ends,
// and an error wrapping ErrClosed once the channel is closed and drained.
//
// The caller must acknowledge the event with CQ.AckEvents, then typically re-arm
// with ReqNotify and poll the CQ until empty. An event may come with no
// completion left to poll: another poller took it, or it was pushed between the
// re-arm and the poll (ibv_get_cq_event(3)).
func (ch *Channel) GetEvent(ctx context.Context) (*CQ, error) {
	for {
		ch.mu.Lock()
		if c := ch.head; c != nil {
			ch.head = c.chNext
			if ch.head == nil {
				ch.tail = nil
			}
			c.chNext = nil
			c.chPending--
			if c.chPending > 0 {
				ch.pushLocked(c) // to the back: one CQ cannot starve the others
			} else {
				c.chQueued = false
			}
			c.evGot++
			more := ch.head != nil
			ch.mu.Unlock()
			if more {
				ch.signal() // pass the baton to another waiter
			}
			return c, nil
		}
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("cq: GetEvent: %w", ErrClosed)
		}
		select {
		case <-ch.wake:
		case <-ch.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close destroys the channel (ibv_destroy_comp_channel). It fails with ErrBusy
// while CQs created with it are open, and wakes every GetEvent waiter, which then
// returns ErrClosed.
func (ch *Channel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return fmt.Errorf("cq: channel close: %w", ErrClosed)
	}
	if ch.ncq > 0 {
		return fmt.Errorf("cq: channel close: %d CQs still use the channel: %w", ch.ncq, ErrBusy)
	}
	ch.closed = true
	close(ch.done)
	return nil
}

// AckEvents acknowledges n events that GetEvent returned for this CQ
// (ibv_ack_cq_events); several may be acknowledged at once to amortise the
// channel's mutex. It panics if n is negative or more than are outstanding (so
// if n > 0 on a CQ without a channel): like a negative sync.WaitGroup counter,
// that is a bug in the caller. Acknowledging none is always allowed.
func (c *CQ) AckEvents(n int) {
	if c.ch == nil {
		if n == 0 {
			return
		}
		panic("cq: AckEvents on a CQ without a completion channel")
	}
	c.ch.mu.Lock()
	defer c.ch.mu.Unlock()
	if n < 0 || uint64(n) > c.evGot-c.evAcked {
		panic(fmt.Sprintf("cq: AckEvents(%d) with %d events outstanding", n, c.evGot-c.evAcked))
	}
	c.evAcked += uint64(n)
}

// UnackedEvents returns how many events GetEvent returned for this CQ that are
// not yet acknowledged.
func (c *CQ) UnackedEvents() int {
	if c.ch == nil {
		return 0
	}
	c.ch.mu.Lock()
	defer c.ch.mu.Unlock()
	return int(c.evGot - c.evAcked)
}

// attach counts a new CQ on the channel.
func (ch *Channel) attach() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return fmt.Errorf("cq: new CQ on a closed channel: %w", ErrClosed)
	}
	ch.ncq++
	return nil
}

// detach takes a closing CQ off the channel, discarding its undelivered events;
// it fails with ErrBusy if events it delivered are unacknowledged, unless force.
// c.mu is held.
func (ch *Channel) detach(c *CQ, force bool) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if u := c.evGot - c.evAcked; u > 0 && !force {
		return fmt.Errorf("cq: close: %d completion events not acknowledged: %w", u, ErrBusy)
	}
	if c.chQueued {
		var prev *CQ
		for p := ch.head; p != c; p = p.chNext {
			prev = p
		}
		if prev == nil {
			ch.head = c.chNext
		} else {
			prev.chNext = c.chNext
		}
		if ch.tail == c {
			ch.tail = prev
		}
		c.chNext, c.chQueued = nil, false
	}
	c.chPending = 0
	c.chDetached = true
	ch.ncq--
	return nil
}

// post queues one event for c; called by Push without c.mu held.
func (ch *Channel) post(c *CQ) {
	ch.mu.Lock()
	if c.chDetached {
		ch.mu.Unlock()
		return
	}
	c.chPending++
	if !c.chQueued {
		c.chQueued = true
		ch.pushLocked(c)
	}
	ch.mu.Unlock()
	ch.signal()
}

// pushLocked appends c to the ready list. ch.mu is held.
func (ch *Channel) pushLocked(c *CQ) {
	if ch.tail == nil {
		ch.head = c
	} else {
		ch.tail.chNext = c
	}
	ch.tail = c
}

func (ch *Channel) signal() {
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}
