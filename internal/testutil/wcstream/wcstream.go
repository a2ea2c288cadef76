// Package wcstream is a test helper: it collects one CQ's work completions in
// the order they are polled, for tests that must see every WR complete exactly
// once (peer death, link flaps). A Stream belongs to one goroutine.
package wcstream

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
)

// Poller is a CQ (nic/cq's, or verbs', which is the same type).
type Poller interface {
	Poll(wc []cq.WC) int
}

// Stream collects a requester's completions in order and notes when the first
// failed one was polled.
type Stream struct {
	CQ    Poller
	WCs   []cq.WC
	ErrAt time.Time // when the first completion with an error was polled
	buf   [64]cq.WC
}

// Poll takes what the CQ has and returns how many it took.
func (s *Stream) Poll() int {
	k := s.CQ.Poll(s.buf[:])
	for _, w := range s.buf[:k] {
		if w.Status != cq.Success && s.ErrAt.IsZero() {
			s.ErrAt = time.Now()
		}
	}
	s.WCs = append(s.WCs, s.buf[:k]...)
	return k
}

// Until polls until cond holds; after d it fails the test with what.
func (s *Stream) Until(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if s.Poll() == 0 {
			if time.Now().After(end) {
				t.Fatalf("%s: not within %v (%d completions so far)", what, d, len(s.WCs))
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// MarkProgress snapshots counters and the time, then drains the CQ and waits
// (up to d) for one more successful completion: the engine made it after the
// drain found the CQ empty, so the requester's last progress (which restores
// retry_cnt and restarts the local ACK timer) comes after the returned time,
// give or take one engine pass. before names what must not have happened yet.
// refill, when not nil, is called with the number of completions once the
// drain found the CQ empty: it posts more WRs if the stream has ended (on a
// loaded host the engines may finish it before the test gets here), whose
// completion then comes after the mark.
func MarkProgress[C any](t testing.TB, s *Stream, counters func() C, d time.Duration, before string, refill func(completed int)) (C, time.Time) {
	t.Helper()
	c0, t0 := counters(), time.Now()
	for s.Poll() > 0 {
	}
	n := len(s.WCs)
	if refill != nil {
		refill(n)
	}
	s.Until(t, "a completion after the mark (did the stream end before "+before+"?)", d,
		func() bool { return len(s.WCs) > n })
	if w := s.WCs[n]; w.Status != cq.Success {
		t.Fatalf("the stream failed before %s: %+v", before, w)
	}
	return c0, t0
}
