package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/perftest"
	"github.com/xrnic/xrnic/cmd/internal/pingpong"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

func runBench(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, args, &out, io.Discard)
	return out.String(), err
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"nope_bw"}, {"-x"}, {"link", "--nope"}, {"link", "--xdp-mode", "turbo"},
		{"link", "--sizes", "-1"}, {"link", "--duration", "0s"}} {
		if _, err := runBench(args...); !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
	if _, err := runBench("link", "--sizes", "9000"); err == nil || !strings.Contains(err.Error(), "9000") {
		t.Errorf("oversized payload: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"write_bw"}, "no device"},
		{[]string{"write_bw", "-d", "lo", "--nope"}, "unknown flag: --nope"},
		{[]string{"read_lat", "-d", "lo", "-b"}, "unknown shorthand flag: 'b'"},
		{[]string{"atomic_bw", "--local", "-s", "64"}, "cannot be changed"},
	} {
		if _, err := runBench(c.args...); !errors.Is(err, perftest.ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q) = %v, want a usage error with %q", c.args, err, c.want)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	// A newcomer's first command: the list of tests, and exit 0.
	for _, args := range [][]string{nil, {"-h"}, {"--help"}, {"help"}} {
		out, err := runBench(args...)
		if err != nil || !strings.Contains(out, "write_bw, read_bw, send_bw, atomic_bw") {
			t.Errorf("bench %q: %v\n%s", args, err, out)
		}
		for _, k := range pingpong.Kinds {
			if !strings.Contains(out, "  "+string(k)+" [options] [server]") {
				t.Errorf("bench %q does not list %s:\n%s", args, k, out)
			}
		}
	}
	for _, k := range pingpong.Kinds {
		if out, err := runBench(string(k), "-h"); err != nil || !strings.Contains(out, "bench "+string(k)+" -d <iface> -g 1 <host>") {
			t.Errorf("%s -h: %v\n%s", k, err, out)
		}
	}
	out, err := runBench("send_lat", "-h")
	if err != nil || !strings.Contains(out, "bench send_lat -d <iface> <host>") || !strings.Contains(out, "--inline_size") {
		t.Errorf("send_lat -h: %v\n%s", err, out)
	}
	out, err = runBench("write_bw", "-V")
	if err != nil || out != "Version: "+perftest.Version+"\n" {
		t.Errorf("write_bw -V: %q, %v", out, err)
	}
}

// TestLocal is the newcomer's first command: no root, no setup.
func TestLocal(t *testing.T) {
	for _, test := range []string{"write_bw", "write_lat"} {
		out, err := runBench(test, "--local", "-n", "100")
		if err != nil {
			t.Fatalf("%s --local: %v\n%s", test, err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 20 || !strings.HasPrefix(lines[len(lines)-3], " #bytes") || !strings.HasPrefix(lines[len(lines)-2], " ") {
			t.Errorf("%s --local output:\n%s", test, out)
		}
	}
}

// retryBusy runs bench again while another test's UDP link holds port 4791 on
// 127.0.0.1 (go test runs packages in parallel, and the --local runs of
// perftest and pingpong take 127.0.0.1 first): it waits for the port as for
// any shared resource, up to a minute, since those runs last seconds under
// -race on a loaded machine (5 s was not enough in CI).
func retryBusy(args ...string) (string, error) {
	for range 600 {
		out, err := runBench(args...)
		if err == nil || !strings.Contains(err.Error(), "device lo") || !strings.Contains(err.Error(), "address already in use") {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return runBench(args...)
}

func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func TestUnreachableServer(t *testing.T) {
	port := strconv.Itoa(closedPort(t))
	_, err := retryBusy("write_bw", "-d", "lo", "--link", "udp", "127.0.0.1", "-p", port)
	if err == nil || !strings.Contains(err.Error(), "couldn't connect to 127.0.0.1:"+port) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("client of a closed port: %v", err)
	}
}

func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_, err = retryBusy("send_bw", "-d", "lo", "--link", "udp", "-p", port)
	if err == nil || !strings.Contains(err.Error(), "couldn't listen to port "+port) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("server on a port in use: %v", err)
	}
	_, err = runBench("send_bw", "--local", "-p", port)
	if err == nil || !strings.Contains(err.Error(), "couldn't listen") {
		t.Errorf("--local on a port in use: %v", err)
	}
}

func TestMissingDevice(t *testing.T) {
	_, err := runBench("write_bw", "-d", "nosuchdev0")
	if err == nil || !strings.Contains(err.Error(), "device nosuchdev0") {
		t.Errorf("missing device: %v", err)
	}
}

// TestMainErrors runs the real main: each failure is one line on stderr that
// starts with "bench: ", no stack trace, and a non-zero exit.
func TestMainErrors(t *testing.T) {
	port := strconv.Itoa(closedPort(t))
	for _, args := range [][]string{
		{"write_bw", "-d", "lo", "--nope"},
		{"write_bw"},
		{"write_bw", "-d", "nosuchdev0"},
		{"read_bw", "--local", "127.0.0.1"},
		{"send_lat", "-d", "lo", "--link", "udp", "127.0.0.1", "-p", port},
	} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "BENCH_TEST_MAIN=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("bench %q: %v, want exit status 1", args, err)
		}
		e := stderr.String()
		if !strings.HasPrefix(e, "bench: ") || strings.Count(e, "\n") != 1 || strings.Contains(e, "goroutine ") {
			t.Errorf("bench %q: stderr %q, want one line", args, e)
		}
	}
}

// TestBusyPollOneCore: bench --busy-poll runs with GOMAXPROCS 1, and says so
// on stderr, unless the GOMAXPROCS variable is set or both sides run in the
// process (--local).
func TestBusyPollOneCore(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"write_lat", "--busy-poll", "-d", "nosuchdev0", "127.0.0.1"}, "GOMAXPROCS 1 "},
		{"GOMAXPROCS=2", []string{"write_lat", "--busy-poll", "-d", "nosuchdev0", "127.0.0.1"}, ""},
		{"", []string{"write_lat", "-d", "nosuchdev0", "127.0.0.1"}, ""},
	} {
		cmd := exec.Command(os.Args[0], c.args...)
		cmd.Env = append(os.Environ(), "BENCH_TEST_MAIN=1", c.env)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		_ = cmd.Run() // fails: no such device
		line := ""
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, "GOMAXPROCS") {
				line = l
			}
		}
		if c.want == "" && line != "" || c.want != "" && !strings.Contains(line, c.want) {
			t.Errorf("%s bench %q: stderr %q, want a line with %q", c.env, c.args, stderr.String(), c.want)
		}
	}
}

// TestLinkRun runs the real thing briefly: namespaces, veth, XDP, both receivers.
func TestLinkRun(t *testing.T) {
	testutil.RequireRoot(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"link", "--sizes", "64,4096", "--duration", "200ms"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[1], "payload") {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) != 5 || (f[1] != "af_xdp" && f[1] != "udp") || f[2] == "0" {
			t.Errorf("result line %q", l)
		}
	}
}

// runPairOnVeth runs bench with args (args[2] is -d's value, filled in) as a
// server in A's namespace and, once the server printed ready, as a client of it
// in B's; it returns both outputs and results.
func runPairOnVeth(t *testing.T, ctx context.Context, p *testenv.Pair, args []string, ready string) (sout, cout string, serr, cerr error) {
	t.Helper()
	return runPairOnVethArgs(t, ctx, p, args, args, ready)
}

// runPairOnVethArgs is runPairOnVeth with each side's own arguments.
func runPairOnVethArgs(t *testing.T, ctx context.Context, p *testenv.Pair, sa, ca []string, ready string) (sout, cout string, serr, cerr error) {
	t.Helper()
	readyCh := make(chan struct{})
	var so, co bytes.Buffer
	sres, cres := make(chan error, 1), make(chan error, 1)
	sargs := append([]string(nil), sa...)
	sargs[2] = p.A.Name
	if err := p.A.NS.Go(func() {
		sres <- run(ctx, sargs, &signalWriter{w: &so, needle: ready, ch: readyCh}, io.Discard)
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-readyCh:
	case err := <-sres:
		t.Fatalf("server: %v\n%s", err, so.String())
	}
	cargs := append([]string(nil), ca...)
	cargs[2] = p.B.Name
	cargs = append(cargs, p.A.IPv4.String())
	if err := p.B.NS.Go(func() { cres <- run(ctx, cargs, &co, io.Discard) }); err != nil {
		t.Fatal(err)
	}
	cerr = <-cres
	serr = <-sres
	return so.String(), co.String(), serr, cerr
}

// TestWriteBWVeth: the server in one namespace, the client in the other, over
// AF_XDP on a veth pair, as two hosts would run it.
func TestWriteBWVeth(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 1500})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"write_bw", "-d", "", "--link", "af_xdp", "-s", "65536", "-n", "200", "-p", "18515"}
	sout, cout, serr, cerr := runPairOnVeth(t, ctx, p, args, "Waiting for client")
	if cerr != nil {
		t.Fatalf("client: %v\n%s", cerr, cout)
	}
	if serr != nil {
		t.Fatalf("server: %v\n%s", serr, sout)
	}
	for side, out := range map[string]string{"client": cout, "server": sout} {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		f := strings.Fields(lines[len(lines)-2])
		if len(f) != 5 || f[0] != "65536" || f[1] != "200" {
			t.Errorf("%s result line %q:\n%s", side, lines[len(lines)-2], out)
			continue
		}
		if bw, _ := strconv.ParseFloat(f[3], 64); bw <= 0 {
			t.Errorf("%s: average bandwidth %v", side, f[3])
		}
		if !strings.Contains(out, "GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:0") {
			t.Errorf("%s: no IPv4 GID line:\n%s", side, out)
		}
	}
	t.Logf("client:\n%s", cout)
}

// signalWriter closes ch once what was written contains needle.
type signalWriter struct {
	w      *bytes.Buffer
	needle string
	ch     chan struct{}
	done   bool
}

func (s *signalWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if !s.done && strings.Contains(s.w.String(), s.needle) {
		s.done = true
		close(s.ch)
	}
	return n, err
}
