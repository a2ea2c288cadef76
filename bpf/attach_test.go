package bpf

// Attach on veth pairs between namespaces (testenv): each bad input gets its
// sentinel, and nothing stays attached after a failure or a Close.

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/testenv"
)

// mtu4096 fits a RoCE MTU 4096 frame (4096 + BTH, RETH, ICRC, IP, UDP).
const mtu4096 = 4200

func requireDetached(t *testing.T, e *testenv.Endpoint) {
	t.Helper()
	if x := xdpState(t, e); x.Attached {
		t.Errorf("%s: XDP still attached after failure or Close: %+v", e.Name, x)
	}
}

func TestAttachNoInterface(t *testing.T) {
	_, err := attach(t, &testenv.Endpoint{NS: testenv.NewTestNS(t), Name: "xrnope0"}, AttachOptions{})
	if !errors.Is(err, ErrNoInterface) {
		t.Fatalf("got %v, want ErrNoInterface", err)
	}
	if !strings.Contains(err.Error(), `"xrnope0"`) {
		t.Errorf("error %q does not name the interface", err)
	}
}

func TestAttachInterfaceDown(t *testing.T) {
	p := newVeth(t, testenv.PairOptions{})
	setDown(t, p)
	_, err := attach(t, &p.A, AttachOptions{})
	if !errors.Is(err, ErrInterfaceDown) {
		t.Fatalf("got %v, want ErrInterfaceDown", err)
	}
	t.Logf("error: %v", err)
	requireDetached(t, &p.A)
}

// Another program attached through legacy netlink, in either mode, makes the
// interface busy for both modes and stays untouched.
func TestAttachBusy(t *testing.T) {
	for _, other := range []struct {
		name  string
		flags int
	}{{"generic", nl.XDP_FLAGS_SKB_MODE}, {"native", nl.XDP_FLAGS_DRV_MODE}} {
		for _, mode := range []AttachMode{AttachGeneric, AttachNative, AttachAuto} {
			p := newVeth(t, testenv.PairOptions{})
			a := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: p.A.Index}}
			prog := loadProgram(t)
			in(t, p.A.NS, func() error {
				if err := netlink.LinkSetXdpFdWithFlags(a, prog.XDP().FD(), other.flags); err != nil {
					return fmt.Errorf("attach the other program (%s): %w", other.name, err)
				}
				return nil
			})
			before := xdpState(t, &p.A)
			_, err := attach(t, &p.A, AttachOptions{Mode: mode})
			if !errors.Is(err, ErrXDPBusy) {
				t.Fatalf("%s over %s: got %v, want ErrXDPBusy", mode, other.name, err)
			}
			if id := before.ProgId; !strings.Contains(err.Error(), "program id ") || id == 0 {
				t.Errorf("%s over %s: error %q does not name program id %d", mode, other.name, err, id)
			}
			if after := xdpState(t, &p.A); after != before {
				t.Errorf("%s over %s: XDP state changed from %+v to %+v", mode, other.name, before, after)
			}
			in(t, p.A.NS, func() error {
				if err := netlink.LinkSetXdpFdWithFlags(a, -1, other.flags); err != nil {
					return fmt.Errorf("detach the other program: %w", err)
				}
				return nil
			})
			requireDetached(t, &p.A)
		}
	}
}

// A bpf_link attached by someone else makes the interface busy too, and a
// second Attach while ours is attached is refused.
func TestAttachBusyLink(t *testing.T) {
	p := newVeth(t, testenv.PairOptions{})
	first, err := attach(t, &p.A, AttachOptions{})
	if err != nil {
		t.Fatalf("first Attach: %v", err)
	}
	if _, err := attach(t, &p.A, AttachOptions{}); !errors.Is(err, ErrXDPBusy) {
		t.Errorf("second Attach: got %v, want ErrXDPBusy", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	requireDetached(t, &p.A)
}

// When a program arrives after the checks, the kernel refuses the link; the
// error still says why, with the kernel's own words.
func TestKernelRefusalBusy(t *testing.T) {
	p := newVeth(t, testenv.PairOptions{})
	other := loadProgram(t)
	var lnk link.Link
	in(t, p.A.NS, func() (err error) {
		lnk, err = link.AttachXDP(link.XDPOptions{Program: other.XDP(), Interface: p.A.Index, Flags: link.XDPDriverMode})
		return err
	})
	defer lnk.Close()
	prog := loadProgram(t)
	for _, flags := range []link.XDPAttachFlags{link.XDPGenericMode, link.XDPDriverMode} {
		var err error
		var reason string
		in(t, p.A.NS, func() error {
			_, err = link.AttachXDP(link.XDPOptions{Program: prog.XDP(), Interface: p.A.Index, Flags: flags})
			if err != nil {
				reason = kernelReason(p.A.Index, prog.XDP(), uint32(flags))
			}
			return nil
		})
		if err == nil {
			t.Fatalf("flags %d: second link attached", flags)
		}
		if got := classifyAttachError(err, reason); got != ErrXDPBusy {
			t.Errorf("flags %d: %v%s: got %v, want ErrXDPBusy", flags, err, reason, got)
		}
		if !strings.Contains(reason, "kernel: ") {
			t.Errorf("flags %d: no kernel reason: %q", flags, reason)
		}
		t.Logf("flags %d: %v%s", flags, err, reason)
	}
	info, err := lnk.Info()
	if err != nil {
		t.Fatal(err)
	}
	if x := xdpState(t, &p.A); x.ProgId != uint32(info.Program) {
		t.Errorf("the other program was replaced: attached id %d, want %d", x.ProgId, info.Program)
	}
}

// With the peer in the same namespace, Attach sees its MTU and refuses before
// loading anything.
func TestAttachMTUSingleBuffer(t *testing.T) {
	p := newVeth(t, testenv.PairOptions{MTU: mtu4096})
	peerHere(t, p)
	for _, mode := range []AttachMode{AttachNative, AttachAuto} {
		_, err := attach(t, &p.A, AttachOptions{Mode: mode, SingleBuffer: true})
		if !errors.Is(err, ErrMTUTooLarge) {
			t.Fatalf("%s: got %v, want ErrMTUTooLarge", mode, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("veth peer %q", p.B.Name)) {
			t.Errorf("%s: error %q is not Attach's own check of the peer", mode, err)
		}
		t.Logf("%s: %v", mode, err)
		requireDetached(t, &p.A)
	}
	// Generic mode has no such limit.
	a, err := attach(t, &p.A, AttachOptions{Mode: AttachGeneric, SingleBuffer: true})
	if err != nil {
		t.Fatalf("generic single-buffer at MTU %d: %v", mtu4096, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	requireDetached(t, &p.A)
}

// With the peer in another namespace only the kernel sees its MTU: its refusal
// gets the same sentinel and its reason.
func TestAttachMTUPeerElsewhere(t *testing.T) {
	p := newVeth(t, testenv.PairOptions{MTU: mtu4096})
	_, err := attach(t, &p.A, AttachOptions{Mode: AttachNative, SingleBuffer: true})
	if !errors.Is(err, ErrMTUTooLarge) || !errors.Is(err, unix.ERANGE) {
		t.Fatalf("got %v, want ErrMTUTooLarge and ERANGE", err)
	}
	if !strings.Contains(err.Error(), "Peer MTU is too large") {
		t.Errorf("error %q lacks the kernel's reason", err)
	}
	t.Logf("error: %v", err)
	requireDetached(t, &p.A)
}

// Native XDP on veth needs RX queues >= the peer's TX queues (PLATFORM pitfall 2).
// testenv refuses to build such a pair, so the veth is made here, in one namespace.
func TestAttachNativeQueueMismatch(t *testing.T) {
	ns := testenv.NewTestNS(t)
	e := &testenv.Endpoint{NS: ns, Name: "xr0"}
	in(t, ns, func() error {
		v := &netlink.Veth{
			LinkAttrs:       netlink.LinkAttrs{Name: e.Name, NumRxQueues: 1, NumTxQueues: 1},
			PeerName:        e.Name + "p",
			PeerNumRxQueues: 2,
			PeerNumTxQueues: 2,
		}
		if err := netlink.LinkAdd(v); err != nil {
			return err
		}
		for _, n := range []string{v.Name, v.PeerName} {
			l, err := netlink.LinkByName(n)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err != nil {
				return err
			}
			if n == e.Name {
				e.Index = l.Attrs().Index
			}
		}
		return nil
	})
	_, err := attach(t, e, AttachOptions{Mode: AttachNative})
	if !errors.Is(err, ErrAttach) {
		t.Fatalf("got %v, want ErrAttach", err)
	}
	if !strings.Contains(err.Error(), "queues") {
		t.Errorf("error %q lacks the kernel's reason", err)
	}
	t.Logf("error: %v", err)
	requireDetached(t, e)
}

// The multi-buffer program attaches at MTU 4200 in every mode, and Close
// detaches it.
func TestAttachModes(t *testing.T) {
	for _, c := range []struct {
		mode     AttachMode
		want     AttachMode
		attached uint32
	}{
		{AttachGeneric, AttachGeneric, nl.XDP_ATTACHED_SKB},
		{AttachNative, AttachNative, nl.XDP_ATTACHED_DRV},
		{AttachAuto, AttachNative, nl.XDP_ATTACHED_DRV}, // veth supports native
	} {
		p := newVeth(t, testenv.PairOptions{MTU: mtu4096})
		a, err := attach(t, &p.A, AttachOptions{Mode: c.mode})
		if err != nil {
			t.Fatalf("%s: %v", c.mode, err)
		}
		if a.Mode() != c.want || a.Interface() != p.A.Name || a.Ifindex() != p.A.Index {
			t.Errorf("%s: got mode %s, interface %q, ifindex %d", c.mode, a.Mode(), a.Interface(), a.Ifindex())
		}
		id, _ := a.Program().XDP().Info()
		progID, _ := id.ID()
		if x := xdpState(t, &p.A); !x.Attached || x.AttachMode != c.attached || x.ProgId != uint32(progID) {
			t.Errorf("%s: got XDP state %+v, want mode %d with program %d", c.mode, x, c.attached, progID)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("%s: Close: %v", c.mode, err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("%s: second Close: %v", c.mode, err)
		}
		requireDetached(t, &p.A)
		if _, err := a.Counters(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Counters after Close: got %v, want ErrClosed", c.mode, err)
		}
	}
}

// TestParseAttachMode: the command-line names are String's, and only the two
// modes --xdp-mode offers parse.
func TestParseAttachMode(t *testing.T) {
	for _, m := range []AttachMode{AttachGeneric, AttachNative} {
		if got, ok := ParseAttachMode(m.String()); !ok || got != m {
			t.Errorf("ParseAttachMode(%q) = %v, %v", m, got, ok)
		}
	}
	for _, s := range []string{"auto", "turbo", "", "Native"} {
		if _, ok := ParseAttachMode(s); ok {
			t.Errorf("ParseAttachMode(%q) took it", s)
		}
	}
}

func TestAttachInvalidMode(t *testing.T) {
	if _, err := Attach("lo", AttachOptions{Mode: AttachMode(7)}); err == nil {
		t.Fatal("got nil, want an error")
	}
}

// Frames sent into the peer reach the program on the live path: RoCEv2 (also a
// 4150-byte multi-buffer frame) lands in the bound socket, the rest in the
// kernel. Counters are per-CPU and summed.
func TestAttachLiveRedirect(t *testing.T) {
	for _, mode := range []AttachMode{AttachGeneric, AttachNative} {
		p := newVeth(t, testenv.PairOptions{MTU: mtu4096})
		att, err := attach(t, &p.A, AttachOptions{Mode: mode})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		t.Cleanup(func() { att.Close() })
		x := newTestXSK(t, &p.A, 0)
		if err := att.RegisterSocket(0, x.fd); err != nil {
			t.Fatalf("%s: RegisterSocket: %v", mode, err)
		}
		frames := [][]byte{
			eth(etherIPv4, ipv4(protoUDP, roce(64))),
			eth(etherIPv6, ipv6(protoUDP, roce(4150-62))),
			eth(etherIPv4, ipv4(protoUDP, udp(40000, 53, make([]byte, 32)))),
			eth(etherARP, make([]byte, 28)),
		}
		sendRaw(t, &p.B, p.A.MAC, frames)
		got := waitCounters(t, att, uint64(len(frames)))
		if want := (Counters{Seen: 4, Redirected: 2, Passed: 2}); got != want {
			t.Errorf("%s: got counters %+v, want %+v", mode, got, want)
		}
		if n := x.received(t); n != 2 {
			t.Errorf("%s: socket got %d frames, want 2", mode, n)
		}
		t.Logf("%s: counters %+v, socket rx_dropped %d", mode, got, x.received(t))
	}
}

// sendRaw sends frames out of end e with an AF_PACKET socket opened in its
// namespace, addressed to dst.
func sendRaw(t *testing.T, e *testenv.Endpoint, dst []byte, frames [][]byte) {
	t.Helper()
	var fd int
	in(t, e.NS, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	})
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: e.Index}
	for _, f := range frames {
		copy(f, dst)
		if err := unix.Sendto(fd, f, 0, sa); err != nil {
			t.Fatalf("send %d bytes: %v", len(f), err)
		}
	}
}

// waitCounters polls until seen frames were counted (veth delivers them from a
// softirq), waits a little for strays, and returns the counters.
func waitCounters(t *testing.T, a *Attachment, seen uint64) Counters {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := a.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if c.Seen >= seen || time.Now().After(deadline) {
			time.Sleep(50 * time.Millisecond)
			if c, err = a.Counters(); err != nil {
				t.Fatal(err)
			}
			return c
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Loading, attaching, failing and closing leave no file descriptor behind.
func TestNoFDLeak(t *testing.T) {
	p := newVeth(t, testenv.PairOptions{MTU: mtu4096})
	down := newVeth(t, testenv.PairOptions{})
	setDown(t, down)
	cycle := func() {
		prog, err := Load()
		if err != nil {
			t.Fatal(err)
		}
		prog.Close()
		for _, mode := range []AttachMode{AttachGeneric, AttachNative} {
			a, err := attach(t, &p.A, AttachOptions{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := attach(t, &p.A, AttachOptions{}); err == nil {
				t.Fatal("busy attach succeeded")
			}
			a.Close()
		}
		nope := testenv.Endpoint{NS: p.A.NS, Name: "xrnope0"}
		for _, e := range []*testenv.Endpoint{&nope, &down.A} {
			if _, err := attach(t, e, AttachOptions{}); err == nil {
				t.Fatalf("attach to %s succeeded", e.Name)
			}
		}
		if _, err := attach(t, &p.A, AttachOptions{Mode: AttachNative, SingleBuffer: true}); err == nil {
			t.Fatal("single-buffer attach at MTU 4200 succeeded")
		}
	}
	cycle() // warm up lazily opened descriptors (feature probes)
	before := countFDs(t)
	for range 5 {
		cycle()
	}
	if after := countFDs(t); after != before {
		t.Errorf("open file descriptors: %d before, %d after", before, after)
	}
	requireDetached(t, &p.A)
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// The kernel drops a unicast frame addressed to another MAC (PACKET_OTHERHOST:
// a macvlan's, a frame flooded by a switch, promiscuous mode), or hands it to
// the device that owns that MAC; rxe never sees it. The program steers only
// RoCEv2 frames to the interface's own MAC, and leaves the others to the kernel.
func TestAttachLiveOtherHostMAC(t *testing.T) {
	for _, mode := range []AttachMode{AttachGeneric, AttachNative} {
		p := newVeth(t, testenv.PairOptions{})
		att, err := attach(t, &p.A, AttachOptions{Mode: mode})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		t.Cleanup(func() { att.Close() })
		x := newTestXSK(t, &p.A, 0)
		if err := att.RegisterSocket(0, x.fd); err != nil {
			t.Fatalf("%s: RegisterSocket: %v", mode, err)
		}
		other := []byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}
		sendRaw(t, &p.B, other, [][]byte{
			eth(etherIPv4, ipv4(protoUDP, roce(64))),
			eth(etherIPv6, ipv6(protoUDP, roce(64))),
		})
		sendRaw(t, &p.B, p.A.MAC, [][]byte{eth(etherIPv4, ipv4(protoUDP, roce(64)))})
		got := waitCounters(t, att, 3)
		if want := (Counters{Seen: 3, Redirected: 1, Passed: 2}); got != want {
			t.Errorf("%s: got counters %+v, want %+v (frames to another MAC are the kernel's)", mode, got, want)
		}
		// A test wire's faults still reach them: interop drops the frames a
		// bridge port passes on to the guest.
		if err := att.SetFaults(Faults{Drop: 1, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		sendRaw(t, &p.B, other, [][]byte{eth(etherIPv4, ipv4(protoUDP, roce(64)))})
		got = waitCounters(t, att, 4)
		if want := (Counters{Seen: 4, Redirected: 1, Passed: 2, DroppedInjected: 1}); got != want {
			t.Errorf("%s: with faults, got counters %+v, want %+v", mode, got, want)
		}
	}
}

// RoCEv2 frames to a multicast MAC (a UD multicast group's, ip_eth_mc_map or
// ipv6_eth_mc_map) are the engine's, which keeps the groups' members: the
// interface's filter passed them because a QP joined (rxe_mcast_add's
// dev_mc_add). Other traffic to those MACs stays the kernel's.
func TestAttachLiveMulticastMAC(t *testing.T) {
	for _, mode := range []AttachMode{AttachGeneric, AttachNative} {
		p := newVeth(t, testenv.PairOptions{})
		att, err := attach(t, &p.A, AttachOptions{Mode: mode})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		t.Cleanup(func() { att.Close() })
		x := newTestXSK(t, &p.A, 0)
		if err := att.RegisterSocket(0, x.fd); err != nil {
			t.Fatalf("%s: RegisterSocket: %v", mode, err)
		}
		sendRaw(t, &p.B, []byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, [][]byte{
			eth(etherIPv4, ipv4(protoUDP, roce(64))),
			eth(etherIPv4, ipv4(protoUDP, udp(40000, 53, make([]byte, 32)))),
		})
		sendRaw(t, &p.B, []byte{0x33, 0x33, 0x00, 0x01, 0x23, 0x45}, [][]byte{eth(etherIPv6, ipv6(protoUDP, roce(64)))})
		got := waitCounters(t, att, 3)
		if want := (Counters{Seen: 3, Redirected: 2, Passed: 1}); got != want {
			t.Errorf("%s: got counters %+v, want %+v", mode, got, want)
		}
		if n := x.received(t); n != 2 {
			t.Errorf("%s: socket got %d frames, want 2", mode, n)
		}
	}
}
