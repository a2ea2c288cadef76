//go:build interop

package interop

import (
	"strings"
	"testing"
)

// The soak's impairment, on both directions. In the guest, netem on eth0
// delays, reorders and drops rxe's frames: xrnic receives PSNs out of order,
// duplicates and gaps while rxe retransmits. On xrnic's side the XDP program
// on va0 drops a share of xrnic's frames before they reach the bridge, so rxe
// NAKs and xrnic goes back. (Neither this host's kernel nor the guest's has
// what delaying xrnic's frames would take: no netem here, no ifb there; and
// AF_XDP transmits past vb0's qdisc.)
// No jitter: netem's jitter reorders nearly every packet at these rates, and
// go-back-N (RoCE's only recovery) then livelocks, rxe against rxe as much
// as against xrnic.
const (
	soakNetem = "limit 10000 delay 1ms reorder 1% 25% loss 0.5%"
	soakDrop  = 0.01
)

// soakCases run under impairment: SEND, WRITE and READ over four QPs in both
// directions at once (-b), so that every WR must complete successfully
// however the wire behaves; the SEND receiver over four QPs with rxe sending,
// which once ended in "remote invalid request" (issue 19: rxe shifted its
// PSNs after a late ACK, TestRxeRetryShift); and data-checked
// ping-pongs. The guest moves 20-40 MB/s under emulation, less with netem: a
// window of 4 QPs x 128 x 64 KiB would take it longer than perftest's 67 ms
// ACK timeout (-u 14) to drain, so that every timeout resends the window
// (go-back-N) and retry_cnt runs out on either side; -t 16 and -u 17 (0.5 s)
// keep the window within what the timer allows, as one would for a slow
// peer, and 16 KiB messages (16 packets) keep each run within minutes.
var soakCases = []struct{ test, args string }{
	{"send_bw", "-b -q 4 -s 16384 -n 200 -t 8 -u 17"},
	{"write_bw", "-b -q 4 -s 16384 -n 200 -t 8 -u 17"},
	{"read_bw", "-b -q 4 -s 16384 -n 200 -u 17"},
	{"send_bw", "-q 4 -s 16384 -n 500 -u 17"},
	{"send_bw", "-q 4 -t 128 -n 300 -u 17"},      // perftest's 64 KiB: rxe asks for an ACK mid-message (every 64 packets)
	{"send_bw", "-q 4 -t 128 -r 8 -n 300 -u 17"}, // the same with 8 receives a QP against 128 in flight
}

// impair puts the soak's impairment on both directions until the test ends.
func impair(t *testing.T, g *guest) {
	t.Helper()
	g.netem(t, soakNetem)
	a := dropOnWire(t, soakDrop)
	t.Cleanup(func() {
		c, err := a.Counters()
		t.Logf("XDP on %s dropped %d of xrnic's %d RoCE frames (%v)", ifCapture, c.DroppedInjected, c.Seen, err)
	})
}

// soak runs the soak cases and the data-checked ping-pongs, both roles.
func soak(t *testing.T, g *guest) {
	for _, c := range soakCases {
		n := caseName(c.test, c.args)
		t.Run(n+"/xrnic_server", func(t *testing.T) { impair(t, g); perftestPair(t, g, c.test, c.args, true) })
		t.Run(n+"/xrnic_client", func(t *testing.T) { impair(t, g); perftestPair(t, g, c.test, c.args, false) })
	}
	for _, k := range []string{"rc_pingpong", "srq_pingpong"} {
		t.Run(k+"/xrnic_server", func(t *testing.T) { impair(t, g); pingpongWith(t, g, k, 65536, "", true, endRace) })
		t.Run(k+"/xrnic_client", func(t *testing.T) { impair(t, g); pingpongWith(t, g, k, 65536, "", false, endRace) })
	}
}

// endRace is the examples' end of run under loss. A side leaves (destroying
// its QPs) once it has counted its iterations; the other side's last send
// on a QP may still wait for its ACK. If the wire lost that ACK, the resends
// find no QP, and the example fails with "transport retry counter exceeded".
// rdma-core's examples do the same against each other: they have no closing
// handshake. So a run in which one side finished every iteration and the
// other ran out of retries is run again.
func endRace(xOut, gOut string) string {
	retry := func(out string) bool { return strings.Contains(out, "transport retry counter exceeded") }
	done := func(out string) bool { return ppIters.MatchString(out) && !retry(out) }
	if retry(xOut) && done(gOut) || retry(gOut) && done(xOut) {
		return "a last ACK lost as the peer left (the examples' end of run)"
	}
	return ""
}
