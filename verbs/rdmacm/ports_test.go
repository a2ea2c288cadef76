package rdmacm

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xrnic/xrnic/nic/cm"
)

// newID makes an ID on a channel of the test's, destroyed at its end (again:
// ErrState, ignored).
func newID(t *testing.T, ps PortSpace) *ID {
	t.Helper()
	ch := NewEventChannel()
	id, err := ch.CreateID(nil, ps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		id.Destroy()
		ch.Close()
	})
	return id
}

// bound makes an ID bound to a, with reuseaddr set first if reuse.
func bound(t *testing.T, ps PortSpace, a netip.AddrPort, reuse bool) *ID {
	t.Helper()
	id := newID(t, ps)
	if reuse {
		if err := id.SetReuseAddr(true); err != nil {
			t.Fatal(err)
		}
	}
	if err := id.BindAddr(a); err != nil {
		t.Fatalf("bind %v: %v", a, err)
	}
	return id
}

// TestBindPortConflicts: rdma_bind_addr reserves its port in its port space
// (cma_get_port), and a second bind that overlaps it fails at once as
// cma_check_port has it: the same address EADDRINUSE, either address
// unspecified EADDRNOTAVAIL; other addresses, and other port spaces, are
// free. IPv4 IDs are AF-only, IPv6 ones not unless they set AFONLY.
func TestBindPortConflicts(t *testing.T) {
	memDevices(t, cm.Config{})
	any4, any6 := netip.IPv4Unspecified(), netip.IPv6Unspecified()
	for _, c := range []struct {
		name        string
		first, next netip.Addr
		nextPS      PortSpace
		afonly6     bool // the IPv6 ID sets AFONLY before its bind
		want        error
	}{
		{name: "same address", first: addrB, next: addrB, want: ErrInUse},
		{name: "specific then unspecified", first: addrB, next: any4, want: ErrAddrNotAvail},
		{name: "unspecified then specific", first: any4, next: addrB, want: ErrAddrNotAvail},
		{name: "both unspecified", first: any4, next: any4, want: ErrAddrNotAvail},
		{name: "other address", first: addrA, next: addrB},
		{name: "other port space", first: addrB, next: addrB, nextPS: PSUDP},
		{name: "IPv6 unspecified over IPv4", first: any4, next: any6, want: ErrAddrNotAvail},
		{name: "IPv6 AF-only beside IPv4", first: any4, next: any6, afonly6: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			bound(t, PSTCP, netip.AddrPortFrom(c.first, 7010), false)
			ps := c.nextPS
			if ps == 0 {
				ps = PSTCP
			}
			id := newID(t, ps)
			if c.afonly6 {
				if err := id.SetAFOnly(true); err != nil {
					t.Fatal(err)
				}
			}
			err := id.BindAddr(netip.AddrPortFrom(c.next, 7010))
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("second bind: got %v, want %v", err, c.want)
			}
			if c.want != nil && id.LocalAddr().IsValid() {
				t.Errorf("a failed bind left the ID at %v", id.LocalAddr())
			}
		})
	}
}

// TestBindPortZero: port 0 draws a port of the ephemeral range at bind
// (cma_alloc_any_port), which LocalAddr names before any listen or connect,
// one not held already; rdma_resolve_addr binds an idle ID so too.
func TestBindPortZero(t *testing.T) {
	memDevices(t, cm.Config{})
	seen := map[uint16]bool{}
	for _, a := range []netip.Addr{addrB, addrB, netip.IPv4Unspecified()} {
		p := bound(t, PSTCP, netip.AddrPortFrom(a, 0), false).LocalAddr().Port()
		if p < ephemeralLo || p > ephemeralHi || seen[p] {
			t.Fatalf("bound %v:0: port %d (ports before: %v)", a, p, seen)
		}
		seen[p] = true
	}
	id := newID(t, PSTCP)
	if err := id.ResolveAddr(addrA, netip.AddrPortFrom(addrB, 7011)); err != nil {
		t.Fatal(err)
	}
	if p := id.LocalAddr().Port(); p < ephemeralLo || p > ephemeralHi || seen[p] {
		t.Fatalf("resolved from idle: port %d, want a free ephemeral one", p)
	}
	// The drawn port is reserved: a bind of it fails.
	l := bound(t, PSTCP, netip.AddrPortFrom(addrB, 0), false)
	other := newID(t, PSTCP)
	if err := other.BindAddr(l.LocalAddr()); !errors.Is(err, ErrInUse) {
		t.Fatalf("bind of a drawn port: %v, want ErrInUse", err)
	}
	if err := l.Listen(1); err != nil || l.LocalAddr().Port() == 0 {
		t.Fatalf("listen: %v at %v", err, l.LocalAddr())
	}
}

// TestPortFreedAtDestroy: rdma_destroy_id frees the port (cma_release_port),
// whether the ID listened or only bound; a bind that failed holds none.
func TestPortFreedAtDestroy(t *testing.T) {
	memDevices(t, cm.Config{})
	a := netip.AddrPortFrom(addrB, 7012)
	for _, listen := range []bool{false, true} {
		id := bound(t, PSTCP, a, false)
		if listen {
			if err := id.Listen(1); err != nil {
				t.Fatal(err)
			}
		}
		failed := newID(t, PSTCP)
		if err := failed.BindAddr(a); !errors.Is(err, ErrInUse) {
			t.Fatalf("bind while held: %v", err)
		}
		if err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
		again := bound(t, PSTCP, a, false)
		if err := again.Listen(1); err != nil {
			t.Fatalf("listen after the holder's destroy: %v", err)
		}
		again.Destroy()
	}
	reg.Lock()
	n := len(reg.ports)
	reg.Unlock()
	if n != 0 {
		t.Fatalf("%d bind lists left", n)
	}
}

// TestReuseAddr: IDs that both set reuseaddr share an address and port; one
// that does not is refused. A listener shares with nobody: binding beside it
// fails even with reuseaddr, and rdma_listen on a shared port checks again
// without reuse (cma_listen's cma_bind_listen), until the others go.
func TestReuseAddr(t *testing.T) {
	memDevices(t, cm.Config{})
	a := netip.AddrPortFrom(addrB, 7013)
	first := bound(t, PSTCP, a, true)
	second := bound(t, PSTCP, a, true)
	if err := newID(t, PSTCP).BindAddr(a); !errors.Is(err, ErrInUse) {
		t.Fatalf("bind without reuseaddr: %v, want ErrInUse", err)
	}
	if err := first.Listen(1); !errors.Is(err, ErrInUse) {
		t.Fatalf("listen on a shared port: %v, want ErrInUse", err)
	}
	second.Destroy()
	if err := first.Listen(1); err != nil {
		t.Fatalf("listen, the port its own again: %v", err)
	}
	reuser := newID(t, PSTCP)
	reuser.SetReuseAddr(true)
	if err := reuser.BindAddr(a); !errors.Is(err, ErrInUse) {
		t.Fatalf("reuseaddr bind beside a listener: %v, want ErrInUse", err)
	}
	// An unspecified address on the port overlaps; with reuse on both and
	// no listener, it shares.
	u := netip.AddrPortFrom(netip.IPv4Unspecified(), 7014)
	bound(t, PSTCP, u, true)
	bound(t, PSTCP, netip.AddrPortFrom(addrB, 7014), true)
}

// TestSetReuseAddrState: rdma_set_reuseaddr sets reuse in any state but
// clears it only while idle; rdma_set_afonly only before listen.
func TestSetReuseAddrState(t *testing.T) {
	memDevices(t, cm.Config{})
	id := newID(t, PSTCP)
	if err := id.SetReuseAddr(true); err != nil {
		t.Fatal(err)
	}
	if err := id.SetReuseAddr(false); err != nil {
		t.Fatalf("clear while idle: %v", err)
	}
	if err := id.BindAddr(netip.AddrPortFrom(addrB, 7015)); err != nil {
		t.Fatal(err)
	}
	if err := id.SetReuseAddr(true); err != nil {
		t.Fatalf("set while bound: %v", err)
	}
	if err := id.SetReuseAddr(false); !errors.Is(err, ErrState) {
		t.Fatalf("clear while bound: %v, want ErrState", err)
	}
	// Set after bind, it counts for the next bind (the owner's record).
	bound(t, PSTCP, netip.AddrPortFrom(addrB, 7015), true)
	if err := id.SetAFOnly(true); err != nil {
		t.Fatalf("afonly while bound: %v", err)
	}
	l := bound(t, PSTCP, netip.AddrPortFrom(addrB, 7016), false)
	if err := l.Listen(1); err != nil {
		t.Fatal(err)
	}
	if err := l.SetReuseAddr(true); err != nil {
		t.Fatalf("set while listening: %v", err)
	}
	if err := l.SetAFOnly(true); !errors.Is(err, ErrState) {
		t.Fatalf("afonly while listening: %v, want ErrState", err)
	}
	if err := l.SetOption(Option(3), 1); err == nil { // RDMA_OPTION_ID_ACK_TIMEOUT
		t.Fatal("ACK_TIMEOUT, which xrnic does not take: accepted")
	}
}
