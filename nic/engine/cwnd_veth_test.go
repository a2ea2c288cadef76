package engine

import (
	"sync"
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
	st, c, _ := manyQPsOnVeth(t, manyQPs{numFrames: 256, mtu: qpattr.MTU1024, nQP: 64, writes: 48}) // 128 frames for receiving
	if st.RxDropped+st.RxRingFull == 0 || c[CntCompRetry] == 0 {
		t.Fatalf("the receiver dropped nothing: the test did not overflow it")
	}
}

// TestManyQPsWithinReceiverRing: the same 64 QPs against a receiver with
// xsk's default ring (2048 frames): the bound on what a shard's QPs to one
// destination have in flight together (maxDestInflight, cwnd.go) keeps the
// sender within it, so
// nothing drops and nothing is resent. Without the bound the windows add up
// to 8192 packets, and the receiver, held off until the sender has sent 4096,
// dropped 4,552-7,616 in 3 runs.
func TestManyQPsWithinReceiverRing(t *testing.T) {
	st, c, ec := manyQPsOnVeth(t, manyQPs{mtu: qpattr.MTU1024, nQP: 64, writes: 48})
	if st.RxDropped+st.RxRingFull+st.RxFillRingEmptyDescs != 0 || c[CntRetransmitted] != 0 {
		t.Fatalf("the receiver dropped %d frames (ring full %d, fill ring empty %d), the sender resent %d",
			st.RxDropped, st.RxRingFull, st.RxFillRingEmptyDescs, c[CntRetransmitted])
	}
	if ec[EngRoomWaits] == 0 {
		t.Fatal("no QP waited for the bound: the test did not reach it")
	}
}

// TestManyQPsBurstToSleepingReceiver: the first windows of 256 QPs, two
// packets each at MTU 4096, are 512 frames of two chunks that come at once
// to a receiver asleep whose fill ring came down to xsk.DefaultFillFrames
// (512 chunks) while it kept up with a few WRITEs. Its engine gave the kernel
// every chunk before it slept (link.PreWaiter), so nothing drops; without
// that 256 frames dropped in 4 runs of 4 (168-256 in 4 of 5 before the
// receiver was held off during the burst). The link's own reserve
// (link.FillReserveFrames) holds one sender's bound, so the test sets the
// ring's smaller, as a second sender's packets would make it.
//
// Each QP's one WRITE is its first window, so the burst is all that comes.
// With more behind it (two WRITEs of four packets a QP), the ring could come
// down again during the rest, and a receiver that a loaded host then kept
// off its CPU had 512 chunks there against the sender's 512 frames in
// flight, 1024 chunks: 40 frames dropped in one CI run of the whole suite,
// which is the smaller ring's price, not the PreWaiter's. The calm that
// brings the ring down is 32 refills; with 64 it had not come down by the
// burst, and the test passed without the PreWaiter too.
func TestManyQPsBurstToSleepingReceiver(t *testing.T) {
	st, c, _ := manyQPsOnVeth(t, manyQPs{mtu: qpattr.MTU4096, nQP: 256, writes: 1, pkts: 2, calm: 32})
	if st.RxDropped+st.RxRingFull+st.RxFillRingEmptyDescs != 0 || c[CntRetransmitted] != 0 {
		t.Fatalf("the receiver dropped %d frames (ring full %d, fill ring empty %d), the sender resent %d",
			st.RxDropped, st.RxRingFull, st.RxFillRingEmptyDescs, c[CntRetransmitted])
	}
}

// manyQPs is a run of manyQPsOnVeth.
type manyQPs struct {
	numFrames   int // the receiver's UMEM frames (0: xsk's default)
	mtu         qpattr.MTU
	nQP, writes int
	pkts        int // packets a WRITE (0: 4), but the calm WRITEs'
	// calm > 0: the receiver's xsk.Options.FillCalmRefills (and FillFrames
	// xsk.DefaultFillFrames, below the link's reserve), and WRITEs on
	// the first QP, one at a time, before the others start: enough for the
	// receiver's fill ring to come down to its target (2*calm refills) and
	// the kernel to take what was on it (every RX frame, 8 chunks a WRITE).
	calm int
}

// manyQPsOnVeth runs m.writes WRITEs of 4 packets at m.mtu on each of m.nQP RC
// QPs over a veth pair, the receiver's engine asleep when they start, checks
// every WR and byte, and returns the receiver socket's statistics and the
// sender's counters.
func manyQPsOnVeth(t *testing.T, m manyQPs) (xsk.Stats, Counters, EngineCounters) {
	mtu, nQP, writes := m.mtu, m.nQP, m.writes
	size := 4 * mtu.Bytes()
	wsize := size
	if m.pkts > 0 {
		wsize = m.pkts * mtu.Bytes()
	}
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: max(1500, mtu.Bytes()+104)})
	da := openVeth(t, &p.A, link.KindAFXDP, false)
	var lb *link.AFXDP
	if err := p.B.Do(func() (err error) {
		so := xsk.DefaultOptions()
		so.NumFrames, so.FillCalmRefills = m.numFrames, m.calm
		if m.calm > 0 {
			so.FillFrames = xsk.DefaultFillFrames
		}
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
	cap := qpattr.Cap{MaxSendWR: uint32(writes), MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	as, bs := make([]*node, nQP), make([]*node, nQP)
	for i := range nQP {
		as[i] = newNode(t, da, nodeOpts{cap: cap, bufLen: writes * size, cqe: writes})
		bs[i] = newNode(t, db, nodeOpts{cap: cap, bufLen: writes * size, cqe: 1})
		connect(t, as[i], bs[i], connOpts{mtu: mtu})
		fill(as[i].buf, byte(i))
	}
	calmWrites := 0
	if m.calm > 0 {
		calmWrites = 2*m.calm + xsk.DefaultNumFrames/2/8
	}
	for range calmWrites {
		a := as[0]
		wr := SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, uint32(size))},
			RemoteAddr: bs[0].mr.Addr(), RKey: bs[0].mr.RKey()}
		if _, err := a.qp.PostSend([]SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := pollN(t, a.cq, 1, 10*time.Second)[0]; wc.Status != cq.Success {
			t.Fatalf("calm WRITE: %v", wc.Status)
		}
	}
	// The WRITEs start with the receiver's engine asleep, as after a pause,
	// and it stays held off (its drive taken) until the sender has sent all
	// its bound lets it, or all there is: the first burst then comes whole
	// to a receiver that takes none of it, whatever the host's timing. When
	// the receiver ran freely, a quick one could keep the QPs' windows from
	// adding up to the bound (TestManyQPsWithinReceiverRing failed 2 runs in
	// 6 on a quiet host) or from overflowing its ring.
	waitFor(t, "the receiver's engine asleep", asleep(db.sh[0], 0))
	sb := db.sh[0]
	sb.drive.Lock()
	releaseB := sync.OnceFunc(sb.drive.Unlock)
	t.Cleanup(releaseB)
	ec0 := da.EngineCounters()
	for i, a := range as {
		wrs := make([]SendWR, writes)
		for w := range wrs {
			off := uint64(w * wsize)
			wrs[w] = SendWR{WRID: uint64(w), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{a.mr.SGE(off, uint32(wsize))}, RemoteAddr: bs[i].mr.Addr() + off, RKey: bs[i].mr.RKey()}
		}
		if _, err := a.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
	}
	// The sender has sent all it may when a QP waits for the bound, or when
	// all is sent; a sender without the bound is let go on after 8 times
	// it, past the receiver's ring.
	all := uint64(min(nQP*writes*(wsize/mtu.Bytes()), 8*maxDestInflight))
	waitFor(t, "the sender's first burst", func() bool {
		ec := da.EngineCounters()
		return ec[EngRoomWaits] > ec0[EngRoomWaits] || ec[EngTxFrames]-ec0[EngTxFrames] >= all
	})
	releaseB()
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
		checkBytes(t, name("QP %d", i), bs[i].buf[:writes*wsize], as[i].buf[:writes*wsize])
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
