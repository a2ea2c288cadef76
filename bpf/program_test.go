package bpf

// The program frame by frame through BPF_PROG_TEST_RUN: no interface needed,
// except for the AF_XDP socket that the XDP_REDIRECT cases need in the XSKMAP.

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// Verdicts of enum xdp_action.
const (
	xdpPass     = 2
	xdpRedirect = 4
)

// xdpMD is struct xdp_md, the context given to BPF_PROG_TEST_RUN: it sets the
// receive queue the program sees.
type xdpMD struct {
	Data, DataEnd, DataMeta uint32
	IngressIfindex          uint32
	RxQueueIndex            uint32
	EgressIfindex           uint32
}

// Frame builders. Addresses and checksums do not matter to the program.

const (
	etherIPv4   = 0x0800
	etherIPv6   = 0x86dd
	etherARP    = 0x0806
	ether8021Q  = 0x8100
	ether8021AD = 0x88a8

	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoHopOpt = 0
	protoFrag6  = 44
	protoICMPv6 = 58

	roceV2Port = 4791
)

func eth(ethertype uint16, payload []byte) []byte {
	b := make([]byte, 14, 14+len(payload))
	copy(b, []byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2})
	binary.BigEndian.PutUint16(b[12:], ethertype)
	return append(b, payload...)
}

// tagged inserts one VLAN tag with type tpid before ethertype.
func tagged(tpid, ethertype uint16, payload []byte) []byte {
	tag := make([]byte, 4, 4+len(payload))
	binary.BigEndian.PutUint16(tag, 100) // VID 100
	binary.BigEndian.PutUint16(tag[2:], ethertype)
	return eth(tpid, append(tag, payload...))
}

// ipv4 builds a header with DF set, of 20 bytes plus options.
func ipv4(proto byte, payload []byte, options ...byte) []byte {
	hlen := 20 + len(options)
	b := make([]byte, hlen, hlen+len(payload))
	b[0] = 0x40 | byte(hlen/4)
	binary.BigEndian.PutUint16(b[2:], uint16(hlen+len(payload)))
	binary.BigEndian.PutUint16(b[6:], 0x4000) // DF
	b[8] = 64
	b[9] = proto
	copy(b[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	copy(b[20:], options)
	return append(b, payload...)
}

func ipv6(next byte, payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6] = next
	b[7] = 64
	b[8], b[23] = 0xfd, 1
	b[24], b[39] = 0xfd, 2
	return append(b, payload...)
}

func udp(src, dst uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b, src)
	binary.BigEndian.PutUint16(b[2:], dst)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

// roce is a UDP datagram to 4791 carrying n bytes of BTH and payload.
func roce(n int) []byte { return udp(49152, roceV2Port, make([]byte, n)) }

func tcp(dst uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b, 40000)
	binary.BigEndian.PutUint16(b[2:], dst)
	b[12] = 5 << 4
	return b
}

// set returns b with the bytes v written at off.
func set(b []byte, off int, v ...byte) []byte {
	copy(b[off:], v)
	return b
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// Expected outcomes of a frame: its kind decides verdict and counters.
type kind int

const (
	kindOther     kind = iota // the kernel's: XDP_PASS
	kindRoCE                  // steered: XDP_REDIRECT with a socket, else XDP_PASS
	kindMalformed             // counted and passed
)

type frameCase struct {
	name  string
	frame []byte
	kind  kind
}

func frameCases() []frameCase {
	arp := make([]byte, 28)
	copy(arp, []byte{0, 1, 8, 0, 6, 4, 0, 1})
	icmpEcho := []byte{8, 0, 0, 0, 0, 1, 0, 1}
	hopByHop := append([]byte{protoUDP, 0, 1, 4, 0, 0, 0, 0}, roce(16)...)
	frag6 := append([]byte{protoUDP, 0, 0, 1, 0, 0, 0, 7}, roce(16)...) // offset 0, M set

	return []frameCase{
		{"IPv4 RoCEv2", eth(etherIPv4, ipv4(protoUDP, roce(64))), kindRoCE},
		{"IPv6 RoCEv2", eth(etherIPv6, ipv6(protoUDP, roce(64))), kindRoCE},
		{"802.1Q IPv4 RoCEv2", tagged(ether8021Q, etherIPv4, ipv4(protoUDP, roce(64))), kindRoCE},
		{"802.1Q IPv6 RoCEv2", tagged(ether8021Q, etherIPv6, ipv6(protoUDP, roce(64))), kindRoCE},
		{"802.1ad IPv4 RoCEv2", tagged(ether8021AD, etherIPv4, ipv4(protoUDP, roce(64))), kindRoCE},
		{"802.1ad IPv6 RoCEv2", tagged(ether8021AD, etherIPv6, ipv6(protoUDP, roce(64))), kindRoCE},
		{"IPv4 RoCEv2 padded to 60 bytes", append(eth(etherIPv4, ipv4(protoUDP, roce(0))), make([]byte, 18)...), kindRoCE},
		{"IPv4 RoCEv2 3000 bytes linear", eth(etherIPv4, ipv4(protoUDP, roce(3000-42))), kindRoCE},
		{"IPv4 RoCEv2 MTU 4096 frame 4150 bytes", eth(etherIPv4, ipv4(protoUDP, roce(4150-42))), kindRoCE},
		{"IPv6 RoCEv2 MTU 4096 frame 4150 bytes", eth(etherIPv6, ipv6(protoUDP, roce(4150-62))), kindRoCE},
		{"802.1Q IPv4 RoCEv2 4150 bytes", tagged(ether8021Q, etherIPv4, ipv4(protoUDP, roce(4150-46))), kindRoCE},

		{"QinQ (two tags) IPv4 RoCEv2", tagged(ether8021AD, ether8021Q, append(set(make([]byte, 4), 2, be16(etherIPv4)...), ipv4(protoUDP, roce(64))...)), kindOther},
		{"IPv4 UDP to 53", eth(etherIPv4, ipv4(protoUDP, udp(40000, 53, make([]byte, 32)))), kindOther},
		{"IPv4 UDP from 4791 to 50000", eth(etherIPv4, ipv4(protoUDP, udp(roceV2Port, 50000, make([]byte, 32)))), kindOther},
		{"IPv6 UDP from 4791 to 50000", eth(etherIPv6, ipv6(protoUDP, udp(roceV2Port, 50000, make([]byte, 32)))), kindOther},
		{"IPv4 TCP to 4791", eth(etherIPv4, ipv4(protoTCP, tcp(roceV2Port))), kindOther},
		{"IPv6 TCP to 4791", eth(etherIPv6, ipv6(protoTCP, tcp(roceV2Port))), kindOther},
		{"IPv4 ICMP echo", eth(etherIPv4, ipv4(protoICMP, icmpEcho)), kindOther},
		{"IPv6 ICMPv6 echo", eth(etherIPv6, ipv6(protoICMPv6, []byte{128, 0, 0, 0, 0, 1, 0, 1})), kindOther},
		{"ARP request", eth(etherARP, arp), kindOther},
		{"IPv4 first fragment (MF) to 4791", eth(etherIPv4, set(ipv4(protoUDP, roce(64)), 6, 0x20, 0)), kindOther},
		{"IPv4 non-first fragment", eth(etherIPv4, set(ipv4(protoUDP, roce(64)), 6, 0, 185)), kindOther},
		{"IPv4 last fragment (offset, no MF)", eth(etherIPv4, set(ipv4(protoUDP, roce(64)), 6, 0x00, 1)), kindOther},
		{"IPv4 options (ihl 6) UDP to 4791", eth(etherIPv4, ipv4(protoUDP, roce(64), 1, 1, 1, 0)), kindOther},
		{"IPv6 hop-by-hop then UDP to 4791", eth(etherIPv6, ipv6(protoHopOpt, hopByHop)), kindOther},
		{"IPv6 fragment header then UDP to 4791", eth(etherIPv6, ipv6(protoFrag6, frag6)), kindOther},
		{"runt: Ethernet header only, ARP", eth(etherARP, nil), kindOther},
		{"runt: Ethernet header only, type 0", eth(0, nil), kindOther},

		{"runt: Ethernet header only, IPv4", eth(etherIPv4, nil), kindMalformed},
		{"runt: 60 zero bytes typed IPv4", eth(etherIPv4, make([]byte, 46)), kindMalformed},
		{"truncated VLAN tag", eth(ether8021Q, []byte{0, 100}), kindMalformed},
		{"truncated IPv4 header", eth(etherIPv4, ipv4(protoUDP, roce(64))[:12]), kindMalformed},
		{"IPv4 ihl 4", eth(etherIPv4, set(ipv4(protoUDP, roce(64)), 0, 0x44)), kindMalformed},
		{"IPv4 version 6 in IPv4 ethertype", eth(etherIPv4, set(ipv4(protoUDP, roce(64)), 0, 0x65)), kindMalformed},
		{"IPv4 total length beyond frame", eth(etherIPv4, set(ipv4(protoUDP, roce(64)), 2, be16(200)...)), kindMalformed},
		{"IPv4 total length below header", eth(etherIPv4, set(ipv4(protoUDP, roce(64)), 2, be16(19)...)), kindMalformed},
		{"IPv4 UDP header cut", eth(etherIPv4, ipv4(protoUDP, roce(0)[:4])), kindMalformed},
		{"IPv4 UDP length below 8", eth(etherIPv4, ipv4(protoUDP, set(roce(64), 4, be16(7)...))), kindMalformed},
		{"IPv4 UDP length beyond IP payload", eth(etherIPv4, ipv4(protoUDP, set(roce(64), 4, be16(200)...))), kindMalformed},
		{"truncated IPv6 header", eth(etherIPv6, ipv6(protoUDP, roce(64))[:30]), kindMalformed},
		{"IPv6 payload length beyond frame", eth(etherIPv6, set(ipv6(protoUDP, roce(64)), 4, be16(500)...)), kindMalformed},
		{"IPv6 UDP header cut", eth(etherIPv6, ipv6(protoUDP, roce(0)[:6])), kindMalformed},
		{"802.1Q IPv4 UDP header cut", tagged(ether8021Q, etherIPv4, ipv4(protoUDP, roce(0)[:4])), kindMalformed},
	}
}

// run runs prog once on frame as if received on queue of ifindex, and returns
// the verdict and the counter deltas. The kernel looks ifindex up in the
// caller's namespace, so the run happens inside ns unless ns is nil.
func run(t *testing.T, p *Program, prog *ebpf.Program, frame []byte, ns *testenv.NS, ifindex, queue int) (uint32, Counters) {
	t.Helper()
	before, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	ctx := &xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex), RxQueueIndex: uint32(queue)}
	var verdict uint32
	testRun := func() error {
		verdict, err = prog.Run(&ebpf.RunOptions{Data: frame, Context: ctx})
		return nil
	}
	if ns == nil {
		_ = testRun()
	} else {
		in(t, ns, testRun)
	}
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN on %d bytes: %v", len(frame), err)
	}
	after, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return verdict, delta(after, before)
}

// delta returns the counters' growth from before to after.
func delta(after, before Counters) Counters {
	return Counters{
		Seen:              after.Seen - before.Seen,
		Redirected:        after.Redirected - before.Redirected,
		Passed:            after.Passed - before.Passed,
		Malformed:         after.Malformed - before.Malformed,
		DroppedInjected:   after.DroppedInjected - before.DroppedInjected,
		CorruptedInjected: after.CorruptedInjected - before.CorruptedInjected,
		Unsteered:         after.Unsteered - before.Unsteered,
	}
}

func want(k kind, socket bool) (uint32, Counters) {
	switch {
	case k == kindRoCE && socket:
		return xdpRedirect, Counters{Seen: 1, Redirected: 1}
	case k == kindRoCE:
		// No socket at the frame's queue: the kernel's, and lost to xrnic.
		return xdpPass, Counters{Seen: 1, Passed: 1, Unsteered: 1}
	case k == kindMalformed:
		return xdpPass, Counters{Seen: 1, Passed: 1, Malformed: 1}
	}
	return xdpPass, Counters{Seen: 1, Passed: 1}
}

func loadProgram(t *testing.T) *Program {
	t.Helper()
	testutil.RequireRoot(t)
	p, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// checkFrames runs every frame case through both entry points on the given
// queue of ifindex, inside ns (nil: the caller's namespace). BPF_PROG_TEST_RUN
// turns frames beyond 3520 bytes (a page less headroom and skb_shared_info) into
// multi-buffer frames for either entry point: only a driver enforces the
// single-buffer limit.
func checkFrames(t *testing.T, p *Program, ns *testenv.NS, ifindex, queue int, socket bool) {
	t.Helper()
	for _, c := range frameCases() {
		entries := []struct {
			name string
			prog *ebpf.Program
		}{{"frags", p.XDP()}, {"single", p.XDPSingleBuffer()}}
		for _, e := range entries {
			verdict, got := run(t, p, e.prog, c.frame, ns, ifindex, queue)
			wantVerdict, wantCounters := want(c.kind, socket)
			if verdict != wantVerdict {
				t.Errorf("%s (%d bytes, %s): got verdict %d, want %d", c.name, len(c.frame), e.name, verdict, wantVerdict)
			}
			if got != wantCounters {
				t.Errorf("%s (%d bytes, %s): got counter deltas %+v, want %+v", c.name, len(c.frame), e.name, got, wantCounters)
			}
		}
	}
}

// Without a socket in the XSKMAP, RoCEv2 frames go to the kernel too.
func TestFramesNoSocket(t *testing.T) {
	p := loadProgram(t)
	checkFrames(t, p, nil, 0, 0, false)
}

// With a socket at the frame's queue, RoCEv2 frames get XDP_REDIRECT; frames of
// other queues still go to the kernel, and so does everything once the socket is
// unregistered.
func TestFramesSocketByQueue(t *testing.T) {
	p := loadProgram(t)
	v := newVeth(t, testenv.PairOptions{NumTxQueues: 2, NumRxQueues: 2})
	x := newTestXSK(t, &v.A, 1)
	if err := p.RegisterSocket(1, x.fd); err != nil {
		t.Fatalf("RegisterSocket: %v", err)
	}
	checkFrames(t, p, v.A.NS, v.A.Index, 1, true)
	checkFrames(t, p, v.A.NS, v.A.Index, 0, false)

	if err := p.UnregisterSocket(1); err != nil {
		t.Fatalf("UnregisterSocket: %v", err)
	}
	if err := p.UnregisterSocket(1); err != nil {
		t.Fatalf("second UnregisterSocket: got %v, want nil", err)
	}
	checkFrames(t, p, v.A.NS, v.A.Index, 1, false)
}

// A context without an ingress interface has queue 0: a socket there gets the
// RoCEv2 frames.
func TestFramesSocketNoIngress(t *testing.T) {
	p := loadProgram(t)
	v := newVeth(t, testenv.PairOptions{})
	x := newTestXSK(t, &v.A, 0)
	if err := p.RegisterSocket(0, x.fd); err != nil {
		t.Fatalf("RegisterSocket: %v", err)
	}
	checkFrames(t, p, v.A.NS, 0, 0, true)
}

// The kernel refuses test inputs shorter than an Ethernet header, so the
// program's own runt check cannot be driven from here.
func TestRuntBelowEthernetRefusedByTestRun(t *testing.T) {
	p := loadProgram(t)
	_, err := p.XDP().Run(&ebpf.RunOptions{Data: make([]byte, 13)})
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("13-byte frame: got %v, want EINVAL", err)
	}
}

func TestRegisterSocketErrors(t *testing.T) {
	p := loadProgram(t)
	if got, want := p.Queues(), 64; got != want {
		t.Errorf("Queues: got %d, want %d", got, want)
	}
	for _, q := range []int{-1, p.Queues()} {
		if err := p.RegisterSocket(q, 0); !errors.Is(err, ErrQueueRange) {
			t.Errorf("RegisterSocket(%d): got %v, want ErrQueueRange", q, err)
		}
		if err := p.UnregisterSocket(q); !errors.Is(err, ErrQueueRange) {
			t.Errorf("UnregisterSocket(%d): got %v, want ErrQueueRange", q, err)
		}
	}
	// Not an AF_XDP socket: the kernel refuses it.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := p.RegisterSocket(0, fd); err == nil {
		t.Errorf("RegisterSocket(UDP socket): got nil, want an error")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.RegisterSocket(0, fd); !errors.Is(err, ErrClosed) {
		t.Errorf("RegisterSocket after Close: got %v, want ErrClosed", err)
	}
	if _, err := p.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters after Close: got %v, want ErrClosed", err)
	}
}

// The program's own cost per frame, measured in the kernel by
// BPF_PROG_TEST_RUN with Repeat (no socket: RoCEv2 frames are passed).
func BenchmarkProgram(b *testing.B) {
	testutil.RequireRoot(b)
	p, err := Load()
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"IPv4 RoCEv2 64", eth(etherIPv4, ipv4(protoUDP, roce(64)))},
		{"IPv6 RoCEv2 4150", eth(etherIPv6, ipv6(protoUDP, roce(4150-62)))},
		{"IPv4 TCP", eth(etherIPv4, ipv4(protoTCP, tcp(80)))},
	} {
		b.Run(c.name, func(b *testing.B) {
			_, per, err := p.XDP().Benchmark(c.frame, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "kernel-ns/frame")
		})
	}
}

// Map operations racing Close either finish or report ErrClosed (run with -race).
func TestProgramConcurrentClose(t *testing.T) {
	p := loadProgram(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if _, err := p.Counters(); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("Counters: %v", err)
					return
				}
				if err := p.UnregisterSocket(3); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("UnregisterSocket: %v", err)
					return
				}
			}
		}()
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
}
