package bpf

// The tests' veth pairs and namespaces come from testenv; what is left here is
// what only these tests need: IPv6 off, links down, a peer in the same
// namespace, and XDP state as netlink reports it.

import (
	"fmt"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xrnic/xrnic/testenv"
)

// newVeth returns a veth pair between two namespaces (testenv.NewTestPair): the
// program goes on end A, B is the peer. Neither end has an address and IPv6 is
// off on both, so the kernel sends no ARP, ND or MLD frames that tests would count.
func newVeth(t *testing.T, opts testenv.PairOptions) *testenv.Pair {
	t.Helper()
	opts.NoIPv4, opts.NoIPv6 = true, true
	p := testenv.NewTestPair(t, opts)
	for _, e := range []*testenv.Endpoint{&p.A, &p.B} {
		in(t, e.NS, func() error {
			// /proc/sys/net belongs to the opening thread's namespace: e's.
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+e.Name+"/disable_ipv6", []byte("1"), 0); err != nil {
				return fmt.Errorf("disable IPv6: %w", err)
			}
			return nil
		})
	}
	return p
}

// setDown sets both ends of p down.
func setDown(t *testing.T, p *testenv.Pair) {
	t.Helper()
	for _, e := range []*testenv.Endpoint{&p.A, &p.B} {
		in(t, e.NS, func() error {
			if err := netlink.LinkSetDown(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: e.Index}}); err != nil {
				return fmt.Errorf("set %s down: %w", e.Name, err)
			}
			return nil
		})
	}
}

// peerHere moves end B into A's namespace and sets it up again, so that A's
// peer is visible where the program is attached. p.B.NS is left empty, p.B.Index
// may be stale, and the moved end has IPv6 again: not for tests that count frames.
func peerHere(t *testing.T, p *testenv.Pair) {
	t.Helper()
	nsA, err := netns.GetFromPath(p.A.NS.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer nsA.Close()
	peer := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: p.B.Index}}
	in(t, p.B.NS, func() error {
		if err := netlink.LinkSetNsFd(peer, int(nsA)); err != nil {
			return fmt.Errorf("move peer: %w", err)
		}
		return nil
	})
	in(t, p.A.NS, func() error {
		l, err := netlink.LinkByName(p.B.Name)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("set peer %s up: %w", p.B.Name, err)
		}
		return nil
	})
}

// in runs fn inside ns (NS.Do, on another goroutine: fn must not call t.Fatal)
// and fails t with fn's error or the namespace's.
func in(t *testing.T, ns *testenv.NS, fn func() error) {
	t.Helper()
	if err := ns.Do(fn); err != nil {
		t.Fatalf("in %s: %v", ns.Name, err)
	}
}

// attach runs Attach on end e inside its namespace, where Attach looks the name up.
func attach(t *testing.T, e *testenv.Endpoint, opts AttachOptions) (a *Attachment, err error) {
	t.Helper()
	in(t, e.NS, func() error { a, err = Attach(e.Name, opts); return nil })
	return a, err
}

// xdpState returns end e's XDP attachment as netlink reports it.
func xdpState(t *testing.T, e *testenv.Endpoint) netlink.LinkXdp {
	t.Helper()
	h, err := e.NS.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByIndex(e.Index)
	if err != nil {
		t.Fatalf("link %s: %v", e.Name, err)
	}
	if l.Attrs().Xdp == nil {
		return netlink.LinkXdp{}
	}
	return *l.Attrs().Xdp
}
