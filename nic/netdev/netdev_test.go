package netdev_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"

	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lookupIn runs Lookup inside e's namespace.
func lookupIn(t *testing.T, e *testenv.Endpoint) *netdev.Interface {
	t.Helper()
	var ifc *netdev.Interface
	if err := e.Do(func() (err error) {
		ifc, err = netdev.Lookup(e.Name)
		return err
	}); err != nil {
		t.Fatalf("Lookup(%s): %v", e.Name, err)
	}
	return ifc
}

// setLink runs fn on e's link inside e's namespace (LinkSetDown, LinkSetUp, ...).
func setLink(t *testing.T, e *testenv.Endpoint, fn func(netlink.Link) error) {
	t.Helper()
	if err := e.Do(func() error {
		l, err := netlink.LinkByIndex(e.Index)
		if err != nil {
			return err
		}
		return fn(l)
	}); err != nil {
		t.Fatalf("%s: %v", e.Name, err)
	}
}

func TestLookup(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4200, NumTxQueues: 2, NumRxQueues: 2})
	ifc := lookupIn(t, &p.A)
	if ifc.Name != p.A.Name || ifc.Index != p.A.Index || ifc.MTU != 4200 || ifc.MAC.String() != p.A.MAC.String() ||
		ifc.Type != "veth" || ifc.NumTxQueues != 2 || ifc.NumRxQueues != 2 {
		t.Errorf("Lookup: got %+v; want name %s index %d MTU 4200 MAC %s veth 2/2 queues",
			ifc, p.A.Name, p.A.Index, p.A.MAC)
	}
	if !ifc.Up || !ifc.AdminUp || ifc.OperState != "up" || ifc.CheckUp() != nil {
		t.Errorf("Lookup: up %v admin %v oper %q CheckUp %v; want up", ifc.Up, ifc.AdminUp, ifc.OperState, ifc.CheckUp())
	}
	for _, want := range []netip.Prefix{p.A.IPv4Prefix, p.A.IPv6Prefix} {
		if !slices.Contains(ifc.Addrs, want.Addr()) || !slices.Contains(ifc.Prefixes, want) {
			t.Errorf("Lookup: addresses %v / %v lack %v", ifc.Addrs, ifc.Prefixes, want)
		}
	}
	if len(ifc.Addrs) != len(ifc.Prefixes) || !ifc.Addrs[0].Is4() {
		t.Errorf("Lookup: Addrs %v and Prefixes %v: want same length, IPv4 first", ifc.Addrs, ifc.Prefixes)
	}
	var byIndex *netdev.Interface
	if err := p.A.Do(func() (err error) { byIndex, err = netdev.LookupIndex(p.A.Index); return err }); err != nil ||
		byIndex.Name != p.A.Name {
		t.Errorf("LookupIndex(%d) = %v, %v", p.A.Index, byIndex, err)
	}
}

func TestLookupMissing(t *testing.T) {
	// Reading links needs no privilege: this runs in the test's own namespace.
	for _, name := range []string{"xrnic-nonexist", "", "a-name-longer-than-ifnamsiz"} {
		if _, err := netdev.Lookup(name); !errors.Is(err, netdev.ErrNoInterface) {
			t.Errorf("Lookup(%q): got %v, want ErrNoInterface", name, err)
		}
	}
	for _, idx := range []int{0, -1, 1 << 30} {
		if _, err := netdev.LookupIndex(idx); !errors.Is(err, netdev.ErrNoInterface) {
			t.Errorf("LookupIndex(%d): got %v, want ErrNoInterface", idx, err)
		}
	}
	if _, err := netdev.SubscribeLinkEvents(context.Background(), 1<<30); !errors.Is(err, netdev.ErrNoInterface) {
		t.Errorf("SubscribeLinkEvents(missing): got %v, want ErrNoInterface", err)
	}
}

// waitState polls Lookup until up matches (carrier changes go through linkwatch,
// which may lag by a second).
func waitState(t *testing.T, e *testenv.Endpoint, up bool) *netdev.Interface {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ifc := lookupIn(t, e)
		if ifc.Up == up || time.Now().After(deadline) {
			return ifc
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestInterfaceDown(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})

	setLink(t, &p.B, netlink.LinkSetDown) // the peer: A keeps IFF_UP, loses carrier
	ifc := waitState(t, &p.A, false)
	if ifc.Up || !ifc.AdminUp || !errors.Is(ifc.CheckUp(), netdev.ErrInterfaceDown) {
		t.Errorf("peer down: up %v admin %v oper %s CheckUp %v; want down, admin up", ifc.Up, ifc.AdminUp, ifc.OperState, ifc.CheckUp())
	}
	setLink(t, &p.B, netlink.LinkSetUp)
	if ifc := waitState(t, &p.A, true); !ifc.Up {
		t.Errorf("peer up again: A still down (oper %s)", ifc.OperState)
	}

	setLink(t, &p.A, netlink.LinkSetDown)
	ifc = waitState(t, &p.A, false)
	if ifc.Up || ifc.AdminUp || !errors.Is(ifc.CheckUp(), netdev.ErrInterfaceDown) {
		t.Errorf("own link down: up %v admin %v CheckUp %v", ifc.Up, ifc.AdminUp, ifc.CheckUp())
	}
}

func TestGIDTable(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	def, _ := netdev.DefaultGID(p.A.MAC)

	// The kernel adds its EUI-64 link-local once the carrier is up; wait for it, so
	// the test checks that it folds into the default GID instead of adding an entry.
	var ifc *netdev.Interface
	for deadline := time.Now().Add(5 * time.Second); ; {
		ifc = lookupIn(t, &p.A)
		if slices.ContainsFunc(ifc.Addrs, netip.Addr.IsLinkLocalUnicast) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	i := slices.IndexFunc(ifc.Addrs, netip.Addr.IsLinkLocalUnicast)
	if i < 0 {
		t.Fatalf("no IPv6 link-local on %s: %v", p.A.Name, ifc.Addrs)
	}
	if netdev.GIDFromAddr(ifc.Addrs[i]) != def {
		t.Errorf("kernel link-local %s differs from the default GID %s", ifc.Addrs[i], def)
	}

	tab := netdev.GIDTable(ifc)
	want := []netdev.GID{def, netdev.GIDFromAddr(p.A.IPv4), netdev.GIDFromAddr(p.A.IPv6)}
	if len(tab) != len(want) {
		t.Fatalf("GIDTable: got %v, want %v", tab, want)
	}
	for i, e := range tab {
		if e.GID != want[i] || e.Index != i || e.Type != netdev.GIDTypeRoCEv2 || e.Netdev != p.A.Name || e.Default != (i == 0) {
			t.Errorf("GID[%d]: got %+v (%s), want %s", i, e, e.GID, want[i])
		}
	}
	if tab[1].GID.String() != "::ffff:192.0.2.1" || !tab[1].GID.IsIPv4Mapped() {
		t.Errorf("GID[1] = %s, want ::ffff:192.0.2.1", tab[1].GID)
	}
	t.Logf("GID table of %s (MAC %s):", p.A.Name, p.A.MAC)
	for _, e := range tab {
		t.Logf("  GID[%3d]: %s  %s, %s", e.Index, e.GID.FullString(), e.GID, e.Type)
	}

	// More addresses: IPv4 in the kernel's order, then IPv6 in the kernel's order
	// (which puts the newest global first, and globals before link-locals).
	if err := p.A.Do(func() error {
		l, err := netlink.LinkByIndex(p.A.Index)
		if err != nil {
			return err
		}
		for _, s := range []string{"198.51.100.1/24", "2001:db8:1::1/64"} {
			a, _ := netlink.ParseAddr(s)
			a.Flags = 0x02 // IFA_F_NODAD
			if err := netlink.AddrAdd(l, a); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ifc = lookupIn(t, &p.A)
	var wantAll []netdev.GID
	wantAll = append(wantAll, def)
	for _, a := range ifc.Addrs {
		if a.Is4() {
			wantAll = append(wantAll, netdev.GIDFromAddr(a))
		}
	}
	for _, a := range ifc.Addrs {
		if a.Is6() && netdev.GIDFromAddr(a) != def {
			wantAll = append(wantAll, netdev.GIDFromAddr(a))
		}
	}
	tab = netdev.GIDTable(ifc)
	if len(tab) != 5 || len(wantAll) != 5 {
		t.Fatalf("GIDTable with 2+2 addresses: got %v, want 5 entries %v (addresses %v)", tab, wantAll, ifc.Addrs)
	}
	for i := range tab {
		if tab[i].GID != wantAll[i] {
			t.Errorf("GID[%d] = %s, want %s (addresses %v)", i, tab[i].GID, wantAll[i], ifc.Addrs)
		}
	}
}

func resolveIn(t *testing.T, e *testenv.Endpoint, ctx context.Context, dst netip.Addr) (netdev.Neighbor, error) {
	t.Helper()
	var n netdev.Neighbor
	err := e.Do(func() (err error) {
		n, err = netdev.ResolveNeighbor(ctx, dst)
		return err
	})
	return n, err
}

func TestResolveNeighbor(t *testing.T) {
	for _, static := range []bool{true, false} {
		name := "kernel"
		if static {
			name = "static"
		}
		t.Run(name, func(t *testing.T) {
			p := testenv.NewTestPair(t, testenv.PairOptions{NoStaticNeighbors: !static})
			for _, c := range []struct{ dst, src netip.Addr }{{p.B.IPv4, p.A.IPv4}, {p.B.IPv6, p.A.IPv6}} {
				start := time.Now()
				n, err := resolveIn(t, &p.A, timeout(t, 5*time.Second), c.dst)
				if err != nil {
					t.Errorf("ResolveNeighbor(%s): %v", c.dst, err)
					continue
				}
				if n.LinkIndex != p.A.Index || n.MAC.String() != p.B.MAC.String() || n.Src != c.src || n.NextHop != c.dst {
					t.Errorf("ResolveNeighbor(%s) = %+v; want link %d MAC %s src %s next hop %s",
						c.dst, n, p.A.Index, p.B.MAC, c.src, c.dst)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("ResolveNeighbor(%s) took %v", c.dst, d)
				}
			}
		})
	}
}

func TestResolveNeighborGateway(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{NoStaticNeighbors: true})
	if err := p.A.Do(func() error {
		for _, r := range []struct{ dst, gw string }{
			{"198.51.100.0/24", "192.0.2.2"},
			{"2001:db8:ffff::/48", "2001:db8::2"},
		} {
			_, dst, _ := net.ParseCIDR(r.dst)
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: p.A.Index, Dst: dst, Gw: net.ParseIP(r.gw)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dst, gw, src netip.Addr }{
		{netip.MustParseAddr("198.51.100.7"), p.B.IPv4, p.A.IPv4},
		{netip.MustParseAddr("2001:db8:ffff::7"), p.B.IPv6, p.A.IPv6},
	} {
		n, err := resolveIn(t, &p.A, timeout(t, 5*time.Second), c.dst)
		if err != nil || n.NextHop != c.gw || n.MAC.String() != p.B.MAC.String() || n.Src != c.src || n.LinkIndex != p.A.Index {
			t.Errorf("ResolveNeighbor(%s) = %+v, %v; want next hop %s MAC %s src %s", c.dst, n, err, c.gw, p.B.MAC, c.src)
		}
	}
}

func TestResolveNeighborErrors(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})

	// On-link but absent: bounded by ctx, wraps both sentinels.
	for _, dst := range []string{"192.0.2.99", "2001:db8::99"} {
		start := time.Now()
		_, err := resolveIn(t, &p.A, timeout(t, 300*time.Millisecond), netip.MustParseAddr(dst))
		if !errors.Is(err, netdev.ErrNeighborUnresolved) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ResolveNeighbor(%s): got %v, want ErrNeighborUnresolved and DeadlineExceeded", dst, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("ResolveNeighbor(%s) took %v despite a 300 ms context", dst, d)
		}
	}
	// No default route in a fresh namespace.
	for _, dst := range []string{"203.0.113.1", "2001:db8:9::1"} {
		if _, err := resolveIn(t, &p.A, timeout(t, time.Second), netip.MustParseAddr(dst)); !errors.Is(err, netdev.ErrNoRoute) {
			t.Errorf("ResolveNeighbor(%s): got %v, want ErrNoRoute", dst, err)
		}
	}
	for _, dst := range []netip.Addr{p.A.IPv4, p.A.IPv6} {
		if _, err := resolveIn(t, &p.A, timeout(t, time.Second), dst); !errors.Is(err, netdev.ErrLocalAddress) {
			t.Errorf("ResolveNeighbor(own %s): got %v, want ErrLocalAddress", dst, err)
		}
	}
}

// next waits for an event matching ok, skipping others; it fails after 5 s.
func next(t *testing.T, ch <-chan netdev.LinkEvent, what string, ok func(netdev.LinkEvent) bool) netdev.LinkEvent {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	for {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatalf("waiting for %s: channel closed", what)
			}
			if ev.Err != nil {
				t.Fatalf("waiting for %s: %v", what, ev.Err)
			}
			if ok(ev) {
				return ev
			}
			t.Logf("waiting for %s: skipped %+v", what, ev)
		case <-timer.C:
			t.Fatalf("no %s event within 5 s", what)
		}
	}
}

func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestLinkEvents(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	fds := fdCount(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Subscribed from inside A's namespace; events keep coming after Do returns.
	var ch <-chan netdev.LinkEvent
	if err := p.A.Do(func() (err error) {
		ch, err = netdev.SubscribeLinkEvents(ctx, p.A.Index)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	up := func(want bool) func(netdev.LinkEvent) bool {
		return func(ev netdev.LinkEvent) bool { return ev.Up == want }
	}

	ev := next(t, ch, "initial state", func(netdev.LinkEvent) bool { return true })
	if ev.Index != p.A.Index || ev.Name != p.A.Name || !ev.Up || ev.MTU != 1500 || ev.MAC.String() != p.A.MAC.String() {
		t.Errorf("initial event %+v; want %s index %d up MTU 1500", ev, p.A.Name, p.A.Index)
	}
	setLink(t, &p.B, netlink.LinkSetDown)
	next(t, ch, "down (peer down)", up(false))
	setLink(t, &p.B, netlink.LinkSetUp)
	next(t, ch, "up (peer up)", up(true))
	setLink(t, &p.A, netlink.LinkSetDown)
	next(t, ch, "down (own link down)", up(false))
	setLink(t, &p.A, netlink.LinkSetUp)
	next(t, ch, "up (own link up)", up(true))
	setLink(t, &p.A, func(l netlink.Link) error { return netlink.LinkSetMTU(l, 4000) })
	if ev := next(t, ch, "MTU change", func(ev netdev.LinkEvent) bool { return ev.MTU != 1500 }); ev.MTU != 4000 || !ev.Up {
		t.Errorf("MTU event %+v, want MTU 4000, up", ev)
	}

	cancel()
	closed := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-closed:
			t.Fatal("channel still open 5 s after cancel")
		}
	}
	goleak.VerifyNone(t)
	if got := fdCount(t); got != fds {
		t.Errorf("descriptors: %d before subscribing, %d after cancel", fds, got)
	}
}

func TestLinkEventsRemoved(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ch <-chan netdev.LinkEvent
	if err := p.A.Do(func() (err error) {
		ch, err = netdev.SubscribeLinkEvents(ctx, 0) // every link in A's namespace
		return err
	}); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "initial state of the veth", func(ev netdev.LinkEvent) bool { return ev.Index == p.A.Index })
	setLink(t, &p.B, netlink.LinkDel) // deleting one end deletes both
	ev := next(t, ch, "removal", func(ev netdev.LinkEvent) bool { return ev.Index == p.A.Index && ev.Removed })
	if ev.Up {
		t.Errorf("removal event %+v: want Up false", ev)
	}
	cancel()
	for range ch {
	}
}

func TestLinkEventsCancelWithoutReading(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	var ch <-chan netdev.LinkEvent
	if err := p.A.Do(func() (err error) {
		ch, err = netdev.SubscribeLinkEvents(ctx, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Fill the pipeline without reading, then cancel: nothing may stay blocked.
	for range 20 {
		setLink(t, &p.A, netlink.LinkSetDown)
		setLink(t, &p.A, netlink.LinkSetUp)
	}
	cancel()
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("channel still open 5 s after cancel")
		}
	}
	goleak.VerifyNone(t)
}

func TestResolveNeighborLinkLocal(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{NoStaticNeighbors: true})
	// B's default GID is its EUI-64 link-local; it answers ND once its DAD is over.
	ll, _ := netdev.DefaultGID(p.B.MAC)
	for _, zone := range []string{p.A.Name, strconv.Itoa(p.A.Index)} {
		dst := ll.Addr().WithZone(zone)
		n, err := resolveIn(t, &p.A, timeout(t, 5*time.Second), dst)
		// Src is the kernel's choice: the global address while A's own link-local is
		// still tentative, its link-local afterwards.
		if err != nil || n.MAC.String() != p.B.MAC.String() || n.LinkIndex != p.A.Index || !n.Src.Is6() ||
			n.NextHop != ll.Addr() {
			t.Errorf("ResolveNeighbor(%s) = %+v, %v; want MAC %s on link %d, next hop %s", dst, n, err, p.B.MAC, p.A.Index, ll)
		}
	}
}
