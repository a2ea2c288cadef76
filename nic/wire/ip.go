// IPv4 (without options) and IPv6 header views.

package wire

import (
	"encoding/binary"
	"net/netip"
)

// IPv4 flag bits (the top 3 bits of the flags/fragment-offset word, shifted down).
const (
	IPv4FlagMF = 1 << 0 // more fragments
	IPv4FlagDF = 1 << 1 // don't fragment: rxe sets it on every packet
)

// IPv4 is a view of an IPv4 header without options (IPv4Len bytes).
type IPv4 []byte

func (h IPv4) Version() uint8         { return h[0] >> 4 }
func (h IPv4) IHL() int               { return int(h[0]&0x0F) * 4 } // header length in bytes
func (h IPv4) TOS() uint8             { return h[1] }               // DSCP << 2 | ECN
func (h IPv4) DSCP() uint8            { return h[1] >> 2 }
func (h IPv4) ECN() uint8             { return h[1] & 0x03 }
func (h IPv4) TotalLength() int       { return int(binary.BigEndian.Uint16(h[2:4])) }
func (h IPv4) ID() uint16             { return binary.BigEndian.Uint16(h[4:6]) }
func (h IPv4) Flags() uint8           { return h[6] >> 5 }
func (h IPv4) FragmentOffset() uint16 { return binary.BigEndian.Uint16(h[6:8]) & 0x1FFF }
func (h IPv4) TTL() uint8             { return h[8] }
func (h IPv4) Protocol() uint8        { return h[9] }
func (h IPv4) Checksum() uint16       { return binary.BigEndian.Uint16(h[10:12]) }
func (h IPv4) Src() netip.Addr        { return netip.AddrFrom4([4]byte(h[12:16])) }
func (h IPv4) Dst() netip.Addr        { return netip.AddrFrom4([4]byte(h[16:20])) }

// ChecksumValid reports whether the header checksum is correct. Every received
// frame asks, so the five 32-bit words are summed inline (sum16's loop cost 110
// instructions a frame).
func (h IPv4) ChecksumValid() bool {
	_ = h[IPv4Len-1]
	s := uint64(binary.BigEndian.Uint32(h[0:])) + uint64(binary.BigEndian.Uint32(h[4:])) +
		uint64(binary.BigEndian.Uint32(h[8:])) + uint64(binary.BigEndian.Uint32(h[12:])) +
		uint64(binary.BigEndian.Uint32(h[16:]))
	return fold(s) == 0xFFFF
}

// CalculateChecksum returns the header checksum computed with the field taken as 0.
func (h IPv4) CalculateChecksum() uint16 {
	s := sum16(0, h[0:10])
	s = sum16(s, h[12:IPv4Len])
	return ^fold(s)
}

func (h IPv4) SetTOS(v uint8)       { h[1] = v }
func (h IPv4) SetECN(v uint8)       { h[1] = h[1]&^0x03 | v&0x03 }
func (h IPv4) SetTotalLength(n int) { binary.BigEndian.PutUint16(h[2:4], uint16(n)) }
func (h IPv4) SetID(v uint16)       { binary.BigEndian.PutUint16(h[4:6], v) }
func (h IPv4) SetTTL(v uint8)       { h[8] = v }
func (h IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(h[10:12], v) }
func (h IPv4) SetSrc(a netip.Addr)  { a4 := a.As4(); copy(h[12:16], a4[:]) }
func (h IPv4) SetDst(a netip.Addr)  { a4 := a.As4(); copy(h[16:20], a4[:]) }
func (h IPv4) UpdateChecksum()      { h.SetChecksum(h.CalculateChecksum()) }
func (h IPv4) SetFlagsFragment(flags uint8, off uint16) {
	binary.BigEndian.PutUint16(h[6:8], uint16(flags&7)<<13|off&0x1FFF)
}

// IPv4Fields describes an IPv4 header without options. Encode computes the checksum.
type IPv4Fields struct {
	TOS            uint8
	TotalLength    int
	ID             uint16
	Flags          uint8 // IPv4FlagDF, IPv4FlagMF
	FragmentOffset uint16
	TTL            uint8
	Protocol       uint8
	Src, Dst       netip.Addr // must be IPv4 (Is4)
}

// Encode writes IPv4Len bytes into b, header checksum included.
func (f *IPv4Fields) Encode(b []byte) {
	h := IPv4(b[:IPv4Len])
	h[0] = 4<<4 | IPv4Len/4
	h.SetTOS(f.TOS)
	h.SetTotalLength(f.TotalLength)
	h.SetID(f.ID)
	h.SetFlagsFragment(f.Flags, f.FragmentOffset)
	h.SetTTL(f.TTL)
	h[9] = f.Protocol
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
	h.UpdateChecksum()
}

// IPv6 is a view of a fixed IPv6 header (IPv6Len bytes).
type IPv6 []byte

func (h IPv6) Version() uint8      { return h[0] >> 4 }
func (h IPv6) TrafficClass() uint8 { return h[0]<<4 | h[1]>>4 }
func (h IPv6) ECN() uint8          { return h.TrafficClass() & 0x03 }
func (h IPv6) FlowLabel() uint32   { return binary.BigEndian.Uint32(h[0:4]) & 0xFFFFF }
func (h IPv6) PayloadLength() int  { return int(binary.BigEndian.Uint16(h[4:6])) }
func (h IPv6) NextHeader() uint8   { return h[6] }
func (h IPv6) HopLimit() uint8     { return h[7] }
func (h IPv6) Src() netip.Addr     { return netip.AddrFrom16([16]byte(h[8:24])) }
func (h IPv6) Dst() netip.Addr     { return netip.AddrFrom16([16]byte(h[24:40])) }

// SetVersionClassFlow writes the first word: version 6, traffic class, flow label.
func (h IPv6) SetVersionClassFlow(tc uint8, fl uint32) {
	binary.BigEndian.PutUint32(h[0:4], 6<<28|uint32(tc)<<20|fl&0xFFFFF)
}
func (h IPv6) SetPayloadLength(n int) { binary.BigEndian.PutUint16(h[4:6], uint16(n)) }
func (h IPv6) SetNextHeader(v uint8)  { h[6] = v }
func (h IPv6) SetHopLimit(v uint8)    { h[7] = v }
func (h IPv6) SetSrc(a netip.Addr)    { a16 := a.As16(); copy(h[8:24], a16[:]) }
func (h IPv6) SetDst(a netip.Addr)    { a16 := a.As16(); copy(h[24:40], a16[:]) }

// IPv6Fields describes a fixed IPv6 header.
type IPv6Fields struct {
	TrafficClass  uint8
	FlowLabel     uint32
	PayloadLength int
	NextHeader    uint8
	HopLimit      uint8
	Src, Dst      netip.Addr // must be IPv6 (Is6; IPv4-mapped is allowed)
}

// Encode writes IPv6Len bytes into b.
func (f *IPv6Fields) Encode(b []byte) {
	h := IPv6(b[:IPv6Len])
	h.SetVersionClassFlow(f.TrafficClass, f.FlowLabel)
	h.SetPayloadLength(f.PayloadLength)
	h.SetNextHeader(f.NextHeader)
	h.SetHopLimit(f.HopLimit)
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
}
