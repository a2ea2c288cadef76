// The ring: sizing, order, resize, overflow, references, close, allocations, and
// a randomized differential test against a naive model.

package cq

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func wcID(id uint64) *WC { return &WC{WRID: id, Opcode: Send, ByteLen: uint32(id)} }

func pushN(t testing.TB, c *CQ, from, n uint64) {
	t.Helper()
	for id := from; id < from+n; id++ {
		if !c.Push(wcID(id), false) {
			t.Fatalf("Push(%d) = false, want true", id)
		}
	}
}

// pollAll drains c and returns the WRIDs in order.
func pollAll(c *CQ) []uint64 {
	var ids []uint64
	buf := make([]WC, 7)
	for {
		n := c.Poll(buf)
		for _, wc := range buf[:n] {
			ids = append(ids, wc.WRID)
		}
		if n < len(buf) {
			return ids
		}
	}
}

func seq(from, n uint64) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = from + uint64(i)
	}
	return s
}

// Depths round as rxe_queue_init does: roundup_pow_of_two(cqe+1) - 1.
func TestNewRoundsDepthLikeRXE(t *testing.T) {
	for _, tt := range []struct{ cqe, want int }{
		{1, 1}, {2, 3}, {3, 3}, {4, 7}, {7, 7}, {8, 15}, {100, 127},
		{127, 127}, {128, 255}, {MaxCQE, MaxCQE},
	} {
		c := mustNew(t, tt.cqe, Options{})
		if got := c.Cqe(); got != tt.want {
			t.Errorf("New(%d).Cqe() = %d, want %d", tt.cqe, got, tt.want)
		}
		// Exactly Cqe() completions fit.
		pushN(t, c, 0, uint64(tt.want))
		if c.Len() != tt.want {
			t.Errorf("New(%d): Len = %d after %d pushes", tt.cqe, c.Len(), tt.want)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, cqe := range []int{-1, 0, MaxCQE + 1} {
		if _, err := New(cqe, Options{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%d) error = %v, want ErrInvalid", cqe, err)
		}
	}
	ch := NewChannel()
	if _, err := New(1, Options{Channel: ch, Handler: func(*CQ) {}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("New with Channel and Handler: error = %v, want ErrInvalid", err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(1, Options{Channel: ch}); !errors.Is(err, ErrClosed) {
		t.Errorf("New on a closed channel: error = %v, want ErrClosed", err)
	}
}

func TestPushPollFIFOAcrossWrap(t *testing.T) {
	c := mustNew(t, 7, Options{})
	var next, want uint64
	for round := range 20 {
		n := uint64(round%7 + 1)
		pushN(t, c, next, n)
		next += n
		got := pollAll(c)
		if !slices.Equal(got, seq(want, n)) {
			t.Fatalf("round %d: polled %v, want %v", round, got, seq(want, n))
		}
		want += n
	}
	if n := c.Poll(make([]WC, 4)); n != 0 {
		t.Errorf("Poll on empty CQ = %d, want 0", n)
	}
	if n := c.Poll(nil); n != 0 {
		t.Errorf("Poll(nil) = %d, want 0", n)
	}
	s := c.Stats()
	if s.Completions != next || s.Polled != next || s.Lost != 0 {
		t.Errorf("Stats = %+v, want Completions = Polled = %d, Lost = 0", s, next)
	}
}

func TestPollCopiesWholeWC(t *testing.T) {
	c := mustNew(t, 3, Options{})
	in := WC{
		WRID: 0xdeadbeefcafe, Status: RemAccessErr, Opcode: RecvRDMAWithImm, VendorErr: 7,
		ByteLen: 4096, ImmData: 0x01020304, InvalidatedRKey: 0x55, QPN: 0x11, SrcQP: 0x22,
		Flags: WithImm | GRH, PKeyIndex: 3, SLID: 4, SL: 5, DLIDPathBits: 6,
	}
	c.Push(&in, true)
	var out [1]WC
	if n := c.Poll(out[:]); n != 1 || out[0] != in {
		t.Errorf("Poll = %d, %+v; want 1, %+v", n, out[0], in)
	}
}

func TestResizeKeepsOrder(t *testing.T) {
	c := mustNew(t, 7, Options{})
	// Wrap the ring first so the queued completions straddle its end.
	pushN(t, c, 0, 5)
	pollAll(c)
	pushN(t, c, 100, 6)
	for _, tt := range []struct{ cqe, want int }{{100, 127}, {6, 7}, {20, 31}, {6, 7}} {
		if err := c.Resize(tt.cqe); err != nil {
			t.Fatalf("Resize(%d): %v", tt.cqe, err)
		}
		if got := c.Cqe(); got != tt.want {
			t.Errorf("Resize(%d): Cqe = %d, want %d", tt.cqe, got, tt.want)
		}
	}
	pushN(t, c, 106, 1)
	if got := pollAll(c); !slices.Equal(got, seq(100, 7)) {
		t.Errorf("after resizes polled %v, want %v", got, seq(100, 7))
	}
}

func TestResizeRejectsTooSmall(t *testing.T) {
	c := mustNew(t, 15, Options{})
	pushN(t, c, 0, 10)
	if err := c.Resize(9); !errors.Is(err, ErrTooSmall) {
		t.Errorf("Resize(9) with 10 queued: error = %v, want ErrTooSmall", err)
	}
	if c.Cqe() != 15 || c.Len() != 10 {
		t.Errorf("failed Resize changed the CQ: Cqe = %d, Len = %d", c.Cqe(), c.Len())
	}
	// rxe checks the requested depth, not the rounded one: 10 fits exactly.
	if err := c.Resize(10); err != nil {
		t.Errorf("Resize(10) with 10 queued: %v", err)
	}
	for _, cqe := range []int{0, -3, MaxCQE + 1} {
		if err := c.Resize(cqe); !errors.Is(err, ErrInvalid) {
			t.Errorf("Resize(%d): error = %v, want ErrInvalid", cqe, err)
		}
	}
	if got := pollAll(c); !slices.Equal(got, seq(0, 10)) {
		t.Errorf("polled %v, want %v", got, seq(0, 10))
	}
}

func TestResizeKeepsArming(t *testing.T) {
	ch := NewChannel()
	t.Cleanup(func() { _ = ch.Close() })
	c := mustNew(t, 3, Options{Channel: ch})
	if err := c.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(50); err != nil {
		t.Fatal(err)
	}
	pushN(t, c, 0, 1)
	if got := drainEvents(t, ch); got[c] != 1 {
		t.Errorf("events after resize = %d, want 1", got[c])
	}
}

// Overflow: Push refuses, the CQ goes to the error state for good, OnError runs
// once on the dispatcher, queued completions can still be polled (rxe_cq_post).
func TestOverflowRaisesCQErrOnce(t *testing.T) {
	errs := make(chan *CQ, 10)
	c := mustNew(t, 3, Options{OnError: func(c *CQ) { errs <- c }})
	pushN(t, c, 0, 3)
	for i := range 5 {
		if c.Push(wcID(uint64(10+i)), false) {
			t.Fatalf("Push %d on a full CQ = true, want false", i)
		}
	}
	select {
	case got := <-errs:
		if got != c {
			t.Errorf("OnError got CQ %p, want %p", got, c)
		}
	case <-time.After(watchdog):
		t.Fatal("OnError not called")
	}
	if got := pollAll(c); !slices.Equal(got, seq(0, 3)) {
		t.Errorf("polled %v after overflow, want %v", got, seq(0, 3))
	}
	if c.Push(wcID(99), false) {
		t.Error("Push after overflow and drain = true, want false (error state is final)")
	}
	if err := c.ReqNotify(false); !errors.Is(err, ErrOverrun) {
		t.Errorf("ReqNotify after overflow: error = %v, want ErrOverrun", err)
	}
	if err := c.Resize(100); !errors.Is(err, ErrOverrun) {
		t.Errorf("Resize after overflow: error = %v, want ErrOverrun", err)
	}
	s := c.Stats()
	if s.Lost != 6 || s.Overruns != 1 || s.Completions != 3 {
		t.Errorf("Stats = %+v, want Lost 6, Overruns 1, Completions 3", s)
	}
	closeAndWait(t, c)
	if n := len(errs); n != 0 {
		t.Errorf("OnError called %d more times, want once in all", n)
	}
}

func TestCloseSemantics(t *testing.T) {
	calls := make(chan struct{}, 100)
	c, err := New(7, Options{Handler: func(*CQ) { calls <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Acquire(); err != nil {
		t.Fatal(err)
	}
	if err := c.Acquire(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with 2 references: error = %v, want ErrBusy", err)
	}
	pushN(t, c, 0, 1) // the failed Close left the CQ working
	c.Release()
	if err := c.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with 1 reference: error = %v, want ErrBusy", err)
	}
	c.Release()
	if err := c.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(watchdog):
		t.Fatal("Done not closed after Close")
	}
	if c.Push(wcID(1), false) {
		t.Error("Push after Close = true, want false")
	}
	if n := c.Poll(make([]WC, 4)); n != 0 {
		t.Errorf("Poll after Close = %d, want 0 (queued completions are discarded)", n)
	}
	for name, err := range map[string]error{
		"ReqNotify":  c.ReqNotify(false),
		"Close":      c.Close(),
		"Acquire":    c.Acquire(),
		"Resize":     c.Resize(3),
		"SetHandler": c.SetHandler(func(*CQ) {}),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: error = %v, want ErrClosed", name, err)
		}
	}
	if len(calls) != 0 {
		t.Errorf("handler ran %d times after Close; the armed CQ got no completion before it", len(calls))
	}
	if s := c.Stats(); s.Lost != 0 {
		t.Errorf("Push after Close counted as lost: %+v", s)
	}
}

// Release without Acquire is misuse reachable from the application (verbs.CQ):
// an error, never a panic, and the CQ still closes.
func TestReleaseWithoutAcquireFails(t *testing.T) {
	c := mustNew(t, 1, Options{})
	if err := c.Release(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Release without Acquire: %v, want ErrInvalid", err)
	}
}

// A CQ without handler or OnError never starts a goroutine; Done closes at Close.
func TestCloseWithoutDispatcher(t *testing.T) {
	c, err := New(1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.started {
		t.Error("dispatcher started without a handler")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed after Close of a CQ without dispatcher")
	}
}

// The hot path allocates nothing: Push, Poll and ReqNotify, with an event raised
// on every round, in each notification mode.
func TestPushPollReqNotifyDoNotAllocate(t *testing.T) {
	ch := NewChannel()
	t.Cleanup(func() { _ = ch.Close() })
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"plain", Options{}},
		{"handler", Options{Handler: func(*CQ) {}}},
		{"channel", Options{Channel: ch}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, 63, tt.opts)
			var buf [8]WC
			wc := WC{WRID: 1, Opcode: Recv, Flags: WithImm}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			allocs := testing.AllocsPerRun(1000, func() {
				_ = c.ReqNotify(false)
				for range 4 {
					c.Push(&wc, false)
				}
				c.Poll(buf[:])
				if tt.opts.Channel != nil {
					if _, err := ch.GetEvent(ctx); err == nil {
						c.AckEvents(1)
					}
				}
			})
			if allocs != 0 {
				t.Errorf("allocs per Push/Poll/ReqNotify round = %v, want 0", allocs)
			}
		})
	}
}

// model is the naive reference for the differential test: a slice, an arming
// word and an event counter, following the documented rules.
type model struct {
	q       []WC
	cqe     int
	armed   uint8
	overrun bool
	events  int
}

func (m *model) push(wc WC, solicited bool) bool {
	if m.overrun {
		return false
	}
	if len(m.q) == m.cqe {
		m.overrun, m.armed = true, 0
		return false
	}
	m.q = append(m.q, wc)
	if m.armed&armNext != 0 || m.armed&armSolicited != 0 && (solicited || wc.Status != Success) {
		m.armed = 0
		m.events++
	}
	return true
}

func (m *model) poll(n int) []WC {
	n = min(n, len(m.q))
	out := slices.Clone(m.q[:n])
	m.q = m.q[n:]
	return out
}

// A long random sequence of operations, against the model, through a channel.
func TestDifferentialAgainstModel(t *testing.T) {
	ch := NewChannel()
	t.Cleanup(func() { _ = ch.Close() })
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		depth := 1 + rng.IntN(40)
		c, err := New(depth, Options{Channel: ch})
		if err != nil {
			t.Fatal(err)
		}
		m := &model{cqe: c.Cqe()}
		var id uint64
		buf := make([]WC, 50)
		for step := range 3000 {
			switch op := rng.IntN(100); {
			case op < 45:
				wc := WC{WRID: id, Status: Success, Opcode: Recv}
				if rng.IntN(8) == 0 {
					wc.Status = Status(1 + rng.IntN(int(TMRndvIncomplete)))
				}
				sol := rng.IntN(3) == 0
				id++
				if got, want := c.Push(&wc, sol), m.push(wc, sol); got != want {
					t.Fatalf("seed %d step %d: Push = %v, model %v", seed, step, got, want)
				}
			case op < 75:
				n := rng.IntN(len(buf) + 1)
				got := buf[:c.Poll(buf[:n])]
				if want := m.poll(n); !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: Poll(%d) = %v, model %v", seed, step, n, got, want)
				}
			case op < 90:
				sol := rng.IntN(2) == 0
				err := c.ReqNotify(sol)
				if m.overrun != errors.Is(err, ErrOverrun) {
					t.Fatalf("seed %d step %d: ReqNotify error %v, model overrun %v", seed, step, err, m.overrun)
				}
				if err == nil {
					if sol {
						m.armed |= armSolicited
					} else {
						m.armed |= armNext
					}
				}
			case op < 97:
				n := 1 + rng.IntN(60)
				err := c.Resize(n)
				switch {
				case m.overrun:
					if !errors.Is(err, ErrOverrun) {
						t.Fatalf("seed %d step %d: Resize(%d) after overrun: %v", seed, step, n, err)
					}
				case n < len(m.q):
					if !errors.Is(err, ErrTooSmall) {
						t.Fatalf("seed %d step %d: Resize(%d) with %d queued: %v", seed, step, n, len(m.q), err)
					}
				default:
					if err != nil {
						t.Fatalf("seed %d step %d: Resize(%d): %v", seed, step, n, err)
					}
					m.cqe = slotsFor(n) - 1
				}
			default:
				if got := c.Len(); got != len(m.q) {
					t.Fatalf("seed %d step %d: Len = %d, model %d", seed, step, got, len(m.q))
				}
				if got := c.Cqe(); got != m.cqe {
					t.Fatalf("seed %d step %d: Cqe = %d, model %d", seed, step, got, m.cqe)
				}
			}
		}
		if got := drainEvents(t, ch)[c]; got != m.events {
			t.Errorf("seed %d: %d events, model %d", seed, got, m.events)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
