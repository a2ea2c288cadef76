package server

import (
	"encoding/binary"
	"errors"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
)

// The session is a poller of the device's engine: the engine goroutine
// moves the work requests the process put on its rings to the device, and the
// device's completions to the process's CQ rings, in its own loop (run to
// completion: no goroutine of the session's in between). Before the engine
// sleeps, Idle sets RingNeedWakeup on every ring the session consumes and
// looks once more, so that nothing posted in between waits (the AF_XDP
// need_wakeup protocol); the process's doorbell then wakes the engine.

// Poll implements verbs.Poller.
func (ss *session) Poll() bool { return ss.pass() }

// Idle implements verbs.Poller.
func (ss *session) Idle(sleeping bool) bool {
	ss.mu.Lock()
	for _, q := range ss.qps {
		if !q.dying {
			q.sq.SetNeedWakeup(sleeping)
			if q.rq != nil {
				q.rq.ring.SetNeedWakeup(sleeping)
			}
		}
	}
	for _, s := range ss.srqs {
		if !s.dying {
			s.rq.ring.SetNeedWakeup(sleeping)
		}
	}
	ss.mu.Unlock()
	return sleeping && ss.pass()
}

// pass does one round over the session's rings; it reports whether it moved
// anything.
func (ss *session) pass() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	moved := false
	for _, q := range ss.qps {
		if q.dying || q.broken {
			continue
		}
		if ss.postSends(q) {
			moved = true
		}
		if ss.postRecvs(q) {
			moved = true
		}
	}
	for _, s := range ss.srqs {
		if !s.dying && !s.broken && ss.postSRQ(s) {
			moved = true
		}
	}
	for _, c := range ss.cqs {
		if !c.dying && !c.broken && ss.complete(c) {
			moved = true
		}
	}
	return moved
}

// postSends hands the send ring's WRs to the device, a batch at a time. A
// WR the device refuses completes with IBV_WC_LOC_QP_OP_ERR on the send CQ's
// ring and moves the QP to the error state (its later WRs flush): nothing
// posted is lost. A full device queue leaves the rest on the ring.
func (ss *session) postSends(q *qpObj) bool {
	avail, err := q.sq.Available()
	if err != nil {
		ss.breakQP(q, err)
		return false
	}
	if avail == 0 {
		return false
	}
	n := min(avail, batch)
	for k := range n {
		e := q.sq.Entry(k) // within avail: the client's index is read once
		if err := ss.sendWR(q, e, k); err != nil {
			if k == 0 {
				ss.refuse(q, e, err)
				return true
			}
			n = k
			break
		}
	}
	posted, err := q.qp.PostSend(q.wrs[:n])
	q.sq.Release(posted)
	for k := range n {
		q.wrs[k] = verbs.SendWR{SGL: q.wrs[k].SGL[:0]} // drop references into the ring and to AHs
	}
	// ErrQueueFull leaves the rest on the ring until completions make room
	// (the engine retries in its loops as completions come).
	if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
		ss.refuse(q, q.sq.Entry(0), err) // posted < n: still within avail
	}
	return posted > 0
}

// sendWR decodes a send ring entry into the batch's k-th WR. The entry is
// the client's memory: every field is read once, and bounded before use.
func (ss *session) sendWR(q *qpObj, e []byte, k int) error {
	w := &q.wrs[k]
	var h shm.SendWQE
	shm.GetSendWQE(e, &h)
	*w = verbs.SendWR{WRID: h.WRID, Opcode: verbs.WROpcode(h.Opcode), Flags: verbs.SendFlags(h.Flags),
		RemoteAddr: h.RemoteAddr, RKey: h.RKey, CompareAdd: h.CompareAdd, Swap: h.Swap,
		RemoteQPN: h.RemoteQPN, RemoteQKey: h.RemoteQKey, SGL: w.SGL[:0]}
	w.ImmData = binary.BigEndian.Uint32(h.Imm[:])
	w.InvalidateRKey = binary.LittleEndian.Uint32(h.Imm[:])
	if w.Opcode == verbs.WRAtomicWrite {
		binary.LittleEndian.PutUint64(w.AtomicData[:], h.Swap) // swap's 8 bytes as the process gave them
	}
	if w.Flags&verbs.SendInline != 0 && (w.Opcode == verbs.WRSend || w.Opcode == verbs.WRSendWithImm ||
		w.Opcode == verbs.WRSendWithInv || w.Opcode == verbs.WRRDMAWrite || w.Opcode == verbs.WRRDMAWriteWithImm) {
		if int(h.NumSGE) > q.inline {
			return errBadWQE
		}
		w.InlineData = shm.SendTail(e)[:h.NumSGE]
	} else {
		sgl, err := readSGL(shm.SendTail(e), h.NumSGE, q.scratch, q.sgls[k])
		if err != nil {
			return err
		}
		w.SGL = sgl
	}
	if q.typ == verbs.UD {
		o, err := ss.lookup(attach.KindAH, h.AH)
		if err != nil {
			return errBadWQE
		}
		w.AH = o.(*ahObj).ah
	}
	return nil
}

var errBadWQE = errors.New("malformed work request")

// readSGL decodes an entry's n SGEs from its tail into dst, whose capacity is
// the queue's SGE limit (the client's entry is read once, and bounded first).
func readSGL(tail []byte, n uint32, scratch []shm.SGE, dst []verbs.SGE) ([]verbs.SGE, error) {
	if int(n) > cap(dst) || shm.GetSGEs(tail, int(n), scratch) != nil {
		return nil, errBadWQE
	}
	dst = dst[:n]
	for i := range dst {
		s := scratch[i]
		dst[i] = verbs.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
	}
	return dst, nil
}

// toError moves a QP to the error state (without waiting: the engine's
// goroutine runs this), which flushes what is posted.
func toError(q *qpObj) {
	q.qp.Modify(&verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSErr}}, verbs.AttrState)
}

// refuse completes the WR at the head of the send ring in error and takes it
// off the ring; the QP goes to the error state, which flushes the rest. The
// status is the one a device that checks at execution gives (rxe, hardware):
// a key, PD, range or access fault is IBV_WC_LOC_PROT_ERR, a message too long
// IBV_WC_LOC_LEN_ERR, anything else IBV_WC_LOC_QP_OP_ERR.
func (ss *session) refuse(q *qpObj, e []byte, why error) {
	var h shm.SendWQE
	shm.GetSendWQE(e, &h)
	q.sq.Release(1)
	q.errorWRs++
	st := verbs.WCLocQPOpErr
	switch {
	case errors.Is(why, verbs.ErrBadLKey), errors.Is(why, verbs.ErrWrongPD), errors.Is(why, verbs.ErrSGERange),
		errors.Is(why, verbs.ErrAccess):
		st = verbs.WCLocProtErr
	case errors.Is(why, verbs.ErrLimit):
		st = verbs.WCLocLenErr
	}
	if !q.sendCQ.addPending(shm.CQE{WRID: h.WRID, Status: uint32(st), Opcode: wcOpcode(h.Opcode), QPN: q.qp.QPN()}) &&
		!q.sendCQ.overrun {
		q.sendCQ.overrun = true
		ss.logf("CQ %d: overrun: completions of refused WRs are lost", q.sendCQ.handle)
	}
	toError(q)
}

// addPending queues a completion the pump made, unless more wait already than
// the CQ holds: then the client does not poll, its CQ has overrun as a
// device's would, and e is lost (false). Its storage stays within twice the
// CQ's size: a client that polls a little at a time never lets pending empty,
// so what went is dropped from the front before it could grow with every
// refusal.
func (c *cqObj) addPending(e shm.CQE) bool {
	if len(c.pending)-c.pendHead >= c.ring.Len() {
		return false
	}
	if c.pendHead > 0 && c.pendHead >= len(c.pending)/2 {
		n := copy(c.pending, c.pending[c.pendHead:])
		c.pending, c.pendHead = c.pending[:n], 0
	}
	c.pending = append(c.pending, e)
	return true
}

// wcOpcode is the completion opcode of a send WR opcode (as
// ibv_wc_opcode numbers them).
func wcOpcode(op uint32) uint32 {
	switch verbs.WROpcode(op) {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return uint32(verbs.WCRDMAWrite)
	case verbs.WRRDMARead:
		return uint32(verbs.WCRDMARead)
	case verbs.WRAtomicCmpSwp:
		return uint32(verbs.WCCompSwap)
	case verbs.WRAtomicFetchAdd:
		return uint32(verbs.WCFetchAdd)
	}
	return uint32(verbs.WCSend)
}

// recvRing is a receive ring (a QP's or an SRQ's) and what the pump needs to
// hand its entries to the device without allocating.
type recvRing struct {
	ring    *shm.Ring
	wrs     []verbs.RecvWR
	sgls    [][]verbs.SGE
	scratch []shm.SGE
}

func newRecvRing(ring *shm.Ring, maxSGE int) *recvRing {
	r := &recvRing{ring: ring, wrs: make([]verbs.RecvWR, batch), sgls: make([][]verbs.SGE, batch),
		scratch: make([]shm.SGE, maxSGE)}
	for i := range r.sgls {
		r.sgls[i] = make([]verbs.SGE, maxSGE)
	}
	return r
}

// drain hands every receive WR on the ring to post, a batch at a time, until
// the ring is empty or the device's queue full. Every one, not a batch: the
// engine takes up to a batch of frames after each pass, and a UD message
// that finds a receive still on the ring is dropped (rxe's receive queue is
// the posted one: a receive posted before the message arrived takes it).
// A corrupted index, a
// malformed entry (more SGEs than the queue takes) or a device error other
// than a full queue is returned: the receive side has no completion to give
// such an entry that its consumer would match.
func (r *recvRing) drain(post func([]verbs.RecvWR) (int, error)) (bool, error) {
	moved := false
	for {
		avail, err := r.ring.Available()
		if err != nil || avail == 0 {
			return moved, err
		}
		n := min(avail, batch)
		for k := range n {
			e := r.ring.Entry(k)
			wrid, nsge := shm.GetRecvWQE(e)
			sgl, err := readSGL(shm.RecvTail(e), nsge, r.scratch, r.sgls[k])
			if err != nil {
				return moved, err
			}
			r.wrs[k] = verbs.RecvWR{WRID: wrid, SGL: sgl}
		}
		posted, err := post(r.wrs[:n])
		r.ring.Release(posted)
		moved = moved || posted > 0
		if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
			return moved, err
		}
		if posted < n {
			return moved, nil // the device's queue is full
		}
	}
}

// postRecvs drains a QP's receive ring; a bad one puts the QP in error.
func (ss *session) postRecvs(q *qpObj) bool {
	if q.rq == nil { // an SRQ's
		return false
	}
	moved, err := q.rq.drain(q.qp.PostRecv)
	if err != nil {
		ss.breakQP(q, err)
	}
	return moved
}

// postSRQ drains an SRQ's ring; a bad one stops it (its QPs get no more
// receives from it).
func (ss *session) postSRQ(s *srqObj) bool {
	moved, err := s.rq.drain(s.srq.PostRecv)
	if err != nil {
		ss.logf("SRQ %d: %v: no more receives taken from it", s.handle, err)
		s.broken = true
	}
	return moved
}

// breakQP puts a QP whose rings the client corrupted in the error state; the
// pump stops reading them. The caller holds mu.
func (ss *session) breakQP(q *qpObj, err error) {
	if !q.broken {
		ss.logf("QP %d: %v: moved to the error state", q.handle, err)
	}
	q.broken = true
	toError(q)
}

// complete moves the device CQ's completions into the ring, as many as it has
// room for, and signals the completion channel if the client armed the ring.
func (ss *session) complete(c *cqObj) bool {
	free, err := c.ring.Free()
	if err != nil {
		ss.logf("CQ %d: %v: no more completions go to it", c.handle, err)
		c.broken = true
		return false
	}
	k := 0
	for c.pendHead < len(c.pending) && k < free {
		e := c.ring.Entry(k) // within free: the client's index is read once
		shm.PutCQE(e, &c.pending[c.pendHead])
		c.pendHead++
		k++
	}
	if c.pendHead == len(c.pending) { // keep the array for the next
		c.pending, c.pendHead = c.pending[:0], 0
	}
	n := 0
	if k < free {
		n = c.cq.Poll(c.wcs[:min(free-k, len(c.wcs))])
	}
	for i := range n {
		putWC(c.ring.Entry(k+i), &c.wcs[i])
	}
	if k+n == 0 {
		return false
	}
	c.ring.Commit(k + n)
	if c.ring.Armed() != 0 {
		c.ring.Disarm()
		c.ring.Notified()
		if c.ch != nil {
			c.ch.signal()
		}
	}
	return true
}

func putWC(e []byte, wc *verbs.WC) {
	c := shm.CQE{WRID: wc.WRID, Status: uint32(wc.Status), Opcode: uint32(wc.Opcode), VendorErr: wc.VendorErr,
		ByteLen: wc.ByteLen, QPN: wc.QPN, SrcQP: wc.SrcQP, Flags: uint32(wc.Flags), PKeyIndex: wc.PKeyIndex,
		SLID: wc.SLID, SL: wc.SL, DLIDPathBits: wc.DLIDPathBits}
	if wc.Flags&verbs.WCWithInv != 0 {
		binary.LittleEndian.PutUint32(c.Imm[:], wc.InvalidatedRKey)
	} else {
		binary.BigEndian.PutUint32(c.Imm[:], wc.ImmData)
	}
	shm.PutCQE(e, &c)
}
