//go:build interop

package interop

import (
	"os/exec"
	"strings"
	"testing"
)

// The soak's impairment: netem in the guest on rxe's frames (eth0) and on the
// tap that carries xrnic's frames to the guest (tap-a, in the guest's
// namespace: AF_XDP transmits past vb0's qdisc, so the wire is impaired one
// hop on). Loss makes both sides retransmit; delay with jitter and reordering
// make PSNs arrive out of order, duplicates and NAK storms included.
const soakNetem = "delay 2ms 1ms loss 1% reorder 10% 50%"

// soakCases run under impairment: SEND, WRITE and READ over four QPs in both
// directions at once (-b), so that every WR must complete successfully
// however the wire behaves; the SEND receiver over four QPs with rxe sending,
// which once ended in "remote invalid request" (issue 19); and data-checked
// ping-pongs.
var soakCases = []struct{ test, args string }{
	{"send_bw", "-b -q 4 -s 65536 -n 300"},
	{"write_bw", "-b -q 4 -s 65536 -n 300"},
	{"read_bw", "-b -q 4 -s 65536 -n 300"},
	{"send_bw", "-q 4 -s 65536 -n 1000"},
}

// impair puts soakNetem on both directions until the test ends.
func impair(t *testing.T, g *guest) {
	t.Helper()
	if out, err := g.exec(t, shortTimeout, "tc qdisc add dev eth0 root netem "+soakNetem); err != nil {
		t.Fatalf("netem in the guest: %v: %s", err, out)
	}
	tap := func(args ...string) error {
		out, err := exec.Command("ip", append([]string{"netns", "exec", nsGuest, "tc", "qdisc"}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("tc qdisc %s on tap-a: %v: %s", strings.Join(args, " "), err, out)
		}
		return err
	}
	if err := tap(append([]string{"add", "dev", "tap-a", "root", "netem"}, strings.Fields(soakNetem)...)...); err != nil {
		t.FailNow()
	}
	t.Cleanup(func() {
		_ = tap("del", "dev", "tap-a", "root")
		if out, err := g.exec(t, shortTimeout, "tc qdisc del dev eth0 root"); err != nil {
			t.Errorf("netem in the guest: %v: %s", err, out)
		}
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
		t.Run(k+"/xrnic_server", func(t *testing.T) { impair(t, g); pingpong(t, g, k, 65536, "", true) })
		t.Run(k+"/xrnic_client", func(t *testing.T) { impair(t, g); pingpong(t, g, k, 65536, "", false) })
	}
}
