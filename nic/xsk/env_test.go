package xsk

// Test-only environment: two fresh network namespaces joined by a veth pair, and
// a tiny XDP program that steers UDP port 4791 into an XSKMAP. The shared
// testenv package is written in parallel; this keeps nic/xsk independent of it.

import (
	"net"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/testutil"
)

const roceUDPPort = 4791

// vethEnv is a veth pair: end A (the XSK side) in namespace nsA, end B (the
// peer) in nsB, with addresses and static neighbour entries (PLATFORM 13).
type vethEnv struct {
	nsA, nsB       netns.NsHandle
	hA, hB         *netlink.Handle
	ifA, ifB       int // ifindex in their namespaces
	macA, macB     net.HardwareAddr
	ipA, ipB       net.IP
	mtu            int
	progA          link.Link
	xskMap         *ebpf.Map
	steeringLoaded bool
}

func newVethEnv(t testing.TB, mtu int) *vethEnv {
	t.Helper()
	testutil.RequireRoot(t)
	nl.EnableErrorMessageReporting = true // kernel extack text in errors (PLATFORM 12)
	e := &vethEnv{mtu: mtu, ipA: net.IPv4(10, 99, 0, 1).To4(), ipB: net.IPv4(10, 99, 0, 2).To4()}

	// netns.New moves the calling thread into the new namespace: create both
	// on a locked thread and move it back before unlocking.
	func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			t.Fatalf("netns.Get: %v", err)
		}
		defer orig.Close()
		var errA, errB error
		e.nsA, errA = netns.New()
		if errA == nil {
			e.nsB, errB = netns.New()
		}
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: it dies with the goroutine.
			t.Fatalf("restore netns: %v", err)
		}
		runtime.UnlockOSThread()
		if errA != nil || errB != nil {
			t.Fatalf("netns.New: %v %v", errA, errB)
		}
	}()
	t.Cleanup(func() {
		e.nsA.Close()
		e.nsB.Close()
	})

	var err error
	if e.hA, err = netlink.NewHandleAt(e.nsA); err != nil {
		t.Fatalf("netlink handle A: %v", err)
	}
	t.Cleanup(e.hA.Close)
	if e.hB, err = netlink.NewHandleAt(e.nsB); err != nil {
		t.Fatalf("netlink handle B: %v", err)
	}
	t.Cleanup(e.hB.Close)

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: "xska", MTU: mtu},
		PeerName:      "xskb",
		PeerNamespace: netlink.NsFd(int(e.nsB)),
		PeerMTU:       uint32(mtu),
	}
	if err := e.hA.LinkAdd(veth); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	la, err := e.hA.LinkByName("xska")
	if err != nil {
		t.Fatalf("link A: %v", err)
	}
	lb, err := e.hB.LinkByName("xskb")
	if err != nil {
		t.Fatalf("link B: %v", err)
	}
	t.Cleanup(func() { _ = e.hA.LinkDel(la) })
	e.ifA, e.ifB = la.Attrs().Index, lb.Attrs().Index
	e.macA, e.macB = la.Attrs().HardwareAddr, lb.Attrs().HardwareAddr

	for _, x := range []struct {
		h        *netlink.Handle
		l        netlink.Link
		ip, peer net.IP
		peerMAC  net.HardwareAddr
	}{{e.hA, la, e.ipA, e.ipB, e.macB}, {e.hB, lb, e.ipB, e.ipA, e.macA}} {
		if err := x.h.AddrAdd(x.l, &netlink.Addr{IPNet: &net.IPNet{IP: x.ip, Mask: net.CIDRMask(24, 32)}}); err != nil {
			t.Fatalf("addr add: %v", err)
		}
		if err := x.h.LinkSetUp(x.l); err != nil {
			t.Fatalf("link up: %v", err)
		}
		if err := x.h.NeighAdd(&netlink.Neigh{
			LinkIndex: x.l.Attrs().Index, State: netlink.NUD_PERMANENT, IP: x.peer, HardwareAddr: x.peerMAC,
		}); err != nil {
			t.Fatalf("neigh add: %v", err)
		}
	}
	return e
}

// in runs fn with the calling goroutine's thread inside ns.
func in(t testing.TB, ns netns.NsHandle, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("netns.Get: %v", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("netns.Set: %v", err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			t.Errorf("restore netns: %v", err) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
	}()
	fn()
}

// steering is a test-only XDP program: IPv4 UDP to port 4791, not a fragment,
// goes to the XSKMAP entry at rx_queue_index (XDP_PASS when the entry is empty);
// everything else passes. Loaded with BPF_F_XDP_HAS_FRAGS ("xdp.frags") so that
// multi-buffer frames reach XDP_USE_SG sockets.
func steering(m *ebpf.Map) asm.Instructions {
	const xdpPass = 2
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+20+8),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half), // EtherType, loaded little-endian
		asm.JNE.Imm(asm.R5, 0x0008, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14, asm.Byte), // version 4, IHL 5
		asm.JNE.Imm(asm.R5, 0x45, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 23, asm.Byte), // protocol
		asm.JNE.Imm(asm.R5, unix.IPPROTO_UDP, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 20, asm.Half), // MF and fragment offset (PLATFORM 5)
		asm.And.Imm(asm.R5, 0xff3f),
		asm.JNE.Imm(asm.R5, 0, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 36, asm.Half), // UDP destination port
		asm.JNE.Imm(asm.R5, int32(roceUDPPort>>8|(roceUDPPort&0xff)<<8), "pass"),
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word), // rx_queue_index
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// attachSteering loads the steering program on end A in generic mode
// (PLATFORM 10: generic costs kernel TCP less and is as fast for AF_XDP here).
func (e *vethEnv) attachSteering(t testing.TB) {
	t.Helper()
	if e.steeringLoaded {
		return
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 64})
	if err != nil {
		t.Fatalf("XSKMAP: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "xsk_test_steer",
		Type:         ebpf.XDP,
		License:      "GPL",
		Flags:        unix.BPF_F_XDP_HAS_FRAGS,
		Instructions: steering(m),
	})
	if err != nil {
		t.Fatalf("load XDP program: %v", err)
	}
	defer prog.Close() // the link keeps it
	in(t, e.nsA, func() {
		e.progA, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: e.ifA, Flags: link.XDPGenericMode})
	})
	if err != nil {
		t.Fatalf("attach XDP: %v", err)
	}
	t.Cleanup(func() { e.progA.Close() })
	e.xskMap = m
	e.steeringLoaded = true
}

// register puts s into the XSKMAP at queue.
func (e *vethEnv) register(t testing.TB, queue int, s *Socket) {
	t.Helper()
	if err := e.xskMap.Update(uint32(queue), uint32(s.FD()), ebpf.UpdateAny); err != nil {
		t.Fatalf("XSKMAP update: %v", err)
	}
}

// newXSK creates a Socket on end A (a) or B (!a), closed at cleanup.
func (e *vethEnv) newXSK(t testing.TB, a bool, queue int, opts Options) *Socket {
	t.Helper()
	ns, ifi := e.nsB, e.ifB
	if a {
		ns, ifi = e.nsA, e.ifA
	}
	var s *Socket
	var err error
	in(t, ns, func() { s, err = New(ifi, queue, opts) })
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// udpConn opens a UDP socket in ns bound to ip:port.
func udpConn(t testing.TB, ns netns.NsHandle, ip net.IP, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	in(t, ns, func() { c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: ip, Port: port}) })
	if err != nil {
		t.Fatalf("ListenUDP: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
