package xsk

// Socket setup and teardown: UMEM registration, ring creation and mapping, bind,
// and the calls that are safe from any goroutine (FD, Stats, Wake, Close).

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/wakeup"
)

// frameState is where a UMEM frame is. Each frame is in exactly one state, so a
// frame is never lost or used twice; the checks cost one byte per descriptor.
// A TX buffer of several chunks (Options.TxSpan) keeps its state at its first.
type frameState uint8

const (
	stRxFree     frameState = iota // RX pool, in rxFree, waiting for fill-ring room
	stFill                         // RX pool, owned by the kernel (fill ring, RX ring)
	stRxHeld                       // RX pool, returned by Receive, not yet Released
	stTxFree                       // TX pool, in txFree
	stTxReserved                   // TX pool, handed out by NextTxFrames
	stTxChecking                   // TX pool, inside SubmitTx's validation pass
	stTx                           // TX pool, in the TX ring or in flight until completed
)

// segMeta is one received segment: its offset and length inside its frame, and
// the frame of the next segment of the same packet.
type segMeta struct {
	off  uint16
	len  uint16
	next uint32
}

const noFrame = ^uint32(0)

// Socket is one AF_XDP socket bound to one queue of one interface, with its own
// UMEM. See the package documentation for the concurrency contract: one owner
// goroutine runs the data path; FD, Stats and Wake are safe from anywhere; Close
// needs the owner to have stopped.
type Socket struct {
	// Owner state: no locks (the owner is the only goroutine touching it).
	cfg   config
	umem  []byte
	fill  addrRing
	comp  addrRing
	rx    descRing
	tx    descRing
	state []frameState // per frame
	meta  []segMeta    // per RX frame
	// txPend, at a TX buffer's first chunk, has a bit for each of its chunks
	// whose descriptor the kernel has not completed.
	txPend []uint8
	// Free frame indices: rxFree[:rxFreeN] in the order released (refill
	// keeps it), txFree[:txFreeN] a stack of TX buffers' first chunks.
	rxFree  []uint32
	txFree  []uint32
	rxFreeN int
	txFreeN int
	// Frame accounting beyond the free stacks (Counters reports all of it).
	fillN      int // frames the kernel owns for RX
	fillTarget int // frames refill keeps on the fill ring (refill)
	fillCalm   int // refills in a row that did not find the fill ring pressed
	fillAfter  int // frames on the fill ring after the last stock
	rxHeld     int // frames held by the owner after Receive
	txReserved int // buffers handed out by NextTxFrames (each holds TxSpan TX-ring slots)
	txInFlight int // buffers in the TX ring or awaiting completion
	maxSegs    int // longest TX chain accepted
	ctr        Counters
	pfd        [2]unix.PollFd
	// sendto and recvfrom are replaced by tests that play the kernel.
	sendto   func() unix.Errno
	recvfrom func() unix.Errno

	// closed is written by Close under mu; the owner reads it without mu, which
	// is sound because Close never runs concurrently with the owner.
	closed bool

	// mu guards fd, wake and maps against Close for FD, Stats and Wake.
	mu   sync.RWMutex
	fd   int
	wake *wakeup.Pipe // Wake's; nil once closed
	maps [][]byte     // every mapping, unmapped by Close
}

// Stats are the kernel's drop counters for the socket (XDP_STATISTICS).
type Stats struct {
	RxDropped            uint64 // dropped for reasons other than invalid descriptors, e.g. fill ring empty or multi-buffer without XDP_USE_SG
	RxInvalidDescs       uint64 // invalid descriptors on the fill ring
	TxInvalidDescs       uint64 // invalid TX descriptors, or frames the device dropped
	RxRingFull           uint64 // dropped because the RX ring was full
	RxFillRingEmptyDescs uint64 // times the kernel found the fill ring empty (PLATFORM 9)
	TxRingEmptyDescs     uint64 // times the kernel found the TX ring empty
}

// Counters are the socket's user-space counters, named like rxe's hw counters,
// and a snapshot of where every UMEM frame is. Frame fields always sum to
// NumFrames.
type Counters struct {
	RxPackets     uint64 // packets returned by Receive
	RxDescs       uint64 // descriptors consumed from the RX ring
	RxBytes       uint64
	RxBadDescs    uint64 // RX descriptors naming a frame the kernel did not own: skipped
	RxBadReleases uint64 // Release of a frame not held (double release, foreign Packet)
	RxWakeups     uint64 // recvfrom() calls because the fill ring needed a wakeup
	FillRaises    uint64 // times refill raised its target to every RX frame: the owner fell behind

	TxPackets        uint64 // packets queued on the TX ring
	TxDescs          uint64 // descriptors queued on the TX ring
	TxBytes          uint64
	TxDropped        uint64 // packets refused without sending: empty, too large, broken chain
	TxRingFull       uint64 // Transmit or NextTxFrames calls cut short for lack of frames or slots
	TxKicks          uint64 // sendto() calls
	TxKickAgain      uint64 // sendto() calls that returned EAGAIN, EBUSY or ENOBUFS
	TxCompletions    uint64 // completion-ring entries reaped
	TxBadCompletions uint64 // completions naming a frame not in flight: ignored

	FramesRxFree     int // RX pool, free: in reserve beyond the fill ring's target
	FramesFill       int // RX pool, owned by the kernel
	FramesRxHeld     int // RX pool, held by the owner (Receive without Release)
	FramesTxFree     int // TX pool, free
	FramesTxReserved int // TX pool, reserved by NextTxFrames
	FramesTxInFlight int // TX pool, queued or sent but not yet reaped from the completion ring

	FillTarget int // RX frames kept on the fill ring now: Options.FillFrames once the owner kept up a while, else all
	TxBudget   int // descriptors one sendto() sends in copy mode: Options.TxBudget where the kernel took it, else its 32
}

// New creates an AF_XDP socket with its own UMEM, bound to queue queueID of the
// interface ifindex in the calling thread's network namespace (callers that
// switch namespaces must hold runtime.LockOSThread). Every RX frame is posted
// to the fill ring before New returns. An XDP program must redirect into an
// XSKMAP entry holding FD() for anything to arrive.
//
// The UMEM is pinned memory. Without CAP_IPC_LOCK it counts against
// RLIMIT_MEMLOCK (PLATFORM 1), so New raises the process's soft limit (to
// infinity when allowed, else to the hard limit) when it is below the UMEM size;
// this is process-wide, like cilium/ebpf's rlimit.RemoveMemlock.
//
// A re-bind right after a Close of the same queue may find the queue still busy
// (the kernel releases it asynchronously); New retries for up to 2 s.
func New(ifindex, queueID int, opts Options) (*Socket, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	if ifindex <= 0 {
		return nil, fmt.Errorf("%w: ifindex %d", ErrNoInterface, ifindex)
	}
	if queueID < 0 {
		return nil, fmt.Errorf("%w: queue %d", ErrNoQueue, queueID)
	}
	s := &Socket{fd: -1}
	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()

	umemLen := cfg.NumFrames * cfg.FrameSize
	raiseMemlock(uint64(umemLen))

	if s.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, errSys(nil, "socket(AF_XDP)", err, "")
	}
	// Page-aligned anonymous memory: chunks never straddle pages (af_xdp.rst UMEM).
	umem, err := unix.Mmap(-1, 0, umemLen, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, errSys(nil, "mmap UMEM", err, fmt.Sprintf("%d bytes", umemLen))
	}
	s.maps = append(s.maps, umem)
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))),
		Len:  uint64(umemLen),
		Size: uint32(cfg.FrameSize),
	}
	if err := setsockoptPtr(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		var sentinel error
		if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) {
			sentinel = ErrMemlock
		}
		return nil, errSys(sentinel, "setsockopt(XDP_UMEM_REG)", err,
			fmt.Sprintf("%d frames of %d bytes", cfg.NumFrames, cfg.FrameSize))
	}
	for _, r := range []struct {
		opt  int
		size int
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, cfg.FillRingSize, "XDP_UMEM_FILL_RING"},
		{unix.XDP_UMEM_COMPLETION_RING, cfg.CompRingSize, "XDP_UMEM_COMPLETION_RING"},
		{unix.XDP_RX_RING, cfg.RxRingSize, "XDP_RX_RING"},
		{unix.XDP_TX_RING, cfg.TxRingSize, "XDP_TX_RING"},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, r.opt, r.size); err != nil {
			return nil, errSys(nil, "setsockopt("+r.name+")", err, fmt.Sprintf("%d entries", r.size))
		}
	}
	// The v2 offsets carry the flags word need-wakeup lives in; a kernel that
	// answers with the shorter v1 struct (before 5.4) cannot do need-wakeup.
	var off unix.XDPMmapOffsets
	offLen := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&offLen)), 0); e != 0 {
		return nil, errSys(nil, "getsockopt(XDP_MMAP_OFFSETS)", e, "")
	}
	if offLen != uint32(unsafe.Sizeof(off)) {
		return nil, fmt.Errorf("%w: XDP_MMAP_OFFSETS returned %d bytes, want the v2 struct (%d)",
			ErrNotSupported, offLen, unsafe.Sizeof(off))
	}
	var mems [4][]byte
	for i, r := range []struct {
		pgoff int64
		ro    unix.XDPRingOffset
		bytes uint64
	}{
		{unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, off.Fr.Desc + uint64(cfg.FillRingSize)*sizeofAddr},
		{unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, off.Cr.Desc + uint64(cfg.CompRingSize)*sizeofAddr},
		{unix.XDP_PGOFF_RX_RING, off.Rx, off.Rx.Desc + uint64(cfg.RxRingSize)*sizeofDesc},
		{unix.XDP_PGOFF_TX_RING, off.Tx, off.Tx.Desc + uint64(cfg.TxRingSize)*sizeofDesc},
	} {
		m, err := unix.Mmap(s.fd, r.pgoff, int(r.bytes), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return nil, errSys(nil, "mmap ring", err, fmt.Sprintf("offset %#x", r.pgoff))
		}
		s.maps = append(s.maps, m)
		mems[i] = m
	}
	if cfg.TxBudget, err = setTxBudget(cfg, func(n int) error {
		return unix.SetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, n)
	}); err != nil {
		return nil, err
	}

	s.setup(cfg, umem, off, mems)
	s.stock(0, s.fillTarget) // the kernel has buffers from the first packet on

	if err := bind(s.fd, ifindex, queueID, cfg); err != nil {
		return nil, err
	}
	if s.wake, err = wakeup.New(); err != nil {
		return nil, errSys(nil, "wake-up pipe", err, "")
	}
	ok = true
	return s, nil
}

// setup builds the user-space view of the rings and the frame pools. Tests call
// it on plain memory to play the kernel's side.
func (s *Socket) setup(cfg config, umem []byte, off unix.XDPMmapOffsets, mems [4][]byte) {
	s.cfg = cfg
	s.umem = umem
	s.fill.init(mems[0], off.Fr, uint32(cfg.FillRingSize))
	s.comp.init(mems[1], off.Cr, uint32(cfg.CompRingSize))
	s.rx.init(mems[2], off.Rx, uint32(cfg.RxRingSize))
	s.tx.init(mems[3], off.Tx, uint32(cfg.TxRingSize))
	s.state = make([]frameState, cfg.NumFrames)
	s.meta = make([]segMeta, cfg.rxFrames)
	// Frames [0, rxFrames) feed the fill ring, in order (refill), the rest
	// transmit.
	s.rxFree = make([]uint32, cfg.rxFrames)
	for i := range s.rxFree {
		s.rxFree[i] = uint32(i)
		s.state[i] = stRxFree
	}
	s.rxFreeN = cfg.rxFrames
	s.fillTarget = cfg.rxFrames // until the owner has kept up a while (refill)
	s.txPend = make([]uint8, cfg.NumFrames)
	s.txFree = make([]uint32, cfg.TxFrames/cfg.TxSpan)
	for i := range s.txFree {
		f := uint32(cfg.NumFrames - cfg.TxSpan*(i+1))
		s.txFree[i] = f
		for k := range cfg.TxSpan {
			s.state[int(f)+k] = stTxFree
		}
	}
	s.txFreeN = len(s.txFree)
	s.maxSegs = 1
	if cfg.MultiBuffer {
		s.maxSegs = min(MaxSegments, cfg.TxRingSize, cfg.TxFrames)
	}
	if s.sendto == nil {
		s.sendto = s.sysSendto
	}
	if s.recvfrom == nil {
		s.recvfrom = s.sysRecvfrom
	}
}

// setTxBudget sets cfg.TxBudget through set (XDP_MAX_TX_SKB_BUDGET) and
// returns the budget in force, 0 for the kernel's own. A kernel without the
// option (ENOPROTOOPT) keeps its own where cfg came from TxBudgetRing.
func setTxBudget(cfg config, set func(int) error) (int, error) {
	if cfg.TxBudget == 0 {
		return 0, nil
	}
	err := set(cfg.TxBudget)
	if err == nil {
		return cfg.TxBudget, nil
	}
	var sentinel error
	if errors.Is(err, unix.ENOPROTOOPT) {
		if cfg.budgetOptional {
			return 0, nil
		}
		sentinel = ErrNotSupported
	}
	return 0, errSys(sentinel, "setsockopt(XDP_MAX_TX_SKB_BUDGET)", err, fmt.Sprint(cfg.TxBudget))
}

// bind binds fd, retrying while a closed socket still holds the queue.
func bind(fd, ifindex, queueID int, cfg config) error {
	flags := uint16(unix.XDP_COPY)
	if cfg.ZeroCopy {
		flags = unix.XDP_ZEROCOPY
	}
	if cfg.NeedWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	if cfg.MultiBuffer {
		flags |= unix.XDP_USE_SG
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(queueID)}
	deadline := time.Now().Add(bindRetryTimeout)
	delay := bindRetryDelay
	for {
		err := unix.Bind(fd, sa)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EBUSY) && time.Now().Before(deadline):
			time.Sleep(delay)
			delay = min(2*delay, 50*time.Millisecond)
			continue
		case errors.Is(err, unix.EBUSY):
			return errSys(ErrBusy, "bind", err, fmt.Sprintf("ifindex %d queue %d still busy after %v", ifindex, queueID, bindRetryTimeout))
		case errors.Is(err, unix.ENODEV):
			return errSys(ErrNoInterface, "bind", err, fmt.Sprintf("ifindex %d", ifindex))
		case errors.Is(err, unix.EOPNOTSUPP) && cfg.ZeroCopy:
			return errSys(ErrNotSupported, "bind", err, fmt.Sprintf("zero-copy on ifindex %d", ifindex))
		case errors.Is(err, unix.EINVAL):
			// xsk_reg_pool_at_qid: EINVAL when the queue id is at or above both
			// queue counts. Ask the kernel for them to tell that case apart.
			if l, lerr := netlink.LinkByIndex(ifindex); lerr == nil {
				a := l.Attrs()
				if n := max(a.NumRxQueues, a.NumTxQueues); queueID >= n {
					return errSys(ErrNoQueue, "bind", err, fmt.Sprintf("queue %d, but %s has %d RX and %d TX queues",
						queueID, a.Name, a.NumRxQueues, a.NumTxQueues))
				}
			}
			return errSys(nil, "bind", err, fmt.Sprintf("ifindex %d queue %d flags %#x", ifindex, queueID, flags))
		default:
			return errSys(nil, "bind", err, fmt.Sprintf("ifindex %d queue %d flags %#x", ifindex, queueID, flags))
		}
	}
}

func setsockoptPtr(fd, opt int, p unsafe.Pointer, n uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt),
		uintptr(p), n, 0); e != 0 {
		return e
	}
	return nil
}

// raiseMemlock lifts RLIMIT_MEMLOCK's soft limit when it is below need. Errors
// are ignored: with CAP_IPC_LOCK the limit does not apply, and without it the
// UMEM registration reports ErrMemlock.
func raiseMemlock(need uint64) {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) != nil || lim.Cur == unix.RLIM_INFINITY || lim.Cur >= need {
		return
	}
	if unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}) == nil {
		return
	}
	if lim.Max > lim.Cur {
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: lim.Max, Max: lim.Max})
	}
}

// sysSendto and sysRecvfrom are the kicks: non-blocking (MSG_DONTWAIT), so
// raw system calls, which leave Go's scheduler the P (internal/spin's yield
// says why that matters).
func (s *Socket) sysSendto() unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

func (s *Socket) sysRecvfrom() unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// FD returns the socket's file descriptor, for the XSKMAP entry; -1 after Close.
// Safe from any goroutine.
func (s *Socket) FD() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fd
}

// FrameSize returns the UMEM chunk size.
func (s *Socket) FrameSize() int { return s.cfg.FrameSize }

// TxBufLen is the length of the buffers NextTxFrames lends: TxSpan chunks.
func (s *Socket) TxBufLen() int { return s.cfg.TxSpan * s.cfg.FrameSize }

// MaxTxLen returns the largest frame Transmit accepts: one chunk, or
// MaxSegments chunks (bounded by the TX ring and pool) with MultiBuffer.
func (s *Socket) MaxTxLen() int { return s.maxSegs * s.cfg.FrameSize }

// Stats reads the kernel's counters (XDP_STATISTICS). Safe from any goroutine;
// ErrClosed after Close.
func (s *Socket) Stats() (Stats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Stats{}, ErrClosed
	}
	var st unix.XDPStatistics
	n := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
		return Stats{}, errSys(nil, "getsockopt(XDP_STATISTICS)", e, "")
	}
	return Stats{
		RxDropped:            st.Rx_dropped,
		RxInvalidDescs:       st.Rx_invalid_descs,
		TxInvalidDescs:       st.Tx_invalid_descs,
		RxRingFull:           st.Rx_ring_full,
		RxFillRingEmptyDescs: st.Rx_fill_ring_empty_descs,
		TxRingEmptyDescs:     st.Tx_ring_empty_descs,
	}, nil
}

// Counters returns the user-space counters and the frame accounting. Owner only.
func (s *Socket) Counters() Counters {
	c := s.ctr
	c.FramesRxFree = s.rxFreeN
	c.FramesFill = s.fillN
	c.FillTarget = s.fillTarget
	c.TxBudget = cmp.Or(s.cfg.TxBudget, kernelTxBudget)
	c.FramesRxHeld = s.rxHeld
	c.FramesTxFree = s.txFreeN * s.cfg.TxSpan
	c.FramesTxReserved = s.txReserved * s.cfg.TxSpan
	c.FramesTxInFlight = s.txInFlight * s.cfg.TxSpan
	return c
}

// Poll blocks until the RX ring has descriptors, Wake is called, or timeout
// passes (negative: no timeout; zero: just look). It reports whether Receive
// has something. It returns at once when descriptors are already waiting (the
// kernel's poll looks at the ring). In copy mode the kernel's poll also pushes
// pending TX descriptors out. Poll does not notice a vanished interface: use a
// finite timeout. It reads none of the rings' user-space state, so one
// goroutine may sleep in it while another, holding ownership, receives and
// transmits (the engine's busy pollers).
func (s *Socket) Poll(timeout time.Duration) (readable bool, err error) {
	if s.closed {
		return false, ErrClosed
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	// The socket and the pipe Wake writes, which is drained if it fired.
	s.pfd[0] = unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN}
	s.pfd[1] = unix.PollFd{Fd: int32(s.wake.FD()), Events: unix.POLLIN}
	if _, err := unix.Poll(s.pfd[:], ms); err != nil {
		if errors.Is(err, unix.EINTR) {
			return false, nil
		}
		return false, errSys(nil, "poll", err, "")
	}
	if s.pfd[1].Revents&unix.POLLIN != 0 {
		s.wake.Drain()
	}
	return s.pfd[0].Revents&unix.POLLIN != 0, nil
}

// Wake makes a Poll in progress (or the next one) return at once. Safe from any
// goroutine; it is the doorbell for an owner sleeping in Poll.
func (s *Socket) Wake() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.wake.Wake(); err != nil {
		return errSys(nil, "wake", err, "")
	}
	return nil
}

// WakeFD returns a new write end of the pipe Wake writes: another process
// given it wakes the owner's Poll itself (the attach protocol's doorbell), and
// can neither read the owner's wake-ups nor change how its end behaves
// (internal/wakeup). The caller closes it.
func (s *Socket) WakeFD() (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return -1, ErrClosed
	}
	fd, err := s.wake.Writer()
	if err != nil {
		return -1, errSys(nil, "wake-up writer", err, "")
	}
	return fd, nil
}

// Close unmaps the rings and the UMEM and closes the socket. It is idempotent
// and safe from any goroutine, provided the owner goroutine has stopped using
// the Socket: Packets and TxFrames point into memory Close unmaps. To stop an
// owner sleeping in Poll, call Wake first.
func (s *Socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.release()
}

// release frees whatever New acquired. Called with mu held, or from New before
// the Socket escapes.
func (s *Socket) release() error {
	var errs []error
	for _, m := range s.maps {
		if err := unix.Munmap(m); err != nil {
			errs = append(errs, errSys(nil, "munmap", err, ""))
		}
	}
	s.maps = nil
	s.umem = nil
	s.fill.addrs, s.comp.addrs, s.rx.descs, s.tx.descs = nil, nil, nil, nil
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil {
			errs = append(errs, errSys(nil, "close", err, ""))
		}
		s.fd = -1
	}
	if s.wake != nil {
		if err := s.wake.Close(); err != nil {
			errs = append(errs, errSys(nil, "close", err, ""))
		}
		s.wake = nil
	}
	return errors.Join(errs...)
}
