// RDMA WRITE bandwidth under loss on the real data path: one RC QP over a veth
// pair with AF_XDP links, 64 KiB WRITEs with 32 outstanding, and the receiver's
// XDP program dropping 0, 0.1% or 1% of the RoCEv2 frames it gets (the requests;
// the ACKs going back are not dropped). Each loss level reports its MB/s, msgs/s,
// packets retransmitted per WRITE and, after the lossless run, its share of the
// lossless bandwidth (x-lossless).
//
//	go test -run '^$' -bench VethWriteLoss ./nic/engine/

package engine

import (
	"testing"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/testenv"
)

func BenchmarkVethWriteLoss(b *testing.B) {
	const size = 64 << 10
	lossless := 0.0 // MB/s of the last lossless run
	for _, c := range []struct {
		name string
		drop float64
	}{{"loss=0", 0}, {"loss=0.1%", 0.001}, {"loss=1%", 0.01}} {
		b.Run(c.name, func(b *testing.B) {
			p := testenv.NewTestPair(b, testenv.PairOptions{MTU: 4224})
			va := openFaultyVeth(b, &p.A, bpf.Faults{})
			vb := openFaultyVeth(b, &p.B, bpf.Faults{Drop: c.drop, Seed: 1})
			a := newNode(b, va.d, nodeOpts{cap: benchCap(), bufLen: 16 << 20})
			r := newNode(b, vb.d, nodeOpts{cap: benchCap(), bufLen: 16 << 20})
			// A local ACK timeout (16.8 ms) well above the veth's round trip, so
			// that the loss, not the timer, sets the pace.
			connect(b, a, r, connOpts{mtu: qpattr.MTU4096, timeout: 12})
			benchWrite(b, a, r, size, 32)
			mbps := float64(b.N) * size / b.Elapsed().Seconds() / 1e6
			if c.drop == 0 {
				lossless = mbps
			} else if lossless > 0 {
				b.ReportMetric(mbps/lossless, "x-lossless")
			}
			b.ReportMetric(float64(va.d.Counters()[CntRetransmitted])/float64(b.N), "retx/op")
		})
	}
}
