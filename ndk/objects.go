package ndk

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/xrnic/xrnic/verbs"
)

// PD is NDK_PD: the antecedent of MRs, MWs, SRQs and QPs. Safe for concurrent
// use, as every object here.
type PD struct {
	n  node
	pd *verbs.PD
}

// CreatePD is NdkCreatePd. It completes synchronously: done is never called.
func (a *Adapter) CreatePD(done func(*PD, error)) (*PD, error) {
	p := &PD{}
	if err := p.n.init(a, &a.n); err != nil {
		return nil, err
	}
	pd, err := a.dev.AllocPD()
	if err != nil {
		p.n.leaveParents()
		return nil, err
	}
	p.pd = pd
	p.n.release = func(fin func(error)) { fin(pd.Dealloc().Wait()) }
	return p, nil
}

// Close is NdkCloseObject: pending until the PD's successors are closed (LT8).
func (p *PD) Close(done func(error)) error { return p.n.close(done) }

// CQ is NDK_CQ. Its notification callback runs once per Arm, on the adapter's
// callback goroutine, when a completion of the armed kind arrives (nil) or the
// CQ overflowed (an error wrapping verbs.ErrOverrun).
type CQ struct {
	n      node
	a      *Adapter
	cq     *verbs.CQ
	notify func(error)
	qps    sync.Map // QPN -> *QP, for Result.QP
}

// CreateCQ is NdkCreateCq: a CQ of at least depth entries. Synchronous.
func (a *Adapter) CreateCQ(depth int, notify func(error), done func(*CQ, error)) (*CQ, error) {
	c := &CQ{a: a, notify: notify}
	if err := c.n.init(a, &a.n); err != nil {
		return nil, err
	}
	q, err := a.dev.CreateCQ(depth, verbs.CQOptions{
		Handler: func(*verbs.CQ) { c.fire(nil) },
		OnError: func(*verbs.CQ) { c.fire(verbs.ErrOverrun) },
	})
	if err != nil {
		c.n.leaveParents()
		return nil, err
	}
	c.cq = q
	c.n.release = func(fin func(error)) { q.Destroy().Notify(fin) }
	return c, nil
}

func (c *CQ) fire(err error) {
	if c.notify != nil {
		c.n.event(func() { c.notify(err) })
	}
}

// Trigger says what an Arm waits for (NDK_CQ_NOTIFY_*).
type Trigger int

const (
	NotifyAny       Trigger = iota // any completion
	NotifySolicited                // a solicited receive or an error
)

// Arm is NdkArmCq: the notification callback runs once for the next
// completion of the trigger's kind.
func (c *CQ) Arm(t Trigger) error {
	if !c.n.isOpen() {
		return ErrClosed
	}
	return c.cq.ReqNotify(t == NotifySolicited)
}

// Resize is NdkResizeCq.
func (c *CQ) Resize(depth int) error {
	if !c.n.isOpen() {
		return ErrClosed
	}
	return c.cq.Resize(depth)
}

// Close is NdkCloseObject: pending until the QPs using the CQ are closed.
func (c *CQ) Close(done func(error)) error { return c.n.close(done) }

// ResultType is NDK_OPERATION_TYPE: the request a Result completes.
type ResultType uint8

const (
	OpReceive ResultType = iota
	OpSend
	OpBind
	OpInvalidate
	OpRead
	OpWrite
	OpFastRegister
)

// opOf maps a WC opcode to the result type; an array, as GetResults reads it
// once per completion.
var opOf = func() (t [256]ResultType) {
	for op, rt := range map[verbs.WCOpcode]ResultType{
		verbs.WCSend: OpSend, verbs.WCBindMW: OpBind, verbs.WCLocalInv: OpInvalidate,
		verbs.WCRDMARead: OpRead, verbs.WCRDMAWrite: OpWrite, verbs.WCRegMR: OpFastRegister,
		verbs.WCRecv: OpReceive, verbs.WCRecvRDMAWithImm: OpReceive,
	} {
		t[op] = rt
	}
	return t
}()

// Result is NDK_RESULT_EX. A plain value.
type Result struct {
	Status           verbs.WCStatus
	BytesTransferred uint32
	QP               *QP        // the QP the request was posted on (its context: QP.Context)
	RequestContext   uint64     // as given to the request
	Type             ResultType // valid when Status is WCSuccess (as ibv_wc's opcode)
	// InvalidatedToken is the token a peer's SendAndInvalidate invalidated
	// (Invalidated reports one came).
	InvalidatedToken uint32
	Invalidated      bool
}

// statusErr holds one error per WC status, made once: Err never allocates.
var statusErr = func() map[verbs.WCStatus]error {
	m := map[verbs.WCStatus]error{}
	for s := verbs.WCStatus(1); s < 32; s++ {
		m[s] = fmt.Errorf("ndk: request failed: %v", s)
	}
	m[verbs.WCWRFlushErr] = ErrCanceled
	return m
}()

// Err is the result as an NTSTATUS: nil, ErrCanceled for a request flushed by
// a close, Flush or disconnect, or an error naming the WC status.
func (r *Result) Err() error {
	if r.Status == verbs.WCSuccess {
		return nil
	}
	return statusErr[r.Status]
}

// GetResults is NdkGetCqResultsEx: it fills rs with completed requests and
// returns how many. Several goroutines may call it at once (MID4).
func (c *CQ) GetResults(rs []Result) int {
	var wcs [16]verbs.WC
	n := 0
	for n < len(rs) {
		m := min(len(rs)-n, len(wcs))
		got := c.cq.Poll(wcs[:m])
		for i := range got {
			w := &wcs[i]
			r := &rs[n]
			*r = Result{Status: w.Status, BytesTransferred: w.ByteLen, RequestContext: w.WRID,
				Type: opOf[w.Opcode]}
			if q, ok := c.qps.Load(w.QPN); ok {
				r.QP = q.(*QP)
			}
			if w.Flags&verbs.WCWithInv != 0 {
				r.InvalidatedToken, r.Invalidated = w.InvalidatedRKey, true
			}
			n++
		}
		if got < m {
			break
		}
	}
	return n
}

// Access is what a registration or bind allows (NDK_MR_FLAG_*, NDK_OP_FLAG_ALLOW_*).
type Access int

const (
	AllowLocalWrite  Access = 1 << iota // NDK_MR_FLAG_ALLOW_LOCAL_WRITE
	AllowRemoteRead                     // NDK_MR_FLAG_ALLOW_REMOTE_READ
	AllowRemoteWrite                    // NDK_MR_FLAG_ALLOW_REMOTE_WRITE
	AllowBind                           // windows may be bound to the region (NDK_MR_FLAG_RDMA_READ_SINK is not needed on RoCE)
)

func (f Access) verbs() verbs.Access {
	var a verbs.Access
	if f&AllowLocalWrite != 0 {
		a |= verbs.AccessLocalWrite
	}
	if f&AllowRemoteRead != 0 {
		a |= verbs.AccessRemoteRead
	}
	if f&AllowRemoteWrite != 0 {
		a |= verbs.AccessRemoteWrite | verbs.AccessLocalWrite
	}
	if f&AllowBind != 0 {
		a |= verbs.AccessMWBind
	}
	return a
}

// MR is NDK_MR: created empty, then registered (Register) or made a
// fast-registration region (InitializeFastRegister). Its tokens are its keys.
type MR struct {
	n    node
	pd   *PD
	fast bool

	mu sync.Mutex
	mr *verbs.MR
}

// CreateMR is NdkCreateMr. Synchronous.
func (p *PD) CreateMR(fastRegister bool, done func(*MR, error)) (*MR, error) {
	m := &MR{pd: p, fast: fastRegister}
	if err := m.n.init(p.n.a, &p.n); err != nil {
		return nil, err
	}
	m.n.release = func(fin func(error)) {
		m.mu.Lock()
		r := m.mr
		m.mr = nil
		m.mu.Unlock()
		if r == nil {
			fin(nil)
			return
		}
		fin(r.Dereg().Wait())
	}
	return m, nil
}

// Register is NdkRegisterMr: buf becomes the region, its IOVA the address of
// buf[0] (as ibv_reg_mr's). It completes synchronously: done is never called.
func (m *MR) Register(buf []byte, access Access, done func(error)) error {
	if len(buf) == 0 || m.fast {
		return ErrInvalid
	}
	return m.set(func() (*verbs.MR, error) {
		return m.pd.pd.RegMR(buf, uint64(uintptr(unsafe.Pointer(&buf[0]))), access.verbs())
	})
}

// InitializeFastRegister is NdkInitializeFastRegisterMr: the region gets keys
// for up to pages pages, registered later by QP.FastRegister. Synchronous.
func (m *MR) InitializeFastRegister(pages int, done func(error)) error {
	if !m.fast {
		return ErrInvalid
	}
	return m.set(func() (*verbs.MR, error) { return m.pd.pd.AllocFastRegMR(pages) })
}

// set gives an open, empty MR the region mk makes.
func (m *MR) set(mk func() (*verbs.MR, error)) error {
	if err := m.n.hold(); err != nil {
		return err
	}
	defer m.n.unhold()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mr != nil {
		return fmt.Errorf("ndk: region already registered: %w", verbs.ErrBusy)
	}
	r, err := mk()
	if err != nil {
		return err
	}
	m.mr = r
	return nil
}

// Deregister is NdkDeregisterMr: the keys stop working; the MR may be
// registered again. Synchronous.
func (m *MR) Deregister(done func(error)) error {
	if err := m.n.hold(); err != nil {
		return err
	}
	defer m.n.unhold()
	m.mu.Lock()
	r := m.mr
	m.mr = nil
	m.mu.Unlock()
	if r == nil {
		return fmt.Errorf("ndk: region not registered: %w", verbs.ErrInvalid)
	}
	return r.Dereg().Wait()
}

func (m *MR) reg() *verbs.MR {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mr
}

// LocalToken and RemoteToken are NdkGetLocalTokenFromMr and
// NdkGetRemoteTokenFromMr: the L_Key and R_Key (0 when unregistered).
func (m *MR) LocalToken() uint32 {
	if r := m.reg(); r != nil {
		return r.LKey()
	}
	return 0
}

func (m *MR) RemoteToken() uint32 {
	if r := m.reg(); r != nil {
		return r.RKey()
	}
	return 0
}

// Addr is the IOVA of the region's first byte, the address a peer names.
func (m *MR) Addr() uint64 {
	if r := m.reg(); r != nil {
		return r.Addr()
	}
	return 0
}

// SGE is an NDK_SGE: Length bytes at IOVA Addr of the region of Token.
type SGE = verbs.SGE

// SGE returns the SGE for length bytes at offset off of the region.
func (m *MR) SGE(off uint64, length uint32) SGE {
	return SGE{Addr: m.Addr() + off, Length: length, LKey: m.LocalToken()}
}

// Close is NdkCloseObject; it deregisters the region. Synchronous.
func (m *MR) Close(done func(error)) error { return m.n.close(done) }

// MW is NDK_MW, a type 2 window bound with QP.Bind on one QP.
type MW struct {
	n  node
	mw *verbs.MW
}

// CreateMW is NdkCreateMw. Synchronous.
func (p *PD) CreateMW(done func(*MW, error)) (*MW, error) {
	w := &MW{}
	if err := w.n.init(p.n.a, &p.n); err != nil {
		return nil, err
	}
	mw, err := p.pd.AllocMW(verbs.MWType2)
	if err != nil {
		w.n.leaveParents()
		return nil, err
	}
	w.mw = mw
	w.n.release = func(fin func(error)) { fin(mw.Dealloc().Wait()) }
	return w, nil
}

// RemoteToken is NdkGetRemoteTokenFromMw: the window's current R_Key.
func (w *MW) RemoteToken() uint32 { return w.mw.RKey() }

// Close is NdkCloseObject. Synchronous.
func (w *MW) Close(done func(error)) error { return w.n.close(done) }

// SRQ is NDK_SRQ. Its notification callback runs once the number of posted
// receives falls below the threshold (0 disarms), as the SRQ limit event.
type SRQ struct {
	n      node
	a      *Adapter
	srq    *verbs.SRQ
	notify func(error)
}

// CreateSRQ is NdkCreateSrq. Synchronous.
func (p *PD) CreateSRQ(depth, maxSGE, threshold int, notify func(error), done func(*SRQ, error)) (*SRQ, error) {
	a := p.n.a
	s := &SRQ{a: a, notify: notify}
	if err := s.n.init(a, &p.n); err != nil {
		return nil, err
	}
	srq, err := p.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(depth), MaxSGE: uint32(maxSGE), Limit: uint32(threshold)})
	if err != nil {
		s.n.leaveParents()
		return nil, err
	}
	s.srq = srq
	a.idMu.Lock()
	a.srqs[srq] = s
	a.idMu.Unlock()
	s.n.release = func(fin func(error)) {
		a.idMu.Lock()
		delete(a.srqs, srq)
		a.idMu.Unlock()
		srq.Destroy().Notify(fin)
	}
	return s, nil
}

// Receive is NdkSrqReceive.
func (s *SRQ) Receive(ctx uint64, sgl []SGE) error {
	wr := [1]verbs.RecvWR{{WRID: ctx, SGL: sgl}}
	_, err := s.srq.PostRecv(wr[:])
	return err
}

// Modify is NdkModifySrq: a new depth and notify threshold, 0 keeping
// either ("a threshold value of zero ... must preserve the current SRQ
// notification threshold and arming state").
func (s *SRQ) Modify(depth, threshold int, done func(error)) error {
	if !s.n.isOpen() {
		return ErrClosed
	}
	var mask verbs.SRQAttrMask
	if threshold > 0 {
		mask |= verbs.SRQLimit
	}
	if depth > 0 {
		mask |= verbs.SRQMaxWR
	}
	if mask == 0 {
		return nil
	}
	return s.srq.Modify(verbs.SRQAttr{MaxWR: uint32(depth), Limit: uint32(threshold)}, mask)
}

// Close is NdkCloseObject: pending until the QPs using the SRQ are closed.
func (s *SRQ) Close(done func(error)) error { return s.n.close(done) }
