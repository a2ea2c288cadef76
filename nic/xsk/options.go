package xsk

import (
	"fmt"
	"math/bits"
)

// Options configure New. Zero numeric fields take the defaults below; start from
// DefaultOptions, since the zero value of NeedWakeup is false.
type Options struct {
	// FrameSize is the UMEM chunk size: 2048 or 4096 (default 4096).
	FrameSize int
	// NumFrames is the UMEM size in chunks (default DefaultNumFrames). The UMEM
	// is pinned memory: see New about RLIMIT_MEMLOCK.
	NumFrames int
	// TxFrames is how many of NumFrames serve transmit (default NumFrames/2,
	// rounded down to whole TX buffers); the others feed the fill ring. The
	// two pools never lend frames to each other, so a burst on one side
	// cannot starve the other.
	TxFrames int
	// TxSpan is how many consecutive chunks make one TX buffer (default 1,
	// at most MaxTxSpan; TxFrames must be a multiple of it, and above 1 it
	// needs MultiBuffer; Socket.TxBufLen is the buffer's length).
	// NextTxFrames lends a buffer as one slice, which SubmitTx sends as a
	// chain of one descriptor per chunk it covers: a frame larger than a
	// chunk (RoCE MTU 4096) is built in place in one piece. Transmit takes a
	// buffer per TxSpan chunks of a frame.
	TxSpan int

	// Ring sizes, powers of two. Defaults: FillRingSize and RxRingSize are the
	// next power of two >= the RX frame count, CompRingSize and TxRingSize the
	// next power of two >= TxFrames. A fill ring that holds every RX frame lets
	// Release return frames to the kernel at once (PLATFORM 9: large fill and RX
	// rings avoid drops under load).
	FillRingSize, CompRingSize, RxRingSize, TxRingSize int

	// FillFrames is how many RX frames the fill ring holds once the owner
	// has kept up for a while (default DefaultFillFrames, or every RX frame if
	// there are fewer): the frames it released last, still in the cache. A new
	// socket, and one whose owner fell behind, keeps every free RX frame there
	// (refill). NumFrames - TxFrames keeps them all there always.
	FillFrames int
	// FillCalmRefills is how many refills in a row must find that the kernel
	// took less than half of FillFrames from the fill ring since the last
	// before it comes down to FillFrames (default DefaultFillCalmRefills).
	FillCalmRefills int

	// MultiBuffer binds with XDP_USE_SG: frames larger than one chunk arrive as
	// a chain of descriptors and Transmit may send them as one. The XDP program
	// must be loaded with BPF_F_XDP_HAS_FRAGS ("xdp.frags"). Without it such
	// frames are dropped silently (counted in Stats.RxDropped).
	MultiBuffer bool

	// NeedWakeup binds with XDP_USE_NEED_WAKEUP (DefaultOptions: true): the
	// kernel says through the ring flags when it needs a syscall. Copy-mode TX
	// needs a sendto() in any case.
	NeedWakeup bool

	// ZeroCopy binds with XDP_ZEROCOPY instead of XDP_COPY. veth refuses it
	// (EOPNOTSUPP, reported as ErrNotSupported); copy mode is the default.
	ZeroCopy bool

	// TxBudget sets XDP_MAX_TX_SKB_BUDGET: descriptors one sendto() sends in copy
	// mode. 0 keeps the kernel's 32; TxBudgetRing asks for the TX ring's size
	// where the kernel has the option and keeps 32 where it has not; otherwise
	// 32..TxRingSize, which New fails without the option (ErrNotSupported).
	TxBudget int
}

// RxFrames is how many of the UMEM's chunks feed the fill ring under o, its
// defaults applied, or 0 if New would refuse o.
func (o Options) RxFrames() int {
	c, err := o.config()
	if err != nil {
		return 0
	}
	return c.rxFrames
}

// DefaultOptions returns the defaults: 4096-byte frames, 4096 frames split evenly
// between RX and TX, rings sized to their pools, need-wakeup on, copy mode.
func DefaultOptions() Options {
	return Options{NeedWakeup: true}
}

// config is Options after defaults and checks.
type config struct {
	Options
	rxFrames int
	shift    uint // log2(FrameSize)
	// budgetOptional: TxBudget came from TxBudgetRing, and a kernel without
	// XDP_MAX_TX_SKB_BUDGET leaves the default.
	budgetOptional bool
}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

func nextPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

func (o Options) config() (config, error) {
	c := config{Options: o}
	bad := func(format string, args ...any) (config, error) {
		return config{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	if c.FrameSize == 0 {
		c.FrameSize = DefaultFrameSize
	}
	if c.FrameSize != 2048 && c.FrameSize != 4096 {
		return bad("FrameSize %d: must be 2048 or 4096 (af_xdp.rst: chunks are 2K or 4K)", o.FrameSize)
	}
	c.shift = uint(bits.TrailingZeros(uint(c.FrameSize)))
	if c.NumFrames == 0 {
		c.NumFrames = DefaultNumFrames
	}
	if c.NumFrames < 2 || c.NumFrames > MaxNumFrames {
		return bad("NumFrames %d: must be 2..%d", o.NumFrames, MaxNumFrames)
	}
	if c.TxSpan == 0 {
		c.TxSpan = 1
	}
	if c.TxSpan < 1 || c.TxSpan > MaxTxSpan || c.TxSpan > 1 && !c.MultiBuffer {
		return bad("TxSpan %d: must be 0 or 1..%d, and above 1 have MultiBuffer", o.TxSpan, MaxTxSpan)
	}
	if c.TxFrames == 0 {
		c.TxFrames = c.NumFrames / 2 / c.TxSpan * c.TxSpan // whole buffers
	}
	if c.TxFrames < 1 || c.TxFrames >= c.NumFrames {
		return bad("TxFrames %d: must be 1..NumFrames-1 (%d)", c.TxFrames, c.NumFrames-1)
	}
	if c.TxFrames%c.TxSpan != 0 {
		return bad("TxFrames %d: must be a multiple of TxSpan (%d)", c.TxFrames, c.TxSpan)
	}
	c.rxFrames = c.NumFrames - c.TxFrames
	for _, r := range []struct {
		name string
		v    *int
		def  int
	}{
		{"FillRingSize", &c.FillRingSize, nextPow2(c.rxFrames)},
		{"RxRingSize", &c.RxRingSize, nextPow2(c.rxFrames)},
		{"CompRingSize", &c.CompRingSize, nextPow2(c.TxFrames)},
		{"TxRingSize", &c.TxRingSize, nextPow2(c.TxFrames)},
	} {
		if *r.v == 0 {
			*r.v = min(r.def, MaxRingSize)
		}
		if !isPow2(*r.v) || *r.v > MaxRingSize {
			return bad("%s %d: must be a power of two in 1..%d", r.name, *r.v, MaxRingSize)
		}
	}
	if c.FillFrames == 0 {
		c.FillFrames = min(DefaultFillFrames, c.rxFrames)
	}
	if c.FillFrames < 1 || c.FillFrames > c.rxFrames {
		return bad("FillFrames %d: must be 0 or 1..the RX frames (%d)", o.FillFrames, c.rxFrames)
	}
	if c.FillCalmRefills == 0 {
		c.FillCalmRefills = DefaultFillCalmRefills
	}
	if c.FillCalmRefills < 1 {
		return bad("FillCalmRefills %d: must be 0 or positive", o.FillCalmRefills)
	}
	if c.TxBudget == TxBudgetRing {
		// A ring of 32 or fewer is sent whole at the kernel's own budget.
		c.TxBudget, c.budgetOptional = 0, true
		if c.TxRingSize > kernelTxBudget {
			c.TxBudget = c.TxRingSize
		}
	}
	if c.TxBudget != 0 && (c.TxBudget < kernelTxBudget || c.TxBudget > c.TxRingSize) {
		return bad("TxBudget %d: must be 0 or %d..TxRingSize (%d)", o.TxBudget, kernelTxBudget, c.TxRingSize)
	}
	return c, nil
}
