// UDP header view and checksum.

package wire

import (
	"encoding/binary"
	"net/netip"
)

// UDP is a view of a UDP header (UDPLen bytes).
type UDP []byte

func (h UDP) SrcPort() uint16  { return binary.BigEndian.Uint16(h[0:2]) }
func (h UDP) DstPort() uint16  { return binary.BigEndian.Uint16(h[2:4]) }
func (h UDP) Length() int      { return int(binary.BigEndian.Uint16(h[4:6])) }
func (h UDP) Checksum() uint16 { return binary.BigEndian.Uint16(h[6:8]) }

func (h UDP) SetSrcPort(p uint16)  { binary.BigEndian.PutUint16(h[0:2], p) }
func (h UDP) SetDstPort(p uint16)  { binary.BigEndian.PutUint16(h[2:4], p) }
func (h UDP) SetLength(n int)      { binary.BigEndian.PutUint16(h[4:6], uint16(n)) }
func (h UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[6:8], c) }

// UDPFields describes a UDP header. rxe sends Checksum 0 over IPv4 and IPv6 alike
// (rxe_net.c prepare_udp_hdr); the ICRC protects the packet instead.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           int
	Checksum         uint16
}

// Encode writes UDPLen bytes into b.
func (f *UDPFields) Encode(b []byte) {
	h := UDP(b[:UDPLen])
	h.SetSrcPort(f.SrcPort)
	h.SetDstPort(f.DstPort)
	h.SetLength(f.Length)
	h.SetChecksum(f.Checksum)
}

// UDPChecksum computes the UDP checksum of seg (UDP header + payload, with the
// checksum field read as 0) over the pseudo header of src and dst (RFC 768,
// RFC 8200 8.1). A computed 0 is returned as 0xFFFF, since 0 means "none".
func UDPChecksum(src, dst netip.Addr, seg []byte) uint16 {
	var s uint64
	if src.Is4() {
		a, b := src.As4(), dst.As4()
		s = sum16(s, a[:])
		s = sum16(s, b[:])
	} else {
		a, b := src.As16(), dst.As16()
		s = sum16(s, a[:])
		s = sum16(s, b[:])
	}
	s += uint64(IPProtoUDP) + uint64(len(seg))
	s = sum16(s, seg[0:6])
	s = sum16(s, seg[8:])
	c := ^fold(s)
	if c == 0 {
		c = 0xFFFF
	}
	return c
}
