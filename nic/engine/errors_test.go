// Responder checks and their NAKs, the requester's error completions, the move
// to ERR and the flush of everything outstanding.

package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
)

// TestRemoteErrors: each violation gets the NAK the spec names, the requester's
// WC carries the matching status, both QPs go to ERR, and every other outstanding
// WR on both sides completes with WR_FLUSH_ERR: nothing posted is lost.
func TestRemoteErrors(t *testing.T) {
	cases := []struct {
		name     string
		access   uint32 // responder QP access flags (0: all)
		wr       func(a, b *node) SendWR
		recvLen  uint32 // responder receive buffer
		want     cq.Status
		wantResp cq.Status // the responder's first receive WC (0: flushed)
		respEv   EventType
	}{
		{name: "write bad rkey", want: cq.RemAccessErr, respEv: EventQPAccessErr, wr: func(a, b *node) SendWR {
			return SendWR{Opcode: WRRDMAWrite, InlineData: []byte("x"), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 1}
		}},
		{name: "write out of bounds", want: cq.RemAccessErr, respEv: EventQPAccessErr, wr: func(a, b *node) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr() + uint64(b.mr.Len()) - 100, RKey: b.mr.RKey()}
		}},
		{name: "read out of bounds", want: cq.RemAccessErr, respEv: EventQPAccessErr, wr: func(a, b *node) SendWR {
			return SendWR{Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr() - 8, RKey: b.mr.RKey()}
		}},
		{name: "atomic bad rkey", want: cq.RemAccessErr, respEv: EventQPAccessErr, wr: func(a, b *node) SendWR {
			return SendWR{Opcode: WRAtomicFetchAdd, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: 0x12345600}
		}},
		{name: "write without REMOTE_WRITE", access: qpattr.AccessRemoteRead, want: cq.RemInvReqErr, respEv: EventQPReqErr,
			wr: func(a, b *node) SendWR {
				return SendWR{Opcode: WRRDMAWrite, InlineData: []byte("x"), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			}},
		{name: "read without REMOTE_READ", access: qpattr.AccessRemoteWrite, want: cq.RemInvReqErr, respEv: EventQPReqErr,
			wr: func(a, b *node) SendWR {
				return SendWR{Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			}},
		{name: "atomic without REMOTE_ATOMIC", access: qpattr.AccessRemoteWrite, want: cq.RemInvReqErr, respEv: EventQPReqErr,
			wr: func(a, b *node) SendWR {
				return SendWR{Opcode: WRAtomicCmpSwp, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			}},
		{name: "send longer than the receive buffer", recvLen: 100, want: cq.RemInvReqErr, wantResp: cq.LocLenErr, respEv: EventQPReqErr,
			wr: func(a, b *node) SendWR {
				return SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 3000)}}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			events := make(chan AsyncEvent, 16)
			po := pairOpts{eventsB: func(ev AsyncEvent) {
				if ev.QP != nil {
					events <- ev
				}
			}}
			_, a, b := rcPair(t, po, nodeOpts{}, connOpts{access: c.access})
			const nRecv = 5
			rl := c.recvLen
			if rl == 0 {
				rl = 4096
			}
			for i := range nRecv {
				recv(t, b, uint64(100+i), 0, rl)
			}
			// A good WR first, then the bad one, then more that can never run.
			wrs := []SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("ok")}}
			bad := c.wr(a, b)
			bad.WRID = 2
			wrs = append(wrs, bad)
			for i := range 6 {
				wrs = append(wrs, SendWR{WRID: uint64(3 + i), Opcode: WRRDMAWrite, InlineData: []byte("late"), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			}
			if n, err := a.qp.PostSend(wrs); err != nil || n != len(wrs) {
				t.Fatalf("PostSend: %d, %v", n, err)
			}
			got := pollN(t, a.cq, len(wrs), 5*time.Second)
			if got[0].WRID != 1 || got[0].Status != cq.Success {
				t.Fatalf("first WC: got %+v, want success", got[0])
			}
			if got[1].WRID != 2 || got[1].Status != c.want {
				t.Fatalf("bad WR's WC: got WRID %d status %v, want 2 %v", got[1].WRID, got[1].Status, c.want)
			}
			for i, w := range got[2:] {
				if w.WRID != uint64(3+i) || w.Status != cq.WRFlushErr {
					t.Fatalf("WC %d: got WRID %d status %v, want %d %v", i+2, w.WRID, w.Status, 3+i, cq.WRFlushErr)
				}
			}
			noMore(t, a.cq)
			if s := a.qp.State(); s != qpattr.Err {
				t.Fatalf("requester state: got %v, want ERR", s)
			}
			// The responder: every receive completes, the first maybe with its own error.
			rg := pollN(t, b.cq, nRecv, 5*time.Second)
			for i, w := range rg {
				want := cq.WRFlushErr
				switch {
				case i == 0:
					want = cq.Success // the good SEND
				case i == 1 && c.wantResp != 0:
					want = c.wantResp
				}
				if w.WRID != uint64(100+i) || w.Status != want {
					t.Fatalf("responder WC %d: got WRID %d status %v, want %d %v", i, w.WRID, w.Status, 100+i, want)
				}
			}
			noMore(t, b.cq)
			if s := b.qp.State(); s != qpattr.Err {
				t.Fatalf("responder state: got %v, want ERR", s)
			}
			select {
			case ev := <-events:
				if ev.Type != c.respEv || ev.QP != b.qp {
					t.Fatalf("responder event: got %v, want %v", ev.Type, c.respEv)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no responder event")
			}
			// Posting in ERR is accepted and flushes.
			recv(t, b, 200, 0, 8)
			checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 200, Status: cq.WRFlushErr, Opcode: cq.Recv, QPN: b.qp.QPN()})
			send(t, a, SendWR{WRID: 300, Opcode: WRSend})
			checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 300, Status: cq.WRFlushErr, Opcode: cq.Send, QPN: a.qp.QPN()})
		})
	}
}

// TestRNR: with no receive posted the responder answers RNR NAK; the requester
// retries after the RNR timer and succeeds once a receive is posted, or fails with
// RNR_RETRY_EXC_ERR when rnr_retry runs out.
func TestRNR(t *testing.T) {
	t.Run("recovers", func(t *testing.T) {
		p, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{minRNR: 14, rnrRetry: 7}) // 0.96 ms
		send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("late receive")})
		time.Sleep(20 * time.Millisecond)
		recv(t, b, 9, 0, 64)
		checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.Send, ByteLen: 12, QPN: a.qp.QPN()})
		checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 9, Opcode: cq.Recv, ByteLen: 12, QPN: b.qp.QPN()})
		if n := p.a.Counters()[CntRcvRNR]; n == 0 {
			t.Errorf("rcvd_rnr_err: got 0, want > 0")
		}
		if n := p.b.Counters()[CntSndRNR]; n == 0 {
			t.Errorf("send_rnr_err: got 0, want > 0")
		}
	})
	t.Run("exhausted", func(t *testing.T) {
		p, a, _ := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{minRNR: 1, rnrRetry: 3})
		send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("nobody")})
		send(t, a, SendWR{WRID: 2, Opcode: WRSend, InlineData: []byte("behind")})
		got := pollN(t, a.cq, 2, 5*time.Second)
		if got[0].Status != cq.RNRRetryExcErr || got[1].Status != cq.WRFlushErr {
			t.Fatalf("got %v, %v, want %v, %v", got[0].Status, got[1].Status, cq.RNRRetryExcErr, cq.WRFlushErr)
		}
		if n := p.a.Counters()[CntRcvRNR]; n != 4 {
			t.Errorf("rcvd_rnr_err: got %d, want 4 (first try + 3 retries)", n)
		}
		if n := p.a.Counters()[CntRNRRetryExceeded]; n != 1 {
			t.Errorf("retry_rnr_exceeded_err: got %d, want 1", n)
		}
	})
}

// TestRetryExceeded: a peer that never answers makes the requester retransmit on
// every local ACK timeout, retry_cnt times, then fail with RETRY_EXC_ERR. The
// clock is manual: each Advance past the timeout fires exactly one retry.
func TestRetryExceeded(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	p := &pair{la: la, lb: lb}
	p.a, err = Open(la, Config{Clock: clk, GIDs: gids(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.a.Close()
	p.b, err = Open(lb, Config{Clock: clk, GIDs: gids(addrB)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.b.Close()
	a, b := newNode(t, p.a, nodeOpts{}), newNode(t, p.b, nodeOpts{})
	const timeoutCode = 10 // 4.19 ms
	connect(t, a, b, connOpts{timeout: timeoutCode, retry: 3})
	// Now cut the wire: B's engine stops reading.
	if err := p.b.Close(); err != nil {
		t.Fatal(err)
	}
	send(t, a, SendWR{WRID: 5, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("anyone?")})
	p.a.Sync().Wait()
	sent := func() uint64 { return p.a.Counters()[CntSentPkts] }
	if got := sent(); got != 1 {
		t.Fatalf("sent_pkts after the post: got %d, want 1", got)
	}
	step := ackTimeout(timeoutCode)
	for i := 1; i <= 3; i++ {
		clk.Advance(step / 2)
		p.a.Sync().Wait()
		if got := sent(); got != uint64(i) {
			t.Fatalf("retry %d: sent_pkts at half the timeout got %d, want %d", i, got, i)
		}
		clk.Advance(step)
		p.a.Sync().Wait()
		p.a.Sync().Wait()
		if got := sent(); got != uint64(i+1) {
			t.Fatalf("retry %d: sent_pkts got %d, want %d", i, got, i+1)
		}
	}
	var w [1]cq.WC
	if n := a.cq.Poll(w[:]); n != 0 {
		t.Fatalf("completion before retries ran out: %+v", w[0])
	}
	clk.Advance(2 * step)
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 5, Status: cq.RetryExcErr, Opcode: cq.Send, ByteLen: 7, QPN: a.qp.QPN()})
	c := p.a.Counters()
	if c[CntRetryExceeded] != 1 || c[CntCompRetry] != 3 || c[CntRetransmitted] != 3 {
		t.Fatalf("counters: retry_exceeded_err %d completer_retry_err %d retransmitted %d, want 1 3 3",
			c[CntRetryExceeded], c[CntCompRetry], c[CntRetransmitted])
	}
}

// TestFlushCountsExactlyN posts N WRs of every kind on both queues, breaks the
// connection, and counts exactly N completions per queue (O2-6).
func TestFlushCountsExactlyN(t *testing.T) {
	for _, how := range []string{"modify to ERR", "destroy", "device close"} {
		t.Run(how, func(t *testing.T) {
			_, a, b := rcPair(t, pairOpts{}, nodeOpts{cap: qpattr.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}, connOpts{})
			const n = 60
			for i := range n {
				recv(t, a, uint64(1000+i), uint64(i)*64, 64)
			}
			// b sends nothing; a sends writes to a region b does not have... no: to keep
			// WRs outstanding, a sends to b without receives (RNR forever).
			var wrs []SendWR
			for i := range n {
				op := []WROpcode{WRSend, WRRDMAWrite, WRRDMARead, WRAtomicFetchAdd}[i%4]
				wr := SendWR{WRID: uint64(i), Opcode: op, RemoteAddr: b.mr.Addr() + 8*uint64(i), RKey: b.mr.RKey()}
				if i%3 == 0 {
					wr.Flags = SendSignaled
				}
				switch op {
				case WRSend:
					wr.InlineData = []byte("s")
				case WRRDMAWrite:
					wr.SGL = []SGE{a.mr.SGE(8*uint64(i), 8)}
				default:
					wr.SGL = []SGE{a.mr.SGE(100000+8*uint64(i), 8)}
				}
				wrs = append(wrs, wr)
			}
			if k, err := a.qp.PostSend(wrs); err != nil || k != n {
				t.Fatalf("PostSend: %d, %v", k, err)
			}
			time.Sleep(5 * time.Millisecond)
			switch how {
			case "modify to ERR":
				if err := a.qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: qpattr.Err}}, qpattr.AttrState); err != nil {
					t.Fatal(err)
				}
			case "destroy":
				if err := a.qp.Destroy().Wait(); err != nil {
					t.Fatal(err)
				}
			case "device close":
				if err := a.d.Close(); err != nil {
					t.Fatal(err)
				}
			}
			got := pollN(t, a.cq, 2*n, 5*time.Second)
			sends, recvs := 0, 0
			seen := map[uint64]bool{}
			for _, w := range got {
				if seen[w.WRID] {
					t.Fatalf("WR %d completed twice", w.WRID)
				}
				seen[w.WRID] = true
				if w.Opcode.IsRecv() {
					recvs++
					if w.Status != cq.WRFlushErr {
						t.Fatalf("receive %d: status %v, want flush", w.WRID, w.Status)
					}
				} else {
					sends++
				}
			}
			if sends != n || recvs != n {
				t.Fatalf("completions: got %d sends and %d receives, want %d each", sends, recvs, n)
			}
			noMore(t, a.cq)
		})
	}
}

func TestPostErrors(t *testing.T) {
	p := newPair(t, pairOpts{})
	a := newNode(t, p.a, nodeOpts{cap: qpattr.Cap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 16}})
	other := newNode(t, p.a, nodeOpts{})
	b := newNode(t, p.b, nodeOpts{})
	wr := SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}}
	if _, err := a.qp.PostSend([]SendWR{wr}); !errors.Is(err, ErrWrongState) {
		t.Fatalf("post send in RESET: got %v, want ErrWrongState", err)
	}
	if _, err := a.qp.PostRecv([]RecvWR{{SGL: []SGE{a.mr.SGE(0, 8)}}}); !errors.Is(err, ErrWrongState) {
		t.Fatalf("post recv in RESET: got %v, want ErrWrongState", err)
	}
	connect(t, a, b, connOpts{})
	cases := []struct {
		name string
		wr   SendWR
		want error
	}{
		{"bad lkey", SendWR{Opcode: WRSend, SGL: []SGE{{Addr: a.mr.Addr(), Length: 8, LKey: 0xdead00}}}, ErrBadLKey},
		{"wrong PD", SendWR{Opcode: WRSend, SGL: []SGE{other.mr.SGE(0, 8)}}, ErrWrongPD},
		{"SGE out of range", SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(uint64(a.mr.Len())-4, 8)}}, ErrSGERange},
		{"too many SGEs", SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 1), a.mr.SGE(0, 1), a.mr.SGE(0, 1)}}, ErrInvalid},
		{"unknown opcode", SendWR{Opcode: WRTSO}, ErrUnsupported},
		{"local inv with data", SendWR{Opcode: WRLocalInv, SGL: []SGE{a.mr.SGE(0, 8)}}, ErrInvalid},
		{"bind without a window", SendWR{Opcode: WRBindMW}, ErrInvalid},
		{"reg-mr without a region", SendWR{Opcode: WRRegMR}, ErrInvalid},
		{"reg-mr of a plain region", SendWR{Opcode: WRRegMR, MR: a.mr}, ErrInvalid},
		{"flush without a type", SendWR{Opcode: WRFlush}, ErrInvalid},
		{"flush unknown type", SendWR{Opcode: WRFlush, FlushType: 4}, ErrInvalid},
		{"flush unknown level", SendWR{Opcode: WRFlush, FlushType: FlushGlobal, FlushLevel: 2}, ErrInvalid},
		{"atomic write alignment", SendWR{Opcode: WRAtomicWrite, RemoteAddr: 4}, ErrInvalid},
		{"inline too long", SendWR{Opcode: WRSend, InlineData: make([]byte, 17)}, ErrInvalid},
		{"inline read", SendWR{Opcode: WRRDMARead, Flags: SendInline, SGL: []SGE{a.mr.SGE(0, 8)}}, ErrInvalid},
		{"atomic length", SendWR{Opcode: WRAtomicFetchAdd, SGL: []SGE{a.mr.SGE(0, 4)}}, ErrInvalid},
		{"atomic alignment", SendWR{Opcode: WRAtomicFetchAdd, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: 4}, ErrInvalid},
		{"bad flags", SendWR{Opcode: WRSend, Flags: 1 << 20}, ErrInvalid},
	}
	for _, c := range cases {
		if n, err := a.qp.PostSend([]SendWR{c.wr}); !errors.Is(err, c.want) || n != 0 {
			t.Errorf("%s: got %d, %v, want 0, %v", c.name, n, err, c.want)
		}
	}
	// A READ into memory without LOCAL_WRITE.
	ro, err := a.pd.RegMR(make([]byte, 64), 0x80000, mr.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Dereg()
	if _, err := a.qp.PostSend([]SendWR{{Opcode: WRRDMARead, SGL: []SGE{ro.SGE(0, 8)}}}); !errors.Is(err, ErrAccess) {
		t.Errorf("read into read-only memory: got %v, want ErrAccess", err)
	}
	if _, err := a.qp.PostRecv([]RecvWR{{SGL: []SGE{ro.SGE(0, 8)}}}); !errors.Is(err, ErrAccess) {
		t.Errorf("receive into read-only memory: got %v, want ErrAccess", err)
	}
	// Queue full: the third of a batch of three fails, the first two are posted.
	recvs := []RecvWR{{WRID: 1}, {WRID: 2}, {WRID: 3}}
	if n, err := a.qp.PostRecv(recvs); n != 2 || !errors.Is(err, ErrQueueFull) {
		t.Errorf("receive queue full: got %d, %v, want 2, ErrQueueFull", n, err)
	}
	// UC refuses READs, UD refuses WRITEs.
	uc := newNode(t, p.a, nodeOpts{typ: qpattr.UC})
	connect(t, uc, newNode(t, p.b, nodeOpts{typ: qpattr.UC}), connOpts{})
	if _, err := uc.qp.PostSend([]SendWR{{Opcode: WRRDMARead, SGL: []SGE{uc.mr.SGE(0, 8)}}}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("UC READ: got %v, want ErrUnsupported", err)
	}
	// Destroyed QP.
	if err := a.qp.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
	pollN(t, a.cq, 2, time.Second) // the two receives flush
	if _, err := a.qp.PostSend([]SendWR{wr}); !errors.Is(err, ErrClosed) {
		t.Errorf("post to a destroyed QP: got %v, want ErrClosed", err)
	}
	if err := a.qp.Destroy().Wait(); !errors.Is(err, ErrClosed) {
		t.Errorf("destroy twice: got %v, want ErrClosed", err)
	}
}

func TestModifyErrors(t *testing.T) {
	p := newPair(t, pairOpts{})
	a := newNode(t, p.a, nodeOpts{})
	cases := []struct {
		name string
		attr QPAttr
		mask qpattr.AttrMask
		want error
	}{
		{"RESET to RTR", QPAttr{Attr: qpattr.Attr{State: qpattr.RTR}}, qpattr.AttrState, ErrInvalid},
		{"INIT without port", QPAttr{Attr: qpattr.Attr{State: qpattr.Init}}, qpattr.AttrState, ErrInvalid},
		{"bad port", QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 2}}, qpattr.AttrState | qpattr.AttrPort | qpattr.AttrPKeyIndex | qpattr.AttrAccessFlags, ErrInvalid},
	}
	for _, c := range cases {
		if err := a.qp.ModifySync(&c.attr, c.mask); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	init := QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1}}
	if err := a.qp.ModifySync(&init, qpattr.AttrState|qpattr.AttrPort|qpattr.AttrPKeyIndex|qpattr.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	rtr := QPAttr{Attr: qpattr.Attr{State: qpattr.RTR, PathMTU: qpattr.MTU1024, DestQPN: 0x99, MaxDestRdAtomic: 1},
		AV: AV{DGID: gids(addrB)[0], SGIDIndex: 3}}
	mask := qpattr.AttrState | qpattr.AttrAV | qpattr.AttrPathMTU | qpattr.AttrDestQPN | qpattr.AttrRQPSN |
		qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer
	if err := a.qp.ModifySync(&rtr, mask); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad SGID index: got %v, want ErrInvalid", err)
	}
	rtr.AV.SGIDIndex = 0
	rtr.AV.DGID = gids(netipMust("2001:db8::1"))[0]
	if err := a.qp.ModifySync(&rtr, mask); !errors.Is(err, ErrInvalid) {
		t.Errorf("IPv6 DGID from an IPv4 GID: got %v, want ErrInvalid", err)
	}
	if s := a.qp.State(); s != qpattr.Init {
		t.Errorf("state after failed modifies: got %v, want INIT", s)
	}
}

// TestRNRTimerManualClock: after an RNR NAK the requester sends nothing until
// the timer the NAK names has run on the device's clock.
func TestRNRTimerManualClock(t *testing.T) {
	clk := clock.NewManual(time.Unix(2000, 0))
	p, a, b := rcPair(t, pairOpts{clock: clk}, nodeOpts{}, connOpts{minRNR: 16, rnrRetry: 7, timeout: 20}) // 2.56 ms
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("wait")})
	deadline := time.Now().Add(5 * time.Second)
	for p.a.Counters()[CntRcvRNR] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no RNR NAK")
		}
		time.Sleep(100 * time.Microsecond)
	}
	recv(t, b, 1, 0, 64)
	sent := p.a.Counters()[CntSentPkts]
	clk.Advance(2 * time.Millisecond) // short of 2.56 ms
	p.a.Sync().Wait()
	p.a.Sync().Wait()
	if got := p.a.Counters()[CntSentPkts]; got != sent {
		t.Fatalf("sent_pkts before the RNR timer ran out: got %d, want %d", got, sent)
	}
	clk.Advance(time.Millisecond)
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.Send, ByteLen: 4, QPN: a.qp.QPN()})
	if got := p.a.Counters()[CntSentPkts]; got != sent+1 {
		t.Fatalf("sent_pkts after the RNR timer: got %d, want %d", got, sent+1)
	}
}
