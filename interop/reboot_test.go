//go:build interop

package interop

import (
	"strings"
	"testing"
)

// TestGuestRebooted: a guest whose network dies mid-suite is rebooted and the
// pair run again. Under TCG the guest's network once died for good in a CI
// run, and every later pair failed ("no route to host"). Here a netem qdisc
// that drops all the guest sends plays the dead transmit queue.
func TestGuestRebooted(t *testing.T) {
	startBudget(t)
	g := boot(t, 1024)
	// The test's own impairment, which the rebooted guest must get back, and
	// the fault, which it must not: netem changed to drop all, outside g.netem.
	g.netem(t, "delay 1ms")
	if out, err := g.exec(t, shortTimeout, "tc qdisc change dev eth0 root netem loss 100%"); err != nil {
		t.Fatalf("netem in the guest: %v: %s", err, out)
	}
	perftestPair(t, g, "send_lat", "-s 2 -n 100", false)
	if g.reboots != 1 {
		t.Fatalf("the guest was rebooted %d times, want 1", g.reboots)
	}
	out, err := g.exec(t, shortTimeout, "tc qdisc show dev eth0 root")
	if err != nil || !strings.Contains(out, "netem") || !strings.Contains(out, "delay 1ms") || strings.Contains(out, "loss") {
		t.Fatalf("the rebooted guest's qdisc is not the test's netem delay 1ms (%v):\n%s", err, out)
	}
}
