// Regression tests for transport bugs a review against rxe and the IBTA found
// (2026-12-07): each fails on the code before its fix.

package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// mmQPAccess is mmPair's QP access.
const mmQPAccess = qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead | qpattr.AccessRemoteAtomic | qpattr.AccessFlushGlobal

// A go-back-N retry rewinds the requester over a BIND_MW and a REG_MR that ran
// already: they run once. Before, the requester ran them again on objects it had
// let go of, and the engine crashed (nil pointer).
func TestRetryRunsLocalOpOnce(t *testing.T) {
	_, ctl, a, b := ctlPair(t, pairOpts{}, nodeOpts{access: mmAccess}, connOpts{mtu: qpattr.MTU1024, access: mmQPAccess})
	mw, err := a.pd.AllocMW(mr.Type2)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	fr, err := a.pd.AllocFastRegMR(2)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Dereg()
	if _, err := fr.MapSG([][]byte{pages(t, 1, []int{0})[0]}, 4096, 0x5000_0000); err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Bool
	ctl.set(func() {
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			if p.Opcode == wire.RCRDMAWriteOnly && dropped.CompareAndSwap(false, true) {
				return nil // the first WRITE is lost: the second draws a sequence NAK
			}
			return [][]byte{f}
		}
	})
	fill(a.buf[:200], 3)
	mwKey, frKey := incRKey(mw.RKey()), fr.LKey()&^0xff|0x44
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 100)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: mwKey,
			Bind: BindInfo{MR: a.mr, Addr: a.mr.Addr(), Length: 4096, Access: mr.RemoteRead}},
		{WRID: 3, Opcode: WRRegMR, Flags: SendSignaled, MR: fr, Key: frKey, Access: mr.LocalWrite | mr.RemoteRead},
		{WRID: 4, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(100, 100)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()},
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	got := pollN(t, a.cq, 4, 5*time.Second)
	checkWC(t, got[0], cq.WC{WRID: 1, Opcode: cq.RDMAWrite, ByteLen: 100, QPN: a.qp.QPN()})
	checkWC(t, got[1], cq.WC{WRID: 2, Opcode: cq.BindMW, QPN: a.qp.QPN()})
	checkWC(t, got[2], cq.WC{WRID: 3, Opcode: cq.RegMR, QPN: a.qp.QPN()})
	checkWC(t, got[3], cq.WC{WRID: 4, Opcode: cq.RDMAWrite, ByteLen: 100, QPN: a.qp.QPN()})
	if !dropped.Load() || a.d.Counters()[CntCompRetry] == 0 {
		t.Fatalf("no retry: the test did not rewind over the local operations")
	}
	if mw.RKey() != mwKey || !mw.Window().Valid() || fr.RKey() != frKey || !fr.Region().Valid() {
		t.Fatalf("after the retry: window key %#x (want %#x) valid %v, region key %#x (want %#x) valid %v",
			mw.RKey(), mwKey, mw.Window().Valid(), fr.RKey(), frKey, fr.Region().Valid())
	}
	checkBytes(t, "WRITEs", b.buf[:200], a.buf[:200])
	if st, _, _ := a.qp.Query(); st.State != qpattr.RTS {
		t.Fatalf("QP %v after the retry, want RTS", st.State)
	}
}

// A WR that fails in the requester (a bind that must fail, o10-37.2.30) stops
// the send queue there: the WRITE posted after it is flushed and never reaches
// the wire, as rxe moves the QP to ERR at once. Before, it went out and ran at
// the responder while its completion said WR_FLUSH_ERR.
func TestNothingSentAfterLocalError(t *testing.T) {
	// A local ACK timeout of 4 s: WRITE 1, held unacknowledged, is not resent
	// while the test runs, however loaded the machine.
	_, ctl, a, b := ctlPair(t, pairOpts{}, nodeOpts{access: mmAccess},
		connOpts{mtu: qpattr.MTU1024, access: mmQPAccess, timeout: 20})
	mw, err := a.pd.AllocMW(mr.Type2)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	var writes atomic.Int32
	ctl.set(func() {
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			if p.Opcode == wire.RCRDMAWriteOnly {
				writes.Add(1)
			}
			return [][]byte{f}
		}
		ctl.onRecv = func(p *wire.Packet) rxAction { return rxHold } // WRITE 1 stays unacknowledged
	})
	fill(a.buf[:64], 5)
	bi := BindInfo{MR: a.mr, Addr: a.mr.Addr(), Length: 64, Access: mr.RemoteRead}
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 32)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: incRKey(mw.RKey()), Bind: bi},
		{WRID: 3, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: incRKey(incRKey(mw.RKey())), Bind: bi}, // bound already
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first WRITE", func() bool { return writes.Load() >= 1 })
	a.d.Sync().Wait()
	// Posted after the failure: its doorbell runs the requester again.
	send(t, a, SendWR{WRID: 4, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(32, 32)},
		RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
	a.d.Sync().Wait()
	a.d.Sync().Wait()
	ctl.set(func() { ctl.onRecv = nil })
	ctl.release(func(*wire.Packet) bool { return true })
	got := pollN(t, a.cq, 4, 5*time.Second)
	checkWC(t, got[0], cq.WC{WRID: 1, Opcode: cq.RDMAWrite, ByteLen: 32, QPN: a.qp.QPN()})
	checkWC(t, got[1], cq.WC{WRID: 2, Opcode: cq.BindMW, QPN: a.qp.QPN()})
	checkWC(t, got[2], cq.WC{WRID: 3, Status: cq.MWBindErr, Opcode: cq.BindMW, QPN: a.qp.QPN()})
	if got[3].WRID != 4 || got[3].Status != cq.WRFlushErr {
		t.Fatalf("WR 4: %+v, want WR_FLUSH_ERR", got[3])
	}
	b.d.Sync().Wait()
	if n := writes.Load(); n != 1 || b.buf[8192] != 0 {
		t.Fatalf("%d WRITEs on the wire, byte at the flushed WRITE's target %#x: a WR after the failed one went out", n, b.buf[8192])
	}
}

// A send CQ that overruns in a completion the requester makes (UC completes a
// SEND once it is out) is class G: the QP goes to ERR then, not when something
// else next runs it.
func TestCQOverrunInRequesterFailsQP(t *testing.T) {
	p := newPair(t, pairOpts{})
	a := newNode(t, p.a, nodeOpts{typ: qpattr.UC, cqe: 1})
	b := newNode(t, p.b, nodeOpts{typ: qpattr.UC})
	connect(t, a, b, connOpts{})
	for i := range 4 {
		recv(t, b, uint64(10+i), uint64(i*64), 64)
	}
	wrs := make([]SendWR, 4)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i + 1), Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("x")}
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A's QP in ERR after its CQ overran", func() bool {
		_, inErr := errState(a.qp)
		return inErr
	})
	if a.d.Counters()[CntCQOverflow] == 0 {
		t.Fatalf("the CQ did not overflow")
	}
	// Nothing went out after the SEND whose completion overran: later ones
	// are flushed, not run at the peer with their completions lost.
	time.Sleep(20 * time.Millisecond)
	var wcs [8]cq.WC
	if n := b.cq.Poll(wcs[:]); n != 2 {
		t.Fatalf("B received %d SENDs, want the 2 before the overrun (a CQ of 1 holds one, the second overran)", n)
	}
}

// SQD entered while a go-back-N retry resends: the WQEs that went out before the
// rewind started, so SQ Drained waits for all of them (IBTA 10.3.1). Before, the
// drain ended at the rewound index and the event came with 2 of 6 complete.
func TestSQDrainedAfterRewind(t *testing.T) {
	events := make(chan AsyncEvent, 16)
	po := pairOpts{events: func(ev AsyncEvent) {
		if ev.QP != nil && ev.Type == EventSQDrained {
			events <- ev
		}
	}}
	// Timeout 14 (67 ms): 7 retries leave the test about half a second to
	// enter SQD before the QP would give up, however loaded the machine.
	_, ctl, a, b := ctlPair(t, po, nodeOpts{}, connOpts{timeout: 14, retry: 7})
	for i := range 6 {
		recv(t, b, uint64(100+i), uint64(i*64), 64)
	}
	var sends atomic.Int32
	ctl.set(func() {
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			if p.Opcode == wire.RCSendOnly {
				sends.Add(1)
			}
			return [][]byte{f}
		}
		ctl.onRecv = func(p *wire.Packet) rxAction { return rxHold }
	})
	wrs := make([]SendWR, 6)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i + 1), Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("x")}
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	// The local ACK timeout rewinds to the first SEND; the window, cut to 2,
	// lets the retry resend only the first two.
	waitFor(t, "a retransmission", func() bool { return sends.Load() > 6 })
	if err := a.qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: qpattr.SQD, SQDrainNotify: true}},
		qpattr.AttrState|qpattr.AttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	ctl.set(func() { ctl.onRecv = nil })
	ctl.release(func(*wire.Packet) bool { return true })
	select {
	case <-events:
	case <-time.After(5 * time.Second):
		t.Fatalf("no SQ Drained event")
	}
	var buf [8]cq.WC
	if n := a.cq.Poll(buf[:]); n != 6 {
		t.Fatalf("%d of 6 SENDs complete at SQ Drained, while B has them all", n)
	}
	if got := pollN(t, b.cq, 6, time.Second); len(got) != 6 {
		t.Fatalf("B received %d", len(got))
	}
}

// The responder sends one NAK for a gap: after an RNR NAK, the requests the
// requester pipelined behind the refused one are dropped, not NAKed for
// sequence (hfi1's r_nak_state), which would spend the requester's retry_cnt on
// an RNR.
func TestRNRNakOnlyNakOutstanding(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{}, connOpts{})
	r.send(r.req(wire.RCSendOnly, 1000, wire.IBFields{Payload: []byte("a")}),
		r.req(wire.RCSendOnly, 1001, wire.IBFields{Payload: []byte("b")}),
		r.req(wire.RCSendOnly, 1002, wire.IBFields{Payload: []byte("c")}))
	got := r.recv(1, 200*time.Millisecond)
	if len(got) != 1 || got[0].AETH == nil || got[0].AETH.Syndrome().Kind() != wire.KindRNRNAK || got[0].BTH.PSN() != 1000 {
		for _, p := range got {
			t.Logf("%v PSN %d", p.Opcode, p.BTH.PSN())
		}
		t.Fatalf("got %d responses, want one RNR NAK at 1000", len(got))
	}
	// The retry from 1000, with a receive posted, goes on as usual.
	recv(t, n, 1, 0, 64)
	recv(t, n, 2, 64, 64)
	r.send(r.req(wire.RCSendOnly, 1000, wire.IBFields{Payload: []byte("a")}),
		r.req(wire.RCSendOnly, 1001, wire.IBFields{Payload: []byte("b")}))
	got = r.recv(1, time.Second)
	if len(got) == 0 {
		t.Fatalf("no ACK after the retry")
	}
	expectAck(t, got[len(got)-1], wire.RCAcknowledge, 1001, wire.ACKSyndrome(wire.CreditsUnlimited))
}

// A SEND whose completion the receive CQ could not take is not acknowledged
// (class G, rxe RESPST_ERR_CQ_OVERFLOW): the requester must not report success
// for a message whose receive completion was lost.
func TestRecvCQOverrunNotAcked(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{cqe: 2}, connOpts{})
	for i := range 8 {
		recv(t, n, uint64(i), uint64(i)*64, 64)
	}
	for i := range 8 {
		r.send(r.req(wire.RCSendOnly, wire.PSN(1000+i), wire.IBFields{Payload: []byte{byte(i)}}))
	}
	got := r.recv(8, 300*time.Millisecond)
	var wcs [16]cq.WC
	k := n.cq.Poll(wcs[:])
	if r.d.Counters()[CntCQOverflow] == 0 {
		t.Fatalf("the receive CQ did not overflow (%d completions)", k)
	}
	for _, p := range got {
		if p.Opcode == wire.RCAcknowledge && p.AETH.Syndrome().Kind() == wire.KindACK && int(p.BTH.PSN().Sub(1000)) >= k {
			t.Fatalf("ACK of PSN %d, but only %d SENDs from 1000 have a completion", p.BTH.PSN(), k)
		}
	}
	if _, inErr := errState(n.qp); !inErr {
		t.Fatalf("QP not in ERR after its CQ overran")
	}
}

// A FLUSH takes no responder resource, so it cannot evict the saved result of
// an atomic that a retry asks for again (max_dest_rd_atomic 1: the FLUSH after
// the FETCH_ADD took its only slot). The retried FLUSH is answered as well.
func TestFlushKeepsAtomicResource(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{access: mmAccess}, connOpts{rdAtomic: 1, access: mmQPAccess})
	binary.NativeEndian.PutUint64(n.buf, 10)
	va, rk := n.mr.Addr(), n.mr.RKey()
	add := r.req(wire.RCFetchAdd, 1000, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: va, RKey: rk, SwapAdd: 5}})
	flush := r.req(wire.RCFlush, 1001, wire.IBFields{FETH: wire.FETHFields{Selectivity: 1, PlacementType: 1},
		RETH: wire.RETHFields{VA: va, RKey: rk, DMALen: 8}})
	r.send(add, flush)
	if got := r.recv(2, time.Second); len(got) != 2 {
		t.Fatalf("%d responses to the FETCH_ADD and the FLUSH, want 2", len(got))
	}
	// Both responses lost: the requester resends both.
	r.send(add, flush)
	got := r.recv(2, time.Second)
	if len(got) != 2 || got[0].Opcode != wire.RCAtomicAcknowledge || got[0].BTH.PSN() != 1000 ||
		got[0].AtomicAckETH == nil || got[0].AtomicAckETH.OrigRemData() != 10 ||
		got[1].Opcode != wire.RCRDMAReadResponseOnly || got[1].BTH.PSN() != 1001 {
		for _, p := range got {
			t.Logf("%v PSN %d", p.Opcode, p.BTH.PSN())
		}
		t.Fatalf("replies to the retried FETCH_ADD and FLUSH: want the atomic ACK (original 10) at 1000 and the FLUSH's response at 1001")
	}
	if v := binary.NativeEndian.Uint64(n.buf); v != 15 {
		t.Fatalf("word %d after the retry, want 15: the add ran again", v)
	}
}

// A UC SEND longer than the SRQ receive WQE it took completes that WQE with an
// error and leaves the QP as it is (class E, rxe RESPST_ERR_LENGTH with an
// SRQ). Before, the WQE stayed with this QP without a completion, gone from the
// shared queue.
func TestUCSRQLengthErrorCompletes(t *testing.T) {
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(lb, Config{GIDs: gids(addrB)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); la.Close(); lb.Close() })
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	s, err := pd.CreateSRQ(SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	n := newNode(t, d, nodeOpts{typ: qpattr.UC, pd: pd, srq: s})
	rawConnect(t, n.qp, qpattr.UC, la.Info().MAC, connOpts{})
	r := &rawPeer{t: t, l: la, d: d, dqpn: n.qp.QPN(), bufs: make([][]byte, 64), sizes: make([]int, 64)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, 9000)
	}
	if _, err := s.PostRecv([]RecvWR{{WRID: 9, SGL: []SGE{n.mr.SGE(0, 8)}}}); err != nil {
		t.Fatal(err)
	}
	r.send(r.req(wire.UCSendOnly, 1000, wire.IBFields{Payload: make([]byte, 100)}))
	got := pollN(t, n.cq, 1, time.Second)
	checkWC(t, got[0], cq.WC{WRID: 9, Status: cq.LocLenErr, Opcode: cq.Recv, QPN: n.qp.QPN()})
	// A SEND broken off by a packet out of its sequence (class D1E): with an
	// SRQ, the WQE it took completes with REM_INV_REQ_ERR (rxe
	// do_class_d1e_error).
	if _, err := s.PostRecv([]RecvWR{{WRID: 11, SGL: []SGE{n.mr.SGE(0, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	r.send(r.req(wire.UCSendFirst, 1100, wire.IBFields{Payload: make([]byte, 1024)}),
		r.req(wire.UCRDMAWriteMiddle, 1101, wire.IBFields{Payload: make([]byte, 1024)}))
	got = pollN(t, n.cq, 1, time.Second)
	checkWC(t, got[0], cq.WC{WRID: 11, Status: cq.RemInvReqErr, Opcode: cq.Recv, QPN: n.qp.QPN()})
	if st, _, _ := n.qp.Query(); st.State != qpattr.RTS || s.Len() != 0 {
		t.Fatalf("after the length error: QP %v, SRQ holds %d", st.State, s.Len())
	}
	// The next message, with a WQE that fits, arrives as usual.
	if _, err := s.PostRecv([]RecvWR{{WRID: 10, SGL: []SGE{n.mr.SGE(0, 128)}}}); err != nil {
		t.Fatal(err)
	}
	r.send(r.req(wire.UCSendOnly, 1200, wire.IBFields{Payload: []byte("fits")}))
	got = pollN(t, n.cq, 1, time.Second)
	checkWC(t, got[0], cq.WC{WRID: 10, Opcode: cq.Recv, ByteLen: 4, QPN: n.qp.QPN()})
}

// A receive posted while Destroy runs either fails with ErrClosed or completes,
// flushed (LT4, O2-6). Before, destroyQP flushed the rings and only then told
// posters the QP was gone: a post between the two was accepted and never
// completed.
func TestDestroyFlushesConcurrentPost(t *testing.T) {
	p := newPair(t, pairOpts{})
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.a.CreateCQ(1<<15-1, CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.RegMR(make([]byte, 4096), 0x1000, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Dereg(); c.Close(); pd.Close() }()
	wcs := make([]cq.WC, 256)
	for round := range 60 {
		qp, err := pd.CreateQP(QPInitAttr{Type: qpattr.RC, SendCQ: c, RecvCQ: c,
			Cap: qpattr.Cap{MaxSendWR: 1, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		init := QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1}}
		if err := qp.ModifySync(&init, qpattr.AttrState|qpattr.AttrPKeyIndex|qpattr.AttrPort|qpattr.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		var posted int
		done := make(chan struct{})
		go func() {
			defer close(done)
			wr := []RecvWR{{WRID: 1, SGL: []SGE{{Addr: 0x1000, Length: 64, LKey: m.LKey()}}}}
			for {
				if _, err := qp.PostRecv(wr); err == nil {
					posted++
				} else if errors.Is(err, ErrClosed) {
					return
				}
			}
		}()
		time.Sleep(20 * time.Microsecond)
		if err := qp.Destroy().Wait(); err != nil {
			t.Fatal(err)
		}
		<-done
		got := 0
		for n := c.Poll(wcs); n > 0; n = c.Poll(wcs) {
			for _, w := range wcs[:n] {
				if w.QPN == qp.QPN() {
					got++
				}
			}
		}
		if got != posted {
			t.Fatalf("round %d: %d receives posted, %d flushed by the time Destroy returned", round, posted, got)
		}
	}
}

// A CQ.Destroy refused for an unacknowledged event changes nothing, not even
// for a moment: a CreateQP on the CQ meanwhile succeeds. Before, the CQ was
// marked closing until the refusal undid it.
func TestCQDestroyRefusedChangesNothing(t *testing.T) {
	p := newPair(t, pairOpts{})
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	ch := NewCompChannel()
	c, err := p.a.CreateCQ(64, CQOptions{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	c.Push(&cq.WC{WRID: 1}, false)
	if _, err := ch.GetEvent(context.Background()); err != nil {
		t.Fatal(err)
	}
	for round := range 3000 {
		var wg sync.WaitGroup
		var derr, qerr error
		var qp *QP
		wg.Go(func() { derr = c.Destroy().Wait() })
		wg.Go(func() {
			qp, qerr = pd.CreateQP(QPInitAttr{Type: qpattr.RC, SendCQ: c, RecvCQ: c,
				Cap: qpattr.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		})
		wg.Wait()
		if !errors.Is(derr, ErrBusy) {
			t.Fatalf("Destroy with an unacknowledged event: %v, want ErrBusy", derr)
		}
		if qerr != nil {
			t.Fatalf("round %d: CreateQP on a CQ whose Destroy was refused: %v", round, qerr)
		}
		if err := qp.Destroy().Wait(); err != nil {
			t.Fatal(err)
		}
	}
	c.AckEvents(1)
	if err := c.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc().Wait(); err != nil {
		t.Fatal(err)
	}
}

// MR.Dereg's Op completes only once the engine has passed its loop again: an
// engine busy with a packet may still hold a slice of the region, and a caller
// that unmaps the memory when Wait returns (the daemon's DEREG) must not pull
// it from under that copy. Before, the Op was complete when Dereg returned.
func TestDeregWaitsForEngine(t *testing.T) {
	p := newPair(t, pairOpts{})
	pd, err := p.a.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	m, err := pd.RegMR(make([]byte, 4096), 0x1000, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	held := p.a.sh[0].exec(func(*engine) error { <-release; return nil }) // the engine mid-packet
	op := m.Dereg()
	select {
	case <-op.Done():
		close(release)
		t.Fatalf("Dereg complete while the engine was busy: %v", op.Err())
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := held.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(); err != nil {
		t.Fatalf("Dereg: %v", err)
	}
	if err := m.Dereg().Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a second Dereg: %v, want ErrClosed", err)
	}
}
