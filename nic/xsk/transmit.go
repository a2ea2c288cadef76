package xsk

// The transmit path: frames into TX-pool chunks, descriptors onto the TX ring,
// sendto() kicks, and completions back to the TX pool.

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TxFrame is a TX buffer (Options.TxSpan UMEM chunks) reserved for transmit
// by NextTxFrames, for callers that build frames in place instead of copying
// them in with Transmit.
type TxFrame struct {
	// Buf is the whole buffer (TxSpan*FrameSize bytes) when NextTxFrames
	// returns. Write the frame and reslice Buf to the bytes to send; Buf may
	// start past the buffer's first byte (headroom) but must stay inside it.
	// It goes out as one descriptor per chunk it covers.
	Buf []byte
	// More says the packet continues in the next TxFrame (XDP_PKT_CONTD); it
	// needs MultiBuffer. A packet is at most MaxSegments frames.
	More bool

	frame uint32
}

// NextTxFrames reserves up to len(frames) TX buffers, with a TX-ring slot for
// each of their chunks, and returns how many it filled in. Every reserved
// frame must go back through SubmitTx or CancelTx. Owner only; no allocation.
func (s *Socket) NextTxFrames(frames []TxFrame) int {
	if s.closed {
		return 0
	}
	want := len(frames)
	if s.txFreeN < want {
		s.reap()
	}
	n := s.txRoom(want)
	if n == 0 && want > 0 {
		// Every buffer may wait in the TX ring for a sendto() that pushes it
		// (copy mode sends from nothing else): kick, as Transmit does on
		// every call, or a caller that only reserves would wait for good.
		// A failed kick leaves the ring as it was; SubmitTx reports it.
		_ = s.kick()
		n = s.txRoom(want)
	}
	if n < want {
		s.ctr.TxRingFull++
	}
	for i := range n {
		f := s.popTx()
		s.state[f] = stTxReserved
		lo := uint64(f) << s.cfg.shift
		hi := lo + uint64(s.cfg.TxSpan*s.cfg.FrameSize)
		frames[i] = TxFrame{Buf: s.umem[lo:hi:hi], frame: f}
	}
	s.txReserved += n
	return n
}

// txRoom is how many of want TX buffers are free with ring slots for
// their chunks.
func (s *Socket) txRoom(want int) int {
	span := s.cfg.TxSpan
	return min(want, s.txFreeN, int(s.txSlots(want*span))/span)
}

// CancelTx returns reserved frames unsent. Frames not reserved are ignored.
// Owner only.
func (s *Socket) CancelTx(frames []TxFrame) {
	if s.closed {
		return
	}
	for i := range frames {
		s.unreserve(frames[i].frame)
		frames[i] = TxFrame{}
	}
}

// SubmitTx queues reserved frames on the TX ring in order, in one batch, and
// kicks the kernel (see Transmit). It returns the number of packets queued.
// A packet with a frame that is not reserved, an empty or out-of-buffer Buf,
// more descriptors than MaxTxLen allows, More without MultiBuffer, or a chain
// still open at the end of frames is dropped: its reserved frames return to the
// pool and TxDropped counts it. err is as for Transmit. Owner only; no
// allocation.
func (s *Socket) SubmitTx(frames []TxFrame) (n int, err error) {
	if s.closed {
		return 0, ErrClosed
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.umem)))
	queued := 0
	for i := 0; i < len(frames); {
		j := i
		for j < len(frames) && frames[j].More {
			j++
		}
		if j == len(frames) {
			s.dropTx(frames[i:j]) // chain never closed
			break
		}
		j++
		chain := frames[i:j]
		i = j
		if !s.checkTx(chain, base) {
			s.dropTx(chain)
			continue
		}
		for k := range chain {
			fr := &chain[k]
			addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(fr.Buf))) - base)
			s.ctr.TxDescs += uint64(s.queueTx(fr.frame, addr, len(fr.Buf), fr.More))
			s.ctr.TxBytes += uint64(len(fr.Buf))
			*fr = TxFrame{}
		}
		s.txReserved -= len(chain)
		s.txInFlight += len(chain)
		queued++
	}
	s.ctr.TxPackets += uint64(queued)
	if queued > 0 {
		s.tx.submit()
	}
	return queued, s.kick()
}

// checkTx validates one chain, marking its frames stTxChecking to catch a frame
// listed twice; on failure it puts them back to stTxReserved.
func (s *Socket) checkTx(chain []TxFrame, base uintptr) bool {
	ok := len(chain) <= s.maxSegs
	k, descs := 0, 0
	fs := uint64(s.cfg.FrameSize)
	for ; ok && k < len(chain); k++ {
		fr := &chain[k]
		f := fr.frame
		if uint64(f) >= uint64(len(s.state)) || s.state[f] != stTxReserved || len(fr.Buf) == 0 {
			ok = false
			break
		}
		// The slice must lie inside its own buffer; queueTx cuts it at the
		// chunks' boundaries (af_xdp.rst: in aligned mode a descriptor may
		// not cross one).
		lo := uint64(f) << s.cfg.shift
		p := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(fr.Buf))) - base)
		end := p + uint64(len(fr.Buf))
		if p < lo || end > lo+uint64(s.cfg.TxSpan)*fs {
			ok = false
			break
		}
		if descs += int((end-1)/fs - p/fs + 1); descs > s.maxSegs {
			ok = false
			break
		}
		s.state[f] = stTxChecking
	}
	if !ok {
		for _, fr := range chain[:k] {
			s.state[fr.frame] = stTxReserved
		}
	}
	return ok
}

// dropTx returns a refused packet's reserved frames to the pool.
func (s *Socket) dropTx(chain []TxFrame) {
	if len(chain) == 0 {
		return
	}
	s.ctr.TxDropped++
	for i := range chain {
		s.unreserve(chain[i].frame)
		chain[i] = TxFrame{}
	}
}

func (s *Socket) unreserve(f uint32) {
	if uint64(f) < uint64(len(s.state)) && s.state[f] == stTxReserved {
		s.pushTx(f)
		s.txReserved--
	}
}

// Transmit copies frames into TX chunks, queues them on the TX ring in one
// batch and kicks the kernel: copy mode sends only from sendto() (or poll), at
// most TxBudget descriptors (default 32) per call, so Transmit calls sendto()
// again while the ring has descriptors left and the kernel makes progress
// (PLATFORM 8). It reaps the completion ring to recycle chunks.
//
// n counts frames taken from the front of frames: queued, or dropped and
// counted in TxDropped when they can never be sent (empty, or longer than
// MaxTxLen). n < len(frames) means the TX pool or ring is full: retry the rest
// later. A frame larger than FrameSize goes out as a multi-buffer chain when
// MultiBuffer is set. err is ErrClosed, ErrLinkDown (ENETDOWN/ENXIO from
// sendto(): what was queued stays queued) or another sendto() errno. Owner only;
// no allocation.
func (s *Socket) Transmit(frames [][]byte) (n int, err error) {
	if s.closed {
		return 0, ErrClosed
	}
	s.reap()
	r := &s.tx
	fs, span := s.cfg.FrameSize, s.cfg.TxSpan
	queued, descs := 0, 0
	for n < len(frames) {
		f := frames[n]
		segs := (len(f) + fs - 1) >> s.cfg.shift
		if segs == 0 || segs > s.maxSegs {
			s.ctr.TxDropped++
			n++
			continue
		}
		bufs := (segs + span - 1) / span
		if s.txFreeN < bufs {
			s.reap()
		}
		if s.txFreeN < bufs || int(s.txSlots(segs)) < segs {
			s.ctr.TxRingFull++
			break
		}
		for off := 0; off < len(f); off += span * fs {
			fr := s.popTx()
			seg := min(span*fs, len(f)-off)
			lo := int(fr) << s.cfg.shift
			copy(s.umem[lo:lo+seg], f[off:off+seg])
			s.queueTx(fr, uint64(lo), seg, off+seg < len(f))
			s.txInFlight++
		}
		descs += segs
		s.ctr.TxBytes += uint64(len(f))
		queued++
		n++
	}
	if queued > 0 {
		r.submit()
		s.ctr.TxPackets += uint64(queued)
		s.ctr.TxDescs += uint64(descs)
	}
	return n, s.kick()
}

// Flush kicks the kernel until the TX ring is empty (or stops making progress)
// and reaps completions. Transmit and SubmitTx already do this; Flush is for an
// owner that wants the ring drained, e.g. before Close. Owner only.
func (s *Socket) Flush() error {
	if s.closed {
		return ErrClosed
	}
	err := s.kick()
	s.reap()
	return err
}

// queueTx puts the n bytes at UMEM offset addr, inside TX buffer f, on the TX
// ring as one descriptor per chunk they cover, the last with XDP_PKT_CONTD if
// more says the packet goes on, and marks f in flight. It returns the
// descriptors it queued. The caller has checked room and bounds.
func (s *Socket) queueTx(f uint32, addr uint64, n int, more bool) int {
	r := &s.tx
	fs := uint64(s.cfg.FrameSize)
	end := addr + uint64(n)
	k := 0
	for p := addr; p < end; k++ {
		e := min(end, (p/fs+1)*fs)
		var opt uint32
		if e < end || more {
			opt = unix.XDP_PKT_CONTD
		}
		r.descs[r.cachedProd&r.mask] = unix.XDPDesc{Addr: p, Len: uint32(e - p), Options: opt}
		r.cachedProd++
		s.txPend[f] |= 1 << (p/fs - uint64(f))
		p = e
	}
	s.state[f] = stTx
	return k
}

// txSlots returns the TX-ring slots free for new reservations, reading the
// kernel's consumer only when want exceeds the cached view.
func (s *Socket) txSlots(want int) uint32 {
	held := uint32(s.txReserved * s.cfg.TxSpan)
	free := s.tx.free(uint32(want) + held)
	if free < held {
		return 0
	}
	return free - held
}

func (s *Socket) popTx() uint32 {
	s.txFreeN--
	return s.txFree[s.txFreeN]
}

func (s *Socket) pushTx(f uint32) {
	s.state[f] = stTxFree
	s.txFree[s.txFreeN] = f
	s.txFreeN++
}

// kick calls sendto() until the kernel has consumed every TX descriptor. Copy
// mode always needs it (PLATFORM 8); in zero-copy mode with need-wakeup only
// when the ring's flag asks (af_xdp.rst "XDP_USE_NEED_WAKEUP"), and once, as
// the driver then sends on its own.
func (s *Socket) kick() error {
	r := &s.tx
	stalls := 0
	for {
		cons := atomic.LoadUint32(r.consumer)
		r.cachedCons = cons
		if cons == r.cachedProd {
			return nil
		}
		if s.cfg.ZeroCopy && s.cfg.NeedWakeup && !r.needWakeup() {
			return nil
		}
		e := s.sendto()
		s.ctr.TxKicks++
		if e != 0 {
			if !isTransientTxErrno(e) {
				if e == unix.ENETDOWN || e == unix.ENXIO {
					return errSys(ErrLinkDown, "sendto", e, "")
				}
				return errSys(nil, "sendto", e, "")
			}
			s.ctr.TxKickAgain++
		}
		s.reap()
		if s.cfg.ZeroCopy {
			return nil
		}
		if atomic.LoadUint32(r.consumer) == cons {
			if stalls++; stalls >= maxKickStalls {
				return nil
			}
		} else {
			stalls = 0
		}
	}
}

// reap takes every completed address off the completion ring and returns a TX
// buffer to the pool once the kernel has completed each of its chunks.
func (s *Socket) reap() {
	r := &s.comp
	r.cachedProd = atomic.LoadUint32(r.producer)
	n := r.cachedProd - r.cachedCons
	if n == 0 {
		return
	}
	lo, hi := uint64(s.cfg.rxFrames), uint64(s.cfg.NumFrames)
	span := uint64(s.cfg.TxSpan)
	for i := uint32(0); i < n; i++ {
		c := r.addrs[(r.cachedCons+i)&r.mask] >> s.cfg.shift
		if c < lo || c >= hi {
			s.ctr.TxBadCompletions++
			continue
		}
		f := lo + (c-lo)/span*span // the chunk's buffer
		bit := uint8(1) << (c - f)
		if s.state[f] != stTx || s.txPend[f]&bit == 0 {
			s.ctr.TxBadCompletions++
			continue
		}
		if s.txPend[f] &^= bit; s.txPend[f] == 0 {
			s.pushTx(uint32(f))
			s.txInFlight--
		}
	}
	r.cachedCons += n
	r.release()
	s.ctr.TxCompletions += uint64(n)
}
