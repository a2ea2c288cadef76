package perftest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/oob"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
)

var (
	reAddr   = regexp.MustCompile(`^ (local|remote) address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000)( OUT 0x[0-9a-f]{2})?( RKey 0x[0-9a-f]{6,8} VAddr 0x[0-9a-f]{14})?$`)
	reGID    = regexp.MustCompile(`^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:\d\d:\d\d:\d\d$`)
	reNumber = regexp.MustCompile(`^\d+(\.\d+)?$`)
)

// runLocalTest runs a test with --local and returns its output.
func runLocalTest(t *testing.T, test string, args ...string) string {
	t.Helper()
	p := mustParse(t, test, append([]string{"--local", "--progress", "off"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, p, &out, io.Discard); err != nil {
		t.Fatalf("%s %q: %v\n%s", test, args, err, out.String())
	}
	return out.String()
}

// checkShape checks perftest's layout: the information block, two address
// lines per side, the table's header, results lines of positive numbers, and
// the closing line.
func checkShape(t *testing.T, test string, out string, results int) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	fail := func(f string, a ...any) {
		t.Helper()
		t.Fatalf(test+": "+f+"\noutput:\n%s", append(a, out)...)
	}
	if lines[0] != strings.TrimSuffix(resultLine, "\n") {
		fail("first line %q", lines[0])
	}
	i := 1
	for i < len(lines) && lines[i] != strings.TrimSuffix(resultLine, "\n") {
		i++
	}
	i++ // end of the information block
	if i+4 > len(lines) {
		fail("no address lines")
	}
	for k, side := range []string{"local", "remote"} {
		m := reAddr.FindStringSubmatch(lines[i+2*k])
		if m == nil || m[1] != side {
			fail("address line %q", lines[i+2*k])
		}
		if !reGID.MatchString(lines[i+2*k+1]) {
			fail("GID line %q", lines[i+2*k+1])
		}
	}
	i += 4
	if lines[i] != strings.TrimSuffix(resultLine, "\n") || !strings.HasPrefix(lines[i+1], " #bytes") {
		fail("table header %q %q", lines[i], lines[i+1])
	}
	i += 2
	var rows [][]string
	for ; i < len(lines)-1; i++ {
		f := strings.Fields(lines[i])
		for _, x := range f {
			if !reNumber.MatchString(x) {
				fail("result line %q", lines[i])
			}
			if v, _ := strconv.ParseFloat(x, 64); v <= 0 {
				fail("result line %q has a number <= 0", lines[i])
			}
		}
		rows = append(rows, f)
	}
	if len(rows) != results {
		fail("%d result lines, want %d", len(rows), results)
	}
	if lines[len(lines)-1] != strings.TrimSuffix(resultLine, "\n") {
		fail("last line %q", lines[len(lines)-1])
	}
	return rows
}

// TestLocalAllTests runs the eight tests end to end over the UDP link on lo.
func TestLocalAllTests(t *testing.T) {
	for _, c := range []struct {
		test string
		cols int
	}{
		{"write_bw", 5}, {"read_bw", 5}, {"send_bw", 5}, {"atomic_bw", 5},
		{"write_lat", 9}, {"read_lat", 9}, {"send_lat", 9}, {"atomic_lat", 9},
	} {
		t.Run(c.test, func(t *testing.T) {
			out := runLocalTest(t, c.test, "-n", "100")
			rows := checkShape(t, c.test, out, 1)
			if len(rows[0]) != c.cols || rows[0][1] != "100" {
				t.Errorf("result line %q: want %d columns, 100 iterations", rows[0], c.cols)
			}
		})
	}
}

// TestLocalRDMACM: with -R every test runs over QPs connected through rdma_cm
// and exchanges over an rdma_cm connection (several QPs, bidirectional too);
// with -z only the exchange does. The header says so as perftest's does, and
// the address lines take perftest's SEND format then (no keys).
func TestLocalRDMACM(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
		cm   string
	}{
		{"write_bw", []string{"-R", "-q", "3"}, "ON"}, {"read_bw", []string{"-R"}, "ON"},
		{"send_bw", []string{"-R", "-b"}, "ON"}, {"atomic_bw", []string{"-R"}, "ON"},
		{"write_lat", []string{"-R"}, "ON"}, {"read_lat", []string{"-R"}, "ON"},
		{"send_lat", []string{"-R"}, "ON"}, {"atomic_lat", []string{"-R"}, "ON"},
		{"write_bw", []string{"-z"}, "OFF"}, {"send_lat", []string{"-z"}, "OFF"},
	} {
		t.Run(c.test+strings.Join(c.args, ""), func(t *testing.T) {
			out := runLocalTest(t, c.test, append(c.args, "-n", "50")...)
			if !strings.Contains(out, " rdma_cm QPs\t : "+c.cm+"\n Data ex. method : rdma_cm\n") {
				t.Errorf("header:\n%s", out)
			}
			if strings.Contains(out, "RKey") || !strings.Contains(out, " local address: LID 0000 QPN ") {
				t.Errorf("address lines: want perftest's SEND format:\n%s", out)
			}
			_, table, ok := strings.Cut(out, " #bytes ")
			lines := strings.Split(table, "\n")
			if !ok || len(lines) < 2 || len(strings.Fields(lines[1])) < 5 {
				t.Fatalf("no result line:\n%s", out)
			}
			if iters := strings.Fields(lines[1])[1]; iters != "50" && iters != "150" && iters != "100" {
				t.Errorf("result line %q: want 50 iterations per QP", lines[1])
			}
		})
	}
}

// TestLocalUDAndUC: -c UD and -c UC, each with its header, perftest's UD size
// (at most the MTU, -a stopping there) and inline default, over the Ethernet
// exchange and (UD) over rdma_cm through SIDR. The server's buffer shows that
// the receives were UD's: each message lands after a 40-byte GRH whose last 20
// bytes are the packet's IPv4 header, in the cache line before the message.
func TestLocalUDAndUC(t *testing.T) {
	for _, c := range []struct {
		test, conn string
		args       []string
		size       string
	}{
		{"send_bw", "UD", nil, "4096"}, {"send_bw", "UD", []string{"-R"}, "4096"},
		{"send_bw", "UD", []string{"-b", "-s", "512"}, "512"}, {"send_lat", "UD", nil, "2"},
		{"send_bw", "UD", []string{"-R", "-b", "-q", "2"}, "4096"}, {"send_lat", "UD", []string{"-R"}, "2"},
		{"send_bw", "UC", nil, "65536"}, {"write_bw", "UC", []string{"-q", "2"}, "65536"}, {"write_lat", "UC", nil, "2"},
	} {
		t.Run(c.test+c.conn+strings.Join(c.args, ""), func(t *testing.T) {
			dump := filepath.Join(t.TempDir(), "buf")
			out := runLocalTest(t, c.test, append(c.args, "-c", c.conn, "-n", "50", "--dump_buffer", dump)...)
			if !strings.Contains(out, " Connection type : "+c.conn+"\t\t") {
				t.Errorf("header:\n%s", out)
			}
			if c.test == "send_lat" && !strings.Contains(out, " Max inline data : 188[B]\n") {
				t.Errorf("UD's default inline size (DEF_INLINE_SEND_UD):\n%s", out)
			}
			_, table, _ := strings.Cut(out, " #bytes ")
			lines := strings.Split(table, "\n")
			if len(lines) < 2 || len(strings.Fields(lines[1])) < 5 || strings.Fields(lines[1])[0] != c.size {
				t.Fatalf("want one result line of %s bytes:\n%s", c.size, out)
			}
			if c.conn != "UD" || c.test != "send_bw" {
				return
			}
			b, err := os.ReadFile(dump + ".server")
			if err != nil {
				t.Fatal(err)
			}
			// The server's first receive: the second half of one QP's buffer
			// (2 halves and a cache line in all), past cache line - GRH bytes.
			half := (len(b) - defCacheLine) / 2
			ip := b[half+defCacheLine-udAddition+20:][:20]
			if ip[0] != 0x45 || ip[9] != 17 || ip[12] != 127 || ip[16] != 127 {
				t.Errorf("no IPv4 header in the GRH before the first message: % x", ip)
			}
		})
	}
	// A size asked for that does not fit one packet is refused, as perftest's
	// check_mtu refuses it.
	p := mustParse(t, "send_bw", "--local", "-c", "UD", "-s", "8192", "-n", "5", "--progress", "off")
	if err := Run(context.Background(), p, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "UD cannot be greater than MTU") {
		t.Errorf("send_bw -c UD -s 8192: %v", err)
	}
	out := runLocalTest(t, "send_bw", "-c", "UD", "-a", "-n", "5")
	if !strings.Contains(out, "\n 4096       5  ") || strings.Contains(out, "\n 8192 ") {
		t.Errorf("send_bw -c UD -a: want sizes up to the MTU (4096):\n%s", out)
	}
}

func TestLocalOptions(t *testing.T) {
	// Several QPs, bidirectional, Gb/s, a small size and the JSON file.
	js := filepath.Join(t.TempDir(), "r.json")
	out := runLocalTest(t, "write_bw", "-q", "2", "-b", "-n", "50", "-s", "1024", "--report_gbits", "--out_json", "--out_json_file", js)
	if !strings.Contains(out, "RDMA_Write Bidirectional BW Test") || !strings.Contains(out, "BW peak[Gb/sec]") {
		t.Errorf("header:\n%s", out)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]map[string]any
	if err := json.Unmarshal(b, &v); err != nil || v["results"]["n_iterations"] != 100.0 {
		t.Errorf("JSON report %v: %s", err, b)
	}
	// Several sizes.
	out = runLocalTest(t, "send_lat", "-a", "-n", "5")
	if n := strings.Count(out, "\n 8388608 "); n != 1 {
		t.Errorf("send_lat -a: no 8 MiB line:\n%s", out)
	}
	// Duration mode.
	out = runLocalTest(t, "read_bw", "-D", "1")
	// perftest 6.06 prints no warning for the peak it leaves out: 0.00.
	if strings.Contains(out, "WARNING") || !strings.Contains(out, " 65536      ") || !strings.Contains(out, "  0.00  ") {
		t.Errorf("read_bw -D 1:\n%s", out)
	}
}

// openSide opens one side of a test by hand on a UDP link at addr on lo.
func openSide(t *testing.T, a netip.Addr) (*verbs.Device, func()) {
	t.Helper()
	var l link.Link
	var err error
	for range 50 {
		if l, err = link.NewUDP(link.UDPOptions{Interface: "lo", Addrs: []netip.Addr{a}}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // another test's link holds the port
	}
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(verbs.Options{Link: l, GIDs: []verbs.GID{verbs.GIDFromAddr(a)}, Engine: verbs.EngineConfig{Logf: func(string, ...any) {}}})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	return d, func() { d.Close(); l.Close() }
}

// TestServerDiesMidRun: the server vanishes (device, QPs and connection gone)
// while the client measures; the client returns an error, without hanging.
func TestServerDiesMidRun(t *testing.T) {
	for _, test := range []string{"write_bw", "send_bw", "write_lat"} {
		t.Run(test, func(t *testing.T) {
			sa, ca := netip.MustParseAddr("127.0.0.11"), netip.MustParseAddr("127.0.0.12")
			ds, closeS := openSide(t, sa)
			dc, closeC := openSide(t, ca)
			ln, err := net.Listen("tcp", "127.0.0.11:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			sp := mustParse(t, test, "-d", "lo", "-n", "100000000", "-p", port)
			cp := mustParse(t, test, "-d", "lo", "127.0.0.11", "-n", "100000000", "-p", port)
			sctx, kill := context.WithCancel(context.Background())
			defer kill()
			serr := make(chan error, 1)
			var sout testutil.SyncBuffer
			go func() {
				c, err := oob.Accept(sctx, ln)
				ln.Close()
				if err != nil {
					closeS()
					serr <- err
					return
				}
				serr <- runConn(sctx, sp, &sout, io.Discard, ds, closeS, "lo", NewConn(c, false))
			}()
			c, err := oob.Dial(context.Background(), ln.Addr().String(), 0)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				// Kill the server once the measurement has begun.
				for !strings.Contains(sout.String(), "#bytes") {
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(300 * time.Millisecond)
				kill()
			}()
			cerr := make(chan error, 1)
			var cout testutil.SyncBuffer
			go func() {
				cerr <- runConn(context.Background(), cp, &cout, io.Discard, dc, closeC, "lo", NewConn(c, true))
			}()
			select {
			case err := <-cerr:
				if err == nil {
					t.Fatalf("client succeeded against a dead server:\n%s", cout.String())
				}
				t.Logf("client: %v", err)
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error of more than one line: %q", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("client hangs after the server died")
			}
			if err := <-serr; !errors.Is(err, context.Canceled) {
				t.Errorf("server: %v, want context.Canceled", err)
			}
		})
	}
}

// TestCancelStopsEverything: cancelling a --local run mid-measurement returns
// promptly and leaves nothing running (TestMain checks goroutines).
func TestCancelStopsEverything(t *testing.T) {
	p := mustParse(t, "send_bw", "--local", "-n", "100000000", "--progress", "off")
	ctx, cancel := context.WithCancel(context.Background())
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, p, &out, io.Discard) }()
	for !strings.Contains(out.String(), "#bytes") {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run does not return after cancel")
	}
}

// TestLoopsDoNotAllocate: ten times the iterations cost no more allocations
// (the whole process counts, engine included: the measurement loops, the
// engine's data path and the CQs must all stay allocation-free). 4 KiB
// WRITEs and READ responses take the sender's fold of payload into ICRC
// (wire.FoldCopyMin), 64-byte ones copy and then run the CRC.
func TestLoopsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	mallocs := func(test, size, n string) uint64 {
		args := []string{"-n", n, "-s", size}
		if test != "read_bw" { // READs carry no inline data (perftest has no -I there)
			args = append(args, "-I", "0")
		}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		runLocalTest(t, test, args...)
		runtime.ReadMemStats(&m1)
		return m1.Mallocs - m0.Mallocs
	}
	for _, c := range []struct{ test, size string }{{"write_bw", "64"}, {"send_lat", "64"}, {"write_bw", "4096"}, {"read_bw", "4096"}} {
		small, big := mallocs(c.test, c.size, "1000"), mallocs(c.test, c.size, "10000")
		t.Logf("%s -s %s: %d allocations for 1000 iterations, %d for 10000", c.test, c.size, small, big)
		if big > small+500 {
			t.Errorf("%s -s %s: %d allocations for 1000 iterations, %d for 10000: the loop allocates", c.test, c.size, small, big)
		}
	}
}

func TestProgressLine(t *testing.T) {
	p := mustParse(t, "write_lat", "--local", "-D", "3", "--progress", "on")
	var out, errw testutil.SyncBuffer
	if err := Run(context.Background(), p, &out, &errw); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^bench: write_lat: \d+ s, \d+ completions \(\d+/s\)$`).MatchString(errw.String()) {
		t.Errorf("no progress line on stderr: %q", errw.String())
	}
	if !strings.Contains(out.String(), "t_avg[usec]    tps average") {
		t.Errorf("duration table:\n%s", out.String())
	}
}

// TestLocalEventsListsSRQ: -e sleeps on the completion channel, -l and
// --recv_post_list post lists, --use-srq feeds the receivers from an SRQ,
// --busy-poll has write_lat's memory spin run the engine (without, the spin
// yields its CPU now and then); each shows in perftest's header and in what
// the run did.
func TestLocalEventsListsSRQ(t *testing.T) {
	type counter struct {
		name string
		c    *atomic.Uint64
	}
	ev := counter{"armed waits for an event", &counts.events}
	sl := counter{"send lists", &counts.sendLists}
	rl := counter{"receive lists", &counts.recvLists}
	srq := counter{"SRQ receives", &counts.srqRecvs}
	md := counter{"memory spins that ran the engine", &counts.memDrives}
	sy := counter{"yields of the CPU from the memory spin", &counts.spinYields}
	for _, c := range []struct {
		test   string
		args   []string
		header []string
		used   []counter
	}{
		{"send_bw", []string{"-e", "-n", "200"}, []string{"Test with events. Using lo_comp0"}, []counter{ev}},
		{"send_bw", []string{"-e", "-b", "-q", "2", "-n", "200"}, []string{"Send Bidirectional BW Test"}, []counter{ev}},
		{"read_bw", []string{"-e", "-q", "2", "-n", "200"}, []string{"Test with events"}, []counter{ev}},
		{"atomic_bw", []string{"-e", "-n", "200"}, []string{"Test with events"}, []counter{ev}},
		{"send_lat", []string{"-e", "-n", "100"}, []string{"Test with events"}, []counter{ev}},
		{"read_lat", []string{"-e", "-n", "100"}, []string{"Test with events"}, []counter{ev}},
		{"atomic_lat", []string{"-e", "-n", "100"}, []string{"Test with events"}, []counter{ev}},
		{"write_bw", []string{"-l", "4", "-n", "200", "-s", "4096"},
			[]string{"RDMA_Write Post List BW Test", " Post List       : 4", " CQ Moderation   : 4", "Post List requested - CQ moderation will be the size of the post list"}, []counter{sl}},
		{"read_bw", []string{"-l", "8", "-Q", "4", "-q", "2", "-n", "400"}, []string{" Post List       : 8", " CQ Moderation   : 4"}, []counter{sl}},
		{"send_bw", []string{"-l", "4", "--recv_post_list", "4", "-q", "2", "-n", "200", "-s", "1024"},
			[]string{" Post List       : 4"}, []counter{sl, rl}},
		{"send_bw", []string{"--use-srq", "-q", "4", "-n", "200"}, []string{"Using SRQ      : ON"}, []counter{srq}},
		{"send_bw", []string{"--use-srq", "-b", "-q", "2", "-n", "200", "-e"}, []string{"Using SRQ      : ON"}, []counter{srq, ev}},
		{"send_lat", []string{"--use-srq", "-n", "100"}, []string{"Using SRQ      : ON"}, []counter{srq}},
		{"send_bw", []string{"-c", "UD", "--use-srq", "-n", "200"}, []string{"Using SRQ      : ON"}, []counter{srq}},
		{"write_lat", []string{"--busy-poll", "-n", "100"}, []string{"RDMA_Write Latency Test"}, []counter{md}},
		{"write_lat", []string{"-n", "100"}, []string{"RDMA_Write Latency Test"}, []counter{sy}},
	} {
		t.Run(c.test+strings.Join(c.args, ""), func(t *testing.T) {
			before := make([]uint64, len(c.used))
			for i, u := range c.used {
				before[i] = u.c.Load()
			}
			out := runLocalTest(t, c.test, c.args...)
			for _, h := range c.header {
				if !strings.Contains(out, h) {
					t.Errorf("no %q in:\n%s", h, out)
				}
			}
			for i, u := range c.used {
				if u.c.Load() == before[i] {
					t.Errorf("%s: no %s", c.args, u.name)
				}
			}
			rows := 0
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) >= 5 && reNumber.MatchString(f[0]) && reNumber.MatchString(f[1]) {
					rows++
				}
			}
			if rows != 1 {
				t.Errorf("%d result lines:\n%s", rows, out)
			}
		})
	}
}

// TestLocalReportOptions: --report-both, --output, -w and -y, and
// --dont_xchg_versions with perftest's meaning.
func TestLocalReportOptions(t *testing.T) {
	out := runLocalTest(t, "write_bw", "-b", "--report-both", "-n", "100", "-s", "4096")
	if !strings.Contains(out, resultLine+"\n Local results: \n"+resultLine+resultFmt) ||
		!strings.Contains(out, resultLine+"\n Remote results: \n"+resultLine+resultFmt) {
		t.Errorf("--report-both:\n%s", out)
	}
	for _, c := range []struct{ test, flag string }{{"write_bw", "bandwidth"}, {"send_bw", "message_rate"}, {"send_lat", "latency"}} {
		out := runLocalTest(t, c.test, "--output", c.flag, "-n", "100")
		if !regexp.MustCompile(`^\d+\.\d{6}\n$`).MatchString(out) {
			t.Errorf("%s --output %s printed %q, want the figure alone", c.test, c.flag, out)
		}
	}
	for _, lim := range [][]string{{"-w", "1e9"}, {"-y", "1e6"}} {
		p := mustParse(t, "write_bw", append([]string{"--local", "--progress", "off", "-n", "50"}, lim...)...)
		err := Run(context.Background(), p, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "below") {
			t.Errorf("write_bw %s: %v, want the limit's failure", lim, err)
		}
	}
	runLocalTest(t, "write_bw", "-w", "0.001", "-y", "0.000001", "-n", "50")
	// --reversed: the side that connects is the test's server; in --local the
	// client's output is shown, so it is the server's report (no TX depth).
	for _, test := range []string{"write_bw", "send_bw", "send_lat"} {
		out := runLocalTest(t, test, "--reversed", "-n", "100")
		if strings.Contains(out, " TX depth ") {
			t.Errorf("%s --reversed: the connecting side's header:\n%s", test, out)
		}
	}
	// -C: the latencies in cycles, /proc/cpuinfo's MHz times the microseconds.
	if mhz, err := CPUMHz(); err == nil {
		out := runLocalTest(t, "read_lat", "-C", "-n", "100")
		m := regexp.MustCompile(`(?m)^ 2 +100 +([\d.]+)`).FindStringSubmatch(out)
		if v, _ := strconv.ParseFloat(m[1], 64); m == nil || v < mhz { // at least a microsecond's worth
			t.Errorf("read_lat -C (CPU at %.0f MHz):\n%s", mhz, out)
		}
	}
	// The software rate limiter: 12.5 MiB at 20 MB/s (perftest's MB is 2^20).
	out = runLocalTest(t, "write_bw", "--rate_limit_type", "SW", "--rate_limit", "20", "--rate_units", "M", "-s", "65536", "-n", "200", "--burst_size", "4")
	if f := strings.Fields(regexp.MustCompile(`(?m)^ 65536 .*$`).FindString(out)); len(f) != 5 {
		t.Errorf("rate-limited write_bw:\n%s", out)
	} else if avg, _ := strconv.ParseFloat(f[3], 64); avg > 22 {
		t.Errorf("rate-limited to 20 MB/s, the average was %v MB/s:\n%s", avg, out)
	}
	// --cpu_util: a column in duration mode (user over user and idle time of
	// the sample), nothing but perftest's note otherwise.
	out = runLocalTest(t, "write_bw", "-D", "2", "--cpu_util")
	m := regexp.MustCompile(`(?m)^ 65536 .*\t    ([\d.]+)$`).FindStringSubmatch(out)
	if !strings.Contains(out, "MsgRate[Mpps]    CPU_Util[%]\n") || m == nil {
		t.Errorf("write_bw -D 2 --cpu_util:\n%s", out)
	} else if u, _ := strconv.ParseFloat(m[1], 64); u <= 0 || u > 100 {
		t.Errorf("CPU utilization %v%%", u)
	}
	if out := runLocalTest(t, "write_bw", "-n", "50", "--cpu_util"); strings.Contains(out, "CPU_Util") {
		t.Errorf("--cpu_util without -D:\n%s", out)
	}
	// -T: rdma_cm's type of service, shown as perftest shows it.
	out = runLocalTest(t, "write_bw", "-R", "-T", "32", "-n", "50")
	if !strings.Contains(out, "Data ex. method : rdma_cm \tTOS    : 32\n") {
		t.Errorf("write_bw -R -T 32:\n%s", out)
	}
	runLocalTest(t, "read_bw", "--dont_xchg_versions", "--perform_warm_up", "-n", "50")
	runLocalTest(t, "send_lat", "--latency_gap", "50", "-n", "20")
}

// TestAliveCheck: an unreliable receiver gives up after a whole period without
// a new message (perftest's check_alive), not while messages keep coming, and
// never for RC.
func TestAliveCheck(t *testing.T) {
	old := aliveEvery
	aliveEvery = 20 * time.Millisecond
	defer func() { aliveEvery = old }()
	s := &session{p: &Params{Conn: ConnUC}}
	a := s.newAliveCheck(time.Now())
	for got := uint64(1); got <= 3; got++ { // progress in every period
		time.Sleep(25 * time.Millisecond)
		if err := a.check(got, 10); err != nil {
			t.Fatalf("with progress: %v", err)
		}
	}
	time.Sleep(25 * time.Millisecond)
	if err := a.check(3, 10); err == nil || !strings.Contains(err.Error(), "Total Received=3, Total Iters Required=10") {
		t.Errorf("without progress: %v", err)
	}
	if err := a.check(10, 10); err != nil {
		t.Errorf("all received: %v", err)
	}
	s.p.Conn = ConnRC
	rc := s.newAliveCheck(time.Now().Add(-time.Hour))
	if err := rc.check(0, 10); err != nil {
		t.Errorf("RC: %v", err)
	}
}

// TestHugePages: --use_hugepages takes the buffers from the system's huge
// pages, and says so when there are none.
func TestHugePages(t *testing.T) {
	testutil.RequireRoot(t)
	const knob = "/proc/sys/vm/nr_hugepages"
	old, err := os.ReadFile(knob)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(knob, old, 0o644) })
	set := func(n string) {
		if err := os.WriteFile(knob, []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set("0")
	p := mustParse(t, "write_bw", "--local", "--progress", "off", "--use_hugepages", "-n", "20")
	if err := Run(context.Background(), p, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "Please configure hugepages") {
		t.Errorf("no huge pages: %v", err)
	}
	set("8") // two sides of 2 x 64 KiB each, a 2 MiB page apiece
	out := runLocalTest(t, "write_bw", "--use_hugepages", "-n", "20")
	checkShape(t, "write_bw --use_hugepages", out, 1)
}

// TestMRPerQP: --mr_per_qp gives each QP its own MR (its own RKey on the
// address lines), and every test runs on that layout.
func TestMRPerQP(t *testing.T) {
	rkeys := func(out string) map[string]bool {
		m := map[string]bool{}
		for _, k := range regexp.MustCompile(`(?m)^ local address: .* RKey (0x[0-9a-f]+) `).FindAllStringSubmatch(out, -1) {
			m[k[1]] = true
		}
		return m
	}
	if n := len(rkeys(runLocalTest(t, "write_bw", "-q", "3", "-n", "50"))); n != 1 {
		t.Errorf("one MR: %d RKeys", n)
	}
	out := runLocalTest(t, "write_bw", "-q", "3", "-n", "50", "--mr_per_qp")
	if n := len(rkeys(out)); n != 3 {
		t.Errorf("--mr_per_qp, 3 QPs: %d RKeys:\n%s", n, out)
	}
	for _, c := range [][]string{
		{"read_bw", "-q", "2", "-b"}, {"send_bw", "-q", "2", "-b"}, {"send_bw", "-c", "UD", "-q", "2"},
		{"atomic_bw", "-q", "2"}, {"write_lat"}, {"send_lat"}, {"read_lat"},
	} {
		out := runLocalTest(t, c[0], append(c[1:], "--mr_per_qp", "-n", "50")...)
		if len(c) == 1 {
			checkShape(t, c[0]+" --mr_per_qp", out, 1)
		} else if !regexp.MustCompile(`(?m)^ \d+ +100 `).MatchString(out) {
			t.Errorf("%s --mr_per_qp: no result line for 2 x 50 messages:\n%s", c, out)
		}
	}
}

// TestMmapBuffer: with --mmap the server's buffer is the file's pages, so the
// client's RDMA WRITEs land in the file; a file too short is refused (touching
// a shared mapping past its end would kill the process).
func TestMmapBuffer(t *testing.T) {
	file := filepath.Join(t.TempDir(), "buf")
	const offset = 4096
	if err := os.WriteFile(file, make([]byte, offset+2*65536), 0o600); err != nil {
		t.Fatal(err)
	}
	sout, _, serr, cerr := runPair(t, []string{"write_bw", "-n", "20", "-s", "65536", "--mmap", file, "--mmap-offset", strconv.Itoa(offset)},
		[]string{"write_bw", "-n", "20", "-s", "65536"})
	if serr != nil || cerr != nil {
		t.Fatalf("server: %v\nclient: %v\n%s", serr, cerr, sout)
	}
	if !strings.Contains(sout, "allocated mmap buffer of size 131072 at 0x") {
		t.Errorf("server output:\n%s", sout)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The client's writes go to the server's receive half: offset+65536 on.
	if n := bytes.Count(b[offset+65536:offset+65536+4096], []byte{0}); n > 256 || bytes.Count(b[:offset], []byte{0}) != offset {
		t.Errorf("the file does not hold the client's writes past the offset (and nothing before it): %d zeros at the receive half", n)
	}
	if _, err := mapFile(file, 0, 1<<20); err == nil || !strings.Contains(err.Error(), "the file has") {
		t.Errorf("mapping past the end: %v", err)
	}
}

// TestRunInfinitely: a line every -D seconds until the run is stopped, for
// the RDMA tests and SEND's receiver alike.
func TestRunInfinitely(t *testing.T) {
	// --local shows the side that connects: with --reversed, SEND's receiver.
	for _, args := range [][]string{{"write_bw"}, {"send_bw"}, {"send_bw", "--reversed"}} {
		test := args[0]
		p := mustParse(t, test, append(args[1:], "--local", "--progress", "off", "--run_infinitely", "-D", "1", "-s", "4096")...)
		ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
		var out testutil.SyncBuffer
		err := Run(ctx, p, &out, io.Discard)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s --run_infinitely: %v, want the run to go on until stopped", test, err)
		}
		lines := regexp.MustCompile(`(?m)^ 4096 +(\d+) +0\.00 +([\d.]+)`).FindAllStringSubmatch(out.String(), -1)
		if len(lines) < 2 {
			t.Errorf("%s --run_infinitely -D 1 for 3.5 s: %d result lines:\n%s", test, len(lines), out.String())
		}
		for _, l := range lines {
			if n, _ := strconv.Atoi(l[1]); n <= 0 {
				t.Errorf("%s: a period with %s messages", test, l[1])
			}
		}
	}
}
