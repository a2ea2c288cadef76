package link

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
)

// benchMode is the XDP attach mode of the links openOn makes; XRNIC_XDP_MODE=native
// switches the benchmark to native mode.
var benchMode bpf.AttachMode

// BenchmarkVethReceive measures frames/s and Gbit/s received through the AF_XDP link
// and through the UDP link on the same veth pair in the same run, for 64-byte, 1 KiB
// and 4 KiB RoCEv2 payloads. Both ends use the same kind of link (the two ways xrnic
// is deployed). The sender runs on its own goroutine; veth's receive work runs on the
// sender's CPU (PLATFORM 11), so each needs a core.
//
//	go test -run '^$' -bench VethReceive -benchtime 300000x ./nic/link/
func BenchmarkVethReceive(b *testing.B) {
	if os.Getenv("XRNIC_XDP_MODE") == "native" {
		benchMode = bpf.AttachNative
		defer func() { benchMode = bpf.AttachGeneric }()
	}
	p := testenv.NewTestPair(b, testenv.PairOptions{MTU: 4200})
	for _, size := range []int{64, 1024, 4096} {
		for _, rx := range []Kind{KindAFXDP, KindUDP} {
			b.Run(fmt.Sprintf("%s/%d", rx, size), func(b *testing.B) {
				lb := openOn(b, &p.B, rx)
				la := openOn(b, &p.A, rx)
				frame := roceFrame(b, &p.B, &p.A, false, 0, bytes.Repeat([]byte{0xab}, size))
				b.ResetTimer()
				r, err := MeasureReceive(lb, la, frame, b.N, time.Hour)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.FramesPerSecond(), "frames/s")
				b.ReportMetric(r.Gbps(), "Gbit/s")
			})
		}
	}
}

// BenchmarkSetIPv4ID: what renumbering a GSO segment costs the UDP link's
// writer per 4 KiB frame, against the full ICRC pass it replaced.
//
//	go test -run '^$' -bench SetIPv4ID ./nic/link/
func BenchmarkSetIPv4ID(b *testing.B) {
	a, p := docPair()
	f, err := testenv.RoCESendOnly(a, p, false, 1, bytes.Repeat([]byte{'x'}, 4096))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("patch", func(b *testing.B) {
		var sh wire.ICRCShift
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			setIPv4ID(f, uint16(i%64), &sh)
		}
	})
	b.Run("full-pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			wire.ICRCInPlace(f[wire.EthernetLen:len(f)-wire.ICRCLen], wire.IPv4Len)
		}
	})
}
