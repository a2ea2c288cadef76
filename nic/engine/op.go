// Op: the result of a control operation, the one contract of the control plane.

package engine

import (
	"context"
	"sync"
)

// Op is the result of a control operation: every Modify, Destroy, Dealloc, Dereg
// and Close returns one (creates return their object at once: they never wait for
// the network or the engine's peers). It completes exactly once, either before the
// call returns (a misuse, an EBUSY answer, a deregistration) or later, when the
// engine has done the work. Either way the caller may
//
//   - Wait for it (or WaitContext, or select on Done), or
//   - name a callback with Notify, which runs once, with the result, on the
//     device's callback goroutine (RoutineEvents), never in the caller's call
//     chain (MID5) and never on the engine goroutine.
//
// A close Op completes only when nothing of the object runs or will run any more:
// its outstanding work requests have completed (flushed with WR_FLUSH_ERR), its
// asynchronous events queued but not delivered are discarded (as uverbs discards a
// destroyed object's events) and the one being delivered, if any, has returned;
// after that no event or completion callback names the object (NDKPI LT13, LT14).
// Waiting for a close from the callback it would wait for fails with an error
// wrapping ErrDeadlock instead of hanging; Notify is the way to close from there.
//
// Safe for concurrent use; an Op is never reused.
type Op struct {
	done  chan struct{}
	err   error
	q     *eventQueue // runs the Notify callbacks; nil: a fresh goroutine does
	guard func() bool // reports whether waiting here would deadlock

	mu  sync.Mutex
	fin bool
	fns []func(error)
}

func newOp(q *eventQueue) *Op { return &Op{done: make(chan struct{}), q: q} }

// finish completes the Op and queues its callbacks; it runs once.
func (o *Op) finish(err error) {
	o.mu.Lock()
	o.err = err
	o.fin = true
	fns := o.fns
	o.fns = nil
	o.mu.Unlock()
	close(o.done)
	for _, f := range fns {
		o.q.call(f, err)
	}
}

// Notify has f called once with the Op's result, on the device's callback
// goroutine, after the Op completes (at once if it already has). Callbacks of one
// device run one at a time, in the order their Ops completed, in line with the
// asynchronous events. f must not block for long (MID7).
func (o *Op) Notify(f func(err error)) {
	o.mu.Lock()
	if !o.fin {
		o.fns = append(o.fns, f)
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.q.call(f, o.err)
}

// Done returns a channel closed when the operation has finished.
func (o *Op) Done() <-chan struct{} { return o.done }

// Err returns the operation's result once Done is closed, and nil before.
func (o *Op) Err() error {
	select {
	case <-o.done:
		return o.err
	default:
		return nil
	}
}

// Wait blocks until the operation has finished and returns its result. Called
// from the callback the operation waits for, it returns an error wrapping
// ErrDeadlock at once (the operation still completes, later).
func (o *Op) Wait() error { return o.WaitContext(context.Background()) }

// WaitContext is Wait with a deadline: it returns ctx.Err() if ctx ends first (the
// operation still completes on its own).
func (o *Op) WaitContext(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	default:
	}
	if o.guard != nil && o.guard() {
		return errDeadlockWait
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DoneOp is an Op already finished with err, whose callbacks run on a
// goroutine of their own: the result of a backend that does its work in the
// call (verbs' attached devices).
func DoneOp(err error) *Op {
	o := newOp(nil)
	o.finish(err)
	return o
}
