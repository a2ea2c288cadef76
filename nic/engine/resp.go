// The responder: executes incoming requests and answers them (rxe_resp.c).

package engine

import (
	"encoding/binary"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// respErr names what went wrong with a request (rxe's RESPST_ERR_* states).
type respErr uint8

const (
	respOK respErr = iota
	errMalformedWQE
	errUnsupportedOpcode
	errMisalignedAtomic
	errMissingFirst
	errMissingLastC
	errMissingLastD1E
	errTooManyRdAtomic
	errRNR
	errRKeyViolation
	errInvalidateRKey
	errLength     // a packet's length against the PMTU, or a DMA length (CHK_LENGTH)
	errRecvLength // a message longer than its receive WQE
)

// respRes is a responder resource (rxe struct resp_res): what an executed READ or
// atomic was, kept for duplicates (a duplicate READ is executed again; an
// atomic is answered from the saved result, never executed twice).
type respRes struct {
	kind        uint8 // 0 unused, resRead, resAtomic
	first, last wire.PSN
	va          uint64
	length      uint32
	rkey        uint32
	orig        uint64 // atomic: the value found
}

const (
	resRead uint8 = iota + 1
	resAtomic
	resAtomicWrite // answered again, never executed twice (oA19-15)
)

// outKind is the kind of a queued response.
type outKind uint8

const (
	outAck       outKind = iota // ACK, RNR NAK or NAK
	outAtomicAck                // atomic acknowledge
	outRead                     // RDMA READ response packets
)

// respOut is one response waiting for the transmit phase. Responses leave in
// PSN order, so ACKs queue behind READ responses.
type respOut struct {
	kind    outKind
	syn     wire.Syndrome
	psn     wire.PSN
	msn     uint32
	orig    uint64
	va      uint64
	rkey    uint32
	resid   uint32
	started bool // READ: later packets are MIDDLE or LAST
	counted bool // holds one of max_dest_rd_atomic
}

// respState is the responder's part of a QP. Engine-owned.
type respState struct {
	psn wire.PSN // expected PSN (ePSN)
	// ackPSN is the PSN after the last SEND or WRITE executed: what the ACK of a
	// duplicate covers. READs and atomics leave it, as rxe's ack_psn: their
	// responses are their acknowledgement, and a plain ACK at a READ's PSN
	// would complete it without its data at an rxe requester.
	ackPSN     wire.PSN
	msn        uint32 // message sequence number (24 bits)
	opcode     int    // last request opcode of the message in progress, -1 none
	sentPSNNak bool   // a PSN sequence or RNR NAK went out for the current gap
	dropMsg    bool   // UC: drop the rest of the message

	wqe    *recvWQE // receive WQE of the message in progress
	srqWQE recvWQE  // wqe's storage when it came from an SRQ
	dma    dmaCursor
	status cq.Status

	// RDMA WRITE in progress.
	va     uint64
	rkey   uint32
	resid  uint32
	length uint32

	res     []respRes
	resHead int

	out      []respOut // ring
	outHead  int
	outLen   int
	rdAtomic int  // queued READs and atomics (against max_dest_rd_atomic)
	abort    bool // a response failed: drop what is queued behind it

	// replayDebt is what duplicate READs were answered with and not yet paid
	// back (replayBudget), at replayAt.
	replayDebt int64
	replayAt   time.Duration
}

// replayWindow is how often, at most, a peer can have every READ the
// responder holds sent again: a duplicate READ costs a 28-byte RETH and can
// ask for MaxMsgSize bytes, so without a bound one request packet is an
// amplifier. A retry the requester starts at once (on a NAK or a gap in READ
// responses) may find the budget spent; the one after its local ACK timeout (a
// jiffy or more in rxe, 67 ms with perftest's default) always fits, because
// the debt never exceeds what is held now.
const replayWindow = 10 * time.Millisecond

// replayBudget charges n bytes of a duplicate READ's answer against a budget
// of the held READs' total length, paid back at that total per replayWindow;
// it reports false, charging nothing, when n does not fit.
func (r *respState) replayBudget(now time.Duration, n uint32) bool {
	var held int64
	for i := range r.res {
		if r.res[i].kind == resRead {
			held += int64(r.res[i].length)
		}
	}
	// Held READs shrink as small ones take the slots of large ones; a debt
	// paid back at the small ones' pace would outlast every retry.
	r.replayDebt = min(r.replayDebt, held)
	if el := now - r.replayAt; el > 0 {
		r.replayDebt -= int64(float64(held) * float64(el) / float64(replayWindow))
		r.replayDebt = max(r.replayDebt, 0)
	}
	r.replayAt = now
	if r.replayDebt+int64(n) > held {
		return false
	}
	r.replayDebt += int64(n)
	return true
}

func (r *respState) reset() {
	res, out := r.res, r.out
	clear(res)
	srq := r.srqWQE.sgl
	*r = respState{opcode: -1, res: res, out: out}
	r.srqWQE.sgl = srq[:0]
}

// setResources sizes the responder resources for n outstanding READs and
// atomics (max_dest_rd_atomic).
func (r *respState) setResources(n int) {
	n = max(n, 1)
	if len(r.res) != n {
		r.res = make([]respRes, n)
		r.resHead = 0
	}
	if want := 2*n + 16; len(r.out) < want {
		out := make([]respOut, want)
		for i := 0; i < r.outLen; i++ {
			out[i] = r.out[(r.outHead+i)%len(r.out)]
		}
		r.out, r.outHead = out, 0
	}
}

// push queues a response; false when the queue is full. Responses that hold no
// responder resource (ACKs, NAKs, answers to duplicates) may not take the last
// len(r.res) slots: those are kept for the new READs and atomics that
// max_dest_rd_atomic allows, so that a burst of duplicates never makes the
// responder refuse a valid request.
func (r *respState) push(o respOut) bool {
	if len(r.out) == 0 {
		r.setResources(1)
	}
	if r.outLen == len(r.out) || (!o.counted && r.outLen-r.rdAtomic >= len(r.out)-len(r.res)) {
		return false
	}
	r.out[(r.outHead+r.outLen)%len(r.out)] = o
	r.outLen++
	return true
}

// respond runs the responder on one request packet (rxe_responder's state machine
// for one packet: check PSN, opcode sequence, validity, resources, length, R_Key,
// then execute, complete and acknowledge).
func (e *engine) respond(qp *QP, p *wire.Packet) {
	r := &qp.resp
	mask := wire.Opcodes[p.Opcode].Mask
	psn := p.BTH.PSN()

	// CHK_PSN (rxe check_psn; UC resynchronises on FIRST/ONLY).
	switch qp.typ {
	case qpattr.RC:
		diff := psn.Sub(r.psn)
		if diff > 0 {
			if r.sentPSNNak {
				return
			}
			r.sentPSNNak = true
			e.d.cnt.inc(CntOutOfSeqReq)
			e.respAck(qp, wire.NAKSyndrome(wire.NAKPSNSequenceError), r.psn)
			return
		}
		if diff < 0 {
			e.d.cnt.inc(CntDupReq)
			e.duplicate(qp, p, mask)
			return
		}
		r.sentPSNNak = false
	case qpattr.UC:
		if mask&wire.MaskFirst != 0 {
			if r.opcode >= 0 || r.dropMsg || psn != r.psn {
				// A new message: whatever was under way is lost (class D1).
				e.abortMessage(qp)
			}
			r.dropMsg = false
			r.psn = psn
		} else if r.dropMsg || psn != r.psn {
			e.abortMessage(qp)
			r.dropMsg = true
			e.d.cnt.inc(CntRcvdDropped)
			return
		}
	}

	err, wmem := e.checkRequest(qp, p, mask)
	if err == respOK {
		err = e.execute(qp, p, mask, wmem)
	}
	if err != respOK {
		e.respError(qp, p, mask, err)
	}
}

// checkRequest is CHK_OP_SEQ through CHK_RKEY. For a WRITE packet it also
// returns the memory the R_Key check found at its VA (mr.Table.Lookup), which
// execute writes the payload into rather than look the key up again: that
// packet's only, never kept past it.
func (e *engine) checkRequest(qp *QP, p *wire.Packet, mask wire.OpMask) (respErr, []byte) {
	r := &qp.resp
	var wmem []byte
	// CHK_OP_SEQ (rxe check_op_seq): a message's packets come FIRST, MIDDLE..., LAST.
	if qp.typ.Connected() && r.opcode >= 0 {
		prev := wire.Opcodes[r.opcode].Mask
		ok := mask&(wire.MaskMiddle|wire.MaskLast) != 0 && mask&wire.MaskFirst == 0 &&
			prev&(wire.MaskSend|wire.MaskWrite)&mask != 0
		if !ok {
			if qp.typ == qpattr.RC {
				return errMissingLastC, nil
			}
			return errMissingLastD1E, nil
		}
	} else if qp.typ.Connected() && mask&wire.MaskFirst == 0 && mask&(wire.MaskSend|wire.MaskWrite) != 0 {
		if qp.typ == qpattr.RC {
			return errMissingFirst, nil
		}
		r.dropMsg = true
		return errMissingLastD1E, nil
	}

	// CHK_OP_VALID: the QP's access flags allow the operation (rxe check_op_valid).
	acc := qp.attr.AccessFlags
	switch qp.typ {
	case qpattr.RC:
		if (mask&wire.MaskRead != 0 && acc&qpattr.AccessRemoteRead == 0) ||
			(mask&(wire.MaskWrite|wire.MaskAtomicWrite) != 0 && acc&qpattr.AccessRemoteWrite == 0) ||
			(mask&wire.MaskAtomic != 0 && acc&qpattr.AccessRemoteAtomic == 0) {
			return errUnsupportedOpcode, nil
		}
		if mask&wire.MaskFlush != 0 {
			// rxe check_qp_attr_access: each placement type needs its QP right;
			// persistence is never granted (no such memory). A reserved type or
			// selectivity is no request this responder knows either.
			plt, sel := FlushType(p.FETH.PlacementType()), FlushLevel(p.FETH.Selectivity())
			if plt == 0 || plt&^FlushGlobal != 0 || acc&qpattr.AccessFlushGlobal == 0 || sel > FlushMR {
				return errUnsupportedOpcode, nil
			}
		}
	case qpattr.UC:
		if mask&wire.MaskWrite != 0 && acc&qpattr.AccessRemoteWrite == 0 {
			return errRKeyViolation, nil
		}
	}

	// CHK_RESOURCE.
	if mask&rdAtomicOps != 0 {
		// The requester must not exceed the negotiated depth (rxe
		// RESPST_ERR_TOO_MANY_RDMA_ATM_REQ).
		// Only new requests count: a duplicate is answered from the resource its
		// first execution took. push keeps queue room for every new one allowed,
		// so a queue full of ACKs and duplicate answers is no reason to refuse.
		lim := int(qp.attr.MaxDestRdAtomic)
		if lim == 0 || r.rdAtomic >= lim || r.rdAtomic >= len(r.res) {
			return errTooManyRdAtomic, nil
		}
	}
	if mask&wire.MaskRecvWQE != 0 && r.wqe == nil {
		if !e.takeRecvWQE(qp) {
			return errRNR, nil
		}
	}

	// CHK_LENGTH: packet sizes against the path MTU (C9-92), the DMA length (C9-94).
	mtu := qp.mtu
	n := len(p.Payload)
	switch {
	case mask&wire.MaskOnly == wire.MaskOnly:
		if n > mtu {
			return errLength, nil
		}
	case mask&(wire.MaskFirst|wire.MaskMiddle) != 0:
		if n != mtu {
			return errLength, nil
		}
	case mask&wire.MaskLast != 0:
		if n == 0 || n > mtu {
			return errLength, nil
		}
	}
	// rxe allows 2^31 here (check_length); no message of this device is longer
	// than its max_msg_sz (8 MiB), so a longer DMA length is an invalid request.
	if mask&(wire.MaskRead|wire.MaskWrite) != 0 && p.RETH != nil && p.RETH.DMALen() > MaxMsgSize {
		return errLength, nil
	}
	if mask&wire.MaskAtomicWrite != 0 && (p.RETH.DMALen() != mr.AtomicLen || n != mr.AtomicLen) {
		return errLength, nil // IBTA A19: eight bytes, no more, no less (rxe does not check)
	}

	// CHK_RKEY.
	switch {
	case mask&(wire.MaskRead|wire.MaskWrite) != 0:
		if p.RETH != nil {
			r.va, r.rkey = p.RETH.VA(), p.RETH.RKey()
			r.resid, r.length = p.RETH.DMALen(), p.RETH.DMALen()
		}
		if p.RETH != nil && r.resid == 0 {
			// C9-88: a zero-length transfer needs no valid VA or R_Key.
			if n != 0 {
				return errLength, nil
			}
			return respOK, nil
		}
		need := mr.RemoteWrite
		if mask&wire.MaskRead != 0 {
			need = mr.RemoteRead
		}
		m, f := e.d.mrs.Lookup(r.rkey, qp.pd.handle, r.va, int(r.resid), need, qp.qpn)
		if f != mr.FaultNone {
			return errRKeyViolation, nil
		}
		if mask&wire.MaskWrite != 0 {
			// rxe check_rkey: a packet before the DMA's last PMTU carries a
			// PMTU, the one that reaches it carries the rest. A LAST or ONLY
			// ends the DMA the RETH gave: one that would leave some of it
			// (rxe takes it) completes a message shorter than the RETH said.
			if r.resid > uint32(mtu) && mask&wire.MaskLast == 0 {
				if n != mtu || p.BTH.PadCount() != 0 {
					return errLength, nil
				}
			} else if uint32(n) != r.resid || p.BTH.PadCount() != int(-r.resid&3) {
				return errLength, nil // the pad too, as rxe: payload and pad fill whole words
			}
			wmem = m
		}
	case mask&wire.MaskAtomic != 0:
		a := p.AtomicETH
		r.va, r.rkey, r.resid = a.VA(), a.RKey(), 8
		if _, f := e.d.mrs.LookupAtomic(r.rkey, qp.pd.handle, qp.qpn, r.va); f != mr.FaultNone {
			return atomicFault(f), nil
		}
	case mask&wire.MaskAtomicWrite != 0:
		r.va, r.rkey, r.resid = p.RETH.VA(), p.RETH.RKey(), mr.AtomicLen
		if _, f := e.d.mrs.LookupAtomicWrite(r.rkey, qp.pd.handle, qp.qpn, r.va); f != mr.FaultNone {
			return atomicFault(f), nil
		}
	case mask&wire.MaskFlush != 0:
		// rxe check_rkey: the key, PD and FLUSH right always; the range only for
		// FlushRange (FlushMR flushes the whole region whatever the RETH says).
		r.va, r.rkey, r.resid = p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		n := int(r.resid)
		if FlushLevel(p.FETH.Selectivity()) == FlushMR {
			n = 0
		}
		if f := e.d.mrs.Check(r.rkey, qp.pd.handle, r.va, n, mr.FlushGlobal, qp.qpn); f != mr.FaultNone {
			return errRKeyViolation, nil
		}
	}
	return respOK, wmem
}

// atomicFault is the responder error for a failed atomic lookup: a misaligned
// word is an invalid request, the rest an R_Key violation (rxe).
func atomicFault(f mr.Fault) respErr {
	if f == mr.FaultAlign {
		return errMisalignedAtomic
	}
	return errRKeyViolation
}

// takeRecvWQE makes the head of the receive queue (or a WQE from the SRQ) the
// message's receive WQE; false when there is none (RNR).
func (e *engine) takeRecvWQE(qp *QP) bool {
	if !e.takeRecv(qp) && !(e.lookAgain() && e.takeRecv(qp)) {
		return false
	}
	qp.resp.dma = dmaCursor{resid: qp.resp.wqe.length}
	return true
}

func (e *engine) takeRecv(qp *QP) bool {
	r := &qp.resp
	if qp.srq != nil {
		if !e.srqTake(qp, &r.srqWQE) {
			return false
		}
		r.wqe = &r.srqWQE
		return true
	}
	cons := qp.recvQ.cons.Load()
	if cons == qp.recvQ.prod.Load() {
		return false
	}
	r.wqe = &qp.recvSlots[cons&qp.recvQ.mask]
	return true
}

// lookAgain runs the pollers once more, at most once for the frames taken
// since they last ran: an attached process's receive that reached its ring
// after the pass's poll but before the frame came is then on the QP's queue,
// as a receive a device's doorbell made visible is (a UD message would
// otherwise be dropped, an RC one RNR NAKed). It reports whether they ran.
func (e *engine) lookAgain() bool {
	if len(e.pollers) == 0 || e.lookedAgain {
		return false
	}
	e.poll()
	return true
}

// abortMessage forgets a message in progress; its receive WQE is kept for the
// next message, its placement undone (rxe do_class_d1e_error).
func (e *engine) abortMessage(qp *QP) {
	r := &qp.resp
	if r.wqe != nil {
		r.dma = dmaCursor{resid: r.wqe.length}
	}
	r.opcode = -1
}

// execute is rxe's EXECUTE, COMPLETE and ACKNOWLEDGE for a new request; wmem
// is what checkRequest returned.
func (e *engine) execute(qp *QP, p *wire.Packet, mask wire.OpMask, wmem []byte) respErr {
	r := &qp.resp
	pd := qp.pd.handle
	psn := p.BTH.PSN()
	switch {
	case mask&wire.MaskSend != 0:
		if !qp.typ.Connected() {
			// UD: the GRH (or the IPv4 header in its last 20 bytes) comes first,
			// as libibverbs expects and rxe_resp.c execute() writes it.
			var grh [wire.IPv6Len]byte
			if p.IPv6 != nil {
				copy(grh[:], p.IPv6)
			} else {
				copy(grh[20:], p.IPv4)
			}
			if err := e.dataIn(qp, grh[:]); err != respOK {
				return err
			}
		}
		if err := e.dataIn(qp, p.Payload); err != respOK {
			return err
		}
	case mask&wire.MaskWrite != 0:
		if n := len(p.Payload); n > 0 {
			// A page list's piece may end before the payload does: Copy then
			// goes page by page.
			if len(wmem) >= n {
				copy(wmem, p.Payload)
			} else if e.d.mrs.Copy(r.rkey, pd, r.va, p.Payload, mr.RemoteWrite, qp.qpn, true) != mr.FaultNone {
				return errRKeyViolation
			}
			r.va += uint64(n)
			r.resid -= uint32(n)
		}
		if mask&wire.MaskLast != 0 {
			e.wrote = true // a poller may be spinning on this memory (write_lat)
		}
	case mask&wire.MaskRead != 0:
		return e.readRequest(qp, p)
	case mask&wire.MaskAtomic != 0:
		return e.atomicRequest(qp, p)
	case mask&(wire.MaskFlush|wire.MaskAtomicWrite) != 0:
		return e.flushOrAtomicWrite(qp, p, mask)
	}
	if p.IETH != nil {
		// rxe invalidate_rkey; a type 2 window only from the QP it is bound to.
		if e.d.mrs.Invalidate(p.IETH.RKey(), pd, qp.qpn) != mr.FaultNone {
			return errInvalidateRKey
		}
	}
	if mask&wire.MaskLast != 0 {
		r.msn = (r.msn + 1) & wire.PSNMask
		r.opcode = -1
	} else {
		r.opcode = int(p.Opcode)
	}
	r.psn = psn.Next()
	r.ackPSN = r.psn
	if mask&wire.MaskComplete != 0 {
		r.status = cq.Success
		e.completeRecv(qp, p)
		if qp.errPending {
			// The receive CQ overran (class G): no ACK for a message whose
			// completion was lost (rxe RESPST_ERR_CQ_OVERFLOW).
			return respOK
		}
	}
	if qp.typ == qpattr.RC && p.BTH.AckReq() {
		e.respAck(qp, wire.ACKSyndrome(wire.CreditsUnlimited), psn)
	}
	return respOK
}

// dataIn places b into the receive WQE (rxe send_data_in).
func (e *engine) dataIn(qp *QP, b []byte) respErr {
	r := &qp.resp
	fits, f := e.copyIn(qp.pd.handle, r.wqe.sgl, &r.dma, b)
	if !fits {
		return errRecvLength
	}
	if f != mr.FaultNone {
		return errMalformedWQE
	}
	return respOK
}

// readRequest records a new RDMA READ and queues its response (C9-148: the MSN
// counts it now).
func (e *engine) readRequest(qp *QP, p *wire.Packet) respErr {
	r := &qp.resp
	psn := p.BTH.PSN()
	length := r.resid
	pkts := max((length+uint32(qp.mtu)-1)/uint32(qp.mtu), 1)
	res := r.nextRes()
	*res = respRes{kind: resRead, first: psn, last: psn.Add(pkts - 1), va: r.va, length: length, rkey: r.rkey}
	r.msn = (r.msn + 1) & wire.PSNMask
	r.psn = psn.Add(pkts)
	r.opcode = -1
	r.rdAtomic++
	r.push(respOut{kind: outRead, psn: psn, msn: r.msn, va: r.va, rkey: r.rkey, resid: length, counted: true})
	e.schedule(qp)
	return respOK
}

// atomicRequest executes an atomic once and queues its acknowledge.
func (e *engine) atomicRequest(qp *QP, p *wire.Packet) respErr {
	r := &qp.resp
	a := p.AtomicETH
	b, f := e.d.mrs.LookupAtomic(r.rkey, qp.pd.handle, qp.qpn, r.va)
	if f != mr.FaultNone {
		return atomicFault(f)
	}
	var orig uint64
	if p.Opcode == wire.RCCompareSwap {
		orig = mr.CompareSwap(b, a.Compare(), a.SwapAdd())
	} else {
		orig = mr.FetchAdd(b, a.SwapAdd())
	}
	psn := p.BTH.PSN()
	res := r.nextRes()
	*res = respRes{kind: resAtomic, first: psn, last: psn, va: r.va, rkey: r.rkey, orig: orig}
	r.msn = (r.msn + 1) & wire.PSNMask
	r.psn = psn.Next()
	r.opcode = -1
	r.rdAtomic++
	r.push(respOut{kind: outAtomicAck, syn: wire.ACKSyndrome(wire.CreditsUnlimited), psn: psn, msn: r.msn,
		orig: orig, counted: true})
	e.schedule(qp)
	return respOK
}

// flushOrAtomicWrite executes a FLUSH or an ATOMIC WRITE (IBTA A19; rxe
// process_flush, atomic_write_reply) and queues its answer, an RDMA READ response
// of length zero. A FLUSH to global visibility has nothing to wait for here: the
// engine's stores are done when it handles the next packet, and the requester's
// completion orders them before what the application reads after it. An ATOMIC
// WRITE stores its eight bytes with one atomic store, after every earlier write.
func (e *engine) flushOrAtomicWrite(qp *QP, p *wire.Packet, mask wire.OpMask) respErr {
	r := &qp.resp
	psn := p.BTH.PSN()
	counted := false
	if mask&wire.MaskAtomicWrite != 0 {
		b, f := e.d.mrs.LookupAtomicWrite(r.rkey, qp.pd.handle, qp.qpn, r.va)
		if f != mr.FaultNone {
			return atomicFault(f)
		}
		mr.Store(b, binary.NativeEndian.Uint64(p.Payload))
		counted = true
		r.rdAtomic++
		res := r.nextRes()
		*res = respRes{kind: resAtomicWrite, first: psn, last: psn, va: r.va, rkey: r.rkey}
	}
	// A FLUSH keeps no resource: it takes no max_dest_rd_atomic slot at the
	// requester (rdAtomicOps), so one here would evict a READ's or an atomic's
	// that a retry still needs. Its duplicate is answered without one (duplicate).
	r.msn = (r.msn + 1) & wire.PSNMask
	r.psn = psn.Next()
	r.opcode = -1
	if !r.push(respOut{kind: outRead, psn: psn, msn: r.msn, counted: counted}) {
		if counted {
			r.rdAtomic--
		}
		e.d.cnt.inc(CntTxDropped) // the requester's retry is answered again (duplicate)
		return respOK
	}
	e.schedule(qp)
	return respOK
}

// dropOut empties the response queue.
func (r *respState) dropOut() {
	for r.outLen > 0 {
		r.out[r.outHead] = respOut{}
		r.outHead = (r.outHead + 1) % len(r.out)
		r.outLen--
	}
	r.rdAtomic = 0
}

// nextRes returns the oldest resource slot for reuse (rxe_prepare_res).
func (r *respState) nextRes() *respRes {
	if len(r.res) == 0 {
		r.setResources(1)
	}
	res := &r.res[r.resHead]
	r.resHead = (r.resHead + 1) % len(r.res)
	return res
}

// findRes finds the resource whose PSN range holds psn (rxe find_resource).
func (r *respState) findRes(psn wire.PSN) *respRes {
	for i := range r.res {
		res := &r.res[i]
		if res.kind != 0 && psn.Sub(res.first) >= 0 && psn.Sub(res.last) <= 0 {
			return res
		}
	}
	return nil
}

// duplicate answers a request whose PSN was already executed (C9-105,
// rxe duplicate_request).
func (e *engine) duplicate(qp *QP, p *wire.Packet, mask wire.OpMask) {
	r := &qp.resp
	psn := p.BTH.PSN()
	switch {
	case mask&(wire.MaskSend|wire.MaskWrite) != 0:
		// C9-105: acknowledge again, with the PSN of the last executed request.
		e.respAck(qp, wire.ACKSyndrome(wire.CreditsUnlimited), r.ackPSN.Add(wire.PSNMask))
	case mask&wire.MaskRead != 0:
		res := r.findRes(psn)
		if res == nil || res.kind != resRead {
			return // class D: not ours to answer
		}
		va, n := p.RETH.VA(), p.RETH.DMALen()
		// The retried request must be the original or its tail (rxe
		// duplicate_request), compared as an offset: va+n may wrap.
		if p.RETH.RKey() != res.rkey || va < res.va || n > res.length || va-res.va > uint64(res.length-n) {
			return
		}
		if !r.replayBudget(e.now, n) {
			e.d.cnt.inc(CntDupReadLimited)
			return
		}
		if !r.push(respOut{kind: outRead, psn: psn, msn: r.msn, va: va, rkey: res.rkey, resid: n,
			started: psn != res.first}) {
			e.d.cnt.inc(CntTxDropped)
			return
		}
		e.schedule(qp)
	case mask&wire.MaskAtomic != 0:
		res := r.findRes(psn)
		if res == nil || res.kind != resAtomic || res.first != psn {
			return
		}
		if !r.push(respOut{kind: outAtomicAck, syn: wire.ACKSyndrome(wire.CreditsUnlimited), psn: psn,
			msn: r.msn, orig: res.orig}) {
			e.d.cnt.inc(CntTxDropped)
			return
		}
		e.schedule(qp)
	case mask&(wire.MaskFlush|wire.MaskAtomicWrite) != 0:
		// Answered again, never executed twice (oA19-14, oA19-15). An ATOMIC
		// WRITE's answer comes from its resource; a FLUSH's is the same empty
		// response whatever it covered: the stores it orders were done before.
		if mask&wire.MaskAtomicWrite != 0 {
			if res := r.findRes(psn); res == nil || res.kind != resAtomicWrite || res.first != psn {
				return
			}
		}
		if !r.push(respOut{kind: outRead, psn: psn, msn: r.msn}) {
			e.d.cnt.inc(CntTxDropped)
			return
		}
		e.schedule(qp)
	}
}

// respAck queues an ACK or NAK for psn. Consecutive positive ACKs coalesce: only
// the newest leaves (an ACK acknowledges every earlier PSN).
func (e *engine) respAck(qp *QP, syn wire.Syndrome, psn wire.PSN) {
	r := &qp.resp
	o := respOut{kind: outAck, syn: syn, psn: psn, msn: r.msn}
	if syn.Kind() == wire.KindACK && r.outLen > 0 {
		tail := &r.out[(r.outHead+r.outLen-1)%len(r.out)]
		if tail.kind == outAck && tail.syn.Kind() == wire.KindACK {
			*tail = o
			e.d.cnt.inc(CntAckDeferred)
			return
		}
	}
	rnr := syn.Kind() == wire.KindRNRNAK
	if !r.push(o) {
		if rnr {
			e.d.cnt.inc(CntSndRNRDropped)
		} else {
			e.d.cnt.inc(CntTxDropped)
		}
		return
	}
	if rnr {
		e.d.cnt.inc(CntSndRNR) // counted when it goes out, as rxe's send_rnr_err
	}
	e.schedule(qp)
}

// respError handles a failed check or execution by error class (rxe's
// RESPST_ERR_* handling).
func (e *engine) respError(qp *QP, p *wire.Packet, mask wire.OpMask, err respErr) {
	r := &qp.resp
	psn := p.BTH.PSN()
	rc := qp.typ == qpattr.RC
	switch err {
	case errRNR:
		if rc {
			// Class B: RNR NAK, the requester retries after the timer. The
			// requests it sent after this one are dropped until it resends this
			// PSN, not NAKed for sequence: one NAK outstanding (hfi1's
			// r_nak_state), else the requester spends retry_cnt on an RNR.
			e.respAck(qp, wire.RNRNAKSyndrome(wire.RNRTimer(qp.attr.MinRNRTimer)), psn)
			r.sentPSNNak = true
		} else {
			r.dropMsg = true
			e.d.cnt.inc(CntRcvdDropped)
		}
		return
	case errMissingLastD1E:
		e.classE(qp, p, cq.RemInvReqErr) // rxe do_class_d1e_error with an SRQ
		e.abortMessage(qp)
		e.d.cnt.inc(CntRcvdDropped)
		return
	case errTooManyRdAtomic, errMissingFirst, errMissingLastC, errUnsupportedOpcode, errMisalignedAtomic:
		// Class C: NAK invalid request, then ERR.
		e.classC(qp, p, wire.NAKInvalidRequest, cq.RemInvReqErr, EventQPReqErr)
	case errRKeyViolation:
		if rc {
			e.classC(qp, p, wire.NAKRemoteAccessError, cq.RemAccessErr, EventQPAccessErr)
			return
		}
		e.classE(qp, p, cq.RemAccessErr)
		e.abortMessage(qp)
		r.dropMsg = true
		e.d.cnt.inc(CntRcvdDropped)
	case errLength, errRecvLength:
		// A malformed request is the remote's invalid request, at both ends
		// (rxe RESPST_ERR_LENGTH); a message longer than the receive buffer
		// is, at this end, a local length error, as hardware reports it.
		st := cq.RemInvReqErr
		if err == errRecvLength {
			st = cq.LocLenErr
		}
		if rc {
			e.classC(qp, p, wire.NAKInvalidRequest, st, EventQPReqErr)
			return
		}
		e.classE(qp, p, st)
		e.abortMessage(qp)
		r.dropMsg = qp.typ == qpattr.UC
		e.d.cnt.inc(CntRcvdDropped)
	case errInvalidateRKey:
		// Class J: the receive completes in error and the QP fails.
		e.classC(qp, p, wire.NAKInvalidRequest, cq.RemInvReqErr, EventQPReqErr)
	case errMalformedWQE:
		// Class A: remote operational error.
		e.classC(qp, p, wire.NAKRemoteOperationError, cq.LocProtErr, EventQPFatal)
	}
}

// classE completes the receive WQE a UC or UD message took from an SRQ with
// status; the QP stays as it is (class E: rxe's RESPST_ERR_LENGTH and
// RKEY_VIOLATION with an SRQ). Without an SRQ the WQE stays for the next message
// (class D); one taken from the shared queue would wait on this QP for a SEND
// that may never come.
func (e *engine) classE(qp *QP, p *wire.Packet, status cq.Status) {
	if qp.srq == nil || qp.resp.wqe == nil {
		return
	}
	qp.resp.status = status
	e.completeRecv(qp, p)
}

// classC completes the receive in progress with status, NAKs (RC) and moves the
// QP to ERR (rxe do_class_ac_error, then COMPLETE, ACKNOWLEDGE, ERROR).
func (e *engine) classC(qp *QP, p *wire.Packet, code wire.NAKCode, status cq.Status, ev EventType) {
	r := &qp.resp
	if r.wqe != nil {
		r.status = status
		e.completeRecv(qp, p)
	}
	if qp.typ == qpattr.RC {
		e.respAck(qp, wire.NAKSyndrome(code), p.BTH.PSN())
	}
	qp.errPending = true
	qp.errEvent = ev
}

// completeRecv writes the receive WQE's completion and releases it (rxe
// do_complete). p is nil for a flush.
func (e *engine) completeRecv(qp *QP, p *wire.Packet) {
	r := &qp.resp
	w := r.wqe
	if w == nil {
		return
	}
	e.wc = cq.WC{WRID: w.wrid, Status: r.status, QPN: qp.qpn, Opcode: cq.Recv}
	solicited := true
	if r.status == cq.Success && p != nil {
		e.d.cnt.inc(CntRDMARecvs)
		mask := wire.Opcodes[p.Opcode].Mask
		wc := &e.wc
		if mask&wire.MaskWrite != 0 {
			wc.Opcode = cq.RecvRDMAWithImm
			wc.ByteLen = r.length
		} else {
			wc.ByteLen = w.length - r.dma.resid
		}
		if p.ImmDt != nil {
			wc.Flags |= cq.WithImm
			wc.ImmData = p.ImmDt.Imm()
		}
		if p.IETH != nil {
			wc.Flags |= cq.WithInv
			wc.InvalidatedRKey = p.IETH.RKey()
		}
		if p.DETH != nil {
			wc.Flags |= cq.GRH
			wc.SrcQP = p.DETH.SrcQPN()
		}
		solicited = p.BTH.SE()
	}
	r.wqe = nil
	if qp.srq == nil {
		qp.recvQ.cons.Add(1)
	}
	e.pushWC(qp, qp.rcq, solicited)
}

// respFlush sends queued responses in order, one packet at a time, while the
// transmit batch has room; it reports whether responses remain that only room
// can let out. It sends at most the engine's budget of packets per turn, as the
// requester does: a long READ response must not hold the link while other QPs'
// ACKs wait past their peers' local ACK timeouts. Past the budget it puts the QP
// back in line and reports false, so the QP's own requester still gets its turn.
func (e *engine) respFlush(qp *QP) bool {
	r := &qp.resp
	for sent := 0; r.outLen > 0; sent++ {
		if qp.rt == nil || !qpattr.ProcessesIncoming(qp.state) {
			r.dropOut() // no path (reset) or ERR: nothing more leaves
			return false
		}
		if sent >= e.budget {
			e.schedule(qp)
			return false
		}
		if !e.txReserve() {
			return true
		}
		o := &r.out[r.outHead]
		done := true
		switch o.kind {
		case outAck:
			e.sendAck(qp, wire.RCAcknowledge, o.syn, o.psn, o.msn, 0, nil)
		case outAtomicAck:
			e.sendAck(qp, wire.RCAtomicAcknowledge, o.syn, o.psn, o.msn, o.orig, nil)
		case outRead:
			done = e.sendReadResponse(qp, o)
		}
		if !done {
			continue
		}
		if o.counted {
			r.rdAtomic--
		}
		*o = respOut{}
		r.outHead = (r.outHead + 1) % len(r.out)
		r.outLen--
		if r.abort {
			r.abort = false
			r.dropOut()
		}
	}
	e.checkError(qp)
	return false
}

// sendReadResponse sends the next packet of a READ response; true when it was the
// last (rxe read_reply).
func (e *engine) sendReadResponse(qp *QP, o *respOut) bool {
	mtu := uint32(qp.mtu)
	var op wire.Opcode
	switch {
	case !o.started && o.resid <= mtu:
		op = wire.RCRDMAReadResponseOnly
	case !o.started:
		op = wire.RCRDMAReadResponseFirst
	case o.resid > mtu:
		op = wire.RCRDMAReadResponseMiddle
	default:
		op = wire.RCRDMAReadResponseLast
	}
	n := min(o.resid, mtu)
	data, f := e.d.mrs.Lookup(o.rkey, qp.pd.handle, o.va, int(n), mr.RemoteRead, qp.qpn)
	if f == mr.FaultNone && len(data) < int(n) {
		// A page list: gather the packet's pages.
		data = e.scratch[:n]
		f = e.d.mrs.Copy(o.rkey, qp.pd.handle, o.va, data, mr.RemoteRead, qp.qpn, false)
	}
	if f != mr.FaultNone {
		// The region changed under the READ: class C remote access error.
		e.sendAck(qp, wire.RCAcknowledge, wire.NAKSyndrome(wire.NAKRemoteAccessError), o.psn, o.msn, 0, nil)
		qp.errPending = true
		qp.errEvent = EventQPAccessErr
		qp.resp.abort = true
		return true
	}
	e.sendAck(qp, op, wire.ACKSyndrome(wire.CreditsUnlimited), o.psn, o.msn, 0, data)
	o.started = true
	o.psn = o.psn.Next()
	o.va += uint64(n)
	o.resid -= n
	return o.resid == 0
}

// sendAck builds a response packet: ACK/NAK, atomic ACK or READ response
// (rxe prepare_ack_packet). The caller reserved room in the batch.
func (e *engine) sendAck(qp *QP, op wire.Opcode, syn wire.Syndrome, psn wire.PSN, msn uint32, orig uint64, data []byte) {
	rt := qp.rt
	in := &wire.Opcodes[op]
	n := ibLen(op, len(data))
	buf := e.tx.next()
	ib := rt.begin(buf, n, e.tx.nextID())
	bth := wire.BTHFields{Opcode: op, PadCount: uint8(-len(data) & 3), PKey: wire.DefaultPKey,
		DestQPN: qp.attr.DestQPN, PSN: psn}
	bth.Encode(ib)
	if in.Mask&wire.MaskAETH != 0 {
		a := wire.AETHFields{Syndrome: syn, MSN: msn}
		a.Encode(ib[in.Offset[wire.HdrAETH]:])
	}
	if in.Mask&wire.MaskAtomicAckETH != 0 {
		wire.AtomicAckETH(ib[in.Offset[wire.HdrAtomicAckETH]:]).SetOrigRemData(orig)
	}
	end := rt.hdrLen + in.HeaderLen
	var reg uint32
	crc := rt.foldICRC(buf, end, len(data), &reg)
	copyFold(ib[in.HeaderLen:], data, crc)
	if n := rt.seal(buf, n, end+len(data), crc); rt.loop {
		e.loopBack(qp.attr.DestQPN, n)
	} else {
		e.tx.commit(n)
	}
}
