// Object lifetimes: every object knows its parent (its antecedents: a QP's PD,
// CQs and SRQ) and counts its live children, and offers the two closes the layers
// above need: libibverbs' EBUSY answer and NDKPI's pending close.

package engine

import (
	"sync"
	"sync/atomic"
)

// lifetime is the lifetime of one object. Children acquire it when they are created
// and release it when they are gone; the object closes in one of two ways:
//
//   - closeBusy, closeBusyWith (Destroy, Dealloc, Dereg): fails with ErrBusy, changing nothing,
//     while children live (IBA C11-17; ibv_dealloc_pd and ibv_destroy_cq return
//     EBUSY). Checking the children and marking it dead happen under one
//     lock, so a child is never created in a dead parent.
//   - closeWhenIdle (Close): it stops taking children at once and the
//     object's teardown runs when the last child is released (NDKPI LT8, LT9).
//
// dead is set when the object's close is accepted: its events are discarded from
// then on (the consumer no longer uses it, LT9). Safe for concurrent use.
type lifetime struct {
	mu       sync.Mutex
	parents  [4]*lifetime // antecedents acquired at creation (nil-padded)
	children int
	closing  bool   // a close was asked: no new children
	onIdle   func() // closeWhenIdle's teardown, run when children reach 0
	dead     atomic.Bool
}

// acquire makes the caller a child of n; it fails with ErrClosed once n closes.
func (n *lifetime) acquire() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return errClosedParent
	}
	n.children++
	return nil
}

// release ends a child; the last one of a closing object runs its teardown.
func (n *lifetime) release() {
	n.mu.Lock()
	n.children--
	var f func()
	if n.children == 0 && n.onIdle != nil {
		f, n.onIdle = n.onIdle, nil
	}
	n.mu.Unlock()
	if f != nil {
		f()
	}
}

// adopt acquires each of parents for the object, all or none.
func (n *lifetime) adopt(parents ...*lifetime) error {
	for i, p := range parents {
		if err := p.acquire(); err != nil {
			for _, q := range parents[:i] {
				q.release()
			}
			return err
		}
	}
	copy(n.parents[:], parents)
	return nil
}

// orphan releases the parents adopt took.
func (n *lifetime) orphan() {
	for i, p := range n.parents {
		if p != nil {
			n.parents[i] = nil
			p.release()
		}
	}
}

// closeBusy marks n dead if it has no children: ErrBusy if it has, ErrClosed if
// it is closed or closing already.
func (n *lifetime) closeBusy() error { return n.closeBusyWith(nil) }

// closeBusyWith is closeBusy that also runs close, the object's own refusable
// close, under n's lock: if close fails, n stays open and its error is
// returned. A child created meanwhile never sees n closing for a moment.
func (n *lifetime) closeBusyWith(close func() error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return errClosedAgain
	}
	if n.children > 0 {
		return errBusyChildren
	}
	if close != nil {
		if err := close(); err != nil {
			return wrap(err)
		}
	}
	n.closing = true
	n.dead.Store(true)
	return nil
}

// closeWhenIdle marks n closing and runs teardown once it has no children (now,
// in the caller, if it has none). ErrClosed if it is closed or closing already.
func (n *lifetime) closeWhenIdle(teardown func()) error {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return errClosedAgain
	}
	n.closing = true
	n.dead.Store(true)
	if n.children > 0 {
		n.onIdle = teardown
		n.mu.Unlock()
		return nil
	}
	n.mu.Unlock()
	teardown()
	return nil
}

// markClosing stops new children without waiting for the existing ones: the
// device's close, which tears its children down itself.
func (n *lifetime) markClosing() {
	n.mu.Lock()
	n.closing = true
	n.dead.Store(true)
	n.mu.Unlock()
}

// live reports the number of children (a snapshot).
func (n *lifetime) live() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.children
}
