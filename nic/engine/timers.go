// Timers: the retransmission (local ACK timeout) and RNR timers of each QP, kept
// in one min-heap owned by the engine goroutine.

package engine

import "time"

// timerKind says what a QP timer does when it fires.
type timerKind uint8

const (
	timerRetransmit timerKind = iota // rxe retransmit_timer: no ACK within the local ACK timeout
	timerRNR                         // rxe rnr_nak_timer: the RNR NAK wait is over
	timerRoom                        // a QP waiting in its destination's room looks for stale QPs there (cwnd.go)
)

// timer is one QP timer. Engine-owned: no locks.
type timer struct {
	when time.Duration // the deadline, since the engine's epoch, while on
	key  time.Duration // its place in the heap: at most when while on
	idx  int           // position in the heap, -1 when not in it
	on   bool
	qp   *QP
	kind timerKind
}

func (t *timer) init(qp *QP, k timerKind) { *t = timer{idx: -1, qp: qp, kind: k} }

// armed reports whether the timer is pending (rxe timer_pending).
func (t *timer) armed() bool { return t.on }

// timerHeap is a binary min-heap of timers by key. It never allocates once its
// backing array has grown to the number of QP timers.
//
// An ACK moves its QP's retransmit timer later, or stops it when nothing is
// left outstanding, and the next request starts it again: with the heap's
// order kept exact, two heap operations of log2(timers) steps each for every
// ACK, 81 instructions a WRITE at 256 QPs (BenchmarkInstructions), where
// the kernel's timer wheel makes rxe's mod_timer O(1). So a timer moved later
// keeps its place (its key) and one stopped with lapse its slot, and tidy sets
// them right when they come to the top: once a timeout for a QP that ACKs
// keep moving. stop takes a timer out at once, so that the heap keeps no
// pointer to a QP that is gone or cannot send (cwnd.go).
type timerHeap struct {
	h []*timer
}

// set arms t to fire at when, or moves it there (rxe mod_timer).
func (th *timerHeap) set(t *timer, when time.Duration) {
	t.when, t.on = when, true
	switch {
	case t.idx < 0:
		t.key = when
		t.idx = len(th.h)
		th.h = append(th.h, t)
		th.up(t.idx)
	case when < t.key:
		t.key = when
		th.up(t.idx)
	}
}

// lapse disarms t and leaves its slot to tidy: for the timers of a QP that
// can send, which it arms again soon (the retransmit timer the completer
// stops, the room timer roomFreed does).
func (th *timerHeap) lapse(t *timer) { t.on = false }

// stop disarms t and takes it out of the heap (rxe del_timer).
func (th *timerHeap) stop(t *timer) {
	t.on = false
	if t.idx >= 0 {
		th.remove(t.idx)
	}
}

// remove takes the timer at position i out of the heap.
func (th *timerHeap) remove(i int) {
	t := th.h[i]
	last := len(th.h) - 1
	if i != last {
		th.swap(i, last)
	}
	th.h[last] = nil
	th.h = th.h[:last]
	t.idx = -1
	if i != last {
		th.down(i)
		th.up(i)
	}
}

// tidy brings to the top a timer that is on and keyed at its deadline, or
// empties the heap: what lapse and set left behind moves or goes when it
// comes up.
func (th *timerHeap) tidy() {
	for len(th.h) > 0 {
		switch t := th.h[0]; {
		case !t.on:
			th.remove(0)
		case t.key < t.when:
			t.key = t.when
			th.down(0)
		default:
			return
		}
	}
}

// next returns the earliest deadline; ok is false when no timer is armed.
func (th *timerHeap) next() (when time.Duration, ok bool) {
	th.tidy()
	if len(th.h) == 0 {
		return 0, false
	}
	return th.h[0].when, true
}

// popDue disarms and returns the earliest timer if it is due at now. It tidies
// only once the top's key is due: no key is later than its deadline, so a
// pass of the engine finds nothing due at the cost of one look.
func (th *timerHeap) popDue(now time.Duration) *timer {
	if len(th.h) == 0 || th.h[0].key > now {
		return nil
	}
	th.tidy()
	if len(th.h) == 0 || th.h[0].when > now {
		return nil
	}
	t := th.h[0]
	th.stop(t)
	return t
}

func (th *timerHeap) swap(i, j int) {
	th.h[i], th.h[j] = th.h[j], th.h[i]
	th.h[i].idx = i
	th.h[j].idx = j
}

func (th *timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if th.h[p].key <= th.h[i].key {
			return
		}
		th.swap(i, p)
		i = p
	}
}

func (th *timerHeap) down(i int) {
	n := len(th.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && th.h[r].key < th.h[l].key {
			m = r
		}
		if th.h[i].key <= th.h[m].key {
			return
		}
		th.swap(i, m)
		i = m
	}
}
