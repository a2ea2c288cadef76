//go:build interop

package interop

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The C library leg: Debian's programs, unmodified, on the host through
// xrnic's libibverbs and librdmacm (`xrnic exec`, the daemon on vb0), against
// the same programs on rxe in the guest, both roles. Each program checks its
// data where it does (the pingpongs' -c, rping's -V); the capture's ICRCs are
// verified as for bench.
var clibCases = []struct {
	prog, args string
}{
	{"ibv_rc_pingpong", "-g 1 -s 4096 -n 200 -c"},
	{"ibv_rc_pingpong", "-g 1 -s 4096 -n 200 -N -c"}, // the work request API (ibv_wr_*) on both ends
	{"ibv_uc_pingpong", "-g 1 -s 4096 -n 200 -c"},
	{"ibv_ud_pingpong", "-g 1 -s 512 -n 200 -c"},
	{"ibv_srq_pingpong", "-g 1 -s 4096 -n 200 -q 4 -c"},
	{"ib_write_bw", "-x 1 -s 65536 -n 200"},
	{"ib_read_bw", "-x 1 -s 65536 -n 200"},
	{"ib_send_bw", "-x 1 -s 65536 -n 200"},
	{"ib_atomic_bw", "-x 1 -n 200"},
	{"ib_write_lat", "-x 1 -s 64 -n 200"},
	{"ib_read_lat", "-x 1 -s 64 -n 200"},
	{"ib_send_lat", "-x 1 -s 64 -n 200"},
	{"ib_atomic_lat", "-x 1 -n 200"},
	{"ib_write_bw", "-x 1 -R -s 65536 -n 200"},
	{"ib_read_bw", "-x 1 -R -s 65536 -n 200"},
	{"ib_send_bw", "-x 1 -R -s 65536 -n 200"},
	{"ib_atomic_bw", "-x 1 -R -n 200"},
	{"ib_write_lat", "-x 1 -R -s 64 -n 200"},
	{"ib_read_lat", "-x 1 -R -s 64 -n 200"},
	{"ib_send_lat", "-x 1 -R -s 64 -n 200"},
	{"ib_atomic_lat", "-x 1 -R -n 200"},
	{"ib_send_bw", "-x 1 -R -c UD -n 200"},
	{"rping", ""}, // rpingPair's options
	{"mckey", ""}, // a UD multicast group, joined with rdma_join_multicast
}

// mckeyGroup is the IPv4 group mckey's receiver joins and its sender sends to.
const mckeyGroup = "239.1.2.3"

func clibPair(t *testing.T, g *guest, prog, args string, xrnicServer bool) {
	name := artifactName(t)
	sock := filepath.Join(t.TempDir(), "xrnic.attach")
	xrnic := filepath.Join(filepath.Dir(suite.bench), "xrnic")
	startHost(t, 4*runTimeout, "ready:", xrnic, "-i", ifXrnic, "--metrics", "", "--control", "", "--bench-port", "0",
		"--attach", sock)
	// stdbuf: the programs' stdout is a pipe here, and what they print before
	// they wait (perftest's banner, rping -d's rdma_listen) must arrive then.
	host := []string{xrnic, "exec", "--attach", sock, "--lib", suite.lib, "--", "stdbuf", "-oL", "-eL", prog}
	guestCmd := prog + " -d " + guestDev + " " + args
	ready := "Waiting for client to connect" // perftest, after it listens
	guestReady := func(j *job) { g.waitListen(t, 18515, j) }
	slow := false // the client's perftest connects through testdata/connect_delay.c
	switch {
	case prog == "rping":
		// rping -d prints rdma_listen once it listens.
		args = fmt.Sprintf("-v -V -C %d -S %d", rpingCount, rpingSize)
		if xrnicServer {
			host = append(host, "-s", "-d", "-a", ipXrnic)
			guestCmd = "rping -c " + args + " -a"
		} else {
			host = append(host, "-c")
			guestCmd = "rping -s " + args + " -a " + ipGuest
		}
		host = append(host, strings.Fields(args)...)
		if !xrnicServer {
			host = append(host, "-a")
		}
		ready = "rdma_listen"
		guestReady = func(j *job) {
			g.waitCMListen(t, 7174, "rdma_cm listener", j)
		}
	case prog == "mckey":
		// The server is the receiver, which joins the group (IGMP: the
		// bridge then forwards the group to it) and prints "receiving data
		// transfers"; the sender joins too and sends 10 datagrams after 3 s.
		if xrnicServer {
			host = append(host, "-m", mckeyGroup, "-b", ipXrnic)
			guestCmd = "mckey -m " + mckeyGroup + " -b " + ipGuest + " -s" // playWith appends ipXrnic: mckey ignores it
			ready = "receiving data transfers"
		} else {
			host = append(host, "-m", mckeyGroup, "-b", ipXrnic, "-s")
			guestCmd = "mckey -m " + mckeyGroup + " -b " + ipGuest
			guestReady = func(j *job) {
				// rxe's join puts the group on the guest's interface.
				g.waitCount(t, "ip maddr show | grep -c "+mckeyGroup, "mckey's group", j)
			}
		}
	case strings.HasPrefix(prog, "ibv_"):
		host = append(host, strings.Fields(args)...)
		if prog != "ibv_ud_pingpong" {
			host = append(host, "-m", strconv.Itoa(g.mtu))
			guestCmd += fmt.Sprintf(" -m %d", g.mtu)
		}
		ready = "" // the examples print nothing before their client: the TCP port
	default:
		host = append(host, strings.Fields(args)...)
		if slow = strings.Contains(args, "-R"); slow {
			// Debian's perftest connects its test QPs about 1 ms after
			// the exchange, at times before the server listens again,
			// and its retry then crashes (testdata/connect_delay.c): the
			// client, either side's, connects 250 ms late, as a fixed
			// perftest retries.
			if xrnicServer {
				guestCmd = lateConnect(guestCmd)
			} else {
				i := slices.Index(host, "stdbuf")
				host = slices.Insert(host, i, "env", "LD_PRELOAD="+suite.slowConn)
			}
			guestReady = func(j *job) { g.waitCMListen(t, 18515, "rdma_cm listener", j) }
		}
	}
	lat := strings.HasSuffix(prog, "_lat")
	c, xOut, gOut := playWith(t, g, name, host, guestCmd, xrnicServer, ready,
		func(xOut, gOut string) string { return misread(strings.HasPrefix(prog, "ib_"), xOut, gOut) }, guestReady)
	for who, out := range map[string]string{"xrnic's " + prog: xOut, "rxe's " + prog: gOut} {
		switch {
		case strings.Contains(out, "invalid data") || strings.Contains(out, "data mismatch"):
			t.Errorf("%s found bad data:\n%s", who, out)
		case prog == "rping":
		case strings.HasPrefix(prog, "ibv_"):
			if !strings.Contains(out, "\n200 iters in ") {
				t.Errorf("%s printed no result:\n%s", who, out)
			}
		}
	}
	client, server := xOut, gOut
	if xrnicServer {
		client, server = gOut, xOut
	}
	if slow {
		checkLateConnect(t, prog, client)
	}
	switch {
	case prog == "mckey":
		for who, out := range map[string]string{"the receiver": server, "the sender": client} {
			if !strings.Contains(out, "joined dgid: ::ffff:"+mckeyGroup) || !strings.Contains(out, "return status 0") {
				t.Errorf("%s's mckey:\n%s", who, out)
			}
		}
		if !strings.Contains(server, "data transfers complete") {
			t.Errorf("the receiver's mckey received nothing:\n%s", server)
		}
	case prog == "rping":
		if got, want := dataLines(client, "ping data: "), rpingData("ping data: "); got != want {
			t.Errorf("the client's ping data differ from rping's (%d bytes, want %d): see %s", len(got), len(want), name)
		}
		if got, want := dataLines(server, "server ping data: "), rpingData("server ping data: "); got != want {
			t.Errorf("the server's ping data differ from rping's (%d bytes, want %d): see %s", len(got), len(want), name)
		}
	case lat:
		if latResult.FindStringSubmatch(client) == nil {
			t.Errorf("the client printed no latency result:\n%s", client)
		}
	case strings.HasPrefix(prog, "ib_"):
		if r := parseBW(t, "the client", client); r.iters != 200 || !r.sane() {
			t.Errorf("result not sane: %q", r.text)
		}
	}
	all := frames(t, c.path)
	if prog == "mckey" {
		// The sender's 10 datagrams to the group's QPN, each ICRC checked;
		// the receiver sends none.
		from := ipGuest
		if !xrnicServer {
			from = ipXrnic
		}
		n := 0
		for _, p := range roce(t, all, from) {
			if p.BTH.DestQPN() == 0xFFFFFF {
				n++
			}
		}
		if n != 10 {
			t.Errorf("%s sent %d datagrams to the group's QPN, want mckey's 10", from, n)
		}
	}
	checkICRCs(t, c, name, all, prog != "mckey" || !xrnicServer)
}
