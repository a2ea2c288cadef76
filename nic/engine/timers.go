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
	when time.Duration // since the engine's epoch
	idx  int           // position in the heap, -1 when not armed
	qp   *QP
	kind timerKind
}

func (t *timer) init(qp *QP, k timerKind) { *t = timer{idx: -1, qp: qp, kind: k} }

// armed reports whether the timer is pending (rxe timer_pending).
func (t *timer) armed() bool { return t.idx >= 0 }

// timerHeap is a binary min-heap of armed timers ordered by deadline. It never
// allocates once its backing array has grown to the number of QP timers.
type timerHeap struct {
	h []*timer
}

// set arms t to fire at when, or moves it there (rxe mod_timer).
func (th *timerHeap) set(t *timer, when time.Duration) {
	if t.idx < 0 {
		t.when = when
		t.idx = len(th.h)
		th.h = append(th.h, t)
		th.up(t.idx)
		return
	}
	old := t.when
	t.when = when
	if when < old {
		th.up(t.idx)
	} else {
		th.down(t.idx)
	}
}

// stop disarms t (rxe del_timer).
func (th *timerHeap) stop(t *timer) {
	i := t.idx
	if i < 0 {
		return
	}
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

// next returns the earliest deadline; ok is false when no timer is armed.
func (th *timerHeap) next() (when time.Duration, ok bool) {
	if len(th.h) == 0 {
		return 0, false
	}
	return th.h[0].when, true
}

// popDue disarms and returns the earliest timer if it is due at now.
func (th *timerHeap) popDue(now time.Duration) *timer {
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
		if th.h[p].when <= th.h[i].when {
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
		if r := l + 1; r < n && th.h[r].when < th.h[l].when {
			m = r
		}
		if th.h[i].when <= th.h[m].when {
			return
		}
		th.swap(i, m)
		i = m
	}
}
