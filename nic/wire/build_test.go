// Encode/Parse round trips and encoder errors.

package wire

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

// normalized returns f as Packet.Fields reports it back: computed fields filled in,
// headers the opcode lacks zeroed.
func normalized(f *FrameFields) FrameFields {
	g := *f
	g.IB.Payload = bytes.Clone(f.IB.Payload)
	in := f.IB.BTH.Opcode.Info()
	m := in.Mask
	n := len(f.IB.Payload)
	if f.IB.BTH.Opcode == CNP && n == 0 {
		g.IB.Payload = make([]byte, CNPLen)
		n = CNPLen
	}
	ibLen := in.HeaderLen + n + padFor(n) + ICRCLen
	g.IB.BTH.PadCount = uint8(padFor(n))
	if g.UDP.DstPort == 0 {
		g.UDP.DstPort = UDPPortRoCEv2
	}
	g.UDP.Length = UDPLen + ibLen
	g.ComputeUDPChecksum = false
	if f.IPVersion == 4 {
		g.Ethernet.EtherType = EtherTypeIPv4
		g.IPv4.TotalLength = IPv4Len + UDPLen + ibLen
		g.IPv4.Protocol = IPProtoUDP
		g.IPv6 = IPv6Fields{}
	} else {
		g.Ethernet.EtherType = EtherTypeIPv6
		g.IPv6.PayloadLength = UDPLen + ibLen
		g.IPv6.NextHeader = IPProtoUDP
		g.IPv4 = IPv4Fields{}
	}
	if !g.Ethernet.VLAN {
		g.Ethernet.TCI = 0
	}
	zeroUnless := func(bit OpMask, p any) {
		if m&bit == 0 {
			v := reflect.ValueOf(p).Elem()
			v.Set(reflect.Zero(v.Type()))
		}
	}
	zeroUnless(MaskDETH, &g.IB.DETH)
	zeroUnless(MaskFETH, &g.IB.FETH)
	zeroUnless(MaskRETH, &g.IB.RETH)
	zeroUnless(MaskAtomicETH, &g.IB.AtomicETH)
	zeroUnless(MaskAETH, &g.IB.AETH)
	zeroUnless(MaskAtomicAckETH, &g.IB.AtomicAckETH)
	zeroUnless(MaskImmDt, &g.IB.ImmDt)
	zeroUnless(MaskIETH, &g.IB.IETH)
	return g
}

func TestBuildParseRoundTrip(t *testing.T) {
	for _, op := range validOpcodes() {
		for _, v := range []uint8{4, 6} {
			for _, n := range []int{0, 1, 2, 3, 4, 5, 1024, 4096} {
				for _, vlan := range []bool{false, true} {
					f := sampleFields(op, v, n)
					f.Ethernet.VLAN = vlan
					f.Ethernet.TCI = 0x2005
					b := mustBuild(t, f)
					var p Packet
					if err := ParseAndVerify(b, &p); err != nil {
						t.Fatalf("%v IPv%d n=%d vlan=%v: %v", op, v, n, vlan, err)
					}
					var got FrameFields
					p.Fields(&got)
					want := normalized(f)
					if len(got.IB.Payload) == 0 && len(want.IB.Payload) == 0 {
						got.IB.Payload, want.IB.Payload = nil, nil
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("%v IPv%d n=%d vlan=%v: fields differ\n got %+v\nwant %+v", op, v, n, vlan, got, want)
					}
					if v == 4 && !p.IPv4.ChecksumValid() {
						t.Errorf("%v: IPv4 header checksum invalid", op)
					}
				}
			}
		}
	}
}

// maxPayload4 is the largest SEND ONLY payload an IPv4 packet holds: the total
// length field counts IP, UDP, BTH, payload, pad and ICRC.
const maxPayload4 = (0xFFFF - IPv4Len - UDPLen - BTHLen - ICRCLen) &^ 3

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mod      func(*FrameFields)
		bufLen   int // 0: f.Len()
		sentinel error
	}{
		{"unknown opcode", func(f *FrameFields) { f.IB.BTH.Opcode = 0x18 }, 0, ErrUnknownOpcode},
		{"payload on ACK", func(f *FrameFields) { f.IB.BTH.Opcode = RCAcknowledge; f.IB.Payload = []byte{1} }, 0, ErrBadHeader},
		{"payload on READ request", func(f *FrameFields) { f.IB.BTH.Opcode = RCRDMAReadRequest; f.IB.Payload = []byte{1} }, 0, ErrBadHeader},
		{"CNP 5 bytes", func(f *FrameFields) { f.IB.BTH.Opcode = CNP; f.IB.Payload = []byte{1, 2, 3, 4, 5} }, 0, ErrBadHeader},
		{"IP version 5", func(f *FrameFields) { f.IPVersion = 5 }, 0, ErrBadHeader},
		{"IPv6 address on IPv4", func(f *FrameFields) { f.IPv4.Src = ip6A }, 0, ErrBadHeader},
		{"IPv4 address on IPv6", func(f *FrameFields) { f.IPVersion = 6; f.IPv6.Dst = ip4A }, 0, ErrBadHeader},
		{"no address", func(f *FrameFields) { f.IPv4.Dst = netip.Addr{} }, 0, ErrBadHeader},
		{"too long", func(f *FrameFields) { f.IB.Payload = make([]byte, maxPayload4+1) }, 0, ErrBadHeader},
		{"short buffer", func(f *FrameFields) {}, -1, ErrShortBuffer},
		{"no room for headers", func(f *FrameFields) {}, 20, ErrShortBuffer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := sampleFields(RCSendOnly, 4, 8)
			tc.mod(f)
			n := tc.bufLen
			if n <= 0 {
				n += f.Len()
			}
			_, err := f.Encode(make([]byte, n))
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want an error wrapping %v", err, tc.sentinel)
			}
		})
	}
	// The largest IPv4 frame still builds.
	f := sampleFields(RCSendOnly, 4, maxPayload4)
	if _, err := f.Encode(make([]byte, f.Len())); err != nil {
		t.Errorf("max-size frame: %v", err)
	}
}

func TestBuildUDPChecksum(t *testing.T) {
	for _, v := range []uint8{4, 6} {
		for _, n := range []int{0, 1, 7, 1000} {
			f := sampleFields(RCSendOnly, v, n)
			f.ComputeUDPChecksum = true
			b := mustBuild(t, f)
			var p Packet
			if err := ParseAndVerify(b, &p); err != nil {
				t.Fatal(err)
			}
			// A segment with a correct checksum sums to 0xFFFF with its pseudo header.
			var src, dst netip.Addr
			if v == 4 {
				src, dst = p.IPv4.Src(), p.IPv4.Dst()
			} else {
				src, dst = p.IPv6.Src(), p.IPv6.Dst()
			}
			seg := b[len(b)-p.UDP.Length():]
			s := uint64(IPProtoUDP) + uint64(len(seg))
			a, c := src.AsSlice(), dst.AsSlice()
			s = sum16(sum16(sum16(s, a), c), seg)
			if fold(s) != 0xFFFF || p.UDP.Checksum() == 0 {
				t.Errorf("IPv%d n=%d: UDP checksum %#04x does not verify (sum %#04x)", v, n, p.UDP.Checksum(), fold(s))
			}
		}
	}
}

func TestChecksumRFC1071(t *testing.T) {
	// RFC 1071 section 3 example: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2.
	if got := ^Checksum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}); got != 0xddf2 {
		t.Errorf("sum = %#04x, want 0xddf2", got)
	}
	// Odd lengths pad with a zero byte; long inputs agree with a 16-bit loop.
	b := patterned(1001)
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	s += uint32(b[len(b)-1]) << 8
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	if got := ^Checksum(b); got != uint16(s) {
		t.Errorf("sum of 1001 bytes = %#04x, want %#04x", got, s)
	}
}

func TestHeaderFieldsRoundTrip(t *testing.T) {
	bth := BTHFields{Opcode: RCFetchAdd, SE: true, MigReq: true, PadCount: 3, TVer: 0, PKey: 0x8001, FECN: true, BECN: false, DestQPN: 0xFFFFFF, AckReq: true, PSN: 0x800000}
	b := make([]byte, BTHLen)
	bth.Encode(b)
	if got := BTH(b).Fields(); got != bth {
		t.Errorf("BTH round trip: got %+v, want %+v", got, bth)
	}
	// Setters touch only their own bits.
	h := BTH(b)
	h.SetPSN(0x123456)
	h.SetDestQPN(0x000001)
	h.SetPadCount(1)
	h.SetBECN(true)
	h.SetSE(false)
	want := bth
	want.PSN, want.DestQPN, want.PadCount, want.BECN, want.SE = 0x123456, 1, 1, true, false
	if got := h.Fields(); got != want {
		t.Errorf("BTH after setters: got %+v, want %+v", got, want)
	}
	if h.Reserved6() != 0 || h.Reserved7() != 0 {
		t.Errorf("reserved bits set: %#x %#x", h.Reserved6(), h.Reserved7())
	}

	at := AtomicETHFields{VA: 1, RKey: 2, SwapAdd: 3, Compare: 4}
	b = make([]byte, AtomicETHLen)
	at.Encode(b)
	if got := AtomicETH(b).Fields(); got != at {
		t.Errorf("AtomicETH round trip: got %+v, want %+v", got, at)
	}
	fe := FETHFields{Selectivity: 2, PlacementType: 0xA}
	b = make([]byte, FETHLen)
	fe.Encode(b)
	if got := FETH(b).Fields(); got != fe {
		t.Errorf("FETH round trip: got %+v, want %+v", got, fe)
	}
	if b[3] != 0x2A {
		t.Errorf("FETH bytes %x, want 0000002a", b)
	}
	d := DETHFields{QKey: QP1QKey, SrcQPN: 1}
	b = make([]byte, DETHLen)
	d.Encode(b)
	if want := []byte{0x80, 0x01, 0x00, 0x00, 0, 0, 0, 1}; !bytes.Equal(b, want) {
		t.Errorf("DETH bytes %x, want %x", b, want)
	}
	if got := (MAC{0x52, 0x54, 0, 0xc0, 2, 0xb}).String(); got != "52:54:00:c0:02:0b" {
		t.Errorf("MAC.String() = %q", got)
	}
}

func TestUpdateICRC(t *testing.T) {
	b := mustBuild(t, sampleFields(RCRDMAWriteMiddle, 4, 256))
	var p Packet
	if err := ParseAndVerify(b, &p); err != nil {
		t.Fatal(err)
	}
	p.BTH.SetPSN(p.BTH.PSN().Next()) // a retransmission with a new PSN
	if err := p.VerifyICRC(); !errors.Is(err, ErrBadICRC) {
		t.Fatalf("after changing the PSN: %v, want ErrBadICRC", err)
	}
	p.UpdateICRC()
	if err := ParseAndVerify(b, &p); err != nil {
		t.Fatalf("after UpdateICRC: %v", err)
	}
	// TTL and ECN are variant: changing them needs no new ICRC (only the IPv4
	// checksum), which is what lets routers mark ECN.
	p.IPv4.SetTTL(3)
	p.IPv4.SetECN(3)
	p.IPv4.UpdateChecksum()
	if err := ParseAndVerify(b, &p); err != nil {
		t.Fatalf("after TTL/ECN change: %v", err)
	}
}
