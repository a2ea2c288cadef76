package mad

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/xrnic/xrnic/nic/errs"
)

// Port spaces of rdma_cm (enum rdma_ucm_port_space): the service ID of an IP
// connection is the port space and the destination port (cma_get_service_id:
// ps << 16 + port).
const (
	PortSpaceTCP   = 0x0106
	PortSpaceUDP   = 0x0111
	PortSpaceIPoIB = 0x0002
	PortSpaceIB    = 0x013F
)

// ServiceID returns the service ID of port in port space ps.
func ServiceID(ps uint16, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID returns the port space and port of an IP CM service ID; ok is
// false for one outside the IP range (its top 40 bits are not 0x0000000001).
func SplitServiceID(id uint64) (ps, port uint16, ok bool) {
	return uint16(id >> 16), uint16(id), id>>24 == 1
}

// CMAHeaderLen is the size of rdma_cm's header at the start of the private data
// of REQ and SIDR_REQ (struct cma_hdr); a REQ leaves REQPrivateLen -
// CMAHeaderLen = 56 bytes for the consumer.
const CMAHeaderLen = 36

// CMAVersion is the only rdma_cm header version (CMA_VERSION).
const CMAVersion = 0x00

// CMAHeader is rdma_cm's header (struct cma_hdr): its version, the IP version,
// the source port, and the source and destination addresses. A plain value.
type CMAHeader struct {
	Version  uint8
	SrcPort  uint16
	Src, Dst netip.Addr // both IPv4 or both IPv6
}

// ErrCMAHeader: the private data holds no valid rdma_cm header.
var ErrCMAHeader = fmt.Errorf("mad: bad rdma_cm header: %w", errs.ErrInvalid)

// ParseCMAHeader reads the header at the start of private data p.
func ParseCMAHeader(p []byte) (CMAHeader, error) {
	if len(p) < CMAHeaderLen {
		return CMAHeader{}, ErrCMAHeader
	}
	h := CMAHeader{Version: p[0], SrcPort: binary.BigEndian.Uint16(p[2:])}
	switch p[1] >> 4 {
	case 4: // the IPv4 address is the last 4 bytes of each 16 (union cma_ip_addr)
		h.Src = netip.AddrFrom4([4]byte(p[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(p[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(p[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(p[20:36]))
	default:
		return h, ErrCMAHeader
	}
	return h, nil
}

// Encode writes the header at the start of private data p (CMAHeaderLen bytes).
func (h *CMAHeader) Encode(p []byte) error {
	src, dst := h.Src.Unmap(), h.Dst.Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return ErrCMAHeader
	}
	clear(p[:CMAHeaderLen])
	p[0] = h.Version
	binary.BigEndian.PutUint16(p[2:], h.SrcPort)
	if src.Is4() {
		p[1] = 4 << 4
		s, d := src.As4(), dst.As4()
		copy(p[16:20], s[:])
		copy(p[32:36], d[:])
		return nil
	}
	p[1] = 6 << 4
	s, d := src.As16(), dst.As16()
	copy(p[4:20], s[:])
	copy(p[20:36], d[:])
	return nil
}
