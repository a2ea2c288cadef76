package engine

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// ucWrite is a UC RDMA WRITE ONLY of payload to va with rkey.
func (r *rawPeer) ucWrite(psn wire.PSN, va uint64, rkey uint32, payload []byte) []byte {
	ib := wire.IBFields{RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: uint32(len(payload))}, Payload: payload}
	ib.BTH.Opcode, ib.BTH.PSN = wire.UCRDMAWriteOnly, psn
	return r.frame(ib)
}

// TestUCKeyWalk plays the review's peer: it holds the key of region A and,
// over UC where a wrong key costs nothing, tries all 256 key bytes of the
// indices on either side of A's. Region B, registered right after A in the
// same PD with remote write, stays untouched (before: B's index was A's + 1,
// and 256 WRITEs overwrote it). The walk misses B unless chance put B's
// random index next to A's: odds 2 in 2^18 with the default table.
func TestUCKeyWalk(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{typ: qpattr.UC}, connOpts{})
	bBuf := make([]byte, 4096)
	b, err := n.pd.RegMR(bBuf, 0x200000, mr.LocalWrite|mr.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Dereg() })
	a := n.mr.RKey() >> mr.KeyIndexShift
	psn := wire.PSN(1000)
	var batch [][]byte
	for _, idx := range []uint32{a - 1, a + 1} {
		for kb := range 256 {
			// B's IOVA is no secret to this peer: only its key is.
			batch = append(batch, r.ucWrite(psn, 0x200000, idx<<mr.KeyIndexShift|uint32(kb), []byte("owned")))
			psn = psn.Next()
			if len(batch) == 32 {
				r.send(batch...)
				batch = batch[:0]
			}
		}
	}
	if string(bBuf[:5]) == "owned" {
		t.Fatalf("a peer that held only A's key %#x wrote B (key %#x) by walking", n.mr.RKey(), b.RKey())
	}
	if c := r.d.Counters(); c[CntRcvdDropped] == 0 {
		t.Fatal("the wrong-key WRITEs were not counted as dropped")
	}
	// The peer's own region still takes its WRITEs: the QP kept working.
	r.send(r.ucWrite(psn, n.mr.Addr(), n.mr.RKey(), []byte("mine")))
	if string(n.buf[:4]) != "mine" {
		t.Fatal("a WRITE with the right key after the walk did not land")
	}
}

// BenchmarkUCKeyGuess measures how fast a peer can guess R_Keys over UC,
// where a wrong key costs it nothing: each op is one WRITE ONLY with a random
// key, handed to the engine in batches of 64 over a memory link (the engine's
// drop path; a wire adds its own limit). The README's bound on key guessing
// comes from this rate.
func BenchmarkUCKeyGuess(b *testing.B) {
	r, n := newRawPeer(b, nodeOpts{typ: qpattr.UC}, connOpts{})
	rng := rand.New(rand.NewPCG(1, 2))
	frames := make([][]byte, 64)
	psn := wire.PSN(1000)
	for i := range frames {
		// Never n's own key: every guess misses.
		k := rng.Uint32() | 1<<31
		if k == n.mr.RKey() {
			k ^= 1
		}
		frames[i] = r.ucWrite(psn, n.mr.Addr(), k, []byte("guess"))
		psn = psn.Next()
	}
	start := time.Now()
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += len(frames) {
		r.send(frames...)
	}
	b.StopTimer()
	rate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rate, "guesses/s")
	// Expected guesses for one region among the table's 2^18 indices and 256
	// key bytes: half the space.
	b.ReportMetric(float64(uint64(mr.DefaultMaxRegions)*256/2)/rate, "s/region")
}

// BenchmarkRCKeyGuess measures a guess over RC, where a wrong key is a NAK
// remote access error that moves the QP to ERR: each op is a fresh QP taken
// to RTS, one WRITE with a wrong key, its NAK, and the QP destroyed. It is an
// upper bound: a peer must also redo the connection manager's handshake per
// guess, which this leaves out.
func BenchmarkRCKeyGuess(b *testing.B) {
	r, n := newRawPeer(b, nodeOpts{}, connOpts{})
	mac := r.l.Info().MAC
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		qp, err := n.pd.CreateQP(QPInitAttr{Type: qpattr.RC, SendCQ: n.cq, RecvCQ: n.cq,
			Cap: qpattr.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			b.Fatal(err)
		}
		rawConnect(b, qp, qpattr.RC, mac, connOpts{})
		r.dqpn = qp.QPN()
		ib := wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: uint32(i) | 1<<31, DMALen: 5}, Payload: []byte("guess")}
		r.send(r.req(wire.RCRDMAWriteOnly, 1000, ib))
		if got := r.recv(1, time.Second); len(got) != 1 || got[0].AETH == nil ||
			got[0].AETH.Syndrome() != wire.NAKSyndrome(wire.NAKRemoteAccessError) {
			b.Fatalf("guess %d: no NAK remote access error", i)
		}
		qp.Destroy().Wait()
	}
	b.StopTimer()
	rate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rate, "guesses/s")
	b.ReportMetric(float64(uint64(mr.DefaultMaxRegions)*256/2)/rate, "s/region")
}
