package link

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	cilink "github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/nic/xsk"
	"github.com/xrnic/xrnic/testenv"
)

// openOn opens a link of kind k on endpoint e, inside e's namespace.
func openOn(t testing.TB, e *testenv.Endpoint, k Kind) Link {
	t.Helper()
	var l Link
	err := e.Do(func() (err error) {
		switch k {
		case KindAFXDP:
			l, err = NewAFXDP(AFXDPOptions{Interface: e.Name, Mode: benchMode})
		case KindUDP:
			l, err = NewUDP(UDPOptions{Interface: e.Name})
		default:
			err = fmt.Errorf("kind %s", k)
		}
		return err
	})
	if err != nil {
		t.Fatalf("open %s link on %s: %v", k, e.Name, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// roceFrame builds the test traffic: testenv.RoCESendOnly, failing t on error.
func roceFrame(t testing.TB, src, dst *testenv.Endpoint, v6 bool, psn uint32, payload []byte) []byte {
	t.Helper()
	f, err := testenv.RoCESendOnly(src, dst, v6, psn, payload)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sameFrame compares what a receiver saw with what was sent. MACs are not compared
// when the receiver is a UDP link (a socket does not see them), nor the fields the
// ICRC masks and the kernel may set on its own (IPv6 flow label, traffic class, hop
// limit; IPv4 TOS, TTL and checksum); the ICRC check then proves the rest.
func sameFrame(got, want []byte) bool {
	if len(got) != len(want) {
		return false
	}
	g, w := append([]byte(nil), got...), append([]byte(nil), want...)
	for _, b := range [][]byte{g, w} {
		clear(b[:12])
		switch b[12] {
		case 0x08:
			b[15], b[22], b[24], b[25] = 0, 0, 0, 0
			b[40], b[41] = 0, 0 // UDP checksum: the kernel may fill it in (PLATFORM 4)
		case 0x86:
			b[14], b[15], b[16], b[17], b[21] = 0x60, 0, 0, 0, 0
			b[60], b[61] = 0, 0
		}
	}
	return bytes.Equal(g, w)
}

// TestVethRoCEFrames sends RoCEv2 frames built with nic/wire across a real veth pair
// between two namespaces, at RoCE MTU 1024, 2048 and 4096, over IPv4 and IPv6, with
// every combination of AF_XDP and UDP links on the two ends: AF_XDP TX reaches the
// peer, frames reach the AF_XDP socket intact through the XDP program, and the UDP
// link passes the same checks. Every received frame must verify its ICRC, which also
// proves that the kernel sends what the UDP link assumes (IPv4 identification 0, DF).
func TestVethRoCEFrames(t *testing.T) {
	for _, mtu := range []int{1024, 2048, 4096} {
		t.Run(fmt.Sprintf("mtu%d", mtu), func(t *testing.T) {
			// The veth carries RoCE MTU + IB, UDP and IP headers (PLATFORM: ~4150 for 4096).
			// IPv6 needs an MTU of at least 1280.
			p := testenv.NewTestPair(t, testenv.PairOptions{MTU: max(mtu+128, 1500)})
			for _, kinds := range [][2]Kind{{KindAFXDP, KindAFXDP}, {KindUDP, KindAFXDP}, {KindAFXDP, KindUDP}, {KindUDP, KindUDP}} {
				tx, rx := kinds[0], kinds[1]
				t.Run(fmt.Sprintf("%s_to_%s", tx, rx), func(t *testing.T) {
					lb := openOn(t, &p.B, tx)
					la := openOn(t, &p.A, rx)
					for _, v6 := range []bool{false, true} {
						var frames [][]byte
						for i, size := range []int{0, 1, 64, mtu / 2, mtu - 1, mtu} {
							for j := 0; j < 10; j++ {
								payload := bytes.Repeat([]byte{byte(i*16 + j + 1)}, size)
								frames = append(frames, roceFrame(t, &p.B, &p.A, v6, uint32(i*10+j), payload))
							}
						}
						sendAll(t, lb, frames)
						got := readN(t, la, len(frames))
						var pk wire.Packet
						for i := range frames {
							if !sameFrame(got[i], frames[i]) {
								t.Fatalf("v6=%v frame %d (%d bytes) arrived changed:\n got %x\nwant %x", v6, i, len(frames[i]), head(got[i]), head(frames[i]))
							}
							if err := wire.ParseAndVerify(got[i], &pk); err != nil {
								t.Fatalf("v6=%v frame %d: %v", v6, i, err)
							}
							if rx == KindAFXDP && !bytes.Equal(got[i][:12], frames[i][:12]) {
								t.Fatalf("MACs changed on the AF_XDP path")
							}
						}
					}
					if x, ok := la.(*AFXDP); ok {
						c, err := x.ProgramCounters()
						if err != nil {
							t.Fatal(err)
						}
						if c.Redirected < 120 {
							t.Errorf("program counters %+v: want at least 120 redirected", c)
						}
					}
				})
			}
		})
	}
}

func head(b []byte) []byte { return b[:min(len(b), 80)] }

func sendAll(t testing.TB, l Link, frames [][]byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(frames) > 0 {
		n, err := l.WriteBatch(frames)
		if err != nil {
			t.Fatalf("WriteBatch: %v", err)
		}
		frames = frames[n:]
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("WriteBatch made no progress")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestVethKernelTrafficWithProgram: with the program attached and AF_XDP sockets
// bound on both ends, ping (IPv4, IPv6) and TCP still work and other UDP still
// reaches kernel sockets: only RoCEv2 is steered.
func TestVethKernelTrafficWithProgram(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4200})
	la := openOn(t, &p.A, KindAFXDP)
	openOn(t, &p.B, KindAFXDP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, dst := range []netip.Addr{p.B.IPv4, p.B.IPv6} {
		if err := p.A.NS.Ping(ctx, dst); err != nil {
			t.Fatalf("ping %s with the program attached: %v", dst, err)
		}
	}
	// TCP: a listener in B, a dialer in A, 1 MiB echoed.
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(p.B.IPv4.String(), "7471"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	var c net.Conn
	if err := p.A.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(p.B.IPv4.String(), "7471"), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("TCP dial with the program attached: %v", err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("xrnic"), 200000)
	go c.Write(msg)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	echo := make([]byte, len(msg))
	if _, err := io.ReadFull(c, echo); err != nil || !bytes.Equal(echo, msg) {
		t.Fatalf("TCP echo through the XDP program: %v", err)
	}
	// UDP to another port reaches a kernel socket in A.
	var uc *net.UDPConn
	if err := p.A.Do(func() (err error) {
		uc, err = net.ListenUDP("udp", &net.UDPAddr{IP: p.A.IPv4.AsSlice(), Port: 4792})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if err := p.B.Do(func() error {
		s, err := net.Dial("udp", net.JoinHostPort(p.A.IPv4.String(), "4792"))
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Write([]byte("not roce"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	if n, _, err := uc.ReadFrom(buf); err != nil || string(buf[:n]) != "not roce" {
		t.Fatalf("UDP to port 4792 with the program attached: %q, %v", buf[:n], err)
	}
	c2, err := la.(*AFXDP).ProgramCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c2.Passed == 0 || c2.Redirected != 0 {
		t.Errorf("program counters %+v: want kernel traffic passed and nothing redirected", c2)
	}
}

// TestOpenAuto: with AF_XDP available Auto picks it; with another program on the
// interface it falls back to UDP and says why; when that program is another xrnic's,
// it refuses instead (the program would take the UDP socket's frames).
func TestOpenAuto(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	var logs []string
	logf := func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }
	err := p.A.Do(func() error {
		l1, err := Open(Options{Interface: p.A.Name, Logf: logf})
		if err != nil {
			return err
		}
		if l1.Info().Kind != KindAFXDP {
			return fmt.Errorf("first open: %s link, want af_xdp", l1.Info().Kind)
		}
		_, err = Open(Options{Interface: p.A.Name, Logf: logf})
		l1.Close()
		if !errors.Is(err, bpf.ErrXDPOurs) || !errors.Is(err, ErrUnavailable) {
			return fmt.Errorf("open beside another xrnic: %v, want ErrXDPOurs", err)
		}
		// A foreign program (XDP_PASS, named "other"): fall back, and say so.
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "other", Type: ebpf.XDP, License: "MIT",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
		if err != nil {
			return err
		}
		defer prog.Close()
		ifc, err := net.InterfaceByName(p.A.Name)
		if err != nil {
			return err
		}
		xl, err := cilink.AttachXDP(cilink.XDPOptions{Program: prog, Interface: ifc.Index, Flags: cilink.XDPGenericMode})
		if err != nil {
			return err
		}
		defer xl.Close()
		l2, err := Open(Options{Interface: p.A.Name, Logf: logf})
		if err != nil {
			return err
		}
		defer l2.Close()
		if l2.Info().Kind != KindUDP {
			return fmt.Errorf("open beside a foreign program: %s link, want udp", l2.Info().Kind)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != 2 || !strings.Contains(logs[1], "falling back to the UDP link") || !strings.Contains(logs[1], "XDP program") {
		t.Fatalf("log lines %q", logs)
	}
}

// TestAFXDPErrors: a missing or down interface, or one that already has an XDP
// program, gives an error naming the problem, and nothing stays attached.
func TestAFXDPErrors(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	err := p.A.Do(func() error {
		if _, err := NewAFXDP(AFXDPOptions{Interface: "nosuch0"}); !errors.Is(err, ErrUnavailable) || !errors.Is(err, netdev.ErrNoInterface) {
			return fmt.Errorf("missing interface: %v", err)
		}
		l, err := netlink.LinkByName(p.A.Name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetDown(l); err != nil {
			return err
		}
		_, err = NewAFXDP(AFXDPOptions{Interface: p.A.Name})
		if !errors.Is(err, netdev.ErrInterfaceDown) || !strings.Contains(err.Error(), p.A.Name) {
			return fmt.Errorf("down interface: %v", err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		first, err := NewAFXDP(AFXDPOptions{Interface: p.A.Name})
		if err != nil {
			return err
		}
		_, err = NewAFXDP(AFXDPOptions{Interface: p.A.Name})
		if !errors.Is(err, bpf.ErrXDPBusy) || !errors.Is(err, bpf.ErrXDPOurs) {
			return fmt.Errorf("busy interface (our own program): %v", err)
		}
		first.Close()
		l, err = netlink.LinkByName(p.A.Name)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return fmt.Errorf("an XDP program stayed attached after Close: %+v", x)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func countFDs(t testing.TB) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestLinksCloseCleanly: opening and closing AF_XDP and UDP links leaves no file
// descriptor, mapping or XDP program behind.
func TestLinksCloseCleanly(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4200})
	// Shared mappings: the AF_XDP rings and UMEM are mapped MAP_SHARED; the Go
	// heap's own mappings are private and may grow meanwhile.
	maps := func() int {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ln := range strings.Split(string(b), "\n") {
			if f := strings.Fields(ln); len(f) > 1 && strings.HasSuffix(f[1], "s") {
				n++
			}
		}
		return n
	}
	// One round first, so lazily created runtime state is not counted as a leak.
	for _, k := range []Kind{KindAFXDP, KindUDP} {
		l := openOn(t, &p.A, k)
		l.Close()
	}
	fds, mp := countFDs(t), maps()
	for i := 0; i < 3; i++ {
		for _, k := range []Kind{KindAFXDP, KindUDP} {
			l := openOn(t, &p.A, k)
			if k == KindAFXDP && maps() < mp+4 {
				t.Fatalf("an open AF_XDP link shows %d shared mappings, want its 4 rings more than %d", maps(), mp)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Other goroutines (testenv, the runtime) may hold an fd for a moment: a leak is
	// a count that stays above the one before.
	got := countFDs(t)
	for deadline := time.Now().Add(2 * time.Second); got > fds && time.Now().Before(deadline); got = countFDs(t) {
		time.Sleep(20 * time.Millisecond)
	}
	if got > fds {
		t.Errorf("open fds after close: got %d, want at most %d", got, fds)
	}
	if got := maps(); got != mp {
		t.Errorf("mappings after close: got %d, want %d", got, mp)
	}
	err := p.A.Do(func() error {
		l, err := netlink.LinkByName(p.A.Name)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return fmt.Errorf("XDP program left attached: %+v", x)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAFXDPWriteWhileDown: an AF_XDP socket whose interface goes down refuses
// batches with an error under the Link sentinels (ErrUnavailable, keeping
// xsk.ErrLinkDown), and sends again once the interface is back up.
func TestAFXDPWriteWhileDown(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	a := openOn(t, &p.A, KindAFXDP)
	b := openOn(t, &p.B, KindAFXDP)
	frame := roceFrame(t, &p.A, &p.B, false, 1, []byte("while down"))
	setState := func(up bool) {
		t.Helper()
		err := p.A.Do(func() error {
			l, err := netlink.LinkByName(p.A.Name)
			if err != nil {
				return err
			}
			if up {
				return netlink.LinkSetUp(l)
			}
			return netlink.LinkSetDown(l)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setState(false)
	_, err := a.WriteBatch([][]byte{frame})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, xsk.ErrLinkDown) {
		t.Fatalf("WriteBatch on a down interface: %v, want ErrUnavailable wrapping xsk.ErrLinkDown", err)
	}
	setState(true)
	// Carrier comes back asynchronously: retry until a frame crosses.
	deadline := time.Now().Add(10 * time.Second)
	bufs, sizes := [][]byte{make([]byte, 2048)}, make([]int, 1)
	for time.Now().Before(deadline) {
		if _, err := a.WriteBatch([][]byte{frame}); err != nil && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("WriteBatch after up: %v", err)
		}
		_ = b.Wait(100 * time.Millisecond)
		if n, err := b.ReadBatch(bufs, sizes); err != nil {
			t.Fatal(err)
		} else if n > 0 {
			return
		}
	}
	t.Fatal("no frame crossed after the interface came back up")
}

// A datagram that fits its own buffer but not the smaller one ReadBatch would
// move it to, to close the gap a truncated one left, is dropped and counted, as
// the Link contract says of a frame longer than its buffer. Before, it was cut
// to that buffer while its size said the whole length.
func TestUDPReadBatchUnevenBuffers(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4200})
	var a, b *UDP
	if err := p.A.Do(func() (err error) { a, err = NewUDP(UDPOptions{Interface: p.A.Name}); return }); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := p.B.Do(func() (err error) { b, err = NewUDP(UDPOptions{Interface: p.B.Name}); return }); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	big := roceFrame(t, &p.A, &p.B, false, 1, bytes.Repeat([]byte{1}, 3000)) // truncated in bufs[0]
	mid := roceFrame(t, &p.A, &p.B, false, 2, bytes.Repeat([]byte{2}, 1500)) // fits bufs[1], not bufs[0]
	if n, err := a.WriteBatch([][]byte{big, mid}); n != 2 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	bufs := [][]byte{make([]byte, 1000), make([]byte, 2000)}
	sizes := make([]int, 2)
	got := 0
	for end := time.Now().Add(2 * time.Second); b.Stats().RxDropped < 2 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		n, err := b.ReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if sizes[i] > len(bufs[i]) {
				t.Fatalf("sizes[%d] = %d, past its buffer of %d", i, sizes[i], len(bufs[i]))
			}
		}
		got += n
	}
	if d := b.Stats().RxDropped; d != 2 || got != 0 {
		t.Fatalf("%d frames read, %d dropped; want both dropped", got, d)
	}
}
