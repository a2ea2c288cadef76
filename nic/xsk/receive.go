package xsk

// The receive path: RX ring to Packets, Packets back to the fill ring.

import "golang.org/x/sys/unix"

// Packet is one received frame: one UMEM segment, or with MultiBuffer a chain of
// them (descriptors flagged XDP_PKT_CONTD continue in the next one, af_xdp.rst
// "Multi-Buffer Support"). Its bytes live in the UMEM and stay valid, and
// writable, until the Packet is passed to Release. Its methods may run on any
// goroutine the owner hands the Packet to; Release is the owner's. The zero
// Packet is empty.
type Packet struct {
	s    *Socket
	head uint32 // frame of the first segment
	segs uint32
	n    int
}

// Len returns the frame's length in bytes, over all segments.
func (p *Packet) Len() int { return p.n }

// NumSegments returns how many UMEM segments hold the frame (1 unless the frame
// was larger than FrameSize-RxHeadroom and MultiBuffer is on).
func (p *Packet) NumSegments() int { return int(p.segs) }

// Segment returns segment i, in order. The slice aliases the UMEM.
func (p *Packet) Segment(i int) []byte {
	if i < 0 || i >= int(p.segs) {
		panic("xsk: Packet.Segment index out of range")
	}
	s := p.s
	f := p.head
	for ; i > 0; i-- {
		f = s.meta[f].next
	}
	m := s.meta[f]
	lo := uint64(f)<<s.cfg.shift + uint64(m.off)
	hi := lo + uint64(m.len)
	return s.umem[lo:hi:hi]
}

// CopyTo copies the frame into dst and returns the bytes copied: Len(), or
// len(dst) when dst is shorter.
func (p *Packet) CopyTo(dst []byte) int {
	n := 0
	for i := 0; i < int(p.segs) && n < len(dst); i++ {
		n += copy(dst[n:], p.Segment(i))
	}
	return n
}

// Bytes returns the frame as one slice: the UMEM segment itself when there is
// one segment (no copy), else a copy in scratch. A scratch shorter than Len()
// gives a truncated frame: check len(result) == Len().
func (p *Packet) Bytes(scratch []byte) []byte {
	if p.segs == 1 {
		return p.Segment(0)
	}
	return scratch[:p.CopyTo(scratch)]
}

// Join makes a frame of one or two segments one slice of the UMEM, in place,
// and returns it: a second segment that lies in the chunk after the first,
// which fills its own chunk to the end, moves down over its chunk's headroom
// to meet the first (at most FrameSize-RxHeadroom bytes move, not the frame).
// ok is false, and the Packet untouched, when its segments do not lie so (a
// chain of three leaves headroom gaps): Bytes copies those. Release gives the
// chunks back in the order they came, so the kernel fills them in that order
// again, and a frame's two chunks are consecutive but where the UMEM wraps.
// The slice aliases the UMEM, as Segment's do.
func (p *Packet) Join() (b []byte, ok bool) {
	if p.segs == 0 || p.segs > 2 {
		return nil, false
	}
	s := p.s
	f := p.head
	m := s.meta[f]
	lo := uint64(f)<<s.cfg.shift + uint64(m.off)
	if p.segs == 2 {
		g := m.next
		if g != f+1 || int(m.off)+int(m.len) != s.cfg.FrameSize {
			return nil, false
		}
		at := uint64(g) << s.cfg.shift
		n := &s.meta[g]
		copy(s.umem[at:at+uint64(n.len)], s.umem[at+uint64(n.off):at+uint64(n.off)+uint64(n.len)])
		n.off = 0
	}
	hi := lo + uint64(p.n)
	return s.umem[lo:hi:hi], true
}

// Receive takes up to len(pkts) complete packets from the RX ring without
// blocking and stores them in pkts[:n], overwriting what was there: release
// packets before reusing their slots, or their frames stay held. Each Packet
// holds its UMEM frames until Release; held frames are not on the fill ring, so
// hold few and briefly (an empty fill ring drops packets, PLATFORM 9). RX-ring
// slots go back to the kernel at once. The error is ErrClosed or nil. Owner
// only; no allocation.
func (s *Socket) Receive(pkts []Packet) (int, error) {
	if s.closed {
		return 0, ErrClosed
	}
	r := &s.rx
	if r.avail() == 0 {
		return 0, nil
	}
	n := 0
	descs, bytes := 0, 0
	cons := r.cachedCons
	for n < len(pkts) && cons != r.cachedProd {
		// Find the packet's last descriptor. The kernel publishes whole
		// packets (af_xdp.rst: "only a complete packet ... is sent to the
		// application"), so a chain cut at the producer is not expected;
		// leave it for the next call if it happens.
		end := cons
		for r.descs[end&r.mask].Options&unix.XDP_PKT_CONTD != 0 {
			end++
			if end == r.cachedProd {
				goto done
			}
		}
		end++
		head, prev := noFrame, noFrame
		segs, plen := uint32(0), 0
		for i := cons; i != end; i++ {
			d := r.descs[i&r.mask]
			f := uint32(d.Addr >> s.cfg.shift)
			if uint64(f) >= uint64(s.cfg.rxFrames) || s.state[f] != stFill {
				s.ctr.RxBadDescs++
				continue
			}
			s.state[f] = stRxHeld
			s.meta[f] = segMeta{off: uint16(d.Addr & uint64(s.cfg.FrameSize-1)), len: uint16(d.Len), next: noFrame}
			if prev == noFrame {
				head = f
			} else {
				s.meta[prev].next = f
			}
			prev = f
			segs++
			plen += int(d.Len)
		}
		descs += int(end - cons)
		cons = end
		if segs == 0 {
			continue
		}
		s.fillN -= int(segs)
		s.rxHeld += int(segs)
		pkts[n] = Packet{s: s, head: head, segs: segs, n: plen}
		bytes += plen
		n++
	}
done:
	if cons != r.cachedCons {
		r.cachedCons = cons
		r.release()
	}
	if n > 0 && s.fillTarget < s.cfg.rxFrames {
		// Behind already: the reserve goes on the ring now, not after the
		// batch (refill), by when the kernel may have found it empty.
		if stocked := int(s.fill.queued()); s.pressed(stocked) {
			s.raiseFill()
			s.stock(stocked, s.fillTarget)
		}
	}
	s.ctr.RxPackets += uint64(n)
	s.ctr.RxDescs += uint64(descs)
	s.ctr.RxBytes += uint64(bytes)
	return n, nil
}

// Release gives the packets' frames back to the kernel through the fill ring,
// in one batch, and clears the Packets. A Packet already released, or from
// another Socket, is counted in RxBadReleases and skipped. Owner only; no
// allocation.
func (s *Socket) Release(pkts []Packet) {
	if s.closed {
		return
	}
	for i := range pkts {
		p := &pkts[i]
		if p.segs == 0 {
			continue
		}
		if p.s != s {
			s.ctr.RxBadReleases++
			continue
		}
		f := p.head
		for k := uint32(0); k < p.segs; k++ {
			if uint64(f) >= uint64(len(s.meta)) || s.state[f] != stRxHeld {
				s.ctr.RxBadReleases++
				break
			}
			next := s.meta[f].next
			s.state[f] = stRxFree
			s.rxFree[s.rxFreeN] = f
			s.rxFreeN++
			s.rxHeld--
			f = next
		}
		*p = Packet{}
	}
	s.refill()
}

// refill moves free RX frames onto the fill ring, up to the target it keeps
// there (stock).
//
// The target keeps the frames in use few once the owner keeps up, so that
// the kernel writes into chunks the caches still hold. With every RX frame
// on the ring the kernel cycles through all of them, 8 MiB at the defaults
// (twice the L2 here), and the sender's copy into them waited on memory: 22 %
// of the sending engine's thread in write_bw 64 KiB sat at the barrier in
// sock_def_readable after __xsk_rcv's copy, 14 % with 512 frames on the ring.
// The rest wait in reserve for bursts, since an empty fill ring drops
// (PLATFORM 9). So a new socket keeps every frame on the ring, and comes down
// to FillFrames after FillCalmRefills refills in a row that would not have
// pressed it (pressed); a refill or a Receive that finds it pressed while it
// is down puts it back up to every frame. Starting down, or coming down after
// refills that merely found the ring three quarters full, the windows of 256
// QPs dropped 16-240 frames before a look found the ring pressed.
func (s *Socket) refill() {
	stocked := int(s.fill.queued())
	switch {
	case s.pressed(stocked):
		if s.fillTarget < s.cfg.rxFrames {
			s.raiseFill()
		}
		s.fillCalm = 0
	case s.fillTarget > s.cfg.FillFrames:
		if s.fillCalm++; s.fillCalm >= s.cfg.FillCalmRefills {
			s.fillTarget = s.cfg.FillFrames
			s.fillCalm = 0
		}
	}
	s.stock(stocked, s.fillTarget)
}

// pressed reports whether the kernel took more than half of FillFrames from
// the fill ring since it was last stocked, which left fillAfter there: with
// FillFrames on the ring, the owner fell behind.
func (s *Socket) pressed(stocked int) bool { return s.fillAfter-stocked > s.cfg.FillFrames/2 }

// raiseFill makes every RX frame the fill ring's target: the owner fell behind.
func (s *Socket) raiseFill() {
	s.fillTarget = s.cfg.rxFrames
	s.fillCalm = 0
	s.ctr.FillRaises++
}

// FillAll puts every free RX frame on the fill ring, for an owner about to
// sleep (Poll): it refills nothing while it sleeps, so a burst must find room
// on the ring. With the target alone, the first windows of 256 QPs (512 frames
// of two chunks) came at once to a sleeping receiver and 256 were dropped. The
// next Release stocks only up to the target again. Owner only; no allocation.
func (s *Socket) FillAll() {
	if s.closed {
		return
	}
	s.stock(int(s.fill.queued()), s.cfg.rxFrames)
}

// stock puts free RX frames on the fill ring, which holds stocked, until it
// holds target, and wakes the kernel if it asked for it.
func (s *Socket) stock(stocked, target int) {
	r := &s.fill
	k := min(int(r.free(uint32(s.rxFreeN))), s.rxFreeN, target-stocked)
	if k > 0 {
		// The last k freed, in the order they were freed: the order the
		// kernel filled them (Join), and the chunks most likely cached.
		lo := s.rxFreeN - k
		for _, f := range s.rxFree[lo:s.rxFreeN] {
			s.state[f] = stFill
			r.addrs[r.cachedProd&r.mask] = uint64(f) << s.cfg.shift
			r.cachedProd++
		}
		s.rxFreeN = lo
		r.submit()
		s.fillN += k
	}
	s.fillAfter = stocked + max(k, 0)
	if s.cfg.NeedWakeup && r.needWakeup() {
		s.ctr.RxWakeups++
		s.recvfrom()
	}
}
