// The completer: turns acknowledgements and responses into send completions,
// drives retries, and fails the QP on errors (rxe_comp.c).

package engine

import (
	"encoding/binary"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// compState is the completer's part of a QP. Engine-owned.
type compState struct {
	psn          wire.PSN // PSN of the next response expected
	opcode       int      // last response opcode of a READ in progress, -1 none
	retryCnt     uint8    // transport retries left (retry_cnt)
	rnrRetry     uint8    // RNR retries left (rnr_retry; 7 = infinite)
	startedRetry bool     // a go-back-N retry is under way
	timeoutRetry bool     // this run was started by the retransmission timer
}

// compStep is a state of the completer (rxe enum comp_state).
type compStep uint8

const (
	compGetWQE compStep = iota
	compCheckPSN
	compCheckAck
	compRead
	compAtomic
	compWriteSend
	compCompAck
	compCompWQE
	compUpdateComp
	compErrorRetry
	compRNRRetry
	compError
	compDone
	compExit
)

// noEvent: a QP error that raises no asynchronous event (the WC reports it).
const noEvent EventType = 0xFF

// completer runs the completer on one response packet, or with p nil to complete
// WQEs that need no acknowledgement and to manage the retransmission timer.
func (e *engine) completer(qp *QP, p *wire.Packet) { e.completerRun(qp, p, false) }

// retransmitTimeout is the local ACK timeout (rxe retransmit_timer).
func (e *engine) retransmitTimeout(qp *QP) {
	if qp.state != qpattr.RTS && qp.state != qpattr.SQD {
		return
	}
	e.completerRun(qp, nil, true)
}

func (e *engine) completerRun(qp *QP, p *wire.Packet, timeout bool) {
	defer e.account(qp) // an ACK, a retry or an error changes what is in flight
	c := &qp.comp
	if !qp.live || qp.state == qpattr.Err || qp.state == qpattr.Reset || qp.errPending {
		return
	}
	c.timeoutRetry = timeout
	var w *sendWQE
	step := compGetWQE
	for {
		switch step {
		case compGetWQE:
			w, step = e.compGetWQE(qp, p)
		case compCheckPSN:
			step = e.compCheckPSN(qp, p, w)
		case compCheckAck:
			step = e.compCheckAck(qp, p, w)
		case compRead:
			step = e.compRead(qp, p, w)
		case compAtomic:
			step = e.compAtomic(qp, p, w)
		case compWriteSend:
			switch {
			case w.lastPSN != p.BTH.PSN():
				step = compUpdateComp
			case w.state == wqePending:
				step = compCompAck
			case w.state == wqeProcessing:
				// A go-back-N retry is resending w, and the ACK of its last
				// packet, sent before the retry, arrives now: the responder has
				// all of w (an ACK covers every earlier PSN). Complete it here and
				// move the requester past it. Left in place, w would stay
				// incomplete while comp.psn moves past it, and a later retry would
				// resend it from comp.psn: one packet beyond its last PSN, which
				// shifts every later WQE onto PSNs the responder has already
				// executed as other requests.
				e.reqSkipAcked(qp, w)
				step = compCompAck
			default:
				step = compUpdateComp
			}
		case compCompAck:
			e.completeSend(qp, w)
			if p.BTH.PSN().Sub(c.psn) >= 0 {
				step = compUpdateComp
			} else {
				step = compDone
			}
		case compCompWQE:
			if p != nil && w.state == wqePending {
				if w.lastPSN.Sub(c.psn) >= 0 {
					qp.req.cwndAcked(w.lastPSN.Next().Sub(c.psn), w.lastPSN.Next())
					c.psn = w.lastPSN.Next()
					c.opcode = -1
				}
			}
			e.completeSend(qp, w)
			step = compGetWQE
		case compUpdateComp:
			if wire.Opcodes[p.Opcode].Mask&wire.MaskLast != 0 {
				c.opcode = -1
			} else {
				c.opcode = int(p.Opcode)
			}
			if psn := p.BTH.PSN(); psn.Sub(c.psn) >= 0 {
				qp.req.cwndAcked(psn.Next().Sub(c.psn), psn.Next())
				c.psn = psn.Next()
			}
			e.reqWake(qp)
			step = compDone
		case compErrorRetry:
			step = e.compErrorRetry(qp, w)
		case compRNRRetry:
			if c.rnrRetry > 0 {
				if c.rnrRetry != 7 { // 7 means retry forever (ibv_modify_qp(3))
					c.rnrRetry--
				}
				qp.req.needRetry = true
				qp.req.waitRNRTime = true
				e.timers.stop(&qp.retrans)
				e.timers.set(&qp.rnr, e.now+p.AETH.Syndrome().RNRTimer().Duration())
				return
			}
			e.d.cnt.inc(CntRNRRetryExceeded)
			w.status = cq.RNRRetryExcErr
			step = compError
		case compError:
			e.completeSend(qp, w)
			e.qpError(qp, noEvent)
			return
		case compDone:
			if p == nil {
				return
			}
			// rxe runs the completer again after each packet: complete what needs no
			// ACK and rearm the timer.
			p = nil
			c.timeoutRetry = false
			step = compGetWQE
		case compExit:
			if c.timeoutRetry && w != nil {
				step = compErrorRetry
				continue
			}
			if qp.typ == qpattr.RC {
				if qp.req.psn.Sub(c.psn) > 0 && qp.timeout > 0 && !qp.req.waitRNRTime {
					e.timers.set(&qp.retrans, e.now+qp.timeout)
				} else if qp.req.psn == c.psn {
					e.timers.lapse(&qp.retrans)
				}
			}
			return
		}
	}
}

// compGetWQE looks at the oldest send WQE (rxe get_wqe).
func (e *engine) compGetWQE(qp *QP, p *wire.Packet) (*sendWQE, compStep) {
	cons := qp.sendQ.cons.Load()
	idle := compExit
	if p != nil {
		idle = compDone
	}
	if cons == qp.sendQ.prod.Load() {
		return nil, idle
	}
	w := &qp.sendSlots[cons&qp.sendQ.mask]
	switch w.state {
	case wqePosted:
		return nil, idle
	case wqeDone:
		return w, compCompWQE
	case wqeError:
		return w, compError
	}
	if p != nil {
		return w, compCheckPSN
	}
	return w, compExit
}

// compCheckPSN places the response against the oldest WQE (rxe check_psn).
func (e *engine) compCheckPSN(qp *QP, p *wire.Packet, w *sendWQE) compStep {
	c := &qp.comp
	psn := p.BTH.PSN()
	if psn.Sub(w.lastPSN) > 0 {
		// The response is past the oldest WQE: a coalesced ACK completes a SEND or
		// WRITE (an ACK covers every earlier PSN); for a READ or atomic it means lost
		// responses.
		if w.state == wqeProcessing {
			// A retry is resending w, yet the responder is past it: all of w
			// arrived before the retry (see compWriteSend).
			e.reqSkipAcked(qp, w)
		}
		if w.state == wqePending {
			if w.mask&respOps != 0 {
				return compErrorRetry
			}
			e.resetRetryCounters(qp)
			return compCompWQE
		}
		return compDone
	}
	diff := psn.Sub(c.psn)
	switch {
	case diff < 0:
		if psn == w.lastPSN && w.state == wqePending && w.mask&respOps == 0 {
			return compCompAck
		}
		e.d.cnt.inc(CntRcvdBadAck)
		return compDone
	case diff > 0 && w.mask&respOps != 0:
		return compDone // a READ response after a lost one: wait for the retry
	}
	return compCheckAck
}

// compCheckAck checks the response's opcode sequence and syndrome (rxe check_ack).
func (e *engine) compCheckAck(qp *QP, p *wire.Packet, w *sendWQE) compStep {
	c := &qp.comp
	op := p.Opcode
	mask := wire.Opcodes[op].Mask
	psn := p.BTH.PSN()
	switch c.opcode {
	case -1:
		if mask&wire.MaskFirst == 0 {
			w.status = cq.BadRespErr
			return compError
		}
	case int(wire.RCRDMAReadResponseFirst), int(wire.RCRDMAReadResponseMiddle):
		// An ACK or NAK may come between READ responses: the responder answers a
		// duplicate request with an ACK of its latest PSN, and a NAK reports an
		// error (rxe check_ack lets RC_ACKNOWLEDGE through here too).
		if op == wire.RCAcknowledge {
			break
		}
		if op != wire.RCRDMAReadResponseMiddle && op != wire.RCRDMAReadResponseLast {
			// A retried READ may restart with FIRST or ONLY.
			if !(psn == w.firstPSN && op == wire.RCRDMAReadResponseFirst) &&
				!(w.firstPSN == w.lastPSN && op == wire.RCRDMAReadResponseOnly) {
				w.status = cq.BadRespErr
				return compError
			}
		}
	}
	switch op {
	case wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly,
		wire.RCRDMAReadResponseMiddle:
		if p.AETH != nil && p.AETH.Syndrome().Kind() != wire.KindACK {
			w.status = cq.BadRespErr
			return compError
		}
		if (w.opcode == WRFlush || w.opcode == WRAtomicWrite) && op == wire.RCRDMAReadResponseOnly && len(p.Payload) == 0 {
			// IBTA A19: an empty READ response answers a FLUSH or an ATOMIC
			// WRITE (rxe check_ack).
			e.resetRetryCounters(qp)
			return compCompAck
		}
		if w.opcode != WRRDMARead {
			w.status = cq.BadRespErr
			return compError
		}
		e.resetRetryCounters(qp)
		return compRead
	case wire.RCAtomicAcknowledge:
		if p.AETH.Syndrome().Kind() != wire.KindACK || w.mask&wire.MaskAtomic == 0 {
			w.status = cq.BadRespErr
			return compError
		}
		e.resetRetryCounters(qp)
		return compAtomic
	case wire.RCAcknowledge:
		syn := p.AETH.Syndrome()
		switch syn.Kind() {
		case wire.KindACK:
			if w.mask&respOps != 0 {
				// A plain ACK at the PSN we wait on, held by a READ or atomic: the
				// responder executed the request (it acknowledges every PSN up to
				// this one) but its READ response or atomic ACK was lost. Retry, as
				// for a coalesced ACK past them (compCheckPSN); completing the WQE
				// here would report data or a result that never arrived.
				return compErrorRetry
			}
			e.resetRetryCounters(qp)
			return compWriteSend
		case wire.KindRNRNAK:
			e.d.cnt.inc(CntRcvRNR)
			return compRNRRetry
		case wire.KindNAK:
			switch syn.NAKCode() {
			case wire.NAKPSNSequenceError:
				// A NAK acknowledges every earlier PSN; retry from its PSN.
				e.d.cnt.inc(CntRcvSeqErr)
				if psn.Sub(c.psn) > 0 {
					c.psn = psn
					// Forward progress, so the retry budget is restored and the
					// retry starts now even if one is under way. After a sequence
					// error NAK the responder sends no other until a request at its
					// ePSN arrives (IBTA ch. 9, class B error), so a NAK past comp.psn
					// reports a new gap, found after the earlier retry filled the old
					// one. Left to the timer, each loss in a retried message would
					// cost a timeout and a retry, and at high loss exhaust retry_cnt
					// while the message advances.
					e.resetRetryCounters(qp)
					e.reqWake(qp)
				}
				return compErrorRetry
			case wire.NAKInvalidRequest:
				w.status = cq.RemInvReqErr
			case wire.NAKRemoteAccessError:
				w.status = cq.RemAccessErr
			default:
				w.status = cq.RemOpErr
			}
			return compError
		}
	}
	w.status = cq.BadRespErr
	return compError
}

// compRead places READ response data in the WQE's buffers (rxe do_read).
func (e *engine) compRead(qp *QP, p *wire.Packet, w *sendWQE) compStep {
	fits, f := e.copyIn(qp.pd.handle, w.sgl, &w.dma, p.Payload)
	switch {
	case !fits:
		w.status = cq.BadRespErr // more data than the READ asked for
		return compError
	case f != mr.FaultNone:
		w.status = cq.LocProtErr
		return compError
	}
	if w.dma.resid == 0 && wire.Opcodes[p.Opcode].Mask&wire.MaskLast != 0 {
		return compCompAck
	}
	return compUpdateComp
}

// compAtomic stores the original value in the WQE's 8-byte buffer, in host byte
// order as rxe does (do_atomic).
func (e *engine) compAtomic(qp *QP, p *wire.Packet, w *sendWQE) compStep {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], p.AtomicAckETH.OrigRemData())
	w.dma = dmaCursor{resid: 8}
	if _, f := e.copyIn(qp.pd.handle, w.sgl, &w.dma, b[:]); f != mr.FaultNone {
		w.status = cq.LocProtErr
		return compError
	}
	return compCompAck
}

// compErrorRetry starts a go-back-N retry or fails the WQE when retries are spent
// (rxe COMPST_ERROR_RETRY). Unlike rxe, retry_cnt 7 is not infinite: only
// rnr_retry has that meaning (ibv_modify_qp(3)).
func (e *engine) compErrorRetry(qp *QP, w *sendWQE) compStep {
	c := &qp.comp
	if w == nil || w.state == wqePosted {
		return compDone
	}
	if c.startedRetry && !c.timeoutRetry {
		return compDone // one retry at a time, unless the timer fired again
	}
	if c.retryCnt > 0 {
		c.retryCnt--
		if qp.req.psn.Sub(c.psn) > 0 {
			e.d.cnt.inc(CntCompRetry)
			qp.req.cwndLoss(c.timeoutRetry, c.psn)
			qp.req.needRetry = true
			c.startedRetry = true
			e.schedule(qp)
		}
		return compDone
	}
	e.d.cnt.inc(CntRetryExceeded)
	w.status = cq.RetryExcErr
	return compError
}

// resetRetryCounters restores the retry budgets after progress (rxe
// reset_retry_counters).
func (e *engine) resetRetryCounters(qp *QP) {
	qp.comp.retryCnt = qp.attr.RetryCnt
	qp.comp.rnrRetry = qp.attr.RNRRetry
	qp.comp.startedRetry = false
}

// reqWake lets a requester that waits on the completer run again.
func (e *engine) reqWake(qp *QP) {
	req := &qp.req
	if req.waitPSN || req.waitFence || req.needRdAtom {
		req.waitPSN, req.waitFence, req.needRdAtom = false, false, false
		e.schedule(qp)
	}
}

// wcOpcode maps a send opcode to its completion opcode (rxe wr_to_wc_opcode).
func wcOpcode(op WROpcode) cq.Opcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return cq.RDMAWrite
	case WRRDMARead:
		return cq.RDMARead
	case WRAtomicCmpSwp:
		return cq.CompSwap
	case WRAtomicFetchAdd:
		return cq.FetchAdd
	case WRLocalInv:
		return cq.LocalInv
	case WRBindMW:
		return cq.BindMW
	case WRRegMR:
		return cq.RegMR
	case WRFlush:
		return cq.Flush
	case WRAtomicWrite:
		return cq.AtomicWrite
	}
	return cq.Send
}

// completeSend retires the oldest send WQE: a WC when it is signaled or failed
// (IBTA 10.7.3.1: an error always completes), then the slot goes back to the
// posters (rxe do_complete). w must not be used afterwards.
func (e *engine) completeSend(qp *QP, w *sendWQE) {
	req := &qp.req
	if w.hasRdAtomic {
		w.hasRdAtomic = false
		req.rdInflight--
	}
	ok := w.status == cq.Success
	signaled := qp.sigAll || w.flags&SendSignaled != 0 || !ok
	if signaled {
		e.wc = cq.WC{WRID: w.wrid, Status: w.status, Opcode: wcOpcode(w.opcode), ByteLen: w.length, QPN: qp.qpn}
		if w.mask&wire.MaskImmDt != 0 {
			e.wc.Flags = cq.WithImm
		}
	}
	if req.wqeIndex == qp.sendQ.cons.Load() {
		req.wqeIndex++ // completed before the requester reached it (flush)
	}
	qp.sendQ.cons.Add(1) // the slot belongs to the posters from here on
	if ok {
		e.d.cnt.inc(CntRDMASends)
	}
	if signaled {
		e.pushWC(qp, qp.scq, false)
	}
	if qp.state == qpattr.SQD && qp.draining && int32(qp.sendQ.cons.Load()-qp.drainEnd) >= 0 {
		e.sqDrained(qp)
	}
	// A requester waiting for a fence, an initiator slot or the window may go on
	// (it checks again and waits again if it must).
	e.reqWake(qp)
}
