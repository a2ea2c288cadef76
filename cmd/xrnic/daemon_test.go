package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/vishvananda/netlink"

	"github.com/xrnic/xrnic/cmd/internal/perftest"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/remote"
)

// testDaemon is the daemon run in-process in the A end's namespace.
type testDaemon struct {
	p           *testenv.Pair
	sock        string
	attach      string // the attach socket
	metrics     string
	cancel      context.CancelFunc
	done        chan error
	out, errOut testutil.SyncBuffer
	stopOnce    sync.Once
	stopErr     error
}

// startDaemon runs the daemon on p.A as `xrnic -i A` would, with a control
// socket in a temporary folder and metrics on 127.0.0.1:9479 of A's namespace,
// and waits until it answers on its control socket.
func startDaemon(t testing.TB, p *testenv.Pair, args ...string) *testDaemon {
	t.Helper()
	return startDaemonOn(t, p, &p.A, args...)
}

// startDaemonOn is startDaemon on either end of p.
func startDaemonOn(t testing.TB, p *testenv.Pair, end *testenv.Endpoint, args ...string) *testDaemon {
	t.Helper()
	dir := t.TempDir()
	d := &testDaemon{p: p, sock: filepath.Join(dir, "xrnic.sock"), attach: filepath.Join(dir, "xrnic.attach"),
		metrics: "127.0.0.1:9479", done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	args = append([]string{"-i", end.Name, "--control", d.sock, "--attach", d.attach, "--metrics", d.metrics}, args...)
	if err := end.NS.Go(func() { d.done <- run(ctx, args, &d.out, &d.errOut) }); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.stop() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := fetchSnapshot(d.sock); err == nil {
			// The socket answers before the daemon prints its ready line.
			if e, ok := d.errOut.WaitFor("ready: ", 15*time.Second); !ok {
				t.Fatalf("the daemon answers but printed no ready line:\n%s", e)
			}
			return d
		}
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("daemon exited: %v\n%s", err, d.errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not ready after 15 s:\n%s", d.errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop does what SIGINT and SIGTERM do (main cancels run's context) and
// returns run's result.
func (d *testDaemon) stop() error {
	d.stopOnce.Do(func() {
		d.cancel()
		select {
		case d.stopErr = <-d.done:
		case <-time.After(30 * time.Second):
			d.stopErr = errors.New("the daemon did not stop within 30 s")
		}
	})
	return d.stopErr
}

// cmd runs an introspection command against the daemon.
func (d *testDaemon) cmd(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), append(args, "-s", d.sock), &out, &errOut); err != nil {
		t.Fatalf("xrnic %q: %v", args, err)
	}
	return out.String()
}

// scrape reads the daemon's metrics from inside its namespace and parses them.
func (d *testDaemon) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = d.p.A.Do(func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + d.metrics + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the metrics: %v", err)
	}
	return mfs
}

// metric returns the value of the sample of family name whose labels include
// want (label=value pairs).
func metric(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no sample of %s with %q", name, want)
	return 0
}

// clientDevice opens the B end as bench's client does; the clients of a test
// share it.
func clientDevice(t *testing.T, p *testenv.Pair) *verbs.Device {
	t.Helper()
	var dev *verbs.Device
	if err := p.B.Do(func() (err error) {
		dev, err = verbs.Open(verbs.Options{Interface: p.B.Name, LinkKind: link.KindAFXDP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// client runs a bench client in B's namespace over dev, as `bench TEST -d B
// ARGS... A` would (-p in ARGS picks the server's port), and sends its result
// on the returned channel.
func client(t *testing.T, ctx context.Context, p *testenv.Pair, dev *verbs.Device, out io.Writer, test string, args ...string) <-chan error {
	t.Helper()
	pp, err := perftest.Parse(test, append(args, "-d", p.B.Name, p.A.IPv4.String()))
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	if err := p.B.NS.Go(func() {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.A.IPv4.String(), strconv.Itoa(pp.Port)))
		if err != nil {
			res <- err
			return
		}
		res <- perftest.RunConn(ctx, pp, out, io.Discard, dev, p.B.Name, c)
	}); err != nil {
		t.Fatal(err)
	}
	return res
}

func wait(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(90 * time.Second):
		t.Fatalf("%s: no result within 90 s", what)
	}
	return nil
}

// resultRow is the numbers row of a bandwidth report.
func resultRow(out string) []string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return nil
	}
	return strings.Fields(lines[len(lines)-2])
}

// TestDaemonOnVeth runs the daemon on one end of a veth pair and two bench
// clients at once from the other; while one runs, `resource show qp` lists its
// session's QP; afterwards the metrics and `statistic` show the traffic; the stop
// SIGTERM causes leaves no XDP program and no control socket.
func TestDaemonOnVeth(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	d := startDaemon(t, p)
	if e := d.errOut.String(); !strings.Contains(e, "AF_XDP link on queue 0") || !strings.Contains(e, "ready: xrnic") {
		t.Errorf("the daemon does not say which link it runs on:\n%s", e)
	}
	if !xdpAttached(t, &p.A) {
		t.Fatalf("no XDP program on %s while the daemon runs", p.A.Name)
	}
	dev := clientDevice(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A long client (duration mode) and a short one, at once.
	var long, short testutil.SyncBuffer
	longRes := client(t, ctx, p, dev, &long, "write_bw", "-s", "4096", "-D", "3")
	// The session's QP is listed from its creation (RESET, INIT) on; wait until the
	// exchange has taken it to RTR.
	var qps string
	sessionRTR := func() bool {
		for _, l := range strings.Split(qps, "\n") {
			if strings.Contains(l, "session 1 ") && strings.Contains(l, " state RTR ") {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !sessionRTR() && time.Now().Before(deadline) {
		qps = d.cmd(t, "resource", "show", "qp")
		time.Sleep(20 * time.Millisecond)
	}
	mrs := d.cmd(t, "resource", "show", "mr") // session 1 runs for 3 s
	shortRes := client(t, ctx, p, dev, &short, "write_bw", "-s", "65536", "-n", "2000")
	if err := wait(t, "short client", shortRes); err != nil {
		t.Fatalf("short client: %v\n%s\ndaemon:\n%s", err, short.String(), d.errOut.String())
	}
	if err := wait(t, "long client", longRes); err != nil {
		t.Fatalf("long client: %v\n%s\ndaemon:\n%s", err, long.String(), d.errOut.String())
	}

	// The server side ends after its client: wait for both sessions' ends.
	for deadline := time.Now().Add(10 * time.Second); ; {
		s, err := fetchSnapshot(d.sock)
		if err != nil {
			t.Fatal(err)
		}
		if s.Ended[0]+s.Ended[1] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sessions did not end:\n%s", d.errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The QP of session 1, a write_bw server: RTR towards the client's QP.
	var qpLine string
	for _, l := range strings.Split(qps, "\n") {
		if strings.Contains(l, "session 1 ") {
			qpLine = l
		}
	}
	if !strings.HasPrefix(qpLine, "link xrnic0/1 lqpn ") || !strings.Contains(qpLine, " type RC state RTR ") ||
		!strings.Contains(qpLine, " comm xrnic session 1 peer "+p.B.IPv4.String()+":") {
		t.Errorf("resource show qp while session 1 runs:\n%s", qps)
	}
	if !strings.HasPrefix(mrs, "dev xrnic0 mrn ") || !strings.Contains(mrs, "|RemoteWrite|") ||
		!strings.Contains(mrs, " comm xrnic session 1 peer "+p.B.IPv4.String()+":") {
		t.Errorf("resource show mr while session 1 runs:\n%s", mrs)
	}
	for name, out := range map[string]string{"long": long.String(), "short": short.String()} {
		row := resultRow(out)
		if len(row) != 5 || (row[0] != "4096" && row[0] != "65536") {
			t.Errorf("%s client's result row %q:\n%s", name, row, out)
			continue
		}
		if bw, _ := strconv.ParseFloat(row[3], 64); bw <= 0 {
			t.Errorf("%s client: average bandwidth %s", name, row[3])
		}
	}
	if o := d.out.String(); strings.Count(o, "BW average[MB/sec]") != 2 {
		t.Errorf("the daemon's output lacks the two sessions' reports:\n%s", o)
	}

	// Metrics and statistic agree that traffic went through.
	mfs := d.scrape(t)
	sent := metric(t, mfs, "xrnic_sent_pkts_total", "device", "xrnic0", "port", "1")
	rcvd := metric(t, mfs, "xrnic_rcvd_pkts_total", "device", "xrnic0", "port", "1")
	if sent <= 0 || rcvd < 2000 {
		t.Errorf("sent_pkts %v, rcvd_pkts %v: want traffic", sent, rcvd)
	}
	if v := metric(t, mfs, "xrnic_xdp_redirected_total", "interface", p.A.Name); v < rcvd {
		t.Errorf("xdp_redirected %v < rcvd_pkts %v", v, rcvd)
	}
	if v := metric(t, mfs, "xrnic_bench_sessions_ended_total", "result", "ok"); v != 2 {
		t.Errorf("bench sessions ended ok: %v, want 2", v)
	}
	if v := metric(t, mfs, "xrnic_engine_rx_frames_total", "device", "xrnic0"); v < rcvd {
		t.Errorf("engine_rx_frames %v < rcvd_pkts %v", v, rcvd)
	}
	if v := metric(t, mfs, "xrnic_engine_tx_frames_total", "device", "xrnic0"); v != sent {
		t.Errorf("engine_tx_frames %v != sent_pkts %v", v, sent)
	}
	if v := metric(t, mfs, "xrnic_port_state", "port", "1"); v != 4 {
		t.Errorf("port state %v, want 4 (ACTIVE)", v)
	}
	for _, name := range []string{"xrnic_retry_exceeded_err_total", "xrnic_rcvd_bad_icrc_total", "xrnic_device_info",
		"xrnic_objects", "xrnic_link_rx_dropped_total", "xrnic_engine_loops_total", "xrnic_engine_idle_waits_total",
		"xrnic_engine_rx_batches_total", "xrnic_engine_tx_batches_total", "xrnic_engine_timers_fired_total", "go_goroutines"} {
		if mfs[name] == nil {
			t.Errorf("no metric %s", name)
		}
	}
	stat := d.cmd(t, "statistic", "-d")
	if !strings.HasPrefix(stat, "link xrnic0/1 sent_pkts ") || !strings.Contains(stat, fmt.Sprintf(" rcvd_pkts %d ", uint64(rcvd))) ||
		!strings.Contains(stat, "\n    xdp seen ") || !strings.Contains(stat, "\n    engine loops ") || !strings.Contains(stat, "bench sessions 0 ended-ok 2 ended-failed 0") ||
		!strings.Contains(stat, "\n    cm sent ") {
		t.Errorf("statistic -d:\n%s", stat)
	}
	// What is left is QP1's, which the daemon runs from its start with the
	// CM (its PD, CQ, GSI QP and MAD buffers), as rdma resource counts the
	// kernel's own GSI QP.
	if r := d.cmd(t, "resource"); r != "0: xrnic0: pd 1 cq 1 qp 1 mr 1 srq 0 ah 0 sessions 0 attached 0\n" {
		t.Errorf("resource after the sessions: %q", r)
	}

	if err := d.stop(); err != nil {
		t.Fatalf("run: %v\n%s", err, d.errOut.String())
	}
	if xdpAttached(t, &p.A) {
		t.Errorf("XDP program left attached after the daemon stopped")
	}
	if _, err := os.Stat(d.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control socket left behind: %v", err)
	}
	if e := d.errOut.String(); !strings.Contains(e, "XDP program detached") {
		t.Errorf("the daemon does not say it detached:\n%s", e)
	}
}

// TestStopMidSession stops the daemon while a client runs: the session ends (its
// QPs flush), the daemon returns nil, the client fails with a clear error, and
// nothing stays attached.
// TestDaemonSeveralTests: one daemon, three bench servers (--bench-server),
// three clients of different tests at once, each served by its own test.
func TestDaemonSeveralTests(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	// A latency server runs its own iteration count, as perftest's does: the
	// client must match it.
	d := startDaemon(t, p, "--bench-server", "read_bw:18516:-s 8192", "--bench-server", "send_lat:18517:-n 200")
	if e := d.errOut.String(); !strings.Contains(e, "bench write_bw server on TCP port 18515, read_bw server on TCP port 18516, send_lat server on TCP port 18517") {
		t.Errorf("the ready line does not list the three servers:\n%s", e)
	}
	dev := clientDevice(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	outs := map[string]*testutil.SyncBuffer{"write_bw": {}, "read_bw": {}, "send_lat": {}}
	res := map[string]<-chan error{
		"write_bw": client(t, ctx, p, dev, outs["write_bw"], "write_bw", "-n", "1000"),
		"read_bw":  client(t, ctx, p, dev, outs["read_bw"], "read_bw", "-s", "8192", "-n", "1000", "-p", "18516"),
		"send_lat": client(t, ctx, p, dev, outs["send_lat"], "send_lat", "-n", "200", "-p", "18517"),
	}
	for test, ch := range res {
		if err := wait(t, test, ch); err != nil {
			t.Fatalf("%s client: %v\n%s\ndaemon:\n%s", test, err, outs[test].String(), d.errOut.String())
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		s, err := fetchSnapshot(d.sock)
		if err != nil {
			t.Fatal(err)
		}
		if s.Ended[0] == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sessions did not all end well (%v):\n%s", s.Ended, d.errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	o := d.out.String()
	for _, want := range []string{"(write_bw):", "(read_bw):", "(send_lat):", "RDMA_Read BW Test", "Send Latency Test"} {
		if !strings.Contains(o, want) {
			t.Errorf("the daemon's reports lack %q:\n%s", want, o)
		}
	}
}

func TestStopMidSession(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	d := startDaemon(t, p)
	dev := clientDevice(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out testutil.SyncBuffer
	res := client(t, ctx, p, dev, &out, "write_bw", "-s", "4096", "-D", "20")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.cmd(t, "resource"), "sessions 1") {
		if time.Now().After(deadline) {
			t.Fatalf("the session never started:\n%s", d.errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("run: %v\n%s", err, d.errOut.String())
	}
	err := wait(t, "client", res)
	if err == nil || !errors.Is(err, perftest.ErrPeer) {
		t.Errorf("client of a daemon that stopped: %v, want an error wrapping ErrPeer", err)
	}
	if !strings.Contains(d.errOut.String(), "closed (the daemon is stopping)") {
		t.Errorf("the daemon's log:\n%s", d.errOut.String())
	}
	if xdpAttached(t, &p.A) {
		t.Errorf("XDP program left attached")
	}
}

// TestSignal runs the real binary in the namespace (`ip netns exec`), sends it
// SIGTERM and checks it exits 0 with no XDP program left; SIGINT likewise.
func TestSignal(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		sock := filepath.Join(t.TempDir(), "xrnic.sock")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := p.A.NS.Exec(ctx, os.Args[0], "-i", p.A.Name, "--control", sock)
		cmd.Env = append(os.Environ(), "XRNIC_TEST_MAIN=1")
		var stderr testutil.SyncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			if _, err := fetchSnapshot(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				cancel()
				t.Fatalf("not ready:\n%s", stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !xdpAttached(t, &p.A) {
			t.Errorf("%v: no XDP program while the daemon runs", sig)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		cancel()
		if err != nil {
			t.Errorf("%v: %v (want exit 0)\n%s", sig, err, stderr.String())
		}
		if xdpAttached(t, &p.A) {
			t.Errorf("%v: XDP program left attached", sig)
		}
		if !strings.Contains(stderr.String(), "XDP program detached") {
			t.Errorf("%v: stderr:\n%s", sig, stderr.String())
		}
	}
}

// TestUDPLink runs the daemon on the UDP link (--link udp), as it runs where
// AF_XDP cannot: a client still completes, and no program is attached.
func TestUDPLink(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	d := startDaemon(t, p, "--link", "udp", "--interval", "20ms")
	if xdpAttached(t, &p.A) {
		t.Errorf("XDP program attached with --link udp")
	}
	var dev *verbs.Device
	if err := p.B.Do(func() (err error) {
		dev, err = verbs.Open(verbs.Options{Interface: p.B.Name, LinkKind: link.KindUDP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out testutil.SyncBuffer
	if err := wait(t, "client", client(t, ctx, p, dev, &out, "write_bw", "-s", "8192", "-n", "500")); err != nil {
		t.Fatalf("client: %v\n%s\n%s", err, out.String(), d.errOut.String())
	}
	mfs := d.scrape(t)
	if v := metric(t, mfs, "xrnic_link_rx_frames_total", "link", "udp"); v < 500 {
		t.Errorf("link rx frames %v", v)
	}
	if mfs["xrnic_xdp_seen_total"] != nil {
		t.Errorf("XDP metrics on a UDP link")
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if e := d.errOut.String(); !strings.Contains(e, "udp link") {
		t.Errorf("the daemon does not say which link it runs on:\n%s", e)
	}
	// --interval: the counters line, and the session's report.
	if o := d.out.String(); !strings.Contains(o, "link xrnic0/1 sent_pkts ") || !strings.Contains(o, "bench session 1 from ") {
		t.Errorf("the daemon's output:\n%s", o)
	}
}

// TestInterfaceRemoved: the daemon's interface going away ends it with an error
// that says so, and it cleans up.
func TestInterfaceRemoved(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	d := startDaemon(t, p)
	h, err := p.A.NS.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(p.A.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		d.done <- err
	case <-time.After(15 * time.Second):
		t.Fatalf("the daemon still runs 15 s after its interface went away:\n%s", d.errOut.String())
	}
	if err := d.stop(); err == nil || err.Error() != "interface "+p.A.Name+" was removed" {
		t.Errorf("run = %v, want the interface's removal", err)
	}
	if _, err := os.Stat(d.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control socket left behind: %v", err)
	}
}

// TestDemo runs scripts/demo.sh end to end: it builds xrnic and bench, and its
// output carries perftest's table.
func TestDemo(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireCommand(t, "ip")
	if testing.Short() {
		t.Skip("builds two binaries; skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(testutil.RepoRoot(t), "scripts", "demo.sh"))
	cmd.Dir = testutil.RepoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	o := string(out)
	for _, want := range []string{
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
		"link xrnic0/1 lqpn ", "link xrnic0/1 sent_pkts ", "xrnic_sent_pkts_total{",
		"daemon exited 0; no XDP program on ", "demo: OK",
		"==> a process attached to the daemon's device", "xrnic: attach: pid ",
	} {
		if !strings.Contains(o, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	var row bool
	for _, l := range strings.Split(o, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "65536" && f[1] == "2000" {
			row = true
		}
	}
	if !row {
		t.Errorf("demo output lacks the 65536-byte result row")
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", o)
	}
}

// The daemon serves attachments on its attach socket (mode 0600, as set, not
// the umask's): a process attaches, sees the daemon's device, makes objects;
// when the daemon stops, the session ends and the process's calls fail.
func TestDaemonAttach(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	d := startDaemon(t, p, "--attach-max", "1")
	if _, ok := d.errOut.WaitFor("attach socket "+d.attach, time.Second); !ok {
		t.Errorf("the ready line does not name the attach socket:\n%s", d.errOut.String())
	}
	st, err := os.Stat(d.attach)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("attach socket: %v %v", st.Mode(), err)
	}
	c, err := remote.Dial(d.attach)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !strings.HasPrefix(c.Name(), "xrnic") {
		t.Errorf("attached to %q", c.Name())
	}
	// --attach-max 1: a second process is refused.
	if c2, err := remote.Dial(d.attach); err == nil {
		c2.Close()
		t.Error("a second process attached past --attach-max 1")
	}
	if _, ok := d.errOut.WaitFor("refused: 1 sessions", time.Second); !ok {
		t.Errorf("the daemon's log does not show the refusal:\n%s", d.errOut.String())
	}
	port, err := c.QueryPort()
	if err != nil || port.State != uint32(verbs.PortActive) {
		t.Fatalf("port %+v: %v", port, err)
	}
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(remote.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// rdma resource shows the QP as the attached process's, not the daemon's.
	if r := d.cmd(t, "resource"); !strings.Contains(r, " attached 1\n") {
		t.Errorf("resource: %q", r)
	}
	want := fmt.Sprintf("lqpn %d type RC state RESET", qp.QPN())
	mine := fmt.Sprintf("pid %d comm %s\n", os.Getpid(), procComm(t))
	found := false
	for _, l := range strings.SplitAfter(d.cmd(t, "resource", "show", "qp"), "\n") {
		if strings.Contains(l, want) {
			found = true
			if !strings.HasSuffix(l, mine) {
				t.Errorf("the attached process's QP: %q, want it to end %q", l, mine)
			}
		}
	}
	if !found {
		t.Errorf("resource show qp lacks %q", want)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("daemon: %v", err)
	}
	if _, err := c.AllocPD(); err == nil {
		t.Fatal("a call after the daemon stopped succeeded")
	}
	if !strings.Contains(d.errOut.String(), "freed 3 objects") {
		t.Errorf("the daemon's log does not show the session's objects freed:\n%s", d.errOut.String())
	}
}

func procComm(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func xdpAttached(t *testing.T, e *testenv.Endpoint) bool {
	t.Helper()
	var on bool
	if err := e.Do(func() error {
		l, err := netlink.LinkByName(e.Name)
		if err != nil {
			return err
		}
		on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return on
}

// TestDaemonPcap: --pcap records the daemon's device on a link it does not
// hand to the device to own: both directions of a bench session, whole RoCEv2
// frames, flushed when the daemon stops.
func TestDaemonPcap(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	file := filepath.Join(t.TempDir(), "d.pcap")
	d := startDaemon(t, p, "--pcap", file)
	dev := clientDevice(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out testutil.SyncBuffer
	if err := wait(t, "write_bw", client(t, ctx, p, dev, &out, "write_bw", "-n", "100", "-s", "4096")); err != nil {
		t.Fatalf("client: %v\n%s", err, out.String())
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	a, b := p.A.IPv4.As4(), p.B.IPv4.As4()
	var sent, got int
	for _, f := range testutil.ReadPcap(t, file) {
		var pkt wire.Packet
		if err := wire.Parse(f, &pkt); err != nil {
			t.Fatalf("a recorded frame does not parse: %v", err)
		}
		switch src := [4]byte(f[14+12 : 14+16]); src {
		case a:
			sent++
		case b:
			got++
		}
	}
	// 100 WRITEs of 4 KiB come in (at RoCE MTU 1024: 400 frames); ACKs go out.
	if got < 400 || sent == 0 {
		t.Errorf("the capture has %d frames from the client and %d from the daemon", got, sent)
	}
}

// Two bench processes at once, each attached to the daemon's device on A
// with --daemon (a write_bw and a send_lat -e, as two perftest processes would
// be), each against a peer of its own: the bench servers of a daemon on B.
// Both finish with their result rows, and the daemon on A frees both
// sessions.
func TestBenchOnDaemon(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	d := startDaemon(t, p, "--bench-port", "0")
	startDaemonOn(t, p, &p.B, "--bench-port", "19001", "--bench-opts", "-s 65536 -n 2000",
		"--bench-server", "send_lat:19002:-s 2 -n 1000")
	runs := []struct {
		test string
		args []string
		row  string
	}{
		{"write_bw", []string{"-p", "19001", "-s", "65536", "-n", "2000"}, " 65536      2000 "},
		{"send_lat", []string{"-p", "19002", "-s", "2", "-n", "1000", "-e"}, " 2       1000 "},
	}
	// Two bench processes at once, each attached to A's daemon.
	var procs []*benchProc
	for _, r := range runs {
		procs = append(procs, benchChildIn(t, &p.A, r.test, append(append([]string{"--daemon", d.attach}, r.args...),
			p.B.IPv4.String())...))
	}
	for i, r := range runs {
		if err := procs[i].wait(90 * time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", r.test, err, procs[i].out.String())
		}
		if !strings.Contains(procs[i].out.String(), r.row) {
			t.Errorf("%s through the daemon lacks %q:\n%s", r.test, r.row, procs[i].out.String())
		}
	}
	for end := time.Now().Add(5 * time.Second); !strings.Contains(d.cmd(t, "resource"), " attached 0\n"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after the clients: %q", d.cmd(t, "resource"))
		}
	}
}

// TestBenchOnDaemonCM runs perftest's -R (the QPs connected through
// rdma_cm) with both ends attached to daemons, one on each end of the veth
// pair: the server's bench listens through B's daemon, the client's connects
// through A's. Each bench is a process of its own, so that verbs/rdmacm finds
// only the attached device (as an application would: the daemons' devices
// are in this process); they run write_bw and then send_lat with -e.
func TestBenchOnDaemonCM(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	a := startDaemon(t, p)
	b := startDaemonOn(t, p, &p.B)
	for _, r := range []struct {
		test string
		args []string
		row  string
	}{
		{"write_bw", []string{"-s", "4096", "-n", "500"}, " 4096       500 "},
		{"send_lat", []string{"-s", "2", "-n", "200", "-e"}, " 2       200 "},
	} {
		t.Run(r.test, func(t *testing.T) {
			args := append([]string{"-R", "-p", "19020"}, r.args...)
			srv := benchChild(t, r.test, append([]string{"--daemon", b.attach}, args...)...)
			if out, ok := srv.waitFor("* Waiting for client to connect... *", 20*time.Second); !ok { // printed after rdma_listen
				t.Fatalf("the server did not listen:\n%s", out)
			}
			cli := benchChild(t, r.test, append(append([]string{"--daemon", a.attach}, args...), p.B.IPv4.String())...)
			for _, c := range []*benchProc{cli, srv} {
				if err := c.wait(60 * time.Second); err != nil {
					t.Fatalf("%v\nserver:\n%s\nclient:\n%s", err, srv.out.String(), cli.out.String())
				}
				if !strings.Contains(c.out.String(), r.row) {
					t.Errorf("lacks %q:\n%s", r.row, c.out.String())
				}
			}
		})
	}
	for _, d := range []*testDaemon{a, b} {
		for end := time.Now().Add(5 * time.Second); !strings.Contains(d.cmd(t, "resource"), " attached 0\n"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("after the clients: %q", d.cmd(t, "resource"))
			}
		}
	}
}

// benchProc is a process of a test's own (bench by benchChild, a program by
// startProc), its output gathered.
type benchProc struct {
	cmd  *exec.Cmd
	out  testutil.SyncBuffer
	done chan error
}

// benchChild runs `bench TEST ARGS` as another process: this test binary,
// whose TestMain runs perftest for XRNIC_TEST_BENCH.
func benchChild(t *testing.T, test string, args ...string) *benchProc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "XRNIC_TEST_BENCH="+strings.Join(append([]string{test}, args...), "\x1f"))
	return startProc(t, cmd)
}

// benchChildIn is benchChild in the end's namespace (for perftest's TCP
// exchange with the other end).
func benchChildIn(t *testing.T, end *testenv.Endpoint, test string, args ...string) *benchProc {
	t.Helper()
	cmd := end.NS.Exec(context.Background(), os.Args[0])
	cmd.Env = append(os.Environ(), "XRNIC_TEST_BENCH="+strings.Join(append([]string{test}, args...), "\x1f"))
	return startProc(t, cmd)
}

// startProc starts cmd; the test's end kills it if it still runs.
func startProc(t testing.TB, cmd *exec.Cmd) *benchProc {
	t.Helper()
	b := &benchProc{cmd: cmd, done: make(chan error, 1)}
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.done
		b.done <- nil
	})
	return b
}

// waitFor waits for substr in the output, until d passes or the process ends.
func (b *benchProc) waitFor(substr string, d time.Duration) (string, bool) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		if out, ok := b.out.WaitFor(substr, 100*time.Millisecond); ok {
			return out, true
		}
		select {
		case err := <-b.done:
			b.done <- err
			out, ok := b.out.WaitFor(substr, 0)
			return fmt.Sprintf("%s(exit: %v)", out, err), ok
		default:
		}
	}
	return b.out.String(), false
}

func (b *benchProc) wait(d time.Duration) error {
	select {
	case err := <-b.done:
		b.done <- err
		return err
	case <-time.After(d):
		return fmt.Errorf("bench %v: still running after %v", b.cmd.Args, d)
	}
}

// BenchmarkBenchDaemon is bench through the daemon against bench with its
// engine in-process, on the same veth pair in the same run: a write_bw client
// on A against the bench servers of a daemon on B, in rounds that alternate an
// in-process client with an attached one (bench --daemon, A's daemon started
// for its round). It reports each's bandwidth (64 KiB) and message rate (64 B)
// and the ratios, the median of the rounds' (the shared-device issue asks for
// >= 0.9).
//
//	go test -run '^$' -bench BenchDaemon -benchtime 1x ./cmd/xrnic/
func BenchmarkBenchDaemon(b *testing.B) {
	p := testenv.NewTestPair(b, testenv.PairOptions{})
	const nBW, nRate = "4000", "100000"
	startDaemonOn(b, p, &p.B, "--bench-port", "19001", "--bench-opts", "-s 65536 -n "+nBW,
		"--bench-server", "write_bw:19002:-s 64 -n "+nRate)
	run := func(attach string, port, size, n string) (bw, rate float64) {
		args := []string{"-d", p.A.Name, "-p", port, "-s", size, "-n", n}
		if attach != "" {
			args = append(args, "--daemon", attach)
		}
		out := benchIn(b, &p.A, "write_bw", append(args, p.B.IPv4.String())...)
		return resultField(b, out, 3), resultField(b, out, 4)
	}
	const rounds = 4
	var bwIn, bwAt, rateIn, rateAt []float64
	for range rounds {
		x, _ := run("", "19001", "65536", nBW)
		_, y := run("", "19002", "64", nRate)
		bwIn, rateIn = append(bwIn, x), append(rateIn, y)
		d := startDaemon(b, p, "--bench-port", "0")
		x, _ = run(d.attach, "19001", "65536", nBW)
		_, y = run(d.attach, "19002", "64", nRate)
		bwAt, rateAt = append(bwAt, x), append(rateAt, y)
		if err := d.stop(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(median(bwIn), "MB/s_inprocess")
	b.ReportMetric(median(bwAt), "MB/s_daemon")
	b.ReportMetric(medianRatio(bwAt, bwIn), "x_bw")
	b.ReportMetric(median(rateIn), "Mpps_inprocess")
	b.ReportMetric(median(rateAt), "Mpps_daemon")
	b.ReportMetric(medianRatio(rateAt, rateIn), "x_rate")
}

// benchIn runs `bench TEST ARGS` in this process, in the end's namespace,
// and returns its output.
func benchIn(b testing.TB, end *testenv.Endpoint, test string, args ...string) string {
	b.Helper()
	pp, err := perftest.Parse(test, args)
	if err != nil {
		b.Fatal(err)
	}
	var out testutil.SyncBuffer
	res := make(chan error, 1)
	if err := end.NS.Go(func() { res <- perftest.Run(context.Background(), pp, &out, &out) }); err != nil {
		b.Fatal(err)
	}
	if err := <-res; err != nil {
		b.Fatalf("%v\n%s", err, out.String())
	}
	return out.String()
}

// resultField is field i of perftest's result row in out, as a number.
func resultField(b testing.TB, out string, i int) float64 {
	b.Helper()
	f := resultRow(out)
	if len(f) <= i {
		b.Fatalf("no result row:\n%s", out)
	}
	v, _ := strconv.ParseFloat(f[i], 64)
	return v
}

// median is the median of x (the mean of the middle two for an even count).
func median(x []float64) float64 {
	y := slices.Clone(x)
	slices.Sort(y)
	if n := len(y); n%2 == 0 {
		return (y[n/2-1] + y[n/2]) / 2
	}
	return y[len(y)/2]
}

// medianRatio is the median of the rounds' ratios num[i]/den[i].
func medianRatio(num, den []float64) float64 {
	r := make([]float64, len(num))
	for i := range num {
		r[i] = num[i] / den[i]
	}
	return median(r)
}

// TestDaemonQueues: daemons with an engine per queue (--queues 2, native XDP)
// on both ends of a two-queue veth pair. A bench process attached to A's
// daemon runs write_bw over 4 QPs against B's bench server; the attached
// process's rings are pumped by both of A's engines, and each queue of each
// daemon carries frames.
func TestDaemonQueues(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{NumTxQueues: 2, NumRxQueues: 2})
	mq := []string{"--queues", "2", "--xdp-mode", "native"}
	a := startDaemon(t, p, append(mq, "--bench-port", "0")...)
	b := startDaemonOn(t, p, &p.B, append(mq, "--bench-port", "19101", "--bench-opts", "-s 65536 -n 300 -q 4")...)
	proc := benchChildIn(t, &p.A, "write_bw", "--daemon", a.attach, "-p", "19101", "-s", "65536", "-n", "300", "-q", "4",
		p.B.IPv4.String())
	if err := proc.wait(90 * time.Second); err != nil {
		t.Fatalf("write_bw: %v\n%s", err, proc.out.String())
	}
	if row := " 65536      1200 "; !strings.Contains(proc.out.String(), row) {
		t.Errorf("write_bw through the daemon lacks %q:\n%s", row, proc.out.String())
	}
	for _, d := range []*testDaemon{a, b} {
		stat := d.cmd(t, "statistic", "-d")
		var q0, q1 uint64
		for l := range strings.Lines(stat) {
			if _, err := fmt.Sscanf(strings.TrimSpace(l), "queues rx_frames 0 %d 1 %d", &q0, &q1); err == nil {
				break
			}
		}
		if q0 == 0 || q1 == 0 {
			t.Errorf("a queue that carried nothing (%d, %d):\n%s", q0, q1, stat)
		}
	}
}
