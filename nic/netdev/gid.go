// GIDs and the GID table, built from an interface the way ib_core builds it for rxe
// (drivers/infiniband/core/roce_gid_mgmt.c and cache.c).

package netdev

import (
	"fmt"
	"net"
	"net/netip"
)

// GID is a 128-bit global identifier in network byte order. For RoCE v2 it is an
// IPv6 address, or an IPv4-mapped one (::ffff:a.b.c.d) for IPv4. A plain value, safe
// to copy and share.
type GID [16]byte

// GIDFromAddr converts an IP address to its GID as rdma_ip2gid does: IPv4 becomes
// IPv4-mapped IPv6, IPv6 stays itself. The zone is dropped.
func GIDFromAddr(a netip.Addr) GID {
	return GID(a.As16())
}

// ParseGID parses a GID in either text form String or FullString produce (any valid
// IPv6 text), or an IPv4 address, which it maps.
func ParseGID(s string) (GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return GID{}, fmt.Errorf("netdev: bad GID %q", s)
	}
	return GIDFromAddr(a), nil
}

// Addr returns the GID as an IP address: IPv4 for an IPv4-mapped GID, IPv6 otherwise.
func (g GID) Addr() netip.Addr {
	return netip.AddrFrom16(g).Unmap()
}

// IsIPv4Mapped reports whether g is ::ffff:a.b.c.d, the form RoCE v2 uses for IPv4
// (the packet then carries an IPv4 header).
func (g GID) IsIPv4Mapped() bool {
	return netip.AddrFrom16(g).Is4In6()
}

// IsZero reports whether g is all zeros, which ib_core refuses to hold in a table.
func (g GID) IsZero() bool { return g == GID{} }

// String returns the compact IPv6 text form, as inet_ntop prints it and as
// `ibv_devinfo -v` shows RoCE v2 GIDs: "fe80::250:56ff:fe00:1", "::ffff:192.0.2.1".
func (g GID) String() string {
	return netip.AddrFrom16(g).String()
}

// FullString returns the uncompressed form, eight groups of four hex digits, as
// /sys/class/infiniband/*/ports/*/gids/N (%pI6) and ibv_devinfo's v1 lines print it:
// "fe80:0000:0000:0000:0250:56ff:fe00:0001".
func (g GID) FullString() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 39)
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[g[i]>>4], hex[g[i]&0xf], hex[g[i+1]>>4], hex[g[i+1]&0xf])
	}
	return string(b)
}

// DefaultGID returns the default GID ib_core derives for an Ethernet netdev
// (make_default_gid): fe80::/64 with the modified EUI-64 of the MAC, universal/local
// bit flipped and ff:fe in the middle. It is the same address as the kernel's EUI-64
// IPv6 link-local. ok is false when mac is not a 6-byte MAC.
//
// ib_core's addrconf_ifid_eui48 puts a non-zero dev_id where ff:fe goes; veth and most
// NICs have dev_id 0, which is all this implements.
func DefaultGID(mac net.HardwareAddr) (g GID, ok bool) {
	if len(mac) != 6 {
		return GID{}, false
	}
	g[0], g[1] = 0xfe, 0x80
	g[8] = mac[0] ^ 0x02
	g[9], g[10] = mac[1], mac[2]
	g[11], g[12] = 0xff, 0xfe
	g[13], g[14], g[15] = mac[3], mac[4], mac[5]
	return g, true
}

// GIDType is the kind of a GID table entry, named as in
// /sys/class/infiniband/*/ports/*/gid_attrs/types/N. A plain value.
type GIDType uint8

const (
	// GIDTypeRoCEv1 is listed for completeness: rxe, and xrnic, expose RoCE v2 only.
	GIDTypeRoCEv1 GIDType = iota + 1
	GIDTypeRoCEv2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeRoCEv1:
		return "IB/RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// GIDEntry is one row of a port's GID table. A plain value.
type GIDEntry struct {
	Index  int
	GID    GID
	Type   GIDType
	Netdev string
	// Default marks the entry ib_core reserves for the netdev's default GID.
	Default bool
}

// GIDTable returns the GID table rxe would hold for a RoCE v2-only port on ifc, in the
// order ib_core fills it when it (re)scans a netdev:
//
//	0:   the default GID, fe80::/64 + EUI-64 of the MAC (reserved index)
//	1..: each IPv4 address as ::ffff:a.b.c.d, in the interface's list order,
//	     then each IPv6 address as itself, in the kernel's list order (global before
//	     link-local), tentative ones included as ib_core includes them.
//
// Like ib_cache_gid_add, it skips a GID that is already in the table, so the kernel's
// own EUI-64 link-local does not get a second entry: it equals the default GID. A
// link-local from another addr_gen_mode (stable-privacy, random) does get one.
//
// The kernel's table is built incrementally: an address added later takes the first
// free slot, and a deleted one leaves a hole that the next addition reuses. This
// function describes the freshly scanned table, which is what rxe holds right after
// `rdma link add` or for addresses configured before the device came up. Without a
// 6-byte MAC there is no default GID and the addresses start at index 0 (ib_core
// handles Ethernet netdevs only).
func GIDTable(ifc *Interface) []GIDEntry {
	var t []GIDEntry
	add := func(g GID, def bool) {
		if g.IsZero() {
			return
		}
		for _, e := range t {
			if e.GID == g {
				return
			}
		}
		t = append(t, GIDEntry{Index: len(t), GID: g, Type: GIDTypeRoCEv2, Netdev: ifc.Name, Default: def})
	}
	if g, ok := DefaultGID(ifc.MAC); ok {
		add(g, true)
	}
	for _, a := range ifc.Addrs {
		if a.Is4() {
			add(GIDFromAddr(a), false)
		}
	}
	for _, a := range ifc.Addrs {
		if a.Is6() && !a.Is4In6() {
			add(GIDFromAddr(a), false)
		}
	}
	return t
}
