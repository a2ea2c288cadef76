// Sentinel errors and the preallocated errors Parse and Encode return.

package wire

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns wraps exactly one of them, so
// callers can count drops by class with errors.Is.
var (
	ErrTruncated     = errors.New("truncated")
	ErrBadHeader     = errors.New("bad header")
	ErrUnsupported   = errors.New("unsupported")
	ErrUnknownOpcode = errors.New("unknown opcode")
	ErrBadICRC       = errors.New("ICRC mismatch")
	ErrShortBuffer   = errors.New("buffer too small")
)

// The error values are built once so that rejecting a packet never allocates: a
// flood of garbage must not turn into garbage-collector work.
func e(sentinel error, what string) error { return fmt.Errorf("wire: %s: %w", what, sentinel) }

var (
	errEthShort       = e(ErrTruncated, "frame shorter than an Ethernet header")
	errVLANShort      = e(ErrTruncated, "frame shorter than an 802.1Q tag")
	errQinQ           = e(ErrUnsupported, "stacked VLAN tags")
	errEtherType      = e(ErrUnsupported, "EtherType is neither IPv4, IPv6 nor 802.1Q")
	errIPv4Short      = e(ErrTruncated, "frame shorter than an IPv4 header")
	errIPv4Options    = e(ErrUnsupported, "IPv4 options (IHL > 5)")
	errIPv4IHL        = e(ErrBadHeader, "IPv4 IHL < 5")
	errIPv4TotalShort = e(ErrBadHeader, "IPv4 total length shorter than IPv4+UDP headers")
	errIPv4TotalLong  = e(ErrTruncated, "IPv4 total length exceeds the frame")
	errIPv4Checksum   = e(ErrBadHeader, "IPv4 header checksum")
	errIPv4Fragment   = e(ErrUnsupported, "IPv4 fragment")
	errIPv4Proto      = e(ErrUnsupported, "IPv4 protocol is not UDP")
	errIPv6Short      = e(ErrTruncated, "frame shorter than an IPv6 header")
	errIPv6PayloadLen = e(ErrTruncated, "IPv6 payload length exceeds the frame")
	errIPv6Next       = e(ErrUnsupported, "IPv6 next header is not UDP (extension headers are not supported)")
	errUDPShort       = e(ErrTruncated, "IP payload shorter than a UDP header")
	errUDPPort        = e(ErrUnsupported, "UDP destination port is not 4791")
	errUDPLen         = e(ErrBadHeader, "UDP length disagrees with the IP length")
	errBTHShort       = e(ErrTruncated, "UDP payload shorter than BTH + ICRC")
	errHdrShort       = e(ErrTruncated, "packet shorter than its opcode's headers + ICRC")
	errPadCount       = e(ErrBadHeader, "BTH pad count exceeds the payload")
	errNoPayload      = e(ErrBadHeader, "payload on an opcode that carries none")
	errCNPLen         = e(ErrBadHeader, "CNP is not BTH + 16 reserved bytes")
	errICRC           = e(ErrBadICRC, "ICRC does not match the packet")
	errICRCArgs       = e(ErrBadHeader, "ICRC needs a 20-byte IPv4 or 40-byte IPv6 header, an 8-byte UDP header and a BTH")
	errNoIP           = e(ErrBadHeader, "packet has no IP header")

	errIPVersion [16]error  // IPv4/IPv6 header with the wrong version, by version
	errTVer      [16]error  // BTH TVer != 0, by TVer
	errOpcode    [256]error // opcode not in the table, by opcode

	errBuildShort   = e(ErrShortBuffer, "buffer shorter than the frame")
	errBuildOpcode  = e(ErrUnknownOpcode, "build: opcode not in the table")
	errBuildPayload = e(ErrBadHeader, "build: payload on an opcode that carries none")
	errBuildIPVer   = e(ErrBadHeader, "build: IPVersion must be 4 or 6")
	errBuildAddr    = e(ErrBadHeader, "build: IP address family does not match IPVersion")
	errBuildTooLong = e(ErrBadHeader, "build: frame exceeds the IP length field")
	errBuildCNP     = e(ErrBadHeader, "build: a CNP's payload must be empty or 16 bytes")
)

func init() {
	for v := range errIPVersion {
		errIPVersion[v] = e(ErrBadHeader, fmt.Sprintf("IP version %d does not match the EtherType", v))
	}
	for v := range errTVer {
		errTVer[v] = e(ErrUnsupported, fmt.Sprintf("BTH transport header version %d (want 0)", v))
	}
	for op := range errOpcode {
		errOpcode[op] = e(ErrUnknownOpcode, fmt.Sprintf("opcode 0x%02x (%s transport)", op, Opcode(op).Transport()))
	}
}
