package engine

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/qpattr"
)

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
