// Package netdev is xrnic's view of the Linux network interface it runs on: the
// interface's identity, MTU and addresses (through rtnetlink), the RoCE v2 GID table
// built from them the way ib_core builds it for rxe, next-hop MAC resolution through
// the kernel's route and neighbour tables, and link up/down notifications.
//
// Every function acts on the network namespace of the calling OS thread. To target
// another namespace, call from a goroutine locked to a thread in it (testenv.NS.Do).
package netdev

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/errs"
)

func init() {
	// PLATFORM pitfall 12: without extack the kernel's reason for a refusal is lost.
	nl.EnableErrorMessageReporting = true
}

var (
	// ErrNoInterface: no interface of that name or index in the namespace.
	ErrNoInterface = fmt.Errorf("netdev: no such interface: %w", errs.ErrNotFound)
	// ErrInterfaceDown: the interface is administratively down or has no carrier.
	ErrInterfaceDown = fmt.Errorf("netdev: interface is down: %w", errs.ErrUnreachable)
	// ErrNoRoute: the kernel has no route to the destination.
	ErrNoRoute = fmt.Errorf("netdev: no route to destination: %w", errs.ErrUnreachable)
	// ErrLocalAddress: the destination is one of this host's addresses, so there is no
	// next hop on the wire.
	ErrLocalAddress = fmt.Errorf("netdev: destination is a local address: %w", errs.ErrInvalid)
	// ErrNeighborUnresolved: the kernel did not resolve the next hop's MAC in time.
	ErrNeighborUnresolved = fmt.Errorf("netdev: neighbour unresolved: %w", errs.ErrUnreachable)
)

// Interface is a snapshot of a network interface, taken by Lookup. It is a plain
// value: it does not follow later changes (use SubscribeLinkEvents for that), and it
// may be read from any goroutine as long as nobody mutates it.
type Interface struct {
	Name  string
	Index int
	MTU   int
	MAC   net.HardwareAddr
	// Up is the operational state: IFF_UP and IFF_RUNNING (carrier on, not dormant).
	// A veth whose peer is down is admin up but not Up.
	Up bool
	// AdminUp is IFF_UP alone (ip link set ... up).
	AdminUp bool
	// OperState is the kernel's RFC 2863 operational state ("up", "lower-layer-down", ...).
	OperState string
	// Type is the link kind ("veth", "device", ...).
	Type string
	// NumTxQueues and NumRxQueues bound the AF_XDP queue ids (PLATFORM pitfall 2).
	NumTxQueues int
	NumRxQueues int
	// Addrs are the interface's IP addresses, IPv4 first, each family in the kernel's
	// list order; IPv6 link-local addresses carry no zone. Prefixes holds the same
	// addresses with their prefix lengths, index for index.
	Addrs    []netip.Addr
	Prefixes []netip.Prefix
}

// Lookup returns a snapshot of the interface called name in the calling thread's
// network namespace. A missing interface yields an error wrapping ErrNoInterface.
func Lookup(name string) (*Interface, error) {
	if name == "" || len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("%w: %q", ErrNoInterface, name)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, linkErr(fmt.Sprintf("%q", name), err)
	}
	return fromLink(l)
}

// LookupIndex is Lookup by interface index.
func LookupIndex(index int) (*Interface, error) {
	if index <= 0 {
		return nil, fmt.Errorf("%w: index %d", ErrNoInterface, index)
	}
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		return nil, linkErr(fmt.Sprintf("index %d", index), err)
	}
	return fromLink(l)
}

func linkErr(what string, err error) error {
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("%w: %s", ErrNoInterface, what)
	}
	return fmt.Errorf("netdev: look up interface %s: %w", what, err)
}

func fromLink(l netlink.Link) (*Interface, error) {
	a := l.Attrs()
	ifc := &Interface{
		Name:        a.Name,
		Index:       a.Index,
		MTU:         a.MTU,
		MAC:         append(net.HardwareAddr(nil), a.HardwareAddr...),
		Up:          operUp(a.RawFlags),
		AdminUp:     a.RawFlags&unix.IFF_UP != 0,
		OperState:   a.OperState.String(),
		Type:        l.Type(),
		NumTxQueues: a.NumTxQueues,
		NumRxQueues: a.NumRxQueues,
	}
	// Per family so the order does not depend on the dump's family order.
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		addrs, err := netlink.AddrList(l, fam)
		if err != nil {
			return nil, fmt.Errorf("netdev: list addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			p, ok := prefixOf(ad.IPNet)
			if !ok {
				continue
			}
			ifc.Addrs = append(ifc.Addrs, p.Addr())
			ifc.Prefixes = append(ifc.Prefixes, p)
		}
	}
	return ifc, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones), true
}

// operUp interprets link flags the way ip(8) shows LOWER_UP/RUNNING: the kernel sets
// IFF_RUNNING only when the operational state is up (or unknown, for drivers that do
// not report one), so IFF_UP && IFF_RUNNING is "usable for traffic".
func operUp(rawFlags uint32) bool {
	return rawFlags&unix.IFF_UP != 0 && rawFlags&unix.IFF_RUNNING != 0
}

// CheckUp returns nil when the interface was operationally up at lookup time, and an
// error wrapping ErrInterfaceDown naming it otherwise.
func (ifc *Interface) CheckUp() error {
	if ifc.Up {
		return nil
	}
	admin := "down"
	if ifc.AdminUp {
		admin = "up"
	}
	return fmt.Errorf("%w: %s (admin %s, oper %s)", ErrInterfaceDown, ifc.Name, admin, ifc.OperState)
}

// RouteInterface returns the interface the kernel routes dst through, in the
// calling thread's namespace, and the source address it would choose.
func RouteInterface(dst netip.Addr) (*Interface, netip.Addr, error) {
	rt, err := routeTo(dst)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	ifc, err := LookupIndex(rt.LinkIndex)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	src, _ := netip.AddrFromSlice(rt.Src)
	return ifc, src.Unmap(), nil
}

// InterfaceWithAddr returns the interface that holds address a.
func InterfaceWithAddr(a netip.Addr) (*Interface, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("netdev: list links: %w", err)
	}
	for _, l := range links {
		ifc, err := fromLink(l)
		if err != nil {
			continue
		}
		for _, x := range ifc.Addrs {
			if x.Unmap() == a.Unmap() {
				return ifc, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: none has %v", ErrNoInterface, a)
}
