// Queue pairs: create, modify through the state machine, query, destroy, and the
// post verbs (rxe_qp.c, rxe_verbs.c).

package engine

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpstate"
	"github.com/xrnic/xrnic/nic/wire"
)

// AV is an address vector: struct ibv_ah_attr with its GRH, which RoCE always
// needs. A plain value.
type AV struct {
	DGID         netdev.GID // destination GID: the peer's IP address
	SGIDIndex    uint8      // index of the source GID in the port's table
	FlowLabel    uint32     // IPv6 flow label; also seeds the UDP source port
	HopLimit     uint8      // IPv6 hop limit (0: 64); IPv4 always sends TTL 64
	TrafficClass uint8      // IPv6 traffic class, IPv4 TOS
	Port         uint8      // 0 or 1
	// DMAC is the next hop's MAC. When nil the device resolves it
	// (Config.ResolveMAC) when the AV is set, and caches the answer.
	DMAC net.HardwareAddr
}

// QPAttr is struct ibv_qp_attr: the scalar attributes and the primary path. A plain
// value: Modify copies it.
type QPAttr struct {
	qpstate.Attr
	AV AV // AttrAV
}

// QPInitAttr is struct ibv_qp_init_attr. A plain value: CreateQP copies it.
type QPInitAttr struct {
	Type   qpstate.Type
	SendCQ *cq.CQ
	RecvCQ *cq.CQ
	SRQ    *SRQ // optional: receives come from the SRQ
	Cap    qpstate.Cap
	// SigAll makes every send WR signaled (sq_sig_all).
	SigAll bool
	// Context is the consumer's value (qp_context), returned by Context.
	Context any
}

// stateDestroyed is the pubState of a destroyed QP.
const stateDestroyed = 0xFF

// QP is a queue pair. PostSend and PostRecv never block (beyond the QP's own
// short ring locks) and may be called from any goroutine, including from
// completion handlers (MID1); Modify, Query and Destroy are control operations the
// engine executes. Everything below the "engine" line in the struct belongs to
// the engine goroutine alone.
type QP struct {
	d      *Device
	pd     *PD
	qpn    uint32
	typ    qpstate.Type
	scq    *cq.CQ
	rcq    *cq.CQ
	srq    *SRQ
	sigAll bool
	cap    qpstate.Cap
	ctx    any

	sq       ring
	sqSlots  []sendWQE
	rq       ring
	rqSlots  []recvWQE
	pubState atomic.Uint32 // the state posters see; written under both ring locks

	dbNext   *QP // doorbell stack link, owned by whoever holds dbQueued
	dbQueued atomic.Bool

	// ---- engine ----
	live       bool // in the engine's QP table
	inActive   bool
	state      qpstate.State
	attr       qpstate.Attr
	av         AV
	rt         *route // connected QPs: the path to the peer
	mtu        int    // path MTU in bytes
	sport      uint16
	timeout    time.Duration // local ACK timeout, 0 = none
	draining   bool          // SQD: WQEs started before SQD are still outstanding
	drainEnd   uint32        // SQD: send queue index of the first WQE not to start
	commEst    bool          // the Communication Established event was raised
	errPending bool          // go to ERR at the end of the current step
	errEvent   EventType
	req        reqState
	comp       compState
	resp       respState
	retrans    timer
	rnr        timer
}

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type returns the QP type.
func (qp *QP) Type() qpstate.Type { return qp.typ }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Context returns the consumer's value given at creation.
func (qp *QP) Context() any { return qp.ctx }

// Cap returns the QP's queue sizes.
func (qp *QP) Cap() qpstate.Cap { return qp.cap }

// State returns the QP's state as posters see it (a snapshot).
func (qp *QP) State() qpstate.State {
	s := qp.pubState.Load()
	if s == stateDestroyed {
		return qpstate.Err
	}
	return qpstate.State(s)
}

// CreateQP creates a QP in RESET (ibv_create_qp). The GSI type makes QP1, one per
// device.
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	d := pd.d
	if err := pd.use(); err != nil {
		return nil, err
	}
	qp, err := pd.newQP(a)
	if err != nil {
		pd.unuse()
		return nil, err
	}
	op := d.exec(func(e *engine) error {
		qp.live = true
		e.qps[qp.qpn] = qp
		return nil
	})
	if err := op.Wait(); err != nil {
		pd.releaseQP(qp)
		return nil, err
	}
	return qp, nil
}

func (pd *PD) newQP(a QPInitAttr) (*QP, error) {
	d := pd.d
	if !a.Type.Valid() {
		return nil, errorf(ErrInvalidArg, "QP type %v", a.Type)
	}
	if a.SendCQ == nil || (a.RecvCQ == nil && a.SRQ == nil) {
		return nil, errorf(ErrInvalidArg, "a QP needs a send CQ and a receive CQ")
	}
	if a.RecvCQ == nil {
		a.RecvCQ = a.SendCQ
	}
	if err := qpstate.ValidateCap(a.Cap, d.lim, a.SRQ != nil); err != nil {
		return nil, errorf(ErrInvalidArg, "%v", err)
	}
	if a.SRQ != nil {
		if a.SRQ.pd != pd {
			return nil, errorf(ErrWrongPD, "the SRQ belongs to another PD")
		}
		if a.Type != qpstate.RC && a.Type != qpstate.UD {
			// rxe allows an SRQ on UC too.
			if a.Type != qpstate.UC {
				return nil, errorf(ErrInvalidArg, "an SRQ on a %v QP", a.Type)
			}
		}
		a.Cap.MaxRecvWR, a.Cap.MaxRecvSGE = 0, 0
	}
	if a.Cap.MaxSendWR == 0 {
		a.Cap.MaxSendWR = 1
	}
	if a.Cap.MaxSendSGE == 0 {
		a.Cap.MaxSendSGE = 1
	}
	if a.SRQ == nil {
		a.Cap.MaxRecvWR = max(a.Cap.MaxRecvWR, 1)
		a.Cap.MaxRecvSGE = max(a.Cap.MaxRecvSGE, 1)
	}
	qp := &QP{d: d, pd: pd, typ: a.Type, scq: a.SendCQ, rcq: a.RecvCQ, srq: a.SRQ,
		sigAll: a.SigAll, cap: a.Cap, ctx: a.Context}
	n := qp.sq.init(int(a.Cap.MaxSendWR))
	qp.sqSlots = make([]sendWQE, n)
	sgls := make([]SGE, n*int(a.Cap.MaxSendSGE))
	var inl []byte
	if a.Cap.MaxInlineData > 0 {
		inl = make([]byte, n*int(a.Cap.MaxInlineData))
	}
	for i := range qp.sqSlots {
		s := &qp.sqSlots[i]
		k := int(a.Cap.MaxSendSGE)
		s.sgl = sgls[i*k : i*k : (i+1)*k]
		if inl != nil {
			m := int(a.Cap.MaxInlineData)
			s.inline = inl[i*m : i*m : (i+1)*m]
		}
	}
	if a.SRQ == nil {
		n = qp.rq.init(int(a.Cap.MaxRecvWR))
		qp.rqSlots = make([]recvWQE, n)
		k := int(a.Cap.MaxRecvSGE)
		rsgls := make([]SGE, n*k)
		for i := range qp.rqSlots {
			qp.rqSlots[i].sgl = rsgls[i*k : i*k : (i+1)*k]
		}
	}
	qp.retrans.init(qp, timerRetransmit)
	qp.rnr.init(qp, timerRNR)
	qp.resetTransport()

	// References: the CQs (IBA C11-17) and the SRQ may not go away under the QP.
	if err := qp.scq.Acquire(); err != nil {
		return nil, errorf(ErrInvalidArg, "send CQ: %v", err)
	}
	if err := qp.rcq.Acquire(); err != nil {
		qp.scq.Release()
		return nil, errorf(ErrInvalidArg, "receive CQ: %v", err)
	}
	if qp.srq != nil {
		if err := qp.srq.use(); err != nil {
			qp.scq.Release()
			qp.rcq.Release()
			return nil, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	if a.Type == qpstate.GSI {
		if _, ok := d.qpns[gsiQPN]; ok {
			err = errorf(ErrBusy, "the device already has its GSI QP")
		}
		qp.qpn = gsiQPN
	} else if len(d.qpns) >= MaxQP {
		err = errorf(ErrLimit, "%d QPs", MaxQP)
	} else {
		for {
			q := d.nextQPN
			d.nextQPN++
			if d.nextQPN >= maxQPN {
				d.nextQPN = minQPN
			}
			if _, ok := d.qpns[q]; !ok {
				qp.qpn = q
				break
			}
		}
	}
	if err != nil {
		qp.dropRefs()
		return nil, err
	}
	d.qpns[qp.qpn] = qp
	return qp, nil
}

func (qp *QP) dropRefs() {
	qp.scq.Release()
	qp.rcq.Release()
	if qp.srq != nil {
		qp.srq.unuse()
	}
}

// releaseQP undoes newQP's bookkeeping.
func (pd *PD) releaseQP(qp *QP) {
	d := pd.d
	d.mu.Lock()
	delete(d.qpns, qp.qpn)
	d.mu.Unlock()
	qp.dropRefs()
	pd.unuse()
}

// Modify changes the QP's attributes and state (ibv_modify_qp). The checks that
// need the QP's state run on the engine goroutine; the Op reports their result.
// Resolving the next-hop MAC of a new AV happens first, in the caller.
func (qp *QP) Modify(attr *QPAttr, mask qpstate.AttrMask) *Op {
	if attr == nil {
		return doneOp(errorf(ErrInvalidArg, "nil attributes"))
	}
	a := *attr
	var rp routeParams
	if mask&qpstate.AttrAV != 0 {
		var err error
		rp, err = qp.d.resolveAV(&a.AV)
		if err != nil {
			return doneOp(err)
		}
	}
	return qp.d.exec(func(e *engine) error { return e.modifyQP(qp, &a, mask, rp) })
}

// ModifySync is Modify followed by Wait.
func (qp *QP) ModifySync(attr *QPAttr, mask qpstate.AttrMask) error {
	return qp.Modify(attr, mask).Wait()
}

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr, error) {
	var a QPAttr
	err := qp.d.exec(func(e *engine) error {
		if !qp.live {
			return errorf(ErrDestroyed, "QP %#x", qp.qpn)
		}
		a.Attr = qp.attr
		a.State = qp.state
		a.CurState = qp.state
		a.Cap = qp.cap
		a.AV = qp.av
		if qp.state == qpstate.SQD {
			a.SQDrainNotify = qp.attr.SQDrainNotify
		}
		return nil
	}).Wait()
	ia := QPInitAttr{Type: qp.typ, SendCQ: qp.scq, RecvCQ: qp.rcq, SRQ: qp.srq, Cap: qp.cap,
		SigAll: qp.sigAll, Context: qp.ctx}
	return a, ia, err
}

// Destroy destroys the QP (ibv_destroy_qp): every outstanding work request
// completes with WR_FLUSH_ERR first, then the QP releases its CQs, SRQ and PD.
// Posts after Destroy fail with ErrDestroyed.
func (qp *QP) Destroy() *Op {
	return qp.d.exec(func(e *engine) error {
		if !qp.live {
			return errorf(ErrDestroyed, "QP %#x", qp.qpn)
		}
		e.destroyQP(qp)
		return nil
	})
}

// destroyQP flushes qp and removes it; the engine side of Destroy and Close.
func (e *engine) destroyQP(qp *QP) {
	if qp.state != qpstate.Reset {
		e.flushSend(qp)
		e.flushRecv(qp)
	}
	e.timers.stop(&qp.retrans)
	e.timers.stop(&qp.rnr)
	qp.setPubState(stateDestroyed)
	qp.live = false
	delete(e.qps, qp.qpn)
	qp.pd.releaseQP(qp)
}

// setPubState publishes the state to posters, under both ring locks so that a post
// either sees the new state or was published before it.
func (qp *QP) setPubState(s uint32) {
	qp.sq.mu.Lock()
	qp.rq.mu.Lock()
	qp.pubState.Store(s)
	qp.rq.mu.Unlock()
	qp.sq.mu.Unlock()
}

// resolveAV checks an AV against the port and finds its next hop, in the caller's
// goroutine (it may block on neighbour resolution).
func (d *Device) resolveAV(av *AV) (routeParams, error) {
	var p routeParams
	if av.Port > 1 {
		return p, errorf(ErrInvalidArg, "port %d (the device has port 1)", av.Port)
	}
	if int(av.SGIDIndex) >= len(d.cfg.GIDs) {
		return p, errorf(ErrInvalidArg, "source GID index %d (table of %d)", av.SGIDIndex, len(d.cfg.GIDs))
	}
	if av.DGID.IsZero() {
		return p, errorf(ErrInvalidArg, "zero destination GID")
	}
	p.src = d.cfg.GIDs[av.SGIDIndex].Addr()
	p.dst = av.DGID.Addr()
	if p.src.Is4() != p.dst.Is4() {
		return p, errorf(ErrInvalidArg, "source GID %v and destination GID %v are of different IP families",
			d.cfg.GIDs[av.SGIDIndex], av.DGID)
	}
	p.smac = d.smac
	p.tclass = av.TrafficClass
	p.flowLabel = av.FlowLabel & 0xFFFFF
	p.hopLimit = av.HopLimit
	switch {
	case len(av.DMAC) == 6:
		p.dmac = wire.MAC(av.DMAC)
	case len(av.DMAC) != 0:
		return p, errorf(ErrInvalidArg, "destination MAC %v", av.DMAC)
	default:
		mac, err := d.nextHop(p.dst)
		if err != nil {
			return p, err
		}
		p.dmac = mac
	}
	return p, nil
}

// nextHop resolves and caches the MAC of dst.
func (d *Device) nextHop(dst netip.Addr) (wire.MAC, error) {
	if d.cfg.ResolveMAC == nil {
		return wire.MAC{}, nil
	}
	d.mu.Lock()
	m, ok := d.macs[dst]
	d.mu.Unlock()
	if ok {
		return m, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	hw, err := d.cfg.ResolveMAC(ctx, dst)
	if err != nil || len(hw) != 6 {
		return m, errorf(ErrUnreachable, "next hop of %v: %v", dst, err)
	}
	m = wire.MAC(hw)
	d.mu.Lock()
	d.macs[dst] = m
	d.mu.Unlock()
	return m, nil
}

// modifyQP is the engine side of Modify (rxe_qp_chk_attr + rxe_qp_from_attr).
func (e *engine) modifyQP(qp *QP, a *QPAttr, mask qpstate.AttrMask, rp routeParams) error {
	if !qp.live {
		return errorf(ErrDestroyed, "QP %#x", qp.qpn)
	}
	cur := qp.state
	next, err := qpstate.CheckModifyAttr(cur, qp.typ, &a.Attr, mask, e.d.lim)
	if err != nil {
		return errorf(ErrInvalidArg, "%v", err)
	}
	if err := qpstate.CheckDrain(cur, next, qp.draining); err != nil {
		return errorf(ErrWrongState, "%v", err)
	}
	if mask&qpstate.AttrCap != 0 && a.Cap != qp.cap {
		return errorf(ErrInvalidArg, "resizing a QP's queues is not supported")
	}
	// Build the new path before changing anything, so a bad AV changes nothing.
	var rt *route
	if mask&qpstate.AttrAV != 0 || (mask&qpstate.AttrDestQPN != 0 && qp.rt != nil) {
		if mask&qpstate.AttrAV == 0 {
			rp = routeParams{src: qp.rt.src, dst: qp.rt.dst, smac: e.d.smac, dmac: qp.rt.dmac,
				tclass: qp.av.TrafficClass, flowLabel: qp.av.FlowLabel, hopLimit: qp.av.HopLimit}
		}
		dqpn := qp.attr.DestQPN
		if mask&qpstate.AttrDestQPN != 0 {
			dqpn = a.DestQPN
		}
		rp.sport = e.d.sportFor(qp, dqpn, rp.flowLabel)
		if rt, err = newRoute(rp); err != nil {
			return err
		}
	}

	// Apply the attributes (rxe_qp_from_attr).
	at := &qp.attr
	if mask&qpstate.AttrAccessFlags != 0 {
		at.AccessFlags = a.AccessFlags
	}
	if mask&qpstate.AttrPKeyIndex != 0 {
		at.PKeyIndex = a.PKeyIndex
	}
	if mask&qpstate.AttrPort != 0 {
		at.Port = a.Port
	}
	if mask&qpstate.AttrQKey != 0 {
		at.QKey = a.QKey
	}
	if rt != nil {
		qp.rt = rt
	}
	if mask&qpstate.AttrAV != 0 {
		qp.av = a.AV
		qp.av.DMAC = append(net.HardwareAddr(nil), rt.dmac[:]...)
	}
	if mask&qpstate.AttrPathMTU != 0 {
		at.PathMTU = a.PathMTU
		qp.mtu = a.PathMTU.Bytes()
	}
	if mask&qpstate.AttrTimeout != 0 {
		at.Timeout = a.Timeout
		qp.timeout = ackTimeout(a.Timeout)
	}
	if mask&qpstate.AttrRetryCnt != 0 {
		at.RetryCnt = a.RetryCnt
		qp.comp.retryCnt = a.RetryCnt
	}
	if mask&qpstate.AttrRNRRetry != 0 {
		at.RNRRetry = a.RNRRetry
		qp.comp.rnrRetry = a.RNRRetry
	}
	if mask&qpstate.AttrRQPSN != 0 {
		at.RQPSN = a.RQPSN
		qp.resp.psn = a.RQPSN
		qp.resp.ackPSN = a.RQPSN
	}
	if mask&qpstate.AttrMinRNRTimer != 0 {
		at.MinRNRTimer = a.MinRNRTimer
	}
	if mask&qpstate.AttrSQPSN != 0 {
		at.SQPSN = a.SQPSN
		qp.req.psn = a.SQPSN
		qp.req.hiPSN = a.SQPSN
		qp.comp.psn = a.SQPSN
	}
	if mask&qpstate.AttrMaxQPRdAtomic != 0 {
		at.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&qpstate.AttrMaxDestRdAtomic != 0 {
		at.MaxDestRdAtomic = a.MaxDestRdAtomic
		qp.resp.setResources(int(a.MaxDestRdAtomic))
	}
	if mask&qpstate.AttrPathMigState != 0 {
		at.PathMigState = a.PathMigState
	}
	if mask&qpstate.AttrDestQPN != 0 {
		at.DestQPN = a.DestQPN
	}
	if mask&qpstate.AttrEnSQDAsyncNotify != 0 {
		at.SQDrainNotify = a.SQDrainNotify
	}
	if qp.typ == qpstate.UD || qp.typ == qpstate.GSI {
		qp.mtu = e.mtu
		qp.sport = e.d.sportFor(qp, 0, 0)
	}
	if next == cur {
		if qp.state == qpstate.SQE || qp.state == qpstate.RTS {
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
func (e *engine) setState(qp *QP, s qpstate.State) {
	qp.state = s
	qp.attr.State = s
	switch s {
	case qpstate.Reset:
		qp.setPubState(uint32(s)) // posters stop before the rings empty
		e.resetQP(qp)
		return
	case qpstate.RTR:
		qp.commEst = false
	case qpstate.RTS:
		qp.draining = false
		e.schedule(qp)
	case qpstate.SQD:
		// Finish every WQE that started (a partly sent one included), start no more.
		qp.drainEnd = qp.req.wqeIndex
		if qp.drainEnd != qp.sq.prod.Load() && qp.sqSlots[qp.drainEnd&qp.sq.mask].state == wqeProcessing {
			qp.drainEnd++
		}
		qp.draining = qp.sq.cons.Load() != qp.drainEnd
		if !qp.draining {
			e.sqDrained(qp)
		}
	case qpstate.Err:
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
	qp.sq.mu.Lock()
	qp.sq.cons.Store(qp.sq.prod.Load())
	qp.sq.mu.Unlock()
	if qp.srq == nil {
		qp.rq.mu.Lock()
		qp.rq.cons.Store(qp.rq.prod.Load())
		qp.rq.mu.Unlock()
	}
	e.timers.stop(&qp.retrans)
	e.timers.stop(&qp.rnr)
	qp.attr = qpstate.Attr{}
	qp.av = AV{}
	qp.rt = nil
	qp.timeout = 0
	qp.draining = false
	qp.errPending = false
	qp.resetTransport()
}

// resetTransport clears the requester, completer and responder.
func (qp *QP) resetTransport() {
	qp.req = reqState{opcode: -1, wqeIndex: qp.sq.cons.Load()}
	qp.comp = compState{opcode: -1}
	qp.resp.reset()
	qp.mtu = 256
}

// qpError moves qp to ERR after a transport error, raising ev (rxe_qp_error).
func (e *engine) qpError(qp *QP, ev EventType) {
	if qp.state == qpstate.Err || qp.state == qpstate.Reset || !qp.live {
		return
	}
	if ev != noEvent {
		e.d.evq.post(AsyncEvent{Type: ev, QP: qp})
	}
	e.setState(qp, qpstate.Err)
}

// doorbell handles a QP whose poster rang: flush in ERR (and the send queue in
// SQE), otherwise give the requester a turn.
func (e *engine) doorbell(qp *QP) {
	switch qp.state {
	case qpstate.Err:
		e.flushSend(qp)
		e.flushRecv(qp)
	case qpstate.SQE:
		e.flushSend(qp)
	default:
		e.schedule(qp)
	}
}

// ring rings qp's doorbell: at most one entry per QP on the device's stack.
func (qp *QP) ring() {
	if !qp.dbQueued.CompareAndSwap(false, true) {
		return
	}
	d := qp.d
	for {
		old := d.dbHead.Load()
		qp.dbNext = old
		if d.dbHead.CompareAndSwap(old, qp) {
			break
		}
	}
	d.wake()
}

// flushSend completes every send WQE not yet completed with WR_FLUSH_ERR (rxe
// rxe_drain_resp_pkts with notify).
func (e *engine) flushSend(qp *QP) {
	for {
		cons := qp.sq.cons.Load()
		if cons == qp.sq.prod.Load() {
			break
		}
		w := &qp.sqSlots[cons&qp.sq.mask]
		w.status = cq.WRFlushErr
		e.completeSend(qp, w)
	}
	qp.req.wqeIndex = qp.sq.cons.Load()
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
		cons := qp.rq.cons.Load()
		if cons == qp.rq.prod.Load() {
			return
		}
		w := &qp.rqSlots[cons&qp.rq.mask]
		e.wc = cq.WC{WRID: w.wrid, Status: cq.WRFlushErr, Opcode: cq.Recv, QPN: qp.qpn}
		qp.rq.cons.Store(cons + 1)
		e.pushWC(qp, qp.rcq, true)
	}
}

// pushWC posts e.wc to c. A full CQ is IBTA class G: the QP goes to ERR.
func (e *engine) pushWC(qp *QP, c *cq.CQ, solicited bool) {
	if c.Push(&e.wc, solicited) {
		return
	}
	e.d.cnt.inc(CntCQOverflow)
	if qp.state != qpstate.Err {
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

// lookupFault maps an mr.Fault of a local SGE to the post-time error.
func lookupFault(f mr.Fault, sge *SGE) error {
	switch f {
	case mr.FaultInvalidKey:
		return errorf(ErrBadLKey, "L_Key %#x", sge.LKey)
	case mr.FaultPD:
		return errorf(ErrWrongPD, "L_Key %#x is another PD's", sge.LKey)
	case mr.FaultAccess:
		return errorf(ErrAccess, "L_Key %#x lacks LOCAL_WRITE", sge.LKey)
	case mr.FaultBounds:
		return errorf(ErrSGERange, "SGE %#x+%d outside L_Key %#x", sge.Addr, sge.Length, sge.LKey)
	}
	return errorf(ErrInvalidArg, "SGE: %v", f)
}

// checkSGL validates an SGL at post time and returns its total length.
func (d *Device) checkSGL(pd *PD, sgl []SGE, need mr.Access) (uint32, error) {
	var total uint64
	for i := range sgl {
		s := &sgl[i]
		if _, f := d.mrs.Lookup(s.LKey, pd.handle, s.Addr, int(s.Length), need, false); f != mr.FaultNone {
			return 0, lookupFault(f, s)
		}
		total += uint64(s.Length)
	}
	if total > MaxMsgSize {
		return 0, errorf(ErrInvalidArg, "message of %d bytes exceeds %d", total, MaxMsgSize)
	}
	return uint32(total), nil
}

// wrMask says what a send opcode does, in opcode-table terms.
func wrMask(op WROpcode) wire.OpMask {
	switch op {
	case WRSend:
		return wire.MaskSend
	case WRSendWithImm:
		return wire.MaskSend | wire.MaskImmDt
	case WRSendWithInv:
		return wire.MaskSend | wire.MaskIETH
	case WRRDMAWrite:
		return wire.MaskWrite
	case WRRDMAWriteWithImm:
		return wire.MaskWrite | wire.MaskImmDt
	case WRRDMARead:
		return wire.MaskRead
	case WRAtomicCmpSwp, WRAtomicFetchAdd:
		return wire.MaskAtomic
	}
	return 0
}

// opAllowed reports whether a QP of type t executes op (rxe
// rxe_wr_opcode_info's qpt masks).
func opAllowed(t qpstate.Type, op WROpcode) bool {
	switch t {
	case qpstate.RC:
		return wrMask(op) != 0
	case qpstate.UC:
		switch op {
		case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
			return true
		}
	case qpstate.UD, qpstate.GSI:
		return op == WRSend || op == WRSendWithImm
	}
	return false
}

// PostSend posts send work requests (ibv_post_send). It returns how many were
// posted; on an error, wrs[n] is the bad one and nothing after it was posted. It
// never blocks on the engine: the doorbell wakes it. Only the QP's state decides,
// not the port's: a port that is DOWN takes posts, as rxe_post_send does, and the
// local ACK timeout settles them (see SetPortState).
func (qp *QP) PostSend(wrs []SendWR) (n int, err error) {
	qp.sq.mu.Lock()
	st := qp.pubState.Load()
	prod := qp.sq.prod.Load()
	for n = range wrs {
		if err = qp.checkPostSend(st, prod, &wrs[n]); err != nil {
			break
		}
		if err = qp.fillSendWQE(&qp.sqSlots[prod&qp.sq.mask], &wrs[n]); err != nil {
			break
		}
		prod++
		qp.sq.prod.Store(prod)
	}
	if err == nil {
		n = len(wrs)
	}
	qp.sq.mu.Unlock()
	if n > 0 {
		qp.ring()
	}
	return n, err
}

func (qp *QP) checkPostSend(st uint32, prod uint32, wr *SendWR) error {
	if st == stateDestroyed {
		return errorf(ErrDestroyed, "QP %#x", qp.qpn)
	}
	if !qpstate.CanPostSend(qpstate.State(st)) {
		return errorf(ErrWrongState, "post send in %v", qpstate.State(st))
	}
	if prod-qp.sq.cons.Load() >= qp.sq.cap {
		return errorf(ErrQueueFull, "send queue of %d", qp.sq.cap)
	}
	if !opAllowed(qp.typ, wr.Opcode) {
		return errorf(ErrUnsupportedOp, "%v on a %v QP", wr.Opcode, qp.typ)
	}
	if wr.Flags&^knownSendFlags != 0 {
		return errorf(ErrInvalidArg, "send flags %#x", uint32(wr.Flags))
	}
	if len(wr.SGL) > int(qp.cap.MaxSendSGE) {
		return errorf(ErrInvalidArg, "%d SGEs exceed the QP's %d", len(wr.SGL), qp.cap.MaxSendSGE)
	}
	return nil
}

// fillSendWQE validates wr against memory and copies it into slot w (rxe
// init_send_wqe and validate_send_wr).
func (qp *QP) fillSendWQE(w *sendWQE, wr *SendWR) error {
	d := qp.d
	m := wrMask(wr.Opcode)
	inline := wr.InlineData != nil || wr.Flags&SendInline != 0
	if inline && m&(wire.MaskRead|wire.MaskAtomic) != 0 {
		return errorf(ErrInvalidArg, "inline %v", wr.Opcode)
	}
	if wr.InlineData != nil && len(wr.SGL) > 0 {
		return errorf(ErrInvalidArg, "both InlineData and an SGL")
	}
	need := mr.Access(0)
	if m&(wire.MaskRead|wire.MaskAtomic) != 0 {
		need = mr.LocalWrite // the response lands in these SGEs
	}
	var length uint32
	if wr.InlineData != nil {
		if len(wr.InlineData) > int(qp.cap.MaxInlineData) {
			return errorf(ErrInvalidArg, "%d inline bytes exceed the QP's %d", len(wr.InlineData), qp.cap.MaxInlineData)
		}
		length = uint32(len(wr.InlineData))
	} else {
		var err error
		if length, err = d.checkSGL(qp.pd, wr.SGL, need); err != nil {
			return err
		}
		if inline && length > qp.cap.MaxInlineData {
			return errorf(ErrInvalidArg, "%d inline bytes exceed the QP's %d", length, qp.cap.MaxInlineData)
		}
	}
	switch {
	case m&wire.MaskAtomic != 0:
		if length != 8 {
			return errorf(ErrInvalidArg, "atomic with %d local bytes (want 8)", length)
		}
		if wr.RemoteAddr&7 != 0 {
			return errorf(ErrInvalidArg, "atomic at unaligned address %#x", wr.RemoteAddr)
		}
	case qp.typ == qpstate.UD || qp.typ == qpstate.GSI:
		if wr.AH == nil {
			return errorf(ErrInvalidArg, "UD send without an AH")
		}
		if wr.AH.pd != qp.pd {
			return errorf(ErrWrongPD, "the AH belongs to another PD")
		}
		if wr.AH.dead.Load() {
			return errorf(ErrDestroyed, "AH")
		}
		if int(length) > qp.d.mtu.Bytes() {
			return errorf(ErrInvalidArg, "UD message of %d bytes exceeds the MTU %d", length, qp.d.mtu.Bytes())
		}
		if wr.RemoteQPN > wire.PSNMask {
			return errorf(ErrInvalidArg, "remote QPN %#x", wr.RemoteQPN)
		}
	}
	*w = sendWQE{sgl: w.sgl[:0], inline: w.inline[:0]}
	w.wrid = wr.WRID
	w.opcode = wr.Opcode
	w.flags = wr.Flags
	w.mask = m
	w.length = length
	w.imm = wr.ImmData
	w.invRKey = wr.InvalidateRKey
	w.remoteAddr = wr.RemoteAddr
	w.rkey = wr.RKey
	w.compareAdd = wr.CompareAdd
	w.swap = wr.Swap
	w.dma = dmaCursor{resid: length}
	w.iova = wr.RemoteAddr
	if wr.AH != nil && !qp.typ.Connected() {
		w.rt = wr.AH.rt
		w.remoteQPN = wr.RemoteQPN
		w.remoteQKey = wr.RemoteQKey
	}
	if inline {
		w.isInline = true
		if wr.InlineData != nil {
			w.inline = append(w.inline, wr.InlineData...)
		} else {
			for i := range wr.SGL {
				s := &wr.SGL[i]
				b, f := d.mrs.Lookup(s.LKey, qp.pd.handle, s.Addr, int(s.Length), 0, false)
				if f != mr.FaultNone { // deregistered since checkSGL
					return lookupFault(f, s)
				}
				w.inline = append(w.inline, b...)
			}
		}
	} else {
		w.sgl = append(w.sgl, wr.SGL...)
	}
	return nil
}

// PostRecv posts receive work requests (ibv_post_recv); n and err as PostSend.
func (qp *QP) PostRecv(wrs []RecvWR) (n int, err error) {
	if qp.srq != nil {
		return 0, errorf(ErrInvalidArg, "QP %#x takes its receives from an SRQ", qp.qpn)
	}
	qp.rq.mu.Lock()
	st := qp.pubState.Load()
	prod := qp.rq.prod.Load()
	for n = range wrs {
		wr := &wrs[n]
		switch {
		case st == stateDestroyed:
			err = errorf(ErrDestroyed, "QP %#x", qp.qpn)
		case !qpstate.CanPostRecv(qpstate.State(st)):
			err = errorf(ErrWrongState, "post receive in %v", qpstate.State(st))
		case prod-qp.rq.cons.Load() >= qp.rq.cap:
			err = errorf(ErrQueueFull, "receive queue of %d", qp.rq.cap)
		case len(wr.SGL) > int(qp.cap.MaxRecvSGE):
			err = errorf(ErrInvalidArg, "%d SGEs exceed the QP's %d", len(wr.SGL), qp.cap.MaxRecvSGE)
		}
		if err != nil {
			break
		}
		if err = qp.d.fillRecvWQE(qp.pd, &qp.rqSlots[prod&qp.rq.mask], wr); err != nil {
			break
		}
		prod++
		qp.rq.prod.Store(prod)
	}
	if err == nil {
		n = len(wrs)
	}
	qp.rq.mu.Unlock()
	if n > 0 && qpstate.State(st) == qpstate.Err {
		qp.ring() // flush it
	}
	return n, err
}

func (d *Device) fillRecvWQE(pd *PD, w *recvWQE, wr *RecvWR) error {
	length, err := d.checkSGL(pd, wr.SGL, mr.LocalWrite)
	if err != nil {
		return err
	}
	w.wrid = wr.WRID
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.length = length
	return nil
}
