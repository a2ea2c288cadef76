package remote

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/spin"
	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/conv"
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
)

// CompChannel is a completion channel (ibv_comp_channel): the read end of a
// pipe the daemon writes when an armed CQ of the channel gets a completion.
// Its methods are safe for concurrent use.
type CompChannel struct {
	d   *Device
	h   uint32
	efd int // f's descriptor, non-blocking (f.Fd would make it blocking)
	f   *os.File
	mu  sync.Mutex
	cq  []*CQ // the channel's CQs, for GetEvent to find which fired
}

// NewCompChannel creates a completion channel (ibv_create_comp_channel).
func (d *Device) NewCompChannel() (*CompChannel, error) {
	var rep attach.HandleRep
	fds, err := d.call(attach.OpCreateCompChannel, nil, &rep)
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		attach.CloseFDs(fds)
		return nil, fmt.Errorf("%w: %d descriptors for a channel", attach.ErrProtocol, len(fds))
	}
	// The daemon hands it over blocking, as libibverbs' is; non-blocking,
	// Go's poller waits for it and Close ends a GetEvent.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		d.destroy(attach.KindCompChannel, rep.Handle)
		return nil, err
	}
	c := &CompChannel{d: d, h: rep.Handle, efd: fds[0], f: os.NewFile(uintptr(fds[0]), "xrnic-comp-channel")}
	d.own(c.f)
	return c, nil
}

// FD is the channel's descriptor, for poll(2) or epoll (the channel's fd in
// libibverbs); it is non-blocking.
func (c *CompChannel) FD() int { return c.efd }

// GetEvent blocks until a CQ of the channel has had a completion event and
// returns those that had (ibv_get_cq_event); each must be armed again with
// ReqNotify.
func (c *CompChannel) GetEvent() ([]*CQ, error) {
	var b [64]byte
	for {
		if _, err := c.f.Read(b[:]); err != nil {
			return nil, err
		}
		c.mu.Lock()
		var fired []*CQ
		for _, q := range c.cq {
			if ev := q.ring.Events(); ev != q.seen {
				q.seen = ev
				fired = append(fired, q)
			}
		}
		c.mu.Unlock()
		if len(fired) > 0 {
			return fired, nil
		}
	}
}

// Destroy destroys the channel (ibv_destroy_comp_channel); its CQs must be
// destroyed first.
func (c *CompChannel) Destroy() error {
	if err := c.d.destroy(attach.KindCompChannel, c.h); err != nil {
		return err
	}
	return c.d.disown(c.f)
}

// CQ is a completion queue on a ring the daemon fills. Poll and ReqNotify are
// for one goroutine at a time (a CQ has one consumer, as in libibverbs
// practice); Destroy is safe from any.
type CQ struct {
	d    *Device
	h    uint32
	mem  *shm.Region
	ring *shm.Ring
	ch   *CompChannel
	seen uint32 // ring.Events() at the last GetEvent that returned it
	cqe  shm.CQE
	spin spin.Counter
}

// CreateCQ creates a CQ of at least cqe entries (ibv_create_cq), with its
// events on ch when not nil.
func (d *Device) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	req := attach.CreateCQReq{CQE: uint32(max(cqe, 0))}
	if ch != nil {
		req.Channel = ch.h
	}
	var rep attach.CreateCQRep
	fds, err := d.call(attach.OpCreateCQ, &req, &rep)
	if err != nil {
		return nil, err
	}
	q := &CQ{d: d, h: rep.Handle, ch: ch}
	if err := q.mapRing(fds, int(rep.Entries)); err != nil {
		d.destroy(attach.KindCQ, rep.Handle)
		return nil, err
	}
	if ch != nil {
		ch.mu.Lock()
		ch.cq = append(ch.cq, q)
		q.seen = q.ring.Events()
		ch.mu.Unlock()
	}
	return q, nil
}

func (q *CQ) mapRing(fds []int, n int) error {
	mem, err := q.d.mapRing(fds, shm.RingSize(n, shm.CQEntrySize))
	if err != nil {
		return err
	}
	ring, err := shm.NewRing(mem.Bytes(), 0, n, shm.CQEntrySize, false)
	if err != nil {
		q.d.disown(mem)
		return err
	}
	q.mem, q.ring = mem, ring
	return nil
}

// Poll takes up to len(wcs) completions (ibv_poll_cq) without a system call,
// but for a yield of the CPU in each run of spin.Every polls that find
// nothing (internal/spin: the daemon's engine thread may be waiting for this
// CPU). A ring whose index the daemon could not have written is ErrCorrupt.
func (q *CQ) Poll(wcs []verbs.WC) (int, error) {
	avail, err := q.ring.Available()
	if err != nil {
		return 0, err
	}
	n := min(avail, len(wcs))
	for i := range n {
		e, _ := q.ring.Peek(i)
		shm.GetCQE(e, &q.cqe)
		c := &q.cqe
		wcs[i] = verbs.WC{WRID: c.WRID, Status: verbs.WCStatus(c.Status), Opcode: verbs.WCOpcode(c.Opcode),
			VendorErr: c.VendorErr, ByteLen: c.ByteLen, QPN: c.QPN, SrcQP: c.SrcQP, Flags: verbs.WCFlags(c.Flags),
			PKeyIndex: c.PKeyIndex, SLID: c.SLID, SL: c.SL, DLIDPathBits: c.DLIDPathBits}
		if wcs[i].Flags&verbs.WCWithInv != 0 {
			wcs[i].InvalidatedRKey = binary.LittleEndian.Uint32(c.Imm[:])
		} else {
			wcs[i].ImmData = binary.BigEndian.Uint32(c.Imm[:])
		}
	}
	if n > 0 {
		q.ring.Release(n)
		q.spin.Found()
	} else {
		q.spin.Idle()
	}
	return n, nil
}

// Len is how many completions wait on the ring (0 for a corrupted one).
func (q *CQ) Len() int {
	n, _ := q.ring.Available()
	return n
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion signals its
// channel. A completion already on the ring when it arms may or may not
// signal: poll after arming, as libibverbs' consumers do.
func (q *CQ) ReqNotify(solicitedOnly bool) {
	if solicitedOnly {
		q.ring.Arm(shm.ArmSolicited)
	} else {
		q.ring.Arm(shm.ArmNext)
	}
	// The daemon may be asleep with completions waiting for room: the
	// doorbell makes it look.
	q.d.ring()
}

// Destroy destroys the CQ (ibv_destroy_cq): EBUSY while QPs use it.
func (q *CQ) Destroy() error {
	if err := q.d.destroy(attach.KindCQ, q.h); err != nil {
		return err
	}
	if q.ch != nil {
		q.ch.mu.Lock()
		for i, x := range q.ch.cq {
			if x == q {
				q.ch.cq = append(q.ch.cq[:i], q.ch.cq[i+1:]...)
				break
			}
		}
		q.ch.mu.Unlock()
	}
	return q.d.disown(q.mem)
}

// QPInitAttr is struct ibv_qp_init_attr with this package's CQs and SRQ.
type QPInitAttr struct {
	Type           verbs.QPType
	SendCQ, RecvCQ *CQ
	SRQ            *SRQ // optional: receives come from it
	Cap            verbs.QPCap
	SigAll         bool
}

// SRQ is a shared receive queue on a ring the daemon drains. PostRecv is safe
// for concurrent use.
type SRQ struct {
	pd  *PD
	h   uint32
	mem *shm.Region
	rq  recvQueue
}

// CreateSRQ creates an SRQ (ibv_create_srq).
func (p *PD) CreateSRQ(a verbs.SRQAttr) (*SRQ, error) {
	var rep attach.CreateSRQRep
	fds, err := p.d.call(attach.OpCreateSRQ, &attach.CreateSRQReq{PD: p.h, MaxWR: a.MaxWR, MaxSGE: a.MaxSGE,
		Limit: a.Limit}, &rep)
	if err != nil {
		return nil, err
	}
	s := &SRQ{pd: p, h: rep.Handle}
	mem, err := p.d.mapRing(fds, int(rep.MemLen))
	if err == nil {
		var r *shm.Ring
		if r, err = shm.NewRing(mem.Bytes(), 0, int(rep.Entries), int(rep.EntrySize), true); err == nil {
			s.mem, s.rq = mem, recvQueue{d: p.d, ring: r, sges: make([]shm.SGE, rep.MaxSGE)}
			return s, nil
		}
		p.d.disown(mem)
	}
	p.d.destroy(attach.KindSRQ, rep.Handle)
	return nil, err
}

// PostRecv puts wrs on the SRQ's ring (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) (int, error) { return s.rq.post(wrs) }

// Modify arms the SRQ's limit (ibv_modify_srq).
func (s *SRQ) Modify(a verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	_, err := s.pd.d.call(attach.OpModifySRQ, &attach.ModifySRQReq{Handle: s.h, Mask: uint32(mask), MaxWR: a.MaxWR,
		Limit: a.Limit}, nil)
	return err
}

// Query returns the SRQ's attributes (ibv_query_srq): Limit is the limit
// armed, 0 once its event fired (rxe_query_srq).
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	var r attach.QuerySRQRep
	if _, err := s.pd.d.call(attach.OpQuerySRQ, &attach.DestroyReq{Kind: attach.KindSRQ, Handle: s.h}, &r); err != nil {
		return verbs.SRQAttr{}, err
	}
	return verbs.SRQAttr{MaxWR: r.MaxWR, MaxSGE: r.MaxSGE, Limit: r.Limit}, nil
}

// Destroy destroys the SRQ (ibv_destroy_srq): EBUSY while QPs use it.
func (s *SRQ) Destroy() error {
	if err := s.pd.d.destroy(attach.KindSRQ, s.h); err != nil {
		return err
	}
	return s.pd.d.disown(s.mem)
}

// recvQueue is the producer side of a receive ring (a QP's or an SRQ's).
type recvQueue struct {
	d    *Device
	mu   sync.Mutex
	ring *shm.Ring
	sges []shm.SGE
}

func (q *recvQueue) post(wrs []verbs.RecvWR) (n int, err error) {
	if q.ring == nil {
		return 0, errSRQPost
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for n = range wrs {
		e, err := q.ring.Reserve(n)
		if err != nil || e == nil {
			if err == nil {
				err = verbs.ErrQueueFull
			}
			q.d.publish(q.ring, n)
			return n, err
		}
		w := &wrs[n]
		if len(w.SGL) > len(q.sges) {
			q.d.publish(q.ring, n)
			return n, errSGEs
		}
		for i, s := range w.SGL {
			q.sges[i] = shm.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
		}
		_ = shm.PutRecvWQE(e, w.WRID, q.sges[:len(w.SGL)])
	}
	q.d.publish(q.ring, len(wrs))
	return len(wrs), nil
}

// QP is a queue pair whose send and receive queues are rings the daemon
// drains. PostSend and PostRecv are safe for concurrent use (each queue has
// its own lock; no lock is shared with other QPs).
type QP struct {
	pd   *PD
	h    uint32
	qpn  uint32
	typ  verbs.QPType
	cap  verbs.QPCap
	mem  *shm.Region
	sqMu sync.Mutex
	sq   *shm.Ring
	rq   recvQueue // no ring with an SRQ
	sges []shm.SGE
	wqe  shm.SendWQE
}

// CreateQP creates a QP (ibv_create_qp).
func (p *PD) CreateQP(a QPInitAttr) (*QP, error) {
	if a.SendCQ == nil || a.RecvCQ == nil {
		return nil, fmt.Errorf("%w: a QP needs its CQs", verbs.ErrInvalid)
	}
	req := attach.CreateQPReq{PD: p.h, Type: uint32(a.Type), SendCQ: a.SendCQ.h, RecvCQ: a.RecvCQ.h,
		SRQ:       srqHandle(a.SRQ),
		MaxSendWR: a.Cap.MaxSendWR, MaxRecvWR: a.Cap.MaxRecvWR, MaxSendSGE: a.Cap.MaxSendSGE,
		MaxRecvSGE: a.Cap.MaxRecvSGE, MaxInline: a.Cap.MaxInlineData}
	if a.SigAll {
		req.SigAll = 1
	}
	var rep attach.CreateQPRep
	fds, err := p.d.call(attach.OpCreateQP, &req, &rep)
	if err != nil {
		return nil, err
	}
	q := &QP{pd: p, h: rep.Handle, qpn: rep.QPN, typ: a.Type,
		cap: verbs.QPCap{MaxSendWR: rep.MaxSendWR, MaxRecvWR: rep.MaxRecvWR, MaxSendSGE: rep.MaxSendSGE,
			MaxRecvSGE: rep.MaxRecvSGE, MaxInlineData: rep.MaxInline}}
	if err := q.mapRings(fds, &rep); err != nil {
		p.d.destroy(attach.KindQP, rep.Handle)
		return nil, err
	}
	q.sges = make([]shm.SGE, rep.MaxSendSGE)
	return q, nil
}

func srqHandle(s *SRQ) uint32 {
	if s == nil {
		return 0
	}
	return s.h
}

func (q *QP) mapRings(fds []int, r *attach.CreateQPRep) error {
	mem, err := q.pd.d.mapRing(fds, int(r.MemLen))
	if err != nil {
		return err
	}
	sq, err := shm.NewRing(mem.Bytes(), int(r.SQOff), int(r.SQEntries), int(r.SQEntrySize), true)
	q.rq = recvQueue{d: q.pd.d}
	if err == nil && r.RQEntries > 0 {
		q.rq.sges = make([]shm.SGE, r.MaxRecvSGE)
		q.rq.ring, err = shm.NewRing(mem.Bytes(), int(r.RQOff), int(r.RQEntries), int(r.RQEntrySize), true)
	}
	if err != nil {
		q.pd.d.disown(mem)
		return err
	}
	q.mem, q.sq = mem, sq
	return nil
}

func (q *QP) QPN() uint32        { return q.qpn }
func (q *QP) Type() verbs.QPType { return q.typ }
func (q *QP) Cap() verbs.QPCap   { return q.cap }

// Modify changes the QP's attributes (ibv_modify_qp); the daemon applies them
// before it answers.
func (q *QP) Modify(a *verbs.QPAttr, mask verbs.AttrMask) error {
	req := attach.ModifyQPReq{Handle: q.h, Mask: uint32(mask), Attr: conv.WireQPAttr(a)}
	_, err := q.pd.d.call(attach.OpModifyQP, &req, nil)
	return err
}

// Query returns the QP's attributes (ibv_query_qp).
func (q *QP) Query() (verbs.QPAttr, error) {
	var r attach.QPAttr
	if _, err := q.pd.d.call(attach.OpQueryQP, &attach.DestroyReq{Kind: attach.KindQP, Handle: q.h}, &r); err != nil {
		return verbs.QPAttr{}, err
	}
	return conv.VerbsQPAttr(&r), nil
}

// PostSend puts wrs on the send ring (ibv_post_send) and rings the doorbell
// only if the daemon sleeps. A UD work request's AH is a verbs AH of a device
// attached through this package. As in libibverbs, on an error wrs[n] is the bad
// one and nothing after it was posted: ErrQueueFull when the ring is full,
// ErrInvalid for more SGEs or inline bytes than the QP takes.
func (q *QP) PostSend(wrs []verbs.SendWR) (n int, err error) {
	q.sqMu.Lock()
	defer q.sqMu.Unlock()
	for n = range wrs {
		w := &wrs[n]
		e, err := q.sq.Reserve(n)
		if err != nil || e == nil {
			if err == nil {
				err = verbs.ErrQueueFull
			}
			q.pd.d.publish(q.sq, n)
			return n, err
		}
		if err := q.putSend(e, w); err != nil {
			q.pd.d.publish(q.sq, n)
			return n, err
		}
	}
	q.pd.d.publish(q.sq, len(wrs))
	return len(wrs), nil
}

func (q *QP) putSend(e []byte, w *verbs.SendWR) error {
	h := &q.wqe
	*h = shm.SendWQE{WRID: w.WRID, Opcode: uint32(w.Opcode), Flags: uint32(w.Flags), RemoteAddr: w.RemoteAddr,
		RKey: w.RKey, RemoteQPN: w.RemoteQPN, RemoteQKey: w.RemoteQKey, CompareAdd: w.CompareAdd, Swap: w.Swap}
	if w.Opcode == verbs.WRSendWithInv || w.Opcode == verbs.WRLocalInv {
		binary.LittleEndian.PutUint32(h.Imm[:], w.InvalidateRKey)
	} else {
		binary.BigEndian.PutUint32(h.Imm[:], w.ImmData)
	}
	if w.AH != nil {
		ah, ok := w.AH.Backend().(*AH)
		if !ok {
			return errAH
		}
		h.AH = ah.h
	}
	if w.InlineData != nil {
		if len(w.InlineData) > int(q.cap.MaxInlineData) {
			return errInline
		}
		h.Flags |= uint32(verbs.SendInline)
		return shm.PutSendWQE(e, h, nil, w.InlineData)
	}
	if len(w.SGL) > len(q.sges) {
		return errSGEs
	}
	for i, s := range w.SGL {
		q.sges[i] = shm.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
	}
	h.Flags &^= uint32(verbs.SendInline) // inline comes only with InlineData
	return shm.PutSendWQE(e, h, q.sges[:len(w.SGL)], nil)
}

// publish commits k entries and wakes the daemon if it asked to be.
func (d *Device) publish(r *shm.Ring, k int) {
	if k == 0 {
		return
	}
	r.Commit(k)
	if r.NeedWakeup() {
		d.ring()
	}
}

// PostRecv puts wrs on the receive ring (ibv_post_recv); a QP whose receives
// come from an SRQ takes none.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) { return q.rq.post(wrs) }

// AttachMcast attaches the UD QP to the multicast group gid
// (ibv_attach_mcast, ATTACH_MCAST): the daemon's checks, EINVAL as
// ib_attach_mcast's; lid is ignored on RoCE.
func (q *QP) AttachMcast(gid verbs.GID, lid uint16) error {
	return q.mcast(attach.OpAttachMcast, gid, lid)
}

// DetachMcast detaches the QP from gid (ibv_detach_mcast): EINVAL when it is
// not attached to it.
func (q *QP) DetachMcast(gid verbs.GID, lid uint16) error {
	return q.mcast(attach.OpDetachMcast, gid, lid)
}

func (q *QP) mcast(op attach.Op, gid verbs.GID, lid uint16) error {
	_, err := q.pd.d.call(op, &attach.McastReq{GID: gid, QP: q.h, MLID: lid}, nil)
	return err
}

// Destroy destroys the QP (ibv_destroy_qp); its outstanding WRs complete
// flushed first. A QP attached to multicast groups is EBUSY (uverbs_free_qp).
func (q *QP) Destroy() error {
	if err := q.pd.d.destroy(attach.KindQP, q.h); err != nil {
		return err
	}
	return q.pd.d.disown(q.mem)
}

// Handle is the object's number in the process's session (what its events
// name).
func (q *CQ) Handle() uint32  { return q.h }
func (q *QP) Handle() uint32  { return q.h }
func (s *SRQ) Handle() uint32 { return s.h }
