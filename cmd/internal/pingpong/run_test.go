package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/oob"
	"github.com/xrnic/xrnic/verbs"
)

// outRE is rc_pingpong's output of a run that ends well.
var outRE = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID (::ffff:127\.0\.\d+\.\d+)\n` +
	`  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID (::ffff:127\.0\.\d+\.\d+)\n` +
	`(\d+) bytes in (\d+\.\d\d) seconds = \d+\.\d\d Mbit/sec\n` +
	`(\d+) iters in (\d+\.\d\d) seconds = \d+\.\d\d usec/iter\n$`)

func checkOutput(t *testing.T, who, out string, size, iters int) {
	t.Helper()
	m := outRE.FindStringSubmatch(out)
	if m == nil {
		t.Errorf("%s output:\n%s", who, out)
		return
	}
	if m[1] == m[2] {
		t.Errorf("%s: local and remote GID are both %s", who, m[1])
	}
	if m[3] != strconv.Itoa(2*size*iters) || m[5] != strconv.Itoa(iters) || m[4] != m[6] {
		t.Errorf("%s: result lines:\n%s", who, out)
	}
}

func runLocalArgs(t *testing.T, args ...string) (cout, sout string, err error) {
	t.Helper()
	p, err := Parse(RC, append([]string{"--local"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	var c, s bytes.Buffer
	p.LocalServerOut = &s
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = Run(ctx, p, &c, io.Discard)
	return c.String(), s.String(), err
}

// TestLocalSizes: the interop suite's sizes, with the data checked on both sides.
func TestLocalSizes(t *testing.T) {
	for _, c := range []struct {
		size, iters int
		extra       []string
	}{
		{1, 200, nil},
		{4096, 100, nil},
		{1 << 20, 5, nil},
		{4096, 50, []string{"-e"}},
		{10000, 50, []string{"-m", "4096", "-r", "2"}}, // receives refilled every iteration
		{1 << 20, 3, []string{"-e", "-m", "256"}},
	} {
		args := append([]string{"-c", "-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters)}, c.extra...)
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cout, sout, err := runLocalArgs(t, args...)
			if err != nil {
				t.Fatalf("%v\nclient:\n%s\nserver:\n%s", err, cout, sout)
			}
			checkOutput(t, "client", cout, c.size, c.iters)
			checkOutput(t, "server", sout, c.size, c.iters)
		})
	}
}

func TestLocalErrors(t *testing.T) {
	_, _, err := runLocalArgs(t, "-g", "1")
	if err == nil || !strings.Contains(err.Error(), "can't read sgid of index 1") {
		t.Errorf("-g 1 on lo: %v", err)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_, _, err = runLocalArgs(t, "-p", port)
	if err == nil || !strings.Contains(err.Error(), "couldn't listen to port "+port) {
		t.Errorf("--local on a port in use: %v", err)
	}
	_, _, err = runLocalArgs(t, "-s", strconv.Itoa(16<<20))
	if err == nil || !strings.Contains(err.Error(), "exceeds the device's maximum") {
		t.Errorf("-s 16 MiB: %v", err)
	}
}

func TestLocalCancel(t *testing.T) {
	p, err := Parse(RC, []string{"--local", "-n", "100000000"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := Run(ctx, p, io.Discard, io.Discard); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled run: %v", err)
	}
}

// TestReport: the result lines, with rc_pingpong's float usec and its
// float/unsigned division. The expected lines are glibc's, from rc_pingpong's
// printf statements compiled with the same types.
func TestReport(t *testing.T) {
	for _, c := range []struct {
		size, iters int
		d           time.Duration
		want        string
	}{
		{4096, 1000, 1234567 * time.Microsecond,
			"8192000 bytes in 1.23 seconds = 53.08 Mbit/sec\n1000 iters in 1.23 seconds = 1234.57 usec/iter\n"},
		// 2^24+1 us is 2^24 in a float, and 2^24/3 in floats is 5592405.5, not .33.
		{1, 3, 16777217 * time.Microsecond,
			"6 bytes in 16.78 seconds = 0.00 Mbit/sec\n3 iters in 16.78 seconds = 5592405.50 usec/iter\n"},
		{1048576, 5, 1999 * time.Microsecond, // and a sub-microsecond rest is dropped
			"10485760 bytes in 0.00 seconds = 41964.02 Mbit/sec\n5 iters in 0.00 seconds = 399.80 usec/iter\n"},
		{1, 1, 999 * time.Nanosecond,
			"2 bytes in 0.00 seconds = inf Mbit/sec\n1 iters in 0.00 seconds = 0.00 usec/iter\n"},
		{1048576, 1000, 98765432 * time.Microsecond,
			"2097152000 bytes in 98.77 seconds = 169.87 Mbit/sec\n1000 iters in 98.77 seconds = 98765.43 usec/iter\n"},
		{7, 33333, 1000005 * time.Microsecond,
			"466662 bytes in 1.00 seconds = 3.73 Mbit/sec\n33333 iters in 1.00 seconds = 30.00 usec/iter\n"},
	} {
		var b bytes.Buffer
		s := &side{p: &Params{Size: c.size, Iters: c.iters, ServerName: "x"}, out: &b, pageSize: 4096}
		s.report(c.d)
		if b.String() != c.want {
			t.Errorf("report(%d, %d, %v):\n got %q\nwant %q", c.size, c.iters, c.d, b.String(), c.want)
		}
	}
}

// udpDevice opens a device on a UDP link on lo at a free 127.0.x.y address.
func udpDevice(t *testing.T) *verbs.Device {
	t.Helper()
	srv, cli, addrs, err := oob.OpenLoopbackPair(localPairs)
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	d, err := verbs.Open(verbs.Options{Link: srv, GIDs: []verbs.GID{verbs.GIDFromAddr(addrs[0])},
		Engine: verbs.EngineConfig{Logf: func(string, ...any) {}}})
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); srv.Close() })
	return d
}

// nobody is a GID no xrnic answers at.
const nobody = "00000000000000000000ffff7f000d63" // ::ffff:127.0.13.99

// TestFakeServer: a server that speaks rc_pingpong's TCP protocol, then is
// gone. The client's first SEND is never acknowledged.
func TestFakeServer(t *testing.T) {
	dev := udpDevice(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		var m [MsgSize]byte
		if _, err := io.ReadFull(c, m[:]); err != nil {
			done <- err
			return
		}
		c.Write([]byte("0000:000123:000001:" + nobody + "\x00"))
		_, err = io.ReadFull(c, m[:5])
		done <- err
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	p, err := Parse(RC, []string{"-d", "lo", "-g", "0", "-n", "10", "-c", "-p", port, "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s := &side{p: p, out: &out, dev: dev}
	defer s.close()
	if err := s.setup(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.run(context.Background(), nil, "127.0.0.1:"+port)
	if err == nil || err.Error() != "failed status transport retry counter exceeded (12) for wr_id 2" {
		t.Errorf("client of a server that left: %v", err)
	}
	// 8 tries, 4.096 us << 14 apart.
	if d := time.Since(start); d < 400*time.Millisecond || d > 10*time.Second {
		t.Errorf("retries took %v", d)
	}
	if err := <-done; err != nil {
		t.Errorf("fake server: %v", err)
	}
	if !strings.Contains(out.String(), "remote address: LID 0x0000, QPN 0x000123, PSN 0x000001, GID ::ffff:127.0.13.99\n") ||
		strings.Contains(out.String(), "bytes in") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestFakeClient: a client that speaks rc_pingpong's TCP protocol, then never
// sends; and one whose GID has no interface ID (rc_pingpong without -g).
func TestFakeClient(t *testing.T) {
	for _, tc := range []struct {
		gid, want string
	}{
		{nobody, "the other side stopped answering: no completion for 300ms after 0 of 10 sends and 0 of 10 receives (--timeout)"},
		{strings.Repeat("0", 32), "couldn't connect to remote QP: failed to modify QP to RTR: the remote GID " +
			"0000:0000:0000:0000:0000:0000:0000:0000 has no interface ID"},
	} {
		dev := udpDevice(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(RC, []string{"-d", "lo", "-g", "0", "-n", "10", "--timeout", "300ms"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		s := &side{p: p, out: &out, dev: dev}
		if err := s.setup(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.Write([]byte("0000:000123:000001:" + tc.gid + "\x00"))
			var m [MsgSize]byte
			if _, err := io.ReadFull(c, m[:]); err == nil {
				c.Write([]byte("done\x00"))
			}
		}()
		err = s.run(context.Background(), ln, "")
		wg.Wait()
		s.close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("server of a fake client (GID %s): %v, want %q", tc.gid, err, tc.want)
		}
	}
}

// pair runs a server and a client side on two devices on lo; hooks may change
// each side before it runs.
func pair(t *testing.T, sargs, cargs []string, hook func(srv, cli *side, cancelClient func())) (sout, cout string, serr, cerr error) {
	t.Helper()
	ds, dc := udpDevice(t), udpDevice(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	sp, err := Parse(RC, append([]string{"-d", "lo", "-g", "0", "-p", port}, sargs...))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := Parse(RC, append([]string{"-d", "lo", "-g", "0", "-p", port, "127.0.0.1"}, cargs...))
	if err != nil {
		t.Fatal(err)
	}
	var so, co bytes.Buffer
	srv, cli := &side{p: sp, out: &so, dev: ds}, &side{p: cp, out: &co, dev: dc}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cctx, cancelClient := context.WithCancel(ctx)
	defer cancelClient()
	if hook != nil {
		hook(srv, cli, cancelClient)
	}
	if err := srv.setup(); err != nil {
		t.Fatal(err)
	}
	if err := cli.setup(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		serr = srv.run(ctx, ln, "")
	}()
	cerr = cli.run(cctx, nil, ln.Addr().String())
	if cerr != nil {
		cli.close() // as a process that exits
	}
	wg.Wait()
	srv.close()
	cli.close()
	return so.String(), co.String(), serr, cerr
}

// TestDataCheck: --chk catches what rc_pingpong's -c would not.
func TestDataCheck(t *testing.T) {
	t.Run("client without -c", func(t *testing.T) {
		// rc_pingpong's client without -c sends 0x7b throughout.
		_, cout, serr, cerr := pair(t, []string{"-c", "-n", "5"}, []string{"-n", "5"}, nil)
		if cerr != nil || serr == nil || serr.Error() != "data check: received message 1 has 0x7b at byte 0, want 0x00" {
			t.Errorf("server: %v, client: %v", serr, cerr)
		}
		checkOutput(t, "client", cout, 4096, 5)
	})
	t.Run("one byte in the middle of a page", func(t *testing.T) {
		_, cout, serr, cerr := pair(t, []string{"-n", "6", "-s", "10000"}, []string{"-n", "6", "-c", "-s", "10000"},
			func(srv, _ *side, _ func()) {
				srv.mangle = func(b []byte, scnt int) {
					if scnt == 3 {
						b[5000] = 0
					}
				}
			})
		if serr != nil || cerr == nil || cerr.Error() != "data check: received message 4 has 0x00 at byte 5000, want 0x7b" {
			t.Errorf("server: %v, client: %v", serr, cerr)
		}
		// rc_pingpong's own check looks at byte 0 of each page only.
		checkOutput(t, "client", cout, 10000, 6)
	})
	t.Run("first byte of a page", func(t *testing.T) {
		_, cout, serr, cerr := pair(t, []string{"-n", "3", "-s", "10000"}, []string{"-n", "3", "-c", "-s", "10000"},
			func(srv, _ *side, _ func()) {
				srv.mangle = func(b []byte, scnt int) {
					if scnt == 2 {
						b[8192] = 1
					}
				}
			})
		if serr != nil || cerr == nil || cerr.Error() != "data check: received message 3 has 0x01 at byte 8192, want 0x00" {
			t.Errorf("server: %v, client: %v", serr, cerr)
		}
		if !strings.HasSuffix(cout, " usec/iter\ninvalid data in page 2\n") {
			t.Errorf("client output:\n%s", cout)
		}
	})
	t.Run("short message", func(t *testing.T) {
		_, _, serr, cerr := pair(t, []string{"-n", "3", "-c", "--timeout", "2s"}, []string{"-n", "3", "-s", "100", "--timeout", "2s"}, nil)
		// The server's 4096 bytes do not fit the client's 100.
		if cerr == nil || cerr.Error() != "failed status local length error (1) for wr_id 1" {
			t.Errorf("client: %v", cerr)
		}
		if serr == nil || !strings.Contains(serr.Error(), "data check: received message 1 has 100 bytes, want 4096") {
			t.Errorf("server: %v", serr)
		}
	})
}

// TestPeerDies: the client goes away in the middle of a run; the server says
// so and ends.
func TestPeerDies(t *testing.T) {
	for _, events := range []bool{false, true} {
		t.Run(fmt.Sprintf("events=%v", events), func(t *testing.T) {
			args := []string{"-n", "100000", "--timeout", "1s"}
			if events {
				args = append(args, "-e")
			}
			_, _, serr, cerr := pair(t, args, args, func(_, cli *side, cancelClient func()) {
				cli.mangle = func(_ []byte, scnt int) {
					if scnt == 50 {
						cancelClient()
					}
				}
			})
			if !errors.Is(cerr, context.Canceled) {
				t.Errorf("client: %v", cerr)
			}
			if serr == nil || !errors.Is(serr, ErrPeer) && !strings.Contains(serr.Error(), "transport retry counter exceeded") {
				t.Errorf("server: %v", serr)
			}
			t.Logf("server: %v", serr)
		})
	}
}

// TestLocalKinds: uc_pingpong, ud_pingpong and srq_pingpong end to end, with
// each one's address lines and report, the data checked on both sides, polling
// and with events.
func TestLocalKinds(t *testing.T) {
	for _, c := range []struct {
		k           Kind
		args        []string
		size, lines int
		localSep    string
	}{
		{UC, nil, 4096, 1, ","},
		{UC, []string{"-e", "-s", "65536", "-m", "4096"}, 65536, 1, ","},
		{UD, nil, 1024, 1, ":"},
		{UD, []string{"-e", "-s", "4096"}, 4096, 1, ":"},
		{SRQ, []string{"-q", "4"}, 4096, 4, ","},
		{SRQ, []string{"-e", "-r", "64", "-s", "100"}, 100, 16, ","},
	} {
		t.Run(string(c.k)+strings.Join(c.args, ""), func(t *testing.T) {
			p, err := Parse(c.k, append([]string{"--local", "-n", "200", "-c"}, c.args...))
			if err != nil {
				t.Fatal(err)
			}
			var cout, sout bytes.Buffer
			p.LocalServerOut = &sout
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := Run(ctx, p, &cout, io.Discard); err != nil {
				t.Fatalf("%v\n%s", err, cout.String())
			}
			for who, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
				local := regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}` + c.localSep + ` GID ::ffff:127\.0\.\d+\.\d+$`)
				remote := regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.0\.\d+\.\d+$`)
				if n, m := len(local.FindAllString(out, -1)), len(remote.FindAllString(out, -1)); n != c.lines || m != c.lines {
					t.Errorf("%s: %d local and %d remote address lines, want %d:\n%s", who, n, m, c.lines, out)
				}
				if want := fmt.Sprintf("\n%d bytes in ", 2*c.size*200); !strings.Contains(out, want) || !strings.Contains(out, "\n200 iters in ") {
					t.Errorf("%s: no %q:\n%s", who, want, out)
				}
				if strings.Contains(out, "invalid data") {
					t.Errorf("%s:\n%s", who, out)
				}
			}
		})
	}
	// ud_pingpong's message fits one packet of the port's MTU.
	p, _ := Parse(UD, []string{"--local", "-s", "8192"})
	if err := Run(context.Background(), p, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "requested size larger than port MTU (4096)") {
		t.Errorf("ud_pingpong -s 8192: %v", err)
	}
}
