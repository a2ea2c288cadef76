package link

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/xsk"
)

// AFXDPOptions configures NewAFXDP.
type AFXDPOptions struct {
	Interface string
	Queue     int            // receive queue whose frames this link takes (default 0)
	Mode      bpf.AttachMode // generic by default: on veth it costs kernel traffic far less (PLATFORM 10)
	// Socket tunes the AF_XDP socket; zero fields take xsk's defaults, but for
	// TxSpan, which takes as many chunks as the interface's largest frame
	// needs, FillFrames, which keeps FillReserveFrames of those frames, and
	// TxBudget, the TX ring's size where the kernel allows it (TxBudgetRing).
	// The link lends its transmit buffers (TxLender) when one holds that
	// frame, and copies frames in otherwise. MultiBuffer is always on: RoCE
	// MTU 4096 needs frames larger than one UMEM chunk.
	Socket xsk.Options
	// Attachment, when set, is an XDP attachment the caller owns and shares among the
	// links of several queues; otherwise the link attaches the program and detaches
	// it on Close.
	Attachment *bpf.Attachment
}

// FillReserveFrames is how many frames of the interface's MTU an AF_XDP
// link's fill ring keeps for the kernel once its reader keeps up
// (xsk.Options.FillFrames, which counts chunks): as many as one xrnic sender
// may have in flight to it (the engine's bound per destination), so that a
// reader kept off its CPU while they come drops none. At RoCE MTU 4096 a
// frame takes two chunks, and xsk's default of 512 chunks held half of them
// (TestAFXDPFillReserve). 1024 chunks cost write_bw 64 KiB nothing against
// 512 (8 interleaved runs each on the veth pair: means 1284 and 1270 MB/s;
// 256 QPs 1195 and 1198, 4 runs; the 64-byte rate 0.600 and 0.559 M/s, 9).
const FillReserveFrames = 512

// AFXDP is a Link over an AF_XDP socket fed by the XDP steering program. It follows
// the Link contract.
type AFXDP struct {
	info   Info
	att    *bpf.Attachment
	ownAtt bool
	attRef *atomic.Int32 // OpenQueues' links share att: the last to close detaches it
	queue  int
	sock   *xsk.Socket
	pkts   []xsk.Packet

	// The data path holds closeMu shared; Close wakes it and takes it exclusively,
	// so the socket's memory is never unmapped under the owner (xsk's contract).
	closeMu sync.RWMutex
	// lendMu is held while the owner has UMEM lent, received frames (from a
	// Lend to its Reclaim) or transmit buffers (from a ReserveTx to SendTx);
	// Close takes it before closeMu, so lent memory is never unmapped under
	// the owner, who may write (and take closeMu shared) meanwhile. One lock
	// for both, taken by whichever lends first: an owner holding one kind
	// and waiting for a lock of the other would deadlock with Close.
	lendMu  sync.Mutex
	lent    int           // pkts[:lent] are lent
	txLent  []xsk.TxFrame // the transmit buffers ReserveTx lent
	scratch [][]byte      // Lend's copies of frames Join cannot make one slice
	txLen   int           // TxBufLen
	closed  atomic.Bool
	dropped atomic.Uint64 // frames longer than the reader's buffer
	mcast   *mcastJoiner  // the multicast groups the engine asked for (Multicaster)
}

var (
	_ Link        = (*AFXDP)(nil)
	_ Lender      = (*AFXDP)(nil)
	_ TxLender    = (*AFXDP)(nil)
	_ Multicaster = (*AFXDP)(nil)
)

// NewAFXDP attaches the steering program (unless opts.Attachment is given), opens an
// AF_XDP socket on the queue and registers it in the program's XSKMAP. It works in
// the calling thread's network namespace. On any failure nothing stays attached.
func NewAFXDP(opts AFXDPOptions) (_ *AFXDP, err error) {
	ifc, err := netdev.Lookup(opts.Interface)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := ifc.CheckUp(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	l := &AFXDP{queue: opts.Queue, att: opts.Attachment, pkts: make([]xsk.Packet, 64),
		info: Info{Kind: KindAFXDP, Name: ifc.Name, Index: ifc.Index, MTU: ifc.MTU, MAC: ifc.MAC,
			Speed: interfaceSpeed(ifc.Name)}}
	defer func() {
		if err != nil {
			l.release()
		}
	}()
	if l.att == nil {
		l.att, err = bpf.Attach(ifc.Name, bpf.AttachOptions{Mode: opts.Mode})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		l.ownAtt = true
	}
	so := opts.Socket
	if so == (xsk.Options{}) {
		so = xsk.DefaultOptions()
	}
	so.MultiBuffer = true
	if so.TxSpan == 0 {
		// TX buffers of as many chunks as the largest frame needs, lent
		// whole to the engine (TxLender).
		fs := cmp.Or(so.FrameSize, xsk.DefaultFrameSize)
		if span := (l.frameCap() + fs - 1) / fs; span <= xsk.MaxTxSpan && so.TxFrames%span == 0 {
			so.TxSpan = span
		}
	}
	if so.TxBudget == 0 {
		// One transmit call sends all the TX ring holds, not 32 descriptors
		// of it: 32 frames a call cost raw AF_XDP floods 2-5 % of their
		// 64-byte rate and xrnic's write_bw 1-3 % (docs/performance.md).
		so.TxBudget = xsk.TxBudgetRing
	}
	if so.FillFrames == 0 {
		// Chunks for FillReserveFrames of the interface's largest frames,
		// which take a chunk each per FrameSize-RxHeadroom bytes.
		room := cmp.Or(so.FrameSize, xsk.DefaultFrameSize) - xsk.RxHeadroom
		so.FillFrames = min(FillReserveFrames*((l.frameCap()+room-1)/room), so.RxFrames())
	}
	l.sock, err = xsk.New(ifc.Index, opts.Queue, so)
	if err != nil {
		return nil, fmt.Errorf("%w: AF_XDP socket on %s queue %d: %w", ErrUnavailable, ifc.Name, opts.Queue, err)
	}
	if n := l.sock.TxBufLen(); n >= l.frameCap() {
		l.txLen = n // a buffer holds any frame: lend them
	}
	if err := l.att.RegisterSocket(opts.Queue, l.sock.FD()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// In the link's namespace, which a later join may not run in.
	if l.mcast, err = newMcastJoiner(ifc.Index); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return l, nil
}

// JoinGroup implements Multicaster: the interface takes the frames of group
// ip (its MAC in the filter, IGMP or MLD), which the program steers here.
func (l *AFXDP) JoinGroup(ip netip.Addr) error { return l.mcast.join(ip, true) }

// LeaveGroup implements Multicaster.
func (l *AFXDP) LeaveGroup(ip netip.Addr) error { return l.mcast.join(ip, false) }

// release undoes NewAFXDP: unregister, close the socket, detach what we attached.
func (l *AFXDP) release() {
	if l.mcast != nil {
		l.mcast.close()
	}
	if l.sock != nil {
		if l.att != nil {
			_ = l.att.UnregisterSocket(l.queue)
		}
		_ = l.sock.Close()
		l.sock = nil
	}
	if l.ownAtt && l.att != nil && (l.attRef == nil || l.attRef.Add(-1) == 0) {
		_ = l.att.Close()
	}
	l.att = nil
}

// ReadBatch implements Link: frames are copied out of the UMEM and their chunks go
// straight back to the fill ring.
func (l *AFXDP) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return 0, ErrClosed
	}
	want := min(len(bufs), len(sizes), len(l.pkts))
	got, err := l.sock.Receive(l.pkts[:want])
	n := 0
	for i := 0; i < got; i++ {
		p := &l.pkts[i]
		if p.Len() > len(bufs[n]) {
			l.dropped.Add(1)
			continue
		}
		sizes[n] = p.CopyTo(bufs[n])
		n++
	}
	l.sock.Release(l.pkts[:got])
	if err != nil {
		return n, mapXSKErr(err)
	}
	return n, nil
}

// Lend implements Lender: a frame of one chunk, or of two consecutive ones
// (xsk.Packet.Join), is lent where it lies; any other is copied.
func (l *AFXDP) Lend(frames [][]byte) (int, error) {
	l.holdLend()
	if l.closed.Load() {
		l.dropLend()
		return 0, ErrClosed
	}
	want := min(len(frames), len(l.pkts))
	got, err := l.sock.Receive(l.pkts[:want])
	if got == 0 {
		l.dropLend()
		return 0, mapXSKErr(err)
	}
	n := 0
	for i := range got {
		p := &l.pkts[i]
		b, ok := p.Join()
		if !ok {
			if l.scratch == nil { // once, at the first frame that needs it
				l.scratch = make([][]byte, len(l.pkts))
				for k := range l.scratch {
					l.scratch[k] = make([]byte, l.frameCap())
				}
			}
			if p.Len() > len(l.scratch[n]) {
				l.dropped.Add(1)
				continue
			}
			b = p.Bytes(l.scratch[n])
		}
		frames[n] = b
		n++
	}
	l.lent = got
	if n == 0 {
		l.Reclaim()
	}
	return n, nil
}

// Reclaim implements Lender.
func (l *AFXDP) Reclaim() {
	l.sock.Release(l.pkts[:l.lent])
	l.lent = 0
	l.dropLend()
}

// holdLend takes lendMu before the owner lends, unless it holds it already.
func (l *AFXDP) holdLend() {
	if l.lent == 0 && len(l.txLent) == 0 {
		l.lendMu.Lock()
	}
}

// dropLend releases lendMu once the owner has nothing lent.
func (l *AFXDP) dropLend() {
	if l.lent == 0 && len(l.txLent) == 0 {
		l.lendMu.Unlock()
	}
}

// BeforeWait implements PreWaiter.
func (l *AFXDP) BeforeWait() {
	l.holdLend() // the owner may hold it, lending transmit buffers
	defer l.dropLend()
	if !l.closed.Load() {
		l.sock.FillAll()
	}
}

// frameCap is the longest frame Lend copies: the interface's MTU and an
// Ethernet header with a VLAN tag.
func (l *AFXDP) frameCap() int { return l.info.MTU + 18 }

// WriteBatch implements Link.
func (l *AFXDP) WriteBatch(frames [][]byte) (int, error) {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return 0, ErrClosed
	}
	n, err := l.sock.Transmit(frames)
	return n, mapXSKErr(err)
}

// TxBufLen implements TxLender.
func (l *AFXDP) TxBufLen() int { return l.txLen }

// ReserveTx implements TxLender.
func (l *AFXDP) ReserveTx(bufs [][]byte) int {
	if l.txLen == 0 || len(bufs) == 0 {
		return 0
	}
	l.holdLend()
	if l.closed.Load() {
		l.dropLend()
		return 0
	}
	k := len(l.txLent)
	if need := k + len(bufs); cap(l.txLent) < need { // once, to the writer's batch
		l.txLent = append(make([]xsk.TxFrame, 0, need), l.txLent...)
	}
	l.txLent = l.txLent[:k+len(bufs)]
	n := l.sock.NextTxFrames(l.txLent[k:])
	l.txLent = l.txLent[:k+n]
	for i := range n {
		bufs[i] = l.txLent[k+i].Buf
	}
	if n == 0 {
		l.dropLend()
	}
	return n
}

// SendTx implements TxLender.
func (l *AFXDP) SendTx(frames [][]byte) (int, error) {
	lent := l.txLent
	if len(lent) == 0 {
		return 0, nil
	}
	defer l.dropLend()
	l.txLent = lent[:0]
	n := min(len(frames), len(lent))
	for i := range n {
		lent[i].Buf = frames[i]
	}
	// lendMu, held, keeps Close off the socket.
	l.sock.CancelTx(lent[n:])
	k, err := l.sock.SubmitTx(lent[:n])
	return k, mapXSKErr(err)
}

// mapXSKErr puts the socket's errors under the Link sentinels: a closed socket
// is ErrClosed, anything else (xsk.ErrLinkDown while the interface is down, a
// failed syscall) ErrUnavailable, keeping the xsk sentinel for errors.Is.
func mapXSKErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, xsk.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Wait implements Link: it polls the socket unless the link is closed; Close
// waits for it.
func (l *AFXDP) Wait(timeout time.Duration) error {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return ErrClosed
	}
	_, err := l.sock.Poll(timeout)
	return mapXSKErr(err)
}

// Wake implements Link.
func (l *AFXDP) Wake() {
	if s := l.socket(); s != nil {
		_ = s.Wake()
	}
}

// WakeFD implements Waker.
func (l *AFXDP) WakeFD() (int, error) {
	s := l.socket()
	if s == nil {
		return -1, ErrClosed
	}
	return s.WakeFD()
}

func (l *AFXDP) socket() *xsk.Socket {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return nil
	}
	return l.sock
}

// Info implements Link.
func (l *AFXDP) Info() Info { return l.info }

// Stats implements Link. The socket's counters belong to the owner goroutine, so
// Stats reads the kernel's XDP_STATISTICS and the program's counters, which are
// safe from anywhere, and this link's own atomics.
func (l *AFXDP) Stats() Stats {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	st := Stats{RxDropped: l.dropped.Load()}
	if l.closed.Load() {
		return st
	}
	if ks, err := l.sock.Stats(); err == nil {
		st.RxDropped += ks.RxDropped + ks.RxRingFull + ks.RxInvalidDescs
		st.TxErrors += ks.TxInvalidDescs
	}
	return st
}

// ProgramCounters returns the XDP program's per-CPU counters summed (seen,
// redirected, passed, malformed) for the whole interface.
func (l *AFXDP) ProgramCounters() (bpf.Counters, error) {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return bpf.Counters{}, ErrClosed
	}
	return l.att.Counters()
}

// SocketStats returns the kernel's XDP_STATISTICS for the link's socket.
func (l *AFXDP) SocketStats() (xsk.Stats, error) {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return xsk.Stats{}, ErrClosed
	}
	return l.sock.Stats()
}

// Close implements Link: it wakes the owner out of Wait, waits for the data path to
// leave, unregisters and closes the socket, and detaches the program it attached.
func (l *AFXDP) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	_ = l.sock.Wake()
	l.lendMu.Lock()
	defer l.lendMu.Unlock()
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	l.release()
	return nil
}
