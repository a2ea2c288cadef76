package engine

import "github.com/xrnic/xrnic/nic/link"

// Poller is work the engine goroutine does in its loop besides the
// transport's: the attach server's rings, whose posts and completions then move
// without a goroutine of their own (run to completion: the core that runs the
// transport moves the rings too).
type Poller interface {
	// Poll does a bounded amount of work and reports whether it did any. It
	// runs where an engine's loop runs (an engine goroutine, or a busy poller
	// in Drive): on a device of several queues every engine calls it before
	// it takes its frames, possibly at the same time, so Poll serialises
	// itself. It must not block but on that, and of the device's API it may
	// post, poll and queue control operations, never wait for one.
	Poll() bool
	// Idle(true) comes before the first queue's engine sleeps: the poller
	// arms whatever wakes it (Device.Wake) when work comes, and reports
	// whether work came meanwhile (the engine then does not sleep).
	// Idle(false) comes when that engine wakes or does not sleep after all.
	// One call at a time, from that engine only: the other engines are woken
	// by the doorbells of the QPs the poller posts to.
	Idle(sleeping bool) bool
}

// AddPoller has every engine run p in every loop until RemovePoller: a
// receive a poller moves must be on its QP's queue before the frames that
// came after it are taken, by whichever engine takes them.
func (d *Device) AddPoller(p Poller) error {
	return d.execAll(func(e *engine) error {
		e.pollers = append(e.pollers, p)
		return nil
	}).Wait()
}

// RemovePoller stops running p; when it returns, p runs no more.
func (d *Device) RemovePoller(p Poller) error {
	return d.execAll(func(e *engine) error {
		for i, x := range e.pollers {
			if x == p {
				e.pollers = append(e.pollers[:i], e.pollers[i+1:]...)
				break
			}
		}
		return nil
	}).Wait()
}

// Wake makes the engine run its loop soon (a poller's doorbell).
func (d *Device) Wake() { d.wake() }

// poll runs the pollers. While they run, a QP's doorbell skips waking the
// engine: the loop drains the doorbells right after.
func (e *engine) poll() bool {
	if len(e.pollers) == 0 {
		return false
	}
	e.sh.polling.Store(true)
	e.lookedAgain = true
	busy := false
	for _, p := range e.pollers {
		if p.Poll() {
			busy = true
		}
	}
	e.sh.polling.Store(false)
	return busy
}

// pollersIdle tells the pollers the first queue's engine is about to sleep
// (or woke); it reports whether one of them found work. The other engines
// tell them nothing.
func (e *engine) pollersIdle(sleeping bool) bool {
	if e.sh.idx != 0 {
		return false
	}
	work := false
	for _, p := range e.pollers {
		if p.Idle(sleeping) {
			work = true
		}
	}
	return work
}

// WakeFD returns a descriptor whose write wakes the engine like Wake, when the
// link has one (link.Waker): a process attached to the daemon rings it as its
// doorbell. The caller closes it.
func (d *Device) WakeFD() (int, error) {
	w, ok := d.sh[0].link.(link.Waker)
	if !ok {
		return -1, errorf(ErrUnsupported, "the %s link has no wake-up descriptor", d.info.Kind)
	}
	return w.WakeFD()
}
