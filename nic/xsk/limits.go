package xsk

// Every limit and default of the package, in one place (STYLE: "every limit lives in
// one file"). Kernel facts cite Documentation/networking/af_xdp.rst or net/xdp/xsk.c
// of Linux 6.18; veth facts come from shared/PLATFORM.md.

import "time"

const (
	// DefaultFrameSize is the UMEM chunk size. af_xdp.rst (XDP_UMEM_REG): chunks
	// are 2K or 4K; 8K fails with EINVAL here even on hugepages (PLATFORM).
	DefaultFrameSize = 4096

	// DefaultNumFrames is the UMEM size in chunks: 16 MiB at 4 KiB chunks.
	DefaultNumFrames = 4096

	// MaxNumFrames bounds the UMEM so its size (NumFrames*FrameSize) and the frame
	// indices stay far from overflow.
	MaxNumFrames = 1 << 20

	// MaxRingSize bounds each ring; the kernel wants a non-zero power of two.
	MaxRingSize = 1 << 20

	// MaxSegments is the longest multi-buffer chain this package transmits.
	// af_xdp.rst: copy mode takes at most CONFIG_MAX_SKB_FRAGS+1 descriptors per
	// packet and "limit the number of frags to 18" to work on every kernel.
	MaxSegments = 18

	// MaxTxSpan bounds Options.TxSpan: a TX buffer's chunks in flight are
	// bits of one byte.
	MaxTxSpan = 8

	// RxHeadroom is where received data starts inside a chunk in copy mode: the
	// kernel keeps XDP_PACKET_HEADROOM in front (xp_get_handle), so one descriptor
	// carries at most FrameSize-256 bytes (3840 at 4 KiB, PLATFORM).
	RxHeadroom = 256

	// TxBudgetRing, as Options.TxBudget, asks that one sendto() send as many
	// descriptors as the TX ring holds, where the kernel allows it.
	TxBudgetRing = -1

	// kernelTxBudget is TX_BATCH_SIZE in net/xdp/xsk.c: descriptors one sendto()
	// sends in copy mode unless XDP_MAX_TX_SKB_BUDGET raises it (PLATFORM 8).
	kernelTxBudget = 32

	// maxKickStalls is how many sendto() calls in a row may make no progress on
	// the TX ring before Transmit stops kicking and leaves the rest for later.
	maxKickStalls = 4

	// DefaultFillFrames is how many RX frames the fill ring holds while the
	// owner keeps up (Options.FillFrames, refill): 2 MiB at 4 KiB chunks, half
	// the L2 here. Measured on the veth pair, xrnic's write_bw 64 KiB, 5
	// interleaved runs each: 256 frames 1730-1975 MB/s, 512 2005-2041, 1024
	// 1641-1968, all 2048 (before) 1781-1883. The AF_XDP link asks for
	// chunks of frames of its interface's MTU instead (link.FillReserveFrames).
	DefaultFillFrames = 512

	// DefaultFillCalmRefills is how many refills in a row must find the fill
	// ring not pressed before refill lowers its target to FillFrames
	// (Options.FillCalmRefills): 0.3-0.5 s of write_bw's receiver.
	DefaultFillCalmRefills = 1 << 16

	// bindRetryTimeout and bindRetryDelay: closing an XSK frees its buffer pool
	// asynchronously, so a re-bind on the same queue may see EBUSY for a short
	// while (PLATFORM 7).
	bindRetryTimeout = 2 * time.Second
	bindRetryDelay   = time.Millisecond
)
