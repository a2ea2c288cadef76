package xsk

// A fake kernel that plays the other side of the four rings in plain memory, so
// that ring arithmetic, multi-buffer chains and frame accounting can be checked
// against a model with random operations, without root or a NIC.

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kring is the kernel's view of one ring.
type kring struct {
	prod, cons, flags *uint32
	mask              uint32
	addrs             []uint64
	descs             []unix.XDPDesc
}

var fakeOff = unix.XDPRingOffset{Producer: 0, Consumer: 64, Flags: 128, Desc: 192}

func newRingMem(size int, desc bool) ([]byte, kring) {
	es := 8
	if desc {
		es = 16
	}
	// []uint64 backing keeps the words 8-byte aligned.
	words := make([]uint64, (int(fakeOff.Desc)+size*es)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	k := kring{
		prod:  (*uint32)(unsafe.Pointer(&mem[fakeOff.Producer])),
		cons:  (*uint32)(unsafe.Pointer(&mem[fakeOff.Consumer])),
		flags: (*uint32)(unsafe.Pointer(&mem[fakeOff.Flags])),
		mask:  uint32(size - 1),
	}
	if desc {
		k.descs = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&mem[fakeOff.Desc])), size)
	} else {
		k.addrs = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[fakeOff.Desc])), size)
	}
	return mem, k
}

type fakeKernel struct {
	t                  testing.TB
	s                  *Socket
	umem               []byte
	fs                 int
	fill, comp, rx, tx kring
	budget             int
	sg                 bool
	sent               [][]byte // packets assembled from TX descriptors
	partial            []byte
	pendingComp        []uint64 // consumed TX addresses not yet completed
	rxDropped          int
	delayCompletions   bool
}

func newFakeSocket(t testing.TB, opts Options) (*Socket, *fakeKernel) {
	t.Helper()
	cfg, err := opts.config()
	if err != nil {
		t.Fatal(err)
	}
	umem := make([]byte, cfg.NumFrames*cfg.FrameSize)
	k := &fakeKernel{t: t, umem: umem, fs: cfg.FrameSize, budget: kernelTxBudget, sg: cfg.MultiBuffer}
	var mems [4][]byte
	mems[0], k.fill = newRingMem(cfg.FillRingSize, false)
	mems[1], k.comp = newRingMem(cfg.CompRingSize, false)
	mems[2], k.rx = newRingMem(cfg.RxRingSize, true)
	mems[3], k.tx = newRingMem(cfg.TxRingSize, true)
	off := unix.XDPMmapOffsets{Rx: fakeOff, Tx: fakeOff, Fr: fakeOff, Cr: fakeOff}
	s := &Socket{fd: -1, sendto: k.sendto, recvfrom: func() unix.Errno { return 0 }}
	s.setup(cfg, umem, off, mems)
	s.stock(0, s.fillTarget)
	k.s = s
	return s, k
}

// deliver is the kernel receiving one frame: it takes chunks from the fill
// ring and produces RX descriptors, whole packets only, like __xsk_rcv.
func (k *fakeKernel) deliver(frame []byte) bool {
	per := k.fs - RxHeadroom
	n := (len(frame) + per - 1) / per
	fillCons := atomic.LoadUint32(k.fill.cons)
	avail := atomic.LoadUint32(k.fill.prod) - fillCons
	rxProd := atomic.LoadUint32(k.rx.prod)
	rxFree := uint32(len(k.rx.descs)) - (rxProd - atomic.LoadUint32(k.rx.cons))
	if (n > 1 && !k.sg) || avail < uint32(n) || rxFree < uint32(n) {
		k.rxDropped++
		return false
	}
	for i := range n {
		addr := k.fill.addrs[fillCons&k.fill.mask]
		fillCons++
		if addr%uint64(k.fs) != 0 || addr >= uint64(len(k.umem)) {
			k.t.Fatalf("fill ring gave address %#x", addr)
		}
		seg := frame[i*per : min(len(frame), (i+1)*per)]
		copy(k.umem[addr+RxHeadroom:], seg)
		var opt uint32
		if i < n-1 {
			opt = unix.XDP_PKT_CONTD
		}
		k.rx.descs[rxProd&k.rx.mask] = unix.XDPDesc{Addr: addr + RxHeadroom, Len: uint32(len(seg)), Options: opt}
		rxProd++
	}
	atomic.StoreUint32(k.fill.cons, fillCons)
	atomic.StoreUint32(k.rx.prod, rxProd)
	return true
}

// sendto is copy-mode TX: at most budget descriptors, each needing a
// completion slot; EAGAIN when descriptors remain.
func (k *fakeKernel) sendto() unix.Errno {
	cons := atomic.LoadUint32(k.tx.cons)
	prod := atomic.LoadUint32(k.tx.prod)
	for done := 0; cons != prod; done++ {
		if done == k.budget {
			atomic.StoreUint32(k.tx.cons, cons)
			return unix.EAGAIN
		}
		if uint32(len(k.pendingComp))+atomic.LoadUint32(k.comp.prod)-atomic.LoadUint32(k.comp.cons) >= uint32(len(k.comp.addrs)) {
			atomic.StoreUint32(k.tx.cons, cons)
			return unix.EAGAIN
		}
		d := k.tx.descs[cons&k.tx.mask]
		cons++
		off := d.Addr % uint64(k.fs)
		if d.Len == 0 || off+uint64(d.Len) > uint64(k.fs) || d.Addr >= uint64(len(k.umem)) {
			k.t.Fatalf("invalid TX descriptor %+v", d)
		}
		k.partial = append(k.partial, k.umem[d.Addr:d.Addr+uint64(d.Len)]...)
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			k.sent = append(k.sent, k.partial)
			k.partial = nil
		}
		k.pendingComp = append(k.pendingComp, d.Addr)
	}
	atomic.StoreUint32(k.tx.cons, cons)
	if !k.delayCompletions {
		k.complete(len(k.pendingComp))
	}
	return 0
}

// complete posts the first n pending completions.
func (k *fakeKernel) complete(n int) {
	n = min(n, len(k.pendingComp))
	prod := atomic.LoadUint32(k.comp.prod)
	for _, a := range k.pendingComp[:n] {
		k.comp.addrs[prod&k.comp.mask] = a
		prod++
	}
	atomic.StoreUint32(k.comp.prod, prod)
	k.pendingComp = k.pendingComp[n:]
}

// TestFakeKernelRandom runs random receive, release, transmit and completion
// steps against the fake kernel and checks bytes and accounting throughout.
func TestFakeKernelRandom(t *testing.T) {
	for seed := range uint64(20) {
		for _, span := range []int{0, 1, 2, 3} {
			rng := rand.New(rand.NewPCG(seed, 99))
			opts := DefaultOptions()
			opts.FrameSize = []int{2048, 4096}[seed%2]
			opts.NumFrames = 32 + rng.IntN(64)
			opts.MultiBuffer = span > 0
			if span > 1 { // TX buffers of two or three chunks (TxSpan)
				opts.TxSpan = span
				opts.TxFrames = opts.NumFrames / 2 / span * span
			}
			if seed%3 == 0 { // small rings: wrap-around often, fill ring smaller than the pool
				opts.FillRingSize, opts.RxRingSize, opts.TxRingSize, opts.CompRingSize = 8, 16, 8, 16
			}
			s, k := newFakeSocket(t, opts)
			k.delayCompletions = seed%4 == 1
			runRandom(t, rng, s, k)
		}
	}
}

func runRandom(t *testing.T, rng *rand.Rand, s *Socket, k *fakeKernel) {
	var delivered, received [][]byte // RX model
	var queued [][]byte              // TX model
	var held []Packet
	pkts := make([]Packet, 8)
	maxLen := s.cfg.FrameSize - RxHeadroom
	if s.cfg.MultiBuffer {
		maxLen = 3 * s.cfg.FrameSize
	}
	seq := 0
	frame := func(limit int) []byte {
		seq++
		return pattern(1+rng.IntN(limit), seq)
	}
	for step := range 3000 {
		switch op := rng.IntN(10); op {
		case 0, 1: // the kernel receives
			f := frame(maxLen)
			if k.deliver(f) {
				delivered = append(delivered, f)
			}
		case 2, 3: // the owner receives
			n, err := s.Receive(pkts[:1+rng.IntN(len(pkts))])
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pkts[:n] {
				b := make([]byte, p.Len())
				p.CopyTo(b)
				received = append(received, b)
				held = append(held, p)
			}
		case 4: // release some held packets, in random order
			rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
			n := rng.IntN(len(held) + 1)
			s.Release(held[:n])
			held = held[n:]
		case 5, 6: // transmit by copy
			batch := make([][]byte, 1+rng.IntN(6))
			for i := range batch {
				batch[i] = frame(s.MaxTxLen())
			}
			n, err := s.Transmit(batch)
			if err != nil {
				t.Fatal(err)
			}
			queued = append(queued, batch[:n]...)
		case 7: // transmit in place, maybe cancelling some
			tf := make([]TxFrame, 1+rng.IntN(4))
			n := s.NextTxFrames(tf)
			if rng.IntN(4) == 0 {
				s.CancelTx(tf[:n])
				break
			}
			var want [][]byte
			for i := range n {
				f := frame(len(tf[i].Buf) - 64)
				off := rng.IntN(64)
				tf[i].Buf = tf[i].Buf[off : off+copy(tf[i].Buf[off:], f)]
				want = append(want, f)
			}
			got, err := s.SubmitTx(tf[:n])
			if err != nil || got != n {
				t.Fatalf("SubmitTx: got (%d, %v), want %d", got, err, n)
			}
			queued = append(queued, want...)
		case 8: // late completions
			k.complete(rng.IntN(8))
		case 9: // a double release is refused
			if len(held) > 0 {
				dup := []Packet{held[0]}
				s.Release(held[:1])
				held = held[1:]
				bad := s.ctr.RxBadReleases
				s.Release(dup)
				if s.ctr.RxBadReleases != bad+1 {
					t.Fatalf("double release not counted")
				}
				s.ctr.RxBadReleases--
			}
		}
		checkAccounting(t, s)
		if t.Failed() {
			t.Fatalf("step %d", step)
		}
	}
	// Drain everything and compare with the model.
	s.Release(held)
	for {
		n, _ := s.Receive(pkts)
		if n == 0 {
			break
		}
		for _, p := range pkts[:n] {
			b := make([]byte, p.Len())
			p.CopyTo(b)
			received = append(received, b)
		}
		s.Release(pkts[:n])
	}
	k.delayCompletions = false
	k.complete(len(k.pendingComp))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	k.complete(len(k.pendingComp))
	s.reap()
	if len(received) != len(delivered) {
		t.Fatalf("received %d packets, kernel delivered %d", len(received), len(delivered))
	}
	for i := range received {
		if !bytes.Equal(received[i], delivered[i]) {
			t.Fatalf("RX packet %d differs", i)
		}
	}
	if len(k.sent) != len(queued) {
		t.Fatalf("kernel sent %d packets, queued %d", len(k.sent), len(queued))
	}
	for i := range queued {
		if !bytes.Equal(k.sent[i], queued[i]) {
			t.Fatalf("TX packet %d differs: %d vs %d bytes", i, len(k.sent[i]), len(queued[i]))
		}
	}
	c := s.Counters()
	if c.FramesTxFree != s.cfg.TxFrames || c.FramesRxHeld != 0 || c.FramesFill+c.FramesRxFree != s.cfg.rxFrames {
		t.Fatalf("frames not home after drain: %+v", c)
	}
	if c.RxPackets != uint64(len(received)) || c.TxPackets != uint64(len(queued)) {
		t.Fatalf("packet counters: %+v, model rx %d tx %d", c, len(received), len(queued))
	}
}

// TestFakeChainAcrossWrap delivers multi-buffer chains that straddle the end
// of the RX ring and checks the chain is read whole.
func TestFakeChainAcrossWrap(t *testing.T) {
	opts := DefaultOptions()
	opts.NumFrames, opts.TxFrames = 16, 8
	opts.RxRingSize, opts.FillRingSize = 8, 8
	opts.MultiBuffer = true
	s, k := newFakeSocket(t, opts)
	pkts := make([]Packet, 4)
	for i := range 20 {
		f := pattern(2*(s.cfg.FrameSize-RxHeadroom)+100, i) // three segments
		if !k.deliver(f) {
			t.Fatalf("deliver %d refused", i)
		}
		n, _ := s.Receive(pkts)
		if n != 1 || pkts[0].NumSegments() != 3 {
			t.Fatalf("round %d: got %d packets, %d segments", i, n, pkts[0].NumSegments())
		}
		b := make([]byte, pkts[0].Len())
		pkts[0].CopyTo(b)
		if !bytes.Equal(b, f) {
			t.Fatalf("round %d: bytes differ", i)
		}
		s.Release(pkts[:1])
	}
	checkAccounting(t, s)
}

// TestFakeJoin receives frames of one, two and three chunks round a small
// UMEM, released in the order they came: Join makes every frame of one or two
// chunks one slice of the UMEM holding its bytes, except a two-chunk frame
// whose chunks straddle the UMEM's end, and never one of three; a frame it
// refuses keeps its segments, and one it joined reads the same through
// Segment and CopyTo.
func TestFakeJoin(t *testing.T) {
	opts := DefaultOptions()
	opts.NumFrames, opts.TxFrames = 32, 8 // 24 RX chunks
	opts.MultiBuffer = true
	s, k := newFakeSocket(t, opts)
	per := s.cfg.FrameSize - RxHeadroom
	pkts := make([]Packet, 1)
	joined, straddled := 0, 0
	for i := range 200 {
		size := []int{100, per, per + 1, 2 * per, 2*per + 1}[i%5]
		f := pattern(size, i)
		if !k.deliver(f) {
			t.Fatalf("deliver %d refused", i)
		}
		if n, _ := s.Receive(pkts); n != 1 {
			t.Fatalf("frame %d: received %d", i, n)
		}
		p := &pkts[0]
		first := p.Segment(0)
		b, ok := p.Join()
		switch {
		case ok:
			joined++
			if !bytes.Equal(b, f) || &b[0] != &first[0] {
				t.Fatalf("frame %d (%d bytes): Join gave other bytes, or not in place", i, size)
			}
		case p.NumSegments() == 2:
			straddled++
			if p.head != uint32(s.cfg.rxFrames-1) {
				t.Fatalf("frame %d: two chunks from %d refused", i, p.head)
			}
		case p.NumSegments() != 3:
			t.Fatalf("frame %d: %d segments refused", i, p.NumSegments())
		}
		whole := make([]byte, p.Len())
		if p.CopyTo(whole); !bytes.Equal(whole, f) {
			t.Fatalf("frame %d: CopyTo after Join differs", i)
		}
		s.Release(pkts)
	}
	if joined+straddled != 160 || straddled == 0 {
		t.Errorf("joined %d and refused %d of the 160 frames of one or two chunks: want all but those straddling the end, and some of those", joined, straddled)
	}
	checkAccounting(t, s)
}

// TestFakeFillTarget checks the fill ring's target (refill): a new socket
// keeps every RX frame on the ring, and after FillCalmRefills refills that did not find
// it pressed, FillFrames; a receiver that keeps up then gets its frames
// from the FillFrames chunks released last, not from the whole RX pool; one
// that falls behind gets every free frame on the ring at its next Receive, and
// no drop; and FillAll, before the owner sleeps, puts every free frame there.
func TestFakeFillTarget(t *testing.T) {
	opts := DefaultOptions()
	opts.FillCalmRefills = 64
	s, k := newFakeSocket(t, opts) // 2048 RX frames
	all := s.cfg.rxFrames
	if c := s.Counters(); c.FramesFill != all || c.FillTarget != all {
		t.Fatalf("after New: %d frames on the fill ring, target %d; want all %d", c.FramesFill, c.FillTarget, all)
	}
	pkts := make([]Packet, 1)
	one := func(i int) uint32 {
		if !k.deliver(pattern(64, i)) {
			t.Fatalf("deliver %d refused", i)
		}
		if n, _ := s.Receive(pkts); n != 1 {
			t.Fatalf("frame %d: received %d", i, n)
		}
		f := pkts[0].head
		s.Release(pkts)
		return f
	}
	calm := func(what string, n int) {
		t.Helper()
		for i := range n - 1 {
			one(i)
		}
		if c := s.Counters(); c.FillTarget != all {
			t.Fatalf("%s: target %d after %d calm refills, want all (%d) until %d", what, c.FillTarget, n-1, all, n)
		}
		one(0)
		if c := s.Counters(); c.FillTarget != DefaultFillFrames {
			t.Fatalf("%s: target %d after %d calm refills, want %d", what, c.FillTarget, n, DefaultFillFrames)
		}
	}
	calm("new", s.cfg.FillCalmRefills)
	for i := range all { // the ring drains to the target
		one(i)
	}
	used := map[uint32]bool{}
	for i := range 4 * all {
		used[one(i)] = true
	}
	if len(used) > DefaultFillFrames {
		t.Errorf("a receiver that keeps up got %d distinct chunks, want at most %d (the fill ring's target)", len(used), DefaultFillFrames)
	}

	// Fall behind: 300 frames come before the owner looks (the ring holds 512),
	// so Receive finds 212 left, under half the target.
	for i := range 300 {
		if !k.deliver(pattern(64, i)) {
			t.Fatalf("burst frame %d refused: the fill ring ran dry", i)
		}
	}
	burst := make([]Packet, 300)
	if n, _ := s.Receive(burst); n != 300 {
		t.Fatalf("burst: received %d of 300", n)
	}
	if c := s.Counters(); c.FillRaises != 1 || c.FillTarget != all || c.FramesFill != all-300 {
		t.Fatalf("Receive behind: %d raises, target %d, %d frames on the fill ring; want 1, %d, every free one (%d)",
			c.FillRaises, c.FillTarget, c.FramesFill, all, all-300)
	}
	s.Release(burst) // the first calm refill
	if c := s.Counters(); c.FramesFill != all {
		t.Fatalf("after the burst: %d frames on the fill ring, want all %d", c.FramesFill, all)
	}
	calm("after the burst", s.cfg.FillCalmRefills-1)

	// An owner about to sleep gives the kernel every free frame; awake again,
	// it stocks only up to the target, so the frames it releases wait.
	for i := range all {
		one(i)
	}
	s.FillAll()
	if c := s.Counters(); c.FramesFill != all {
		t.Errorf("after FillAll: %d frames on the fill ring, want all %d", c.FramesFill, all)
	}
	one(0)
	if c := s.Counters(); c.FramesFill != all-1 || c.FramesRxFree != 1 || c.FillRaises != 1 {
		t.Errorf("a release after FillAll: %d frames on the fill ring, %d free, %d raises; want %d, 1, 1", c.FramesFill, c.FramesRxFree, c.FillRaises, all-1)
	}
	checkAccounting(t, s)
	if k.rxDropped != 0 {
		t.Errorf("the fake kernel dropped %d frames", k.rxDropped)
	}
}

// TestFakeKickLoop checks that one Transmit call drains a batch far larger than
// the per-sendto budget, and stops kicking when the kernel makes no progress.
func TestFakeKickLoop(t *testing.T) {
	s, k := newFakeSocket(t, DefaultOptions())
	batch := make([][]byte, 1000)
	for i := range batch {
		batch[i] = pattern(60, i)
	}
	n, err := s.Transmit(batch)
	if n != len(batch) || err != nil {
		t.Fatalf("Transmit: got (%d, %v)", n, err)
	}
	if len(k.sent) != len(batch) {
		t.Fatalf("kernel sent %d of %d", len(k.sent), len(batch))
	}
	if c := s.Counters(); c.TxKicks != uint64((len(batch)+kernelTxBudget-1)/kernelTxBudget) {
		t.Errorf("TxKicks: got %d, want %d", c.TxKicks, (len(batch)+kernelTxBudget-1)/kernelTxBudget)
	}
	// A kernel that never consumes: Transmit gives up after maxKickStalls.
	k.budget = 0
	kicks := s.Counters().TxKicks
	if n, err := s.Transmit(batch[:5]); n != 5 || err != nil {
		t.Fatalf("Transmit: got (%d, %v)", n, err)
	}
	if got := s.Counters().TxKicks - kicks; got != maxKickStalls {
		t.Errorf("kicks without progress: got %d, want %d", got, maxKickStalls)
	}
	k.budget = kernelTxBudget
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(k.sent) != len(batch)+5 {
		t.Errorf("after Flush: kernel sent %d, want %d", len(k.sent), len(batch)+5)
	}
	// A fatal errno is reported wrapped.
	s.sendto = func() unix.Errno { return unix.ENETDOWN }
	if _, err := s.Transmit(batch[:1]); err == nil || !isErr(err, ErrLinkDown, unix.ENETDOWN) {
		t.Errorf("Transmit on a down link: got %v, want ErrLinkDown wrapping ENETDOWN", err)
	}
}

func isErr(err error, targets ...error) bool {
	for _, t := range targets {
		if !errors.Is(err, t) {
			return false
		}
	}
	return true
}

// TestFakeTxSpan: with TxSpan 2, NextTxFrames lends two consecutive chunks as
// one slice; a frame built across them goes out as two descriptors (the first
// with XDP_PKT_CONTD), and the buffer is free again only once the kernel has
// completed both; a completion of a chunk already completed is counted and
// ignored. A frame of three chunks takes two buffers through Transmit.
func TestFakeTxSpan(t *testing.T) {
	opts := DefaultOptions()
	opts.NumFrames, opts.TxFrames, opts.TxSpan, opts.MultiBuffer = 16, 8, 2, true
	s, k := newFakeSocket(t, opts)
	k.delayCompletions = true
	fs := s.cfg.FrameSize
	tf := make([]TxFrame, 1)
	if n := s.NextTxFrames(tf); n != 1 || len(tf[0].Buf) != 2*fs {
		t.Fatalf("NextTxFrames: %d frames, Buf %d bytes, want 1 of %d", n, len(tf[0].Buf), 2*fs)
	}
	f := pattern(fs+58, 1)
	tf[0].Buf = tf[0].Buf[:copy(tf[0].Buf, f)]
	if n, err := s.SubmitTx(tf); n != 1 || err != nil {
		t.Fatalf("SubmitTx: %d, %v", n, err)
	}
	if len(k.sent) != 1 || !bytes.Equal(k.sent[0], f) || len(k.pendingComp) != 2 {
		t.Fatalf("kernel got %d packets, %d descriptors; want the frame in 2", len(k.sent), len(k.pendingComp))
	}
	first := k.pendingComp[0]
	inFlight := func(want int) {
		t.Helper()
		s.reap()
		checkAccounting(t, s)
		if c := s.Counters(); c.FramesTxInFlight != want {
			t.Fatalf("FramesTxInFlight %d, want %d", c.FramesTxInFlight, want)
		}
	}
	k.complete(1)
	inFlight(2) // one chunk still the kernel's
	k.pendingComp = append([]uint64{first}, k.pendingComp...)
	k.complete(1) // the first chunk again
	s.reap()
	if c := s.Counters(); c.TxBadCompletions != 1 || c.FramesTxInFlight != 2 {
		t.Fatalf("TxBadCompletions %d, FramesTxInFlight %d; want 1, 2", c.TxBadCompletions, c.FramesTxInFlight)
	}
	s.ctr.TxBadCompletions-- // counted, as checkAccounting wants none
	k.complete(1)
	inFlight(0)

	big := pattern(2*fs+10, 2)
	if n, err := s.Transmit([][]byte{big}); n != 1 || err != nil {
		t.Fatalf("Transmit: %d, %v", n, err)
	}
	if len(k.pendingComp) != 3 || !bytes.Equal(k.sent[1], big) {
		t.Fatalf("%d descriptors for a frame of 3 chunks", len(k.pendingComp))
	}
	inFlight(4) // two buffers
	k.complete(3)
	inFlight(0)
	if c := s.Counters(); c.FramesTxFree != s.cfg.TxFrames {
		t.Fatalf("TX pool not home: %+v", c)
	}
	if s.TxBufLen() != 2*fs {
		t.Errorf("TxBufLen %d, want %d", s.TxBufLen(), 2*fs)
	}
	// TxFrames' default is half the UMEM in whole buffers; RxFrames is the
	// rest.
	for _, tc := range []struct{ num, span, want int }{{16, 3, 6}, {4096, 3, 2046}, {4096, 2, 2048}, {17, 1, 8}} {
		o := Options{NumFrames: tc.num, TxSpan: tc.span, MultiBuffer: true}
		c, err := o.config()
		if err != nil || c.TxFrames != tc.want {
			t.Errorf("NumFrames %d, TxSpan %d: TxFrames %d (%v), want %d", tc.num, tc.span, c.TxFrames, err, tc.want)
		}
		if rx := o.RxFrames(); rx != tc.num-tc.want {
			t.Errorf("NumFrames %d, TxSpan %d: RxFrames %d, want %d", tc.num, tc.span, rx, tc.num-tc.want)
		}
	}
	for _, bad := range []Options{
		{TxSpan: 2, NumFrames: 16, TxFrames: 8},                    // no MultiBuffer
		{TxSpan: 3, NumFrames: 16, TxFrames: 8, MultiBuffer: true}, // does not divide TxFrames
		{TxSpan: MaxTxSpan + 1, NumFrames: 64, TxFrames: 36, MultiBuffer: true},
		{TxSpan: 3, NumFrames: 5, MultiBuffer: true}, // no whole buffer in half the UMEM
	} {
		if _, err := bad.config(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", bad, err)
		}
		if rx := bad.RxFrames(); rx != 0 {
			t.Errorf("%+v: RxFrames %d, want 0", bad, rx)
		}
	}
}

// TestFakeNextTxFramesKicks: when every TX buffer waits in the ring for a
// sendto() (the kernel took none at the last kick), NextTxFrames kicks the
// kernel rather than lend nothing for good to a caller that only reserves.
func TestFakeNextTxFramesKicks(t *testing.T) {
	opts := DefaultOptions()
	opts.NumFrames, opts.TxFrames = 16, 8
	s, k := newFakeSocket(t, opts)
	k.budget = 0 // sendto takes nothing: EAGAIN
	tf := make([]TxFrame, 8)
	n := s.NextTxFrames(tf)
	for i := range n {
		tf[i].Buf = tf[i].Buf[:copy(tf[i].Buf, pattern(64, i))]
	}
	if got, _ := s.SubmitTx(tf[:n]); n != 8 || got != 8 {
		t.Fatalf("queued %d of %d", got, n)
	}
	if len(k.sent) != 0 {
		t.Fatalf("the kernel sent %d with no budget", len(k.sent))
	}
	k.budget = kernelTxBudget
	if n := s.NextTxFrames(tf[:1]); n != 1 {
		t.Fatalf("NextTxFrames lent %d with every buffer in the ring, want 1 after a kick", n)
	}
	s.CancelTx(tf[:1])
	if len(k.sent) != 8 {
		t.Fatalf("the kernel sent %d, want 8", len(k.sent))
	}
	checkAccounting(t, s)
}
