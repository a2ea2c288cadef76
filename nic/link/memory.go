package link

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Faults is the seeded, deterministic fault model of a memory link direction. Rates
// are probabilities per frame in [0, 1]. With the same seed and the same sequence of
// frames the same faults happen, so a failing run can be replayed.
type Faults struct {
	Seed      uint64
	Drop      float64 // the frame vanishes
	Duplicate float64 // the frame is delivered twice
	Reorder   float64 // the frame is held back and delivered after the next one
	Corrupt   float64 // one bit of the frame is flipped
}

func (f Faults) validate() error {
	for _, r := range []float64{f.Drop, f.Duplicate, f.Reorder, f.Corrupt} {
		if r < 0 || r > 1 || r != r {
			return fmt.Errorf("%w: fault rate %v outside [0, 1]", ErrBadOption, r)
		}
	}
	return nil
}

func (f Faults) any() bool { return f.Drop > 0 || f.Duplicate > 0 || f.Reorder > 0 || f.Corrupt > 0 }

// MemoryOptions configures NewMemoryPair.
type MemoryOptions struct {
	MTU   int // IP MTU reported by Info (default 4200, enough for RoCE MTU 4096)
	Depth int // frames queued per direction before WriteBatch reports full (default 1024)
	// AtoB and BtoA inject faults on each direction.
	AtoB, BtoA Faults
}

// NewMemoryPair returns two links wired back to back: what one writes, the other reads.
func NewMemoryPair(opts MemoryOptions) (a, b *Memory, err error) {
	if opts.MTU == 0 {
		opts.MTU = 4200
	}
	if opts.Depth == 0 {
		opts.Depth = 1024
	}
	if opts.MTU < 256 || opts.Depth < 1 {
		return nil, nil, fmt.Errorf("%w: memory link MTU %d, depth %d", ErrBadOption, opts.MTU, opts.Depth)
	}
	if err := opts.AtoB.validate(); err != nil {
		return nil, nil, err
	}
	if err := opts.BtoA.validate(); err != nil {
		return nil, nil, err
	}
	ab := newMemQueue(opts.Depth, opts.MTU+18, opts.AtoB)
	ba := newMemQueue(opts.Depth, opts.MTU+18, opts.BtoA)
	a = &Memory{tx: ab, rx: ba, info: Info{Kind: KindMemory, Name: "mem0", Index: 1, MTU: opts.MTU,
		MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}}}
	b = &Memory{tx: ba, rx: ab, info: Info{Kind: KindMemory, Name: "mem1", Index: 2, MTU: opts.MTU,
		MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}}}
	return a, b, nil
}

// Memory is one end of an in-memory link pair. It follows the Link contract.
type Memory struct {
	tx, rx *memQueue
	info   Info
	closed atomic.Bool
	stats  struct{ rxFrames, rxBytes, txFrames, txBytes, rxDropped, txDropped atomic.Uint64 }
}

var _ Link = (*Memory)(nil)

// memQueue is one direction: a bounded FIFO of frame buffers recycled through a free
// list, so steady-state traffic allocates nothing. mu guards everything but wake.
type memQueue struct {
	mu     sync.Mutex
	q      [][]byte // frames in flight, oldest first
	free   [][]byte
	held   []byte // a frame held back by the reorder fault
	depth  int
	maxLen int // the longest frame the "wire" carries: MTU + Ethernet header and tag
	faults Faults
	rng    *rand.Rand
	wake   chan struct{} // capacity 1: a pending wake-up for the reader
}

func newMemQueue(depth, frameCap int, f Faults) *memQueue {
	m := &memQueue{depth: depth, maxLen: frameCap, faults: f, wake: make(chan struct{}, 1)}
	m.q = make([][]byte, 0, depth)
	m.free = make([][]byte, 0, depth+2)
	for i := 0; i < depth+2; i++ {
		m.free = append(m.free, make([]byte, 0, frameCap))
	}
	if f.any() {
		m.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	}
	return m
}

func (m *memQueue) notify() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// getLocked takes a buffer from the free list (the list always holds depth+2 -
// queued). m.mu is held, as for every ...Locked method of memQueue.
func (m *memQueue) getLocked(frame []byte) []byte {
	n := len(m.free)
	if n == 0 {
		return append([]byte(nil), frame...) // cannot happen with the depth checks; stay safe
	}
	buf := m.free[n-1]
	m.free = m.free[:n-1]
	return append(buf[:0], frame...)
}

func (m *memQueue) putLocked(buf []byte) {
	if len(m.free) < cap(m.free) {
		m.free = append(m.free, buf[:0])
	}
}

// pushLocked applies the fault model and queues frame; it reports whether the frame
// was taken (a full queue refuses it so the writer retries, as a full TX ring would).
func (m *memQueue) pushLocked(frame []byte) (taken bool, dropped int) {
	if len(m.q) >= m.depth {
		return false, 0
	}
	f := &m.faults
	if m.rng == nil {
		m.q = append(m.q, m.getLocked(frame))
		return true, 0
	}
	if m.rng.Float64() < f.Drop {
		return true, 1
	}
	buf := m.getLocked(frame)
	if len(buf) > 0 && m.rng.Float64() < f.Corrupt {
		bit := m.rng.IntN(len(buf) * 8)
		buf[bit/8] ^= 1 << (bit % 8)
	}
	if m.held == nil && m.rng.Float64() < f.Reorder {
		m.held = buf
		return true, 0
	}
	m.q = append(m.q, buf)
	if len(m.q) < m.depth && m.rng.Float64() < f.Duplicate {
		m.q = append(m.q, m.getLocked(buf))
	}
	if m.held != nil && len(m.q) < m.depth {
		m.q = append(m.q, m.held)
		m.held = nil
	}
	return true, 0
}

// ReadBatch implements Link.
func (l *Memory) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	m := l.rx
	m.mu.Lock()
	n := 0
	for n < len(bufs) && n < len(sizes) && len(m.q) > 0 {
		f := m.q[0]
		copy(m.q, m.q[1:])
		m.q = m.q[:len(m.q)-1]
		if len(f) > len(bufs[n]) {
			l.stats.rxDropped.Add(1)
			m.putLocked(f)
			continue
		}
		sizes[n] = copy(bufs[n], f)
		l.stats.rxBytes.Add(uint64(sizes[n]))
		m.putLocked(f)
		n++
	}
	more := len(m.q) > 0
	m.mu.Unlock()
	if more {
		m.notify() // keep the reader's next Wait from sleeping on queued frames
	}
	l.stats.rxFrames.Add(uint64(n))
	return n, nil
}

// Pending reports how many frames wait to be read (a test's view of the wire).
func (l *Memory) Pending() int {
	l.rx.mu.Lock()
	defer l.rx.mu.Unlock()
	return len(l.rx.q)
}

// WriteBatch implements Link.
func (l *Memory) WriteBatch(frames [][]byte) (int, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	m := l.tx
	m.mu.Lock()
	n, dropped := 0, 0
	for _, f := range frames {
		if len(f) > m.maxLen {
			l.stats.txDropped.Add(1) // longer than the MTU allows: a wire would drop it too
			n++
			continue
		}
		ok, d := m.pushLocked(f)
		if !ok {
			break
		}
		dropped += d
		l.stats.txBytes.Add(uint64(len(f)))
		n++
	}
	m.mu.Unlock()
	l.stats.txFrames.Add(uint64(n - dropped))
	l.stats.txDropped.Add(uint64(dropped))
	if n > 0 {
		m.notify()
	}
	return n, nil
}

// Wait implements Link.
func (l *Memory) Wait(timeout time.Duration) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if timeout == 0 {
		return nil
	}
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-l.rx.wake:
	case <-tc:
	}
	if l.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Wake implements Link.
func (l *Memory) Wake() {
	l.rx.notify()
}

// Info implements Link.
func (l *Memory) Info() Info { return l.info }

// Stats implements Link.
func (l *Memory) Stats() Stats {
	return Stats{
		RxFrames: l.stats.rxFrames.Load(), RxBytes: l.stats.rxBytes.Load(),
		TxFrames: l.stats.txFrames.Load(), TxBytes: l.stats.txBytes.Load(),
		RxDropped: l.stats.rxDropped.Load(), TxDropped: l.stats.txDropped.Load(),
	}
}

// Close implements Link. A Wait in progress returns ErrClosed.
func (l *Memory) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.Wake()
	return nil
}
