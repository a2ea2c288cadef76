// The receive path: validate a frame and dispatch it to its QP's responder or
// completer (rxe_recv.c).

package engine

import (
	"encoding/binary"

	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// handleFrame parses one received frame in place and hands it on: to its QP's
// engine when that is another queue's (shard.go), else to its QP's responder
// or completer. Whatever is wrong with it is counted and dropped; nothing here
// fails or allocates. handed: another shard (or a send, loopBack) handed it
// over.
func (e *engine) handleFrame(b []byte, handed bool) {
	p := &e.pkt
	c := &e.d.cnt
	if err := wire.Parse(b, p); err != nil {
		c.inc(CntRcvdMalformed)
		return
	}
	dqpn := p.BTH.DestQPN()
	if len(e.d.sh) > 1 {
		// The multicast QPN is no shard's: tested only for a frame that
		// would leave, so a unicast frame at its QP's shard pays nothing.
		if to := e.d.shardOf(dqpn); to != e.sh && dqpn != McastQPN {
			e.handOver(to, b)
			return
		}
	}
	if err := p.VerifyICRCInPlace(); err != nil { // the engine owns b
		c.inc(CntRcvdBadICRC)
		return
	}
	in := &wire.Opcodes[p.Opcode]
	if in.Mask&wire.MaskCNP != 0 {
		c.inc(CntRcvdPkts) // congestion control is not modelled
		return
	}
	qp := e.qps.get(dqpn)
	if qp == nil {
		if dqpn == McastQPN { // rxe_rcv's IB_MULTICAST_QPN, no QP's number
			e.rcvMcast(b, handed)
			return
		}
		c.inc(CntRcvdUnknownQP)
		return
	}
	if !e.checkQP(qp, p, in.Mask) {
		return
	}
	c.inc(CntRcvdPkts)
	if qp.state == qpattr.RTR && !qp.commEst {
		// The first packet received in RTR establishes communication.
		qp.commEst = true
		e.d.evq.post(AsyncEvent{Type: EventCommEst, QP: qp})
	}
	if in.Mask&wire.MaskReq != 0 {
		e.respond(qp, p)
	} else {
		e.completer(qp, p)
	}
	e.checkError(qp)
}

// checkQP makes the checks of rxe's check_type_state, check_keys and check_addr.
func (e *engine) checkQP(qp *QP, p *wire.Packet, mask wire.OpMask) bool {
	c := &e.d.cnt
	// The opcode's transport must be the QP's (rxe check_type_state).
	var want wire.Transport
	switch qp.typ {
	case qpattr.RC:
		want = wire.TransportRC
	case qpattr.UC:
		want = wire.TransportUC
	default:
		want = wire.TransportUD
	}
	if p.Opcode.Transport() != want || qp.errPending || !qpattr.ProcessesIncoming(qp.state) {
		c.inc(CntRcvdBadState)
		return false
	}
	if mask&wire.MaskReq == 0 && (qp.typ != qpattr.RC || qp.state == qpattr.RTR) {
		c.inc(CntRcvdBadState) // a response to a QP that sent no request
		return false
	}
	// P_Key: the default partition, full or limited member (rxe check_keys).
	if p.BTH.PKey()&0x7FFF != wire.DefaultPKey&0x7FFF {
		c.inc(CntRcvdBadPKey)
		return false
	}
	if qp.typ.Connected() {
		// A connected QP takes packets from its peer only (rxe check_addr).
		rt := qp.rt
		if rt == nil || !sameAddr(p, rt) {
			c.inc(CntRcvdBadAddr)
			return false
		}
		return true
	}
	// UD: the Q_Key must match (rxe check_keys); QP1 uses the well-known one.
	qkey := qp.attr.QKey
	if qp.qpn == gsiQPN {
		qkey = wire.QP1QKey
	}
	if p.DETH.QKey() != qkey {
		c.inc(CntRcvdBadQKey)
		return false
	}
	// A multicast destination is no GID of the port (rxe_chk_dgid lets it
	// by): tested after ourAddr fails, not ahead of every unicast frame.
	if !e.ourAddr(p) && p.BTH.DestQPN() != McastQPN {
		c.inc(CntRcvdBadAddr)
		return false
	}
	return true
}

// sameAddr reports whether p came from rt's destination to rt's source.
func sameAddr(p *wire.Packet, rt *route) bool {
	if rt.v6 {
		return p.IPv6 != nil && p.IPv6.Src() == rt.dst && p.IPv6.Dst() == rt.src
	}
	return len(p.IPv4) >= wire.IPv4Len && binary.LittleEndian.Uint64(p.IPv4[12:20]) == rt.from4
}

// ourAddr reports whether p's destination address is one of the port's GIDs.
func (e *engine) ourAddr(p *wire.Packet) bool {
	var dst [16]byte
	if p.IPv6 != nil {
		copy(dst[:], p.IPv6[24:40])
	} else {
		dst[10], dst[11] = 0xff, 0xff
		copy(dst[12:], p.IPv4[16:20])
	}
	for _, g := range e.d.cfg.GIDs {
		if g == dst {
			return true
		}
	}
	return false
}
