// Package wire is xrnic's RoCEv2 codec: zero-copy views of the Ethernet, 802.1Q,
// IPv4, IPv6, UDP and InfiniBand transport headers (BTH and its extension headers),
// the 256-entry opcode table, the ICRC, 24-bit PSN arithmetic, AETH syndromes and the
// UDP source port hash, plus Parse and FrameFields.Encode for whole frames.
//
// The wire truth is the IBTA specification (Vol 1 release 1.5, Annex A17 RoCEv2) as
// Linux Soft-RoCE (drivers/infiniband/sw/rxe) puts it on the wire; the golden
// captures in ../shared/pcaps are parsed, ICRC-verified and re-encoded byte for byte
// by the tests.
//
// Views (BTH, RETH, ...) are []byte slices into a caller's buffer with accessors and
// setters, in the style of gVisor's pkg/tcpip/header. A view does no bounds checks of
// its own: it must have come from Parse (which checks lengths) or be at least as long
// as its header. Views are not safe for concurrent mutation; concurrent reads are fine.
// The opcode and syndrome tables are read-only after package initialisation.
//
// Nothing on the receive or transmit path allocates: Parse fills a caller-owned
// Packet, errors are preallocated values that wrap this package's sentinels, and
// FrameFields.Encode writes into a caller buffer.
package wire
