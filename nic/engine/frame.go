// Frames: the prebuilt Ethernet + IP + UDP header of a path (route), and the
// transmit batch the engine writes packets into.

package engine

import (
	"encoding/binary"
	"net/netip"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/wire"
)

// route is a resolved address vector: the Ethernet, IP and UDP headers every packet
// of a path starts with, built once when the path is set (QP modify, AH create).
// Immutable once built, so a UD WQE may keep a pointer to its AH's route.
type route struct {
	hdr    [wire.EthernetLen + wire.IPv6Len + wire.UDPLen]byte
	hdrLen int // Ethernet + IP + UDP
	ipOff  int
	udpOff int
	ipSum  uint64 // IPv4: the header's sum without total length, ID and checksum
	v6     bool
	src    netip.Addr
	dst    netip.Addr
	dmac   wire.MAC
	// from4 is, for IPv4, the source and destination words of a packet from
	// dst to src (header bytes 12-20, little-endian): sameAddr's one compare.
	from4 uint64
	// loop: the destination is the device itself, and frames go back to
	// its receive path, not the link (rxe_prepare's RXE_LOOPBACK_MASK).
	loop bool
	// mcast: the destination is multicast group mgid (the DGID), whose
	// members on the device get a copy too (loopMcast).
	mcast bool
	mgid  netdev.GID
	// own: loop or mcast, the requester's one test (sendOwn).
	own bool
}

// routeParams describe a path (the address vector part of ibv_ah_attr with its GRH).
type routeParams struct {
	src, dst   netip.Addr // unmapped: IPv4 or IPv6; both of one family
	smac, dmac wire.MAC
	sport      uint16
	tclass     uint8
	flowLabel  uint32
	hopLimit   uint8
	loop       bool // route.loop
	mcast      bool // route.mcast
	mgid       netdev.GID
}

// newRoute builds the header template of p. The IPv4 header is sent with DF and TTL
// 64 (as rxe_prepare4 does), IPv6 with the hop limit, traffic class and flow label
// of the AV; the UDP checksum is 0, as rxe sends it.
func newRoute(p routeParams) (*route, error) {
	if p.src.Is4() != p.dst.Is4() || !p.src.IsValid() || !p.dst.IsValid() {
		return nil, errorf(ErrInvalid, "source %v and destination %v are not of one IP family", p.src, p.dst)
	}
	rt := &route{v6: !p.src.Is4(), src: p.src, dst: p.dst, dmac: p.dmac, loop: p.loop, mcast: p.mcast, mgid: p.mgid,
		own: p.loop || p.mcast}
	if !rt.v6 {
		s, d := p.src.As4(), p.dst.As4()
		rt.from4 = uint64(binary.LittleEndian.Uint32(d[:])) | uint64(binary.LittleEndian.Uint32(s[:]))<<32
	}
	eth := wire.EthernetFields{Dst: p.dmac, Src: p.smac, EtherType: wire.EtherTypeIPv4}
	rt.ipOff = eth.Len()
	if rt.v6 {
		eth.EtherType = wire.EtherTypeIPv6
		hl := p.hopLimit
		if hl == 0 {
			hl = defaultHopLimit
		}
		f := wire.IPv6Fields{TrafficClass: p.tclass, FlowLabel: p.flowLabel, NextHeader: wire.IPProtoUDP,
			HopLimit: hl, Src: p.src, Dst: p.dst}
		f.Encode(rt.hdr[rt.ipOff:])
		rt.udpOff = rt.ipOff + wire.IPv6Len
	} else {
		f := wire.IPv4Fields{TOS: p.tclass, Flags: wire.IPv4FlagDF, TTL: ipv4TTL, Protocol: wire.IPProtoUDP,
			Src: p.src, Dst: p.dst}
		f.Encode(rt.hdr[rt.ipOff:])
		rt.udpOff = rt.ipOff + wire.IPv4Len
		ip := rt.hdr[rt.ipOff:rt.udpOff]
		rt.ipSum = wire.PartialChecksum(ip[0:2]) + wire.PartialChecksum(ip[6:10]) + wire.PartialChecksum(ip[12:])
	}
	eth.Encode(rt.hdr[:])
	u := wire.UDPFields{SrcPort: p.sport, DstPort: wire.UDPPortRoCEv2}
	u.Encode(rt.hdr[rt.udpOff:])
	rt.hdrLen = rt.udpOff + wire.UDPLen
	return rt, nil
}

// begin writes the route's headers into b for an IB packet of ibLen bytes (BTH
// through ICRC) and returns the IB part. ipID is the IPv4 identification.
func (rt *route) begin(b []byte, ibLen int, ipID uint16) []byte {
	copy(b, rt.hdr[:rt.hdrLen])
	udpLen := wire.UDPLen + ibLen
	if rt.v6 {
		wire.IPv6(b[rt.ipOff:rt.udpOff]).SetPayloadLength(udpLen)
	} else {
		ip := wire.IPv4(b[rt.ipOff:rt.udpOff])
		ip.SetTotalLength(wire.IPv4Len + udpLen)
		ip.SetID(ipID)
		ip.SetChecksum(wire.FinishChecksum(rt.ipSum + uint64(wire.IPv4Len+udpLen) + uint64(ipID)))
	}
	wire.UDP(b[rt.udpOff:rt.hdrLen]).SetLength(udpLen)
	return b[rt.hdrLen : rt.hdrLen+ibLen]
}

// foldICRC returns the ICRC register (crc32.Update's form) after the
// headers of a frame begun with begin, which end at b[end], for a payload
// that is folded into it as it is copied in (copyOut, copyRegion); nil when
// the payload is shorter than wire.FoldCopyMin, which a copy and then one
// pass over the whole frame (seal) do in fewer instructions.
func (rt *route) foldICRC(b []byte, end, payload int, crc *uint32) *uint32 {
	if payload < wire.FoldCopyMin {
		return nil
	}
	*crc, _ = wire.ICRCInPlace(b[rt.ipOff:end], rt.udpOff-rt.ipOff)
	return crc
}

// seal pads the payload, which ends at b[end], with zeros to the 4-byte
// boundary of an IB packet of ibLen bytes, stores the ICRC and returns the
// frame's length. crc is foldICRC's register, or nil: then the ICRC is a pass
// over the frame.
func (rt *route) seal(b []byte, ibLen, end int, crc *uint32) int {
	n := rt.hdrLen + ibLen
	pad := b[end : n-wire.ICRCLen]
	var icrc uint32
	if crc != nil {
		icrc = wire.CopyUpdateIEEE(*crc, pad, zeroPad[:len(pad)])
	} else {
		clear(pad)
		icrc, _ = wire.ICRCInPlace(b[rt.ipOff:n-wire.ICRCLen], rt.udpOff-rt.ipOff)
	}
	wire.PutICRC(b[n-wire.ICRCLen:n], icrc)
	return n
}

// zeroPad is the pad (BTH PadCnt) seal folds in.
var zeroPad [3]byte

// ibLen is the length of an IB packet with opcode op and n payload bytes: headers,
// payload, pad to 4 bytes (BTH PadCnt) and ICRC.
func ibLen(op wire.Opcode, n int) int {
	return wire.Opcodes[op].HeaderLen + n + (-n & 3) + wire.ICRCLen
}

// txBatch holds the frames the engine built since the last WriteBatch, in
// preallocated buffers, or in the link's own (link.TxLender: the AF_XDP
// socket's UMEM, where the kernel reads them, with no copy between).
// Engine-owned.
type txBatch struct {
	bufs   [][]byte // len(bufs) buffers of the link's largest frame
	frames [][]byte // frames[:n] are queued: frames[i] is bufs[i][:len]
	n      int
	built  int           // frames committed since the engine last zeroed it (its pass)
	ipID   uint16        // IPv4 identification, incremented per IPv4 frame as Linux does
	fixID  bool          // the link sends IPv4 ID 0 (link.Info.FixedIPv4ID)
	lender link.TxLender // the link, when it lends its buffers
	lent   int           // bufs[:lent] are to build in: all, or those the lender lent until flush
	hint   int           // frames the last flush sent: how many to borrow first
}

// newTxBatch makes a batch of batch frames for l, in l's buffers when it
// lends them.
func newTxBatch(l link.Link, batch, frameCap int, fixID bool) txBatch {
	t := txBatch{bufs: make([][]byte, batch), frames: make([][]byte, batch), fixID: fixID}
	if x, ok := l.(link.TxLender); ok && x.TxBufLen() >= frameCap {
		t.lender = x
		return t
	}
	for i := range t.bufs {
		t.bufs[i] = make([]byte, frameCap)
	}
	t.lent = batch
	return t
}

// full reports whether every buffer holds a queued frame, or, when the link
// lends them, whether it has none to lend for the next. One comparison when it
// is not (inlined, two calls a frame).
func (t *txBatch) full() bool { return t.n == t.lent && t.borrow() }

// empty reports whether flush has nothing to do: no frame built, no buffer
// lent to give back.
func (t *txBatch) empty() bool { return t.n == 0 && (t.lender == nil || t.lent == 0) }

// borrow is full's slow path: every buffer to build in holds a frame, so it
// borrows more from a lending link, and reports whether it got none.
func (t *txBatch) borrow() bool {
	if t.lender == nil || t.n == len(t.bufs) {
		return true
	}
	// As many as the last flush sent, then as many again as are lent: a
	// pass that sends one ACK does not borrow and give back a whole batch
	// (8 % of the receiving engine's thread at 64-byte WRITEs).
	want := min(len(t.bufs)-t.lent, max(t.hint, t.lent, 1))
	t.lent += t.lender.ReserveTx(t.bufs[t.lent : t.lent+want])
	return t.n == t.lent
}

// next returns the next free buffer; the caller must check full first.
func (t *txBatch) next() []byte { return t.bufs[t.n] }

// nextID returns the IPv4 identification of the next frame.
func (t *txBatch) nextID() uint16 {
	if t.fixID {
		return 0
	}
	t.ipID++
	return t.ipID
}

// commit queues the first n bytes of the buffer next returned.
func (t *txBatch) commit(n int) {
	t.frames[t.n] = t.bufs[t.n][:n]
	t.n++
	t.built++
}

// flush hands the queued frames to the link and keeps what it did not take, in
// order, at the front (a lending link takes them all, and its buffers back).
// It returns how many frames the link took.
func (t *txBatch) flush(l link.Link, c *counters, ec *engineCounters) int {
	if t.lender != nil {
		return t.flushLent(c, ec)
	}
	if t.n == 0 {
		return 0
	}
	k, err := l.WriteBatch(t.frames[:t.n])
	if k = countSent(c, ec, t.n, k, err); err != nil {
		t.n = 0
		return 0
	}
	for i := k; i < t.n; i++ {
		t.bufs[i-k], t.bufs[i] = t.bufs[i], t.bufs[i-k]
		t.frames[i-k] = t.frames[i]
	}
	t.n -= k
	return k
}

// flushLent is flush for a lending link: every lent buffer goes back, those
// not built in unsent, and the link queues every frame built (each lent
// buffer held its room in the ring), so none stays. An error loses them all,
// as in flush.
func (t *txBatch) flushLent(c *counters, ec *engineCounters) int {
	if t.lent == 0 {
		return 0
	}
	k, err := t.lender.SendTx(t.frames[:t.n])
	n := t.n
	t.lent, t.hint, t.n = 0, n, 0
	if n == 0 {
		return 0
	}
	if k = countSent(c, ec, n, k, err); err == nil {
		c.add(CntSendErr, uint64(n-k)) // none, as the link promises
	}
	return k
}

// countSent counts a batch of n frames handed to the link, k of them taken,
// and returns k, or 0 when err says the link took none. A closed or failed
// link takes nothing; the frames are lost, as on a wire. An AF_XDP socket
// whose interface is down refuses each batch (sendto ENETDOWN,
// xsk.ErrLinkDown; what it queued leaves when the link is back, stale, and the
// responder takes it as duplicates, C9-105): send_err, per frame. link_downed
// counts the port going down (SetPortState).
func countSent(c *counters, ec *engineCounters, n, k int, err error) int {
	ec.inc(EngTxBatches)
	if err != nil {
		c.add(CntSendErr, uint64(n))
		return 0
	}
	c.add(CntSentPkts, uint64(k))
	ec.add(EngTxFrames, uint64(k))
	return k
}
