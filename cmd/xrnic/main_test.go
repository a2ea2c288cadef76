package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/cmd/internal/perftest"
	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestMain checks for goroutine leaks; with XRNIC_TEST_MAIN=1 the test binary is
// xrnic itself, so that tests can run the real main (signals, exit status,
// stderr).
func TestMain(m *testing.M) {
	if os.Getenv("XRNIC_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	if v := os.Getenv("XRNIC_TEST_BENCH"); v != "" {
		os.Exit(benchMain(strings.Split(v, "\x1f")))
	}
	goleak.VerifyTestMain(m)
}

func TestParse(t *testing.T) {
	c, err := parse([]string{"-i", "veth0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.iface != "veth0" || c.kind != link.KindAuto || c.mode != bpf.AttachGeneric || c.metrics != defaultMetrics ||
		c.benchPort != 18515 || c.bench.Test.Name != "write_bw" || c.control != "/run/xrnic/veth0.sock" || c.interval != 0 ||
		c.attachMax != 64 || c.attachUsr != 64 {
		t.Errorf("defaults: %+v", c)
	}
	c, err = parse([]string{"--interface=veth1", "--link", "udp", "--xdp-mode", "native", "--metrics", "",
		"--bench-port", "0", "--control", "", "--interval", "1s", "--attach-max", "256", "--attach-max-user", "8"})
	if err != nil {
		t.Fatal(err)
	}
	if c.kind != link.KindUDP || c.mode != bpf.AttachNative || c.metrics != "" || c.benchPort != 0 || c.bench != nil ||
		c.control != "" || c.interval != time.Second || c.attachMax != 256 || c.attachUsr != 8 {
		t.Errorf("every flag: %+v", c)
	}
	if a := c.attachConfig(nil); a.MaxSessions != 256 || a.MaxUserSessions != 8 {
		t.Errorf("every flag: %+v", c)
	}
	c, err = parse([]string{"-i", "veth0", "--bench-test", "send_bw", "--bench-opts", "-s 1M -q 2", "--control", "/tmp/x.sock"})
	if err != nil {
		t.Fatal(err)
	}
	if c.bench.Test.Name != "send_bw" || c.bench.Size != 1<<20 || c.bench.QPs != 2 || !c.bench.Server() || c.control != "/tmp/x.sock" {
		t.Errorf("bench options: %+v", c.bench)
	}
	c, err = parse([]string{"-i", "veth0", "--bench-server", "read_bw:18516:-s 1M", "--bench-server", "atomic_lat:18517"})
	if err != nil {
		t.Fatal(err)
	}
	if c.benchPort != 18515 || c.bench.Test.Name != "write_bw" || len(c.servers) != 2 ||
		c.servers[0].port != 18516 || c.servers[0].params.Test.Name != "read_bw" || c.servers[0].params.Size != 1<<20 ||
		c.servers[1].port != 18517 || c.servers[1].params.Test.Name != "atomic_lat" || !c.servers[1].params.Server() {
		t.Errorf("--bench-server: %+v", c.servers)
	}
	if _, err := parse([]string{"-h"}); !errors.Is(err, errHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing -i"},
		{[]string{"-i", "veth0", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"-i"}, "flag needs an argument"},
		{[]string{"-i", "veth0", "--link", "carrier-pigeon"}, "unknown --link"},
		{[]string{"-i", "veth0", "--link", "memory"}, "unknown --link"},
		{[]string{"-i", "veth0", "--xdp-mode", "turbo"}, "unknown --xdp-mode"},
		{[]string{"-i", "veth0", "extra"}, "unexpected argument"},
		{[]string{"-i", "veth0", "--interval", "-1s"}, "negative"},
		{[]string{"-i", "veth0", "--metrics", "9479"}, "want HOST:PORT"},
		{[]string{"-i", "veth0", "--metrics", ":99999"}, "bad port"},
		{[]string{"-i", "veth0", "--bench-port", "70000"}, "outside 0..65535"},
		{[]string{"-i", "veth0", "--attach-max", "0"}, "--attach-max 0 outside 1..4096"},
		{[]string{"-i", "veth0", "--attach-max", "4097"}, "--attach-max 4097 outside 1..4096"},
		{[]string{"-i", "veth0", "--attach-max-user", "65"}, "--attach-max-user 65 outside 1..64 (--attach-max)"},
		{[]string{"-i", "veth0", "--attach-max", "8", "--attach-max-user", "-1"}, "--attach-max-user -1 outside 1..8"},
		{[]string{"-i", "veth0", "--bench-test", "ping"}, "unknown --bench-test"},
		{[]string{"-i", "veth0", "--bench-opts", "-s 0"}, "--bench-opts: write_bw: message size"},
		{[]string{"-i", "veth0", "--bench-opts", "192.0.2.1"}, "no server address"},
		{[]string{"-i", "veth0", "--bench-opts", "--local"}, "--local"},
		{[]string{"-i", "veth0", "--bench-opts", "-p 1"}, "--bench-port"},
		{[]string{"-i", "veth0", "--bench-server", "read_bw"}, "want TEST:PORT[:OPTIONS]"},
		{[]string{"-i", "veth0", "--bench-server", "read_bw:0"}, "outside 1..65535"},
		{[]string{"-i", "veth0", "--bench-server", "read_bw:x"}, "outside 1..65535"},
		{[]string{"-i", "veth0", "--bench-server", "ping:18516"}, `--bench-server "ping:18516": unknown`},
		{[]string{"-i", "veth0", "--bench-server", "atomic_bw:18516:-s 64"}, "message size cannot be changed"},
		{[]string{"-i", "veth0", "--bench-server", "read_bw:18515"}, "port 18515 is taken by --bench-port"},
		{[]string{"-i", "veth0", "--bench-server", "read_bw:9", "--bench-server", "send_bw:9"}, `port 9 is taken by --bench-server "read_bw:9"`},
	} {
		_, err := parse(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestParseClient(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want clientConfig
	}{
		{[]string{"statistic"}, clientConfig{cmd: "statistic"}},
		{[]string{"stat", "show", "-d", "-i", "veth0"}, clientConfig{cmd: "statistic", details: true, socket: "/run/xrnic/veth0.sock"}},
		{[]string{"resource"}, clientConfig{cmd: "resource"}},
		{[]string{"res", "show"}, clientConfig{cmd: "resource"}},
		{[]string{"resource", "show", "qp", "-s", "/tmp/s"}, clientConfig{cmd: "resource", object: "qp", socket: "/tmp/s"}},
		{[]string{"resource", "-s", "/tmp/s", "show", "cq"}, clientConfig{cmd: "resource", object: "cq", socket: "/tmp/s"}},
		{[]string{"r", "mr"}, clientConfig{cmd: "resource", object: "mr"}},
	} {
		got, err := parseClient(tc.args)
		if err != nil || got != tc.want {
			t.Errorf("parseClient(%q) = %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"resource", "show", "pd"}, "unknown object"},
		{[]string{"resource", "qp", "17"}, "unexpected argument"},
		{[]string{"statistic", "-x"}, "unknown shorthand flag: 'x'"},
		{[]string{"resource", "-d"}, "unknown shorthand flag: 'd'"},
		{[]string{"statistic", "-i", "a", "-s", "b"}, "not both"},
	} {
		_, err := parseClient(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseClient(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"statistic", "-h"}, {"help"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); err != nil || !strings.Contains(out.String(), "xrnic statistic") {
			t.Errorf("run(%q) = %v:\n%s", args, err, out.String())
		}
	}
}

// fixture is a snapshot with one of everything.
func fixture() snapshot {
	s := snapshot{Device: "xrnic0", Port: 1, Interface: "veth0", Link: "af_xdp", XDPMode: "generic", PortState: "ACTIVE",
		Width: "1X", Speed: "10.0 Gbps",
		PID: 4242, Comm: "xrnic", LinkStats: link.Stats{RxDropped: 1, TxErrors: 2},
		XDP: &bpf.Counters{Seen: 2100, Redirected: 2030, Passed: 70}}
	for i := range verbs.NumCounters {
		s.Counters = append(s.Counters, namedValue{verbs.Counter(i).String(), uint64(i) * 10})
	}
	for i := range verbs.NumEngineCounters {
		s.Engine = append(s.Engine, namedValue{verbs.EngineCounter(i).String(), uint64(i)*1000 + 7})
	}
	s.Resources = verbs.Resources{
		QPs: []verbs.QPInfo{
			{QPN: 17, Type: verbs.RC, State: verbs.QPSRTS, DestQPN: 18, SQPSN: 0x9b45f6, RQPSN: 0x40f91b, PathMTU: 4096,
				PD: 1, SendCQ: 1, RecvCQ: 2, SQOutstanding: 3, SQCap: 128, RQPosted: 1, RQCap: 1},
			{QPN: 19, Type: verbs.RC, State: verbs.QPSInit, PD: 2, SendCQ: 3, RecvCQ: 3, SQCap: 16, RQCap: 16},
			{QPN: 20, Type: verbs.UD, State: verbs.QPSRTS, SQPSN: 5, PD: 2, SendCQ: 3, RecvCQ: 3, SRQ: true, SQCap: 16},
		},
		CQs: []verbs.CQInfo{
			{CQN: 1, CQE: 255, Queued: 2, Users: 1, Stats: cqStats(2000, 1998, 0, 0)},
			{CQN: 2, CQE: 1, Users: 1},
			{CQN: 3, CQE: 63, Users: 2, Stats: cqStats(70, 6, 4, 1)},
		},
		MRs: []verbs.MRInfo{
			{LKey: 0x1a7, RKey: 0x1a7, Addr: 0x7f3a00000000, Len: 65536, Access: mr.LocalWrite | mr.RemoteWrite, PD: 1, Valid: true},
			{LKey: 0x2c0, RKey: 0x2c0, Addr: 0, Len: 4096, Access: mr.LocalWrite | mr.RemoteRead | mr.ZeroBased, PD: 2, Valid: true},
			{LKey: 0x355, RKey: 0x355, PD: 2, FastReg: true},
		},
		PDs: 2, SRQs: 1,
	}
	s.CMIDs = []rdmacm.IDInfo{
		{N: 0, State: "LISTEN", PS: rdmacm.PSTCP, Src: netip.MustParseAddrPort("0.0.0.0:7174")},
		{N: 3, HasQP: true, QPN: 17, QPType: verbs.RC, State: "CONNECT", PS: rdmacm.PSTCP,
			Src: netip.MustParseAddrPort("192.0.2.1:7174"), Dst: netip.MustParseAddrPort("192.0.2.2:38412")},
	}
	s.Sessions = []sessionInfo{{ID: 7, Peer: "192.0.2.2:41234", Test: "write_bw", QPNs: []uint32{17}}}
	s.Attached = []server.SessionInfo{{PID: 5151, UID: 1000, GID: 1000, Comm: "ib_send_bw", Objects: 7, QPNs: []uint32{19, 20}}}
	s.Ended = [2]uint64{3, 1}
	return s
}

func cqStats(comp, polled, lost, overruns uint64) cq.Stats {
	return cq.Stats{Completions: comp, Polled: polled, Lost: lost, Overruns: overruns}
}

// fakeDaemon answers the control socket with s, as the daemon would.
func fakeDaemon(t *testing.T, s snapshot) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "x.sock")
	ln, err := listenControl(sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64)
			n, _ := c.Read(buf)
			if string(buf[:n]) == "snapshot\n" {
				_ = json.NewEncoder(c).Encode(&s)
			}
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return sock
}

// TestTables runs the introspection commands against a daemon that answers with
// a fixed snapshot and compares their output with testdata/*.golden.
func TestTables(t *testing.T) {
	sock := fakeDaemon(t, fixture())
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"statistic", []string{"statistic"}},
		{"statistic_details", []string{"statistic", "-d"}},
		{"resource", []string{"resource"}},
		{"resource_qp", []string{"resource", "show", "qp"}},
		{"resource_cq", []string{"resource", "show", "cq"}},
		{"resource_mr", []string{"resource", "show", "mr"}},
		{"resource_cm_id", []string{"resource", "show", "cm_id"}},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), append(tc.args, "-s", sock), &out, &errOut); err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		path := filepath.Join("testdata", tc.golden+".golden")
		if *update {
			if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.String(); got != string(want) {
			t.Errorf("xrnic %s:\ngot:\n%s\nwant:\n%s", strings.Join(tc.args, " "), got, want)
		}
	}
}

func TestClientErrors(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := run(context.Background(), []string{"statistic", "-s", filepath.Join(dir, "none.sock")}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "no daemon answers") {
		t.Errorf("no daemon: %v", err)
	}
	sock := fakeDaemon(t, snapshot{Error: "device is closed"})
	err = run(context.Background(), []string{"resource", "-s", sock}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "device is closed") {
		t.Errorf("daemon error: %v", err)
	}
}

// TestControlSocketInUse: a live socket is refused, a leftover one replaced.
func TestControlSocketInUse(t *testing.T) {
	live := fakeDaemon(t, snapshot{})
	if _, err := listenControl(live); err == nil || !strings.Contains(err.Error(), "another xrnic daemon") {
		t.Errorf("live socket: %v", err)
	}
	stale := filepath.Join(t.TempDir(), "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	ln, err = listenControl(stale)
	if err != nil {
		t.Fatalf("leftover socket: %v", err)
	}
	ln.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket file outlives its listener: %v", err)
	}
}

func TestMissingInterface(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-i", "nosuch0", "--link", "udp"}, &out, &errOut)
	if err == nil || err.Error() != "interface nosuch0: no such interface in this network namespace" {
		t.Fatalf("run on a missing interface = %v", err)
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr: %q", errOut.String())
	}
}

// TestPortsInUse: a port or socket in use fails before the link opens, so the
// interface (lo, no root needed) never sees an XDP program or a UDP socket.
func TestPortsInUse(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	any, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer any.Close()
	anyPort := strconv.Itoa(any.Addr().(*net.TCPAddr).Port)
	live := fakeDaemon(t, snapshot{})
	free := filepath.Join(t.TempDir(), "free.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bench-port", anyPort, "--metrics", "", "--control", ""},
			"bench server: couldn't listen on 127.0.0.1 port " + anyPort + ": address already in use"}, // lo's own address
		{[]string{"--bench-port", "0", "--metrics", tcp.Addr().String(), "--control", ""},
			"metrics: couldn't listen on " + tcp.Addr().String() + ": address already in use"},
		{[]string{"--bench-port", "0", "--metrics", "", "--control", live}, "another xrnic daemon is listening"},
		{[]string{"--bench-port", "0", "--metrics", "192.0.2.77:9479", "--control", free},
			"metrics: couldn't listen on 192.0.2.77:9479: cannot assign requested address"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"-i", "lo", "--link", "udp"}, tc.args...), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
		if errOut.Len() != 0 {
			t.Errorf("run(%q): stderr %q", tc.args, errOut.String())
		}
	}
	if _, err := os.Stat(free); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed start left its control socket: %v", err)
	}
}

// TestMainErrors runs the real main: each failure is one line on stderr that
// starts with "xrnic: ", no stack trace, and exit status 1.
func TestMainErrors(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, args := range [][]string{
		{"-i", "lo", "--nope"},
		{},
		{"-i", "nosuch0"},
		{"-i", "lo", "--link", "udp", "--metrics", "", "--control", "", "--bench-port", port},
		{"-i", "lo", "--link", "udp", "--metrics", ln.Addr().String(), "--control", "", "--bench-port", "0"},
		{"resource", "show", "qp", "-s", filepath.Join(t.TempDir(), "none.sock")},
		{"statistic", "--nope"},
	} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "XRNIC_TEST_MAIN=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("xrnic %q: %v, want exit status 1", args, err)
		}
		e := stderr.String()
		if !strings.HasPrefix(e, "xrnic: ") || strings.Count(e, "\n") != 1 || strings.Contains(e, "goroutine ") {
			t.Errorf("xrnic %q: stderr %q, want one line", args, e)
		}
		if stdout.Len() != 0 {
			t.Errorf("xrnic %q: stdout %q", args, stdout.String())
		}
	}
}

// benchMain is bench's main for benchChild: perftest's test and arguments.
func benchMain(args []string) int {
	p, err := perftest.Parse(args[0], args[1:])
	if err == nil {
		err = perftest.Run(context.Background(), p, os.Stdout, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stdout, "bench:", err)
		return 1
	}
	return 0
}
