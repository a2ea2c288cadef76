package verbs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

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
	r BackendPD // attached
	d *Device
}

// Handle is the PD's number (pdn).
func (pd *PD) Handle() uint32 {
	if pd.r != nil {
		return 0
	}
	return pd.e.Handle()
}

// Device is the PD's device.
func (pd *PD) Device() *Device { return pd.d }

// Dealloc deallocates the PD (ibv_dealloc_pd): ErrBusy while it has children.
func (pd *PD) Dealloc() *Op {
	if pd.r != nil {
		return attachedOp(pd.r.Dealloc())
	}
	return pd.e.Dealloc()
}

// Close deallocates the PD once its last child is gone (NDKPI's close).
func (pd *PD) Close() *Op {
	if pd.r != nil {
		return attachedOp(pd.r.Dealloc())
	}
	return pd.e.Close()
}

// RegMR registers buf with IOVA iova (ibv_reg_mr; iova 0 with AccessZeroBased).
func (pd *PD) RegMR(buf []byte, iova uint64, access Access) (*MR, error) {
	if pd.r != nil {
		if iova == 0 && access&AccessZeroBased == 0 && len(buf) > 0 {
			iova = uint64(uintptr(unsafe.Pointer(&buf[0])))
		}
		m, err := pd.r.RegMR(buf, iova, access)
		if err != nil {
			return nil, err
		}
		return &MR{r: m, pd: pd, buf: buf, iova: iova}, nil
	}
	m, err := pd.e.RegMR(buf, iova, access)
	if err != nil {
		return nil, err
	}
	return &MR{e: m, pd: pd}, nil
}

// AllocFastRegMR allocates a region for REG_MR work requests
// (ibv_alloc_mr), of up to maxPages pages.
func (pd *PD) AllocFastRegMR(maxPages int) (*MR, error) {
	if pd.r != nil {
		return nil, errAttached("AllocFastRegMR")
	}
	m, err := pd.e.AllocFastRegMR(maxPages)
	if err != nil {
		return nil, err
	}
	return &MR{e: m, pd: pd}, nil
}

// AllocMW allocates a memory window (ibv_alloc_mw).
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if pd.r != nil {
		return nil, errAttached("AllocMW")
	}
	m, err := pd.e.AllocMW(typ)
	if err != nil {
		return nil, err
	}
	return &MW{e: m, pd: pd}, nil
}

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(av AV) (*AH, error) {
	if pd.r != nil {
		r, err := pd.r.CreateAH(av)
		if err != nil {
			return nil, err
		}
		return &AH{r: r, pd: pd, av: av}, nil
	}
	ah, err := pd.e.CreateAH(av)
	if err != nil {
		return nil, err
	}
	return &AH{e: ah, pd: pd}, nil
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(a SRQAttr) (*SRQ, error) {
	if pd.r != nil {
		r, err := pd.r.CreateSRQ(a)
		if err != nil {
			return nil, err
		}
		w := &SRQ{r: r, pd: pd, attr: a}
		pd.d.track(EventOnSRQ, r.Handle(), w)
		return w, nil
	}
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
	qp := &QP{pd: pd, scq: a.SendCQ, rcq: a.RecvCQ, srq: a.SRQ, ctx: a.Context, typ: a.Type}
	if pd.r != nil {
		ba := BackendQPInit{Type: a.Type, Cap: a.Cap, SigAll: a.SigAll}
		if a.SendCQ != nil {
			ba.SendCQ = a.SendCQ.r
		}
		if a.RecvCQ != nil {
			ba.RecvCQ = a.RecvCQ.r
		}
		if a.SRQ != nil {
			ba.SRQ = a.SRQ.r
		}
		if ba.SendCQ == nil || ba.RecvCQ == nil {
			return nil, fmt.Errorf("%w: a QP needs the attached device's CQs", ErrInvalid)
		}
		r, err := pd.r.CreateQP(ba)
		if err != nil {
			return nil, err
		}
		qp.r = r
		pd.d.track(EventOnQP, r.Handle(), qp)
		return qp, nil
	}
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
	r  BackendMR // attached
	pd *PD
	// An attached region's memory and IOVA.
	buf  []byte
	iova uint64
}

func (m *MR) LKey() uint32 {
	if m.r != nil {
		return m.r.LKey()
	}
	return m.e.LKey()
}

func (m *MR) RKey() uint32 {
	if m.r != nil {
		return m.r.RKey()
	}
	return m.e.RKey()
}

func (m *MR) Addr() uint64 {
	if m.r != nil {
		return m.iova
	}
	return m.e.Addr()
}

func (m *MR) Len() int {
	if m.r != nil {
		return len(m.buf)
	}
	return m.e.Len()
}

func (m *MR) Bytes() []byte {
	if m.r != nil {
		return m.buf
	}
	return m.e.Bytes()
}

// Region is the region's key-table entry (for the device side and tests; nil
// on an attached device).
func (m *MR) Region() *mr.Region {
	if m.r != nil {
		return nil
	}
	return m.e.Region()
}

// SGE is the SGE of length bytes at offset off in the region.
func (m *MR) SGE(off uint64, length uint32) SGE {
	if m.r != nil {
		return SGE{Addr: m.iova + off, Length: length, LKey: m.r.LKey()}
	}
	return m.e.SGE(off, length)
}

// PD is the region's PD (after a Rereg with ReregPD, the new one).
func (m *MR) PD() *PD {
	if m.r != nil {
		return m.pd
	}
	if p := m.e.PD(); p != m.pd.e {
		return &PD{e: p, d: m.pd.d}
	}
	return m.pd
}

// MapSG maps a fast-reg region's pages (ibv_map_mr_sg).
func (m *MR) MapSG(sgl [][]byte, pageSize int, iova uint64) (int, error) {
	if m.r != nil {
		return 0, errAttached("MapSG")
	}
	return m.e.MapSG(sgl, pageSize, iova)
}

// Rereg re-registers the region (ibv_rereg_mr).
func (m *MR) Rereg(flags ReregFlags, pd *PD, buf []byte, iova uint64, access Access) error {
	if m.r != nil {
		return errAttached("Rereg")
	}
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
func (m *MR) Dereg() *Op {
	if m.r != nil {
		return attachedOp(m.r.Dereg())
	}
	return m.e.Dereg()
}

func (m *MR) Close() *Op {
	if m.r != nil {
		return m.Dereg()
	}
	return m.e.Close()
}

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
	r  BackendAH // attached
	pd *PD
	av AV
}

// Backend is an attached device's AH behind ah (nil in-process): how its
// QPs' PostSend finds the AH a work request names.
func (ah *AH) Backend() BackendAH { return ah.r }

func (ah *AH) AV() AV {
	if ah.r != nil {
		return ah.av
	}
	return ah.e.AV()
}

func (ah *AH) Destroy() *Op {
	if ah.r != nil {
		return attachedOp(ah.r.Destroy())
	}
	return ah.e.Destroy()
}

func (ah *AH) Close() *Op {
	if ah.r != nil {
		return ah.Destroy()
	}
	return ah.e.Close()
}

// SRQ is a shared receive queue (struct ibv_srq). Safe for concurrent use.
type SRQ struct {
	e    *engine.SRQ
	r    BackendSRQ // attached
	pd   *PD
	attr SRQAttr // attached: as created
}

func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	if s.r != nil {
		return s.r.PostRecv(wrs)
	}
	return s.e.PostRecv(wrs)
}

func (s *SRQ) Modify(a SRQAttr, mask SRQAttrMask) error {
	if s.r != nil {
		return s.r.Modify(a, mask)
	}
	return s.e.Modify(a, mask)
}

func (s *SRQ) Query() SRQAttr {
	if s.r != nil {
		// The daemon's, whose limit an event disarms; the attributes as
		// created if it cannot answer (its session gone).
		if a, err := s.r.Query(); err == nil {
			return a
		}
		return s.attr
	}
	return s.e.Query()
}

func (s *SRQ) Len() int {
	if s.r != nil {
		return 0
	}
	return s.e.Len()
}

func (s *SRQ) Destroy() *Op {
	if s.r != nil {
		return s.pd.d.untrack(EventOnSRQ, s.r.Handle(), attachedOp(s.r.Destroy()))
	}
	return s.forget(s.e.Destroy())
}

func (s *SRQ) Close() *Op {
	if s.r != nil {
		return s.Destroy()
	}
	return s.forget(s.e.Close())
}

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
	r   BackendCQ                   // attached
	d   *Device                     // attached: its device
	ch  atomic.Pointer[CompChannel] // attached: its channel, which it holds (CompChannel.users)
	ctx any
}

func (c *CQ) Context() any { return c.ctx }

// Poll takes up to len(wcs) completions (ibv_poll_cq). An attached CQ whose
// ring the process corrupted returns nothing more.
func (c *CQ) Poll(wcs []WC) int {
	if c.r != nil {
		n, _ := c.r.Poll(wcs)
		return n
	}
	return c.e.Poll(wcs)
}

// ReqNotify arms the CQ (ibv_req_notify_cq).
func (c *CQ) ReqNotify(solicitedOnly bool) error {
	if c.r != nil {
		c.r.ReqNotify(solicitedOnly)
		return nil
	}
	return c.e.ReqNotify(solicitedOnly)
}

// The rest are the in-process CQ's (nic/cq); an attached CQ has none of them.
func (c *CQ) AckEvents(n int) {
	if c.e != nil {
		c.e.AckEvents(n)
	}
}

func (c *CQ) UnackedEvents() int {
	if c.e == nil {
		return 0
	}
	return c.e.UnackedEvents()
}

func (c *CQ) Cqe() int {
	if c.e == nil {
		return 0
	}
	return c.e.Cqe()
}

// Len is how many completions wait to be polled: a consumer that armed the
// CQ looks here before it sleeps (perftest's -e).
func (c *CQ) Len() int {
	if c.r != nil {
		return c.r.Len()
	}
	return c.e.Len()
}

func (c *CQ) Stats() cq.Stats {
	if c.e == nil {
		return cq.Stats{}
	}
	return c.e.Stats()
}

func (c *CQ) Resize(cqe int) error {
	if c.e == nil {
		return errAttached("Resize")
	}
	return c.e.Resize(cqe)
}

func (c *CQ) Push(wc *WC, solicited bool) bool { return c.e != nil && c.e.Push(wc, solicited) }

func (c *CQ) Acquire() error {
	if c.e == nil {
		return errAttached("Acquire")
	}
	return c.e.Acquire()
}

func (c *CQ) Release() error {
	if c.e == nil {
		return errAttached("Release")
	}
	return c.e.Release()
}

func (c *CQ) Shutdown() error {
	if c.e == nil {
		return c.r.Destroy()
	}
	return c.e.Shutdown()
}

func (c *CQ) StopCallbacks() {
	if c.e != nil {
		c.e.StopCallbacks()
	}
}

func (c *CQ) OnDispatcher() bool { return c.e != nil && c.e.OnDispatcher() }

// Done is closed when the CQ's dispatcher has stopped (at once on an
// attached CQ, which has none).
func (c *CQ) Done() <-chan struct{} {
	if c.e == nil {
		return closedChan
	}
	return c.e.Done()
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *CQ) Destroy() *Op {
	if c.r != nil {
		err := c.r.Destroy()
		// Refused as busy, the CQ lives on and keeps its channel; any other
		// outcome (done, or the daemon gone) lets go of it, once.
		if !errors.Is(err, ErrBusy) {
			if ch := c.ch.Swap(nil); ch != nil {
				ch.unuse()
			}
		}
		return c.d.untrack(EventOnCQ, c.r.Handle(), attachedOp(err))
	}
	return c.e.Destroy()
}

func (c *CQ) Close() *Op {
	if c.r != nil {
		return c.Destroy()
	}
	return c.e.Close()
}

// SetHandler sets the completion handler (see the engine's).
func (c *CQ) SetHandler(h func(*CQ)) error {
	if c.r != nil {
		return errAttached("SetHandler")
	}
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
// concurrent use. It serves in-process CQs or attached ones, whichever it
// was first given (an attached CQ's events come from its daemon).
type CompChannel struct {
	e *engine.CompChannel

	mu       sync.Mutex
	attached bool  // its CQs are an attached device's
	inproc   bool  // its CQs are in-process
	users    int   // attached CQs on it (the engine counts in-process ones)
	ext      []*CQ // their events, oldest first
	closed   bool
	wake     chan struct{} // an event was queued, or Close (capacity 1)
}

// NewCompChannel returns a completion channel (ibv_create_comp_channel).
func NewCompChannel() *CompChannel {
	return &CompChannel{e: engine.NewCompChannel(), wake: make(chan struct{}, 1)}
}

// bind records the kind of CQ the channel serves; mixing fails. An attached
// CQ holds the channel until unuse.
func (ch *CompChannel) bind(attached bool) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if attached && ch.inproc || !attached && ch.attached {
		return fmt.Errorf("%w: a completion channel serves in-process or attached CQs, not both", ErrInvalid)
	}
	if attached && ch.closed {
		return fmt.Errorf("verbs: completion channel closed: %w", ErrClosed)
	}
	ch.attached = ch.attached || attached
	ch.inproc = ch.inproc || !attached
	if attached {
		ch.users++
	}
	return nil
}

// unuse lets go of the hold bind(true) took.
func (ch *CompChannel) unuse() {
	ch.mu.Lock()
	ch.users--
	ch.mu.Unlock()
}

// post queues an attached CQ's event.
func (ch *CompChannel) post(c *CQ) {
	ch.mu.Lock()
	ch.ext = append(ch.ext, c)
	ch.mu.Unlock()
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// GetEvent waits for the next completion event and returns its CQ
// (ibv_get_cq_event).
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	ch.mu.Lock()
	attached := ch.attached
	ch.mu.Unlock()
	if !attached {
		c, err := ch.e.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		return cqOf(c), nil
	}
	for {
		ch.mu.Lock()
		if len(ch.ext) > 0 {
			c := ch.ext[0]
			ch.ext = ch.ext[1:]
			ch.mu.Unlock()
			return c, nil
		}
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("verbs: completion channel closed: %w", ErrClosed)
		}
		select {
		case <-ch.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close closes the channel (ibv_destroy_comp_channel). It fails with ErrBusy,
// changing nothing, while CQs use it.
func (ch *CompChannel) Close() error {
	ch.mu.Lock()
	if ch.users > 0 {
		n := ch.users
		ch.mu.Unlock()
		return fmt.Errorf("verbs: %d CQs use the completion channel: %w", n, ErrBusy)
	}
	if err := ch.e.Close(); err != nil { // in-process CQs: the engine's count
		ch.mu.Unlock()
		return err
	}
	ch.closed = true
	ch.mu.Unlock()
	select {
	case ch.wake <- struct{}{}:
	default:
	}
	return nil
}

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
	r        BackendQP // attached
	typ      QPType
	pd       *PD
	scq, rcq *CQ
	srq      *SRQ
	ctx      any

	postMu sync.Mutex
	wrs    []engine.SendWR
}

func (qp *QP) QPN() uint32 {
	if qp.r != nil {
		return qp.r.QPN()
	}
	return qp.e.QPN()
}

func (qp *QP) Type() QPType { return qp.typ }
func (qp *QP) PD() *PD      { return qp.pd }
func (qp *QP) Context() any { return qp.ctx }

func (qp *QP) Cap() QPCap {
	if qp.r != nil {
		return qp.r.Cap()
	}
	return qp.e.Cap()
}

func (qp *QP) State() QPState {
	if qp.r != nil {
		a, _ := qp.r.Query()
		return a.State
	}
	return qp.e.State()
}

func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if qp.r != nil {
		return qp.r.PostRecv(wrs)
	}
	return qp.e.PostRecv(wrs)
}

// Destroy destroys the QP (ibv_destroy_qp). A QP attached to multicast groups
// is not destroyed: ErrBusy, as uverbs_free_qp answers a user's destroy until
// every group is detached (Close detaches them, as uverbs does when the
// process goes).
func (qp *QP) Destroy() *Op {
	if qp.r != nil {
		return qp.pd.d.untrack(EventOnQP, qp.r.Handle(), attachedOp(qp.r.Destroy()))
	}
	if qp.e.McastAttached() {
		return attachedOp(errQPMcastBusy)
	}
	return qp.e.Destroy()
}

var errQPMcastBusy = fmt.Errorf("verbs: destroy of a QP attached to multicast groups (detach them first): %w", ErrBusy)

// AttachMcast attaches the UD QP to the multicast group gid (ibv_attach_mcast):
// it receives the group's packets, sent to DestQPN 0xFFFFFF with its Q_Key.
// lid is ignored on RoCE (IBA A17.5.6). A QP that is not UD or a GID that is
// not multicast is ErrInvalid, as are rxe's limits; attaching twice is no error.
func (qp *QP) AttachMcast(gid GID, lid uint16) error {
	if qp.r != nil {
		if m, ok := qp.r.(BackendMcastQP); ok {
			return m.AttachMcast(gid, lid)
		}
		return errAttached("AttachMcast")
	}
	return qp.e.AttachMcast(gid)
}

// DetachMcast detaches the QP from the multicast group gid (ibv_detach_mcast):
// ErrInvalid when it is not attached to it.
func (qp *QP) DetachMcast(gid GID, lid uint16) error {
	if qp.r != nil {
		if m, ok := qp.r.(BackendMcastQP); ok {
			return m.DetachMcast(gid, lid)
		}
		return errAttached("DetachMcast")
	}
	return qp.e.DetachMcast(gid)
}

func (qp *QP) Close() *Op {
	if qp.r != nil {
		return qp.Destroy()
	}
	return qp.e.Close()
}

// Modify changes the QP's attributes (ibv_modify_qp); ModifySync waits.
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) *Op {
	if qp.r != nil {
		return attachedOp(qp.r.Modify(attr, mask))
	}
	return qp.e.Modify(attr, mask)
}

func (qp *QP) ModifySync(attr *QPAttr, mask AttrMask) error {
	if qp.r != nil {
		return qp.r.Modify(attr, mask)
	}
	return qp.e.ModifySync(attr, mask)
}

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr, error) {
	ia := QPInitAttr{Type: qp.typ, SendCQ: qp.scq, RecvCQ: qp.rcq, SRQ: qp.srq, Context: qp.ctx}
	if qp.r != nil {
		a, err := qp.r.Query()
		ia.Cap = qp.r.Cap()
		return a, ia, err
	}
	a, ea, err := qp.e.Query()
	ia.Cap, ia.SigAll = ea.Cap, ea.SigAll
	return a, ia, err
}

// PostSend posts send work requests (ibv_post_send); on an error wrs[n] is
// the bad one.
func (qp *QP) PostSend(wrs []SendWR) (n int, err error) {
	if qp.r != nil {
		return qp.r.PostSend(wrs)
	}
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
	if qp.r != nil {
		return 0, errAttached("BindMW")
	}
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
