package bpf

// A tiny test-only namespace helper, until testenv/ offers one.

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"github.com/xrnic/xrnic/internal/testutil"
)

// withNetns runs fn on the calling goroutine's OS thread inside a fresh network
// namespace, then moves the thread back. What fn creates there (veths, attached
// programs) goes away with the namespace. fn must stay on this goroutine: t.Run
// and other goroutines run outside the namespace.
func withNetns(t *testing.T, fn func()) {
	t.Helper()
	testutil.RequireRoot(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get netns: %v", err)
	}
	ns, err := netns.New() // creates the namespace and enters it
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatalf("new netns: %v", err)
	}
	defer func() {
		ns.Close()
		err := netns.Set(orig)
		orig.Close()
		if err != nil {
			// Keep the thread locked: the runtime retires it with the goroutine
			// instead of reusing a thread stuck in the test namespace.
			t.Errorf("restore netns: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	fn()
}

// newNetns creates another namespace, without entering it, for moving a veth
// end there. The caller's thread must be locked (inside withNetns).
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	cur, err := netns.Get()
	if err != nil {
		t.Fatalf("get netns: %v", err)
	}
	defer cur.Close()
	other, err := netns.New()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	if err := netns.Set(cur); err != nil {
		t.Fatalf("back to test netns: %v", err)
	}
	return other
}

// vethPair creates name and name+"p" with the given MTU and RX/TX queue counts,
// both up unless down is set. It returns both ends, refreshed. IPv6 is off on
// them, so the kernel sends no ND or MLD frames that tests would count.
func vethPair(t *testing.T, name string, mtu, queues int, down bool) (netlink.Link, netlink.Link) {
	t.Helper()
	// /proc/sys/net belongs to the opening thread's namespace: ours.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0); err != nil {
		t.Fatalf("disable IPv6: %v", err)
	}
	v := &netlink.Veth{
		LinkAttrs:       netlink.LinkAttrs{Name: name, MTU: mtu, NumRxQueues: queues, NumTxQueues: queues},
		PeerName:        name + "p",
		PeerMTU:         uint32(mtu),
		PeerNumRxQueues: uint32(queues),
		PeerNumTxQueues: uint32(queues),
	}
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatalf("add veth %s: %v", name, err)
	}
	a, b := mustLink(t, name), mustLink(t, name+"p")
	if !down {
		for _, l := range []netlink.Link{a, b} {
			if err := netlink.LinkSetUp(l); err != nil {
				t.Fatalf("set %s up: %v", l.Attrs().Name, err)
			}
		}
	}
	return mustLink(t, name), mustLink(t, name+"p")
}

func mustLink(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

// xdpState returns the interface's XDP attachment as netlink reports it.
func xdpState(t *testing.T, name string) netlink.LinkXdp {
	t.Helper()
	l := mustLink(t, name)
	if l.Attrs().Xdp == nil {
		return netlink.LinkXdp{}
	}
	return *l.Attrs().Xdp
}
