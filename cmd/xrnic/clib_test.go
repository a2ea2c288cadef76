package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// buildCLib builds clib's libraries into a folder of the test's, as `make
// clib` does (clib/build.sh, warnings as errors).
func buildCLib(t *testing.T) string {
	t.Helper()
	testutil.RequireCommand(t, "gcc")
	dir := t.TempDir()
	out, err := exec.Command("bash", filepath.Join(testutil.RepoRoot(t), "clib", "build.sh"), dir).CombinedOutput()
	if err != nil {
		t.Fatalf("clib/build.sh: %v\n%s", err, out)
	}
	return dir
}

// xrnicExec runs `xrnic exec --attach SOCK --lib LIB -- PROGRAM ARGS` in the
// end's namespace (this test binary is xrnic for XRNIC_TEST_MAIN).
func xrnicExec(t *testing.T, end *testenv.Endpoint, d *testDaemon, lib string, prog ...string) *benchProc {
	t.Helper()
	testutil.RequireCommand(t, prog[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := end.NS.Exec(ctx, os.Args[0], append([]string{"exec", "--attach", d.attach, "--lib", lib, "--"}, prog...)...)
	cmd.Env = append(os.Environ(), "XRNIC_TEST_MAIN=1")
	return startProc(t, cmd)
}

// Debian's libibverbs programs, unmodified, on xrnic's libibverbs through
// `xrnic exec`, host to host: each end's program attaches to its end's
// daemon. The programs check their data where they do (the pingpongs verify
// every buffer with -c).
func TestCLibrary(t *testing.T) {
	lib := buildCLib(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	a := startDaemon(t, p)
	b := startDaemonOn(t, p, &p.B)

	t.Run("devices", func(t *testing.T) {
		c := xrnicExec(t, &p.A, a, lib, "ibv_devices")
		if err := c.wait(30 * time.Second); err != nil || !strings.Contains(c.out.String(), "xrnic") {
			t.Fatalf("ibv_devices: %v\n%s", err, c.out.String())
		}
		c = xrnicExec(t, &p.A, a, lib, "ibv_devinfo", "-v")
		if err := c.wait(60 * time.Second); err != nil {
			t.Fatalf("ibv_devinfo: %v\n%s", err, c.out.String())
		}
		for _, want := range []string{"PORT_ACTIVE", "link_layer:\t\tEthernet", "::ffff:" + p.A.IPv4.String() + ", RoCE v2"} {
			if !strings.Contains(c.out.String(), want) {
				t.Errorf("ibv_devinfo -v lacks %q:\n%s", want, c.out.String())
			}
		}
	})

	// The pingpongs' GID index 1 is the IPv4 address's (index 0 the link-local).
	for _, prog := range [][]string{
		{"ibv_rc_pingpong", "-g", "1", "-n", "200", "-c"},
		{"ibv_rc_pingpong", "-g", "1", "-n", "200", "-e", "-s", "65536", "-c"},
		{"ibv_uc_pingpong", "-g", "1", "-n", "200", "-c"},
		{"ibv_ud_pingpong", "-g", "1", "-n", "200", "-s", "1024", "-c"},
		{"ibv_srq_pingpong", "-g", "1", "-n", "200", "-c"},
		{"ib_write_bw", "-x", "1", "-s", "65536", "-n", "500"},
		{"ib_send_lat", "-x", "1", "-s", "2", "-n", "500"},
	} {
		t.Run(strings.Join(prog, " "), func(t *testing.T) {
			port := "18600"
			args := append(append([]string(nil), prog...), "-p", port)
			srv := xrnicExec(t, &p.B, b, lib, args...)
			waitListening(t, &p.B, port, srv)
			cli := xrnicExec(t, &p.A, a, lib, append(args, p.B.IPv4.String())...)
			for _, c := range []*benchProc{cli, srv} {
				if err := c.wait(60 * time.Second); err != nil {
					t.Fatalf("%v\nserver:\n%s\nclient:\n%s", err, srv.out.String(), cli.out.String())
				}
			}
			row := "iters in"
			if strings.HasPrefix(prog[0], "ib_") {
				row = " 65536      500 "
				if prog[0] == "ib_send_lat" {
					row = " 2       500 "
				}
			}
			for _, c := range []*benchProc{cli, srv} {
				if !strings.Contains(c.out.String(), row) {
					t.Errorf("lacks %q:\n%s", row, c.out.String())
				}
			}
		})
	}
	for _, d := range []*testDaemon{a, b} {
		for end := time.Now().Add(5 * time.Second); !strings.Contains(d.cmd(t, "resource"), " attached 0\n"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("after the programs: %q", d.cmd(t, "resource"))
			}
		}
	}
}

// waitListening waits until a TCP socket listens on port in the end's
// namespace (the server's exchange), or its process ends.
func waitListening(t *testing.T, end *testenv.Endpoint, port string, srv *benchProc) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "exec", end.NS.Name, "ss", "-Hltn", "sport = :"+port).Output()
		if strings.TrimSpace(string(out)) != "" {
			return
		}
		select {
		case err := <-srv.done:
			srv.done <- err
			t.Fatalf("the server ended: %v\n%s", err, srv.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s:\n%s", port, srv.out.String())
		}
	}
}

// The library's registered-memory arena on its own (clib/test/mem_test.c):
// contents kept across the move, one memory seen from the daemon's mapping
// and the program's, regions over moved and fresh pages at once, EFAULT for
// addresses the process does not have, protections kept.
func TestCLibraryMemory(t *testing.T) {
	gcc := testutil.RequireCommand(t, "gcc")
	root := testutil.RepoRoot(t)
	bin := filepath.Join(t.TempDir(), "mem_test")
	out, err := exec.Command(gcc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"+filepath.Join(root, "clib", "include"),
		"-o", bin, filepath.Join(root, "clib", "test", "mem_test.c"), filepath.Join(root, "clib", "src", "mem.c"),
		"-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("mem_test: %v\n%s", err, out)
	}
}
