// Benchmarks of the hot path, and the measurement behind the choice of a
// mutex-guarded ring over a lock-free Vyukov MPMC ring (see doc.go).

package cq

import (
	"sync/atomic"
	"testing"
)

// Push then Poll one completion, one goroutine: the uncontended cost per
// completion.
func BenchmarkPushPoll(b *testing.B) {
	c := mustNew(b, 1023, Options{})
	wc := WC{WRID: 1, Opcode: Recv, ByteLen: 64}
	var buf [1]WC
	b.ReportAllocs()
	for b.Loop() {
		c.Push(&wc, false)
		c.Poll(buf[:])
	}
}

// Push 16, then Poll them in one batch: the amortised cost when the consumer
// polls in batches, as perftest does.
func BenchmarkPushPollBatch16(b *testing.B) {
	c := mustNew(b, 1023, Options{})
	wc := WC{WRID: 1, Opcode: Recv, ByteLen: 64}
	var buf [16]WC
	b.ReportAllocs()
	for b.Loop() {
		for range len(buf) {
			c.Push(&wc, false)
		}
		c.Poll(buf[:])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(buf)), "ns/completion")
}

// Every goroutine pushes one and polls one on a shared CQ: the contended cost.
func BenchmarkPushPollParallel(b *testing.B) {
	c := mustNew(b, 4095, Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		wc := WC{WRID: 1, Opcode: Recv, ByteLen: 64}
		var buf [1]WC
		for pb.Next() {
			c.Push(&wc, false)
			c.Poll(buf[:])
		}
	})
}

// Arm, push and poll with a handler installed: every round raises an event and
// wakes the dispatcher.
func BenchmarkPushArmedHandler(b *testing.B) {
	var calls atomic.Int64
	c := mustNew(b, 1023, Options{Handler: func(*CQ) { calls.Add(1) }})
	wc := WC{WRID: 1, Opcode: Recv, ByteLen: 64}
	var buf [1]WC
	b.ReportAllocs()
	for b.Loop() {
		_ = c.ReqNotify(false)
		c.Push(&wc, false)
		c.Poll(buf[:])
	}
}

// vyukovRing is the lock-free alternative that was measured: Dmitry Vyukov's
// bounded MPMC queue, a sequence number per slot. Test-only.
type vyukovRing struct {
	enq   atomic.Uint64
	_     [56]byte
	deq   atomic.Uint64
	_     [56]byte
	slots []vyukovSlot
	mask  uint64
}

type vyukovSlot struct {
	seq atomic.Uint64
	wc  WC
}

func newVyukovRing(n int) *vyukovRing {
	r := &vyukovRing{slots: make([]vyukovSlot, n), mask: uint64(n - 1)}
	for i := range r.slots {
		r.slots[i].seq.Store(uint64(i))
	}
	return r
}

func (r *vyukovRing) push(wc *WC) bool {
	pos := r.enq.Load()
	for {
		s := &r.slots[pos&r.mask]
		switch d := int64(s.seq.Load() - pos); {
		case d == 0:
			if r.enq.CompareAndSwap(pos, pos+1) {
				s.wc = *wc
				s.seq.Store(pos + 1)
				return true
			}
			pos = r.enq.Load()
		case d < 0:
			return false // full
		default:
			pos = r.enq.Load()
		}
	}
}

func (r *vyukovRing) pop(out *WC) bool {
	pos := r.deq.Load()
	for {
		s := &r.slots[pos&r.mask]
		switch d := int64(s.seq.Load() - (pos + 1)); {
		case d == 0:
			if r.deq.CompareAndSwap(pos, pos+1) {
				*out = s.wc
				s.seq.Store(pos + r.mask + 1)
				return true
			}
			pos = r.deq.Load()
		case d < 0:
			return false // empty
		default:
			pos = r.deq.Load()
		}
	}
}

func (r *vyukovRing) poll(wcs []WC) int {
	for i := range wcs {
		if !r.pop(&wcs[i]) {
			return i
		}
	}
	return len(wcs)
}

// The lock-free ring must be correct for the comparison to mean anything.
func TestVyukovRingFIFO(t *testing.T) {
	r := newVyukovRing(8)
	for i := range 8 {
		if !r.push(wcID(uint64(i))) {
			t.Fatalf("push %d failed", i)
		}
	}
	if r.push(wcID(8)) {
		t.Fatal("push on a full ring succeeded")
	}
	var buf [8]WC
	if n := r.poll(buf[:]); n != 8 || buf[7].WRID != 7 {
		t.Fatalf("poll = %d, last %d", n, buf[7].WRID)
	}
}

func BenchmarkRing(b *testing.B) {
	wc := WC{WRID: 1, Opcode: Recv, ByteLen: 64}
	b.Run("mutex/single", func(b *testing.B) {
		c := mustNew(b, 4095, Options{})
		var buf [1]WC
		for b.Loop() {
			c.Push(&wc, false)
			c.Poll(buf[:])
		}
	})
	b.Run("vyukov/single", func(b *testing.B) {
		r := newVyukovRing(4096)
		var buf [1]WC
		for b.Loop() {
			r.push(&wc)
			r.poll(buf[:])
		}
	})
	b.Run("mutex/batch16", func(b *testing.B) {
		c := mustNew(b, 4095, Options{})
		var buf [16]WC
		for b.Loop() {
			for range len(buf) {
				c.Push(&wc, false)
			}
			c.Poll(buf[:])
		}
	})
	b.Run("vyukov/batch16", func(b *testing.B) {
		r := newVyukovRing(4096)
		var buf [16]WC
		for b.Loop() {
			for range len(buf) {
				r.push(&wc)
			}
			r.poll(buf[:])
		}
	})
	b.Run("mutex/parallel", func(b *testing.B) {
		c := mustNew(b, 4095, Options{})
		b.RunParallel(func(pb *testing.PB) {
			var buf [1]WC
			for pb.Next() {
				c.Push(&wc, false)
				c.Poll(buf[:])
			}
		})
	})
	b.Run("vyukov/parallel", func(b *testing.B) {
		r := newVyukovRing(4096)
		b.RunParallel(func(pb *testing.PB) {
			var buf [1]WC
			for pb.Next() {
				r.push(&wc)
				r.poll(buf[:])
			}
		})
	})
}
