package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/perftest"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/testenv"
)

// TestCompare runs bench compare briefly and checks that it printed every
// baseline and every xrnic figure, each a positive number with its ratio.
func TestCompare(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "iperf3")
	t.Setenv("BENCH_TEST_MAIN", "1") // the children bench runs are this binary
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	// 16 QPs, not 256: under -race's slowdown 256 QPs collapse even at two
	// WRITEs each (retry exceeded: the performance issue's note).
	if err := run(ctx, []string{"compare", "--duration", "300ms", "--scale", "0.01", "--qps", "16"}, &out, &progress); err != nil {
		t.Fatalf("%v\n%s%s", err, out.String(), progress.String())
	}
	// Each baseline row of the first round (its name followed by spaces)
	// and of the second (", again").
	want := []string{"raw AF_XDP native XDP, 4096 B payload ", "raw AF_XDP generic XDP, 64 B payload ", "UDP sockets (mmsg), 4096 B",
		"raw AF_XDP native XDP, 4096 B payload, again", "raw AF_XDP generic XDP, 64 B payload, again",
		"UDP sockets (GSO and GRO), 4096 B payload, again", "UDP sockets (mmsg), 64 B payload, again",
		"ping-pong 64 B, afxdp-busy native, again", "ping-pong 64 B, afxdp-busy generic, again", "ping-pong 64 B, afxdp-busy-acked native ", "ping-pong 64 B, afxdp-busy-acked generic, again", "ping-pong 64 B, udp-blocking, again",
		"raw AF_XDP native, 2 queues, 4096 B payload ", "raw AF_XDP native, 2 queues, 64 B payload, again",
		"kernel TCP, iperf3", "  with xrnic's XDP program, native", "ping-pong 64 B, afxdp-busy native ", "ping-pong 64 B, afxdp-busy generic ", "ping-pong 64 B, udp-blocking ",
		"write_bw -s 65536 ", "read_bw -s 4096 ", "send_bw -s 65536 ", "write_bw -s 65536 -q 16", "write_bw -s 64 (perftest's depth", "write_bw -s 64 -t 4096 (message rate)", "write_bw -s 64 -t 4096 --busy-poll",
		"write_bw -s 64 -t 4096 --xdp-mode native ",
		"write_bw -s 65536 -q 16 --queues 2", "send_bw -s 65536 -q 16 --queues 2", "write_bw -s 64 -q 16 --queues 2",
		"write_bw -s 65536 --link udp-gso ", "read_bw -s 65536 --link udp-gso ", "write_bw -s 64 -t 4096 --link udp-gso ",
		"write_lat -s 2, typical", "send_lat -s 2 --busy-poll, typical", "read_lat -s 2, typical"}
	lines := strings.Split(out.String(), "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			if !strings.HasPrefix(l, w) {
				continue
			}
			found = true
			if firstNumber(strings.Fields(l[len(w):])) <= 0 {
				t.Errorf("%q: no positive figure", l)
			}
		}
		if !found {
			t.Errorf("no row %q", w)
		}
	}
	// The runs with an engine per queue stand against raw AF_XDP on as many
	// queues: the 64 KiB bandwidths and the 64-byte rate.
	for want, n := range map[string]int{"raw AF_XDP 4 KiB, 2 queues": 3, "raw AF_XDP 64 B, 2 queues": 1} {
		if got := strings.Count(out.String(), "x "+want+"\n"); got != n {
			t.Errorf("%d rows against %q, want %d", got, want, n)
		}
	}
	// Every ratio has its bar: a bar read from a key the floods did not
	// write (rawBars, udpBars) is zero, and its ratios infinite.
	if strings.Contains(out.String(), "Inf") || strings.Contains(out.String(), "NaN") {
		t.Errorf("a ratio without its bar:\n%s", out.String())
	}
	// Each latency's tails beside the baseline's own at the same
	// percentile: half the round trip for write_lat and send_lat, which
	// perftest halves; all of it for read_lat, which it reports whole.
	for _, b := range []string{"UDP blocking", "raw AF_XDP busy"} {
		for way, want := range map[string]int{" one way": 4, " round trip": 2} {
			if n := strings.Count(out.String(), b+way+", same percentile"); n != want {
				t.Errorf("%d tail rows against %s%s, want %d", n, b, way, want)
			}
		}
	}
	// write_lat and send_lat with --busy-poll also stand against the
	// two-frame ping-pong; read_lat, whose response is its ACK, does not.
	if n := strings.Count(out.String(), "raw AF_XDP busy with an ACK a turn, one way"); n != 2 {
		t.Errorf("%d rows against the ping-pong with an ACK a turn, want 2 (write_lat and send_lat --busy-poll)", n)
	}
	// xrnic's rows keep their names within the 44-character column.
	xr := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "xrnic (bench") })
	if xr < 0 {
		t.Error("no xrnic header")
	} else {
		for _, l := range lines[xr+1:] {
			if l != "" && (len(l) <= 44 || l[44] != ' ') {
				t.Errorf("%q: a name past its column", l)
			}
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "read_lat") && !strings.Contains(l, "round trip") {
			t.Errorf("%q: read_lat is a round trip", l)
		}
		if strings.Contains(l, "same percentile") && firstNumber(strings.Fields(strings.ReplaceAll(l, "x ", " "))) <= 0 {
			t.Errorf("%q: no positive ratio", l)
		}
	}
	// xrnic's rows print at the end; each run is named on the other
	// writer as it starts.
	if strings.Contains(out.String(), "measuring:") || !strings.Contains(progress.String(), "measuring: write_bw -s 65536") {
		t.Errorf("progress lines: %d in the table, %q apart", strings.Count(out.String(), "measuring:"), progress.String())
	}
	if t.Failed() {
		t.Log(out.String())
	}
}

// cancelAt is a progress writer that cancels a run at its nth xrnic run.
type cancelAt struct {
	n      int
	cancel context.CancelFunc
	mu     sync.Mutex
	seen   int
}

func (w *cancelAt) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen += bytes.Count(b, []byte("measuring:")); w.seen >= w.n {
		w.cancel()
	}
	return len(b), nil
}

// TestCompareStops: a cancelled compare stops between measurements, and the
// xrnic rows it has print, against the first round's bars, under a line that
// says so; cancelled before it starts, it prints no baseline.
func TestCompareStops(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "iperf3")
	t.Setenv("BENCH_TEST_MAIN", "1")
	args := []string{"compare", "--duration", "300ms", "--scale", "0.01", "--qps", "16", "--queues", "1"}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	if err := run(ctx, args, &out, io.Discard); !errors.Is(err, context.Canceled) || strings.Contains(out.String(), "raw AF_XDP") {
		t.Errorf("cancelled before it started: %v\n%s", err, out.String())
	}

	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out.Reset()
	err := run(ctx, args, &out, &cancelAt{n: 2, cancel: cancel})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled at the second xrnic run: %v\n%s", err, out.String())
	}
	o := out.String()
	if !strings.Contains(o, "(the run stopped") || strings.Contains(o, ", again") {
		t.Errorf("no word of the stop, or a second round:\n%s", o)
	}
	found := false
	for _, l := range strings.Split(o, "\n") {
		if w := "write_bw -s 65536 "; strings.HasPrefix(l, w) {
			found = true
			if firstNumber(strings.Fields(l[len(w):])) <= 0 {
				t.Errorf("%q: no positive figure", l)
			}
		}
	}
	if !found || strings.Contains(o, "write_bw -s 65536 --busy-poll") {
		t.Errorf("want the first xrnic run's row and not the second's:\n%s", o)
	}
}

// TestBestOf: bench compare keeps the best of its runs of a measurement (the
// highest rate, the lowest latency) wherever it falls among them, and stops
// at the first error or once its context ends; --best-of outside
// 1..maxBestOf is a usage error, as is every other option outside its range.
func TestBestOf(t *testing.T) {
	higher := func(a, b float64) bool { return a > b }
	lower := func(a, b float64) bool { return a < b }
	for _, seq := range [][]float64{{3, 7, 5}, {7, 3, 5}, {5, 3, 7}} {
		for _, c := range []struct {
			better func(a, b float64) bool
			want   float64
		}{{higher, 7}, {lower, 3}} {
			i := 0
			got, err := bestOf(context.Background(), len(seq), func() (float64, error) { i++; return seq[i-1], nil }, c.better)
			if err != nil || got != c.want || i != len(seq) {
				t.Errorf("best of %v: %v after %d runs (%v), want %v after %d", seq, got, i, err, c.want, len(seq))
			}
		}
	}
	boom := errors.New("boom")
	calls := 0
	_, err := bestOf(context.Background(), 3, func() (float64, error) {
		if calls++; calls == 2 {
			return 0, boom
		}
		return 1, nil
	}, higher)
	if !errors.Is(err, boom) || calls != 2 {
		t.Errorf("a failing second run: %v after %d runs, want boom after 2", err, calls)
	}
	// A stopped compare starts no further run.
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	_, err = bestOf(ctx, 3, func() (float64, error) {
		if calls++; calls == 2 {
			cancel()
		}
		return 1, nil
	}, higher)
	if !errors.Is(err, context.Canceled) || calls != 2 {
		t.Errorf("cancelled in the second run: %v after %d runs, want context.Canceled after 2", err, calls)
	}
	// Like --best-of, every option outside its range is a usage error
	// before anything runs (--qps 0 divided by zero, after the baselines).
	for _, a := range [][]string{{"--best-of", "0"}, {"--best-of", "11"}, {"--qps", "0"}, {"--qps", "16,-1"},
		{"--qps", "16385"}, {"--duration", "0s"}, {"--duration", "-1s"}, {"--scale", "0"}, {"--scale", "NaN"},
		{"--scale", "+Inf"}, {"--queues", "0"}} {
		var out bytes.Buffer
		if err := run(context.Background(), append([]string{"compare"}, a...), &out, &out); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", a, err)
		}
	}
}

// TestRowName: a row is named by what ran, but for the iteration count and
// the flags its caller leaves out.
func TestRowName(t *testing.T) {
	for _, c := range []struct {
		args, omit []string
		want       string
	}{
		{[]string{"-s", "64", "-n", "600000", "-t", "4096", "--link", "udp-gso"}, nil, "write_bw -s 64 -t 4096 --link udp-gso"},
		{[]string{"-s", "65536", "-n", "10", "--link", "udp-gso"}, nil, "write_bw -s 65536 --link udp-gso"},
		{[]string{"-s", "64", "-n", "60"}, nil, "write_bw -s 64"},
		{[]string{"-s", "64", "-n", "60", "-t", "4096", "--xdp-mode", "native"}, nil, "write_bw -s 64 -t 4096 --xdp-mode native"},
		{[]string{"-s", "65536", "-q", "16", "-n", "1875", "--queues", "2", "--xdp-mode", "native"}, []string{"--xdp-mode"},
			"write_bw -s 65536 -q 16 --queues 2"},
		{[]string{"-s", "65536", "-n", "10", "--busy-poll"}, []string{"--xdp-mode"}, "write_bw -s 65536 --busy-poll"},
	} {
		if got := rowName("write_bw", c.args, c.omit...); got != c.want {
			t.Errorf("%v less %v: %q, want %q", c.args, c.omit, got, c.want)
		}
	}
}

// TestBaselineBars: the bars are the faster of the baselines' two rounds,
// whichever came first (raw AF_XDP's and the ping-pongs'), and of raw
// AF_XDP's two XDP modes.
func TestBaselineBars(t *testing.T) {
	at := func(fps float64) link.ReceiveResult {
		return link.ReceiveResult{Frames: int(fps), Elapsed: time.Second}
	}
	slow := map[string]link.ReceiveResult{"native4096": at(100e3), "generic4096": at(200e3), "native64": at(0.5e6), "generic64": at(0.4e6)}
	fast := map[string]link.ReceiveResult{"native4096": at(400e3), "generic4096": at(300e3), "native64": at(0.6e6), "generic64": at(0.9e6)}
	wantMBps, wantMpps := perftestMBps(400e3*4096*8/1e9), 0.9
	for _, rounds := range [][]map[string]link.ReceiveResult{{slow, fast}, {fast, slow}} {
		raw := map[string]link.ReceiveResult{}
		for _, round := range rounds {
			for k, r := range round {
				keepBetter(raw, k, r, fasterFlood)
			}
		}
		if mbps, mpps := rawBars(raw); math.Abs(mbps-wantMBps) > 1e-9 || math.Abs(mpps-wantMpps) > 1e-9 {
			t.Errorf("bars %v MB/s, %v M/s; want %v, %v", mbps, mpps, wantMBps, wantMpps)
		}
	}
	// An engine per queue's bars: raw AF_XDP on as many queues, or on one
	// should that be the faster.
	for _, c := range []struct {
		q4K, q64       float64 // frames a second on the queues
		wantBW, wantPS float64
	}{
		{800e3, 1.5e6, perftestMBps(800e3 * 4096 * 8 / 1e9), 1.5},
		{300e3, 0.7e6, perftestMBps(400e3 * 4096 * 8 / 1e9), 0.9},
	} {
		raw := map[string]link.ReceiveResult{"queues4096": at(c.q4K), "queues64": at(c.q64)}
		for k, r := range fast {
			raw[k] = r
		}
		if mbps, mpps := queueBars(raw); math.Abs(mbps-c.wantBW) > 1e-9 || math.Abs(mpps-c.wantPS) > 1e-9 {
			t.Errorf("queue bars %v MB/s, %v M/s; want %v, %v", mbps, mpps, c.wantBW, c.wantPS)
		}
	}
	// The UDP link's bars: the GSO/GRO sockets' better round.
	udp := func(fps4K, fps64 float64) map[string]link.ReceiveResult {
		return map[string]link.ReceiveResult{"udp-gso4096": at(fps4K), "udp-gso64": at(fps64), "udp4096": at(9e6), "udp64": at(9e6)}
	}
	wantMBps = perftestMBps(1.2e6 * 4096 * 8 / 1e9)
	for _, rounds := range [][]map[string]link.ReceiveResult{{udp(0.4e6, 6e6), udp(1.2e6, 4e6)}, {udp(1.2e6, 4e6), udp(0.4e6, 6e6)}} {
		raw := map[string]link.ReceiveResult{}
		for _, round := range rounds {
			for k, r := range round {
				keepBetter(raw, k, r, fasterFlood)
			}
		}
		if mbps, mpps := udpBars(raw); math.Abs(mbps-wantMBps) > 1e-9 || math.Abs(mpps-6) > 1e-9 {
			t.Errorf("UDP bars %v MB/s, %v M/s; want %v, 6", mbps, mpps, wantMBps)
		}
	}
	for _, rounds := range [][]time.Duration{{5, 3}, {3, 5}} {
		rtt := map[string]rttPercentiles{}
		for _, p50 := range rounds {
			keepBetter(rtt, "afxdp-busy", rttPercentiles{p50: p50, p99: 2 * p50}, shorterRTT)
		}
		if got := rtt["afxdp-busy"]; got != (rttPercentiles{p50: 3, p99: 6}) {
			t.Errorf("rounds %v: kept %+v, want the shorter median with its own tail", rounds, got)
		}
	}
}

// firstNumber is the first field of f that is a number (0 if none).
func firstNumber(f []string) float64 {
	for _, s := range f {
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			return v
		}
	}
	return 0
}

// TestPerftestMBps: the compare's bars are in bench's own unit, perftest's MB/s
// of 2^20 bytes. A run that moves 2^20 bytes of payload a second reports 1, and
// a baseline moving 8.388608 Mbit/s of payload is that same rate.
func TestPerftestMBps(t *testing.T) {
	s := perftest.BWSamples{Posted: []int64{0}, Completed: []int64{1e9}}
	r := perftest.ComputeBW(&s, 1<<20, 1, 1, true, false)
	if got := r.Avg / perftestMBps(8*(1<<20)/1e9); math.Abs(got-1) > 1e-9 {
		t.Errorf("1 MB/s of bench against its baseline: ratio %v, want 1", got)
	}
}

// TestTurnFrames: a turn of the ping-pong with an ACK carries two frames, the
// first of an ACK's 62 bytes (Ethernet 14, IPv4 20, UDP 8, BTH 12, AETH 4,
// ICRC 4) and then the 64-byte message; afxdp-busy's carries the message alone.
func TestTurnFrames(t *testing.T) {
	a := &testenv.Endpoint{Name: "a", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, IPv4: netip.MustParseAddr("10.9.0.1")}
	b := &testenv.Endpoint{Name: "b", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, IPv4: netip.MustParseAddr("10.9.0.2")}
	for kind, want := range map[string][]int{"afxdp-busy": {122}, "afxdp-busy-acked": {62, 122}} {
		out, err := turnFrames(kind, a, b)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, f := range out {
			got = append(got, len(f))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: frames of %v bytes, want %v", kind, got, want)
		}
	}
}

// TestRunRowsBars: a run with an engine per queue stands against raw AF_XDP
// on as many queues, and a run on one queue against raw AF_XDP on one.
func TestRunRowsBars(t *testing.T) {
	b := bars{bw: 100, rate: 1, queuesBW: 200, queuesRate: 4, oneQP: 50, tcpCPU: 1}
	r := xrnicResult{res: map[string]float64{"BW_average": 100, "MsgRate": 1}, cpuPerGB: 2}
	for _, c := range []struct {
		test string
		args []string
		want []string // the ratios and what they stand against, in order
	}{
		{"write_bw", []string{"-s", "65536", "-n", "10"}, []string{"1.00x raw AF_XDP 4 KiB", "2.00x kernel TCP"}},
		{"write_bw", []string{"-s", "65536", "-q", "16", "-n", "10"}, []string{"2.00x one QP"}},
		{"read_bw", []string{"-s", "65536", "-q", "16", "-n", "10", "--queues", "2", "--xdp-mode", "native"},
			[]string{"0.50x raw AF_XDP 4 KiB, 2 queues", "2.00x one QP, one queue"}},
		{"write_bw", []string{"-s", "64", "-q", "16", "-n", "10", "--queues", "2", "--xdp-mode", "native"},
			[]string{"0.25x raw AF_XDP 64 B, 2 queues"}},
	} {
		var got []string
		runRows(func(format string, args ...any) {
			f := strings.Fields(fmt.Sprintf(format, args...))
			for i, w := range f {
				if strings.HasSuffix(w, "x") && i+1 < len(f) && strings.Contains(w, ".") {
					got = append(got, strings.Join(f[i:], " "))
				}
			}
		}, c.test, c.args, r, b)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s %v: %q, want %q", c.test, c.args, got, c.want)
		}
	}
}

// TestQueueFrames: raw AF_XDP's sockets on many queues share out one
// queue's UMEM, a power of two each, no fewer than xsk's default.
func TestQueueFrames(t *testing.T) {
	for n, want := range map[int]int{1: 16384, 2: 16384, 3: 8192, 4: 8192, 5: 4096, 64: 4096} {
		if got := queueFrames(n); got != want {
			t.Errorf("queueFrames(%d) = %d, want %d", n, got, want)
		}
	}
}
