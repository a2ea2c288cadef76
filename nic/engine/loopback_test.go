// Loopback: a device's QPs that address the device itself talk through its
// engines, not the link, as rxe's do (rxe_prepare marks a frame to the
// device's own MAC RXE_LOOPBACK_MASK and rxe_loopback gives it to rxe_rcv).
// perftest's server and client on one host, or two processes attached to one
// daemon, connect that way.

package engine

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/testenv"
)

// loopPairs connects n RC QP pairs on d to each other, the first half with
// their AVs' MAC (the device's own), the rest without, for the device to find.
func loopPairs(t *testing.T, d *Device, n int) (as, bs []*node) {
	t.Helper()
	cap := qpattr.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	for i := range n {
		as = append(as, newNode(t, d, nodeOpts{cap: cap, bufLen: 1 << 20}))
		bs = append(bs, newNode(t, d, nodeOpts{cap: cap, bufLen: 1 << 20}))
		connect(t, as[i], bs[i], connOpts{mtu: qpattr.MTU4096, resolve: i >= n/2})
	}
	return as, bs
}

// checkLooped wants every frame d's engines sent to have gone to its own
// receive path: none to the link, each taken in, none dropped.
func checkLooped(t *testing.T, d *Device) {
	t.Helper()
	c := d.Counters()
	var looped, toLink, drops uint64
	for _, q := range d.QueueCounters() {
		looped, toLink, drops = looped+q[EngLoopback], toLink+q[EngTxFrames], drops+q[EngHandoffDrops]
	}
	t.Logf("sent %d, received %d, looped back %d, to the link %d, dropped %d",
		c[CntSentPkts], c[CntRcvdPkts], looped, toLink, drops)
	if looped == 0 || toLink != 0 || drops != 0 || looped != c[CntSentPkts] || c[CntRcvdPkts] != looped {
		t.Errorf("frames to the device itself: %d looped back of %d sent, %d received, %d to the link, %d dropped",
			looped, c[CntSentPkts], c[CntRcvdPkts], toLink, drops)
	}
	if c[CntRcvdBadICRC] != 0 || c[CntRcvdMalformed] != 0 || c[CntRcvdBadAddr] != 0 || c[CntRetransmitted] != 0 {
		t.Errorf("counters: %v", c)
	}
}

// noResolve is a Config.ResolveMAC that fails the test: the device's own
// addresses need no resolution (the kernel's is_dst_local).
func noResolve(t *testing.T) func(context.Context, netip.Addr) (net.HardwareAddr, error) {
	return func(_ context.Context, a netip.Addr) (net.HardwareAddr, error) {
		t.Errorf("resolved %v", a)
		return nil, errors.New("no resolution in this test")
	}
}

// loopUD sends a UD message from one QP of d to another and to itself, through
// AHs without a MAC.
func loopUD(t *testing.T, d *Device) {
	t.Helper()
	a := newNode(t, d, nodeOpts{typ: qpattr.UD})
	b := newNode(t, d, nodeOpts{typ: qpattr.UD})
	udUp(t, a, 7)
	udUp(t, b, 7)
	ah, err := a.pd.CreateAH(AV{DGID: a.gid()})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	const n = 3000
	fill(a.buf[:n], 91)
	recv(t, b, 1, 0, 40+n)
	recv(t, a, 2, 1<<19, 40+n)
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, n)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 7})
	send(t, a, SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, n)}, AH: ah, RemoteQPN: a.qp.QPN(), RemoteQKey: 7})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 40 + n, QPN: b.qp.QPN(), SrcQP: a.qp.QPN(), Flags: cq.GRH})
	// a's CQ has its two sends' completions and the receive of the second.
	got := pollN(t, a.cq, 3, 5*time.Second)
	var recvd bool
	for _, wc := range got {
		if wc.Status != cq.Success {
			t.Fatalf("UD to itself: %+v", wc)
		}
		if wc.Opcode == cq.Recv {
			checkWC(t, wc, cq.WC{WRID: 2, Opcode: cq.Recv, ByteLen: 40 + n, QPN: a.qp.QPN(), SrcQP: a.qp.QPN(), Flags: cq.GRH})
			recvd = true
		}
	}
	if !recvd {
		t.Fatalf("no receive on the QP that sent to itself: %+v", got)
	}
	if err := d.Sync().Wait(); err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "UD to another QP", b.buf[40:40+n], a.buf[:n])
	checkBytes(t, "UD to itself", a.buf[1<<19+40:1<<19+40+n], a.buf[:n])
}

func TestLoopback(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		p := newPair(t, pairOpts{resolveA: noResolve(t)})
		as, bs := loopPairs(t, p.a, 4)
		queueTraffic(t, as, bs)
		loopUD(t, p.a)
		checkLooped(t, p.a)
		if c := p.b.Counters(); c[CntRcvdPkts]+c[CntRcvdUnknownQP]+c[CntRcvdBadAddr] != 0 {
			t.Errorf("the link's peer got frames: %v", c)
		}
	})
	t.Run("queues", func(t *testing.T) {
		// Two engines, QPNs alternating between them: pairs on one engine
		// and pairs across both.
		da, _ := memoryQueues(t, 2, Config{})
		cap := qpattr.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
		var byEngine [2][]*node
		for range 8 {
			n := newNode(t, da, nodeOpts{cap: cap, bufLen: 1 << 20})
			byEngine[n.qp.QPN()%2] = append(byEngine[n.qp.QPN()%2], n)
		}
		e0, e1 := byEngine[0], byEngine[1]
		if len(e0) != 4 || len(e1) != 4 {
			t.Fatalf("QPNs by engine: %d and %d", len(e0), len(e1))
		}
		as := []*node{e0[0], e1[0], e0[2], e1[3]}
		bs := []*node{e0[1], e1[1], e1[2], e0[3]}
		for i := range as {
			connect(t, as[i], bs[i], connOpts{mtu: qpattr.MTU4096, resolve: i%2 == 1})
		}
		queueTraffic(t, as, bs)
		loopUD(t, da)
		checkLooped(t, da)
	})
	t.Run("veth", func(t *testing.T) {
		// AF_XDP, native: nothing reaches the wire.
		p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4200})
		d := openVethConfig(t, &p.A, link.KindAFXDP, false, Config{ResolveMAC: noResolve(t)})
		as, bs := loopPairs(t, d, 4)
		queueTraffic(t, as, bs)
		loopUD(t, d)
		checkLooped(t, d)
	})
}

// TestLoopbackDoesNotAllocate: a frame looped back costs no allocation, as
// one to the link costs none. Ten times the WRITEs (and their ACKs) cost no
// more allocations; the whole process counts, the engine included.
func TestLoopbackDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	p := newPair(t, pairOpts{})
	as, bs := loopPairs(t, p.a, 1)
	a, b := as[0], bs[0]
	wrs := make([]SendWR, 16)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 4096)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	}
	wcs := make([]cq.WC, len(wrs))
	run := func(n int) uint64 {
		return mallocsOf(func() { loopWrites(t, a, wrs, wcs, n) })
	}
	run(160)
	small, big := run(1000), run(10000)
	t.Logf("%d allocations for 1000 WRITEs looped back, %d for 10000", small, big)
	if big > small+100 {
		t.Errorf("%d allocations for 1000 WRITEs, %d for 10000: the loopback path allocates", small, big)
	}
	checkLooped(t, p.a)
}

// loopWrites posts n of a's WRITEs, len(wrs) at a time, and polls their
// completions.
func loopWrites(t *testing.T, a *node, wrs []SendWR, wcs []cq.WC, n int) {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < n; i += len(wrs) {
		if _, err := a.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(wrs); {
			k := a.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != cq.Success {
					t.Fatalf("WRITE: %+v", wc)
				}
			}
			if got += k; k == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d completions", got, len(wrs))
				}
				runtime.Gosched()
			}
		}
	}
}

// TestLoopbackFullRing: frames to the device itself that find their engine's
// ring full wait for room, as rxe loses none (rxe_loopback hands each to
// rxe_rcv): engines that outrun the one of their destination QPs, UC without
// an ACK to wait for, or one pass whose batches outgrow its own ring.
func TestLoopbackFullRing(t *testing.T) {
	for _, c := range []struct {
		name          string
		typ           qpattr.Type
		queues, pairs int
		cfg           Config
	}{
		// Three engines' requesters, every responder on the fourth.
		{"UC into one engine", qpattr.UC, 4, 48, Config{}},
		{"RC into one engine", qpattr.RC, 4, 96, Config{}},
		// A pass of 4 batches of 256 frames, its ring 512.
		{"UC one engine", qpattr.UC, 1, 16, Config{Batch: 256}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const depth, size = 64, 4096
			var d *Device
			if c.queues == 1 {
				d = newPair(t, pairOpts{batch: c.cfg.Batch}).a
			} else {
				d, _ = memoryQueues(t, c.queues, c.cfg)
			}
			cap := qpattr.Cap{MaxSendWR: depth, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
			var reqs, resps []*node
			for len(reqs) < c.pairs || len(resps) < c.pairs {
				n := newNode(t, d, nodeOpts{typ: c.typ, cap: cap, bufLen: size, cqe: depth})
				if n.qp.QPN()%uint32(c.queues) == uint32(c.queues-1) && len(resps) < c.pairs {
					resps = append(resps, n)
				} else if len(reqs) < c.pairs {
					reqs = append(reqs, n)
				}
			}
			for i := range c.pairs {
				connect(t, reqs[i], resps[i], connOpts{mtu: qpattr.MTU1024})
			}
			for i, a := range reqs {
				wrs := make([]SendWR, depth)
				for w := range wrs {
					wrs[w] = SendWR{WRID: uint64(w), Opcode: WRRDMAWrite, Flags: SendSignaled,
						SGL: []SGE{a.mr.SGE(0, size)}, RemoteAddr: resps[i].mr.Addr(), RKey: resps[i].mr.RKey()}
				}
				if _, err := a.qp.PostSend(wrs); err != nil {
					t.Fatal(err)
				}
			}
			for _, a := range reqs {
				for _, wc := range pollN(t, a.cq, depth, 30*time.Second) {
					if wc.Status != cq.Success {
						t.Fatalf("WRITE: %+v", wc)
					}
				}
			}
			// UC completes as it sends: the last frames may still be on their way.
			deadline := time.Now().Add(2 * time.Second)
			for d.Counters()[CntRcvdPkts] < d.Counters()[CntSentPkts] && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			c := d.Counters()
			var looped, drops uint64
			for _, q := range d.QueueCounters() {
				looped, drops = looped+q[EngLoopback], drops+q[EngHandoffDrops]
			}
			if drops != 0 || looped != c[CntSentPkts] || c[CntRcvdPkts] != c[CntSentPkts] {
				t.Errorf("sent %d, looped back %d, received %d, dropped %d", c[CntSentPkts], looped, c[CntRcvdPkts], drops)
			}
		})
	}
}

// TestBusyPollLoopback: under BusyPoll a ping-pong of SENDs between two QPs
// of one device completes, its frames looped back, driven by the pollers'
// passes (run to completion) and the engine goroutine's spin, which does not
// sleep and wake again for each frame.
func TestBusyPollLoopback(t *testing.T) {
	p := newPair(t, pairOpts{busy: true})
	as, bs := loopPairs(t, p.a, 1)
	a, b := as[0], bs[0]
	fill(a.buf[:64], 1)
	const n = 500
	before := p.a.EngineCounters()
	for i := range n {
		recv(t, b, uint64(i), 1024, 64)
		send(t, a, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}})
		if w := spinPoll(t, b.cq); w.Status != cq.Success || w.WRID != uint64(i) {
			t.Fatalf("receive %d: %+v", i, w)
		}
		if w := spinPoll(t, a.cq); w.Status != cq.Success || w.WRID != uint64(i) {
			t.Fatalf("send %d: %+v", i, w)
		}
	}
	after := p.a.EngineCounters()
	waits, driven := after[EngIdleWaits]-before[EngIdleWaits], after[EngDriven]-before[EngDriven]
	t.Logf("%d SENDs to itself: %d passes driven by pollers, %d waits of the engine goroutine", n, driven, waits)
	// A wake-up a frame would be two a SEND (the engine goroutine, awake
	// and spinning a while, takes some passes from the pollers).
	if waits > n/2 {
		t.Errorf("%d SENDs to itself: %d passes driven by pollers, %d waits of the engine goroutine", n, driven, waits)
	}
	checkLooped(t, p.a)
}
