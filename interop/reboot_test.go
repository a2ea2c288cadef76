//go:build interop

package interop

import "testing"

// TestGuestRebooted: a guest whose network dies mid-suite is rebooted and the
// pair run again. Under TCG the guest's network once died for good in a CI
// run, and every later pair failed ("no route to host"). Here a netem qdisc
// that drops all the guest sends plays the dead transmit queue.
func TestGuestRebooted(t *testing.T) {
	startBudget(t)
	g := boot(t, 1024)
	if out, err := g.exec(t, shortTimeout, "tc qdisc add dev eth0 root netem loss 100%"); err != nil {
		t.Fatalf("netem in the guest: %v: %s", err, out)
	}
	perftestPair(t, g, "send_lat", "-s 2 -n 100", false)
	if g.reboots != 1 {
		t.Fatalf("the guest was rebooted %d times, want 1", g.reboots)
	}
}
