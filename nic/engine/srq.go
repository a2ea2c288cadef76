// Shared receive queues (ibv_srq): one receive ring that several QPs of a PD
// consume from, with the limit event.

package engine

import (
	"sync"
	"sync/atomic"
)

// SRQAttr are an SRQ's attributes (struct ibv_srq_attr). A plain value.
type SRQAttr struct {
	MaxWR  uint32
	MaxSGE uint32
	// Limit arms the SRQ limit event: when the number of posted WRs drops below
	// it, EventSRQLimitReached is raised once and the limit disarms (0).
	Limit uint32
}

// SRQAttrMask says which attributes Modify changes (enum ibv_srq_attr_mask). A
// plain value.
type SRQAttrMask uint32

const (
	SRQMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR (resizing is not supported)
	SRQLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT
)

// SRQ is a shared receive queue. PostRecv is safe from any goroutine and never
// blocks beyond the SRQ's ring lock; the engine is the only consumer.
type SRQ struct {
	d      *Device
	pd     *PD
	recvQ  ring
	consMu sync.Mutex // consumers, on a device of several queues
	slots  []recvWQE
	maxSGE uint32
	limit  atomic.Uint32
	n      lifetime // children: the QPs attached
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(a SRQAttr) (*SRQ, error) {
	d := pd.d
	if a.MaxWR == 0 || a.MaxWR > MaxSRQWR {
		return nil, errorf(ErrInvalid, "SRQ max_wr %d not in 1..%d", a.MaxWR, MaxSRQWR)
	}
	if a.MaxSGE > MaxSRQSGE {
		return nil, errorf(ErrInvalid, "SRQ max_sge %d exceeds %d", a.MaxSGE, MaxSRQSGE)
	}
	if a.Limit > a.MaxWR {
		return nil, errorf(ErrInvalid, "SRQ limit %d exceeds max_wr %d", a.Limit, a.MaxWR)
	}
	a.MaxSGE = max(a.MaxSGE, 1)
	if err := d.reserve(&d.nsrq, MaxSRQ, "SRQs"); err != nil {
		return nil, err
	}
	s := &SRQ{d: d, pd: pd, maxSGE: a.MaxSGE}
	if err := s.n.adopt(&pd.n); err != nil {
		d.forget(&d.nsrq)
		return nil, err
	}
	n := s.recvQ.init(int(a.MaxWR))
	s.slots = make([]recvWQE, n)
	sgl := make([]SGE, n*int(a.MaxSGE))
	k := int(a.MaxSGE)
	for i := range s.slots {
		s.slots[i].sgl = sgl[i*k : i*k : (i+1)*k]
	}
	s.limit.Store(a.Limit)
	return s, nil
}

// PostRecv posts receive WRs to the SRQ (ibv_post_srq_recv); n and err as
// QP.PostSend.
func (s *SRQ) PostRecv(wrs []RecvWR) (n int, err error) {
	s.recvQ.mu.Lock()
	defer s.recvQ.mu.Unlock()
	prod := s.recvQ.prod.Load()
	for n = range wrs {
		wr := &wrs[n]
		switch {
		case s.n.dead.Load():
			return n, errSRQClosed
		case prod-s.recvQ.cons.Load() >= s.recvQ.cap:
			return n, errSRQFull
		case len(wr.SGL) > int(s.maxSGE):
			return n, errSRQSGEs
		}
		if err := s.d.fillRecvWQE(s.pd, &s.slots[prod&s.recvQ.mask], wr); err != nil {
			return n, err
		}
		prod++
		s.recvQ.prod.Store(prod)
	}
	return len(wrs), nil
}

// Modify arms the limit (ibv_modify_srq with IBV_SRQ_LIMIT). Resizing fails with
// ErrInvalid.
func (s *SRQ) Modify(a SRQAttr, mask SRQAttrMask) error {
	if mask&SRQMaxWR != 0 {
		return errorf(ErrInvalid, "resizing an SRQ is not supported")
	}
	if mask&SRQLimit != 0 {
		if a.Limit > s.recvQ.cap {
			return errorf(ErrInvalid, "SRQ limit %d exceeds max_wr %d", a.Limit, s.recvQ.cap)
		}
		s.limit.Store(a.Limit)
	}
	return nil
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() SRQAttr {
	return SRQAttr{MaxWR: s.recvQ.cap, MaxSGE: s.maxSGE, Limit: s.limit.Load()}
}

// Len returns the number of posted WRs not yet taken by a QP (a snapshot).
func (s *SRQ) Len() int { return int(s.recvQ.count()) }

// Destroy destroys the SRQ (ibv_destroy_srq). It fails with ErrBusy, changing
// nothing, while QPs use it. Its posted WRs are discarded without completions, as
// the verbs do: they belong to no CQ. The Op completes once no event handler call
// for the SRQ runs any more.
func (s *SRQ) Destroy() *Op {
	if err := s.n.closeBusy(); err != nil {
		return s.d.doneOp(err)
	}
	op := s.d.newOp()
	op.guard = func() bool { return s.d.evq.delivering(&s.n) }
	s.retire(op)
	return op
}

// Close destroys the SRQ once the last QP using it is destroyed (NDKPI's close of
// an antecedent, LT8); the Op completes as Destroy's.
func (s *SRQ) Close() *Op {
	op := s.d.newOp()
	op.guard = func() bool { return s.d.evq.delivering(&s.n) }
	if err := s.n.closeWhenIdle(func() { s.retire(op) }); err != nil {
		op.finish(err)
	}
	return op
}

func (s *SRQ) retire(op *Op) {
	s.d.forget(&s.d.nsrq)
	s.n.orphan()
	s.d.evq.finishClose(&s.n, op, nil)
}

// take copies the oldest WQE into w and removes it (rxe get_srq_wqe); false when
// the SRQ is empty. Engine only. The QPs of an SRQ may belong to the engines of
// several queues; those take its consumer lock (rxe's consumer_lock).
func (e *engine) srqTake(qp *QP, w *recvWQE) bool {
	s := qp.srq
	if len(e.d.sh) > 1 {
		s.consMu.Lock()
		defer s.consMu.Unlock()
	}
	cons := s.recvQ.cons.Load()
	if cons == s.recvQ.prod.Load() {
		return false
	}
	src := &s.slots[cons&s.recvQ.mask]
	w.wrid = src.wrid
	w.length = src.length
	w.sgl = append(w.sgl[:0], src.sgl...)
	s.recvQ.cons.Store(cons + 1)
	if lim := s.limit.Load(); lim != 0 && s.recvQ.count() < lim && s.limit.CompareAndSwap(lim, 0) {
		e.d.evq.post(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
	}
	return true
}
