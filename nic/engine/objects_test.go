// Objects and control operations: SRQ, SQD, query, events, CQ overflow, limits
// and counters.

package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/qpattr"
)

func TestSRQ(t *testing.T) {
	events := make(chan AsyncEvent, 16)
	p := newPair(t, pairOpts{eventsB: func(ev AsyncEvent) { events <- ev }})
	pdb, _ := p.b.AllocPD()
	srq, err := pdb.CreateSRQ(SRQAttr{MaxWR: 8, MaxSGE: 2, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	a1 := newNode(t, p.a, nodeOpts{})
	a2 := newNode(t, p.a, nodeOpts{})
	b1 := newNode(t, p.b, nodeOpts{pd: pdb, srq: srq})
	b2 := newNode(t, p.b, nodeOpts{pd: pdb, srq: srq})
	connect(t, a1, b1, connOpts{})
	connect(t, a2, b2, connOpts{})
	if _, err := b1.qp.PostRecv([]RecvWR{{}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("PostRecv on an SRQ QP: got %v, want ErrInvalid", err)
	}
	srqMR := b1.mr
	for i := range 5 {
		if _, err := srq.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{srqMR.SGE(uint64(i)*4096, 4096)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Both QPs take from the one SRQ, in order.
	send(t, a1, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("one")})
	pollOne(t, a1.cq)
	send(t, a2, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("two")})
	pollOne(t, a2.cq)
	send(t, a1, SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("three")})
	pollOne(t, a1.cq)
	checkWC(t, pollOne(t, b1.cq), cq.WC{WRID: 0, Opcode: cq.Recv, ByteLen: 3, QPN: b1.qp.QPN()})
	checkWC(t, pollOne(t, b2.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 3, QPN: b2.qp.QPN()})
	checkWC(t, pollOne(t, b1.cq), cq.WC{WRID: 2, Opcode: cq.Recv, ByteLen: 5, QPN: b1.qp.QPN()})
	if string(srqMR.Bytes()[4096:4099]) != "two" {
		t.Fatalf("SRQ buffer 1: %q", srqMR.Bytes()[4096:4099])
	}
	// 2 left < limit 3: the limit event, once.
	select {
	case ev := <-events:
		for ev.Type == EventPortActive {
			ev = <-events
		}
		if ev.Type != EventSRQLimitReached || ev.SRQ != srq {
			t.Fatalf("event %v, want SRQ limit reached", ev.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SRQ limit event")
	}
	if got := srq.Query(); got.Limit != 0 || got.MaxWR != 8 || srq.Len() != 2 {
		t.Fatalf("SRQ after the event: %+v, %d posted", got, srq.Len())
	}
	if err := srq.Destroy().Wait(); !errors.Is(err, ErrBusy) {
		t.Fatalf("destroy an SRQ in use: got %v, want ErrBusy", err)
	}
	// A QP error flushes the QP's receive in progress, not the SRQ's WQEs, and
	// raises Last WQE Reached.
	if err := b1.qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: qpattr.Err}}, qpattr.AttrState); err != nil {
		t.Fatal(err)
	}
	if srq.Len() != 2 {
		t.Fatalf("SRQ lost WQEs to a QP error: %d left", srq.Len())
	}
	for _, n := range []*node{b1, b2} {
		if err := n.qp.Destroy().Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestSQDrain(t *testing.T) {
	events := make(chan AsyncEvent, 16)
	_, a, b := rcPair(t, pairOpts{events: func(ev AsyncEvent) {
		if ev.QP != nil {
			events <- ev
		}
	}}, nodeOpts{}, connOpts{minRNR: 14})
	// A SEND waits for a receive (RNR); SQD lets it finish but starts no more.
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("first")})
	time.Sleep(5 * time.Millisecond)
	if err := a.qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: qpattr.SQD, SQDrainNotify: true}},
		qpattr.AttrState|qpattr.AttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	send(t, a, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, InlineData: []byte("later"), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if err := a.qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: qpattr.RTS}}, qpattr.AttrState); !errors.Is(err, ErrWrongState) {
		t.Fatalf("SQD->RTS while draining: got %v, want ErrWrongState", err)
	}
	recv(t, b, 1, 0, 64)
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.Send, ByteLen: 5, QPN: a.qp.QPN()})
	select {
	case ev := <-events:
		if ev.Type != EventSQDrained || ev.QP != a.qp {
			t.Fatalf("event %v, want SQ drained", ev.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SQ drained event")
	}
	noMore(t, a.cq) // the WRITE waits in SQD
	if err := a.qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: qpattr.RTS}}, qpattr.AttrState); err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 2, Opcode: cq.RDMAWrite, ByteLen: 5, QPN: a.qp.QPN()})
}

func TestQuery(t *testing.T) {
	p, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{mtu: qpattr.MTU2048, psnA: 77, psnB: 99, timeout: 12, rdAtomic: 8})
	attr, init, err := a.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if attr.State != qpattr.RTS || attr.PathMTU != qpattr.MTU2048 || attr.SQPSN != 77 || attr.RQPSN != 99 ||
		attr.DestQPN != b.qp.QPN() || attr.Timeout != 12 || attr.MaxRdAtomic != 8 || attr.AV.DGID != b.gid() {
		t.Fatalf("Query: %+v", attr)
	}
	if init.Type != qpattr.RC || init.SendCQ != a.cq || init.Cap.MaxSendWR != 128 {
		t.Fatalf("Query init attributes: %+v", init)
	}
	da := p.a.Query()
	if da.MaxQP != MaxQP || da.MaxSGE != MaxSGE || da.MaxQPRdAtom != MaxQPRdAtom || da.MaxInlineData != MaxInlineData {
		t.Fatalf("device attributes: %+v", da)
	}
	pa := p.a.QueryPort()
	if pa.State != PortActive || pa.ActiveMTU != qpattr.MTU4096 || pa.LinkLayer != "Ethernet" || len(pa.GIDs) != 1 {
		t.Fatalf("port attributes: %+v", pa)
	}
	// A port MTU cap.
	q := newPair(t, pairOpts{mtu: 1024})
	if got := q.a.QueryPort().ActiveMTU; got != qpattr.MTU1024 {
		t.Fatalf("active MTU with Config.MTU 1024: got %v", got)
	}
	n := newNode(t, q.a, nodeOpts{})
	init2 := QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1}}
	n.qp.ModifySync(&init2, qpattr.AttrState|qpattr.AttrPort|qpattr.AttrPKeyIndex|qpattr.AttrAccessFlags)
	rtr := QPAttr{Attr: qpattr.Attr{State: qpattr.RTR, PathMTU: qpattr.MTU2048, DestQPN: 1, MaxDestRdAtomic: 1},
		AV: AV{DGID: gids(addrB)[0]}}
	if err := n.qp.ModifySync(&rtr, qpattr.AttrState|qpattr.AttrAV|qpattr.AttrPathMTU|qpattr.AttrDestQPN|qpattr.AttrRQPSN|
		qpattr.AttrMaxDestRdAtomic|qpattr.AttrMinRNRTimer); !errors.Is(err, ErrInvalid) {
		t.Fatalf("path MTU above the port's: got %v, want ErrInvalid", err)
	}
}

// TestCQOverflow: a full CQ is class G: the QP goes to ERR, the CQ reports its
// error, and the device raises CQ error.
func TestCQOverflow(t *testing.T) {
	events := make(chan AsyncEvent, 16)
	p := newPair(t, pairOpts{events: func(ev AsyncEvent) { events <- ev }})
	a := newNode(t, p.a, nodeOpts{})
	b := newNode(t, p.b, nodeOpts{})
	c, err := p.a.CreateCQ(2, CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	qp, err := a.pd.CreateQP(QPInitAttr{Type: qpattr.RC, SendCQ: c, RecvCQ: c, Cap: qpattr.Cap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 8}})
	if err != nil {
		t.Fatal(err)
	}
	a.qp.Destroy().Wait()
	a.qp = qp
	connect(t, a, b, connOpts{})
	for i := range 8 {
		send(t, a, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, InlineData: []byte("x"), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	deadline := time.After(5 * time.Second)
	for got := map[EventType]bool{}; !got[EventCQErr]; {
		select {
		case ev := <-events:
			got[ev.Type] = true
		case <-deadline:
			t.Fatalf("no CQ error event")
		}
	}
	if st, ok := errState(qp); !ok {
		t.Fatalf("QP in %v after its CQ overflowed, want ERR", st)
	}
	if n := p.a.Counters()[CntCQOverflow]; n == 0 {
		t.Fatalf("cq_overflow: got 0")
	}
	qp.Destroy().Wait()
}

func TestCounterNames(t *testing.T) {
	rxe := []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
		"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err",
		"completer_retry_err", "send_err", "link_downed", "rdma_sends", "rdma_recvs"}
	for i, n := range rxe {
		if got := Counter(i).String(); got != n {
			t.Errorf("counter %d: got %q, want %q", i, got, n)
		}
	}
	var c Counters
	if m := c.Map(); len(m) != int(NumCounters) {
		t.Errorf("Map has %d names for %d counters: duplicates", len(m), NumCounters)
	}
	// A SEND round trip moves the basic counters on both sides.
	p, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	recv(t, b, 1, 0, 64)
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("count")})
	pollOne(t, a.cq)
	pollOne(t, b.cq)
	// A frame can reach the peer before its sender's engine returns from WriteBatch
	// and counts it: wait for the counters to settle.
	var ca, cb Counters
	settled := func() bool {
		ca, cb = p.a.Counters(), p.b.Counters()
		return ca[CntSentPkts] == 1 && ca[CntRcvdPkts] == 1 && ca[CntRDMASends] == 1 &&
			cb[CntRcvdPkts] == 1 && cb[CntSentPkts] == 1 && cb[CntRDMARecvs] == 1
	}
	for deadline := time.Now().Add(5 * time.Second); !settled() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !settled() {
		t.Fatalf("counters: a %v b %v", ca.Map(), cb.Map())
	}
}

func TestDeviceLifecycle(t *testing.T) {
	p := newPair(t, pairOpts{})
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.RegMR(make([]byte, 64), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc().Wait(); !errors.Is(err, ErrBusy) {
		t.Fatalf("dealloc a PD with an MR: got %v, want ErrBusy", err)
	}
	m.Dereg()
	if err := pd.Dealloc().Wait(); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := p.a.AllocPD(); !errors.Is(err, ErrClosed) {
		t.Fatalf("AllocPD after close: got %v, want ErrClosed", err)
	}
	if err := p.a.Sync().Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after close: got %v, want ErrClosed", err)
	}
}
