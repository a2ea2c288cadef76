// Parse on bad input: each rejection names its cause and leaves no view.

package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fix4 recomputes the IPv4 header checksum of an untagged frame.
func fix4(b []byte) { IPv4(b[EthernetLen:]).UpdateChecksum() }

// setLens rewrites the IPv4 total length and UDP length of an untagged frame for
// an IB part of n bytes, and truncates or extends the frame to match.
func setLens(b []byte, n int) []byte {
	need := EthernetLen + IPv4Len + UDPLen + n
	for len(b) < need {
		b = append(b, 0)
	}
	b = b[:need]
	IPv4(b[EthernetLen:]).SetTotalLength(IPv4Len + UDPLen + n)
	UDP(b[EthernetLen+IPv4Len:]).SetLength(UDPLen + n)
	fix4(b)
	return b
}

const ibOff4 = EthernetLen + IPv4Len + UDPLen // BTH offset in an untagged IPv4 frame

func TestParseRejects(t *testing.T) {
	base4 := func() []byte { return mustBuild(t, sampleFields(RCSendOnly, 4, 5)) }
	base6 := func() []byte { return mustBuild(t, sampleFields(RCSendOnly, 6, 5)) }
	vlan := func() []byte {
		f := sampleFields(RCSendOnly, 4, 5)
		f.Ethernet.VLAN = true
		return mustBuild(t, f)
	}
	for _, tc := range []struct {
		name     string
		frame    func() []byte
		sentinel error
		what     string
	}{
		{"empty", func() []byte { return nil }, ErrTruncated, "Ethernet header"},
		{"13 bytes", func() []byte { return base4()[:13] }, ErrTruncated, "Ethernet header"},
		{"ARP", func() []byte { b := base4(); b[12], b[13] = 0x08, 0x06; return b }, ErrUnsupported, "EtherType"},
		{"VLAN cut", func() []byte { return vlan()[:17] }, ErrTruncated, "802.1Q"},
		{"QinQ", func() []byte { b := vlan(); b[16], b[17] = 0x81, 0x00; return b }, ErrUnsupported, "stacked VLAN"},
		{"IPv4 cut", func() []byte { return base4()[:EthernetLen+19] }, ErrTruncated, "IPv4 header"},
		{"IPv4 version 6", func() []byte { b := base4(); b[14] = 0x65; fix4(b); return b }, ErrBadHeader, "IP version 6"},
		{"IPv4 options", func() []byte { b := base4(); b[14] = 0x46; fix4(b); return b }, ErrUnsupported, "options"},
		{"IPv4 IHL 4", func() []byte { b := base4(); b[14] = 0x44; fix4(b); return b }, ErrBadHeader, "IHL"},
		{"IPv4 total > frame", func() []byte { b := base4(); IPv4(b[14:]).SetTotalLength(len(b)); fix4(b); return b }, ErrTruncated, "exceeds the frame"},
		{"IPv4 total < 28", func() []byte { b := base4(); IPv4(b[14:]).SetTotalLength(27); fix4(b); return b }, ErrBadHeader, "total length shorter"},
		{"IPv4 checksum", func() []byte { b := base4(); b[24] ^= 1; return b }, ErrBadHeader, "checksum"},
		{"IPv4 MF", func() []byte { b := base4(); b[20] |= 0x20; fix4(b); return b }, ErrUnsupported, "fragment"},
		{"IPv4 frag offset", func() []byte { b := base4(); b[21] = 1; fix4(b); return b }, ErrUnsupported, "fragment"},
		{"IPv4 TCP", func() []byte { b := base4(); b[23] = 6; fix4(b); return b }, ErrUnsupported, "not UDP"},
		{"IPv6 cut", func() []byte { return base6()[:EthernetLen+39] }, ErrTruncated, "IPv6 header"},
		{"IPv6 version 4", func() []byte { b := base6(); b[14] = 0x46; return b }, ErrBadHeader, "IP version 4"},
		{"IPv6 hop-by-hop", func() []byte { b := base6(); b[20] = 0; return b }, ErrUnsupported, "extension headers"},
		{"IPv6 payload > frame", func() []byte { b := base6(); IPv6(b[14:]).SetPayloadLength(len(b)); return b }, ErrTruncated, "payload length"},
		{"IPv6 jumbo 0", func() []byte { b := base6(); IPv6(b[14:]).SetPayloadLength(0); return b }, ErrTruncated, "UDP header"},
		{"UDP port 4790", func() []byte { b := base4(); UDP(b[34:]).SetDstPort(4790); return b }, ErrUnsupported, "4791"},
		{"UDP length +1", func() []byte { b := base4(); u := UDP(b[34:]); u.SetLength(u.Length() + 1); return b }, ErrBadHeader, "UDP length"},
		{"UDP length -1", func() []byte { b := base4(); u := UDP(b[34:]); u.SetLength(u.Length() - 1); return b }, ErrBadHeader, "UDP length"},
		{"no room for BTH+ICRC", func() []byte { return setLens(base4(), 15) }, ErrTruncated, "BTH + ICRC"},
		{"TVer 1", func() []byte { b := base4(); b[ibOff4+1] |= 1; return b }, ErrUnsupported, "header version 1"},
		{"opcode 0x18", func() []byte { b := base4(); b[ibOff4] = 0x18; return b }, ErrUnknownOpcode, "opcode 0x18 (RC"},
		{"RD opcode", func() []byte { b := base4(); b[ibOff4] = 0x44; return b }, ErrUnknownOpcode, "RD transport"},
		{"XRC opcode", func() []byte { b := base4(); b[ibOff4] = 0xA4; return b }, ErrUnknownOpcode, "XRC transport"},
		{"UD SEND_FIRST", func() []byte { b := base4(); b[ibOff4] = 0x60; return b }, ErrUnknownOpcode, "opcode 0x60"},
		{"RETH cut", func() []byte { b := setLens(base4(), 12+10+4); b[ibOff4] = byte(RCRDMAWriteOnly); return b }, ErrTruncated, "opcode's headers"},
		{"AtomicETH cut", func() []byte { b := setLens(base4(), 12+27+4); b[ibOff4] = byte(RCFetchAdd); return b }, ErrTruncated, "opcode's headers"},
		{"pad > payload", func() []byte {
			b := mustBuild(t, sampleFields(RCSendOnly, 4, 0))
			BTH(b[ibOff4:]).SetPadCount(3)
			return b
		}, ErrBadHeader, "pad count"},
		{"pad > payload, with header", func() []byte {
			b := mustBuild(t, sampleFields(RCRDMAReadResponseLast, 4, 2)) // 2 bytes + 2 pad
			BTH(b[ibOff4:]).SetPadCount(3)
			b = setLens(b, 12+4+2+4) // drop one byte: 2 bytes of data before the ICRC
			return b
		}, ErrBadHeader, "pad count"},
		{"ACK with payload", func() []byte { b := base4(); b[ibOff4] = byte(RCAcknowledge); BTH(b[ibOff4:]).SetPadCount(0); return b }, ErrBadHeader, "carries none"},
		{"ACK with pad", func() []byte {
			b := mustBuild(t, sampleFields(RCAcknowledge, 4, 0))
			BTH(b[ibOff4:]).SetPadCount(1)
			return b
		}, ErrBadHeader, "carries none"},
		{"READ request with payload", func() []byte {
			b := setLens(mustBuild(t, sampleFields(RCRDMAReadRequest, 4, 0)), 28+4+4)
			return b
		}, ErrBadHeader, "carries none"},
		{"CNP short", func() []byte { b := setLens(base4(), 12+8+4); b[ibOff4] = byte(CNP); return b }, ErrBadHeader, "CNP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Packet
			if err := Parse(base4(), &p); err != nil { // leave views behind to be cleared
				t.Fatal(err)
			}
			err := Parse(tc.frame(), &p)
			if err == nil {
				t.Fatalf("Parse accepted it")
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("got error %q, want one wrapping %q", err, tc.sentinel)
			}
			if !strings.Contains(err.Error(), tc.what) {
				t.Errorf("got error %q, want it to name %q", err, tc.what)
			}
			if !reflect.ValueOf(p).IsZero() {
				t.Errorf("Packet not reset after the error: %+v", p)
			}
		})
	}
}

func TestParseAndVerifyRejectsBadICRC(t *testing.T) {
	b := mustBuild(t, sampleFields(RCSendOnly, 6, 100))
	b[len(b)-1] ^= 0x80
	var p Packet
	err := ParseAndVerify(b, &p)
	if !errors.Is(err, ErrBadICRC) {
		t.Fatalf("got %v, want ErrBadICRC", err)
	}
	if !reflect.ValueOf(p).IsZero() {
		t.Errorf("Packet not reset after the error")
	}
	if err := Parse(b, &p); err != nil {
		t.Fatalf("Parse (without the ICRC) = %v, want nil", err)
	}
}

// TestParseTruncations cuts a frame at every length: each must fail cleanly.
func TestParseTruncations(t *testing.T) {
	for _, op := range validOpcodes() {
		for _, v := range []uint8{4, 6} {
			f := sampleFields(op, v, 9)
			f.Ethernet.VLAN = true
			full := mustBuild(t, f)
			for n := range len(full) {
				var p Packet
				if err := Parse(full[:n], &p); err == nil {
					t.Fatalf("%v IPv%d: Parse of %d of %d bytes succeeded", op, v, n, len(full))
				}
				if !reflect.ValueOf(p).IsZero() {
					t.Fatalf("%v IPv%d: %d bytes: Packet not reset", op, v, n)
				}
			}
		}
	}
}

func TestParseIgnoresEthernetPadding(t *testing.T) {
	f := sampleFields(RCSendOnly, 4, 0)
	b := mustBuild(t, f)
	if len(b) >= 60 {
		t.Fatalf("empty SEND frame is %d bytes; want one below the Ethernet minimum", len(b))
	}
	padded := append(bytes.Clone(b), make([]byte, 60-len(b))...)
	padded = append(padded, 0xde, 0xad) // and some junk, as a trailer
	var p Packet
	if err := ParseAndVerify(padded, &p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Frame, b) {
		t.Errorf("Frame = %x, want %x", p.Frame, b)
	}
	if len(p.Payload) != 0 || len(p.Pad) != 0 {
		t.Errorf("payload %x pad %x, want none", p.Payload, p.Pad)
	}
}

func TestParseViews(t *testing.T) {
	f := sampleFields(RCRDMAWriteOnlyWithImmediate, 6, 10)
	f.Ethernet.VLAN = true
	f.Ethernet.TCI = 3<<13 | 0x123
	f.IB.BTH.FECN, f.IB.BTH.BECN, f.IB.BTH.MigReq = true, true, true
	b := mustBuild(t, f)
	var p Packet
	if err := ParseAndVerify(b, &p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"dst", p.Ethernet.Dst(), macB},
		{"src", p.Ethernet.Src(), macA},
		{"TPID", p.Ethernet.EtherType(), uint16(EtherTypeVLAN)},
		{"PCP", p.VLAN.PCP(), uint8(3)},
		{"VID", p.VLAN.VID(), uint16(0x123)},
		{"inner type", p.VLAN.EtherType(), uint16(EtherTypeIPv6)},
		{"traffic class", p.IPv6.TrafficClass(), uint8(0x68)},
		{"flow label", p.IPv6.FlowLabel(), uint32(0xABCDE)},
		{"hop limit", p.IPv6.HopLimit(), uint8(64)},
		{"src IP", p.IPv6.Src(), ip6A},
		{"dst IP", p.IPv6.Dst(), ip6B},
		{"payload length", p.IPv6.PayloadLength(), UDPLen + 32 + 12 + 4},
		{"UDP length", p.UDP.Length(), UDPLen + 32 + 12 + 4},
		{"sport", p.UDP.SrcPort(), UDPSport(0, 0x11, 0x12)},
		{"opcode", p.Opcode, RCRDMAWriteOnlyWithImmediate},
		{"SE", p.BTH.SE(), true},
		{"M", p.BTH.MigReq(), true},
		{"pad", p.BTH.PadCount(), 2},
		{"PKey", p.BTH.PKey(), uint16(DefaultPKey)},
		{"FECN", p.BTH.FECN(), true},
		{"BECN", p.BTH.BECN(), true},
		{"QPN", p.BTH.DestQPN(), uint32(0x123456)},
		{"AckReq", p.BTH.AckReq(), true},
		{"PSN", p.BTH.PSN(), PSN(0xFEDCBA)},
		{"VA", p.RETH.VA(), uint64(0x00005577d89f9000)},
		{"RKey", p.RETH.RKey(), uint32(0x0c4e)},
		{"DMALen", p.RETH.DMALen(), uint32(3000)},
		{"Imm", p.ImmDt.Imm(), uint32(0xCAFEF00D)},
		{"payload", string(p.Payload), string(patterned(10))},
		{"pad bytes", string(p.Pad), "\x00\x00"},
		{"no AETH", p.AETH == nil, true},
		{"no DETH", p.DETH == nil, true},
		{"no IPv4", p.IPv4 == nil, true},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	// Views are clipped: appending to one cannot overwrite the next header.
	if cap(p.RETH) != RETHLen || cap(p.Payload) != len(p.Payload) {
		t.Errorf("views not clipped: cap(RETH) %d, cap(Payload) %d", cap(p.RETH), cap(p.Payload))
	}
}

func TestParseIB(t *testing.T) {
	b := mustBuild(t, sampleFields(UDSendOnlyWithImmediate, 4, 33))
	var ib IBPacket
	if err := ParseIB(b[ibOff4:], &ib); err != nil {
		t.Fatal(err)
	}
	if got, want := ib.DETH.QKey(), uint32(0x11223344); got != want {
		t.Errorf("QKey = %#x, want %#x", got, want)
	}
	if got, want := ib.DETH.SrcQPN(), uint32(0xABCD); got != want {
		t.Errorf("SrcQPN = %#x, want %#x", got, want)
	}
	if err := ib.VerifyICRCWith(b[EthernetLen:EthernetLen+IPv4Len], b[EthernetLen+IPv4Len:ibOff4]); err != nil {
		t.Errorf("VerifyICRCWith: %v", err)
	}
	// The UDP link cannot see the IPv4 ID; a different one fails the ICRC.
	ip := bytes.Clone(b[EthernetLen : EthernetLen+IPv4Len])
	binary.BigEndian.PutUint16(ip[4:], 0)
	if err := ib.VerifyICRCWith(ip, b[EthernetLen+IPv4Len:ibOff4]); !errors.Is(err, ErrBadICRC) {
		t.Errorf("VerifyICRCWith(IPv4 ID 0) = %v, want ErrBadICRC", err)
	}
	if err := ib.VerifyICRCWith(ip[:10], b[EthernetLen+IPv4Len:ibOff4]); !errors.Is(err, ErrBadHeader) {
		t.Errorf("VerifyICRCWith(short IP) = %v, want ErrBadHeader", err)
	}
	if err := ParseIB(b[ibOff4:ibOff4+15], &ib); !errors.Is(err, ErrTruncated) || !reflect.ValueOf(ib).IsZero() {
		t.Errorf("ParseIB(15 bytes) = %v, reset %v; want ErrTruncated and a reset IBPacket", err, reflect.ValueOf(ib).IsZero())
	}
}

// One 802.1ad (S-tag, 0x88A8) tag parses as one 802.1Q tag does, and the ICRC
// still verifies: the XDP program steers both (bpf/xrnic.c), and a frame it
// steers must be one Parse takes. Two tags of either kind are still refused.
func TestParse8021ADTag(t *testing.T) {
	f := sampleFields(RCSendOnly, 4, 3)
	f.Ethernet.VLAN = true
	f.Ethernet.TCI = 0x123
	b := mustBuild(t, f)
	b[12], b[13] = 0x88, 0xA8 // the TPID is outside the ICRC
	var p Packet
	if err := ParseAndVerify(b, &p); err != nil {
		t.Fatalf("a single 802.1ad tag: %v", err)
	}
	if p.VLAN == nil || p.VLAN.VID() != 0x123 || p.Opcode != RCSendOnly {
		t.Fatalf("parsed: VLAN %v, opcode %v", p.VLAN, p.Opcode)
	}
	b[16], b[17] = 0x81, 0x00 // an 802.1Q tag inside it
	if err := Parse(b, &p); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("802.1ad then 802.1Q: %v, want ErrUnsupported", err)
	}
}
