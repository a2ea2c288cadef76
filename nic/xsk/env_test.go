package xsk

// Test-only environment: a testenv veth pair between two namespaces, and a tiny
// XDP program that steers UDP port 4791 into an XSKMAP. The program is written
// here, not taken from bpf/, so that nic/xsk's tests do not depend on it.

import (
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/testenv"
)

const roceUDPPort = 4791

// vethEnv is a veth pair with IPv4 addresses and static neighbour entries
// (PLATFORM 13): end A (the XSK side) and end B (the peer), each in a namespace
// of its own. xskMap is set once attachSteering has run.
type vethEnv struct {
	*testenv.Pair
	xskMap *ebpf.Map
}

func newVethEnv(t testing.TB, mtu int) *vethEnv {
	t.Helper()
	return &vethEnv{Pair: testenv.NewTestPair(t, testenv.PairOptions{MTU: mtu, NoIPv6: true})}
}

// in runs fn inside ns (NS.Do, on another goroutine: fn must not call t.Fatal)
// and fails t with fn's error or the namespace's.
func in(t testing.TB, ns *testenv.NS, fn func() error) {
	t.Helper()
	if err := ns.Do(fn); err != nil {
		t.Fatalf("in %s: %v", ns.Name, err)
	}
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
	if e.xskMap != nil {
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
	var l link.Link
	in(t, e.A.NS, func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: e.A.Index, Flags: link.XDPGenericMode})
		return err
	})
	t.Cleanup(func() { l.Close() })
	e.xskMap = m
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
	end := &e.B
	if a {
		end = &e.A
	}
	var s *Socket
	in(t, end.NS, func() (err error) {
		s, err = New(end.Index, queue, opts)
		return err
	})
	t.Cleanup(func() { s.Close() })
	return s
}

// udpConn opens a UDP socket on end B, closed at cleanup: bound to B's address
// and port (0: any), and connected to A's RoCEv2 port if dial is set.
func (e *vethEnv) udpConn(t testing.TB, port int, dial bool) *net.UDPConn {
	t.Helper()
	laddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(e.B.IPv4, uint16(port)))
	var c *net.UDPConn
	in(t, e.B.NS, func() (err error) {
		if dial {
			c, err = net.DialUDP("udp4", laddr, net.UDPAddrFromAddrPort(netip.AddrPortFrom(e.A.IPv4, roceUDPPort)))
		} else {
			c, err = net.ListenUDP("udp4", laddr)
		}
		return err
	})
	t.Cleanup(func() { c.Close() })
	return c
}
