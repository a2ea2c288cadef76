package engine

import (
	"testing"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
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
	r.cwndAcked(int32(r.cwnd) - 1)
	if r.cwnd != maxUnackedPSNs/2 {
		t.Fatalf("less than a window acknowledged: cwnd %d", r.cwnd)
	}
	r.cwndAcked(1)
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
		r.cwndAcked(before) // slow start: one window acknowledged doubles it
		if r.cwnd != min(2*before, r.ssthresh) {
			t.Fatalf("slow start from %d: %d", before, r.cwnd)
		}
	}
	for range 100000 {
		r.cwndAcked(7)
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
