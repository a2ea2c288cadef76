package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/pingpong"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// pingpongRE is ibv_rc_pingpong's output of a run that ends well; gid is the
// pattern of the GIDs.
func pingpongRE(gid string) *regexp.Regexp {
	return regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ` + gid + `\n` +
		`  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ` + gid + `\n` +
		`(\d+) bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec\n` +
		`(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter\n$`)
}

func TestRCPingpongUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rc_pingpong"}, "no device"},
		{[]string{"rc_pingpong", "-d", "lo"}, "no GID index"},
		{[]string{"rc_pingpong", "-d", "lo", "--nope"}, "unknown flag: --nope"},
		{[]string{"rc_pingpong", "-d", "lo", "-g", "1", "-m", "9000"}, "invalid MTU 9000"},
		{[]string{"rc_pingpong", "--local", "-o"}, "isn't ODP capable"},
		{[]string{"rc_pingpong", "--local", "127.0.0.1"}, "--local runs both sides"},
	} {
		if _, err := runBench(c.args...); !errors.Is(err, pingpong.ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q) = %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	out, err := runBench("rc_pingpong", "-h")
	if err != nil || !strings.Contains(out, "bench rc_pingpong -d <iface> -g 1 <host>") || !strings.Contains(out, "--gid-idx") {
		t.Errorf("rc_pingpong -h: %v\n%s", err, out)
	}
	if _, err := runBench("rc_pingpong", "-d", "nosuchdev0", "-g", "1"); err == nil || !strings.Contains(err.Error(), "device nosuchdev0") {
		t.Errorf("missing device: %v", err)
	}
}

// TestRCPingpongLocal: the sizes the interop suite runs, with -c, in one process.
func TestRCPingpongLocal(t *testing.T) {
	re := pingpongRE(`::ffff:127\.0\.\d+\.\d+`)
	for _, c := range []struct{ size, iters int }{{1, 100}, {4096, 100}, {1048576, 5}} {
		out, err := runBench("rc_pingpong", "--local", "-c", "-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters))
		if err != nil {
			t.Fatalf("-s %d: %v\n%s", c.size, err, out)
		}
		m := re.FindStringSubmatch(out)
		if m == nil || m[1] != strconv.Itoa(2*c.size*c.iters) || m[2] != strconv.Itoa(c.iters) {
			t.Errorf("-s %d output:\n%s", c.size, out)
		}
	}
}

func TestRCPingpongNetErrors(t *testing.T) {
	port := strconv.Itoa(closedPort(t))
	_, err := retryBusy("rc_pingpong", "-d", "lo", "--link", "udp", "-g", "0", "127.0.0.1", "-p", port)
	if err == nil || !strings.Contains(err.Error(), "couldn't connect to 127.0.0.1:"+port) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("client of a closed port: %v", err)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_, err = retryBusy("rc_pingpong", "-d", "lo", "--link", "udp", "-g", "0", "-p", port)
	if err == nil || !strings.Contains(err.Error(), "couldn't listen to port "+port) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("server on a port in use: %v", err)
	}
}

// fakeServer speaks ibv_rc_pingpong's server side of the exchange once, with a
// QP nobody has, then leaves. It returns the port.
func fakeServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var m [52]byte
		if _, err := io.ReadFull(c, m[:]); err != nil {
			return
		}
		c.Write([]byte("0000:000123:000001:00000000000000000000ffff7f000d63\x00")) // ::ffff:127.0.13.99
		io.ReadFull(c, m[:5])
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestRCPingpongMainErrors runs the real main: one line on stderr, exit 1.
func TestRCPingpongMainErrors(t *testing.T) {
	closed := strconv.Itoa(closedPort(t))
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-d", "lo", "--nope"}, "bench: rc_pingpong: unknown flag: --nope"},
		{nil, "bench: rc_pingpong: no device"},
		{[]string{"-d", "nosuchdev0", "-g", "1"}, "bench: device nosuchdev0"},
		{[]string{"--local", "-t"}, "bench: rc_pingpong: the device isn't completion timestamp capable"},
		{[]string{"-d", "lo", "--link", "udp", "-g", "0", "127.0.0.1", "-p", closed}, "bench: "},
		{[]string{"-d", "lo", "--link", "udp", "-g", "0", "-p", busy}, "bench: "},
		{[]string{"-d", "lo", "--link", "udp", "-g", "0", "-n", "5", "127.0.0.1", "-p", fakeServer(t)}, "bench: "},
	} {
		cmd := exec.Command(os.Args[0], append([]string{"rc_pingpong"}, c.args...)...)
		cmd.Env = append(os.Environ(), "BENCH_TEST_MAIN=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("bench rc_pingpong %q: %v, want exit status 1", c.args, err)
		}
		e := stderr.String()
		if !strings.HasPrefix(e, c.want) || strings.Count(e, "\n") != 1 || strings.Contains(e, "goroutine ") {
			t.Errorf("bench rc_pingpong %q: stderr %q, want one line starting %q", c.args, e, c.want)
		}
		t.Logf("bench rc_pingpong %q: %s", c.args, strings.TrimSpace(e))
	}
}

// TestRCPingpongVeth: the server in one namespace, the client in the other,
// over AF_XDP on a veth pair, with GID index 1 (the IPv4 GID, as rxe's), the
// interop suite's sizes and -c on both sides.
func TestRCPingpongVeth(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 1500})
	re := pingpongRE(`::ffff:192\.0\.2\.[12]`)
	for _, c := range []struct {
		size, iters string
		extra       []string
	}{{"1", "200", nil}, {"4096", "200", []string{"-e"}}, {"1048576", "10", nil}} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		args := append([]string{"rc_pingpong", "-d", "", "--link", "af_xdp", "-g", "1", "-c", "-s", c.size, "-n", c.iters}, c.extra...)
		sout, cout, serr, cerr := runPairOnVeth(t, ctx, p, args, "local address:")
		if cerr != nil {
			t.Errorf("-s %s client: %v\n%s", c.size, cerr, cout)
		}
		if serr != nil {
			t.Errorf("-s %s server: %v\n%s", c.size, serr, sout)
		}
		cancel()
		for side, out := range map[string]string{"client": cout, "server": sout} {
			if !re.MatchString(out) {
				t.Errorf("-s %s %s output:\n%s", c.size, side, out)
			}
		}
		if !strings.Contains(sout, "local address:  LID 0x0000, QPN") ||
			!strings.Contains(sout, "GID ::ffff:"+p.A.IPv4.String()+"\n") ||
			!strings.Contains(sout, "GID ::ffff:"+p.B.IPv4.String()+"\n") {
			t.Errorf("server GIDs:\n%s", sout)
		}
		t.Logf("-s %s client:\n%s", c.size, cout)
	}
}
