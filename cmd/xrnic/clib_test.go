package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// buildCLib builds clib's libraries into a folder of the test's, as `make
// clib` does (clib/build.sh, warnings as errors).
func buildCLib(t testing.TB) string {
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
func xrnicExec(t testing.TB, end *testenv.Endpoint, d *testDaemon, lib string, prog ...string) *benchProc {
	t.Helper()
	return xrnicExecUnder(t, end, d, lib, nil, nil, prog...)
}

// xrnicExecUnder is xrnicExec with `xrnic exec` run by the command wrap
// (which execs its arguments), with env added to the environment.
func xrnicExecUnder(t testing.TB, end *testenv.Endpoint, d *testDaemon, lib string, wrap, env []string, prog ...string) *benchProc {
	t.Helper()
	testutil.RequireCommand(t, prog[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	argv := append(append(wrap, os.Args[0], "exec", "--attach", d.attach, "--lib", lib, "--"), prog...)
	cmd := end.NS.Exec(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "XRNIC_TEST_MAIN=1"), env...)
	return startProc(t, cmd)
}

// ucxExec is xrnicExec for UCX: UCX takes a verbs device only if
// /dev/infiniband/DEV_NAME is a character device it may open
// (uct_ib_device_is_accessible), which a kernel's uverbs makes; here a null
// device of that name (uverbs0, the library's first) in the program's own
// /dev, an overlay in the mount namespace ip netns exec gives it. The UD
// transport's GRH check is off (UCX_UD_VERBS_ETH_DGID_CHECK=n): UCX 1.13
// reads an IPv4 packet's GRH as mlx5's completions describe it, in wc.sl,
// which rxe and xrnic leave 0 (docs/ucx.md).
func ucxExec(t testing.TB, end *testenv.Endpoint, d *testDaemon, lib string, prog ...string) *benchProc {
	t.Helper()
	const dev = `set -e
o=$XRNIC_DEV_DIR
mount -t tmpfs tmpfs "$o"
mkdir "$o/u" "$o/w" "$o/u/infiniband"
mknod -m 666 "$o/u/infiniband/uverbs0" c 1 3
mount -t overlay overlay -o "lowerdir=/dev,upperdir=$o/u,workdir=$o/w" /dev
mount -t tmpfs tmpfs /dev/shm
exec "$@"`
	return xrnicExecUnder(t, end, d, lib, []string{"sh", "-c", dev, "sh"},
		[]string{"XRNIC_DEV_DIR=" + t.TempDir(), "UCX_TLS=rc_verbs,ud_verbs", "UCX_UD_VERBS_ETH_DGID_CHECK=n", "UCX_LOG_LEVEL=info"},
		prog...)
}

// checkUCX waits for both UCX programs to exit 0, the client printing row.
func checkUCX(t *testing.T, srv, cli *benchProc, row string) {
	t.Helper()
	for _, c := range []*benchProc{cli, srv} {
		if err := c.wait(90 * time.Second); err != nil {
			t.Fatalf("%v\nserver:\n%s\nclient:\n%s", err, srv.out.String(), cli.out.String())
		}
	}
	if !strings.Contains(cli.out.String(), row) {
		t.Fatalf("the client printed no %q:\n%s", row, cli.out.String())
	}
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
		// As ibv_devinfo shows rxe: IB transport, rxe's vendor_id, RoCE v2,
		// and veth's 10000 Mb/s as 1X FDR10 (ib_get_eth_speed).
		for _, want := range []string{"transport:\t\t\tInfiniBand (0)", "vendor_id:\t\t\t0xffffff", "PORT_ACTIVE",
			"link_layer:\t\tEthernet", "::ffff:" + p.A.IPv4.String() + ", RoCE v2", "active_width:\t\t1X (1)",
			"active_speed:\t\t10.0 Gbps (8)"} {
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
		// -N: the work request API (ibv_wr_start, ibv_wr_send, ...).
		{[]string{"ibv_rc_pingpong", "-g", "1", "-n", "200", "-N", "-c"}, "200 iters in"},
		{[]string{"ibv_uc_pingpong", "-g", "1", "-n", "200", "-c"}, "200 iters in"},
		{[]string{"ibv_ud_pingpong", "-g", "1", "-n", "200", "-s", "1024", "-c"}, "200 iters in"},
		{[]string{"ibv_srq_pingpong", "-g", "1", "-n", "200", "-c"}, "200 iters in"},
		{[]string{"ib_write_bw", "-x", "1", "-s", "65536", "-n", "500"}, " 65536      500 "},
		{[]string{"ib_send_lat", "-x", "1", "-s", "2", "-n", "500"}, " 2       500 "},
		{[]string{"ib_read_bw", "-x", "1", "-s", "65536", "-n", "300"}, " 65536      300 "},
		{[]string{"ib_send_bw", "-x", "1", "-s", "65536", "-n", "300"}, " 65536      300 "},
		{[]string{"ib_atomic_bw", "-x", "1", "-n", "300"}, " 8          300 "},
		{[]string{"ib_write_lat", "-x", "1", "-s", "2", "-n", "300"}, " 2       300 "},
		{[]string{"ib_read_lat", "-x", "1", "-s", "2", "-n", "300"}, " 2       300 "},
		{[]string{"ib_atomic_lat", "-x", "1", "-n", "300"}, " 8       300 "},
		{[]string{"ib_write_bw", "-R", "-s", "65536", "-n", "500"}, " 65536      500 "},
		{[]string{"ib_read_bw", "-R", "-s", "65536", "-n", "300"}, " 65536      300 "},
		// UD: one MTU, the pair's 1024. A UD message lost on a loaded
		// machine (as UD may be) leaves perftest's server waiting forever,
		// so the sender's bursts stay small.
		{[]string{"ib_send_bw", "-R", "-c", "UD", "-t", "16", "-n", "300"}, " 1024       300 "},
		{[]string{"ib_send_bw", "-R", "-s", "65536", "-n", "300"}, " 65536      300 "},
		{[]string{"ib_atomic_bw", "-R", "-n", "300"}, " 8          300 "},
		{[]string{"ib_atomic_lat", "-R", "-n", "300"}, " 8       300 "},
		{[]string{"ib_send_lat", "-R", "-s", "2", "-n", "300"}, " 2       300 "},
		{[]string{"ib_read_lat", "-R", "-s", "2", "-n", "300"}, " 2       300 "},
		{[]string{"ib_write_lat", "-R", "-s", "2", "-n", "300"}, " 2       300 "},
	} {
		t.Run(strings.Join(c.prog, " "), func(t *testing.T) {
			runPerftest(t, lib, &p.A, a, &p.B, b, c.prog, c.row)
		})
	}
	// A program that passes bad pointers, wrong handles and too many SGEs
	// gets libibverbs' errnos, and -1 where ibv_query_gid, ibv_query_pkey
	// and ibv_init_ah_from_wc return it (clib/test/badinput.c), and the
	// daemon serves it on; one that polls an empty CQ yields its CPU now and then
	// (clib/test/spin.c); ibv_destroy_cq waits for its events' acks
	// (clib/test/cqevents.c); a channel's fd takes O_NONBLOCK as
	// libibverbs' does (clib/test/cqnonblock.c); ibv_init_ah_from_wc reads
	// IPv4 and IPv6 (clib/test/ahfromwc.c); rdma_destroy_qp frees the CQs
	// rdma_create_qp made (clib/test/cmqp.c); librdmacm's synchronous
	// mode (clib/test/cmsync.c); rdma_destroy_id waits for its events'
	// acks (clib/test/cmdestroy.c); ibv_query_qp's init_attr holds
	// sq_sig_all (clib/test/queryqp.c); rdma_get_src_port names the port
	// the rdma_cm chose for port 0 (clib/test/bindport.c); a fork's child
	// writes to registered memory and the parent does not see it
	// (clib/test/forkmem.c); ibv_query_srq's srq_limit is the limit armed,
	// 0 once it fired (clib/test/querysrq.c); rdma_join_multicast's
	// errnos, events and QP attach (clib/test/cmjoin.c); the work request
	// API of extended QPs and the polling API of extended CQs
	// (clib/test/extended.c).
	for _, prog := range []string{"badinput", "extras", "spin", "cqevents", "cqnonblock", "ahfromwc", "cmqp", "cmsync", "cmdestroy",
		"queryqp", "bindport", "forkmem", "querysrq", "cmjoin", "extended"} {
		t.Run(prog, func(t *testing.T) {
			args := []string{buildCProg(t, prog)}
			switch prog {
			case "cmqp", "cmdestroy", "bindport", "cmjoin":
				args = append(args, p.A.IPv4.String())
			case "cmsync":
				args = append(args, p.A.IPv4.String(), p.B.IPv4.String())
			}
			c := xrnicExec(t, &p.A, a, lib, args...)
			if err := c.wait(30 * time.Second); err != nil || !strings.Contains(c.out.String(), "ok") {
				t.Fatalf("%s: %v\n%s", prog, err, c.out.String())
			}
		})
	}
	// A program killed mid-transfer: its daemon frees its session, and
	// serves the next programs (the subtests after this one).
	t.Run("killed", func(t *testing.T) {
		args := []string{"ib_write_bw", "-x", "1", "-s", "65536", "-D", "30", "-p", "18601"}
		srv := xrnicExec(t, &p.B, b, lib, args...)
		waitListening(t, &p.B, "18601", srv)
		cli := xrnicExec(t, &p.A, a, lib, append(args, p.B.IPv4.String())...)
		// Its QP in RTS at its daemon: the transfer runs. (Its own: the
		// daemon's QP1 is in RTS from the start.)
		mine := fmt.Sprintf(" pid %d comm ", cli.cmd.Process.Pid)
		rts := func() bool {
			for l := range strings.Lines(a.cmd(t, "resource", "show", "qp")) {
				if strings.Contains(l, "state RTS") && strings.Contains(l, mine) {
					return true
				}
			}
			return false
		}
		for end := time.Now().Add(30 * time.Second); !rts(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the client's QP never reached RTS:\n%s", cli.out.String())
			}
		}
		time.Sleep(500 * time.Millisecond) // mid-transfer
		cli.cmd.Process.Kill()
		cli.wait(10 * time.Second)
		srv.cmd.Process.Kill()
		srv.wait(10 * time.Second)
		for _, d := range []*testDaemon{a, b} {
			waitDetached(t, d)
		}
	})
	// serve runs a server program at B and, once it listens on the CM, its
	// client at A; both must print row.
	serve := func(t *testing.T, srv, cli []string, row string) {
		t.Helper()
		waitDetached(t, a)
		waitDetached(t, b)
		s := xrnicExec(t, &p.B, b, lib, srv...)
		waitCMListener(t, b, s)
		checkBoth(t, s, xrnicExec(t, &p.A, a, lib, cli...), row, true)
	}
	t.Run("rping", func(t *testing.T) {
		// rping -v prints each ping's data, which it checks (-V would too).
		serve(t, []string{"rping", "-s", "-a", p.B.IPv4.String(), "-p", "7174", "-C", "10", "-v"},
			[]string{"rping", "-c", "-a", p.B.IPv4.String(), "-p", "7174", "-C", "10", "-v"},
			"ping data: rdma-ping-9: JKLMNOPQRSTUVWXYZ")
	})
	// A migrated ID's events sent already go with it (clib/test/cmmigrate.c).
	t.Run("cmmigrate", func(t *testing.T) {
		waitDetached(t, a)
		waitDetached(t, b)
		bin := buildCProg(t, "cmmigrate")
		srv := xrnicExec(t, &p.B, b, lib, bin, "server", p.B.IPv4.String())
		waitCMListener(t, b, srv)
		gone := xrnicExec(t, &p.A, a, lib, bin, "gone", p.B.IPv4.String())
		if err := gone.wait(30 * time.Second); err != nil || !strings.Contains(gone.out.String(), "ok") {
			t.Fatalf("gone: %v\n%s", err, gone.out.String())
		}
		stay := xrnicExec(t, &p.A, a, lib, bin, "stay", p.B.IPv4.String())
		checkBoth(t, srv, stay, "ok", true)
		t.Logf("server:\n%s", srv.out.String())
		waitDetached(t, b)
		srv = xrnicExec(t, &p.B, b, lib, bin, "asyncsrv", p.B.IPv4.String())
		waitCMListener(t, b, srv)
		gone = xrnicExec(t, &p.A, a, lib, bin, "gone", p.B.IPv4.String())
		checkBoth(t, srv, gone, "ok", true)
	})
	// The REQ's SRQ bit is the QP's (clib/test/srqbit.c).
	t.Run("srqbit", func(t *testing.T) {
		bin := buildCProg(t, "srqbit")
		serve(t, []string{bin, "server", p.B.IPv4.String()}, []string{bin, "client", p.B.IPv4.String()}, "ok")
	})
	// An ID's own SRQ (rdma_create_srq), which its QP and rdma_post_recv
	// take (clib/test/cmsrq.c).
	t.Run("cmsrq", func(t *testing.T) {
		bin := buildCProg(t, "cmsrq")
		serve(t, []string{bin, "server", p.B.IPv4.String()}, []string{bin, "client", p.B.IPv4.String()}, "ok")
	})
	// rdma_set_option reaches the daemon's ID (clib/test/cmoption.c):
	// REUSEADDR lets two IDs bind one port, which without it the second
	// bind refuses (EADDRINUSE); a client's TOS is its QP's traffic class,
	// and the server's QP has it from the REQ that crossed the wire.
	t.Run("cmoption", func(t *testing.T) {
		waitDetached(t, a)
		waitDetached(t, b)
		bin := buildCProg(t, "cmoption")
		c := xrnicExec(t, &p.A, a, lib, bin, "ports", p.A.IPv4.String())
		if err := c.wait(30 * time.Second); err != nil || !strings.Contains(c.out.String(), "ok") {
			t.Fatalf("ports: %v\n%s", err, c.out.String())
		}
		srv := xrnicExec(t, &p.B, b, lib, bin, "server", p.B.IPv4.String(), "96")
		waitCMListener(t, b, srv)
		cli := xrnicExec(t, &p.A, a, lib, bin, "client", p.B.IPv4.String(), "96")
		checkBoth(t, srv, cli, "ok", true)
	})
	// rdma_notify reaches the daemon's ID (clib/test/notify.c), with the
	// kernel's errnos: EISCONN on a connection established already, EINVAL
	// before one is and for other events.
	t.Run("notify", func(t *testing.T) {
		bin := buildCProg(t, "notify")
		serve(t, []string{bin, "server", p.B.IPv4.String()}, []string{bin, "client", p.B.IPv4.String()}, "ok")
	})
	// ibv_attach_mcast through the daemon (clib/test/mcast.c): a UD QP at B
	// attached to a group gets what a program at A sends to it, over the
	// link; the errnos of ib_uverbs_attach_mcast and uverbs_free_qp.
	t.Run("mcast", func(t *testing.T) {
		bin := buildCProg(t, "mcast")
		rcv := xrnicExec(t, &p.B, b, lib, bin, "recv", "239.1.2.3")
		if out, ok := rcv.waitFor("ready", 30*time.Second); !ok {
			t.Fatalf("receiver: %s", out)
		}
		snd := xrnicExec(t, &p.A, a, lib, bin, "send", "239.1.2.3")
		if err := rcv.wait(30 * time.Second); err != nil || !strings.Contains(rcv.out.String(), "ok") {
			t.Fatalf("receiver: %v\n%s\nsender:\n%s", err, rcv.out.String(), snd.out.String())
		}
		if strings.Contains(snd.out.String(), "FAIL") {
			t.Fatalf("sender:\n%s", snd.out.String())
		}
		snd.cmd.Process.Kill() // it sends on, a UD sender knowing of no receiver
		snd.wait(10 * time.Second)
		waitDetached(t, a)
	})
	// UCX (Debian's 1.13, as Open MPI's pml ucx runs on it) over the verbs
	// transports: ucx_perftest's tag_bw of 1 MB messages (rendezvous: RDMA
	// on rc_verbs, wireup on ud_verbs), and io_demo, which connects through
	// librdmacm (UCX's sockaddr CM: its QPs on the ID's PD) and checks
	// every byte of its reads and writes (-q on both sides). What UCX needs
	// of the host beyond the libraries is docs/ucx.md's: a node in
	// /dev/infiniband (ucxExec) and, over IPv4, its UD GRH check off.
	t.Run("ucx_perftest", func(t *testing.T) {
		waitDetached(t, a)
		waitDetached(t, b)
		args := []string{"ucx_perftest", "-t", "tag_bw", "-s", "1000000", "-n", "50", "-p", "13337"}
		srv := ucxExec(t, &p.B, b, lib, args...)
		waitListening(t, &p.B, "13337", srv)
		cli := ucxExec(t, &p.A, a, lib, append(args[:1:1], append([]string{p.B.IPv4.String()}, args[1:]...)...)...)
		checkUCX(t, srv, cli, "Final:")
		if i := strings.Index(cli.out.String(), "Final:"); i >= 0 {
			t.Logf("ucx_perftest %s", strings.SplitN(cli.out.String()[i:], "\n", 2)[0])
		}
		// Over the device, not a shared-memory or TCP transport.
		if !strings.Contains(cli.out.String(), "tag(rc_verbs/") {
			t.Errorf("ucx_perftest's lanes are not rc_verbs':\n%s", cli.out.String())
		}
	})
	t.Run("io_demo", func(t *testing.T) {
		waitDetached(t, a)
		waitDetached(t, b)
		args := []string{"io_demo", "-p", "13338", "-q", "-d", "1000:200000", "-o", "read,write"}
		srv := ucxExec(t, &p.B, b, lib, args...)
		waitCMListener(t, b, srv)
		cli := ucxExec(t, &p.A, a, lib, append(args, "-i", "200", p.B.IPv4.String())...)
		if err := cli.wait(90 * time.Second); err != nil || !strings.Contains(cli.out.String(), "Client exit with status 'OK'") {
			t.Fatalf("io_demo's client: %v\n%s\nserver:\n%s", err, cli.out.String(), srv.out.String())
		}
		srv.cmd.Process.Kill() // io_demo's server serves on
		srv.wait(10 * time.Second)
	})
	// rdmacm-utils' rdma_server and rdma_client: the endpoint calls
	// (rdma_create_ep, rdma_get_request) and librdmacm's synchronous mode,
	// a SEND each way; each prints "end 0" when all of it worked.
	t.Run("rdma_server", func(t *testing.T) {
		serve(t, []string{"rdma_server", "-s", p.B.IPv4.String(), "-p", "7175"},
			[]string{"rdma_client", "-s", p.B.IPv4.String(), "-p", "7175"}, "end 0")
	})
	// rdmacm-utils' ucmatose: several connections from one channel, SENDs
	// each way on each, and with -m every ID migrated to another channel
	// for its disconnect.
	for _, mig := range []bool{false, true} {
		name := "ucmatose"
		if mig {
			name += "-m"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"-c", "8", "-C", "100", "-S", "4000"}
			if mig {
				args = append(args, "-m")
			}
			serve(t, append([]string{"ucmatose", "-b", p.B.IPv4.String()}, args...),
				append([]string{"ucmatose", "-s", p.B.IPv4.String()}, args...), "return status 0")
		})
	}
	// rdmacm-utils' udaddy: UD QPs found by SIDR, a SEND each way on each.
	t.Run("udaddy", func(t *testing.T) {
		serve(t, []string{"udaddy", "-b", p.B.IPv4.String(), "-c", "4", "-C", "20"},
			[]string{"udaddy", "-s", p.B.IPv4.String(), "-c", "4", "-C", "20"}, "return status 0")
	})
	// rdmacm-utils' mckey: each end binds its address and joins 239.1.2.3
	// (rdma_join_multicast; MULTICAST_JOIN's UD parameters make the
	// sender's AH); the receiver's QP is attached and gets the sender's 10
	// datagrams, then both leave. The receiver prints "receiving data
	// transfers" once joined; the sender pauses 3 s before it sends.
	t.Run("mckey", func(t *testing.T) {
		waitDetached(t, a)
		waitDetached(t, b)
		// stdbuf: mckey's printf is block-buffered to a pipe.
		rcv := xrnicExec(t, &p.B, b, lib, "stdbuf", "-oL", "mckey", "-m", "239.1.2.3", "-b", p.B.IPv4.String())
		if out, ok := rcv.waitFor("receiving data transfers", 30*time.Second); !ok {
			t.Fatalf("receiver: %s", out)
		}
		snd := xrnicExec(t, &p.A, a, lib, "mckey", "-m", "239.1.2.3", "-b", p.A.IPv4.String(), "-s")
		checkBoth(t, rcv, snd, "return status 0", true)
		if !strings.Contains(rcv.out.String(), "data transfers complete") ||
			!strings.Contains(snd.out.String(), "joined dgid: ::ffff:239.1.2.3") {
			t.Fatalf("receiver:\n%s\nsender:\n%s", rcv.out.String(), snd.out.String())
		}
	})
	// rdmacm-utils' cmtime: many IDs resolved, connected, disconnected and
	// destroyed at once, each step's events taken in any order.
	t.Run("cmtime", func(t *testing.T) {
		waitDetached(t, a)
		waitDetached(t, b)
		srv := xrnicExec(t, &p.B, b, lib, "cmtime", "-b", p.B.IPv4.String(), "-c", "50", "-p", "7176")
		waitCMListener(t, b, srv)
		cli := xrnicExec(t, &p.A, a, lib, "cmtime", "-s", p.B.IPv4.String(), "-c", "50", "-p", "7176")
		// The client exits 0 once all its IDs have come through every
		// step; the server serves until it is stopped.
		if err := cli.wait(60 * time.Second); err != nil || !strings.Contains(cli.out.String(), "destroy      :") {
			t.Fatalf("cmtime: %v\n%s", err, cli.out.String())
		}
		select {
		case err := <-srv.done:
			srv.done <- err
			t.Fatalf("the server ended: %v\n%s", err, srv.out.String())
		default:
		}
		srv.cmd.Process.Kill()
		srv.wait(10 * time.Second)
	})
	// Server and client on one host, attached to one daemon: its device
	// loops their frames back to itself, CM MADs included, as rxe does
	// (rxe_loopback); the link carries none of them.
	t.Run("loopback", func(t *testing.T) {
		for _, c := range []struct {
			prog []string
			row  string
		}{
			{[]string{"ib_write_bw", "-x", "1", "-s", "65536", "-n", "500"}, " 65536      500 "},
			{[]string{"ib_send_bw", "-R", "-s", "65536", "-n", "300"}, " 65536      300 "},
			{[]string{"ib_read_lat", "-R", "-s", "2", "-n", "300"}, " 2       300 "},
			{[]string{"ib_send_bw", "-R", "-c", "UD", "-t", "16", "-n", "300"}, " 1024       300 "},
		} {
			t.Run(strings.Join(c.prog, " "), func(t *testing.T) {
				looped, sent := engineCounter(t, b, "loopback"), engineCounter(t, b, "tx_frames")
				runPerftest(t, lib, &p.B, b, &p.B, b, c.prog, c.row)
				looped, sent = engineCounter(t, b, "loopback")-looped, engineCounter(t, b, "tx_frames")-sent
				t.Logf("%d frames looped back, %d to the link", looped, sent)
				if looped < 300 || sent != 0 {
					t.Errorf("%d frames looped back, %d to the link: want them all looped back", looped, sent)
				}
			})
		}
		t.Run("rping", func(t *testing.T) {
			waitDetached(t, b)
			sent := engineCounter(t, b, "tx_frames")
			ip := p.B.IPv4.String()
			srv := xrnicExec(t, &p.B, b, lib, "rping", "-s", "-a", ip, "-p", "7177", "-C", "10", "-v")
			waitCMListener(t, b, srv)
			cli := xrnicExec(t, &p.B, b, lib, "rping", "-c", "-a", ip, "-p", "7177", "-C", "10", "-v")
			checkBoth(t, srv, cli, "ping data: rdma-ping-9: JKLMNOPQRSTUVWXYZ", true)
			if sent = engineCounter(t, b, "tx_frames") - sent; sent != 0 {
				t.Errorf("%d frames to the link", sent)
			}
		})
	})
	for _, d := range []*testDaemon{a, b} {
		waitDetached(t, d)
	}
}

// engineCounter reads one of the daemon's engine counters (`xrnic statistic
// -d`'s engine line, its name without "engine_").
func engineCounter(t *testing.T, d *testDaemon, name string) uint64 {
	t.Helper()
	for l := range strings.Lines(d.cmd(t, "statistic", "-d")) {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "engine" {
			continue
		}
		for i := 1; i+1 < len(f); i += 2 {
			if f[i] == name {
				v, err := strconv.ParseUint(f[i+1], 10, 64)
				if err != nil {
					t.Fatalf("engine %s %q: %v", name, f[i+1], err)
				}
				return v
			}
		}
	}
	t.Fatalf("no engine counter %s in statistic -d", name)
	return 0
}

// runPerftest runs a perftest program's server at srvEnd, attached to srvD, and
// its client at cliEnd, attached to cliD, with the row wanted in both outputs;
// it runs them again when rerun says perftest failed for a reason of its own.
func runPerftest(t *testing.T, lib string, cliEnd *testenv.Endpoint, cliD *testDaemon, srvEnd *testenv.Endpoint, srvD *testDaemon,
	prog []string, row string) {
	t.Helper()
	// The last programs' sessions gone first: a listener of theirs left at
	// the server's daemon would pass for this server's (and REJ its client).
	waitDetached(t, cliD)
	waitDetached(t, srvD)
	t.Cleanup(func() { logCounters(t, cliD, srvD) })
	port := "18600"
	args := append(append([]string(nil), prog...), "-p", port)
	for attempt := 1; ; attempt++ {
		srv := xrnicExec(t, srvEnd, srvD, lib, args...)
		if slices.Contains(prog, "-R") {
			waitCMListener(t, srvD, srv)
		} else {
			waitListening(t, srvEnd, port, srv)
		}
		cli := xrnicExec(t, cliEnd, cliD, lib, append(args, srvEnd.IPv4.String())...)
		if again := rerun(srv, cli); again != "" && attempt < 5 {
			t.Logf("attempt %d: %s: again", attempt, again)
			if strings.Contains(again, "listener") {
				logCMState(t, cliD, srvD)
			}
			srv.cmd.Process.Kill()
			srv.wait(10 * time.Second)
			waitDetached(t, cliD)
			waitDetached(t, srvD)
			continue
		}
		checkBoth(t, srv, cli, row, prog[0] != "ib_read_lat" && prog[0] != "ib_atomic_lat") // a READ's or atomic's responder measures nothing
		return
	}
}

// rerun tells a pair that failed for a reason of perftest's, or one not
// understood yet, from one that failed: "" to judge it.
func rerun(srv, cli *benchProc) string {
	if cli.wait(60*time.Second) == nil {
		if srv.wait(60*time.Second) != nil && strings.Contains(srv.out.String(), "Can't produce a report") {
			return "perftest's server could not calibrate its clock"
		}
		return ""
	}
	out := cli.out.String()
	switch {
	case strings.Contains(out, "Can't produce a report"):
		// perftest's clock calibration (get_cpu_mhz's fit of cycles
		// against time) failed on the loaded machine.
		return "perftest could not calibrate its clock"
	case strings.Contains(out, "RDMA_CM_EVENT_REJECTED; error: 8."),
		strings.Contains(out, "RDMA_CM_EVENT_UNREACHABLE; error: 1."):
		// The REQ found no listener at B: perftest -R listens twice on
		// its port, for the exchange (that listener destroyed once its
		// connection is accepted) and, after negotiate_params, for the
		// test's QPs, while the client connects those QPs right after
		// negotiate_params; a server slower to listen again loses (seen
		// in CI with ib_atomic_bw -R). perftest 6.06's own retry would
		// crash on the state it has just freed. The CM counters
		// (no_listener: which side refused it) and IDs are logged.
		return "the client's REQ found no listener"
	}
	return ""
}

// logCMState logs the daemons' counters, their CM's included, and IDs.
func logCMState(t *testing.T, ds ...*testDaemon) {
	for _, d := range ds {
		t.Logf("%s\n%s", d.cmd(t, "statistic", "-d"), d.cmd(t, "resource", "show", "cm_id"))
	}
}

// logCounters logs both daemons' counters when the test failed: where a
// frame went missing (XDP, the socket, the device).
func logCounters(t *testing.T, ds ...*testDaemon) {
	if !t.Failed() {
		return
	}
	for _, d := range ds {
		var out, errOut bytes.Buffer
		run(context.Background(), []string{"statistic", "-d", "-s", d.sock}, &out, &errOut)
		t.Logf("xrnic statistic -d:\n%s%s", out.String(), errOut.String())
	}
}

// waitDetached waits until no process is attached to the daemon.
func waitDetached(t *testing.T, d *testDaemon) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !strings.Contains(d.cmd(t, "resource"), " attached 0\n"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("processes still attached: %q", d.cmd(t, "resource"))
		}
	}
}

// startDaemonProc runs `xrnic -i IFACE` as a process of its own in the end's
// namespace (this test binary is xrnic for XRNIC_TEST_MAIN).
func startDaemonProc(t testing.TB, end *testenv.Endpoint) *testDaemon {
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
		err := c.wait(60 * time.Second)
		if err != nil && strings.Contains(c.out.String(), "rdma_get_cm_event: Bad file descriptor") {
			// rdma-core 44's rping: its CM thread reads the channel once
			// more after the main thread destroyed it, the test done (fixed
			// upstream in f3ae6534a). The rows below are still checked.
			t.Logf("rping's teardown race (%v)", err)
			err = nil
		}
		if err != nil {
			t.Fatalf("%v\nserver:\n%s\nclient:\n%s", err, srv.out.String(), cli.out.String())
		}
	}
	for _, c := range []*benchProc{cli, srv} {
		if !strings.Contains(c.out.String(), row) && (c == cli || srvRow) {
			t.Errorf("lacks %q:\n%s", row, c.out.String())
		}
	}
}

// waitCMListener waits until the daemon shows a CM ID of the server's process
// listening (`xrnic resource show cm_id`), or the process ends. Its own: an
// earlier server's listener, still being freed, would pass for it.
func waitCMListener(t *testing.T, d *testDaemon, srv *benchProc) {
	t.Helper()
	mine := fmt.Sprintf(" pid %d comm ", srv.cmd.Process.Pid)
	waitServer(t, srv, "a CM listener", func() bool {
		for l := range strings.Lines(d.cmd(t, "resource", "show", "cm_id")) {
			if strings.Contains(l, " state LISTEN ") && strings.Contains(l, mine) {
				return true
			}
		}
		return false
	})
}

// waitListening waits until a TCP socket listens on port in the end's
// namespace (the server's exchange), or its process ends.
func waitListening(t *testing.T, end *testenv.Endpoint, port string, srv *benchProc) {
	t.Helper()
	waitServer(t, srv, "a listener on TCP "+port, func() bool {
		out, _ := exec.Command("ip", "netns", "exec", end.NS.Name, "ss", "-Hltn", "sport = :"+port).Output()
		return strings.TrimSpace(string(out)) != ""
	})
}

// waitServer polls ready until it holds, failing the test if the server's
// process ends first or 20 s pass.
func waitServer(t *testing.T, srv *benchProc, what string, ready func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ready(); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-srv.done:
			srv.done <- err
			t.Fatalf("the server ended before %s: %v\n%s", what, err, srv.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 20 s:\n%s", what, srv.out.String())
		}
	}
}

// BenchmarkCLibrary is Debian's ib_write_bw and ib_send_lat on xrnic's
// libibverbs (through A's daemon) against bench with its engine in-process
// on A, in the same run on the same veth pair, both against the bench
// servers of a daemon on B. Rounds alternate the two; it reports bandwidth
// (64 KiB WRITEs) and t_typical (2-byte SENDs), and the ratios, medians of
// the rounds' (the C library issue asks for >= 0.8 and <= 1.3).
//
//	go test -run '^$' -bench CLibrary -benchtime 1x ./cmd/xrnic/
func BenchmarkCLibrary(b *testing.B) {
	lib := buildCLib(b)
	p := testenv.NewTestPair(b, testenv.PairOptions{})
	const nBW, nLat = "4000", "3000"
	startDaemonOn(b, p, &p.B, "--bench-port", "19001", "--bench-opts", "-s 65536 -n "+nBW,
		"--bench-server", "send_lat:19002:-s 2 -n "+nLat)
	inProcess := func(test, port, size, n string, col int) float64 {
		return resultField(b, benchIn(b, &p.A, test, "-d", p.A.Name, "-p", port, "-s", size, "-n", n, p.B.IPv4.String()), col)
	}
	library := func(d *testDaemon, prog, port, size, n string, col int) float64 {
		c := xrnicExec(b, &p.A, d, lib, prog, "-x", "1", "-p", port, "-s", size, "-n", n, p.B.IPv4.String())
		if err := c.wait(2 * time.Minute); err != nil {
			b.Fatalf("%s: %v\n%s", prog, err, c.out.String())
		}
		return resultField(b, c.out.String(), col)
	}
	const rounds = 3
	var bwIn, bwLib, latIn, latLib []float64
	for range rounds {
		bwIn = append(bwIn, inProcess("write_bw", "19001", "65536", nBW, 3))
		latIn = append(latIn, inProcess("send_lat", "19002", "2", nLat, 4))
		d := startDaemonProc(b, &p.A)
		bwLib = append(bwLib, library(d, "ib_write_bw", "19001", "65536", nBW, 3))
		latLib = append(latLib, library(d, "ib_send_lat", "19002", "2", nLat, 4))
		if err := d.stop(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(median(bwIn), "MB/s_inprocess")
	b.ReportMetric(median(bwLib), "MB/s_libibverbs")
	b.ReportMetric(medianRatio(bwLib, bwIn), "x_bw")
	b.ReportMetric(median(latIn), "us_inprocess")
	b.ReportMetric(median(latLib), "us_libibverbs")
	b.ReportMetric(medianRatio(latLib, latIn), "x_lat")
}

// An unprivileged program on xrnic (`xrnic exec` as uid 65534): refused by a
// daemon that serves root and its own user only, served by one started with
// --attach-group naming the program's group (Debian's nogroup, 65534).
func TestAttachGroup(t *testing.T) {
	lib := buildCLib(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	for _, c := range []struct {
		args   []string
		served bool
	}{
		{nil, false},
		{[]string{"--attach-group", "65534"}, true},
	} {
		d := startDaemon(t, p, append([]string{"--bench-port", "0"}, c.args...)...)
		// The folders on the way must let the other user through.
		for _, dir := range []string{lib, filepath.Dir(lib), filepath.Dir(d.attach), filepath.Dir(filepath.Dir(d.attach))} {
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		path, argv, env, err := execCommand([]string{"--attach", d.attach, "--lib", lib, "--", "ibv_devinfo"})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(path, argv[1:]...)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := cmd.CombinedOutput()
		if got := strings.Contains(string(out), "hca_id:"); got != c.served {
			t.Errorf("daemon %q: uid 65534 served %v, want %v:\n%s", c.args, got, c.served, out)
		}
		if err := d.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCLibraryDaemonGone: a program whose daemon stops is not killed by its
// next doorbell (SIGPIPE on the doorbell pipe; clib/test/daemongone.c).
func TestCLibraryDaemonGone(t *testing.T) {
	lib := buildCLib(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	a := startDaemonProc(t, &p.A)
	c := xrnicExec(t, &p.A, a, lib, buildCProg(t, "daemongone"))
	for end := time.Now().Add(20 * time.Second); !strings.Contains(c.out.String(), "ready"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the program never got ready:\n%s", c.out.String())
		}
	}
	if err := a.stop(); err != nil {
		t.Logf("daemon: %v", err)
	}
	if err := c.wait(30 * time.Second); err != nil || !strings.Contains(c.out.String(), "ok") {
		t.Fatalf("after its daemon stopped: %v\n%s", err, c.out.String())
	}
}

// buildCProg compiles clib/test/PROG.c, against the system's libibverbs and
// librdmacm headers (xrnic exec runs it on xrnic's libraries).
func buildCProg(t *testing.T, prog string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), prog)
	out, err := exec.Command("gcc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-rdynamic", "-o", bin,
		filepath.Join(testutil.RepoRoot(t), "clib", "test", prog+".c"), "-lrdmacm", "-libverbs").CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}
