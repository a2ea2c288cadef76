package bpf

// Attach on veth pairs in a fresh namespace: each bad input gets its sentinel,
// and nothing stays attached after a failure or a Close.

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// mtu4096 fits a RoCE MTU 4096 frame (4096 + BTH, RETH, ICRC, IP, UDP).
const mtu4096 = 4200

func requireDetached(t *testing.T, ifname string) {
	t.Helper()
	if x := xdpState(t, ifname); x.Attached {
		t.Errorf("%s: XDP still attached after failure or Close: %+v", ifname, x)
	}
}

func TestAttachNoInterface(t *testing.T) {
	withNetns(t, func() {
		_, err := Attach("xrnope0", AttachOptions{})
		if !errors.Is(err, ErrNoInterface) {
			t.Fatalf("got %v, want ErrNoInterface", err)
		}
		if !strings.Contains(err.Error(), `"xrnope0"`) {
			t.Errorf("error %q does not name the interface", err)
		}
	})
}

func TestAttachInterfaceDown(t *testing.T) {
	withNetns(t, func() {
		vethPair(t, "xr0", 1500, 1, true)
		_, err := Attach("xr0", AttachOptions{})
		if !errors.Is(err, ErrInterfaceDown) {
			t.Fatalf("got %v, want ErrInterfaceDown", err)
		}
		t.Logf("error: %v", err)
		requireDetached(t, "xr0")
	})
}

// Another program attached through legacy netlink, in either mode, makes the
// interface busy for both modes and stays untouched.
func TestAttachBusy(t *testing.T) {
	for _, other := range []struct {
		name  string
		flags int
	}{{"generic", nl.XDP_FLAGS_SKB_MODE}, {"native", nl.XDP_FLAGS_DRV_MODE}} {
		for _, mode := range []AttachMode{AttachGeneric, AttachNative, AttachAuto} {
			withNetns(t, func() {
				a, _ := vethPair(t, "xr0", 1500, 1, false)
				p := loadProgram(t)
				if err := netlink.LinkSetXdpFdWithFlags(a, p.XDP().FD(), other.flags); err != nil {
					t.Fatalf("attach the other program (%s): %v", other.name, err)
				}
				before := xdpState(t, "xr0")
				_, err := Attach("xr0", AttachOptions{Mode: mode})
				if !errors.Is(err, ErrXDPBusy) {
					t.Fatalf("%s over %s: got %v, want ErrXDPBusy", mode, other.name, err)
				}
				if id := before.ProgId; !strings.Contains(err.Error(), "program id ") || id == 0 {
					t.Errorf("%s over %s: error %q does not name program id %d", mode, other.name, err, id)
				}
				if after := xdpState(t, "xr0"); after != before {
					t.Errorf("%s over %s: XDP state changed from %+v to %+v", mode, other.name, before, after)
				}
				if err := netlink.LinkSetXdpFdWithFlags(a, -1, other.flags); err != nil {
					t.Fatalf("detach the other program: %v", err)
				}
				requireDetached(t, "xr0")
			})
		}
	}
}

// A bpf_link attached by someone else makes the interface busy too, and a
// second Attach while ours is attached is refused.
func TestAttachBusyLink(t *testing.T) {
	withNetns(t, func() {
		vethPair(t, "xr0", 1500, 1, false)
		first, err := Attach("xr0", AttachOptions{})
		if err != nil {
			t.Fatalf("first Attach: %v", err)
		}
		if _, err := Attach("xr0", AttachOptions{}); !errors.Is(err, ErrXDPBusy) {
			t.Errorf("second Attach: got %v, want ErrXDPBusy", err)
		}
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		requireDetached(t, "xr0")
	})
}

// When a program arrives after the checks, the kernel refuses the link; the
// error still says why, with the kernel's own words.
func TestKernelRefusalBusy(t *testing.T) {
	withNetns(t, func() {
		a, _ := vethPair(t, "xr0", 1500, 1, false)
		other := loadProgram(t)
		lnk, err := link.AttachXDP(link.XDPOptions{Program: other.XDP(), Interface: a.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			t.Fatal(err)
		}
		defer lnk.Close()
		p := loadProgram(t)
		for _, flags := range []link.XDPAttachFlags{link.XDPGenericMode, link.XDPDriverMode} {
			_, err = link.AttachXDP(link.XDPOptions{Program: p.XDP(), Interface: a.Attrs().Index, Flags: flags})
			if err == nil {
				t.Fatalf("flags %d: second link attached", flags)
			}
			reason := kernelReason(a.Attrs().Index, p.XDP(), uint32(flags))
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
		if x := xdpState(t, "xr0"); x.ProgId != uint32(info.Program) {
			t.Errorf("the other program was replaced: attached id %d, want %d", x.ProgId, info.Program)
		}
	})
}

func TestAttachMTUSingleBuffer(t *testing.T) {
	withNetns(t, func() {
		vethPair(t, "xr0", mtu4096, 1, false)
		for _, mode := range []AttachMode{AttachNative, AttachAuto} {
			_, err := Attach("xr0", AttachOptions{Mode: mode, SingleBuffer: true})
			if !errors.Is(err, ErrMTUTooLarge) {
				t.Fatalf("%s: got %v, want ErrMTUTooLarge", mode, err)
			}
			t.Logf("%s: %v", mode, err)
			requireDetached(t, "xr0")
		}
		// Generic mode has no such limit.
		a, err := Attach("xr0", AttachOptions{Mode: AttachGeneric, SingleBuffer: true})
		if err != nil {
			t.Fatalf("generic single-buffer at MTU %d: %v", mtu4096, err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		requireDetached(t, "xr0")
	})
}

// With the peer in another namespace only the kernel sees its MTU: its refusal
// gets the same sentinel and its reason.
func TestAttachMTUPeerElsewhere(t *testing.T) {
	withNetns(t, func() {
		_, peer := vethPair(t, "xr0", mtu4096, 1, false)
		other := newNetns(t)
		defer other.Close()
		if err := netlink.LinkSetNsFd(peer, int(other)); err != nil {
			t.Fatalf("move peer: %v", err)
		}
		_, err := Attach("xr0", AttachOptions{Mode: AttachNative, SingleBuffer: true})
		if !errors.Is(err, ErrMTUTooLarge) || !errors.Is(err, unix.ERANGE) {
			t.Fatalf("got %v, want ErrMTUTooLarge and ERANGE", err)
		}
		if !strings.Contains(err.Error(), "Peer MTU is too large") {
			t.Errorf("error %q lacks the kernel's reason", err)
		}
		t.Logf("error: %v", err)
		requireDetached(t, "xr0")
	})
}

// Native XDP on veth needs RX queues >= the peer's TX queues (PLATFORM pitfall 2).
func TestAttachNativeQueueMismatch(t *testing.T) {
	withNetns(t, func() {
		v := &netlink.Veth{
			LinkAttrs:       netlink.LinkAttrs{Name: "xr0", NumRxQueues: 1, NumTxQueues: 1},
			PeerName:        "xr0p",
			PeerNumRxQueues: 2,
			PeerNumTxQueues: 2,
		}
		if err := netlink.LinkAdd(v); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"xr0", "xr0p"} {
			if err := netlink.LinkSetUp(mustLink(t, n)); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Attach("xr0", AttachOptions{Mode: AttachNative})
		if !errors.Is(err, ErrAttach) {
			t.Fatalf("got %v, want ErrAttach", err)
		}
		if !strings.Contains(err.Error(), "queues") {
			t.Errorf("error %q lacks the kernel's reason", err)
		}
		t.Logf("error: %v", err)
		requireDetached(t, "xr0")
	})
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
		withNetns(t, func() {
			vethPair(t, "xr0", mtu4096, 1, false)
			a, err := Attach("xr0", AttachOptions{Mode: c.mode})
			if err != nil {
				t.Fatalf("%s: %v", c.mode, err)
			}
			if a.Mode() != c.want || a.Interface() != "xr0" || a.Ifindex() != mustLink(t, "xr0").Attrs().Index {
				t.Errorf("%s: got mode %s, interface %q, ifindex %d", c.mode, a.Mode(), a.Interface(), a.Ifindex())
			}
			id, _ := a.Program().XDP().Info()
			progID, _ := id.ID()
			if x := xdpState(t, "xr0"); !x.Attached || x.AttachMode != c.attached || x.ProgId != uint32(progID) {
				t.Errorf("%s: got XDP state %+v, want mode %d with program %d", c.mode, x, c.attached, progID)
			}
			if err := a.Close(); err != nil {
				t.Fatalf("%s: Close: %v", c.mode, err)
			}
			if err := a.Close(); err != nil {
				t.Errorf("%s: second Close: %v", c.mode, err)
			}
			requireDetached(t, "xr0")
			if _, err := a.Counters(); !errors.Is(err, ErrClosed) {
				t.Errorf("%s: Counters after Close: got %v, want ErrClosed", c.mode, err)
			}
		})
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
		withNetns(t, func() {
			a, peer := vethPair(t, "xr0", mtu4096, 1, false)
			att, err := Attach("xr0", AttachOptions{Mode: mode})
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			defer att.Close()
			x := newTestXSK(t, a.Attrs().Index, 0)
			if err := att.RegisterSocket(0, x.fd); err != nil {
				t.Fatalf("%s: RegisterSocket: %v", mode, err)
			}
			frames := [][]byte{
				eth(etherIPv4, ipv4(protoUDP, roce(64))),
				eth(etherIPv6, ipv6(protoUDP, roce(4150-62))),
				eth(etherIPv4, ipv4(protoUDP, udp(40000, 53, make([]byte, 32)))),
				eth(etherARP, make([]byte, 28)),
			}
			sendRaw(t, peer.Attrs().Index, a.Attrs().HardwareAddr, frames)
			got := waitCounters(t, att, uint64(len(frames)))
			if want := (Counters{Seen: 4, Redirected: 2, Passed: 2}); got != want {
				t.Errorf("%s: got counters %+v, want %+v", mode, got, want)
			}
			if n := x.received(t); n != 2 {
				t.Errorf("%s: socket got %d frames, want 2", mode, n)
			}
			t.Logf("%s: counters %+v, socket rx_dropped %d", mode, got, x.received(t))
		})
	}
}

// sendRaw sends frames out of ifindex with an AF_PACKET socket, addressed to dst.
func sendRaw(t *testing.T, ifindex int, dst []byte, frames [][]byte) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket(AF_PACKET): %v", err)
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: ifindex}
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
	withNetns(t, func() {
		vethPair(t, "xr0", mtu4096, 1, false)
		vethPair(t, "xr1", 1500, 1, true)
		cycle := func() {
			p, err := Load()
			if err != nil {
				t.Fatal(err)
			}
			p.Close()
			for _, mode := range []AttachMode{AttachGeneric, AttachNative} {
				a, err := Attach("xr0", AttachOptions{Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Attach("xr0", AttachOptions{}); err == nil {
					t.Fatal("busy attach succeeded")
				}
				a.Close()
			}
			for _, name := range []string{"xrnope0", "xr1"} {
				if _, err := Attach(name, AttachOptions{}); err == nil {
					t.Fatalf("attach to %s succeeded", name)
				}
			}
			if _, err := Attach("xr0", AttachOptions{Mode: AttachNative, SingleBuffer: true}); err == nil {
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
		requireDetached(t, "xr0")
	})
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
