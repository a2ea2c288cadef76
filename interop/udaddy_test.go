//go:build interop

package interop

import (
	"strings"
	"testing"

	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/nic/wire"
)

// udaddy: two UD connections, ten messages of 1000 bytes each way on each.
const udaddyArgs = "-c 2 -C 10 -S 1000"

// udaddyPair runs rdma-core's udaddy in the guest against bench udaddy: UD QPs
// of the UDP port space resolved through SIDR (the rdma_cm header in the
// SIDR_REQ, the QPN and Q_Key in the SIDR_REP), the client's SENDs with
// immediate data, the server's replies through an address handle made from
// the first message's GRH. Both sides must print udaddy's lines for a clean
// run, the same in the same role, and the capture must hold the SIDR
// exchange and every message.
func udaddyPair(t *testing.T, g *guest, xrnicServer bool) {
	name := artifactName(t)
	var bench []string
	var guestCmd string
	if xrnicServer {
		bench = append([]string{suite.bench, "udaddy", "-b", ipXrnic}, strings.Fields(udaddyArgs)...)
		guestCmd = "udaddy " + udaddyArgs + " -s"
	} else {
		bench = append([]string{suite.bench, "udaddy"}, strings.Fields(udaddyArgs)...)
		bench = append(bench, "-s")
		guestCmd = "udaddy " + udaddyArgs
	}
	c, xOut, gOut := playWith(t, g, name, bench, guestCmd, xrnicServer, "udaddy: starting server", nil, func(j *job) {
		g.waitCMListen(t, 7174, "udaddy's listener", j)
	})
	const client = "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	const server = "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\n" +
		"test complete\nreturn status 0\n"
	xWant, gWant := client, server
	if xrnicServer {
		xWant, gWant = server, client
	}
	if got := withoutLog(xOut); got != xWant {
		t.Errorf("bench udaddy printed:\n%s\nwant udaddy's:\n%s", got, xWant)
	}
	if gOut != gWant {
		t.Errorf("the guest's udaddy printed:\n%s\nwant:\n%s", gOut, gWant)
	}
	all := frames(t, c.path)
	sidr := cmMADs(all)
	if got := strings.Join(sidr, " "); got != "SIDR_REQ SIDR_REQ SIDR_REP SIDR_REP" && got != "SIDR_REQ SIDR_REP SIDR_REQ SIDR_REP" {
		t.Errorf("CM MADs on the wire: %s, want a SIDR_REQ and its SIDR_REP per connection", got)
	}
	for _, src := range []string{ipXrnic, ipGuest} {
		n := 0
		for _, p := range roce(t, all, src) {
			if p.BTH.Opcode() == wire.UDSendOnlyWithImmediate && p.BTH.DestQPN() != 1 {
				n++
			}
		}
		if n != 20 {
			t.Errorf("%s sent %d UD SENDs with immediate data, want 2 connections × 10", src, n)
		}
	}
	checkICRC(t, c, name, all)
	t.Logf("udaddy %s: SIDR %s; 20 messages each way", udaddyArgs, strings.Join(sidr, " "))
}

// withoutLog drops bench's log lines (the link's report) from its output.
func withoutLog(out string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if !strings.Contains(l, " xrnic: ") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// cmMADs names the CM MADs of a capture, in order.
func cmMADs(all []frame) []string {
	var names []string
	for _, f := range all {
		if isRoCEv2(f.data) && len(f.data) >= mad.Size+4 {
			if _, msg, err := mad.Parse(f.data[len(f.data)-4-mad.Size : len(f.data)-4]); err == nil {
				names = append(names, msg.Attr().String())
			}
		}
	}
	return names
}
