// Next-hop resolution for the AF_XDP link: the kernel owns routing and ARP/ND, we ask
// it, as ib_core does for a RoCE address handle (rdma_resolve_ip: route lookup, then
// the neighbour; when the neighbour is not valid, make the kernel resolve it and retry).

package netdev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Neighbor is where to send a frame for a destination: out of LinkIndex, to MAC, from
// Src. A plain value.
type Neighbor struct {
	LinkIndex int
	MAC       net.HardwareAddr
	// Src is the source address the kernel would use for the destination.
	Src netip.Addr
	// NextHop is the destination itself, or the gateway for a routed destination;
	// without a zone (LinkIndex is the link).
	NextHop netip.Addr
}

// nudValid are the neighbour states that carry a usable link-layer address
// (the kernel's NUD_VALID).
const nudValid = netlink.NUD_PERMANENT | netlink.NUD_NOARP | netlink.NUD_REACHABLE |
	netlink.NUD_PROBE | netlink.NUD_STALE | netlink.NUD_DELAY

// discardPort is where the resolution trigger goes: UDP discard (RFC 863), never the
// RoCE port 4791, so the datagram can never be taken for RoCE traffic by either end.
const discardPort = 9

// Backoff of the neighbour-table poll while the kernel resolves.
const (
	pollMin        = time.Millisecond
	pollMax        = 50 * time.Millisecond
	retriggerEvery = 250 * time.Millisecond // resend the trigger at most this often
)

// ResolveNeighbor finds the next hop for dst in the calling thread's namespace: a
// route lookup (RouteGet), then the neighbour table. When the table holds no valid
// entry it makes the kernel resolve one, by sending an empty UDP datagram to dst's
// discard port from a kernel socket, and polls with backoff until the entry is valid
// or ctx is done. For a routed destination it resolves the gateway. A link-local IPv6
// dst needs a zone (interface name or index) unless the route is unambiguous.
//
// Errors wrap ErrNoRoute, ErrLocalAddress, or ErrNeighborUnresolved together with
// ctx.Err().
func ResolveNeighbor(ctx context.Context, dst netip.Addr) (Neighbor, error) {
	dst = dst.Unmap()
	if !dst.IsValid() || dst.IsUnspecified() || dst.IsMulticast() {
		return Neighbor{}, fmt.Errorf("netdev: resolve %v: not a unicast address", dst)
	}
	rt, err := routeTo(dst)
	if err != nil {
		return Neighbor{}, err
	}
	if rt.Type == unix.RTN_LOCAL {
		return Neighbor{}, fmt.Errorf("%w: %s", ErrLocalAddress, dst)
	}
	if rt.Type != unix.RTN_UNICAST {
		return Neighbor{}, fmt.Errorf("%w: %s (route type %d)", ErrNoRoute, dst, rt.Type)
	}
	n := Neighbor{LinkIndex: rt.LinkIndex, NextHop: dst.WithZone("")}
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok && rt.Gw != nil {
		n.NextHop = gw.Unmap()
	}
	if src, ok := netip.AddrFromSlice(rt.Src); ok && rt.Src != nil {
		n.Src = src.Unmap()
	} else if n.Src, err = firstAddr(rt.LinkIndex, dst.Is4()); err != nil {
		return Neighbor{}, err
	}

	family := netlink.FAMILY_V6
	if n.NextHop.Is4() {
		family = netlink.FAMILY_V4
	}
	var lastTrigger time.Time
	wait := pollMin
	for {
		mac, state, err := lookupNeigh(n.LinkIndex, family, n.NextHop)
		if err != nil {
			return Neighbor{}, err
		}
		if mac != nil {
			n.MAC = mac
			return n, nil
		}
		// Absent or FAILED: (re)start resolution. INCOMPLETE: the kernel is at it.
		if state&netlink.NUD_INCOMPLETE == 0 && time.Since(lastTrigger) >= retriggerEvery {
			if err := trigger(dst, rt.LinkIndex); err != nil {
				return Neighbor{}, err
			}
			lastTrigger = time.Now()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Neighbor{}, fmt.Errorf("%w: %s via %s on link %d: %w",
				ErrNeighborUnresolved, dst, n.NextHop, n.LinkIndex, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, pollMax)
	}
}

func routeTo(dst netip.Addr) (netlink.Route, error) {
	var opts netlink.RouteGetOptions
	if z := dst.Zone(); z != "" {
		if idx, err := strconv.Atoi(z); err == nil {
			opts.OifIndex = idx
		} else {
			opts.Oif = z
		}
	}
	routes, err := netlink.RouteGetWithOptions(dst.WithZone("").AsSlice(), &opts)
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			return netlink.Route{}, fmt.Errorf("%w: %s: %w", ErrNoRoute, dst, err)
		}
		return netlink.Route{}, fmt.Errorf("netdev: route lookup for %s: %w", dst, err)
	}
	if len(routes) == 0 || routes[0].LinkIndex == 0 {
		return netlink.Route{}, fmt.Errorf("%w: %s", ErrNoRoute, dst)
	}
	return routes[0], nil
}

// lookupNeigh returns the MAC of a valid entry for ip on link, or nil and the state
// of an invalid one (0 when there is none).
func lookupNeigh(link, family int, ip netip.Addr) (net.HardwareAddr, int, error) {
	neighs, err := netlink.NeighList(link, family)
	if err != nil {
		return nil, 0, fmt.Errorf("netdev: list neighbours of link %d: %w", link, err)
	}
	want := ip.WithZone("").AsSlice()
	for _, ne := range neighs {
		if !ne.IP.Equal(want) {
			continue
		}
		if ne.State&nudValid != 0 && len(ne.HardwareAddr) == 6 {
			return append(net.HardwareAddr(nil), ne.HardwareAddr...), ne.State, nil
		}
		return nil, ne.State, nil
	}
	return nil, 0, nil
}

// trigger sends an empty UDP datagram to dst's discard port. Routing it makes the
// kernel queue it on the next hop's neighbour entry and start ARP/ND; the peer answers
// with an ICMP port unreachable at worst. A plain socket works in any namespace and
// needs no privilege.
func trigger(dst netip.Addr, link int) error {
	var (
		fd  int
		err error
		sa  unix.Sockaddr
	)
	if dst.Is4() {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		sa = &unix.SockaddrInet4{Port: discardPort, Addr: dst.As4()}
	} else {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		s6 := &unix.SockaddrInet6{Port: discardPort, Addr: dst.As16()}
		if dst.Is6() && (dst.IsLinkLocalUnicast() || dst.Zone() != "") {
			s6.ZoneId = uint32(link)
		}
		sa = s6
	}
	if err != nil {
		return fmt.Errorf("netdev: resolve %s: socket: %w", dst, err)
	}
	defer unix.Close(fd)
	// EAGAIN or an ICMP error from an earlier try are not fatal: the poll decides.
	if err := unix.Sendto(fd, nil, 0, sa); err != nil &&
		!errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ECONNREFUSED) &&
		!errors.Is(err, unix.EHOSTUNREACH) {
		return fmt.Errorf("netdev: resolve %s: send trigger: %w", dst, err)
	}
	return nil
}

// firstAddr picks a source address of the right family on link when the route lookup
// did not report one.
func firstAddr(link int, v4 bool) (netip.Addr, error) {
	fam := netlink.FAMILY_V6
	if v4 {
		fam = netlink.FAMILY_V4
	}
	l, err := netlink.LinkByIndex(link)
	if err != nil {
		return netip.Addr{}, linkErr(fmt.Sprintf("index %d", link), err)
	}
	addrs, err := netlink.AddrList(l, fam)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("netdev: list addresses of %s: %w", l.Attrs().Name, err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("netdev: %s has no address of the destination's family", l.Attrs().Name)
}

// Resolver resolves neighbours (ResolveNeighbor) in the network namespace that was
// the calling thread's when NewResolver ran, from any goroutine: a device opened
// in a namespace resolves there while its resolutions run off the caller's
// thread. Safe for concurrent use; Close releases the namespace.
type Resolver struct{ ns netns.NsHandle }

// NewResolver captures the calling thread's network namespace.
func NewResolver() (*Resolver, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("netdev: current network namespace: %w", err)
	}
	return &Resolver{ns: ns}, nil
}

// Resolve is ResolveNeighbor in the Resolver's namespace. It runs on a thread of
// its own that enters the namespace and is discarded afterwards, so the namespace
// never leaks into the Go scheduler.
func (r *Resolver) Resolve(ctx context.Context, dst netip.Addr) (Neighbor, error) {
	type result struct {
		n   Neighbor
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := netns.Set(r.ns); err != nil {
			ch <- result{err: fmt.Errorf("netdev: enter the resolver's namespace: %w", err)}
			return
		}
		n, err := ResolveNeighbor(ctx, dst)
		ch <- result{n, err}
	}()
	res := <-ch
	return res.n, res.err
}

// Close releases the namespace.
func (r *Resolver) Close() error { return r.ns.Close() }
