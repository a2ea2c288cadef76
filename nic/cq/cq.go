// The completion queue: a bounded ring of work completions with one-shot
// notification, resize, QP references and close.

package cq

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/xrnic/xrnic/internal/goid"
)

// Arming state, the IB_CQ_SOLICITED / IB_CQ_NEXT_COMP bits of rxe's cq->notify.
// ReqNotify ORs a bit in, so arming for the next completion is never weakened by a
// later solicited-only request (rxe_req_notify_cq: cq->notify |= flags).
const (
	armSolicited uint8 = 1 << 0
	armNext      uint8 = 1 << 1
)

// Life cycle of a CQ (guarded by CQ.mu).
const (
	stateOpen    uint8 = iota
	stateOverrun       // overflowed: refuses every completion until closed
	stateClosed
)

// Options configure New. Zero Options make a CQ whose notifications go nowhere
// (ibv_create_cq with no channel): ReqNotify still arms it, and Stats counts the
// events it would have raised.
type Options struct {
	// Channel, if set, receives one event each time the armed CQ fires
	// (ibv_create_cq's channel argument). It cannot be combined with Handler.
	Channel *Channel

	// Handler, if set, is the completion handler (the kernel's ib_cq comp_handler):
	// it runs after the armed CQ fires, on the CQ's own dispatcher goroutine, never
	// inside Push, Poll or ReqNotify (MID5), never twice at once for this CQ (MID6),
	// and a handler that blocks delays only this CQ's later handler calls (MID7).
	// Firings that happen while no handler call has started yet are coalesced into
	// one call: a handler must re-arm with ReqNotify and then poll until empty, the
	// usual pattern, which loses nothing. See also SetHandler. The dispatcher
	// goroutine lives until Close: close every CQ that has a Handler or OnError.
	Handler func(*CQ)

	// OnError, if set, receives the CQ's asynchronous error event
	// (IBV_EVENT_CQ_ERR): it is called once, on the dispatcher goroutine, after
	// the first completion that did not fit (not at all if the CQ is closed
	// before the dispatcher gets to it).
	OnError func(*CQ)

	// Logf, if set, logs the start and stop of the CQ's dispatcher goroutine.
	Logf func(format string, args ...any)

	// Context is the consumer's value (ibv_create_cq's cq_context), returned by
	// Context.
	Context any
}

// CQ is a completion queue.
//
// Concurrency: every method is safe to call from any goroutine at any time,
// including from inside the CQ's own handler. Push, Poll, ReqNotify, Len and Cqe
// never block: they take the CQ's own short mutex (what rxe does with its cq_lock
// spinlock), never wait for an event, another goroutine or a consumer callback, and
// do not allocate. The mutex belongs to this CQ alone; QPs share it only when the
// application gives them one CQ. Several goroutines may Poll at once: each
// completion is returned by exactly one Poll (MID4), in the order it was pushed
// within that Poll's batch; the order between concurrent Polls is undefined.
//
// Lock order: CQ.mu before Channel.mu. Channel code never takes CQ.mu.
type CQ struct {
	mu sync.Mutex
	// Guarded by mu.
	ring  []WC   // len is a power of two
	mask  uint64 // len(ring) - 1
	head  uint64 // next completion to poll; counts up forever, indexes via mask
	tail  uint64 // next free slot
	cqe   int    // capacity: len(ring) - 1, as rxe reports it
	armed uint8  // armSolicited | armNext
	state uint8
	refs  int // QPs (or SRQs) that post to this CQ, IBA C11-17
	stats Stats

	// Immutable after New.
	ch      *Channel
	onError func(*CQ)
	logf    func(string, ...any)
	context any

	dispatcherID atomic.Uint64 // the dispatcher's goroutine id, once started

	// Dispatcher: one goroutine per CQ that has a handler or OnError, started when
	// the first of them is registered and stopped by Close. started and the
	// closing of stop/done are guarded by mu.
	handler  atomic.Pointer[func(*CQ)]
	closed   atomic.Bool // mirrors state == stateClosed for the dispatcher
	quietA   atomic.Bool // mirrors quiet for the dispatcher
	pendComp atomic.Bool // a completion event awaits the handler
	pendErr  atomic.Bool // IBV_EVENT_CQ_ERR awaits OnError
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	started  bool
	quiet    bool // StopCallbacks: stop/done are closed, no call starts

	// Channel bookkeeping, guarded by ch.mu (see channel.go).
	chNext     *CQ    // next CQ in the channel's ready list
	chQueued   bool   // on the ready list
	chPending  uint64 // events queued on the channel, not yet returned by GetEvent
	chDetached bool   // closed: the channel takes no more events from this CQ
	evGot      uint64 // events GetEvent returned (comp_events_reported)
	evAcked    uint64 // events AckEvents acknowledged (comp_events_completed)
}

// Stats are a CQ's counters.
type Stats struct {
	Completions uint64 // completions queued by Push
	Polled      uint64 // completions returned by Poll
	Lost        uint64 // completions Push refused: overflow, or pushed after it
	Events      uint64 // completion events raised (armed CQ fired)
	Overruns    uint64 // 1 once the CQ has overflowed
}

// slotsFor returns rxe_queue_init's ring size for cqe entries: the next power of
// two above cqe, so that one slot stays free and capacity = slots - 1 >= cqe.
func slotsFor(cqe int) int { return 1 << bits.Len(uint(cqe)) }

func checkDepth(cqe int) error {
	if cqe <= 0 || cqe > MaxCQE {
		return fmt.Errorf("cq: depth %d not in 1..%d: %w", cqe, MaxCQE, ErrInvalid)
	}
	return nil
}

// New creates a CQ for at least cqe completions (ibv_create_cq). Like rxe it
// rounds the ring up to a power of two with one slot kept free, so Cqe() reports
// roundup_pow_of_two(cqe+1) - 1, which is what ibv_create_cq stores in cq->cqe.
func New(cqe int, opts Options) (*CQ, error) {
	if err := checkDepth(cqe); err != nil {
		return nil, err
	}
	if opts.Channel != nil && opts.Handler != nil {
		return nil, fmt.Errorf("cq: both a Channel and a Handler: %w", ErrInvalid)
	}
	n := slotsFor(cqe)
	c := &CQ{
		ring:    make([]WC, n),
		mask:    uint64(n - 1),
		cqe:     n - 1,
		ch:      opts.Channel,
		onError: opts.OnError,
		logf:    opts.Logf,
		context: opts.Context,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if opts.Handler != nil {
		h := opts.Handler
		c.handler.Store(&h)
	}
	if c.ch != nil {
		if err := c.ch.attach(); err != nil {
			return nil, err
		}
	}
	if opts.Handler != nil || opts.OnError != nil {
		c.mu.Lock()
		c.startLocked()
		c.mu.Unlock()
	}
	return c, nil
}

// Cqe returns the CQ's capacity, ibv_cq's cqe after create or resize.
func (c *CQ) Cqe() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cqe
}

// Len returns the number of completions queued, a snapshot.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.tail - c.head)
}

// Stats returns a snapshot of the CQ's counters.
func (c *CQ) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Push queues one completion; the engine calls it (rxe_cq_post). It copies *wc,
// never blocks and never allocates, and may be called by several goroutines at
// once. solicited says whether the completion is solicited: a receive of a message
// with the BTH SE bit. An unsuccessful completion counts as solicited whatever the
// argument says (see ReqNotify).
//
// If the CQ is armed and the completion qualifies, the arming is consumed and one
// completion event is raised: queued on the Channel, or handed to the handler's
// goroutine. Push itself never calls consumer code.
//
// Push returns false when the completion was not queued:
//   - the CQ is full: it overflows, as rxe_cq_post returns -EBUSY and raises
//     IB_EVENT_CQ_ERR. The CQ enters the error state for good ("the CQ cannot be
//     used", ibv_poll_cq(3)): this and every later Push is refused and counted in
//     Stats.Lost, ReqNotify and Resize fail with ErrOverrun, and OnError is called
//     once. Completions already queued can still be polled. The caller (the QP's
//     completer or responder) treats false as rxe treats -EBUSY: the QP goes to
//     the error state.
//   - the CQ is closed.
func (c *CQ) Push(wc *WC, solicited bool) bool {
	c.mu.Lock()
	if c.state != stateOpen {
		if c.state == stateOverrun {
			c.stats.Lost++
		}
		c.mu.Unlock()
		return false
	}
	if c.tail-c.head >= uint64(c.cqe) {
		c.state = stateOverrun
		c.armed = 0
		c.stats.Lost++
		c.stats.Overruns++
		c.mu.Unlock()
		c.raiseError()
		return false
	}
	c.ring[c.tail&c.mask] = *wc
	c.tail++
	c.stats.Completions++
	fire := c.armed&armNext != 0 ||
		c.armed&armSolicited != 0 && (solicited || wc.Status != Success)
	if fire {
		c.armed = 0
		c.stats.Events++
	}
	c.mu.Unlock()
	if fire {
		c.raiseEvent()
	}
	return true
}

// Poll moves up to len(wcs) completions, oldest first, into wcs and returns how
// many (ibv_poll_cq); fewer than len(wcs) means the CQ was empty at that moment.
// It never blocks and never allocates. It returns 0 once the CQ is closed.
func (c *CQ) Poll(wcs []WC) int {
	c.mu.Lock()
	n := c.tail - c.head
	if uint64(len(wcs)) < n {
		n = uint64(len(wcs))
	}
	if n == 0 {
		c.mu.Unlock()
		return 0
	}
	// At most two contiguous runs: up to the end of the ring, then from its start.
	i := c.head & c.mask
	k := copy(wcs[:n], c.ring[i:])
	copy(wcs[k:n], c.ring)
	c.head += n
	c.stats.Polled += n
	c.mu.Unlock()
	return int(n)
}

// ReqNotify arms the CQ for one completion event (ibv_req_notify_cq): for the next
// completion pushed, or, with solicitedOnly, for the next solicited one. It never
// blocks and never allocates.
//
// Semantics, as ibv_req_notify_cq(3) and rxe:
//   - One shot: one event per arming. Arming again before it fires changes
//     nothing, except that a solicitedOnly arming is widened by a later
//     next-completion one, never narrowed (rxe: cq->notify |= flags).
//   - Only completions pushed after the arming count. Completions already queued
//     do not raise an event: arm, then poll until empty, then wait. (The kernel's
//     IB_CQ_REPORT_MISSED_EVENTS is not part of libibverbs and is not offered.)
//   - Solicited means a receive of a message with the SE bit set, or any
//     completion whose status is not Success: ibv_req_notify_cq(3), after IBA
//     11.4.2.2. rxe lets its callers decide (its responder passes SE, or 1 for
//     flushes; its completer passes 0 even for errors); Push applies the man
//     page's rule to every completion so that an error always wakes a consumer.
//
// ReqNotify fails with ErrClosed after Close and ErrOverrun after an overflow.
func (c *CQ) ReqNotify(solicitedOnly bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateClosed:
		return errNotifyClosed
	case stateOverrun:
		return errNotifyOverrun
	}
	if solicitedOnly {
		c.armed |= armSolicited
	} else {
		c.armed |= armNext
	}
	return nil
}

// Resize changes the CQ's depth to at least cqe (ibv_resize_cq), rounding as New
// does; Cqe reports the result. Queued completions are kept, in order. It fails
// with ErrTooSmall if cqe is below the number of queued completions (rxe checks
// against the requested cqe, not the rounded one), ErrInvalid if cqe is out of
// range, ErrOverrun after an overflow and ErrClosed after Close. Arming survives.
// Resize allocates the new ring before it takes the lock; producers and pollers
// wait only for the copy of the queued completions.
func (c *CQ) Resize(cqe int) error {
	if err := checkDepth(cqe); err != nil {
		return err
	}
	n := slotsFor(cqe)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateClosed:
		return fmt.Errorf("cq: resize: %w", ErrClosed)
	case stateOverrun:
		return fmt.Errorf("cq: resize: %w", ErrOverrun)
	}
	queued := c.tail - c.head
	if uint64(cqe) < queued {
		return fmt.Errorf("cq: resize to %d with %d completions queued: %w", cqe, queued, ErrTooSmall)
	}
	if n == len(c.ring) {
		return nil
	}
	ring := make([]WC, n)
	i := c.head & c.mask
	k := copy(ring[:queued], c.ring[i:])
	copy(ring[k:queued], c.ring)
	c.ring, c.mask, c.cqe = ring, uint64(n-1), n-1
	c.head, c.tail = 0, queued
	return nil
}

// Acquire takes a reference for a QP (or SRQ) that will post completions here; a
// CQ with references cannot be closed (IBA C11-17, rxe's cq->num_wq). It fails
// with ErrClosed after Close.
func (c *CQ) Acquire() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return fmt.Errorf("cq: acquire: %w", ErrClosed)
	}
	c.refs++
	return nil
}

// Release drops a reference taken by Acquire. Without one it changes nothing and
// returns an error wrapping ErrInvalid (a bug in the caller's counting, but never
// a panic).
func (c *CQ) Release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs == 0 {
		return errReleaseUnheld
	}
	c.refs--
	return nil
}

// Close destroys the CQ (ibv_destroy_cq). It fails with ErrBusy, changing
// nothing, while QPs hold references (IBA C11-17) or while events that GetEvent
// returned are unacknowledged. ibv_destroy_cq blocks until they are acknowledged;
// Close returns instead, so that it never waits on the consumer: acknowledge and
// call it again. Events queued on the channel but not yet returned by GetEvent are
// discarded, as the kernel does when it releases a CQ.
//
// After a successful Close, Push returns false, Poll returns 0, and the
// dispatcher decides on no further handler or OnError call. A call it had already
// decided on, or that is running, may still run after Close returns: Close does
// not wait for it, because it may be the caller (a handler may close its own CQ).
// Done is closed when the last call has returned; wait on it for the guarantee
// that no consumer code of this CQ runs any more.
func (c *CQ) Close() error { return c.close(false) }

// Shutdown closes the CQ even while QPs hold references or events are
// unacknowledged: for the device's close, which has destroyed the QPs and outlives
// the consumer's bookkeeping. ErrClosed if it is closed already.
func (c *CQ) Shutdown() error { return c.close(true) }

func (c *CQ) close(force bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return fmt.Errorf("cq: close: %w", ErrClosed)
	}
	if c.refs > 0 && !force {
		return fmt.Errorf("cq: close: %d QPs still use the CQ: %w", c.refs, ErrBusy)
	}
	if c.ch != nil {
		if err := c.ch.detach(c, force); err != nil {
			return err
		}
	}
	c.state = stateClosed
	c.closed.Store(true)
	c.armed = 0
	c.head, c.tail = 0, 0
	c.ring = nil
	c.endDispatchLocked()
	return nil
}

// StopCallbacks ends the CQ's handler and OnError calls without closing it:
// completions are still queued and polled, but no consumer code of this CQ starts
// any more, and Done is closed when the last call has returned. The device's close
// uses it, so the flush completions it produced stay pollable while no handler
// runs after it. Idempotent.
func (c *CQ) StopCallbacks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endDispatchLocked()
}

// endDispatchLocked stops the dispatcher (or closes done if it never started),
// once. c.mu is held.
func (c *CQ) endDispatchLocked() {
	if c.quiet {
		return
	}
	c.quiet = true
	c.quietA.Store(true)
	if c.started {
		close(c.stop)
	} else {
		close(c.done)
	}
}

// OnDispatcher reports whether the caller is the CQ's dispatcher goroutine, that
// is, a handler or OnError of this CQ: a wait for Done from there would wait for
// itself.
func (c *CQ) OnDispatcher() bool {
	id := c.dispatcherID.Load()
	return id != 0 && id == goid.ID()
}

// Context returns Options.Context (ibv_cq's cq_context).
func (c *CQ) Context() any { return c.context }

// Done returns a channel that is closed once the CQ is closed and no handler or
// OnError call is running: from then on none will run.
func (c *CQ) Done() <-chan struct{} { return c.done }
