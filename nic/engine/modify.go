// Modify and its effects: the attribute checks, the state transitions and what
// each does to the queues (rxe_qp.c rxe_qp_chk_attr, rxe_qp_from_attr, rxe_qp_error).

package engine

import (
	"fmt"
	"net"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// QPAttr is struct ibv_qp_attr: the scalar attributes and the primary path. A plain
// value: Modify copies it.
type QPAttr struct {
	qpattr.Attr
	AV AV // AttrAV
}

// Modify changes the QP's attributes and state (ibv_modify_qp). The checks that
// need the QP's state run on the engine goroutine; the Op reports their result.
// It never waits for the network: when a new AV's next-hop MAC must be resolved,
// the Op completes after the resolution and the change (or with an error wrapping
// ErrUnreachable, changing nothing). Modifies of one QP are applied in call
// order, except that one waiting for a resolution is applied when it ends: wait
// for its Op before the next Modify, as ibv_modify_qp's callers do.
func (qp *QP) Modify(attr *QPAttr, mask qpattr.AttrMask) *Op {
	d := qp.d
	if attr == nil {
		return d.doneOp(errorf(ErrInvalid, "nil attributes"))
	}
	a := *attr
	if mask&qpattr.AttrAV == 0 {
		return qp.sh.exec(func(e *engine) error { return e.modifyQP(qp, &a, mask, routeParams{}) })
	}
	rp, needMAC, err := d.checkAV(&a.AV)
	if err != nil {
		return d.doneOp(err)
	}
	if !needMAC {
		return qp.sh.exec(func(e *engine) error { return e.modifyQP(qp, &a, mask, rp) })
	}
	op := d.newOp()
	if err := d.resolveMAC(rp.dst, func(mac wire.MAC, err error) {
		if err != nil {
			op.finish(err)
			return
		}
		rp.dmac = mac
		qp.sh.enqueueOp(op, func(e *engine) error { return e.modifyQP(qp, &a, mask, rp) }, nil)
	}); err != nil {
		op.finish(err)
	}
	return op
}

// ModifySync is Modify followed by Wait.
func (qp *QP) ModifySync(attr *QPAttr, mask qpattr.AttrMask) error {
	return qp.Modify(attr, mask).Wait()
}

// modifyQP is the engine side of Modify (rxe_qp_chk_attr + rxe_qp_from_attr).
func (e *engine) modifyQP(qp *QP, a *QPAttr, mask qpattr.AttrMask, rp routeParams) error {
	if !qp.live {
		return errorf(ErrClosed, "QP %#x", qp.qpn)
	}
	cur := qp.state
	next, err := qpattr.CheckModifyAttr(cur, qp.typ, &a.Attr, mask, e.d.lim)
	if err != nil {
		return wrap(err)
	}
	if err := qpattr.CheckDrain(cur, next, qp.draining); err != nil {
		return fmt.Errorf("engine: %w: %w", ErrWrongState, err)
	}
	if mask&qpattr.AttrCap != 0 && a.Cap != qp.cap {
		return errorf(ErrInvalid, "resizing a QP's queues is not supported")
	}
	// Build the new path before changing anything, so a bad AV changes nothing.
	var rt *route
	if mask&qpattr.AttrAV != 0 || (mask&qpattr.AttrDestQPN != 0 && qp.rt != nil) {
		if mask&qpattr.AttrAV == 0 {
			rp = routeParams{src: qp.rt.src, dst: qp.rt.dst, smac: e.d.smac, dmac: qp.rt.dmac,
				tclass: qp.av.TrafficClass, flowLabel: qp.av.FlowLabel, hopLimit: qp.av.HopLimit, loop: qp.rt.loop}
		}
		dqpn := qp.attr.DestQPN
		if mask&qpattr.AttrDestQPN != 0 {
			dqpn = a.DestQPN
		}
		rp.sport = e.d.sportFor(qp, dqpn, rp.flowLabel)
		if rt, err = newRoute(rp); err != nil {
			return err
		}
	}

	// Apply the attributes (rxe_qp_from_attr).
	at := &qp.attr
	if mask&qpattr.AttrAccessFlags != 0 {
		at.AccessFlags = a.AccessFlags
	}
	if mask&qpattr.AttrPKeyIndex != 0 {
		at.PKeyIndex = a.PKeyIndex
	}
	if mask&qpattr.AttrPort != 0 {
		at.Port = a.Port
	}
	if mask&qpattr.AttrQKey != 0 {
		at.QKey = a.QKey
	}
	if rt != nil {
		qp.rt = rt
	}
	if mask&qpattr.AttrAV != 0 {
		qp.av = a.AV
		qp.av.DMAC = append(net.HardwareAddr(nil), rt.dmac[:]...)
	}
	if mask&qpattr.AttrPathMTU != 0 {
		at.PathMTU = a.PathMTU
		qp.mtu = a.PathMTU.Bytes()
	}
	if mask&qpattr.AttrTimeout != 0 {
		at.Timeout = a.Timeout
		qp.timeout = ackTimeout(a.Timeout)
	}
	if mask&qpattr.AttrRetryCnt != 0 {
		at.RetryCnt = a.RetryCnt
		qp.comp.retryCnt = a.RetryCnt
	}
	if mask&qpattr.AttrRNRRetry != 0 {
		at.RNRRetry = a.RNRRetry
		qp.comp.rnrRetry = a.RNRRetry
	}
	if mask&qpattr.AttrRQPSN != 0 {
		at.RQPSN = a.RQPSN
		qp.resp.psn = a.RQPSN
		qp.resp.ackPSN = a.RQPSN
	}
	if mask&qpattr.AttrMinRNRTimer != 0 {
		at.MinRNRTimer = a.MinRNRTimer
	}
	if mask&qpattr.AttrSQPSN != 0 {
		at.SQPSN = a.SQPSN
		qp.req.psn = a.SQPSN
		qp.req.hiPSN = a.SQPSN
		qp.comp.psn = a.SQPSN
	}
	if mask&qpattr.AttrMaxQPRdAtomic != 0 {
		at.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&qpattr.AttrMaxDestRdAtomic != 0 {
		at.MaxDestRdAtomic = a.MaxDestRdAtomic
		qp.resp.setResources(int(a.MaxDestRdAtomic))
	}
	if mask&qpattr.AttrPathMigState != 0 {
		at.PathMigState = a.PathMigState
	}
	if mask&qpattr.AttrDestQPN != 0 {
		at.DestQPN = a.DestQPN
	}
	if mask&qpattr.AttrEnSQDAsyncNotify != 0 {
		at.SQDrainNotify = a.SQDrainNotify
	}
	if qp.typ == qpattr.UD || qp.typ == qpattr.GSI {
		qp.mtu = e.mtu
		qp.sport = e.d.sportFor(qp, 0, 0)
	}
	if next == cur {
		if qp.state == qpattr.SQE || qp.state == qpattr.RTS {
			e.schedule(qp)
		}
		return nil
	}
	e.setState(qp, next)
	return nil
}

// sportFor returns the UDP source port of qp's packets (see wire/sport.go).
func (d *Device) sportFor(qp *QP, destQPN, flowLabel uint32) uint16 {
	if p := d.info.FixedSourcePort; p != 0 {
		return p
	}
	if qp.typ.Connected() {
		return wire.UDPSport(flowLabel, qp.qpn, destQPN)
	}
	return wire.QPSport(qp.qpn)
}

// setState moves qp to s and does what the transition means (rxe_qp_from_attr's
// state switch).
func (e *engine) setState(qp *QP, s qpattr.State) {
	qp.state = s
	qp.attr.State = s
	defer e.account(qp) // ERR and RESET take qp's PSNs out of its destination's room
	switch s {
	case qpattr.Reset:
		qp.setPubState(uint32(s)) // posters stop before the rings empty
		e.resetQP(qp)
		return
	case qpattr.RTR:
		qp.commEst = false
	case qpattr.RTS:
		qp.draining = false
		e.schedule(qp)
	case qpattr.SQD:
		// Finish every WQE that started (a partly sent one included), start no more.
		// A go-back-N rewind leaves wqeIndex behind WQEs that went out (their state
		// back to posted, reqRetry): they started, and may have run at the peer.
		qp.drainEnd = qp.req.wqeIndex
		if int32(qp.req.started-qp.drainEnd) > 0 {
			qp.drainEnd = qp.req.started
		}
		if qp.drainEnd != qp.sendQ.prod.Load() && qp.sendSlots[qp.drainEnd&qp.sendQ.mask].state == wqeProcessing {
			qp.drainEnd++
		}
		qp.draining = qp.sendQ.cons.Load() != qp.drainEnd
		if !qp.draining {
			e.sqDrained(qp)
		}
	case qpattr.Err:
		qp.setPubState(uint32(s))
		e.flushSend(qp)
		e.flushRecv(qp)
		e.timers.stop(&qp.retrans)
		e.timers.stop(&qp.rnr)
		if qp.srq != nil {
			// The QP takes no more WQEs from its SRQ (Last WQE Reached).
			e.d.evq.post(AsyncEvent{Type: EventQPLastWQEReached, QP: qp})
		}
		return
	}
	qp.setPubState(uint32(s))
}

// sqDrained ends the SQD drain, raising Send Queue Drained if asked.
func (e *engine) sqDrained(qp *QP) {
	qp.draining = false
	if qp.attr.SQDrainNotify {
		e.d.evq.post(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

// resetQP empties both queues without completions and forgets the connection
// (rxe_qp_reset; IBTA 10.3.1: Reset).
func (e *engine) resetQP(qp *QP) {
	qp.sendQ.mu.Lock()
	qp.sendQ.cons.Store(qp.sendQ.prod.Load())
	qp.sendQ.mu.Unlock()
	if qp.srq == nil {
		qp.recvQ.mu.Lock()
		qp.recvQ.cons.Store(qp.recvQ.prod.Load())
		qp.recvQ.mu.Unlock()
	}
	e.timers.stop(&qp.retrans)
	e.timers.stop(&qp.rnr)
	qp.attr = qpattr.Attr{}
	qp.av = AV{}
	qp.rt = nil
	qp.timeout = 0
	qp.draining = false
	qp.errPending = false
	qp.resetTransport()
}

// resetTransport clears the requester, completer and responder.
func (qp *QP) resetTransport() {
	cons := qp.sendQ.cons.Load()
	qp.req = reqState{opcode: -1, wqeIndex: cons, started: cons, cwnd: maxUnackedPSNs, ssthresh: maxUnackedPSNs}
	qp.comp = compState{opcode: -1}
	qp.resp.reset()
	qp.mtu = 256
}

// qpError moves qp to ERR after a transport error, raising ev (rxe_qp_error).
func (e *engine) qpError(qp *QP, ev EventType) {
	if qp.state == qpattr.Err || qp.state == qpattr.Reset || !qp.live {
		return
	}
	if ev != noEvent {
		e.d.evq.post(AsyncEvent{Type: ev, QP: qp})
	}
	e.setState(qp, qpattr.Err)
}

// flushSend completes every send WQE not yet completed with WR_FLUSH_ERR (rxe
// rxe_drain_resp_pkts with notify).
func (e *engine) flushSend(qp *QP) {
	for {
		cons := qp.sendQ.cons.Load()
		if cons == qp.sendQ.prod.Load() {
			break
		}
		w := &qp.sendSlots[cons&qp.sendQ.mask]
		w.status = cq.WRFlushErr
		e.completeSend(qp, w)
	}
	qp.req.wqeIndex = qp.sendQ.cons.Load()
	qp.req.opcode = -1
}

// flushRecv completes the receive in progress and every posted receive WQE with
// WR_FLUSH_ERR. An SRQ's WQEs stay in the SRQ.
func (e *engine) flushRecv(qp *QP) {
	r := &qp.resp
	if r.wqe != nil {
		r.status = cq.WRFlushErr
		e.completeRecv(qp, nil)
	}
	if qp.srq != nil {
		return
	}
	for {
		cons := qp.recvQ.cons.Load()
		if cons == qp.recvQ.prod.Load() {
			return
		}
		w := &qp.recvSlots[cons&qp.recvQ.mask]
		e.wc = cq.WC{WRID: w.wrid, Status: cq.WRFlushErr, Opcode: cq.Recv, QPN: qp.qpn}
		qp.recvQ.cons.Store(cons + 1)
		e.pushWC(qp, qp.rcq, true)
	}
}

// pushWC posts e.wc to c. A full CQ is IBTA class G: the QP goes to ERR.
func (e *engine) pushWC(qp *QP, c *CQ, solicited bool) {
	if c.Push(&e.wc, solicited) {
		return
	}
	e.d.cnt.inc(CntCQOverflow)
	if qp.state != qpattr.Err {
		qp.errPending = true
		qp.errEvent = EventQPFatal
	}
}

// checkError moves qp to ERR if a step asked for it, once the responses queued
// before the failure (the NAK that reports it, say) have left.
func (e *engine) checkError(qp *QP) {
	if !qp.errPending {
		return
	}
	if qp.resp.outLen > 0 {
		e.schedule(qp)
		return
	}
	qp.errPending = false
	e.qpError(qp, qp.errEvent)
}
