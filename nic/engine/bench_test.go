// Benchmarks: RDMA WRITE bandwidth with 64 KiB messages and the message rate of
// 64-byte WRITEs on one RC QP, over the memory link and over a veth pair with
// AF_XDP links. allocs/op counts the whole process, engines included.
//
//	go test -run '^$' -bench . -benchmem ./nic/engine/

package engine

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/testenv"
)

// benchWrite posts b.N WRITEs of size bytes with up to depth outstanding, every
// one signaled, and waits for all completions.
func benchWrite(b *testing.B, a, r *node, size uint32, depth int) {
	b.Helper()
	wrs := make([]SendWR, 1)
	sgl := make([]SGE, 1)
	wcs := make([]cq.WC, 64)
	slots := uint64(len(a.buf)) / uint64(size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	posted, done, idle := 0, 0, 0
	deadline := time.Now().Add(5 * time.Minute)
	for done < b.N {
		for posted < b.N && posted-done < depth {
			off := uint64(posted) % slots * uint64(size)
			sgl[0] = SGE{Addr: a.mr.Addr() + off, Length: size, LKey: a.mr.LKey()}
			wrs[0] = SendWR{WRID: uint64(posted), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: sgl, RemoteAddr: r.mr.Addr() + off, RKey: r.mr.RKey()}
			if _, err := a.qp.PostSend(wrs); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n := a.cq.Poll(wcs)
		for _, w := range wcs[:n] {
			if w.Status != cq.Success {
				b.Fatalf("WC %+v", w)
			}
		}
		done += n
		if n == 0 {
			// Leave the cores to the engines; look at the clock rarely.
			if idle++; idle%4096 == 0 && time.Now().After(deadline) {
				b.Fatalf("%d of %d completions", done, b.N)
			}
			runtime.Gosched()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func benchCap() qpattr.Cap {
	return qpattr.Cap{MaxSendWR: 512, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
}

func BenchmarkMemoryWrite64K(b *testing.B) {
	_, a, r := rcPair(b, pairOpts{}, nodeOpts{cap: benchCap(), bufLen: 16 << 20}, connOpts{mtu: qpattr.MTU4096, timeout: 16})
	benchWrite(b, a, r, 64<<10, 32)
}

func BenchmarkMemoryWrite64B(b *testing.B) {
	_, a, r := rcPair(b, pairOpts{}, nodeOpts{cap: benchCap(), bufLen: 1 << 20}, connOpts{mtu: qpattr.MTU4096, timeout: 16})
	benchWrite(b, a, r, 64, 256)
}

func vethBenchNodes(b *testing.B, bufLen int) (*node, *node) {
	p := testenv.NewTestPair(b, testenv.PairOptions{MTU: 4224})
	da := openVeth(b, &p.A, link.KindAFXDP, false)
	db := openVeth(b, &p.B, link.KindAFXDP, false)
	a := newNode(b, da, nodeOpts{cap: benchCap(), bufLen: bufLen})
	r := newNode(b, db, nodeOpts{cap: benchCap(), bufLen: bufLen})
	connect(b, a, r, connOpts{mtu: qpattr.MTU4096, timeout: 16})
	return a, r
}

func BenchmarkVethWrite64K(b *testing.B) {
	a, r := vethBenchNodes(b, 16<<20)
	benchWrite(b, a, r, 64<<10, 32)
}

func BenchmarkVethWrite64B(b *testing.B) {
	a, r := vethBenchNodes(b, 1<<20)
	benchWrite(b, a, r, 64, 256)
}

// BenchmarkVethVsRaw puts the engine's figures next to the raw data path's on one
// veth pair in one run: first raw AF_XDP frames (nic/link, no transport) at 4 KiB and
// 64-byte payloads, then RDMA WRITE bandwidth with 64 KiB messages and the 64-byte
// WRITE message rate through the engine. The write sub-benchmarks report their ratio
// to the raw figure measured just before ("x_raw"):
//
//	go test -run '^$' -bench VethVsRaw -benchtime 2s ./nic/engine/
func BenchmarkVethVsRaw(b *testing.B) {
	p := testenv.NewTestPair(b, testenv.PairOptions{MTU: 4224})
	raw := map[int]link.ReceiveResult{}
	for _, size := range []int{4096, 64} {
		b.Run(fmt.Sprintf("raw_afxdp/%d", size), func(b *testing.B) {
			var tx, rx link.Link
			open := func(e *testenv.Endpoint, l *link.Link) {
				if err := e.Do(func() (err error) {
					*l, err = link.NewAFXDP(link.AFXDPOptions{Interface: e.Name})
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
			open(&p.B, &tx)
			defer tx.Close()
			open(&p.A, &rx)
			defer rx.Close()
			frame, err := testenv.RoCESendOnly(&p.B, &p.A, false, 0, make([]byte, size))
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			r, err := link.MeasureReceive(tx, rx, frame, b.N, time.Hour)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			raw[size] = r
			b.SetBytes(int64(size))
			b.ReportMetric(r.FramesPerSecond(), "frames/s")
			b.ReportMetric(r.Gbps(), "Gbit/s")
		})
	}
	for _, size := range []uint32{64 << 10, 64} {
		b.Run(fmt.Sprintf("write/%d", size), func(b *testing.B) {
			da := openVeth(b, &p.A, link.KindAFXDP, false)
			db := openVeth(b, &p.B, link.KindAFXDP, false)
			a := newNode(b, da, nodeOpts{cap: benchCap(), bufLen: 16 << 20})
			r := newNode(b, db, nodeOpts{cap: benchCap(), bufLen: 16 << 20})
			connect(b, a, r, connOpts{mtu: qpattr.MTU4096, timeout: 16})
			depth := 32
			if size == 64 {
				depth = 256
			}
			benchWrite(b, a, r, size, depth)
			el := b.Elapsed().Seconds()
			if size == 64 {
				if rr := raw[64]; rr.Frames > 0 {
					b.ReportMetric(float64(b.N)/el/rr.FramesPerSecond(), "x_raw")
				}
			} else if rr := raw[4096]; rr.Frames > 0 {
				// Payload bits per second against raw frames' payload bits per second.
				rawPayload := float64(rr.Frames) * 4096 * 8 / rr.Elapsed.Seconds()
				b.ReportMetric(float64(b.N)*float64(size)*8/el/rawPayload, "x_raw")
			}
		})
	}
}
