// Package memdev opens two verbs devices wired back to back over a memory
// link, for the tests of the packages above verbs (verbs' own tests cannot
// import it: it imports verbs).
package memdev

import (
	"net/netip"
	"testing"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
)

// Pair opens a device with GID a and one with GID b on the two ends of a
// memory link; the test's cleanup closes the devices, then the link.
func Pair(t testing.TB, a, b netip.Addr) (*verbs.Device, *verbs.Device) {
	t.Helper()
	return PairWrapped(t, a, b, nil)
}

// PairWrapped is Pair with a's link wrapped by wrapA (nil: not wrapped), a
// test's hand on what a sends.
func PairWrapped(t testing.TB, a, b netip.Addr, wrapA func(link.Link) link.Link) (*verbs.Device, *verbs.Device) {
	t.Helper()
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var l link.Link = la
	if wrapA != nil {
		l = wrapA(la)
	}
	da, err := verbs.Open(verbs.Options{Link: l, GIDs: []verbs.GID{verbs.GIDFromAddr(a)}})
	if err != nil {
		la.Close()
		lb.Close()
		t.Fatal(err)
	}
	db, err := verbs.Open(verbs.Options{Link: lb, GIDs: []verbs.GID{verbs.GIDFromAddr(b)}})
	if err != nil {
		da.Close()
		la.Close()
		lb.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		da.Close()
		db.Close()
		la.Close()
		lb.Close()
	})
	return da, db
}
