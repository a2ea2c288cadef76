//go:build interop

package interop

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/wire"
)

// TestWriteModel checks the data check itself on real rxe captures (with and
// without go-back-N retransmissions): a buffer built from the model passes, one
// flipped byte fails, and a retransmission carrying other bytes is reported.
func TestWriteModel(t *testing.T) {
	for _, name := range []string{"rdma_write", "rdma_write_loss_retransmit"} {
		t.Run(name, func(t *testing.T) {
			all := frames(t, filepath.Join(testutil.SharedDir(t), "pcaps", name+".pcap"))
			var pkts []wire.Packet
			for _, f := range all {
				var p wire.Packet
				if wire.Parse(f.data, &p) == nil && p.Info().Mask&wire.MaskWrite != 0 {
					pkts = append(pkts, p)
				}
			}
			m := newWriteModel(ptrs(pkts))
			for i := range pkts {
				m.add(&pkts[i])
			}
			if len(m.mem) == 0 || len(m.problems) > 0 {
				t.Fatalf("model of %d packets: %d bytes, problems %v", len(pkts), len(m.mem), m.problems)
			}
			lo := ^uint64(0)
			var hi uint64
			for a := range m.mem {
				lo, hi = min(lo, a), max(hi, a)
			}
			buf := make([]byte, hi-lo+1)
			for a, b := range m.mem {
				buf[a-lo] = b
			}
			if p, err := m.check(buf, lo); err != nil || len(p) != 0 {
				t.Fatalf("a matching buffer fails: %v %v", err, p)
			}
			buf[len(buf)/2] ^= 0x40
			if p, _ := m.check(buf, lo); len(p) == 0 || !strings.Contains(p[len(p)-1], "1 of") {
				t.Fatalf("a flipped byte passes: %v", p)
			}
			if _, err := m.check(buf[:len(buf)-1], lo); err == nil {
				t.Fatal("a short buffer passes")
			}
			// The first WRITE packet again, with other bytes.
			p := pkts[0]
			p.Payload = append([]byte(nil), p.Payload...)
			p.Payload[0] ^= 0xFF
			m.add(&p)
			if len(m.problems) == 0 {
				t.Fatal("a retransmission with other data went unnoticed")
			}
			t.Logf("%d WRITE packets (%d out of sequence), %d bytes", len(pkts), m.dropped, len(m.mem))
		})
	}
}

// TestWriteModelFirstPacketLost: the capture point sees no first WRITE packet (lost
// on the way, as netem drops it in the loss runs): the rest of the first window
// arrives out of sequence and the whole window again after the NAK. The model
// expects the lowest PSN first, so it rebuilds the bytes; starting at the first
// packet captured it placed a MIDDLE at address 0 (the interop loss run failed
// so once: "address 0x9210 lies outside the buffer").
func TestWriteModelFirstPacketLost(t *testing.T) {
	all := frames(t, filepath.Join(testutil.SharedDir(t), "pcaps", "rdma_write.pcap"))
	var pkts []wire.Packet
	for _, f := range all {
		var p wire.Packet
		if wire.Parse(f.data, &p) == nil && p.Info().Mask&wire.MaskWrite != 0 {
			pkts = append(pkts, p)
		}
	}
	seen := append(append([]wire.Packet(nil), pkts[1:]...), pkts...) // go-back-N from the lost one
	m := newWriteModel(ptrs(seen))
	for i := range seen {
		m.add(&seen[i])
	}
	full := newWriteModel(ptrs(pkts))
	for i := range pkts {
		full.add(&pkts[i])
	}
	if len(m.problems) > 0 || len(m.mem) != len(full.mem) || m.dropped != len(pkts)-1 {
		t.Fatalf("model after a lost first packet: %d bytes (want %d), %d dropped, problems %v",
			len(m.mem), len(full.mem), m.dropped, m.problems)
	}
	for a, b := range full.mem {
		if m.mem[a] != b {
			t.Fatalf("address %#x: %#02x, want %#02x", a, m.mem[a], b)
		}
	}
}

// ptrs returns pointers to the elements of pkts.
func ptrs(pkts []wire.Packet) []*wire.Packet {
	out := make([]*wire.Packet, len(pkts))
	for i := range pkts {
		out[i] = &pkts[i]
	}
	return out
}

// TestSuiteFailsClearly: a host without qemu, or without access to Debian's
// packages for the guest image, makes the suite fail with one line saying so,
// within the step's timeout.
func TestSuiteFailsClearly(t *testing.T) {
	if suite.skip != "" {
		t.Skip(suite.skip)
	}
	t.Run("no qemu", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		err := checkHost()
		if err == nil || !strings.Contains(err.Error(), "qemu-system-x86_64 not found") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("checkHost with an empty PATH: %v", err)
		}
	})
	t.Run("no package access", func(t *testing.T) {
		if suite.rxeVM == "" {
			t.Skip("the harness was not found:", suite.err)
		}
		cache := t.TempDir()
		t.Setenv("RXE_VM_CACHE", cache)
		old := suite.cache
		suite.cache = cache
		defer func() { suite.cache = old }()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Port 9 (discard) on loopback: nothing answers.
		err := buildImage(ctx, []string{"RXE_VM_MIRROR=http://127.0.0.1:9/debian", "RXE_VM_SECMIRROR=http://127.0.0.1:9/debian-security"})
		if err == nil || strings.Contains(err.Error(), "\n") || ctx.Err() != nil {
			t.Fatalf("build without package access: %v (ctx %v)", err, ctx.Err())
		}
		t.Logf("%v", err)
	})
}

// TestClockMisread: perftest's own "no peak" report (send_bw's receiver prints a
// peak of 0.00) is a result, not a misread clock; a failed calibration, an
// average above the peak, or a latency line of inf and -nan is.
func TestClockMisread(t *testing.T) {
	for _, c := range []struct {
		out  string
		want bool
	}{
		{" 65536      200              0.00               19.96  \t\t   0.000319\n", false},
		{" 65536      200              26.13              19.32  \t\t   0.000309\n", false},
		{" 65536      200              12.00              19.32  \t\t   0.000309\n", true},
		{" 65536      200              0.00               0.00  \t\t   0.000000\n", true},
		{"Correlation coefficient r^2: 0.4 < 0.9\nCan't produce a report\n", true},
		// ib_write_lat, its calibration failed (a guest's gettimeofday made
		// to jump 5 ms every 40th call), and a good one.
		{" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
			" 64      200          inf            inf          inf      \t       inf         \t-nan   \t\tinf     \t\tinf    \n", true},
		{" 2       200          53.09          2098.76      75.45    \t       94.08        \t148.32 \t\t1934.42 \t\t2098.76\n", false},
		// A bandwidth line's five fields with the next line's are no latency line.
		{" 65536      200              26.13              19.32  \t\t   0.000309\n inf -nan\n", false},
	} {
		if got := clockMisread(c.out); got != c.want {
			t.Errorf("clockMisread(%q) = %v, want %v", c.out, got, c.want)
		}
	}
}

// TestGuestStalled: only a capture whose last RoCE frame is the guest's, with
// the wire silent after it for quietLimit, is a stalled guest; silence after
// xrnic's frame (xrnic owes the guest an answer it never sent) is not.
func TestGuestStalled(t *testing.T) {
	frame := func(src, dst string) []byte {
		b := make([]byte, 14+20+8+12)
		b[12], b[13] = 0x08, 0x00
		b[14] = 0x45
		b[14+9] = 17
		s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
		copy(b[14+12:], s[:])
		copy(b[14+16:], d[:])
		b[14+20+2], b[14+20+3] = 0x12, 0xB7 // UDP 4791
		return b
	}
	t0 := time.Unix(1700000000, 0)
	ping := make([]byte, 60) // the barrier ping that ends a capture
	for _, c := range []struct {
		last  string
		quiet time.Duration
		want  bool
	}{
		{ipGuest, 61 * time.Second, true},
		{ipGuest, 10 * time.Second, false},
		{ipXrnic, 61 * time.Second, false},
	} {
		path := filepath.Join(t.TempDir(), "c.pcap")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := pcapgo.NewWriter(f)
		_ = w.WriteFileHeader(65535, layers.LinkTypeEthernet)
		other := map[string]string{ipGuest: ipXrnic, ipXrnic: ipGuest}[c.last]
		for i, p := range []struct {
			data []byte
			at   time.Duration
		}{{frame(other, c.last), 0}, {frame(c.last, other), time.Millisecond}, {ping, time.Millisecond + c.quiet}} {
			if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: t0.Add(p.at), CaptureLength: len(p.data), Length: len(p.data)}, p.data); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
		f.Close()
		if got := guestStalled(t, path); got != c.want {
			t.Errorf("last RoCE frame from %s, then %v of silence: stalled %v, want %v", c.last, c.quiet, got, c.want)
		}
	}
}

// The teardown race of the guest's rping (rdma-core 44) is told from other
// failures by its line.
func TestRpingTeardownRace(t *testing.T) {
	race := "server ping data: rdma-ping-9: JKL\nrdma_get_cm_event: Bad file descriptor\n"
	if !rpingTeardownRace("rping", race) {
		t.Error("the race not recognized")
	}
	for _, c := range []struct{ tool, out string }{
		{"rping", "rdma_resolve_addr: Invalid argument\n"},
		{"ib_write_bw", race},
	} {
		if rpingTeardownRace(c.tool, c.out) {
			t.Errorf("%s %q taken for the race", c.tool, c.out)
		}
	}
}

// A client refused because the guest had no listener for its REQ yet (perftest
// -R listens a second time late) is told from other failures (perftest's and
// rping's wording).
func TestGuestNotListening(t *testing.T) {
	for out, want := range map[string]bool{
		"RDMA CM event error:\nEvent: RDMA_CM_EVENT_REJECTED; error: 8.\n":       true,
		"cma event RDMA_CM_EVENT_REJECTED, error 8\n":                            true,
		"RDMA CM event error:\nEvent: RDMA_CM_EVENT_UNREACHABLE; error: 1.\n":    true,
		"RDMA CM event error:\nEvent: RDMA_CM_EVENT_REJECTED; error: 28.\n":      false,
		"RDMA CM event error:\nEvent: RDMA_CM_EVENT_UNREACHABLE; error: -110.\n": false,
		"Failed to create QP.\n": false,
	} {
		if guestNotListening(out) != want {
			t.Errorf("%q: %v, want %v", out, !want, want)
		}
	}
}

// TestEndRace: a ping-pong run is run again only when one side finished
// every iteration and the other ran out of retries (a CI run's soak: bench's
// last send on a QP lost its ACK as ibv_srq_pingpong left).
func TestEndRace(t *testing.T) {
	const (
		done  = "13107200 bytes in 0.45 seconds = 233.34 Mbit/sec\n100 iters in 0.45 seconds = 4493.80 usec/iter\n"
		retry = "bench: failed status transport retry counter exceeded (12) for wr_id 2\n"
		other = "Failed status remote invalid request error (9) for wr_id 2\n"
	)
	for _, c := range []struct {
		xOut, gOut string
		want       bool
	}{
		{retry, done, true},
		{done, "Failed status transport retry counter exceeded (12) for wr_id 2\n", true},
		{retry, retry, false},
		{retry, "", false},
		{other, done, false},
		{done, done, false},
	} {
		if got := endRace(c.xOut, c.gOut) != ""; got != c.want {
			t.Errorf("endRace(%q, %q): %v, want %v", c.xOut, c.gOut, got, c.want)
		}
	}
}

// TestRxeShiftSeen: the capture of a CI run that met rxe's retry flaw
// (testdata/rxe-retry-shift.pcap: the guest's frames at PSNs 0x6dba8a-0x6dba8c
// of mtu1024/write_bw_-b/xrnic_server) is told by rxeShift, and the run is
// played again; an ordinary go-back-N resend (the same frames up to the flaw),
// ACKs repeating a PSN, and the same PSN on another QP are not.
func TestRxeShiftSeen(t *testing.T) {
	all := roce(t, frames(t, "testdata/rxe-retry-shift.pcap"), ipGuest)
	if len(all) != 7 {
		t.Fatalf("%d of the guest's RoCE frames in the capture, want 7", len(all))
	}
	const want = "rxe sent PSN 0x6dba8b of QP 0x11 as RC_RDMA_WRITE_ONLY (0 bytes) after it had as RC_RDMA_WRITE_FIRST (1024 bytes)"
	if got := rxeShift(all); got != want {
		t.Errorf("rxeShift = %q, want %q", got, want)
	}
	if got := rxeShift(all[:5]); got != "" {
		t.Errorf("a go-back-N resend of the same packets: rxeShift = %q, want none", got)
	}
	// The shifted FIRST alone (one PSN on, where a MIDDLE went) is the flaw too.
	if got := rxeShift(append(all[:5:5], all[6])); !strings.Contains(got, "as RC_RDMA_WRITE_FIRST (1024 bytes) after it had as RC_RDMA_WRITE_MIDDLE (1024 bytes)") {
		t.Errorf("the shifted FIRST alone: rxeShift = %q", got)
	}
	qpn, psn := all[5].BTH.DestQPN(), all[5].BTH.PSN()
	pkt := func(f wire.IBFields) rocePacket {
		f.BTH.PKey = wire.DefaultPKey
		ff := wire.FrameFields{
			IPVersion: 4,
			IPv4:      wire.IPv4Fields{TTL: 64, Src: netip.MustParseAddr(ipGuest), Dst: netip.MustParseAddr(ipXrnic)},
			UDP:       wire.UDPFields{SrcPort: wire.UDPPortRoCEv2},
			IB:        f,
		}
		b := make([]byte, ff.Len())
		n, err := ff.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		var p rocePacket
		if err := wire.Parse(b[:n], &p.Packet); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ack := pkt(wire.IBFields{
		BTH:  wire.BTHFields{Opcode: wire.RCAcknowledge, DestQPN: qpn, PSN: psn},
		AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsUnlimited)},
	})
	if got := rxeShift([]rocePacket{all[0], all[1], ack, ack}); got != "" {
		t.Errorf("ACKs at a request's PSN: rxeShift = %q, want none", got)
	}
	other := pkt(wire.IBFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, DestQPN: qpn + 1, PSN: psn}})
	if got := rxeShift([]rocePacket{all[0], all[1], other}); got != "" {
		t.Errorf("another QP's request at the same PSN: rxeShift = %q, want none", got)
	}
	if got := rxeShift([]rocePacket{all[0], all[1], all[5]}); got == "" {
		t.Error("the empty ONLY after the FIRST at its PSN: not seen")
	}
}
