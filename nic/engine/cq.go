// Completion queues on the device: the cq package's ring, with the device's
// lifetime rules around it.

package engine

import (
	"context"

	"github.com/xrnic/xrnic/internal/spin"
	"github.com/xrnic/xrnic/nic/cq"
)

// CQOptions configure CreateCQ: cq.Options with the handlers given this
// package's *CQ.
type CQOptions struct {
	// Channel, if set, receives the CQ's completion events (see cq.Options).
	Channel *CompChannel
	// Handler is the completion handler, run on the CQ's own dispatcher goroutine
	// (see cq.Options.Handler).
	Handler func(*CQ)
	// OnError receives the CQ's overflow (IBV_EVENT_CQ_ERR) on the dispatcher; the
	// device's event handler gets EventCQErr as well.
	OnError func(*CQ)
	// Context is the consumer's value (cq_context), returned by Context.
	Context any
	// Logf logs the start and stop of the dispatcher goroutine.
	Logf func(format string, args ...any)
}

// CQ is a completion queue of the device (ibv_cq): the cq package's CQ (Poll,
// ReqNotify, Resize, AckEvents, Stats: see cq.CQ for their contract; Push and
// Acquire/Release are the engine's) whose QPs are its children. Safe for
// concurrent use.
type CQ struct {
	*cq.CQ
	d   *Device
	cqn uint32
	n   lifetime // children: the QPs that complete here
	ctx any
	// spin yields the CPU of a thread that spins on the CQ, now and then,
	// to an engine thread woken on it (internal/spin).
	spin spin.Counter
}

// Poll takes up to len(wcs) completions (ibv_poll_cq). With Config.BusyPoll,
// a poll that finds none drives the engine once (Drive) and looks again;
// without, every spin.Every-th of a run of polls that find none yields
// the CPU.
func (c *CQ) Poll(wcs []cq.WC) int {
	n := c.CQ.Poll(wcs)
	if n == 0 {
		if !c.d.cfg.BusyPoll {
			c.spin.Idle()
		} else if c.d.driveFor(c.CQ) {
			n = c.CQ.Poll(wcs)
		}
	} else {
		c.spin.Found()
	}
	return n
}

// CreateCQ creates a completion queue for at least cqe completions
// (ibv_create_cq). Its overflow is also reported to the device's event handler as
// EventCQErr, after opts.OnError.
func (d *Device) CreateCQ(cqe int, opts CQOptions) (*CQ, error) {
	if cqe > MaxCQE {
		return nil, errorf(ErrInvalid, "CQ of %d entries exceeds %d", cqe, MaxCQE)
	}
	c := &CQ{d: d, ctx: opts.Context}
	if err := c.n.adopt(&d.n); err != nil {
		return nil, err
	}
	o := cq.Options{Logf: opts.Logf, Context: c}
	if opts.Channel != nil {
		o.Channel = opts.Channel.Channel
	}
	if h := opts.Handler; h != nil {
		o.Handler = func(*cq.CQ) { h(c) }
	}
	user := opts.OnError
	o.OnError = func(*cq.CQ) {
		if user != nil {
			user(c)
		}
		d.evq.post(AsyncEvent{Type: EventCQErr, CQ: c})
	}
	r, err := cq.New(cqe, o)
	if err != nil {
		c.n.orphan()
		return nil, wrap(err)
	}
	c.CQ = r
	d.mu.Lock()
	d.cqSeq++
	c.cqn = d.cqSeq
	d.cqs[c] = struct{}{}
	d.mu.Unlock()
	return c, nil
}

// Context returns CQOptions.Context.
func (c *CQ) Context() any { return c.ctx }

// SetHandler installs (or, with nil, removes) the completion handler (see
// cq.CQ.SetHandler).
func (c *CQ) SetHandler(h func(*CQ)) error {
	if h == nil {
		return c.CQ.SetHandler(nil)
	}
	return c.CQ.SetHandler(func(*cq.CQ) { h(c) })
}

// Destroy destroys the CQ (ibv_destroy_cq). It fails with ErrBusy, changing
// nothing, while QPs use it or completion events that GetEvent returned are
// unacknowledged. Otherwise the Op completes once no handler, OnError or event
// handler call for the CQ runs any more; completions still queued are discarded.
// Waiting for it from the CQ's own handler fails with ErrDeadlock: use Notify.
func (c *CQ) Destroy() *Op {
	// cq.CQ.Close refuses unacknowledged events; run under the lifetime's
	// lock, its refusal changes nothing even for a moment (a CreateQP on the
	// CQ meanwhile must not fail).
	if err := c.n.closeBusyWith(c.CQ.Close); err != nil {
		return c.d.doneOp(err)
	}
	op := c.d.newOp()
	op.guard = func() bool { return c.OnDispatcher() || c.d.evq.delivering(&c.n) }
	c.retire(op)
	return op
}

// Close destroys the CQ once the last QP using it is destroyed (NDKPI's close of
// an antecedent, LT8); the Op completes as Destroy's. Unacknowledged channel
// events are dropped.
func (c *CQ) Close() *Op {
	op := c.d.newOp()
	op.guard = func() bool { return c.OnDispatcher() || c.d.evq.delivering(&c.n) }
	if err := c.n.closeWhenIdle(func() {
		c.CQ.Shutdown()
		c.retire(op)
	}); err != nil {
		op.finish(err)
	}
	return op
}

// retire forgets the closed CQ and completes op when its dispatcher and its
// event deliveries have ended.
func (c *CQ) retire(op *Op) {
	d := c.d
	d.mu.Lock()
	delete(d.cqs, c)
	d.mu.Unlock()
	c.n.orphan()
	select {
	case <-c.Done():
		d.evq.finishClose(&c.n, op, nil)
	default:
		go func() {
			<-c.Done()
			d.evq.finishClose(&c.n, op, nil)
		}()
	}
}

// CompChannel is a completion channel (ibv_comp_channel) whose events name this
// package's CQs. Safe for concurrent use.
type CompChannel struct{ *cq.Channel }

// NewCompChannel creates a completion channel (ibv_create_comp_channel).
func NewCompChannel() *CompChannel { return &CompChannel{cq.NewChannel()} }

// GetEvent waits for the next completion event and returns its CQ
// (ibv_get_cq_event); see cq.Channel.GetEvent.
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	c, err := ch.Channel.GetEvent(ctx)
	if err != nil {
		return nil, err
	}
	ec, ok := c.Context().(*CQ)
	if !ok { // a cq.CQ made outside a device and given this channel
		c.AckEvents(1)
		return nil, errorf(ErrInvalid, "a completion event of a CQ that is not a device's")
	}
	return ec, nil
}
