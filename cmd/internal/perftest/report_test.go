package perftest

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/xrnic/xrnic/verbs"
)

func mustParse(t *testing.T, test string, args ...string) *Params {
	t.Helper()
	p, err := Parse(test, args)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// diff reports the first differing line of two texts.
func diff(t *testing.T, what, got, want string) {
	t.Helper()
	if got == want {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Errorf("%s: line %d:\n got %q\nwant %q\nwhole output:\n%s", what, i+1, gl, wl, got)
			return
		}
	}
}

// The header block of ib_write_bw as a client, in perftest's layout (tabs
// included), with the values xrnic reports.
const goldenWriteBWInfo = `---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : veth0
 Number of qps   : 1		Transport type : IB
 Connection type : RC		Using SRQ      : OFF
 PCIe relax order: Unsupported
 ibv_wr* API     : OFF
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 1
 Max inline data : 0[B]
 rdma_cm QPs	 : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
`

const goldenSendBWServerInfo = `---------------------------------------------------------------------------------------
                    Send BW Test
 Dual-port       : OFF		Device         : veth0
 Number of qps   : 2		Transport type : IB
 Connection type : RC		Using SRQ      : OFF
 PCIe relax order: Unsupported
 ibv_wr* API     : OFF
 RX depth        : 512
 CQ Moderation   : 100
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 3
 Max inline data : 0[B]
 rdma_cm QPs	 : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
`

const goldenAtomicLatInfo = `---------------------------------------------------------------------------------------
                    Atomic CMP_AND_SWAP Latency Test
 Dual-port       : OFF		Device         : lo
 Number of qps   : 1		Transport type : IB
 Connection type : RC		Using SRQ      : OFF
 PCIe relax order: Unsupported
 ibv_wr* API     : OFF
 TX depth        : 1
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 0
 Outstand reads  : 128
 rdma_cm QPs	 : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
`

func TestPrintTestInfo(t *testing.T) {
	var b strings.Builder
	PrintTestInfo(&b, mustParse(t, "write_bw", "-d", "veth0", "192.0.2.1"), Info{Device: "veth0", MTU: 1024, GIDIndex: 1, OutReads: 1})
	diff(t, "write_bw client", b.String(), goldenWriteBWInfo)

	b.Reset()
	PrintTestInfo(&b, mustParse(t, "send_bw", "-d", "veth0", "-q", "2", "-s", "64"), Info{Device: "veth0", MTU: 4096, GIDIndex: 3, OutReads: 1})
	diff(t, "send_bw server", b.String(), goldenSendBWServerInfo)

	b.Reset()
	PrintTestInfo(&b, mustParse(t, "atomic_lat", "-d", "lo", "127.0.0.1", "-A", "CMP_AND_SWAP"), Info{Device: "lo", MTU: 4096, OutReads: 128})
	diff(t, "atomic_lat", b.String(), goldenAtomicLatInfo)
}

func TestPrintDest(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0x3c4a1b, RKey: 0x1b6, VAddr: 0x7f40544aa000, OutReads: 128,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}}
	gid := " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01\n"
	cases := []struct {
		verb Verb
		side string
		d    Dest
		want string
	}{
		{VerbWrite, "local", d, " local address: LID 0000 QPN 0x0011 PSN 0x3c4a1b RKey 0x0001b6 VAddr 0x007f40544aa000\n" + gid},
		{VerbRead, "remote", d, " remote address: LID 0000 QPN 0x0011 PSN 0x3c4a1b OUT 0x80 RKey 0x0001b6 VAddr 0x007f40544aa000\n" + gid},
		{VerbSend, "local", d, " local address: LID 0000 QPN 0x0011 PSN 0x3c4a1b\n" + gid},
		{VerbAtomic, "local", d, " local address: LID 0000 QPN 0x0011 PSN 0x3c4a1b\n" + gid},
		// C's %#06x prints zero without the 0x.
		{VerbWrite, "local", Dest{QPN: 0x1234, PSN: 0x42}, " local address: LID 0000 QPN 0x1234 PSN 0x0042 RKey 00000000 VAddr 0000000000000000\n" +
			" GID: 00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00\n"},
	}
	for _, c := range cases {
		var b strings.Builder
		PrintDest(&b, c.side, c.verb, &c.d)
		diff(t, c.verb.String(), b.String(), c.want)
	}
}

// The result lines below are what C's printf makes of perftest's REPORT_FMT,
// REPORT_FMT_EXT, REPORT_FMT_LAT and REPORT_FMT_LAT_DUR with the same numbers
// (checked with gcc against perftest_parameters.h).
func TestBWTable(t *testing.T) {
	var b strings.Builder
	PrintBWHeader(&b, false)
	b.WriteString(BWLine(false, BWReport{Size: 65536, Iters: 5000, Peak: 1170.63, Avg: 1169.8, MsgRate: 0.018717}, nil))
	PrintResultLine(&b)
	want := "---------------------------------------------------------------------------------------\n" +
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		" 65536      5000             1170.63            1169.80\t\t   0.018717\n" +
		"---------------------------------------------------------------------------------------\n"
	diff(t, "MB/sec", b.String(), want)

	b.Reset()
	PrintBWHeader(&b, true)
	b.WriteString(BWLine(true, BWReport{Size: 2, Iters: 1000, Peak: 0.05, Avg: 0.04, MsgRate: 2.5}, &BWReport{Peak: 0.01, Avg: 0.01, MsgRate: 0.5}))
	want = "---------------------------------------------------------------------------------------\n" +
		" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n" +
		" 2          1000           0.060000            0.050000            3.000000\n"
	diff(t, "Gb/sec, bidirectional, extended accuracy", b.String(), want)
}

func TestLatTable(t *testing.T) {
	var b strings.Builder
	PrintLatHeader(&b, false)
	b.WriteString(LatLine(LatReport{Size: 2, Iters: 1000, Min: 1.23, Max: 10.5, Typical: 1.4, Avg: 1.45, SD: 0.12, P99: 2.5, P999: 10.5}))
	want := "---------------------------------------------------------------------------------------\n" +
		" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		" 2       1000          1.23           10.50        1.40     \t       1.45        \t0.12   \t\t2.50    \t\t10.50  \n"
	diff(t, "latency", b.String(), want)

	b.Reset()
	PrintLatHeader(&b, true)
	b.WriteString(LatDurLine(2, 1000, 2_000_000, true))
	want = "---------------------------------------------------------------------------------------\n" +
		" #bytes        #iterations       t_avg[usec]    tps average\n" +
		" 2             1000            1.00           500000.00\n"
	diff(t, "latency, duration", b.String(), want)
}

// TestComputeBW checks print_report_bw's arithmetic on injected time stamps.
func TestComputeBW(t *testing.T) {
	// 4 messages of 1 MiB, one completion each: posted every 1 ms from 0,
	// completed 2 ms after posting. Peak: the best (c[j]-p[i])/(j-i+1) is
	// (5-0)/4 = 1.25 ms per message -> 800 MiB/s; average: 4 MiB in 5 ms.
	s := &BWSamples{Posted: []int64{0, 1e6, 2e6, 3e6}, Completed: []int64{2e6, 3e6, 4e6, 5e6}}
	r := ComputeBW(s, 1<<20, 4, 1, false, false)
	if math.Abs(r.Peak-800) > 1e-9 || math.Abs(r.Avg-800) > 1e-9 || math.Abs(r.MsgRate-0.0008) > 1e-12 {
		t.Errorf("ComputeBW = %+v, want peak 800, avg 800, rate 0.0008", r)
	}
	// CQ moderation 2: only c[1] and c[3] exist; unset stamps (0) never win.
	s = &BWSamples{Posted: []int64{0, 1e6, 2e6, 3e6}, Completed: []int64{0, 2e6, 0, 4e6}}
	r = ComputeBW(s, 1<<20, 4, 2, false, true)
	wantPeak := float64(1<<20) * 1e9 / (1e6 * gbitPerSec) // (c[1]-p[0])/2 = 1 ms
	if math.Abs(r.Peak-wantPeak) > 1e-9 {
		t.Errorf("peak with cq_mod 2 = %v, want %v", r.Peak, wantPeak)
	}
	// No peak: first and last stamps only.
	s = &BWSamples{Posted: []int64{1e9}, Completed: []int64{2e9}}
	r = ComputeBW(s, 1<<20, 1000, 100, true, false)
	if r.Peak != 0 || math.Abs(r.Avg-1000) > 1e-9 || math.Abs(r.MsgRate-0.001) > 1e-12 {
		t.Errorf("no peak: %+v", r)
	}
}

// TestComputeLat checks print_report_lat's statistics on injected stamps.
func TestComputeLat(t *testing.T) {
	// Gaps (ns): 1000 x 8, 3000, 9000, 20000, 50000. The two largest are
	// dropped; with rtt halving, usec = gap/2000.
	posted := []int64{0}
	for _, g := range []int64{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 3000, 9000, 20000, 50000} {
		posted = append(posted, posted[len(posted)-1]+g)
	}
	r, unsorted, sorted := ComputeLat(posted, 2, 13, true)
	if len(unsorted) != 12 || len(sorted) != 10 {
		t.Fatalf("%d unsorted, %d sorted samples", len(unsorted), len(sorted))
	}
	// m = 10 samples: 8 x 0.5, 1.5, 4.5; median (m even) = (d[5]+d[4])/2 = 0.5;
	// max = d[m] = 10 us; 99% = d[ceil(9.9)] = d[10].
	if r.Min != 0.5 || r.Typical != 0.5 || r.Max != 10 || r.P99 != 10 || r.P999 != 10 {
		t.Errorf("ComputeLat = %+v", r)
	}
	if want := (8*0.5 + 1.5 + 4.5) / 10; math.Abs(r.Avg-want) > 1e-12 {
		t.Errorf("avg %v, want %v", r.Avg, want)
	}
	var v float64
	for _, x := range sorted {
		v += (x - r.Avg) * (x - r.Avg)
	}
	if want := math.Sqrt(v / 10); math.Abs(r.SD-want) > 1e-12 || r.SD == 0 {
		t.Errorf("stdev %v, want %v", r.SD, want)
	}
	// READ and atomics are not halved.
	r2, _, _ := ComputeLat(posted, 2, 13, false)
	if r2.Min != 1 {
		t.Errorf("read latency min %v, want 1", r2.Min)
	}
}

func TestJSONIsValid(t *testing.T) {
	p := mustParse(t, "write_bw", "-d", "veth0", "192.0.2.1", "--out_json")
	in := Info{Device: "veth0", MTU: 1024, GIDIndex: 1}
	var v map[string]map[string]any
	s := JSONBW(p, in, BWReport{Size: 65536, Iters: 5000, Peak: 1.5, Avg: 1.25, MsgRate: 0.5}, nil)
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bandwidth JSON: %v\n%s", err, s)
	}
	if v["test_info"]["test"] != "RDMA_Write_BW_Test" || v["results"]["BW_average"] != 1.25 || v["results"]["MsgSize"] != 65536.0 {
		t.Errorf("bandwidth JSON: %v", v)
	}
	lp := mustParse(t, "send_lat", "--local")
	s = JSONLat(lp, in, LatReport{Size: 2, Iters: 1000, Min: 1, Max: 2, Typical: 1.5, Avg: 1.5, SD: 0.1, P99: 2, P999: 2})
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("latency JSON: %v\n%s", err, s)
	}
	if v["test_info"]["test"] != "Send_Latency_Test" || v["results"]["percentile_99.9"] != 2.0 {
		t.Errorf("latency JSON: %v", v)
	}
	s = JSONLatDur(lp, in, 2, 100, 1e6, true)
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("latency duration JSON: %v\n%s", err, s)
	}
}

func TestPrintSamples(t *testing.T) {
	var b strings.Builder
	PrintSamples(&b, []float64{1.5, 12.345678, 1e-5, 2e6})
	want := "#, usec\n1, 1.5\n2, 12.3457\n3, 1e-05\n4, 2e+06\n"
	diff(t, "samples", b.String(), want)
}

func TestBestGIDLikePerftest(t *testing.T) {
	// ib_core's table for a veth: default GID (fe80::), IPv4, global IPv6.
	var tbl []verbs.GID
	for _, g := range []string{"fe80::1", "192.0.2.1", "2001:db8::1"} {
		gid, err := verbs.ParseGID(g)
		if err != nil {
			t.Fatal(err)
		}
		tbl = append(tbl, gid)
	}
	if got := bestGID(tbl, false); got != 1 {
		t.Errorf("best IPv4 GID index %d, want 1", got)
	}
	if got := bestGID(tbl, true); got != 2 {
		t.Errorf("best IPv6 GID index %d, want 2", got)
	}
	if got := bestGID(nil, false); got != -1 {
		t.Errorf("empty table: %d", got)
	}
}
