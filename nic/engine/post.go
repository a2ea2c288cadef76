// Posting: the post verbs, their checks at post time, and the doorbell that
// hands a QP to the engine (rxe_verbs.c rxe_post_send, rxe_post_recv).

package engine

import (
	"slices"

	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// doorbell handles a QP whose poster rang: flush in ERR (and the send queue in
// SQE), otherwise give the requester a turn.
func (e *engine) doorbell(qp *QP) {
	switch qp.state {
	case qpattr.Err:
		e.flushSend(qp)
		e.flushRecv(qp)
	case qpattr.SQE:
		e.flushSend(qp)
	default:
		e.schedule(qp)
	}
}

// ring rings qp's doorbell: at most one entry per QP on its engine's stack.
func (qp *QP) ring() {
	if !qp.dbQueued.CompareAndSwap(false, true) {
		return
	}
	sh := qp.sh
	for {
		old := sh.dbHead.Load()
		qp.dbNext = old
		if sh.dbHead.CompareAndSwap(old, qp) {
			break
		}
	}
	if sh.polling.Load() { // a poller posting: the loop drains doorbells next
		return
	}
	if sh.d.cfg.BusyPoll {
		// While a CQ poller drives, its next pass sends the WR, with every
		// other posted before it: one transmit call for a burst of posts.
		if sh.polled.Load() {
			return
		}
		// Otherwise the posting thread sends its WR itself (run to
		// completion), unless the engine goroutine is awake and takes it
		// anyway.
		if sh.drive1(nil) {
			return
		}
	}
	// An awake engine goroutine drains the stack before it sleeps: it looks
	// at dbHead after it sets sleeping (routineEngine), and this looked at
	// sleeping after the push above, so one of the two sees the other. The
	// wake-up's write would cost this thread a syscall and the engine an empty
	// pass (its next poll would return at once).
	if !sh.sleeping.Load() {
		return
	}
	sh.wake()
}

// lookupFault maps an mr.Fault of a local SGE to the post-time error.
func lookupFault(f mr.Fault) error {
	switch f {
	case mr.FaultInvalidKey:
		return errPostBadLKey
	case mr.FaultPD:
		return errPostLKeyPD
	case mr.FaultAccess:
		return errPostLKeyAccess
	case mr.FaultBounds:
		return errPostSGERange
	}
	return errPostSGE
}

// checkSGL validates an SGL at post time and returns its total length.
func (d *Device) checkSGL(pd *PD, sgl []SGE, need mr.Access) (uint32, error) {
	var total uint64
	for i := range sgl {
		s := &sgl[i]
		if _, f := d.mrs.Lookup(s.LKey, pd.handle, s.Addr, int(s.Length), need, mr.Local); f != mr.FaultNone {
			return 0, lookupFault(f)
		}
		total += uint64(s.Length)
	}
	if total > MaxMsgSize {
		return 0, errPostMsgSize
	}
	return uint32(total), nil
}

// PostSend posts send work requests (ibv_post_send). It returns how many were
// posted; on an error, wrs[n] is the bad one and nothing after it was posted. It
// never blocks on the engine: the doorbell wakes it. Only the QP's state decides,
// not the port's: a port that is DOWN takes posts, as rxe_post_send does, and the
// local ACK timeout settles them (see SetPortState).
func (qp *QP) PostSend(wrs []SendWR) (n int, err error) { return qp.postSend(wrs, false) }

// postSend is PostSend; bind1 lets BIND_MW name a type 1 window (BindMW).
func (qp *QP) postSend(wrs []SendWR, bind1 bool) (n int, err error) {
	qp.sendQ.mu.Lock()
	st := qp.pubState.Load()
	prod := qp.sendQ.prod.Load()
	for n = range wrs {
		if err = qp.checkPostSend(st, prod, &wrs[n]); err != nil {
			break
		}
		if err = qp.fillSendWQE(&qp.sendSlots[prod&qp.sendQ.mask], &wrs[n], bind1); err != nil {
			break
		}
		prod++
		qp.sendQ.prod.Store(prod)
	}
	if err == nil {
		n = len(wrs)
	}
	qp.sendQ.mu.Unlock()
	if n > 0 {
		qp.ring()
	}
	return n, err
}

func (qp *QP) checkPostSend(st uint32, prod uint32, wr *SendWR) error {
	if st == stateDestroyed {
		return errPostClosed
	}
	if !qpattr.CanPostSend(qpattr.State(st)) {
		return errPostSendState
	}
	if prod-qp.sendQ.cons.Load() >= qp.sendQ.cap {
		return errPostSendFull
	}
	if !wrOpcodes.allowed(qp.typ, wr.Opcode) {
		return errPostOpcode
	}
	if wr.Flags&^knownSendFlags != 0 {
		return errPostFlags
	}
	if len(wr.SGL) > int(qp.cap.MaxSendSGE) {
		return errPostSGEs
	}
	return nil
}

// fillSendWQE validates wr against memory and copies it into slot w (rxe
// init_send_wqe and validate_send_wr).
func (qp *QP) fillSendWQE(w *sendWQE, wr *SendWR, bind1 bool) error {
	d := qp.d
	m := wrOpcodes.mask(wr.Opcode)
	if wrOpcodes[wr.Opcode].local || m&(wire.MaskFlush|wire.MaskAtomicWrite) != 0 {
		return qp.fillOtherWQE(w, wr, bind1)
	}
	inline := wr.InlineData != nil || wr.Flags&SendInline != 0
	if inline && m&(wire.MaskRead|wire.MaskAtomic) != 0 {
		return errPostInlineOp
	}
	if wr.InlineData != nil && len(wr.SGL) > 0 {
		return errPostInlineSGL
	}
	need := mr.Access(0)
	if m&(wire.MaskRead|wire.MaskAtomic) != 0 {
		need = mr.LocalWrite // the response lands in these SGEs
	}
	var length uint32
	if wr.InlineData != nil {
		if len(wr.InlineData) > int(qp.cap.MaxInlineData) {
			return errPostInlineLen
		}
		length = uint32(len(wr.InlineData))
	} else {
		var err error
		if length, err = d.checkSGL(qp.pd, wr.SGL, need); err != nil {
			return err
		}
		if inline && length > qp.cap.MaxInlineData {
			return errPostInlineLen
		}
	}
	switch {
	case m&wire.MaskAtomic != 0:
		if length != 8 {
			return errPostAtomicLen
		}
		if wr.RemoteAddr&7 != 0 {
			return errPostAtomicAlign
		}
	case qp.typ == qpattr.UD || qp.typ == qpattr.GSI:
		if wr.AH == nil {
			return errPostNoAH
		}
		if wr.AH.pd != qp.pd {
			return errPostAHPD
		}
		if wr.AH.dead.Load() {
			return errPostAHClosed
		}
		if wr.RemoteQPN > wire.PSNMask {
			return errPostRemoteQPN
		}
	}
	w.start(wr)
	w.length = length
	w.imm = wr.ImmData
	w.compareAdd = wr.CompareAdd
	w.swap = wr.Swap
	w.dma = dmaCursor{resid: length}
	if wr.AH != nil && !qp.typ.Connected() {
		w.ah = wr.AH
		w.rt = wr.AH.rt.Load() // nil while resolving: the requester waits
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
				at := len(w.inline)
				w.inline = slices.Grow(w.inline, int(s.Length))[:at+int(s.Length)]
				if f := d.mrs.Copy(s.LKey, qp.pd.handle, s.Addr, w.inline[at:], 0, mr.Local, false); f != mr.FaultNone {
					return lookupFault(f) // deregistered since checkSGL
				}
			}
		}
	} else {
		w.sgl = append(w.sgl, wr.SGL...)
	}
	return nil
}

// start empties slot w for wr, keeping its buffers, and copies what every WR has.
func (w *sendWQE) start(wr *SendWR) {
	*w = sendWQE{sgl: w.sgl[:0], inline: w.inline[:0]}
	w.wrid, w.opcode, w.flags = wr.WRID, wr.Opcode, wr.Flags
	w.mask = wrOpcodes.mask(wr.Opcode)
	w.local = wrOpcodes[wr.Opcode].local
	w.invRKey = wr.InvalidateRKey
	w.remoteAddr, w.iova, w.rkey = wr.RemoteAddr, wr.RemoteAddr, wr.RKey
}

// fillOtherWQE fills a slot for the WRs that carry no SGL: the local operations
// (their objects are checked here, their rules when the requester executes them,
// as rxe_do_local_ops does), FLUSH and ATOMIC WRITE.
func (qp *QP) fillOtherWQE(w *sendWQE, wr *SendWR, bind1 bool) error {
	if len(wr.SGL) > 0 || wr.InlineData != nil || wr.Flags&SendInline != 0 {
		return errPostLocalData
	}
	switch wr.Opcode {
	case WRBindMW:
		switch {
		case wr.MW == nil || wr.MW.pd.d != qp.d:
			return errPostNoMW
		case wr.MW.w.Type() == mr.Type1 && !bind1:
			return errPostBindType1
		case wr.Bind.MR != nil && wr.Bind.MR.pd.d != qp.d:
			return errPostBindMR
		}
	case WRRegMR:
		if wr.MR == nil || wr.MR.pd.d != qp.d || !wr.MR.r.FastReg() {
			return errPostNoMR
		}
	case WRFlush:
		if wr.FlushType == 0 || wr.FlushType&^(FlushGlobal|FlushPersistent) != 0 || wr.FlushLevel > FlushMR {
			return errPostFlush
		}
	case WRAtomicWrite:
		if wr.RemoteAddr&7 != 0 {
			return errPostAtomicAlign
		}
	}
	w.start(wr)
	w.flushLen = wr.FlushLen
	w.flushType = wr.FlushType
	w.flushLevel = wr.FlushLevel
	w.mw, w.mr, w.key, w.access, w.bind = wr.MW, wr.MR, wr.Key, wr.Access, wr.Bind
	if wr.Opcode == WRAtomicWrite {
		// The payload, like inline data: copied now, sent from the WQE.
		w.isInline = true
		w.inline = append(w.inline, wr.AtomicData[:]...)
		w.length = mr.AtomicLen
		w.dma = dmaCursor{resid: mr.AtomicLen}
	}
	return nil
}

// PostRecv posts receive work requests (ibv_post_recv); n and err as PostSend.
func (qp *QP) PostRecv(wrs []RecvWR) (n int, err error) {
	if qp.srq != nil {
		return 0, errPostRecvSRQ
	}
	qp.recvQ.mu.Lock()
	st := qp.pubState.Load()
	prod := qp.recvQ.prod.Load()
	for n = range wrs {
		wr := &wrs[n]
		switch {
		case st == stateDestroyed:
			err = errPostClosed
		case !qpattr.CanPostRecv(qpattr.State(st)):
			err = errPostRecvState
		case prod-qp.recvQ.cons.Load() >= qp.recvQ.cap:
			err = errPostRecvFull
		case len(wr.SGL) > int(qp.cap.MaxRecvSGE):
			err = errPostSGEs
		}
		if err != nil {
			break
		}
		if err = qp.d.fillRecvWQE(qp.pd, &qp.recvSlots[prod&qp.recvQ.mask], wr); err != nil {
			break
		}
		prod++
		qp.recvQ.prod.Store(prod)
	}
	if err == nil {
		n = len(wrs)
	}
	qp.recvQ.mu.Unlock()
	if n > 0 && qpattr.State(st) == qpattr.Err {
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
