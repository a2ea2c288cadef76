package testenv_test

// Wires: two endpoints joined through a middle namespace where the impairment
// program (bpf.AttachImpair) forwards the frames.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// attachImpair attaches the impairment program to the wire's middle ports
// (generic mode) and detaches it when t ends.
func attachImpair(t *testing.T, w *testenv.Wire) *bpf.Impair {
	t.Helper()
	var im *bpf.Impair
	if err := w.Mid.Do(func() (err error) {
		im, err = bpf.AttachImpair(w.MidA.Name, w.MidB.Name, bpf.ImpairOptions{})
		return err
	}); err != nil {
		t.Fatalf("AttachImpair in %s: %v", w.Mid.Name, err)
	}
	t.Cleanup(func() {
		if err := im.Close(); err != nil {
			t.Errorf("close impairment: %v", err)
		}
	})
	return im
}

// pingAll pings each end's addresses from the other.
func pingAll(t *testing.T, p *testenv.Pair) {
	t.Helper()
	for _, c := range []struct {
		from *testenv.NS
		to   netip.Addr
	}{
		{p.A.NS, p.B.IPv4}, {p.A.NS, p.B.IPv6}, {p.B.NS, p.A.IPv4}, {p.B.NS, p.A.IPv6},
	} {
		if err := c.from.Ping(ctxT(t, 3*time.Second), c.to); err != nil {
			t.Errorf("ping %s from %s: %v", c.to, c.from.Name, err)
		}
	}
}

// Nothing crosses the middle until the program forwards; then ping works both
// ways on both families, with static neighbours and with ARP/ND across the wire.
func TestWirePing(t *testing.T) {
	for _, static := range []bool{true, false} {
		t.Run(fmt.Sprintf("static=%v", static), func(t *testing.T) {
			w := testenv.NewTestWire(t, testenv.PairOptions{NoStaticNeighbors: !static})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err := w.A.NS.Ping(ctx, w.B.IPv4)
			cancel()
			if err == nil {
				t.Errorf("ping through the middle without a program: got a reply")
			}
			im := attachImpair(t, w)
			pingAll(t, w.Pair)
			c, err := im.Counters()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("counters %+v", c)
			for name, pc := range map[string]bpf.ImpairPortCounters{"from A": c.FromA, "from B": c.FromB} {
				if pc.Forwarded < 4 || pc.Seen != pc.Forwarded || pc.RoCE != 0 {
					t.Errorf("%s: counters %+v: want >= 4 forwarded, all seen forwarded, no RoCEv2", name, pc)
				}
			}
		})
	}
}

// tcpEcho sends a message from A to an echo server on dst in B and checks it
// comes back; it returns the dialer's address.
func tcpEcho(t *testing.T, p *testenv.Pair, dst netip.Addr, size int) net.Addr {
	t.Helper()
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(dst.String(), "0"))
		return err
	}); err != nil {
		t.Fatalf("listen in B: %v", err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		done <- err
	}()
	var conn net.Conn
	if err := p.A.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dial %s from A: %v", ln.Addr(), err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	go func() {
		_, _ = conn.Write(msg)
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	if err != nil || !slices.Equal(got, msg) {
		t.Errorf("echo of %d bytes over %s: got %d bytes, %v", size, dst, len(got), err)
	}
	if err := <-done; err != nil {
		t.Errorf("server: %v", err)
	}
	return conn.LocalAddr()
}

// TCP crosses the wire intact, even with every fault at rate 1: only RoCEv2
// frames are impaired.
func TestWireTCP(t *testing.T) {
	w := testenv.NewTestWire(t, testenv.PairOptions{MTU: 4200})
	im := attachImpair(t, w)
	if err := im.SetFaults(bpf.ImpairFaults{Drop: 1, Corrupt: 1, Duplicate: 1, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []netip.Addr{w.B.IPv4, w.B.IPv6} {
		tcpEcho(t, w.Pair, dst, 1<<20)
	}
	c, err := im.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("counters %+v", c)
	for _, pc := range []bpf.ImpairPortCounters{c.FromA, c.FromB} {
		if pc.Seen == 0 || pc.Seen != pc.Forwarded || pc.Dropped+pc.Duplicated+pc.Corrupted+pc.RoCE != 0 {
			t.Errorf("counters %+v: want every frame forwarded, none impaired", pc)
		}
	}
}

// The four ends get the options' MTU and queues; A and B look as in a Pair
// (addresses, neighbours naming each other's MAC) and send one segment per skb,
// the middle has no addresses and no IPv6, and nothing shows in the test's own
// namespace.
func TestWireAttributes(t *testing.T) {
	w := testenv.NewTestWire(t, testenv.PairOptions{MTU: 4200, NumTxQueues: 2, NumRxQueues: 2})
	if got := w.Namespaces(); len(got) != 3 || got[2] != w.Mid || w.MidA.NS != w.Mid || w.MidB.NS != w.Mid {
		t.Errorf("namespaces %v, middle %v", got, w.Mid)
	}
	for _, e := range []testenv.Endpoint{w.A, w.B, w.MidA, w.MidB} {
		h, err := e.NS.NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.LinkByIndex(e.Index)
		if err != nil {
			h.Close()
			t.Fatalf("%s not in %s: %v", e.Name, e.NS.Name, err)
		}
		a := l.Attrs()
		if a.Name != e.Name || a.MTU != 4200 || e.MTU != 4200 || a.NumTxQueues != 2 || a.NumRxQueues != 2 ||
			a.HardwareAddr.String() != e.MAC.String() || a.RawFlags&unix.IFF_RUNNING == 0 {
			t.Errorf("%s: got %s MTU %d/%d queues %d/%d MAC %s flags %#x", e.Name, a.Name, a.MTU, e.MTU,
				a.NumTxQueues, a.NumRxQueues, a.HardwareAddr, a.RawFlags)
		}
		if e.NS != w.Mid && a.GSOMaxSegs != 1 {
			t.Errorf("%s: gso_max_segs %d, want 1", e.Name, a.GSOMaxSegs)
		}
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		if e.NS == w.Mid && len(addrs) != 0 {
			t.Errorf("middle port %s has addresses %v", e.Name, addrs)
		}
		if _, err := netlink.LinkByName(e.Name); err == nil {
			t.Errorf("%s exists in the test's namespace", e.Name)
		}
	}
	if err := w.Mid.Do(func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + w.MidA.Name + "/disable_ipv6")
		if err == nil && string(b) != "1\n" {
			err = fmt.Errorf("disable_ipv6 is %q", b)
		}
		return err
	}); err != nil {
		t.Errorf("IPv6 on %s: %v", w.MidA.Name, err)
	}
	// The ends' neighbours are each other, not the middle ports.
	h, err := w.A.NS.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	neighs, err := h.NeighList(w.A.Index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(neighs, func(n netlink.Neigh) bool { return n.IP.Equal(w.B.IPv4.AsSlice()) }); i < 0 ||
		neighs[i].HardwareAddr.String() != w.B.MAC.String() {
		t.Errorf("A's neighbours %v: want %s at %s", neighs, w.B.IPv4, w.B.MAC)
	}
}

// Close removes the three namespaces and all four links, leaves no descriptor
// open, and the program detached before is gone from the middle ports.
func TestWireCloseLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	cycle := func() (nsNames, ifNames []string) {
		w, err := testenv.NewVethWire(testenv.PairOptions{Label: "wclose"})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := w.Close(); err != nil {
				t.Error(err)
			}
			if err := w.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		}()
		var im *bpf.Impair
		if err := w.Mid.Do(func() (err error) {
			im, err = bpf.AttachImpair(w.MidA.Name, w.MidB.Name, bpf.ImpairOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := w.A.NS.Ping(ctxT(t, 3*time.Second), w.B.IPv6); err != nil {
			t.Error(err)
		}
		if err := im.Close(); err != nil {
			t.Error(err)
		}
		h, err := w.Mid.NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		for _, e := range []testenv.Endpoint{w.MidA, w.MidB} {
			l, err := h.LinkByIndex(e.Index)
			if err != nil {
				t.Fatal(err)
			}
			if x := l.Attrs().Xdp; x != nil && x.Attached {
				t.Errorf("%s: XDP still attached after Close: %+v", e.Name, x)
			}
		}
		for _, ns := range w.Namespaces() {
			nsNames = append(nsNames, ns.Name)
		}
		return nsNames, []string{w.A.Name, w.B.Name, w.MidA.Name, w.MidB.Name}
	}
	cycle() // warm up descriptors that stay (netpoll, BPF feature probes)
	runtime.GC()
	fds := fdCount(t)
	nsNames, ifNames := cycle()
	if left := leftovers(t, nsNames, ifNames); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if got := fdCount(t); got > fds {
		t.Errorf("open descriptors: %d before the wire, %d after Close", fds, got)
	}
}
