// Package xsk is xrnic's AF_XDP socket: a UMEM, the fill, RX, TX and completion
// rings mapped with x/sys/unix, need-wakeup, batched receive and transmit,
// multi-buffer frames, and the kernel's XDP_STATISTICS. It is the engine's fast
// link on veth and real NICs (Documentation/networking/af_xdp.rst).
//
// # Frames
//
// The UMEM is NumFrames chunks of FrameSize bytes, split once into an RX pool
// (fill ring -> kernel -> RX ring -> Receive -> Release -> fill ring) and a TX
// pool (NextTxFrames or Transmit -> TX ring -> kernel -> completion ring ->
// free). Every frame has a state, so a frame is never lost or used twice;
// Counters reports where each one is. In copy mode received data starts
// RxHeadroom bytes into its chunk. Once the owner has kept up a while, the fill
// ring holds only Options.FillFrames of the free RX frames, the ones released
// last, so that the kernel writes into chunks still in the cache; otherwise it
// holds them all.
//
// # Data path
//
// Receive fills a caller-owned []Packet without blocking; a Packet is one frame
// as one or more UMEM segments (multi-buffer), read in place with Segment or
// Bytes, or copied with CopyTo, until Release hands its chunks back to the
// fill ring in one batch. Transmit copies [][]byte frames into chunks;
// NextTxFrames/SubmitTx let the caller build frames in the chunks instead (in
// buffers of Options.TxSpan consecutive chunks, for frames larger than one). Both
// queue a batch, kick the kernel with sendto(MSG_DONTWAIT) until the TX ring
// drains, and reap completions. A full ring shows as a short count, not as an
// error; malformed frames are dropped and counted. Poll sleeps in poll(2) until
// the RX ring has data, Wake is called, or a timeout. None of these allocate.
//
// # Concurrency
//
// A Socket belongs to one owner goroutine (the engine's): Receive, Release,
// Transmit, NextTxFrames, SubmitTx, CancelTx, Flush, Poll and Counters take no
// locks and must not run concurrently with each other.
//
// FD, Stats and Wake are safe from any goroutine at any time, also while the
// owner runs and while Close runs; after Close, Stats and Wake return ErrClosed
// and FD returns -1.
//
// Close is idempotent and safe from any goroutine, but only once the owner has
// stopped calling the owner methods: it unmaps the rings and the UMEM that
// owner calls, Packets and TxFrames point into. To stop an owner blocked in
// Poll, call Wake, wait for the owner to return, then Close. Owner methods
// called after Close return ErrClosed (or do nothing).
//
// # Namespaces
//
// New binds in the calling thread's network namespace: a caller that switched
// namespaces must hold runtime.LockOSThread until New returns. Afterwards the
// Socket may be used from any thread.
package xsk
