package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/wire"
)

// testFrame builds Ethernet + IPv4/IPv6 + UDP(4791 -> 4791) around payload, with the
// IPv4 fields the UDP link rebuilds (identification 0, DF, TTL 64).
func testFrame(src, dst netip.Addr, payload []byte) []byte {
	var f []byte
	f = append(f, make([]byte, 12)...)
	if src.Is4() {
		f = binary.BigEndian.AppendUint16(f, 0x0800)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(28+len(payload)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		ip[8], ip[9] = 64, 17
		s4, d4 := src.As4(), dst.As4()
		copy(ip[12:], s4[:])
		copy(ip[16:], d4[:])
		binary.BigEndian.PutUint16(ip[10:], wire.Checksum(ip))
		f = append(f, ip...)
	} else {
		f = binary.BigEndian.AppendUint16(f, 0x86DD)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(8+len(payload)))
		ip[6], ip[7] = 17, 64
		s16, d16 := src.As16(), dst.As16()
		copy(ip[8:], s16[:])
		copy(ip[24:], d16[:])
		f = append(f, ip...)
	}
	f = binary.BigEndian.AppendUint16(f, RoCEv2Port)
	f = binary.BigEndian.AppendUint16(f, RoCEv2Port)
	f = binary.BigEndian.AppendUint16(f, uint16(8+len(payload)))
	f = binary.BigEndian.AppendUint16(f, 0)
	return append(f, payload...)
}

// readN reads until n frames arrived or a deadline passes.
func readN(t testing.TB, l Link, n int) [][]byte {
	t.Helper()
	rb, sizes := bufs(64, 9100)
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		k, err := l.ReadBatch(rb, sizes)
		if err != nil {
			t.Fatalf("ReadBatch: %v", err)
		}
		for i := 0; i < k; i++ {
			got = append(got, append([]byte(nil), rb[i][:sizes[i]]...))
		}
		if k == 0 {
			l.Wait(50 * time.Millisecond)
		}
	}
	if len(got) != n {
		t.Fatalf("received %d frames, want %d", len(got), n)
	}
	return got
}

// loAddr returns a loopback address of this test process's own (all of 127/8 is
// lo's), so that packages tested in parallel (bench --local binds 127.0.0.x:4791)
// never collide on port 4791.
func loAddr(n byte) netip.Addr {
	pid := os.Getpid()
	return netip.AddrFrom4([4]byte{127, 88 + byte(pid>>16&7), byte(pid >> 8), n + byte(pid)&0xf0})
}

// TestUDPLoopback runs without privileges: two UDP links on lo, on two loopback
// addresses (and ::1 to itself), exchange frames; what arrives is byte for byte the
// frame that was sent, header included, because the link rebuilds the header the
// kernel sent.
func TestUDPLoopback(t *testing.T) {
	a4, b4 := loAddr(1), loAddr(2)
	a, err := NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{a4}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{b4}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if in := a.Info(); in.Kind != KindUDP || in.FixedSourcePort != RoCEv2Port || !in.FixedIPv4ID {
		t.Errorf("Info = %+v", in)
	}
	var frames [][]byte
	for i, n := range []int{0, 1, 64, 1024, 2048, 4096, 8000} {
		p := bytes.Repeat([]byte{byte(i + 1)}, n)
		frames = append(frames, testFrame(a4, b4, p))
	}
	if n, err := a.WriteBatch(frames); n != len(frames) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readN(t, b, len(frames))
	for i := range frames {
		if !bytes.Equal(got[i], frames[i]) {
			t.Errorf("frame %d:\n got %x\nwant %x", i, got[i][:min(60, len(got[i]))], frames[i][:min(60, len(frames[i]))])
		}
	}
	if st := a.Stats(); st.TxFrames != uint64(len(frames)) {
		t.Errorf("TxFrames = %d, want %d", st.TxFrames, len(frames))
	}
}

func TestUDPLoopbackIPv6(t *testing.T) {
	lo6 := netip.MustParseAddr("::1")
	// ::1 is lo's only IPv6 address, and bench's tests in a parallel package may hold
	// [::1]:4791 for a moment: wait for it rather than fail.
	a, err := NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{lo6}})
	for deadline := time.Now().Add(30 * time.Second); errors.Is(err, unix.EADDRINUSE) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		a, err = NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{lo6}})
	}
	if err != nil {
		if testutil.InCI() {
			t.Fatalf("no IPv6 on lo, and CI=true forbids skipping: %v", err)
		}
		t.Skipf("no IPv6 on lo: %v", err)
	}
	defer a.Close()
	f := testFrame(lo6, lo6, []byte("hello over v6"))
	if n, _ := a.WriteBatch([][]byte{f}); n != 1 {
		t.Fatal("not sent")
	}
	got := readN(t, a, 1)
	if !bytes.Equal(got[0], f) {
		t.Errorf("got %x\nwant %x", got[0], f)
	}
}

func TestUDPDropsWhatItCannotSend(t *testing.T) {
	a, err := NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{loAddr(1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v6 := testFrame(netip.MustParseAddr("::1"), netip.MustParseAddr("::1"), []byte{1})
	bad := [][]byte{{1, 2, 3}, make([]byte, 60), v6}
	if n, err := a.WriteBatch(bad); n != len(bad) || err != nil {
		t.Fatalf("WriteBatch = %d, %v; want all taken", n, err)
	}
	if st := a.Stats(); st.TxDropped != 3 || st.TxFrames != 0 {
		t.Errorf("stats %+v: want 3 dropped, 0 sent", st)
	}
}

func TestUDPErrors(t *testing.T) {
	if _, err := NewUDP(UDPOptions{Interface: "nosuch0"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("missing interface: %v", err)
	}
	if _, err := NewUDP(UDPOptions{Interface: "lo", Port: 70000}); !errors.Is(err, ErrBadOption) {
		t.Errorf("bad port: %v", err)
	}
	a, err := NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{loAddr(1)}})
	if err != nil {
		t.Fatal(err)
	}
	// The port is in use: a clear error, nothing left open.
	_, err = NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{loAddr(1)}})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("port in use: %v", err)
	}
	a.Close()
	if _, err := a.WriteBatch(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteBatch after Close: %v", err)
	}
	if err := a.Wait(-1); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after Close: %v", err)
	}
	a.Wake() // harmless after Close
}

func TestUDPWaitWake(t *testing.T) {
	a, err := NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{loAddr(1)}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- a.Wait(-1) }()
	time.Sleep(10 * time.Millisecond)
	a.Wake()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { done <- a.Wait(-1) }()
	time.Sleep(10 * time.Millisecond)
	a.Close()
	if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestUDPNoAllocs(t *testing.T) {
	for _, off := range []bool{false, true} {
		a4 := loAddr(1)
		a, err := NewUDP(UDPOptions{Interface: "lo", Addrs: []netip.Addr{a4}, Offload: off})
		if err != nil {
			t.Fatal(err)
		}
		// With Offload, the eight go as one GSO send and come back coalesced.
		var frames [][]byte
		for range 8 {
			frames = append(frames, testFrame(a4, a4, make([]byte, 1000)))
		}
		rb, sizes := bufs(8, 2000)
		allocs := testing.AllocsPerRun(200, func() {
			a.WriteBatch(frames)
			for n, tries := 0, 0; n < len(frames) && tries < 1000; tries++ {
				k, _ := a.ReadBatch(rb, sizes)
				n += k
			}
		})
		a.Close()
		if allocs != 0 {
			t.Errorf("offload %v: allocs per write+read = %v, want 0", off, allocs)
		}
	}
}
