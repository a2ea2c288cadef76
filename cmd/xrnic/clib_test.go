package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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
	// Each daemon a process of its own, as on two hosts: an rdma_cm of one
	// would otherwise see the other's device too.
	a := startDaemonProc(t, &p.A)
	b := startDaemonProc(t, &p.B)

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

	// The pingpongs' GID index 1 is the IPv4 address's (index 0 the
	// link-local). With -R, perftest connects through librdmacm, whose
	// server listens on the daemon's CM rather than on TCP.
	for _, c := range []struct {
		prog []string
		row  string // in both sides' output
	}{
		{[]string{"ibv_rc_pingpong", "-g", "1", "-n", "200", "-c"}, "200 iters in"},
		{[]string{"ibv_rc_pingpong", "-g", "1", "-n", "200", "-e", "-s", "65536", "-c"}, "200 iters in"},
		{[]string{"ibv_uc_pingpong", "-g", "1", "-n", "200", "-c"}, "200 iters in"},
		{[]string{"ibv_ud_pingpong", "-g", "1", "-n", "200", "-s", "1024", "-c"}, "200 iters in"},
		{[]string{"ibv_srq_pingpong", "-g", "1", "-n", "200", "-c"}, "200 iters in"},
		{[]string{"ib_write_bw", "-x", "1", "-s", "65536", "-n", "500"}, " 65536      500 "},
		{[]string{"ib_send_lat", "-x", "1", "-s", "2", "-n", "500"}, " 2       500 "},
		{[]string{"ib_write_bw", "-R", "-s", "65536", "-n", "500"}, " 65536      500 "},
		{[]string{"ib_read_bw", "-R", "-s", "65536", "-n", "300"}, " 65536      300 "},
		{[]string{"ib_send_bw", "-R", "-c", "UD", "-n", "300"}, " 1024       300 "}, // UD: one MTU, the pair's 1024
		{[]string{"ib_atomic_bw", "-R", "-n", "300"}, " 8          300 "},
		{[]string{"ib_send_lat", "-R", "-s", "2", "-n", "300"}, " 2       300 "},
		{[]string{"ib_read_lat", "-R", "-s", "2", "-n", "300"}, " 2       300 "},
		{[]string{"ib_write_lat", "-R", "-s", "2", "-n", "300"}, " 2       300 "},
	} {
		t.Run(strings.Join(c.prog, " "), func(t *testing.T) {
			port := "18600"
			args := append(append([]string(nil), c.prog...), "-p", port)
			srv := xrnicExec(t, &p.B, b, lib, args...)
			if slices.Contains(c.prog, "-R") {
				waitCMListener(t, b, srv)
			} else {
				waitListening(t, &p.B, port, srv)
			}
			cli := xrnicExec(t, &p.A, a, lib, append(args, p.B.IPv4.String())...)
			checkBoth(t, srv, cli, c.row, c.prog[0] != "ib_read_lat") // READ's responder measures nothing
		})
	}
	t.Run("rping", func(t *testing.T) {
		srv := xrnicExec(t, &p.B, b, lib, "rping", "-s", "-a", p.B.IPv4.String(), "-p", "7174", "-C", "10", "-v")
		waitCMListener(t, b, srv)
		cli := xrnicExec(t, &p.A, a, lib, "rping", "-c", "-a", p.B.IPv4.String(), "-p", "7174", "-C", "10", "-v")
		// rping -v prints each ping's data, which it checks (-V would too).
		checkBoth(t, srv, cli, "ping data: rdma-ping-9: JKLMNOPQRSTUVWXYZ", true)
	})
	for _, d := range []*testDaemon{a, b} {
		for end := time.Now().Add(5 * time.Second); !strings.Contains(d.cmd(t, "resource"), " attached 0\n"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("after the programs: %q", d.cmd(t, "resource"))
			}
		}
	}
}

// startDaemonProc runs `xrnic -i IFACE` as a process of its own in the end's
// namespace (this test binary is xrnic for XRNIC_TEST_MAIN).
func startDaemonProc(t *testing.T, end *testenv.Endpoint) *testDaemon {
	t.Helper()
	dir := t.TempDir()
	d := &testDaemon{sock: filepath.Join(dir, "xrnic.sock"), attach: filepath.Join(dir, "xrnic.attach"), done: make(chan error, 1)}
	cmd := end.NS.Exec(context.Background(), os.Args[0], "-i", end.Name, "--control", d.sock, "--attach", d.attach,
		"--metrics", "", "--bench-port", "0")
	cmd.Env = append(os.Environ(), "XRNIC_TEST_MAIN=1")
	cmd.Stdout, cmd.Stderr = &d.out, &d.errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	d.cancel = func() { cmd.Process.Signal(syscall.SIGTERM) }
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			cmd.Process.Kill()
			t.Errorf("the daemon on %s: %v\n%s", end.Name, err, d.errOut.String())
		}
	})
	if e, ok := d.errOut.WaitFor("ready: ", 15*time.Second); !ok {
		t.Fatalf("the daemon printed no ready line:\n%s", e)
	}
	return d
}

// checkBoth waits for both programs and checks that the client printed row,
// and the server too if srvRow.
func checkBoth(t *testing.T, srv, cli *benchProc, row string, srvRow bool) {
	t.Helper()
	for _, c := range []*benchProc{cli, srv} {
		if err := c.wait(60 * time.Second); err != nil {
			t.Fatalf("%v\nserver:\n%s\nclient:\n%s", err, srv.out.String(), cli.out.String())
		}
	}
	for _, c := range []*benchProc{cli, srv} {
		if !strings.Contains(c.out.String(), row) && (c == cli || srvRow) {
			t.Errorf("lacks %q:\n%s", row, c.out.String())
		}
	}
}

// waitCMListener waits until the daemon shows a listening CM ID (`xrnic
// resource show cm_id`), or the server's process ends.
func waitCMListener(t *testing.T, d *testDaemon, srv *benchProc) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(d.cmd(t, "resource", "show", "cm_id"), "LISTEN"); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-srv.done:
			srv.done <- err
			t.Fatalf("the server ended: %v\n%s", err, srv.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CM listener:\n%s", srv.out.String())
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
