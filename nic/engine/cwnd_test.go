package engine

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// TestCwnd: the window halves on a NAK, falls to minCwnd on a timeout and
// slow-starts back to half of what it was, grows about one packet per window
// above that, and shrinks once per loss however many NAKs go-back-N draws
// from it.
func TestCwnd(t *testing.T) {
	r := reqState{cwnd: maxUnackedPSNs, ssthresh: maxUnackedPSNs}
	r.hiPSN = 1000
	r.cwndLoss(false, 900)
	if r.cwnd != maxUnackedPSNs/2 || r.ssthresh != maxUnackedPSNs/2 {
		t.Fatalf("after a NAK: cwnd %d ssthresh %d, want %d", r.cwnd, r.ssthresh, maxUnackedPSNs/2)
	}
	r.cwndLoss(false, 950) // a NAK from the same flight
	if r.cwnd != maxUnackedPSNs/2 {
		t.Fatalf("a second NAK before the recovery point shrank the window to %d", r.cwnd)
	}
	r.cwndAcked(int32(r.cwnd)-1, 960)
	if r.cwnd != maxUnackedPSNs/2 {
		t.Fatalf("less than a window acknowledged: cwnd %d", r.cwnd)
	}
	r.cwndAcked(1, 961)
	if r.cwnd != maxUnackedPSNs/2+1 {
		t.Fatalf("a window acknowledged: cwnd %d, want one more", r.cwnd)
	}
	r.hiPSN = 2000
	r.cwndLoss(false, 1001) // past the recovery point: a new loss
	if want := int32(maxUnackedPSNs/2+1) / 2; r.cwnd != want {
		t.Fatalf("a new loss: cwnd %d, want %d", r.cwnd, want)
	}
	r.cwndLoss(true, 1500) // a timeout always counts
	if r.cwnd != minCwnd || r.ssthresh != max(int32(maxUnackedPSNs/2+1)/4, minCwnd) {
		t.Fatalf("after a timeout: cwnd %d ssthresh %d", r.cwnd, r.ssthresh)
	}
	for r.cwnd < r.ssthresh {
		before := r.cwnd
		r.cwndAcked(before, 1500) // slow start: one window acknowledged doubles it
		if r.cwnd != min(2*before, r.ssthresh) {
			t.Fatalf("slow start from %d: %d", before, r.cwnd)
		}
	}
	for range 100000 {
		r.cwndAcked(7, 1500)
	}
	if r.cwnd != maxUnackedPSNs {
		t.Fatalf("after many ACKs the window is %d, want rxe's %d", r.cwnd, maxUnackedPSNs)
	}
	for range 20 {
		r.hiPSN = r.hiPSN.Add(1000)
		r.cwndLoss(true, r.hiPSN.Add(999))
	}
	if r.cwnd != minCwnd || r.ssthresh < minCwnd {
		t.Fatalf("after many timeouts: cwnd %d ssthresh %d, want at least %d", r.cwnd, r.ssthresh, minCwnd)
	}
}

// TestCwndRecoveryEnds: the recovery point holds until an ACK reaches it, no
// longer. A NAK 2^23 PSNs after an old recovery point is a new loss, though
// the 24-bit compare puts it before that point.
func TestCwndRecoveryEnds(t *testing.T) {
	r := reqState{cwnd: maxUnackedPSNs, ssthresh: maxUnackedPSNs}
	r.hiPSN = 100
	r.cwndLoss(false, 50)
	r.cwndAcked(50, 100) // everything up to the recovery point
	for range 2000 {
		r.cwndAcked(64, 1<<22) // and far past it, back to the full window
	}
	before := r.cwnd
	r.hiPSN = 0x900000
	r.cwndLoss(false, 0x8fff00) // recover (100) is "after" it in 24-bit order
	if r.cwnd != max(before/2, minCwnd) {
		t.Fatalf("a NAK long after the last recovery: cwnd %d, want %d (half of %d)", r.cwnd, max(before/2, minCwnd), before)
	}
}

// TestCwndOnLoss runs the window through the engine: one RC WRITE of 128
// packets (rxe's whole window) on a memory link, one packet of it lost the
// first time it is sent. A gap B NAKs halves A's window; a lost last packet,
// which only the timer finds, drops it to minCwnd and slow start brings it
// back to half.
func TestCwndOnLoss(t *testing.T) {
	for _, c := range []struct {
		name    string
		lose    uint32 // the message's packet lost once
		timeout bool
	}{{"nak", 10, false}, {"timeout", 127, true}} {
		t.Run(c.name, func(t *testing.T) {
			tap := &tapLink{}
			first := wire.PSN(0x100)
			lost := false
			tap.drop = func(_ int, p *wire.Packet) bool {
				if !lost && p.BTH.PSN() == first.Add(c.lose) {
					lost = true
					return true
				}
				return false
			}
			_, a, b := rcPair(t, pairOpts{wrapA: func(l link.Link) link.Link { tap.Link = l; return tap }},
				nodeOpts{bufLen: 128 << 10}, connOpts{mtu: qpattr.MTU1024, psnA: first})
			fill(a.buf, 5)
			send(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 128<<10)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.RDMAWrite, ByteLen: 128 << 10, QPN: a.qp.QPN()})
			a.d.Sync().Wait()
			b.d.Sync().Wait()
			checkBytes(t, "write", b.buf, a.buf)
			r := a.qp.req
			c1 := a.d.Counters()
			if !lost || c1[CntCompRetry] != 1 {
				t.Fatalf("lost %v, %d retries: want one", lost, c1[CntCompRetry])
			}
			if r.ssthresh != maxUnackedPSNs/2 {
				t.Errorf("ssthresh %d after one loss, want %d", r.ssthresh, maxUnackedPSNs/2)
			}
			if c.timeout && r.cwnd > r.ssthresh || !c.timeout && (r.cwnd < r.ssthresh || r.cwnd >= maxUnackedPSNs) {
				t.Errorf("cwnd %d after the resend (ssthresh %d)", r.cwnd, r.ssthresh)
			}
			t.Logf("cwnd %d ssthresh %d, %d packets resent", r.cwnd, r.ssthresh, c1[CntRetransmitted])
		})
	}
}

// TestDestInflightBound: a shard's RC QPs to one destination together never
// have more than maxDestInflight PSNs unacknowledged; those past it wait and
// go on as ACKs come, every WR completing; and a QP that is destroyed or
// errored leaves the count (or the destination would get nothing more).
func TestDestInflightBound(t *testing.T) {
	p := newPair(t, pairOpts{})
	const nqp, wrs, size = 16, 4, 16 * 1024 // 16 PSNs per WR at MTU 1024: 64 per QP, 1024 in all
	cap := qpattr.Cap{MaxSendWR: wrs, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	var as, bs []*node
	for range nqp {
		a := newNode(t, p.a, nodeOpts{cap: cap, bufLen: wrs * size})
		b := newNode(t, p.b, nodeOpts{cap: cap, bufLen: wrs * size})
		connect(t, a, b, connOpts{mtu: qpattr.MTU1024})
		fill(a.buf, byte(len(as)))
		as, bs = append(as, a), append(bs, b)
	}
	post := func(i int) {
		var l []SendWR
		for k := range wrs {
			off := uint64(k * size)
			l = append(l, SendWR{WRID: uint64(k), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{as[i].mr.SGE(off, size)}, RemoteAddr: bs[i].mr.Addr() + off, RKey: bs[i].mr.RKey()})
		}
		if _, err := as[i].qp.PostSend(l); err != nil {
			t.Fatal(err)
		}
	}
	sa, sb := p.a.sh[0], p.b.sh[0]
	e := &sa.e
	// counted checks the destination's total against its QPs' own PSNs.
	room := func() *destRoom {
		if len(e.rooms) > 1 {
			t.Fatalf("%d destination rooms, want at most 1", len(e.rooms))
		}
		return e.rooms[bs[0].gid()]
	}
	counted := func() int32 {
		var sum int32
		for _, a := range as {
			if a.qp.live && a.qp.state == qpattr.RTS {
				sum += max(a.qp.req.psn.Sub(a.qp.comp.psn), 0)
			}
		}
		var n int32
		if r := room(); r != nil {
			n = r.inflight
		}
		if sum != n {
			t.Fatalf("the destination counts %d PSNs in flight, its QPs %d", n, sum)
		}
		return sum
	}

	// A's passes with B's engine held: nothing is acknowledged.
	sb.drive.Lock()
	sa.drive.Lock()
	locked := true
	defer func() { // a failure below must not leave the engines locked out
		if locked {
			sa.drive.Unlock()
			sb.drive.Unlock()
		}
	}()
	for i := range as {
		post(i)
	}
	e.now = p.a.since()
	e.drainDoorbells()
	for range 8 {
		e.transmit()
	}
	if n := counted(); n != maxDestInflight || len(room().wait) == 0 {
		t.Fatalf("after A's passes: %d PSNs in flight (bound %d), %d QPs waiting", n, maxDestInflight, len(room().wait))
	}
	// A QP destroyed and one errored leave the count.
	var gone []*node
	for _, a := range as {
		if a.qp.counted > 0 {
			gone = append(gone, a)
		}
		if len(gone) == 2 {
			break
		}
	}
	before, c0, c1 := counted(), gone[0].qp.counted, gone[1].qp.counted
	destroyed := gone[0].qp.Destroy()
	errored := gone[1].qp.Modify(&QPAttr{Attr: qpattr.Attr{State: qpattr.Err}}, qpattr.AttrState)
	e.runControl()
	if err := errors.Join(destroyed.Wait(), errored.Wait()); err != nil {
		t.Fatal(err)
	}
	if n := counted(); n != before-c0-c1 {
		t.Fatalf("destroying a QP with %d PSNs in flight and erroring one with %d left the destination's count at %d, from %d", c0, c1, n, before)
	}
	locked = false
	sa.drive.Unlock()
	sb.drive.Unlock()

	// The rest complete, the waiters in turn.
	for i, a := range as {
		if a == gone[0] || a == gone[1] {
			continue
		}
		for _, w := range pollN(t, a.cq, wrs, 10*time.Second) {
			if w.Status != cq.Success {
				t.Fatalf("QP %d: %+v", i, w)
			}
		}
		checkBytes(t, name("QP %d", i), bs[i].buf, a.buf)
	}
	if err := p.a.Sync().Wait(); err != nil {
		t.Fatal(err)
	}
	sa.drive.Lock()
	n, r := counted(), room()
	sa.drive.Unlock()
	if n != 0 || len(r.wait) != 0 || len(r.qps) != nqp-2 {
		t.Fatalf("all done: %d PSNs still counted in flight, %d QPs waiting, %d QPs holding the room (want %d)",
			n, len(r.wait), len(r.qps), nqp-2)
	}
	if w := p.a.EngineCounters()[EngRoomWaits]; w == 0 {
		t.Fatal("no QP waited for room")
	}
}

// TestDestInflightHostileQPs: five QPs whose 640 PSNs are never
// acknowledged (local ACK timeout 31: hours), beside a QP that writes to the
// healthy peer, on one shard and a clock that moves only when the test says.
//   - To an address that does not answer, they fill only that address's
//     room: the WRITE completes with the clock standing still. Were the bound
//     per shard, it would wait for them (or, with the clock moving, for the
//     stale sweep below).
//   - To the healthy peer, at a QPN it does not have (a hostile process on
//     the daemon's device), they fill its room and the WRITE waits; once the
//     clock is past roomStale they stop counting and it completes. Without the
//     sweep, or its timer, it would wait for their timeout.
func TestDestInflightHostileQPs(t *testing.T) {
	for _, c := range []struct {
		name  string
		co    connOpts
		stale bool
	}{
		{"an address that does not answer", connOpts{timeout: 31, dgidA: netdev.GIDFromAddr(netip.MustParseAddr("192.0.2.99"))}, false},
		{"a QPN the peer does not have", connOpts{timeout: 31, destQPNA: 0xabcde}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(time.Unix(7000, 0))
			p := newPair(t, pairOpts{clock: clk})
			const size = 64 * 1024 // 64 PSNs at MTU 1024
			cap := qpattr.Cap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
			write := func(from, to *node, id uint64, off uint64) {
				send(t, from, SendWR{WRID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{from.mr.SGE(off, size)},
					RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()})
			}
			var stuck []*node
			for range 5 {
				a := newNode(t, p.a, nodeOpts{cap: cap, bufLen: 2 * size})
				b := newNode(t, p.b, nodeOpts{cap: cap, bufLen: 2 * size})
				connect(t, a, b, c.co)
				write(a, b, 0, 0)
				write(a, b, 1, size)
				stuck = append(stuck, a)
			}
			waitFor(t, "their room to fill", func() bool { return p.a.EngineCounters()[EngRoomWaits] > 0 })
			a, b := newNode(t, p.a, nodeOpts{cap: cap, bufLen: size}), newNode(t, p.b, nodeOpts{cap: cap, bufLen: size})
			connect(t, a, b, connOpts{})
			fill(a.buf, 9)
			write(a, b, 7, 0)
			if c.stale {
				if err := p.a.Sync().Wait(); err != nil {
					t.Fatal(err)
				}
				if n := a.cq.Len(); n != 0 {
					t.Fatalf("the WRITE completed (%d WCs) while the hostile QPs filled its destination's room", n)
				}
				clk.Advance(roomStale + roomStale/2)
			}
			if w := pollN(t, a.cq, 1, 10*time.Second)[0]; w.Status != cq.Success {
				t.Fatalf("the WRITE to the healthy peer: %+v", w)
			}
			checkBytes(t, "the WRITE", b.buf, a.buf)
			for _, s := range stuck {
				if n := s.cq.Len(); n != 0 {
					t.Fatalf("a hostile QP completed %d WRs", n)
				}
			}
			if stale := p.a.EngineCounters()[EngRoomStale]; (stale > 0) != c.stale {
				t.Fatalf("%d QPs went stale", stale)
			}
		})
	}
}
