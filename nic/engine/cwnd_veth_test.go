package engine

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/xsk"
	"github.com/xrnic/xrnic/testenv"
)

// TestManyQPsOverflowReceiver is issue 20's collapse at 256 QPs, scaled
// down: 64 QPs whose windows together (64 x 128 packets) far exceed the
// receiver's AF_XDP ring (128 frames) on a real veth pair. Frames drop at the
// receiver, and every WR must still complete successfully, each byte in
// place: retries shrink each QP's window (cwnd.go). Here rxe's fixed window
// resends two to five times as many packets, and with a 4 ms ACK timeout
// ran out of retry_cnt in every run (the shrinking window in one of four:
// 64 QPs of two packets each still fill this ring).
func TestManyQPsOverflowReceiver(t *testing.T) {
	st, c, _ := manyQPsOnVeth(t, 256) // 128 frames for receiving
	if st.RxDropped+st.RxRingFull == 0 || c[CntCompRetry] == 0 {
		t.Fatalf("the receiver dropped nothing: the test did not overflow it")
	}
}

// TestManyQPsWithinReceiverRing: the same 64 QPs against a receiver with
// xsk's default ring (2048 frames): the bound on what a shard's QPs to one
// destination have in flight together (maxDestInflight, cwnd.go) keeps the
// sender within it, so
// nothing drops and nothing is resent. Without the bound the windows add up
// to 8192 packets and the receiver drops hundreds.
func TestManyQPsWithinReceiverRing(t *testing.T) {
	st, c, ec := manyQPsOnVeth(t, 0)
	if st.RxDropped+st.RxRingFull+st.RxFillRingEmptyDescs != 0 || c[CntRetransmitted] != 0 {
		t.Fatalf("the receiver dropped %d frames (ring full %d, fill ring empty %d), the sender resent %d",
			st.RxDropped, st.RxRingFull, st.RxFillRingEmptyDescs, c[CntRetransmitted])
	}
	if ec[EngRoomWaits] == 0 {
		t.Fatal("no QP waited for the bound: the test did not reach it")
	}
}

// manyQPsOnVeth runs 48 WRITEs of 4 KiB (4 packets at MTU 1024) on each of
// 64 RC QPs over a veth pair, the receiver's AF_XDP socket with numFrames
// UMEM frames (0: xsk's default), checks every WR and byte, and returns the
// receiver socket's statistics and the sender's counters.
func manyQPsOnVeth(t *testing.T, numFrames int) (xsk.Stats, Counters, EngineCounters) {
	const (
		nQP    = 64
		writes = 48
		size   = 4096 // 4 packets at MTU 1024
	)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	da := openVeth(t, &p.A, link.KindAFXDP, false)
	var lb *link.AFXDP
	if err := p.B.Do(func() (err error) {
		so := xsk.DefaultOptions()
		so.NumFrames = numFrames
		lb, err = link.NewAFXDP(link.AFXDPOptions{Interface: p.B.Name, Socket: so})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db, err := Open(lb, Config{GIDs: []netdev.GID{netdev.GIDFromAddr(p.B.IPv4)}})
	if err != nil {
		lb.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		lb.Close()
	})
	cap := qpattr.Cap{MaxSendWR: writes, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	as, bs := make([]*node, nQP), make([]*node, nQP)
	for i := range nQP {
		as[i] = newNode(t, da, nodeOpts{cap: cap, bufLen: writes * size, cqe: writes})
		bs[i] = newNode(t, db, nodeOpts{cap: cap, bufLen: writes * size, cqe: 1})
		connect(t, as[i], bs[i], connOpts{mtu: qpattr.MTU1024})
		fill(as[i].buf, byte(i))
	}
	for i, a := range as {
		wrs := make([]SendWR, writes)
		for w := range wrs {
			off := uint64(w * size)
			wrs[w] = SendWR{WRID: uint64(w), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{a.mr.SGE(off, size)}, RemoteAddr: bs[i].mr.Addr() + off, RKey: bs[i].mr.RKey()}
		}
		if _, err := a.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range as {
		for _, wc := range pollN(t, a.cq, writes, 60*time.Second) {
			if wc.Status != cq.Success {
				t.Fatalf("QP %d WR %d: %v (retries %d, retry_exceeded %d)", i, wc.WRID, wc.Status,
					da.Counters()[CntCompRetry], da.Counters()[CntRetryExceeded])
			}
		}
	}
	db.Sync().Wait()
	for i := range nQP {
		checkBytes(t, name("QP %d", i), bs[i].buf, as[i].buf)
	}
	st, err := lb.SocketStats()
	if err != nil {
		t.Fatal(err)
	}
	c := da.Counters()
	t.Logf("receiver dropped %d (ring full %d, fill ring empty %d); sender: %d retries, %d packets resent",
		st.RxDropped, st.RxRingFull, st.RxFillRingEmptyDescs, c[CntCompRetry], c[CntRetransmitted])
	return st, c, da.EngineCounters()
}
