package engine

import (
	"math"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/wire"
)

// TestResponderDuplicateReadWrap: a duplicate READ whose range wraps past the
// top of the address space (va+len overflows 64 bits) is not the original's
// tail and gets no answer; the next honest duplicate is answered.
func TestResponderDuplicateReadWrap(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{}, connOpts{rdAtomic: 4})
	fill(n.buf[:3000], 71)
	reth := func(va uint64, l uint32) wire.IBFields {
		return wire.IBFields{RETH: wire.RETHFields{VA: va, RKey: n.mr.RKey(), DMALen: l}}
	}
	r.send(r.req(wire.RCRDMAReadRequest, 1000, reth(n.mr.Addr(), 3000)))
	if got := r.recv(3, time.Second); len(got) != 3 {
		t.Fatalf("got %d READ responses, want 3", len(got))
	}
	// va >= the original's, len <= its length, and va+len wraps to below its end.
	r.send(r.req(wire.RCRDMAReadRequest, 1001, reth(math.MaxUint64-99, 200)),
		r.req(wire.RCRDMAReadRequest, 1002, reth(n.mr.Addr()+2048, 952)))
	got := r.recv(1, time.Second)
	if len(got) != 1 {
		t.Fatalf("got %d responses, want only the honest tail's", len(got))
	}
	expectAck(t, got[0], wire.RCRDMAReadResponseLast, 1002, ack) // a tail keeps its PSN
	checkBytes(t, "the tail", got[0].Payload, n.buf[2048:3000])
}

// TestResponderDMALengthAboveMaxMsg: a READ or WRITE whose DMA length exceeds
// the device's max_msg_sz is an invalid request, not a remote access error
// found later (rxe accepts up to 2^31).
func TestResponderDMALengthAboveMaxMsg(t *testing.T) {
	for _, op := range []wire.Opcode{wire.RCRDMAReadRequest, wire.RCRDMAWriteFirst} {
		t.Run(op.String(), func(t *testing.T) {
			r, n := newRawPeer(t, nodeOpts{}, connOpts{rdAtomic: 4})
			ib := wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: MaxMsgSize + 1}}
			if op == wire.RCRDMAWriteFirst {
				ib.Payload = make([]byte, 1024)
			}
			r.send(r.req(op, 1000, ib))
			got := r.recv(1, time.Second)
			if len(got) != 1 {
				t.Fatalf("got %d responses, want a NAK", len(got))
			}
			expectAck(t, got[0], wire.RCAcknowledge, 1000, wire.NAKSyndrome(wire.NAKInvalidRequest))
		})
	}
}

// TestResponderDuplicateReadBudget plays a peer that repeats one READ request
// a thousand times: the responder answers duplicates with at most the held
// READs' length per replayWindow (plus one window's burst), counts the rest
// in duplicate_read_limited, and an honest retry after a window is answered.
func TestResponderDuplicateReadBudget(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{}, connOpts{rdAtomic: 4})
	const l = 3000
	read := r.req(wire.RCRDMAReadRequest, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: l}})
	r.send(read)
	if got := r.recv(3, time.Second); len(got) != 3 {
		t.Fatalf("got %d READ responses, want 3", len(got))
	}
	const dups = 1000
	start := time.Now()
	answered := 0
	for sent := 0; sent < dups; sent += 50 {
		batch := make([][]byte, 50)
		for i := range batch {
			batch[i] = read
		}
		r.send(batch...)
		for _, p := range r.recv(0, 0) {
			answered += len(p.Payload)
		}
	}
	for _, p := range r.recv(0, 20*time.Millisecond) {
		answered += len(p.Payload)
	}
	took := time.Since(start)
	bound := l * (1 + int(took/replayWindow) + 1)
	t.Logf("%d duplicates in %v: %d bytes answered (bound %d), %d left unanswered", dups, took, answered, bound,
		r.d.Counters()[CntDupReadLimited])
	if answered > bound {
		t.Fatalf("duplicates made the responder send %d bytes in %v, more than %d", answered, took, bound)
	}
	if c := r.d.Counters(); c[CntDupReadLimited] < uint64(dups-bound/l) {
		t.Fatalf("duplicate_read_limited %d, want at least %d", c[CntDupReadLimited], dups-bound/l)
	}
	time.Sleep(replayWindow)
	r.send(read)
	if got := r.recv(3, time.Second); len(got) != 3 {
		t.Fatalf("an honest retry after a window: %d responses, want 3", len(got))
	}
}

// TestResponderDuplicateReadBudgetShrinks: the budget follows the READs held
// now. A large READ replayed, then pushed out of the resources by small ones,
// leaves no debt the small ones pay back at their own pace: a requester's retry
// of a small READ after a window is answered. (The soak under load once spent
// every retry on such a READ: 14 duplicates refused, retry exceeded.)
func TestResponderDuplicateReadBudgetShrinks(t *testing.T) {
	const big, small, slots = 64 << 10, 100, 4
	r, n := newRawPeer(t, nodeOpts{bufLen: big}, connOpts{rdAtomic: slots})
	read := func(psn wire.PSN, l uint32) []byte {
		return r.req(wire.RCRDMAReadRequest, psn, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: l}})
	}
	const pkts = big / 1024
	bigRead := read(1000, big)
	r.send(bigRead)
	if got := r.recv(pkts, time.Second); len(got) != pkts {
		t.Fatalf("got %d READ responses, want %d", len(got), pkts)
	}
	r.send(bigRead) // a duplicate: answered, and charged
	if got := r.recv(pkts, time.Second); len(got) != pkts {
		t.Fatalf("a duplicate: got %d READ responses, want %d", len(got), pkts)
	}
	// slots small READs take every resource, the large one's too.
	psn := wire.PSN(1000 + pkts)
	for i := range slots {
		r.send(read(psn+wire.PSN(i), small))
	}
	if got := r.recv(slots, time.Second); len(got) != slots {
		t.Fatalf("got %d READ responses, want %d", len(got), slots)
	}
	time.Sleep(2 * replayWindow)
	r.send(read(psn+slots-1, small))
	if got := r.recv(1, time.Second); len(got) != 1 {
		t.Fatalf("a retry of a small READ two windows later: %d responses, want 1 (duplicate_read_limited %d)",
			len(got), r.d.Counters()[CntDupReadLimited])
	}
}

// TestResponderRNRNAKDropCounted: with the link full, RNR NAKs pile up in the
// response queue; those it cannot take are counted in send_rnr_dropped, not
// in tx_dropped, and send_rnr_err counts only the ones queued to go out.
func TestResponderRNRNAKDropCounted(t *testing.T) {
	r, _ := newRawPeerLink(t, link.MemoryOptions{Depth: 1}, nodeOpts{}, connOpts{})
	// No receive is posted: each SEND at the expected PSN gets an RNR NAK. The
	// peer reads nothing, so after the first the NAKs wait in the queue.
	const sends = 100
	send := r.req(wire.RCSendOnly, 1000, wire.IBFields{Payload: []byte("x")})
	for range sends {
		r.send(send) // one at a time: the link holds one frame each way
	}
	c := r.d.Counters()
	if c[CntSndRNRDropped] == 0 || c[CntTxDropped] != 0 {
		t.Fatalf("send_rnr_dropped %d tx_dropped %d: want RNR NAK drops counted apart", c[CntSndRNRDropped], c[CntTxDropped])
	}
	if c[CntSndRNR]+c[CntSndRNRDropped] != sends {
		t.Fatalf("send_rnr_err %d + send_rnr_dropped %d, want %d", c[CntSndRNR], c[CntSndRNRDropped], sends)
	}
	if got := r.recv(int(c[CntSndRNR]), time.Second); uint64(len(got)) != c[CntSndRNR] {
		t.Fatalf("%d RNR NAKs arrived, send_rnr_err says %d", len(got), c[CntSndRNR])
	}
}
