// Queue pairs: the QP object, create, query and destroy (rxe_qp.c rxe_qp_init,
// rxe_qp_destroy).

package engine

import (
	"sync/atomic"
	"time"

	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// QPInitAttr is struct ibv_qp_init_attr. A plain value: CreateQP copies it.
type QPInitAttr struct {
	Type   qpattr.Type
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // optional: receives come from the SRQ
	Cap    qpattr.Cap
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
	sh     *shard // the engine that owns the QP: its queue's
	pd     *PD
	qpn    uint32
	typ    qpattr.Type
	scq    *CQ
	rcq    *CQ
	srq    *SRQ
	sigAll bool
	cap    qpattr.Cap
	ctx    any
	n      lifetime // parents: the PD, the CQs and the SRQ; no children

	sendQ     ring
	sendSlots []sendWQE
	recvQ     ring
	recvSlots []recvWQE
	pubState  atomic.Uint32 // the state posters see; written under both ring locks

	dbNext   *QP // doorbell stack link, owned by whoever holds dbQueued
	dbQueued atomic.Bool

	// Multicast groups it is attached to (mcast.go), guarded by d.mcMu;
	// mcDead: destroyed, it attaches to none any more.
	mcgs   []netdev.GID
	mcDead bool

	// ---- engine ----
	live       bool // in the engine's QP table
	inActive   bool
	room       *destRoom     // RC: its destination's PSNs in flight, while it counts or waits there (cwnd.go)
	counted    int32         // RC: its PSNs in room.inflight
	roomWait   bool          // RC: in room.wait
	roomStale  bool          // RC: no ACK for roomStale; counts nothing until one comes
	roomAcked  wire.PSN      // RC: comp.psn when account last saw it move
	roomSince  time.Duration // RC: when it last moved (or the QP started counting)
	roomTimer  timer         // RC: armed while it waits in room
	state      qpattr.State
	attr       qpattr.Attr
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
func (qp *QP) Type() qpattr.Type { return qp.typ }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Context returns the consumer's value given at creation.
func (qp *QP) Context() any { return qp.ctx }

// Cap returns the QP's queue sizes.
func (qp *QP) Cap() qpattr.Cap { return qp.cap }

// State returns the QP's state as posters see it (a snapshot).
func (qp *QP) State() qpattr.State {
	s := qp.pubState.Load()
	if s == stateDestroyed {
		return qpattr.Err
	}
	return qpattr.State(s)
}

// CreateQP creates a QP in RESET (ibv_create_qp). The GSI type makes QP1, one per
// device.
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	qp, err := pd.newQP(a)
	if err != nil {
		return nil, err
	}
	op := qp.sh.exec(func(e *engine) error {
		qp.live = true
		e.qps.put(qp)
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
		return nil, errorf(ErrInvalid, "QP type %v", a.Type)
	}
	if a.SendCQ == nil || (a.RecvCQ == nil && a.SRQ == nil) {
		return nil, errorf(ErrInvalid, "a QP needs a send CQ and a receive CQ")
	}
	if a.RecvCQ == nil {
		a.RecvCQ = a.SendCQ
	}
	if err := qpattr.ValidateCap(a.Cap, d.lim, a.SRQ != nil); err != nil {
		return nil, wrap(err)
	}
	if a.SRQ != nil {
		if a.SRQ.pd != pd {
			return nil, errorf(ErrWrongPD, "the SRQ belongs to another PD")
		}
		if a.Type != qpattr.RC && a.Type != qpattr.UD {
			// rxe allows an SRQ on UC too.
			if a.Type != qpattr.UC {
				return nil, errorf(ErrInvalid, "an SRQ on a %v QP", a.Type)
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
	n := qp.sendQ.init(int(a.Cap.MaxSendWR))
	qp.sendSlots = make([]sendWQE, n)
	sgls := make([]SGE, n*int(a.Cap.MaxSendSGE))
	var inl []byte
	if a.Cap.MaxInlineData > 0 {
		inl = make([]byte, n*int(a.Cap.MaxInlineData))
	}
	for i := range qp.sendSlots {
		s := &qp.sendSlots[i]
		k := int(a.Cap.MaxSendSGE)
		s.sgl = sgls[i*k : i*k : (i+1)*k]
		if inl != nil {
			m := int(a.Cap.MaxInlineData)
			s.inline = inl[i*m : i*m : (i+1)*m]
		}
	}
	if a.SRQ == nil {
		n = qp.recvQ.init(int(a.Cap.MaxRecvWR))
		qp.recvSlots = make([]recvWQE, n)
		k := int(a.Cap.MaxRecvSGE)
		rsgls := make([]SGE, n*k)
		for i := range qp.recvSlots {
			qp.recvSlots[i].sgl = rsgls[i*k : i*k : (i+1)*k]
		}
	}
	qp.retrans.init(qp, timerRetransmit)
	qp.rnr.init(qp, timerRNR)
	qp.roomTimer.init(qp, timerRoom)
	qp.resetTransport()

	// The PD, the CQs (IBA C11-17) and the SRQ may not go away under the QP.
	parents := []*lifetime{&pd.n, &a.SendCQ.n}
	if a.RecvCQ != a.SendCQ {
		parents = append(parents, &a.RecvCQ.n)
	}
	if a.SRQ != nil {
		parents = append(parents, &a.SRQ.n)
	}
	if err := qp.n.adopt(parents...); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	if a.Type == qpattr.GSI {
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
		qp.n.orphan()
		return nil, err
	}
	d.qpns[qp.qpn] = qp
	qp.sh = d.shardOf(qp.qpn)
	return qp, nil
}

// releaseQP undoes newQP's bookkeeping.
func (pd *PD) releaseQP(qp *QP) {
	d := pd.d
	d.mu.Lock()
	delete(d.qpns, qp.qpn)
	d.mu.Unlock()
	qp.n.orphan()
}

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr, error) {
	var a QPAttr
	err := qp.sh.exec(func(e *engine) error {
		if !qp.live {
			return errorf(ErrClosed, "QP %#x", qp.qpn)
		}
		a.Attr = qp.attr
		a.State = qp.state
		a.CurState = qp.state
		a.Cap = qp.cap
		a.AV = qp.av
		if qp.state == qpattr.SQD {
			a.SQDrainNotify = qp.attr.SQDrainNotify
		}
		return nil
	}).Wait()
	ia := QPInitAttr{Type: qp.typ, SendCQ: qp.scq, RecvCQ: qp.rcq, SRQ: qp.srq, Cap: qp.cap,
		SigAll: qp.sigAll, Context: qp.ctx}
	return a, ia, err
}

// Destroy destroys the QP (ibv_destroy_qp): every outstanding work request
// completes with WR_FLUSH_ERR, then the QP releases its CQs, SRQ and PD, and the
// Op completes once no event handler call for the QP runs any more. Events raised
// for it and not yet delivered are discarded, as uverbs does. Posts after Destroy
// fail with ErrClosed.
func (qp *QP) Destroy() *Op {
	qp.n.dead.Store(true) // its events are discarded from now on
	if qp.typ == qpattr.UD {
		qp.dropAllMcast()
	}
	return qp.sh.execClose(&qp.n, func(e *engine) error {
		if !qp.live {
			return errorf(ErrClosed, "QP %#x", qp.qpn)
		}
		e.destroyQP(qp)
		return nil
	})
}

// Close is Destroy: a QP has no children to wait for.
func (qp *QP) Close() *Op { return qp.Destroy() }

// destroyQP flushes qp and removes it; the engine side of Destroy and Close.
func (e *engine) destroyQP(qp *QP) {
	// Posters first, as the move to ERR does: a post that saw the old state is in
	// the rings before the flush, and every later one fails (LT4, O2-6).
	qp.setPubState(stateDestroyed)
	if qp.state != qpattr.Reset {
		e.flushSend(qp)
		e.flushRecv(qp)
	}
	e.timers.stop(&qp.retrans)
	e.timers.stop(&qp.rnr)
	qp.n.dead.Store(true)
	qp.live = false
	e.account(qp) // out of its destination's room
	e.qps.remove(qp.qpn)
	if len(e.mcg) > 0 {
		e.forgetMcastAll(qp)
	}
	// Its type 2 windows go with it: a new QP may get its number, and must not
	// inherit what a peer was given for this one.
	e.d.mrs.InvalidateWindows(qp.qpn)
	qp.pd.releaseQP(qp)
}

// setPubState publishes the state to posters, under both ring locks so that a post
// either sees the new state or was published before it.
func (qp *QP) setPubState(s uint32) {
	qp.sendQ.mu.Lock()
	qp.recvQ.mu.Lock()
	qp.pubState.Store(s)
	qp.recvQ.mu.Unlock()
	qp.sendQ.mu.Unlock()
}
