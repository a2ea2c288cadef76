package ndk

import (
	"github.com/xrnic/xrnic/verbs"
)

// QPOptions are NdkCreateQp's parameters. A plain value.
type QPOptions struct {
	Context         any // the QP context (Result.QP.Context)
	ReceiveCQ       *CQ
	InitiatorCQ     *CQ
	ReceiveDepth    int
	InitiatorDepth  int
	MaxReceiveSGE   int
	MaxInitiatorSGE int
	InlineDataSize  int
}

// QP is NDK_QP, a reliably connected queue pair, ready for Receive once its
// creation completed and for the rest once a connector connected it. The
// request functions never block (MID1) and return at once; their results come
// through the CQs (GetResults).
type QP struct {
	n   node
	qp  *verbs.QP
	ctx any
	cqs []*CQ
}

// Flags are NDK_OP_FLAG_*.
type Flags int

const (
	SilentSuccess       Flags = 1 << iota // no Result on success
	ReadFence                             // wait for earlier READs to complete
	SendAndSolicitEvent                   // the peer's CQ notification fires for Solicited
	Inline                                // copy the payload at post time
)

func (f Flags) verbs() verbs.SendFlags {
	var s verbs.SendFlags
	if f&SilentSuccess == 0 {
		s |= verbs.SendSignaled
	}
	if f&ReadFence != 0 {
		s |= verbs.SendFence
	}
	if f&SendAndSolicitEvent != 0 {
		s |= verbs.SendSolicited
	}
	if f&Inline != 0 {
		s |= verbs.SendInline
	}
	return s
}

// CreateQP is NdkCreateQp. Creation is asynchronous: it returns ErrPending and
// done reports the QP once it is ready to take receives (moved to INIT on the
// engine; LT1), or the error. done must not be nil.
func (p *PD) CreateQP(o QPOptions, done func(*QP, error)) error {
	return p.createQP(o, nil, done)
}

// CreateQPWithSRQ is NdkCreateQpWithSrq: receives come from srq.
func (p *PD) CreateQPWithSRQ(o QPOptions, srq *SRQ, done func(*QP, error)) error {
	if srq == nil {
		return ErrInvalid
	}
	return p.createQP(o, srq, done)
}

func (p *PD) createQP(o QPOptions, srq *SRQ, done func(*QP, error)) error {
	if done == nil || o.ReceiveCQ == nil || o.InitiatorCQ == nil {
		return ErrInvalid
	}
	a := p.n.a
	q := &QP{ctx: o.Context, cqs: []*CQ{o.ReceiveCQ}}
	if o.InitiatorCQ != o.ReceiveCQ {
		q.cqs = append(q.cqs, o.InitiatorCQ)
	}
	if err := q.n.init(a, &p.n); err != nil {
		return err
	}
	// The CQs and SRQ are antecedents too: their close waits for the QP (LT8).
	for _, c := range q.cqs {
		if err := q.n.attach(&c.n); err != nil {
			q.n.leaveParents()
			return err
		}
	}
	ia := verbs.QPInitAttr{Type: verbs.RC, SendCQ: o.InitiatorCQ.cq, RecvCQ: o.ReceiveCQ.cq, Context: q,
		Cap: verbs.QPCap{MaxSendWR: uint32(o.InitiatorDepth), MaxRecvWR: uint32(o.ReceiveDepth),
			MaxSendSGE: uint32(max(o.MaxInitiatorSGE, 1)), MaxRecvSGE: uint32(max(o.MaxReceiveSGE, 1)),
			MaxInlineData: uint32(o.InlineDataSize)}}
	if srq != nil {
		if err := q.n.attach(&srq.n); err != nil {
			q.n.leaveParents()
			return err
		}
		ia.SRQ = srq.srq
	}
	vq, err := p.pd.CreateQP(ia)
	if err != nil {
		q.n.leaveParents()
		return err
	}
	q.qp = vq
	for _, c := range q.cqs {
		c.qps.Store(vq.QPN(), q)
	}
	q.n.release = func(fin func(error)) {
		// Destroy flushes what is outstanding (LT15); the Op completes once
		// no event of the QP runs any more.
		vq.Destroy().Notify(func(err error) {
			for _, c := range q.cqs {
				c.qps.Delete(vq.QPN())
			}
			fin(err)
		})
	}
	init := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSInit, Port: 1,
		AccessFlags: verbs.QPAccessRemoteWrite | verbs.QPAccessRemoteRead | verbs.QPAccessRemoteAtomic}}
	vq.Modify(&init, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags).Notify(func(err error) {
		if err == nil {
			a.queue(func() { done(q, nil) })
			return
		}
		vq.Destroy().Notify(func(error) {
			for _, c := range q.cqs {
				c.qps.Delete(vq.QPN())
			}
			a.queue(func() {
				done(nil, err)
				q.n.leaveParents()
			})
		})
	})
	return ErrPending
}

// Context is the QP context given at creation.
func (q *QP) Context() any { return q.ctx }

// QPN is the QP's number.
func (q *QP) QPN() uint32 { return q.qp.QPN() }

func (q *QP) post(wr *verbs.SendWR) error {
	wrs := [1]verbs.SendWR{*wr}
	_, err := q.qp.PostSend(wrs[:])
	return err
}

// Send is NdkSend.
func (q *QP) Send(ctx uint64, sgl []SGE, f Flags) error {
	return q.post(&verbs.SendWR{WRID: ctx, Opcode: verbs.WRSend, Flags: f.verbs(), SGL: sgl})
}

// SendAndInvalidate is NdkSendAndInvalidate: the peer's region or window of
// token is invalidated when the message arrives.
func (q *QP) SendAndInvalidate(ctx uint64, sgl []SGE, f Flags, token uint32) error {
	return q.post(&verbs.SendWR{WRID: ctx, Opcode: verbs.WRSendWithInv, Flags: f.verbs(), SGL: sgl, InvalidateRKey: token})
}

// Receive is NdkReceive.
func (q *QP) Receive(ctx uint64, sgl []SGE) error {
	wr := [1]verbs.RecvWR{{WRID: ctx, SGL: sgl}}
	_, err := q.qp.PostRecv(wr[:])
	return err
}

// Read is NdkRead: the peer's bytes at addr (token) into sgl.
func (q *QP) Read(ctx uint64, sgl []SGE, addr uint64, token uint32, f Flags) error {
	return q.post(&verbs.SendWR{WRID: ctx, Opcode: verbs.WRRDMARead, Flags: f.verbs(), SGL: sgl, RemoteAddr: addr, RKey: token})
}

// Write is NdkWrite: sgl's bytes to the peer's addr (token).
func (q *QP) Write(ctx uint64, sgl []SGE, addr uint64, token uint32, f Flags) error {
	return q.post(&verbs.SendWR{WRID: ctx, Opcode: verbs.WRRDMAWrite, Flags: f.verbs(), SGL: sgl, RemoteAddr: addr, RKey: token})
}

// nextKey is ib_inc_rkey: the key with its consumer byte advanced.
func nextKey(k uint32) uint32 { return k&^0xff | (k+1)&0xff }

// Bind is NdkBind: length bytes of m from addr become w's, with access's
// remote rights, on this QP only (a type 2 window). The window's token is
// w.RemoteToken once the bind completed.
func (q *QP) Bind(ctx uint64, m *MR, w *MW, addr uint64, length uint64, access Access, f Flags) error {
	if !q.n.isOpen() {
		return ErrClosed
	}
	r := m.reg()
	if r == nil {
		return ErrInvalid
	}
	return q.post(&verbs.SendWR{WRID: ctx, Opcode: verbs.WRBindMW, Flags: f.verbs(), MW: w.mw,
		Key:  nextKey(w.mw.RKey()),
		Bind: verbs.BindInfo{MR: r, Addr: addr, Length: length, Access: access.verbs() &^ verbs.AccessLocalWrite}})
}

// FastRegister is NdkFastRegister: the fast-registration region m gets
// pages (each of the same size, a power of two), its first byte fbo bytes into
// the first page, length bytes long, at IOVA baseVA, with access's rights.
func (q *QP) FastRegister(ctx uint64, m *MR, pages [][]byte, fbo int, length int, baseVA uint64, access Access, f Flags) error {
	if !q.n.isOpen() {
		return ErrClosed
	}
	r := m.reg()
	if r == nil || !m.fast || len(pages) == 0 || fbo < 0 || fbo >= len(pages[0]) || length <= 0 {
		return ErrInvalid
	}
	ps := len(pages[0])
	sgl := make([][]byte, 0, len(pages))
	left := length
	for i, p := range pages {
		if len(p) != ps {
			return ErrInvalid
		}
		if i == 0 {
			p = p[fbo:]
		}
		p = p[:min(len(p), left)]
		sgl = append(sgl, p)
		if left -= len(p); left == 0 {
			break
		}
	}
	if left > 0 {
		return ErrInvalid
	}
	if _, err := r.MapSG(sgl, ps, baseVA); err != nil {
		return err
	}
	return q.post(&verbs.SendWR{WRID: ctx, Opcode: verbs.WRRegMR, Flags: f.verbs(), MR: r,
		Key: nextKey(r.RKey()), Access: access.verbs()})
}

// Invalidate is NdkInvalidate of a fast-registration region or a window:
// exactly one of m and w is non-nil.
func (q *QP) Invalidate(ctx uint64, m *MR, w *MW, f Flags) error {
	var key uint32
	switch {
	case m != nil && w == nil:
		key = m.RemoteToken()
	case w != nil && m == nil:
		key = w.RemoteToken()
	default:
		return ErrInvalid
	}
	return q.post(&verbs.SendWR{WRID: ctx, Opcode: verbs.WRLocalInv, Flags: f.verbs(), InvalidateRKey: key})
}

// Flush is NdkFlushQp: every pending request completes, cancelled
// (Result.Err is ErrCanceled), and the QP takes no more.
func (q *QP) Flush() error {
	if !q.n.isOpen() {
		return ErrClosed
	}
	q.toErr()
	return nil
}

// toErr moves the QP to ERR, which flushes its queues; the Op is not waited
// for: the flushed requests report through the CQs.
func (q *QP) toErr() {
	a := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSErr}}
	q.qp.Modify(&a, verbs.AttrState)
}

// Close is NdkCloseObject: the QP is destroyed, its pending requests flushed
// (LT15); it completes asynchronously, once that is done.
func (q *QP) Close(done func(error)) error { return q.n.close(done) }
