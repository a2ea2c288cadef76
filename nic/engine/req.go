// The requester: turns send WQEs into request packets (rxe_req.c).

package engine

import (
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// reqState is the requester's part of a QP. Engine-owned.
type reqState struct {
	psn         wire.PSN // PSN of the next packet
	opcode      int      // opcode of the last packet sent, -1 at a message boundary
	wqeIndex    uint32   // send queue index of the next WQE to send
	noackPkts   int      // packets since the last AckReq
	rdInflight  int      // READs and atomics sent and not completed (max_rd_atomic)
	needRetry   bool     // go back to comp.psn before sending more
	waitFence   bool     // a fenced WQE waits for READs and atomics to complete
	waitPSN     bool     // the window of unacknowledged PSNs is full
	needRdAtom  bool     // a READ or atomic waits for an initiator slot
	waitRNRTime bool     // an RNR NAK's timer runs: send nothing
	hiPSN       wire.PSN // one past the highest PSN sent: lower ones are retransmissions
	started     uint32   // one past the highest WQE index begun (a new PSN sent, a local op run): SQD drains to it

	// The RC congestion window, in packets sent and not acknowledged (cwnd.go).
	cwnd, ssthresh, cwndAcc int32
	recover                 wire.PSN // hiPSN at the last shrink: a NAK before it is the same loss
	recovering              bool
}

// runRequester sends packets of qp's WQEs, at most budget of them; it reports
// whether it stopped with more to send (budget spent or the batch full).
func (e *engine) runRequester(qp *QP, budget int) bool {
	req := &qp.req
	switch qp.state {
	case qpattr.RTS, qpattr.SQD:
	default:
		return false
	}
	if qp.errPending || req.waitRNRTime {
		return false
	}
	if req.needRetry {
		e.reqRetry(qp)
		req.needRetry = false
	}
	for sent := 0; sent < budget; sent++ {
		if qp.errPending {
			return false // a completion just made overran the CQ: nothing more goes out
		}
		w := e.reqNextWQE(qp)
		if w == nil {
			return false
		}
		if w.local {
			if !e.localOp(qp, w) {
				return false
			}
			continue
		}
		if !qp.typ.Connected() && w.length > uint32(qp.mtu) { // the port MTU for UD and GSI
			e.reqSkipLong(qp, w)
			continue
		}
		if w.ah != nil && w.rt == nil {
			rt, failed := e.ahRoute(w.ah, qp)
			if failed {
				e.reqFail(qp, w, cq.LocQPOpErr) // rxe: no route to the destination
				return false
			}
			if rt == nil {
				return false // the AH's resolution schedules qp again
			}
			w.rt = rt
		}
		if qp.typ == qpattr.RC && req.psn.Sub(qp.comp.psn) >= req.cwnd {
			req.waitPSN = true
			return false
		}
		if qp.typ == qpattr.RC && e.destFull(qp) {
			return false
		}
		// Room in the batch first: a READ or atomic takes its initiator slot only
		// as it is sent, so every WQE holding one has gone out (reqRetry relies on
		// this to give the slots back).
		if !e.txReserve() {
			return true
		}
		if w.mask&rdAtomicOps != 0 && !w.hasRdAtomic {
			if qp.attr.MaxRdAtomic == 0 {
				// No initiator depth was negotiated: the WR can never go.
				e.reqFail(qp, w, cq.LocQPOpErr)
				return false
			}
			if req.rdInflight >= int(qp.attr.MaxRdAtomic) {
				req.needRdAtom = true
				return false
			}
			req.rdInflight++
			w.hasRdAtomic = true
		}
		if !e.sendRequest(qp, w) {
			return false
		}
	}
	return true
}

// reqNextWQE returns the WQE to send next, or nil (rxe req_next_wqe).
func (e *engine) reqNextWQE(qp *QP) *sendWQE {
	req := &qp.req
	var w *sendWQE
	for {
		if req.wqeIndex == qp.sendQ.prod.Load() {
			return nil
		}
		if qp.state == qpattr.SQD && int32(req.wqeIndex-qp.drainEnd) >= 0 {
			return nil // SQD: finish what started, start nothing (IBTA 10.3.1)
		}
		w = &qp.sendSlots[req.wqeIndex&qp.sendQ.mask]
		if w.state < wqeDone {
			break
		}
		if w.state == wqeError {
			// It failed here: nothing after it goes on the wire (rxe moves the
			// QP to ERR at once). The completer reports it in order, and ERR
			// flushes the rest.
			return nil
		}
		// A local operation that ran before a go-back-N rewind (reqRetry leaves
		// it in place to complete in order): it runs once.
		req.wqeIndex++
	}
	// IBV_SEND_FENCE: wait until every earlier READ and atomic has completed
	// (ibv_post_send(3); rxe waits for every earlier WQE).
	if w.flags&SendFence != 0 && w.state == wqePosted && req.rdInflight > 0 {
		req.waitFence = true
		return nil
	}
	// Local invalidate fence (IBTA 10.6.5.1, mandatory in rxe): a LOCAL_INV waits
	// until every earlier WQE has completed, so no request still in flight uses
	// the key it ends.
	if w.opcode == WRLocalInv && w.state == wqePosted && req.wqeIndex != qp.sendQ.cons.Load() {
		req.waitFence = true
		return nil
	}
	return w
}

// localOp executes a LOCAL_INV, BIND_MW or REG_MR work request when the
// requester reaches it (rxe_do_local_ops): nothing goes on the wire, and the WQE
// completes in order once every earlier one has. A failure completes it with the
// status rxe gives (LOC_QP_OP_ERR, MW_BIND_ERR for a bind) and the QP goes to
// ERR; false then.
func (e *engine) localOp(qp *QP, w *sendWQE) bool {
	status := cq.Success
	switch w.opcode {
	case WRLocalInv:
		if e.d.mrs.Invalidate(w.invRKey, qp.pd.handle, mr.Local) != mr.FaultNone {
			status = cq.LocQPOpErr
		}
	case WRRegMR:
		if e.d.mrs.FastReg(w.mr.r, w.key, qp.pd.handle, w.access) != nil {
			status = cq.LocQPOpErr
		}
	case WRBindMW:
		b := mr.BindInfo{Addr: w.bind.Addr, Length: w.bind.Length, Access: w.bind.Access}
		if w.bind.MR != nil {
			b.Region = w.bind.MR.r
		}
		if e.d.mrs.Bind(w.mw.w, w.key, qp.pd.handle, qp.qpn, b) != nil {
			status = cq.MWBindErr
		}
	}
	w.mw, w.mr, w.bind.MR = nil, nil, nil // the slot keeps no object alive
	if status != cq.Success {
		e.reqFail(qp, w, status)
		return false
	}
	w.state = wqeDone
	w.status = cq.Success
	qp.req.wqeIndex++
	qp.req.started = qp.req.wqeIndex
	e.completer(qp, nil)
	return true
}

// nextOpcode picks the opcode of w's next packet from the last one sent (rxe
// next_opcode_rc / next_opcode_uc: FIRST, MIDDLE..., LAST, or ONLY).
func nextOpcode(qp *QP, w *sendWQE) wire.Opcode {
	fits := w.dma.resid <= uint32(qp.mtu)
	base := wire.Opcode(0x00)
	if qp.typ == qpattr.UC {
		base = 0x20
	}
	inMsg := qp.req.opcode >= 0
	switch w.opcode {
	case WRSend, WRSendWithImm, WRSendWithInv:
		if !qp.typ.Connected() {
			if w.opcode == WRSendWithImm {
				return wire.UDSendOnlyWithImmediate
			}
			return wire.UDSendOnly
		}
		last, only := wire.RCSendLast, wire.RCSendOnly
		switch w.opcode {
		case WRSendWithImm:
			last, only = wire.RCSendLastWithImmediate, wire.RCSendOnlyWithImmediate
		case WRSendWithInv:
			last, only = wire.RCSendLastWithInvalidate, wire.RCSendOnlyWithInvalidate
		}
		switch {
		case inMsg && fits:
			return base | last
		case inMsg:
			return base | wire.RCSendMiddle
		case fits:
			return base | only
		}
		return base | wire.RCSendFirst
	case WRRDMAWrite, WRRDMAWriteWithImm:
		last, only := wire.RCRDMAWriteLast, wire.RCRDMAWriteOnly
		if w.opcode == WRRDMAWriteWithImm {
			last, only = wire.RCRDMAWriteLastWithImmediate, wire.RCRDMAWriteOnlyWithImmediate
		}
		switch {
		case inMsg && fits:
			return base | last
		case inMsg:
			return base | wire.RCRDMAWriteMiddle
		case fits:
			return base | only
		}
		return base | wire.RCRDMAWriteFirst
	case WRRDMARead:
		return wire.RCRDMAReadRequest
	case WRAtomicCmpSwp:
		return wire.RCCompareSwap
	case WRFlush:
		return wire.RCFlush
	case WRAtomicWrite:
		return wire.RCAtomicWrite
	}
	return wire.RCFetchAdd
}

// sendRequest builds w's next packet into the batch and advances the requester
// (rxe init_req_packet, finish_packet, update_wqe_state, update_wqe_psn,
// update_state). false means w failed locally.
func (e *engine) sendRequest(qp *QP, w *sendWQE) bool {
	req := &qp.req
	op := nextOpcode(qp, w)
	in := &wire.Opcodes[op]
	m := in.Mask
	payload := 0
	if m&wire.MaskPayload != 0 {
		payload = int(min(w.dma.resid, uint32(qp.mtu)))
	}
	rt := qp.rt
	if !qp.typ.Connected() {
		rt = w.rt
	}
	n := ibLen(op, payload)
	buf := e.tx.next()
	ib := rt.begin(buf, n, e.tx.nextID())
	if !qp.typ.Connected() {
		wire.UDP(buf[rt.udpOff:rt.hdrLen]).SetSrcPort(qp.sport)
	}

	// BTH (IBTA 9.2): SE on the last packet of a SEND or WRITE with immediate;
	// on RC, AckReq on every last packet, at least every maxPktPerAck packets,
	// and on the packet that fills the window: the responder acknowledges
	// nothing else in a message (UC and UD send it clear, as rxe does).
	se := w.flags&SendSolicited != 0 && m&wire.MaskLast != 0 &&
		(m&wire.MaskSend != 0 || m&(wire.MaskWrite|wire.MaskImmDt) == wire.MaskWrite|wire.MaskImmDt)
	ackReq := false
	if qp.typ == qpattr.RC {
		ackReq = m&wire.MaskLast != 0 || req.noackPkts >= maxPktPerAck || req.psn.Sub(qp.comp.psn)+1 >= req.cwnd
		req.noackPkts++
		if ackReq {
			req.noackPkts = 0
		}
	}
	dqpn := qp.attr.DestQPN
	if m&wire.MaskDETH != 0 {
		dqpn = w.remoteQPN
	}
	bth := wire.BTHFields{Opcode: op, SE: se, PadCount: uint8(-payload & 3), PKey: wire.DefaultPKey,
		DestQPN: dqpn, AckReq: ackReq, PSN: req.psn}
	bth.Encode(ib)
	if m&wire.MaskRETH != 0 {
		f := wire.RETHFields{VA: w.iova, RKey: w.rkey, DMALen: w.dma.resid}
		if m&wire.MaskFlush != 0 {
			f.DMALen = w.flushLen
		}
		f.Encode(ib[in.Offset[wire.HdrRETH]:])
	}
	if m&wire.MaskFETH != 0 {
		f := wire.FETHFields{Selectivity: uint8(w.flushLevel), PlacementType: uint8(w.flushType)}
		f.Encode(ib[in.Offset[wire.HdrFETH]:])
	}
	if m&wire.MaskImmDt != 0 {
		wire.ImmDt(ib[in.Offset[wire.HdrImmDt]:]).SetImm(w.imm)
	}
	if m&wire.MaskIETH != 0 {
		wire.IETH(ib[in.Offset[wire.HdrIETH]:]).SetRKey(w.invRKey)
	}
	if m&wire.MaskAtomicETH != 0 {
		f := wire.AtomicETHFields{VA: w.iova, RKey: w.rkey, SwapAdd: w.compareAdd}
		if op == wire.RCCompareSwap {
			f.SwapAdd, f.Compare = w.swap, w.compareAdd
		}
		f.Encode(ib[in.Offset[wire.HdrAtomicETH]:])
	}
	if m&wire.MaskDETH != 0 {
		qkey := w.remoteQKey
		switch {
		case qp.qpn == gsiQPN:
			qkey = wire.QP1QKey
		case qkey&qpattr.ControlledQKey != 0:
			qkey = qp.attr.QKey // the high bit takes the QP's Q_Key
		}
		f := wire.DETHFields{QKey: qkey, SrcQPN: qp.qpn}
		f.Encode(ib[in.Offset[wire.HdrDETH]:])
	}
	pl := ib[in.HeaderLen : in.HeaderLen+payload]
	startResid := w.dma.resid
	end := rt.hdrLen + in.HeaderLen
	var reg uint32
	crc := rt.foldICRC(buf, end, payload, &reg)
	if payload > 0 {
		if f := e.copyOut(qp.pd.handle, w, pl, crc); f != mr.FaultNone {
			// The source region went away after the post: local protection error.
			e.reqFail(qp, w, cq.LocProtErr)
			return false
		}
	}
	if n := rt.seal(buf, n, end+payload, crc); rt.own {
		e.sendOwn(rt, dqpn, n)
	} else {
		e.tx.commit(n)
	}
	if qp.typ == qpattr.RC && req.psn.Sub(req.hiPSN) < 0 {
		e.d.cnt.inc(CntRetransmitted)
	} else {
		req.hiPSN = req.psn.Next()
		req.started = req.wqeIndex + 1
	}

	// update_wqe_psn: a READ takes one PSN per response packet.
	mtu := uint32(qp.mtu)
	npkts := wire.PSN(1)
	if startResid > 0 {
		npkts = wire.PSN((startResid + mtu - 1) / mtu)
	}
	if m&wire.MaskFirst != 0 {
		w.firstPSN = req.psn
		w.lastPSN = req.psn.Add(uint32(npkts) - 1)
	}
	if m&wire.MaskRead != 0 {
		req.psn = w.firstPSN.Add(uint32(npkts))
	} else {
		req.psn = req.psn.Next()
	}
	if m&wire.MaskWrite != 0 {
		w.iova += uint64(payload)
	}

	// update_wqe_state and update_state.
	if m&wire.MaskLast != 0 {
		req.opcode = -1
		req.wqeIndex++
		if qp.typ == qpattr.RC {
			w.state = wqePending
		} else {
			// UC and UD complete once the last packet is out.
			w.state = wqeDone
			w.status = cq.Success
			e.completer(qp, nil)
		}
	} else {
		req.opcode = int(op)
		w.state = wqeProcessing
	}
	if qp.typ == qpattr.RC && qp.timeout > 0 && !qp.retrans.armed() {
		e.timers.set(&qp.retrans, e.now+qp.timeout)
	}
	return true
}

// reqSkipLong completes a UD message longer than the port MTU without sending
// it: "the CI shall not emit any packets for this message. Further, the CI
// shall not generate an error due to this condition" (C10-93.1.1). As rxe, it
// takes its PSN and completes successfully.
func (e *engine) reqSkipLong(qp *QP, w *sendWQE) {
	req := &qp.req
	w.firstPSN, w.lastPSN = req.psn, req.psn
	req.psn = req.psn.Next()
	req.opcode = -1
	req.wqeIndex++
	w.state = wqeDone
	w.status = cq.Success
	e.completer(qp, nil)
}

// reqFail ends w with a local error: the completer reports it in order and moves
// the QP to ERR (UC/UD too; SQE is not modelled). The requester stays at w, so
// no later WQE is sent meanwhile (reqNextWQE); earlier ones may still be resent.
func (e *engine) reqFail(qp *QP, w *sendWQE, status cq.Status) {
	w.state = wqeError
	w.status = status
	qp.req.opcode = -1
	e.completer(qp, nil)
}

// reqRetry rewinds the requester to the oldest unacknowledged PSN for a
// go-back-N retransmission (rxe req_retry: retry from the PSN the NAK or
// timeout names).
func (e *engine) reqRetry(qp *QP) {
	req := &qp.req
	cons := qp.sendQ.cons.Load()
	prod := qp.sendQ.prod.Load()
	req.wqeIndex = cons
	req.psn = qp.comp.psn
	req.opcode = -1
	mtu := uint32(qp.mtu)
	first := true
	for i := cons; i != prod; i++ {
		w := &qp.sendSlots[i&qp.sendQ.mask]
		if w.state == wqePosted {
			break
		}
		if w.state == wqeDone || w.state == wqeError {
			continue
		}
		w.iova = w.remoteAddr
		if w.hasRdAtomic {
			// A READ or atomic from the rewind point on counts as unsent again and
			// takes an initiator slot anew when resent. Otherwise a fenced WQE
			// before it would wait for it (reqNextWQE counts rdInflight), while it
			// can only complete after that WQE: the QP would hang.
			w.hasRdAtomic = false
			req.rdInflight--
		}
		isRead := w.mask&wire.MaskRead != 0
		if !first || !isRead {
			w.dma = dmaCursor{resid: w.length}
		}
		if first {
			first = false
			if w.mask&(wire.MaskSend|wire.MaskWrite) != 0 {
				// Skip the packets of this message the responder has (rxe
				// retry_first_write_send).
				npsn := uint32(qp.comp.psn.Sub(w.firstPSN))
				for j := uint32(0); j < npsn; j++ {
					k := min(w.dma.resid, mtu)
					req.opcode = int(nextOpcode(qp, w))
					e.skipData(w, k)
					if w.mask&wire.MaskWrite != 0 {
						w.iova += uint64(mtu)
					}
				}
			}
			if isRead {
				done := (w.length - w.dma.resid) / mtu
				w.iova += uint64(done * mtu)
			}
		}
		w.state = wqePosted
	}
}

// reqSkipAcked moves the requester past w, the oldest WQE, which it was resending
// after a retry when the ACK of w's last packet came: what is left of w is
// acknowledged, and the requester goes on with the next WQE at the PSN after w.
func (e *engine) reqSkipAcked(qp *QP, w *sendWQE) {
	req := &qp.req
	w.state = wqePending
	req.opcode = -1
	if next := w.lastPSN.Next(); req.psn.Sub(next) < 0 {
		req.psn = next
	}
	// completeSend moves wqeIndex past w: it is the oldest.
}

// skipData advances w's data cursor by n bytes without copying.
func (e *engine) skipData(w *sendWQE, n uint32) {
	c := &w.dma
	if w.isInline {
		c.resid -= n
		return
	}
	for n > 0 && c.sge < len(w.sgl) {
		s := &w.sgl[c.sge]
		k := min(n, s.Length-c.offset)
		c.offset += k
		c.resid -= k
		n -= k
		if c.offset == s.Length {
			c.sge++
			c.offset = 0
		}
	}
}

// rnrTimerExpired lets the requester retry after an RNR NAK (rxe rnr_nak_timer).
func (e *engine) rnrTimerExpired(qp *QP) {
	qp.req.waitRNRTime = false
	e.schedule(qp)
}
