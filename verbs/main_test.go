package verbs

import (
	"net/netip"
	"testing"

	"github.com/xrnic/xrnic/internal/testutil/leakcheck"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// memDevices opens two devices back to back over a memory link.
func memDevices(t testing.TB) (a, b *Device) {
	t.Helper()
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	open := func(l link.Link, ip string) *Device {
		d, err := Open(Options{Link: l, GIDs: []netdev.GID{netdev.GIDFromAddr(netip.MustParseAddr(ip))}})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return d
	}
	a, b = open(la, "192.0.2.11"), open(lb, "192.0.2.12")
	t.Cleanup(func() {
		a.Close()
		b.Close()
		la.Close()
		lb.Close()
	})
	return a, b
}
