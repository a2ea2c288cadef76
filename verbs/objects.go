package verbs

import (
	"context"
	"sync"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/nic/mr"
)

// The verbs objects are verbs' own: a device's backend (the in-process engine
// today) stands behind each, as a provider stands behind libibverbs' objects.
// Each method forwards to the backend; the objects that reach other objects
// (a QP's PD and CQs, an event's QP) give verbs' objects back. The contracts
// are the engine's, stated on each method there.

// PD is a protection domain (struct ibv_pd). Safe for concurrent use.
type PD struct {
	e *engine.PD
	d *Device
}

// Handle is the PD's number (pdn).
func (pd *PD) Handle() uint32 { return pd.e.Handle() }

// Device is the PD's device.
func (pd *PD) Device() *Device { return pd.d }

// Dealloc deallocates the PD (ibv_dealloc_pd): ErrBusy while it has children.
func (pd *PD) Dealloc() *Op { return pd.e.Dealloc() }

// Close deallocates the PD once its last child is gone (NDKPI's close).
func (pd *PD) Close() *Op { return pd.e.Close() }

// RegMR registers buf with IOVA iova (ibv_reg_mr; iova 0 with AccessZeroBased).
func (pd *PD) RegMR(buf []byte, iova uint64, access Access) (*MR, error) {
	m, err := pd.e.RegMR(buf, iova, access)
	if err != nil {
		return nil, err
	}
	return &MR{e: m, pd: pd}, nil
}

// AllocFastRegMR allocates a region for REG_MR work requests
// (ibv_alloc_mr), of up to maxPages pages.
func (pd *PD) AllocFastRegMR(maxPages int) (*MR, error) {
	m, err := pd.e.AllocFastRegMR(maxPages)
	if err != nil {
		return nil, err
	}
	return &MR{e: m, pd: pd}, nil
}

// AllocMW allocates a memory window (ibv_alloc_mw).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	m, err := pd.e.AllocMW(typ)
	if err != nil {
		return nil, err
	}
	return &MW{e: m, pd: pd}, nil
}

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(av AV) (*AH, error) {
	ah, err := pd.e.CreateAH(av)
	if err != nil {
		return nil, err
	}
	return &AH{e: ah, pd: pd}, nil
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(a SRQAttr) (*SRQ, error) {
	s, err := pd.e.CreateSRQ(a)
	if err != nil {
		return nil, err
	}
	w := &SRQ{e: s, pd: pd}
	pd.d.srqs.Store(s, w) // its events name it (an SRQ has no Context)
	return w, nil
}

// QPInitAttr is struct ibv_qp_init_attr. A plain value: CreateQP copies it.
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // optional: receives come from the SRQ
	Cap    QPCap
	// SigAll makes every send WR signaled (sq_sig_all).
	SigAll bool
	// Context is the consumer's value (qp_context), returned by Context.
	Context any
}

// CreateQP creates a queue pair (ibv_create_qp).
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	qp := &QP{pd: pd, scq: a.SendCQ, rcq: a.RecvCQ, srq: a.SRQ, ctx: a.Context}
	ea := engine.QPInitAttr{Type: a.Type, Cap: a.Cap, SigAll: a.SigAll, Context: qp}
	if a.SendCQ != nil {
		ea.SendCQ = a.SendCQ.e
	}
	if a.RecvCQ != nil {
		ea.RecvCQ = a.RecvCQ.e
	}
	if a.SRQ != nil {
		ea.SRQ = a.SRQ.e
	}
	e, err := pd.e.CreateQP(ea)
	if err != nil {
		return nil, err
	}
	qp.e = e
	return qp, nil
}

// MR is a memory region (struct ibv_mr). Safe for concurrent use.
type MR struct {
	e  *engine.MR
	pd *PD
}

func (m *MR) LKey() uint32  { return m.e.LKey() }
func (m *MR) RKey() uint32  { return m.e.RKey() }
func (m *MR) Addr() uint64  { return m.e.Addr() }
func (m *MR) Len() int      { return m.e.Len() }
func (m *MR) Bytes() []byte { return m.e.Bytes() }

// Region is the region's key-table entry (for the device side and tests).
func (m *MR) Region() *mr.Region { return m.e.Region() }

// SGE is the SGE of length bytes at offset off in the region.
func (m *MR) SGE(off uint64, length uint32) SGE { return m.e.SGE(off, length) }

// PD is the region's PD (after a Rereg with ReregPD, the new one).
func (m *MR) PD() *PD {
	if p := m.e.PD(); p != m.pd.e {
		return &PD{e: p, d: m.pd.d}
	}
	return m.pd
}

// MapSG maps a fast-reg region's pages (ibv_map_mr_sg).
func (m *MR) MapSG(sgl [][]byte, pageSize int, iova uint64) (int, error) {
	return m.e.MapSG(sgl, pageSize, iova)
}

// Rereg re-registers the region (ibv_rereg_mr).
func (m *MR) Rereg(flags ReregFlags, pd *PD, buf []byte, iova uint64, access Access) error {
	var ep *engine.PD
	if pd != nil {
		ep = pd.e
	}
	if err := m.e.Rereg(flags, ep, buf, iova, access); err != nil {
		return err
	}
	if flags&ReregPD != 0 && pd != nil {
		m.pd = pd
	}
	return nil
}

// Dereg deregisters the region (ibv_dereg_mr); Close is the same.
func (m *MR) Dereg() *Op { return m.e.Dereg() }
func (m *MR) Close() *Op { return m.e.Close() }

// MW is a memory window (struct ibv_mw). Safe for concurrent use.
type MW struct {
	e  *engine.MW
	pd *PD
}

func (m *MW) PD() *PD            { return m.pd }
func (m *MW) RKey() uint32       { return m.e.RKey() }
func (m *MW) Type() MWType       { return m.e.Type() }
func (m *MW) Window() *mr.Window { return m.e.Window() }
func (m *MW) Dealloc() *Op       { return m.e.Dealloc() }
func (m *MW) Close() *Op         { return m.e.Close() }
func (m *MW) engineOrNil() *engine.MW {
	if m == nil {
		return nil
	}
	return m.e
}

// AH is an address handle (struct ibv_ah). Safe for concurrent use.
type AH struct {
	e  *engine.AH
	pd *PD
}

func (ah *AH) AV() AV       { return ah.e.AV() }
func (ah *AH) Destroy() *Op { return ah.e.Destroy() }
func (ah *AH) Close() *Op   { return ah.e.Close() }

// SRQ is a shared receive queue (struct ibv_srq). Safe for concurrent use.
type SRQ struct {
	e  *engine.SRQ
	pd *PD
}

func (s *SRQ) PostRecv(wrs []RecvWR) (int, error)       { return s.e.PostRecv(wrs) }
func (s *SRQ) Modify(a SRQAttr, mask SRQAttrMask) error { return s.e.Modify(a, mask) }
func (s *SRQ) Query() SRQAttr                           { return s.e.Query() }
func (s *SRQ) Len() int                                 { return s.e.Len() }
func (s *SRQ) Destroy() *Op                             { return s.forget(s.e.Destroy()) }
func (s *SRQ) Close() *Op                               { return s.forget(s.e.Close()) }

// forget drops the SRQ from its device's map once op destroyed it.
func (s *SRQ) forget(op *Op) *Op {
	op.Notify(func(err error) {
		if err == nil {
			s.pd.d.srqs.Delete(s.e)
		}
	})
	return op
}

// CQOptions configure CreateCQ (see the engine's CQOptions).
type CQOptions struct {
	// Channel, if set, receives the CQ's completion events.
	Channel *CompChannel
	// Handler is the completion handler, run on the CQ's own dispatcher
	// goroutine (the kernel's ib_cq comp_handler).
	Handler func(*CQ)
	// OnError receives the CQ's overflow (IBV_EVENT_CQ_ERR) on the dispatcher.
	OnError func(*CQ)
	// Context is the consumer's value (cq_context), returned by Context.
	Context any
	// Logf logs the start and stop of the dispatcher goroutine.
	Logf func(format string, args ...any)
}

// CQ is a completion queue (struct ibv_cq). Poll, ReqNotify and the other
// methods are safe for concurrent use (see nic/cq).
type CQ struct {
	e   *engine.CQ
	ctx any
}

func (c *CQ) Context() any                       { return c.ctx }
func (c *CQ) Poll(wcs []WC) int                  { return c.e.Poll(wcs) }
func (c *CQ) ReqNotify(solicitedOnly bool) error { return c.e.ReqNotify(solicitedOnly) }
func (c *CQ) AckEvents(n int)                    { c.e.AckEvents(n) }
func (c *CQ) UnackedEvents() int                 { return c.e.UnackedEvents() }
func (c *CQ) Cqe() int                           { return c.e.Cqe() }
func (c *CQ) Len() int                           { return c.e.Len() }
func (c *CQ) Stats() cq.Stats                    { return c.e.Stats() }
func (c *CQ) Resize(cqe int) error               { return c.e.Resize(cqe) }
func (c *CQ) Push(wc *WC, solicited bool) bool   { return c.e.Push(wc, solicited) }
func (c *CQ) Acquire() error                     { return c.e.Acquire() }
func (c *CQ) Release() error                     { return c.e.Release() }
func (c *CQ) Shutdown() error                    { return c.e.Shutdown() }
func (c *CQ) StopCallbacks()                     { c.e.StopCallbacks() }
func (c *CQ) OnDispatcher() bool                 { return c.e.OnDispatcher() }
func (c *CQ) Done() <-chan struct{}              { return c.e.Done() }
func (c *CQ) Destroy() *Op                       { return c.e.Destroy() }
func (c *CQ) Close() *Op                         { return c.e.Close() }

// SetHandler sets the completion handler (see the engine's).
func (c *CQ) SetHandler(h func(*CQ)) error {
	if h == nil {
		return c.e.SetHandler(nil)
	}
	return c.e.SetHandler(func(*engine.CQ) { h(c) })
}

// cqOf is the verbs CQ of an engine CQ (its Context).
func cqOf(e *engine.CQ) *CQ {
	if e == nil {
		return nil
	}
	c, _ := e.Context().(*CQ)
	return c
}

// CompChannel is a completion channel (struct ibv_comp_channel). Safe for
// concurrent use.
type CompChannel struct{ e *engine.CompChannel }

// NewCompChannel returns a completion channel (ibv_create_comp_channel).
func NewCompChannel() *CompChannel { return &CompChannel{e: engine.NewCompChannel()} }

// GetEvent waits for the next completion event and returns its CQ
// (ibv_get_cq_event).
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	c, err := ch.e.GetEvent(ctx)
	if err != nil {
		return nil, err
	}
	return cqOf(c), nil
}

// Close closes the channel (ibv_destroy_comp_channel).
func (ch *CompChannel) Close() error { return ch.e.Close() }

// BindInfo is what a bind gives a memory window (struct ibv_mw_bind_info).
type BindInfo struct {
	MR     *MR
	Addr   uint64
	Length uint64
	Access Access
}

func (b *BindInfo) engine() engine.BindInfo {
	e := engine.BindInfo{Addr: b.Addr, Length: b.Length, Access: b.Access}
	if b.MR != nil {
		e.MR = b.MR.e
	}
	return e
}

// SendWR is a send work request, struct ibv_send_wr (see the engine's for the
// fields' meaning).
type SendWR struct {
	WRID       uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGL        []SGE
	InlineData []byte

	ImmData        uint32
	InvalidateRKey uint32

	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64

	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32

	FlushLen   uint32
	FlushType  FlushType
	FlushLevel FlushLevel
	AtomicData [8]byte

	MW     *MW
	MR     *MR
	Key    uint32
	Access Access
	Bind   BindInfo
}

// toEngine writes w as the engine's work request.
func (w *SendWR) toEngine(e *engine.SendWR) {
	*e = engine.SendWR{WRID: w.WRID, Opcode: w.Opcode, Flags: w.Flags, SGL: w.SGL, InlineData: w.InlineData,
		ImmData: w.ImmData, InvalidateRKey: w.InvalidateRKey, RemoteAddr: w.RemoteAddr, RKey: w.RKey,
		CompareAdd: w.CompareAdd, Swap: w.Swap, RemoteQPN: w.RemoteQPN, RemoteQKey: w.RemoteQKey,
		FlushLen: w.FlushLen, FlushType: w.FlushType, FlushLevel: w.FlushLevel, AtomicData: w.AtomicData,
		MW: w.MW.engineOrNil(), Key: w.Key, Access: w.Access, Bind: w.Bind.engine()}
	if w.AH != nil {
		e.AH = w.AH.e
	}
	if w.MR != nil {
		e.MR = w.MR.e
	}
}

// QP is a queue pair (struct ibv_qp). Safe for concurrent use; PostSend
// converts its work requests in a buffer of the QP's own (no lock shared
// across QPs).
type QP struct {
	e        *engine.QP
	pd       *PD
	scq, rcq *CQ
	srq      *SRQ
	ctx      any

	postMu sync.Mutex
	wrs    []engine.SendWR
}

func (qp *QP) QPN() uint32                        { return qp.e.QPN() }
func (qp *QP) Type() QPType                       { return qp.e.Type() }
func (qp *QP) PD() *PD                            { return qp.pd }
func (qp *QP) Context() any                       { return qp.ctx }
func (qp *QP) Cap() QPCap                         { return qp.e.Cap() }
func (qp *QP) State() QPState                     { return qp.e.State() }
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) { return qp.e.PostRecv(wrs) }
func (qp *QP) Destroy() *Op                       { return qp.e.Destroy() }
func (qp *QP) Close() *Op                         { return qp.e.Close() }

// Modify changes the QP's attributes (ibv_modify_qp); ModifySync waits.
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) *Op       { return qp.e.Modify(attr, mask) }
func (qp *QP) ModifySync(attr *QPAttr, mask AttrMask) error { return qp.e.ModifySync(attr, mask) }

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr, error) {
	a, ia, err := qp.e.Query()
	return a, QPInitAttr{Type: ia.Type, SendCQ: qp.scq, RecvCQ: qp.rcq, SRQ: qp.srq, Cap: ia.Cap, SigAll: ia.SigAll,
		Context: qp.ctx}, err
}

// PostSend posts send work requests (ibv_post_send); on an error wrs[n] is
// the bad one.
func (qp *QP) PostSend(wrs []SendWR) (n int, err error) {
	qp.postMu.Lock()
	defer qp.postMu.Unlock()
	if cap(qp.wrs) < len(wrs) {
		qp.wrs = make([]engine.SendWR, len(wrs))
	}
	ews := qp.wrs[:len(wrs)]
	for i := range wrs {
		wrs[i].toEngine(&ews[i])
	}
	n, err = qp.e.PostSend(ews)
	clear(ews) // no references kept to the caller's buffers
	return n, err
}

// BindMW binds a type 1 window (ibv_bind_mw).
func (qp *QP) BindMW(mw *MW, wrid uint64, flags SendFlags, b BindInfo) (uint32, error) {
	return qp.e.BindMW(mw.engineOrNil(), wrid, flags, b.engine())
}

// qpOf is the verbs QP of an engine QP (its Context).
func qpOf(e *engine.QP) *QP {
	if e == nil {
		return nil
	}
	q, _ := e.Context().(*QP)
	return q
}

// AsyncEvent is an asynchronous event (struct ibv_async_event): its type and
// the object it concerns. A plain value.
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port uint8
}
