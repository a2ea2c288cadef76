package link

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
)

// offloadFrames is a run of RoCE frames from A to B as an engine sends them
// (IPv4 identification 0): n of size bytes of payload, then a shorter one.
func offloadFrames(t *testing.T, p *testenv.Pair, v6 bool, n, size int) [][]byte {
	var fs [][]byte
	for i := range n + 1 {
		pl := bytes.Repeat([]byte{byte(i)}, size)
		if i == n {
			pl = pl[:size/3]
		}
		fs = append(fs, roceFrame(t, &p.A, &p.B, v6, uint32(i), pl))
	}
	return fs
}

// readOffload reads n frames from l and checks each one's ICRC.
func readOffload(t *testing.T, l *UDP, n int) [][]byte {
	t.Helper()
	got := readN(t, l, n)
	var pkt wire.Packet
	for i, f := range got {
		if err := wire.ParseAndVerify(f, &pkt); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	return got
}

// TestUDPOffload: with Offload on both ends of a veth pair, a run of frames
// to one peer goes as one GSO send and arrives as one coalesced datagram;
// the receiver hands out every frame with the header the kernel would have
// put on each segment (IPv4 identification i for segment i, whose ICRC the
// sender recomputed), and every ICRC verifies.
func TestUDPOffload(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4200})
	for _, v6 := range []bool{false, true} {
		testOffload(t, p, v6)
	}
}

func testOffload(t *testing.T, p *testenv.Pair, v6 bool) {
	{
		var a, b *UDP
		for _, e := range []struct {
			ep *testenv.Endpoint
			l  **UDP
		}{{&p.A, &a}, {&p.B, &b}} {
			if err := e.ep.Do(func() (err error) {
				*e.l, err = NewUDP(UDPOptions{Interface: e.ep.Name, Offload: true})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer (*e.l).Close()
		}
		frames := offloadFrames(t, p, v6, 20, 4096)
		if n, err := a.WriteBatch(frames); n != len(frames) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		got := readOffload(t, b, len(frames))
		ids := 0
		for i := range frames {
			if !sameFrame(got[i], frames[i]) {
				t.Errorf("v6=%v frame %d differs from what was sent", v6, i)
			}
			if !v6 && binary.BigEndian.Uint16(got[i][wire.EthernetLen+4:]) != 0 {
				ids++ // a segment after the first of its send
			}
		}
		var co uint64
		for _, s := range b.socks {
			co += s.gro.coalesced
		}
		if co == 0 {
			t.Errorf("v6=%v: nothing arrived coalesced: the run did not go as one GSO send", v6)
		}
		if !v6 && ids == 0 {
			t.Errorf("no frame arrived with an identification but 0: the runs were not numbered")
		}
	}
}

// docPair is two IPv4 endpoints of the documentation range (RFC 5737)
// with zero MACs, for frames these tests build and hand to the link's
// code directly.
func docPair() (a, b *testenv.Endpoint) {
	a = &testenv.Endpoint{MAC: make([]byte, 6), IPv4: netip.MustParseAddr("192.0.2.1")}
	b = &testenv.Endpoint{MAC: make([]byte, 6), IPv4: netip.MustParseAddr("192.0.2.2")}
	return a, b
}

// TestGROSplit: a coalesced datagram of RoCE packets is handed out one
// frame per packet, each with the header its segment had: identification i
// for segment i of a GSO send; identification 0 for packets sent one by one,
// each with 0, that GRO coalesced on the way in (a peer without GSO behind a
// receiver with GRO; veth's NAPI polls each datagram alone, so this test
// stages the datagrams itself). The second segment decides for the rest of its
// datagram alone: the staged datagrams alternate, and the reader takes them
// 3 frames at a time, so a decision is also carried across calls.
func TestGROSplit(t *testing.T) {
	a, b := docPair()
	s := &udpSock{hdr: wire.EthernetLen + wire.IPv4Len + wire.UDPLen, local: b.IPv4, gro: newGROStage()}
	g := s.gro
	var sh wire.ICRCShift
	var frames [][]byte
	var wantFixed uint64
	for d, gso := range []bool{true, false, false, true, true} {
		var staged []byte
		for i := range 5 {
			pl := bytes.Repeat([]byte{byte(d*5 + i)}, 1024)
			if i == 4 {
				pl = pl[:100]
			}
			f, err := testenv.RoCESendOnly(a, b, false, uint32(d*5+i), pl)
			if err != nil {
				t.Fatal(err)
			}
			if gso {
				setIPv4ID(f, uint16(i), &sh)
			} else if i > 0 {
				wantFixed++
			}
			frames = append(frames, f)
			_, udp, _ := splitFrame(f)
			staged = append(staged, udp...)
		}
		_, first, _ := splitFrame(frames[d*5])
		g.lens[d], g.segs[d] = len(staged), len(first)
		copy(g.bufs[d], staged)
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&g.names[d]))
		sa.Family, sa.Port, sa.Addr = unix.AF_INET, ntohs(RoCEv2Port), a.IPv4.As4()
	}
	g.n = 5
	bufs, sizes := make([][]byte, len(frames)), make([]int, len(frames))
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	var dropped atomic.Uint64
	for got := 0; got < len(frames); {
		k := min(3, len(frames)-got)
		n, err := g.recv(s, bufs[got:got+k], sizes[got:got+k], &dropped)
		if err != nil || n != k {
			t.Fatalf("recv after %d frames = %d, %v; want %d", got, n, err, k)
		}
		got += n
	}
	var pkt wire.Packet
	for i := range frames {
		f := bufs[i][:sizes[i]]
		if err := wire.ParseAndVerify(f, &pkt); err != nil {
			t.Errorf("frame %d (datagram %d): %v", i, i/5, err)
		}
		if !sameFrame(f, frames[i]) {
			t.Errorf("frame %d (datagram %d) differs from what was sent", i, i/5)
		}
	}
	if g.fixedID != wantFixed {
		t.Errorf("%d segments given identification 0, want %d", g.fixedID, wantFixed)
	}
}

// TestSetIPv4IDICRC: renumbering a frame carries the change into its ICRC
// (the value a full pass over the renumbered frame gives), for payloads of
// 0-4096 bytes and identifications whose change carries across both bytes;
// one ICRCShift serves frames of every length. A frame whose ICRC was wrong
// keeps it wrong by the same bits: the link fixes no corruption it was given.
func TestSetIPv4IDICRC(t *testing.T) {
	a, b := docPair()
	full := func(f []byte) uint32 {
		icrc, ok := wire.ICRCInPlace(f[wire.EthernetLen:len(f)-wire.ICRCLen], wire.IPv4Len)
		if !ok {
			t.Fatal("ICRCInPlace refused a frame")
		}
		return icrc
	}
	var sh wire.ICRCShift
	for _, size := range []int{0, 1, 100, 1024, 4096, 100} {
		for _, id := range []uint16{1, 0x00FF, 0x0100, 0x7FFF, 0xFFFF, 0} {
			f, err := testenv.RoCESendOnly(a, b, false, 7, bytes.Repeat([]byte{0xA5}, size))
			if err != nil {
				t.Fatal(err)
			}
			binary.BigEndian.PutUint16(f[wire.EthernetLen+4:], 0x1234) // and its ICRC to match
			wire.PutICRC(f[len(f)-wire.ICRCLen:], full(f))
			bad := bytes.Clone(f)
			bad[len(bad)-1] ^= 0x40

			setIPv4ID(f, id, &sh)
			setIPv4ID(bad, id, &sh)
			if got := binary.BigEndian.Uint16(f[wire.EthernetLen+4:]); got != id {
				t.Fatalf("payload %d: identification %#04x, want %#04x", size, got, id)
			}
			if got, want := wire.GetICRC(f[len(f)-wire.ICRCLen:]), full(f); got != want {
				t.Fatalf("payload %d, id %#04x: ICRC %#08x, a full pass gives %#08x", size, id, got, want)
			}
			if got, want := wire.GetICRC(bad[len(bad)-wire.ICRCLen:]), full(bad)^0x40<<24; got != want {
				t.Fatalf("payload %d, id %#04x: a wrong ICRC became %#08x, want %#08x (still wrong)", size, id, got, want)
			}
		}
	}
}
