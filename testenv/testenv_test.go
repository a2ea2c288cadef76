package testenv_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// The cleanup-on-failure test re-runs this binary as a child that creates a pair and
// then fails in the way childModeEnv names, writing the namespace names to childOutEnv.
const (
	childModeEnv = "XRNIC_TESTENV_CHILD_MODE"
	childOutEnv  = "XRNIC_TESTENV_CHILD_OUT"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestPairPing(t *testing.T) {
	for _, static := range []bool{true, false} {
		t.Run(fmt.Sprintf("static=%v", static), func(t *testing.T) {
			pingAll(t, testenv.NewTestPair(t, testenv.PairOptions{NoStaticNeighbors: !static}))
		})
	}
}

func TestPairTCP(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	for _, dst := range []netip.Addr{p.B.IPv4, p.B.IPv6} {
		local := tcpEcho(t, p, dst, 1<<20)
		if got, want := local.(*net.TCPAddr).IP.String(), p.A.IPv4.String(); dst.Is4() && got != want {
			t.Errorf("dialer's address: got %s, want %s", got, want)
		}
	}
}

func TestPairAttributes(t *testing.T) {
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	p := testenv.NewTestPair(t, testenv.PairOptions{
		MTU: 4200, NumTxQueues: 2, NumRxQueues: 4,
		MACA: mac("02:00:5e:10:00:01"), MACB: mac("02:00:5e:10:00:02"),
	})
	for _, c := range []struct {
		e, peer testenv.Endpoint
	}{{p.A, p.B}, {p.B, p.A}} {
		e := c.e
		if len(e.Name) > 15 || e.Name == "" {
			t.Errorf("interface name %q: want 1..15 bytes", e.Name)
		}
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
		if a.Name != e.Name || a.MTU != 4200 || e.MTU != 4200 || a.NumTxQueues != 2 || a.NumRxQueues != 4 {
			t.Errorf("%s: got name %s MTU %d/%d queues tx %d rx %d; want %s 4200 2 4",
				e.Name, a.Name, a.MTU, e.MTU, a.NumTxQueues, a.NumRxQueues, e.Name)
		}
		if a.HardwareAddr.String() != e.MAC.String() || (e.NS == p.A.NS && e.MAC.String() != "02:00:5e:10:00:01") {
			t.Errorf("%s: MAC %s, endpoint says %s", e.Name, a.HardwareAddr, e.MAC)
		}
		if a.RawFlags&unix.IFF_UP == 0 || a.RawFlags&unix.IFF_RUNNING == 0 {
			t.Errorf("%s: flags %#x, want UP and RUNNING", e.Name, a.RawFlags)
		}
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			t.Fatal(err)
		}
		var have []string
		for _, ad := range addrs {
			have = append(have, ad.IPNet.String())
			if ad.IP.Equal(e.IPv6.AsSlice()) && ad.Flags&unix.IFA_F_TENTATIVE != 0 {
				t.Errorf("%s: %s is tentative; want NODAD", e.Name, ad.IPNet)
			}
		}
		for _, want := range []string{e.IPv4Prefix.String(), e.IPv6Prefix.String()} {
			if !slices.Contains(have, want) {
				t.Errorf("%s: addresses %v lack %s", e.Name, have, want)
			}
		}
		neighs, err := h.NeighList(e.Index, netlink.FAMILY_ALL)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range []netip.Addr{c.peer.IPv4, c.peer.IPv6} {
			i := slices.IndexFunc(neighs, func(n netlink.Neigh) bool { return n.IP.Equal(ip.AsSlice()) })
			if i < 0 || neighs[i].State != netlink.NUD_PERMANENT || neighs[i].HardwareAddr.String() != c.peer.MAC.String() {
				t.Errorf("%s: no permanent neighbour %s -> %s in %v", e.Name, ip, c.peer.MAC, neighs)
			}
		}
	}
	// Neither end is visible in the test's own namespace.
	for _, name := range []string{p.A.Name, p.B.Name} {
		if _, err := netlink.LinkByName(name); err == nil {
			t.Errorf("%s exists in the root namespace", name)
		}
	}
}

func TestOptionsRejected(t *testing.T) {
	for _, o := range []testenv.PairOptions{
		{NumTxQueues: 4, NumRxQueues: 2},
		{MTU: 40},
		{NameA: "a-name-longer-than-15"},
		{IPv4A: netip.MustParsePrefix("2001:db8::9/64")},
	} {
		if p, err := testenv.NewVethPair(o); !errors.Is(err, testenv.ErrInvalidOptions) {
			if p != nil {
				p.Close()
			}
			t.Errorf("NewVethPair(%+v): got %v, want ErrInvalidOptions", o, err)
		}
	}
}

func TestExec(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	out, err := p.A.NS.Exec(ctxT(t, 5*time.Second), "ip", "-o", "link", "show", "dev", p.A.Name).CombinedOutput()
	if err != nil || !strings.Contains(string(out), p.A.Name+"@") {
		t.Errorf("ip netns exec ... ip link show %s: %v\n%s", p.A.Name, err, out)
	}
	out, err = exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), p.A.NS.Name) || !strings.Contains(string(out), p.B.NS.Name) {
		t.Errorf("ip netns list lacks %s/%s: %v\n%s", p.A.NS.Name, p.B.NS.Name, err, out)
	}
}

// threadNS identifies the network namespace of the calling thread.
func threadNS(t *testing.T) netns.NsHandle {
	h, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestDo(t *testing.T) {
	ns := testenv.NewTestNS(t)
	want, err := netns.GetFromPath(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadNS(t)
	defer before.Close()

	var inside bool
	if err := ns.Do(func() error {
		h, err := netns.Get()
		if err != nil {
			return err
		}
		defer h.Close()
		inside = h.Equal(want)
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if lo.Attrs().RawFlags&unix.IFF_UP == 0 {
			return errors.New("loopback is down")
		}
		return nil
	}); err != nil || !inside {
		t.Errorf("Do: err %v, ran inside the namespace: %v", err, inside)
	}
	after := threadNS(t)
	defer after.Close()
	if !after.Equal(before) || after.Equal(want) {
		t.Errorf("the caller's thread changed namespace")
	}

	sentinel := errors.New("fn failed")
	if err := ns.Do(func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Errorf("Do: got %v, want fn's error", err)
	}
	if err := ns.Do(func() error { runtime.Goexit(); return nil }); err == nil {
		t.Errorf("Do with Goexit: got nil error")
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("Do with panic: recovered %v, want boom", r)
			}
		}()
		_ = ns.Do(func() error { panic("boom") })
	}()

	got := make(chan bool, 1)
	if err := ns.Go(func() {
		h, err := netns.Get()
		if err == nil {
			defer h.Close()
		}
		got <- err == nil && h.Equal(want)
	}); err != nil {
		t.Fatalf("Go: %v", err)
	}
	if !<-got {
		t.Errorf("Go: fn did not run inside the namespace")
	}

	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error { return nil }); !errors.Is(err, testenv.ErrClosed) {
		t.Errorf("Do after Close: got %v, want ErrClosed", err)
	}
	if err := ns.Go(func() {}); !errors.Is(err, testenv.ErrClosed) {
		t.Errorf("Go after Close: got %v, want ErrClosed", err)
	}
}

// leftovers reports which of the given namespaces still exist under /run/netns and
// which of the given interface names exist in the test's (root) namespace. Other test
// binaries may add links and namespaces meanwhile, so only ours are looked at.
func leftovers(t *testing.T, nsNames, ifNames []string) []string {
	t.Helper()
	var left []string
	for _, n := range nsNames {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err == nil {
			left = append(left, "netns "+n)
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if slices.Contains(ifNames, l.Attrs().Name) {
			left = append(left, "link "+l.Attrs().Name)
		}
	}
	return left
}

// fdCount counts the process's open descriptors once garbage collection has
// settled: files an earlier test dropped close in finalizers, after a GC, so
// the count is read until two readings agree.
func fdCount(t *testing.T) int {
	t.Helper()
	prev := -1
	for range 50 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		if len(fds) == prev {
			break
		}
		prev = len(fds)
	}
	return prev
}

func TestCloseLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	// Warm up: the first pair opens runtime descriptors (netpoll) that stay.
	p, err := testenv.NewVethPair(testenv.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.A.NS.Ping(ctxT(t, 3*time.Second), p.B.IPv4); err != nil {
		t.Error(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	fds := fdCount(t)
	p, err = testenv.NewVethPair(testenv.PairOptions{MTU: 4200})
	if err != nil {
		t.Fatal(err)
	}
	nsNames := []string{p.A.NS.Name, p.B.NS.Name}
	ifNames := []string{p.A.Name, p.B.Name}
	if err := p.A.NS.Ping(ctxT(t, 3*time.Second), p.B.IPv6); err != nil {
		t.Error(err)
	}
	if left := leftovers(t, nsNames, ifNames); len(left) != 2 {
		t.Errorf("while open: found %v, want the two namespaces only", left)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if left := leftovers(t, nsNames, ifNames); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if got := fdCount(t); got > fds {
		t.Errorf("open descriptors: %d before the pair, %d after Close", fds, got)
	}
}

func TestConcurrentPairs(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 4
	pairs := make([]*testenv.Pair, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			pairs[i], errs[i] = testenv.NewVethPair(testenv.PairOptions{Label: "conc"})
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, p := range pairs {
			if p != nil {
				p.Close()
			}
		}
	})
	names := map[string]bool{}
	var nsNames, ifNames []string
	for i, p := range pairs {
		if errs[i] != nil {
			t.Fatalf("pair %d: %v", i, errs[i])
		}
		nsNames = append(nsNames, p.A.NS.Name, p.B.NS.Name)
		ifNames = append(ifNames, p.A.Name, p.B.Name)
		for _, s := range []string{p.A.NS.Name, p.B.NS.Name, "if:" + p.A.Name, "if:" + p.B.Name} {
			if names[s] {
				t.Errorf("name %s used twice", s)
			}
			names[s] = true
		}
	}
	for i := range n {
		wg.Go(func() {
			errs[i] = pairs[i].A.NS.Ping(context.Background(), pairs[i].B.IPv4)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("pair %d: %v", i, err)
		}
	}
	for _, p := range pairs {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}
	if left := leftovers(t, nsNames, ifNames); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestCleanupChild is the child half of TestCleanupOnFailure; it does nothing unless
// run as that child.
func TestCleanupChild(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		return
	}
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	ns := testenv.NewTestNS(t)
	out := fmt.Sprintf("%s\n%s\n%s\n", p.A.NS.Name, p.B.NS.Name, ns.Name)
	if err := os.WriteFile(os.Getenv(childOutEnv), []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "fatal":
		t.Fatal("failing on purpose: cleanup must still run")
	case "panic":
		panic("panicking on purpose: cleanup must still run")
	case "exit":
		os.Exit(3) // no cleanup at all: the next sweep must remove the namespaces
	}
}

func TestCleanupOnFailure(t *testing.T) {
	testutil.RequireRoot(t)
	for _, mode := range []string{"fatal", "panic", "exit"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "names")
			cmd := exec.Command(os.Args[0], "-test.run=^TestCleanupChild$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childOutEnv+"="+out)
			log, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("child passed; want a failure\n%s", log)
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatalf("child wrote no names: %v\n%s", err, log)
			}
			var names []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				names = append(names, sc.Text())
			}
			f.Close()
			if len(names) != 3 {
				t.Fatalf("child wrote %v", names)
			}
			exists := func(n string) bool {
				_, err := os.Stat(filepath.Join("/run/netns", n))
				return err == nil
			}
			if mode == "exit" {
				for _, n := range names {
					if !exists(n) {
						t.Errorf("%s gone although the child skipped its cleanup", n)
					}
				}
				removed, err := testenv.SweepStale()
				if err != nil {
					t.Errorf("SweepStale: %v", err)
				}
				for _, n := range names {
					if !slices.Contains(removed, n) {
						t.Errorf("SweepStale removed %v, not %s", removed, n)
					}
				}
			}
			for _, n := range names {
				if exists(n) {
					t.Errorf("%s left behind after the child's %s", n, mode)
					_ = exec.Command("ip", "netns", "delete", n).Run()
				}
			}
		})
	}
}

func TestCloseWhileInside(t *testing.T) {
	ns := testenv.NewTestNS(t)
	if err := ns.Do(func() error {
		if err := ns.Close(); err != nil {
			return err
		}
		// The thread still holds the namespace: it works until Do returns.
		_, err := netlink.LinkByName("lo")
		return err
	}); err != nil {
		t.Errorf("Do that closes its namespace: %v", err)
	}
	if _, err := os.Stat(ns.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after Close: %v, want it gone", ns.Path(), err)
	}
}

// TestJoinNS: a joined namespace runs Do inside it, and its Close leaves the
// namespace to its owner.
func TestJoinNS(t *testing.T) {
	testutil.RequireRoot(t)
	own, err := testenv.NewNS("join")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var want netns.NsHandle
	if err := own.Do(func() (err error) { want, err = netns.Get(); return err }); err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	j, err := testenv.JoinNS(own.Name)
	if err != nil {
		t.Fatal(err)
	}
	var same bool
	if err := j.Do(func() error {
		h, err := netns.Get()
		if err != nil {
			return err
		}
		defer h.Close()
		same = h.Equal(want)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !same {
		t.Error("Do of the joined namespace ran elsewhere")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(own.Path()); err != nil {
		t.Errorf("closing the joined namespace removed it: %v", err)
	}
	if _, err := testenv.JoinNS("xr-no-such-namespace"); err == nil {
		t.Error("JoinNS of a missing namespace succeeded")
	}
}
