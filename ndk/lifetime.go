package ndk

import (
	"errors"
	"fmt"
	"sync"

	"github.com/xrnic/xrnic/internal/goid"
	"github.com/xrnic/xrnic/verbs"
)

// ErrPending is STATUS_PENDING: the call was accepted and its completion
// callback will report the result. It is a status, not a failure: a call
// returns nil (done, no callback follows), ErrPending (the callback follows)
// or another error (failed, no callback follows).
var ErrPending = errors.New("ndk: pending")

// Await makes a call that takes a completion callback (a close, Disconnect,
// Register, ...) and returns its result however it comes: at once, or
// through the callback when the call returned ErrPending. It blocks, so it
// must not run inside a callback of the same adapter (that callback's
// goroutine is the one that would deliver the result).
func Await(call func(done func(error)) error) error {
	ch := make(chan error, 1)
	if err := call(func(err error) { ch <- err }); !errors.Is(err, ErrPending) {
		return err
	}
	return <-ch
}

// Errors. Each wraps a sentinel of the verbs vocabulary, except ErrRefused and
// ErrCanceled, which are NDK's own statuses.
var (
	ErrClosed   = fmt.Errorf("ndk: object closed or closing: %w", verbs.ErrClosed)
	ErrDeadlock = fmt.Errorf("ndk: adapter close from inside one of its callbacks: %w", verbs.ErrDeadlock)
	ErrInUse    = fmt.Errorf("ndk: local address and port in use: %w", verbs.ErrExists) // STATUS_SHARING_VIOLATION
	ErrState    = fmt.Errorf("ndk: not allowed in the connector's state: %w", verbs.ErrWrongState)
	ErrInvalid  = fmt.Errorf("ndk: invalid argument: %w", verbs.ErrInvalid)
	// ErrRefused is STATUS_CONNECTION_REFUSED: the peer rejected the connection.
	ErrRefused = errors.New("ndk: connection refused")
	// ErrCanceled is STATUS_CANCELLED: a request flushed or cancelled by a close,
	// a Flush or a disconnect.
	ErrCanceled = errors.New("ndk: canceled")
	// ErrListenerClosing is Accept's refusal of a request whose listener's
	// close was asked for after it came (EP7): the request is cancelled.
	ErrListenerClosing = fmt.Errorf("ndk: its listener is closing (EP7): %w", ErrCanceled)
	// ErrTimeout is STATUS_IO_TIMEOUT: the peer did not answer the CM.
	ErrTimeout = fmt.Errorf("ndk: connection timed out: %w", verbs.ErrUnreachable)
)

// The object states.
const (
	stOpen = iota
	stClosing
	stClosed
)

// node is the lifetime of one NDK object: its antecedents (parents), the
// successors created on it (kids), and the requests and event callbacks in
// flight on it (holds). A close completes when kids and holds are zero and the
// underlying object is released (LT8, LT13); the node then lets go of its
// parents, after its close callback returned (LT10).
type node struct {
	a       *Adapter
	parents []*node // the antecedent first; a shared endpoint may follow

	mu        sync.Mutex
	st        int
	kids      int
	holds     int
	releasing bool
	inClose   bool  // Close is running release on the caller's goroutine
	syncDone  bool  // release finished within Close
	syncErr   error // its result
	done      func(error)
	cancel    func()                // LT15: flush or cancel what is pending; run once at close
	release   func(fin func(error)) // frees the underlying object and calls fin, now or later
}

// init ties n to its parent, which must be open.
func (n *node) init(a *Adapter, parent *node) error {
	n.a = a
	if parent != nil {
		if err := parent.addKid(); err != nil {
			return err
		}
		n.parents = []*node{parent}
	}
	return nil
}

// addKid counts a successor; a closing object takes none.
func (n *node) addKid() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.st != stOpen {
		return ErrClosed
	}
	n.kids++
	return nil
}

// attach makes n a successor of p as well (a shared endpoint's connectors).
func (n *node) attach(p *node) error {
	if err := p.addKid(); err != nil {
		return err
	}
	n.mu.Lock()
	n.parents = append(n.parents, p)
	n.mu.Unlock()
	return nil
}

func (n *node) dropKid() {
	n.mu.Lock()
	n.kids--
	n.mu.Unlock()
	n.a.kidGone(n)
	n.tryRelease()
}

// hold counts a request or event callback in flight; it fails once the object
// is closing.
func (n *node) hold() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.st != stOpen {
		return ErrClosed
	}
	n.holds++
	return nil
}

func (n *node) unhold() {
	n.mu.Lock()
	n.holds--
	n.mu.Unlock()
	n.tryRelease()
}

// complete queues a held request's completion on the adapter's callback
// goroutine; the hold is released once cb has returned (LT13). From here on
// the caller must not touch the object (LT6).
func (n *node) complete(cb func(error), err error) {
	n.a.queue(func() {
		if cb != nil {
			cb(err)
		}
		n.unhold()
	})
}

// requestHold is the hold a request call takes (holdRequest). The call
// defers release before it takes its object's lock, so that the hold goes
// after the unlock: the last hold's release takes that lock (LT4). A request
// left pending keeps it for its completion (keep).
type requestHold struct {
	n    *node
	kept bool
}

// holdRequest takes a hold for a request call: ErrClosed once the object is
// closing.
func (n *node) holdRequest() (*requestHold, error) {
	if err := n.hold(); err != nil {
		return nil, err
	}
	return &requestHold{n: n}, nil
}

// keep hands the hold to the pending request's completion.
func (h *requestHold) keep() { h.kept = true }

// release lets go of the hold unless the request kept it.
func (h *requestHold) release() {
	if !h.kept {
		h.n.unhold()
	}
}

// event queues an event callback unless the object is closing; the close waits
// for it (LT13).
func (n *node) event(f func()) bool {
	if n.hold() != nil {
		return false
	}
	n.a.queue(func() {
		f()
		n.unhold()
	})
	return true
}

func (n *node) isOpen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st == stOpen
}

// close is NdkCloseObject: nil or an error when the close completed within the
// call (done is never called, LT3), ErrPending when done will be.
func (n *node) close(done func(error)) error {
	n.mu.Lock()
	if n.st != stOpen {
		n.mu.Unlock()
		return ErrClosed
	}
	n.st = stClosing
	n.done = done
	n.inClose = true
	cancel := n.cancel
	n.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	n.tryRelease()
	n.mu.Lock()
	n.inClose = false
	sync, err := n.syncDone, n.syncErr
	n.mu.Unlock()
	if !sync {
		return ErrPending
	}
	n.leaveParents()
	return err
}

// tryRelease starts the release once the object is closing and nothing hangs
// on it any more.
func (n *node) tryRelease() {
	n.mu.Lock()
	if n.st != stClosing || n.kids > 0 || n.holds > 0 || n.releasing {
		n.mu.Unlock()
		return
	}
	n.releasing = true
	rel := n.release
	n.mu.Unlock()
	if rel == nil {
		n.finish(nil)
		return
	}
	rel(n.finish)
}

// finish ends the close: within Close it is reported there; otherwise the close
// callback is queued, and the parents let go only after it returned (LT10).
func (n *node) finish(err error) {
	n.mu.Lock()
	n.st = stClosed
	if n.inClose {
		n.syncDone, n.syncErr = true, err
		n.mu.Unlock()
		return
	}
	done := n.done
	n.mu.Unlock()
	n.a.queue(func() {
		if done != nil {
			done(err)
		}
		n.leaveParents()
	})
}

func (n *node) leaveParents() {
	for _, p := range n.parents {
		p.dropKid()
	}
}

// dispatcher runs an adapter's callbacks one at a time, in order, on its own
// goroutine: never inside a call of the consumer's (the NDK text allows both;
// queuing makes LT5 and LT7's interleavings the normal case rather than a
// corner). It is unbounded: every queued function is a completion or an event
// of an object that exists, so the objects bound it.
type dispatcher struct {
	mu      sync.Mutex
	cond    *sync.Cond
	q       []func()
	running bool
	stop    bool
	gid     uint64
	exited  chan struct{}
}

func (d *dispatcher) start() {
	d.cond = sync.NewCond(&d.mu)
	d.exited = make(chan struct{})
	started := make(chan struct{})
	go d.run(started)
	<-started
}

func (d *dispatcher) run(started chan struct{}) {
	defer close(d.exited)
	d.mu.Lock()
	d.gid = goid.ID()
	d.mu.Unlock()
	close(started)
	d.mu.Lock()
	for {
		for len(d.q) == 0 && !d.stop {
			d.cond.Wait()
		}
		if len(d.q) == 0 {
			d.mu.Unlock()
			return
		}
		f := d.q[0]
		d.q[0] = nil
		d.q = d.q[1:]
		d.running = true
		d.mu.Unlock()
		f()
		d.mu.Lock()
		d.running = false
		d.cond.Broadcast()
	}
}

func (d *dispatcher) queue(f func()) {
	d.mu.Lock()
	d.q = append(d.q, f)
	d.cond.Broadcast()
	d.mu.Unlock()
}

// onIt tells whether the caller runs on the dispatcher, inside a callback.
func (d *dispatcher) onIt() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gid == goid.ID()
}

// drain stops the dispatcher once every queued callback has returned.
func (d *dispatcher) drain() {
	d.mu.Lock()
	d.stop = true
	d.cond.Broadcast()
	d.mu.Unlock()
	<-d.exited
}
