package server

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/conv"
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
)

// obj is a session's object: close destroys it on the device (and may refuse,
// EBUSY); release then frees the memory and descriptors it held.
type obj interface {
	base() *objBase
	close() error
	release()
}

type objBase struct {
	kind   uint32
	handle uint32
	shm    int  // bytes of rings, charged to the session
	mapped int  // bytes of the process's memory mapped (a region), charged to the session
	dying  bool // being destroyed: the pump leaves it alone
	ss     *session
}

func (b *objBase) base() *objBase { return b }

type pdObj struct {
	objBase
	pd *verbs.PD
}

func (o *pdObj) close() error { return o.pd.Dealloc().Wait() }
func (o *pdObj) release()     {}

type mrObj struct {
	objBase
	mr  *verbs.MR
	mem *shm.Region
}

func (o *mrObj) close() error { return o.mr.Dereg().Wait() }
func (o *mrObj) release()     { o.mem.Close() }

// chanObj is a completion channel: a pipe the daemon writes when an armed CQ
// of the channel gets a completion. The process holds the read end alone: a
// description of its own, whose flags (O_NONBLOCK) are its business, as the
// fd of libibverbs' channel is (an eventfd shared with the daemon would let the
// process block the daemon's write, internal/wakeup).
type chanObj struct {
	objBase
	w     int // the write end, non-blocking
	users int // CQs on it (the session's mu)
}

// close refuses while CQs use the channel (ibv_destroy_comp_channel: EBUSY):
// closed, its descriptor number would be reused by the next thing the daemon
// opens, maybe another process's CQ ring, and a CQ's notification would write
// there. A CQ being created on it fails once destroy has marked it dying (add).
func (o *chanObj) close() error {
	o.ss.mu.Lock()
	defer o.ss.mu.Unlock()
	if o.users > 0 {
		return fmt.Errorf("%w: %d CQs use the completion channel", verbs.ErrBusy, o.users)
	}
	return nil
}

func (o *chanObj) release() { unix.Close(o.w) }

var oneByte = [1]byte{1}

func (o *chanObj) signal() {
	_, _ = unix.Write(o.w, oneByte[:]) // EAGAIN: full, readable already
}

type ahObj struct {
	objBase
	ah *verbs.AH
}

func (o *ahObj) close() error { return o.ah.Destroy().Wait() }
func (o *ahObj) release()     {}

func (ss *session) allocPD() (any, int, error) {
	pd, err := ss.srv.dev.AllocPD()
	if err != nil {
		return nil, -1, err
	}
	o := &pdObj{objBase: objBase{kind: attach.KindPD}, pd: pd}
	h, err := ss.add(o, 0)
	if err != nil {
		pd.Dealloc()
		return nil, -1, err
	}
	return &attach.HandleRep{Handle: h}, -1, nil
}

func (ss *session) regMR(req *attach.RegMRReq, fd int) (any, int, error) {
	pd, err := ref[*pdObj](ss, attach.KindPD, req.PD)
	if err != nil {
		unix.Close(fd)
		return nil, -1, err
	}
	ss.mu.Lock()
	room := ss.srv.cfg.MaxMapped - ss.mapped
	ss.mu.Unlock()
	mem, buf, err := regionFor(fd, req.FileOff, req.Length, uint64(max(room, 0)))
	if err != nil {
		return nil, -1, err
	}
	m, err := pd.pd.RegMR(buf, req.Addr, verbs.Access(req.Access))
	if err != nil {
		mem.Close()
		return nil, -1, err
	}
	o := &mrObj{objBase: objBase{kind: attach.KindMR, mapped: len(mem.Bytes())}, mr: m, mem: mem}
	h, err := ss.add(o, 0)
	if err != nil {
		m.Dereg().Wait()
		mem.Close()
		return nil, -1, err
	}
	return &attach.RegMRRep{Handle: h, LKey: m.LKey(), RKey: m.RKey()}, -1, nil
}

func (ss *session) createChannel() (any, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, -1, err
	}
	// One page, not sixteen: a process that arms a channel and never reads
	// it pins that much of the daemon's kernel memory (best effort).
	_, _ = unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, 4096)
	// The process's end blocks, as a libibverbs channel's fd does until the
	// process sets O_NONBLOCK on it.
	if err := unix.SetNonblock(p[0], false); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, err
	}
	o := &chanObj{objBase: objBase{kind: attach.KindCompChannel, ss: ss}, w: p[1]}
	h, err := ss.add(o, 0)
	if err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, err
	}
	ss.closeAfterReply = append(ss.closeAfterReply, p[0])
	return &attach.HandleRep{Handle: h}, p[0], nil
}

func (ss *session) createAH(req *attach.CreateAHReq) (any, int, error) {
	pd, err := ref[*pdObj](ss, attach.KindPD, req.PD)
	if err != nil {
		return nil, -1, err
	}
	ah, err := pd.pd.CreateAH(conv.VerbsAV(req.AV))
	if err != nil {
		return nil, -1, err
	}
	o := &ahObj{objBase: objBase{kind: attach.KindAH}, ah: ah}
	h, err := ss.add(o, 0)
	if err != nil {
		ah.Destroy()
		return nil, -1, err
	}
	return &attach.HandleRep{Handle: h}, -1, nil
}

// cqObj is a CQ and its ring: the pump moves the device CQ's completions into
// the ring, which the client polls.
type cqObj struct {
	objBase
	cq   *verbs.CQ
	mem  *shm.Region
	ring *shm.Ring
	ch   *chanObj
	wcs  []verbs.WC
	// pending are completions the pump made itself (a WR the device
	// refused), ahead of the device CQ's.
	pending  []shm.CQE
	pendHead int  // pending[pendHead:] are still to go; at most the ring's length
	overrun  bool // pending was full once (logged)
	broken   bool // the client corrupted the ring's index
}

func (o *cqObj) close() error { return o.cq.Destroy().Wait() }
func (o *cqObj) release()     { o.mem.Close() }

func (ss *session) createCQ(req *attach.CreateCQReq) (any, int, error) {
	max := ss.srv.dev.Query().MaxCQE
	if req.CQE == 0 || int(req.CQE) > max {
		return nil, -1, fmt.Errorf("%w: %d CQEs (1 to %d)", verbs.ErrInvalid, req.CQE, max)
	}
	var ch *chanObj
	if req.Channel != 0 {
		var err error
		if ch, err = ref[*chanObj](ss, attach.KindCompChannel, req.Channel); err != nil {
			return nil, -1, err
		}
	}
	n := pow2(req.CQE)
	size := shm.RingSize(n, shm.CQEntrySize)
	if err := ss.checkShm(size); err != nil {
		return nil, -1, err
	}
	mem, err := shm.Create("xrnic-cq", size)
	if err != nil {
		return nil, -1, err
	}
	ring, err := shm.NewRing(mem.Bytes(), 0, n, shm.CQEntrySize, true)
	if err != nil {
		mem.Close()
		return nil, -1, err
	}
	o := &cqObj{objBase: objBase{kind: attach.KindCQ, ss: ss}, mem: mem, ring: ring, ch: ch, wcs: make([]verbs.WC, 32)}
	// The device CQ holds what the ring has no room for yet; the engine
	// moves the rest in its loop (Poll), so no handler.
	c, err := ss.srv.dev.CreateCQ(n, verbs.CQOptions{Context: o})
	if err != nil {
		mem.Close()
		return nil, -1, err
	}
	o.cq = c
	h, err := ss.add(o, size)
	if err != nil {
		c.Destroy().Wait()
		mem.Close()
		return nil, -1, err
	}
	return &attach.CreateCQRep{Handle: h, CQN: uint32(h), Entries: uint32(n)}, mem.FD(), nil
}

func (ss *session) checkShm(n int) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.shm+n > ss.srv.cfg.MaxShm {
		return fmt.Errorf("%w: %d + %d bytes", errShmLimit, ss.shm, n)
	}
	return nil
}

// qpObj is a QP and its rings: the pump posts what the client put on them.
type qpObj struct {
	objBase
	qp       *verbs.QP
	typ      verbs.QPType
	mem      *shm.Region
	sq       *shm.Ring
	rq       *recvRing // nil with an SRQ
	inline   int
	wrs      []verbs.SendWR
	sgls     [][]verbs.SGE
	scratch  []shm.SGE
	broken   bool // the client corrupted a ring's index: the QP is in error
	sendCQ   *cqObj
	recvCQ   *cqObj
	errorWRs int // WRs completed in error by the pump (refused by the device)
}

func (o *qpObj) close() error { return o.qp.Destroy().Wait() }
func (o *qpObj) release()     { o.mem.Close() }

// batch is how many WRs the pump hands the device at once.
const batch = 16

func (ss *session) createQP(req *attach.CreateQPReq) (any, int, error) {
	ss.mu.Lock()
	pdo, err1 := ss.lookup(attach.KindPD, req.PD)
	scq, err2 := ss.lookup(attach.KindCQ, req.SendCQ)
	rcq, err3 := ss.lookup(attach.KindCQ, req.RecvCQ)
	var srq *verbs.SRQ
	var err4 error
	if req.SRQ != 0 {
		var so obj
		if so, err4 = ss.lookup(attach.KindSRQ, req.SRQ); err4 == nil {
			srq = so.(*srqObj).srq
		}
	}
	ss.mu.Unlock()
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return nil, -1, refErr(err)
		}
	}
	o := &qpObj{objBase: objBase{kind: attach.KindQP, ss: ss}, typ: verbs.QPType(req.Type),
		sendCQ: scq.(*cqObj), recvCQ: rcq.(*cqObj)}
	qp, err := pdo.(*pdObj).pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPType(req.Type),
		SendCQ: o.sendCQ.cq, RecvCQ: o.recvCQ.cq, SRQ: srq, SigAll: req.SigAll != 0, Context: o,
		Cap: verbs.QPCap{MaxSendWR: req.MaxSendWR, MaxRecvWR: req.MaxRecvWR, MaxSendSGE: req.MaxSendSGE,
			MaxRecvSGE: req.MaxRecvSGE, MaxInlineData: req.MaxInline}})
	if err != nil {
		return nil, -1, err
	}
	c := qp.Cap()
	sqN, rqN := pow2(c.MaxSendWR), pow2(c.MaxRecvWR)
	sqE, rqE := shm.SendEntrySize(int(c.MaxSendSGE), int(c.MaxInlineData)), shm.RecvEntrySize(int(c.MaxRecvSGE))
	sqOff := 0
	rqOff := (shm.RingSize(sqN, sqE) + 63) &^ 63
	size := rqOff + shm.RingSize(rqN, rqE)
	if srq != nil { // receives come from the SRQ's ring
		rqN, rqE, rqOff = 0, 0, 0
		size = shm.RingSize(sqN, sqE)
	}
	if err := ss.checkShm(size); err != nil {
		qp.Destroy().Wait()
		return nil, -1, err
	}
	mem, err := shm.Create("xrnic-qp", size)
	if err != nil {
		qp.Destroy().Wait()
		return nil, -1, err
	}
	o.qp, o.mem = qp, mem
	o.sq, _ = shm.NewRing(mem.Bytes(), sqOff, sqN, sqE, false)
	if srq == nil {
		rq, _ := shm.NewRing(mem.Bytes(), rqOff, rqN, rqE, false)
		o.rq = newRecvRing(rq, int(c.MaxRecvSGE))
	}
	o.inline = int(c.MaxInlineData)
	o.wrs, o.sgls = make([]verbs.SendWR, batch), make([][]verbs.SGE, batch)
	for i := range batch {
		o.sgls[i] = make([]verbs.SGE, c.MaxSendSGE)
	}
	o.scratch = make([]shm.SGE, c.MaxSendSGE)
	h, err := ss.add(o, size)
	if err != nil {
		qp.Destroy().Wait()
		mem.Close()
		return nil, -1, err
	}
	return &attach.CreateQPRep{Handle: h, QPN: qp.QPN(), MaxSendWR: c.MaxSendWR, MaxRecvWR: c.MaxRecvWR,
		MaxSendSGE: c.MaxSendSGE, MaxRecvSGE: c.MaxRecvSGE, MaxInline: c.MaxInlineData,
		SQEntries: uint32(sqN), SQEntrySize: uint32(sqE), SQOff: uint32(sqOff),
		RQEntries: uint32(rqN), RQEntrySize: uint32(rqE), RQOff: uint32(rqOff), MemLen: uint32(size)}, mem.FD(), nil
}

// srqObj is an SRQ and its receive ring.
type srqObj struct {
	objBase
	srq    *verbs.SRQ
	mem    *shm.Region
	rq     *recvRing
	broken bool
}

func (o *srqObj) close() error { return o.srq.Destroy().Wait() }
func (o *srqObj) release() {
	o.ss.srv.srqs.Delete(o.srq)
	o.mem.Close()
}

func (ss *session) createSRQ(req *attach.CreateSRQReq) (any, int, error) {
	pd, err := ref[*pdObj](ss, attach.KindPD, req.PD)
	if err != nil {
		return nil, -1, err
	}
	srq, err := pd.pd.CreateSRQ(verbs.SRQAttr{MaxWR: req.MaxWR, MaxSGE: req.MaxSGE, Limit: req.Limit})
	if err != nil {
		return nil, -1, err
	}
	a := srq.Query()
	n, esize := pow2(a.MaxWR), shm.RecvEntrySize(int(a.MaxSGE))
	size := shm.RingSize(n, esize)
	var mem *shm.Region
	if err = ss.checkShm(size); err == nil {
		mem, err = shm.Create("xrnic-srq", size)
	}
	if err != nil {
		srq.Destroy().Wait()
		return nil, -1, err
	}
	ring, _ := shm.NewRing(mem.Bytes(), 0, n, esize, false)
	o := &srqObj{objBase: objBase{kind: attach.KindSRQ, ss: ss}, srq: srq, mem: mem, rq: newRecvRing(ring, int(a.MaxSGE))}
	h, err := ss.add(o, size)
	if err != nil {
		srq.Destroy().Wait()
		mem.Close()
		return nil, -1, err
	}
	ss.srv.srqs.Store(srq, o)
	return &attach.CreateSRQRep{Handle: h, MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, Entries: uint32(n),
		EntrySize: uint32(esize), MemLen: uint32(size)}, mem.FD(), nil
}

func (ss *session) modifyQP(req *attach.ModifyQPReq) error {
	o, err := get[*qpObj](ss, attach.KindQP, req.Handle)
	if err != nil {
		return err
	}
	attr := conv.VerbsQPAttr(&req.Attr)
	return o.qp.ModifySync(&attr, verbs.AttrMask(req.Mask))
}

func (ss *session) queryQP(h uint32) (*attach.QPAttr, error) {
	o, err := get[*qpObj](ss, attach.KindQP, h)
	if err != nil {
		return nil, err
	}
	attr, _, err := o.qp.Query()
	if err != nil {
		return nil, err
	}
	a := conv.WireQPAttr(&attr)
	return &a, nil
}
