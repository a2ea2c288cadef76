// veth pairs between two namespaces: the wire xrnic's data-path tests run on.

package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrInvalidOptions: PairOptions failed validation.
var ErrInvalidOptions = errors.New("testenv: invalid options")

// Default addressing (RFC 5737 / RFC 3849 documentation ranges). Read-only.
var (
	DefaultIPv4A = netip.MustParsePrefix("192.0.2.1/24")
	DefaultIPv4B = netip.MustParsePrefix("192.0.2.2/24")
	DefaultIPv6A = netip.MustParsePrefix("2001:db8::1/64")
	DefaultIPv6B = netip.MustParsePrefix("2001:db8::2/64")
)

// DefaultMTU is the veth MTU when PairOptions.MTU is 0. RoCE MTU 4096 needs about
// 4150 or more on both ends (PLATFORM: use 4200 with the xdp.frags program).
const DefaultMTU = 1500

// PairOptions configures NewVethPair. The zero value is a usable pair: MTU 1500, one
// queue each way, 192.0.2.1/24 + 2001:db8::1/64 on A, .2 on B, static neighbours.
// A plain value; NewVethPair does not keep it.
type PairOptions struct {
	// Label is appended to the namespace names, for humans reading `ip netns`.
	Label string
	// MTU of both ends; 0 means DefaultMTU.
	MTU int
	// NumTxQueues and NumRxQueues of each end; 0 means 1. Native XDP needs each end's
	// RX queue count >= its peer's TX queue count (PLATFORM pitfall 2), so RX < TX is
	// refused.
	NumTxQueues, NumRxQueues int
	// NameA and NameB name the veth ends; empty means a name unique to this process.
	NameA, NameB string
	// MACA and MACB set the ends' MACs; nil lets the kernel pick random ones.
	MACA, MACB net.HardwareAddr
	// Addresses with prefix length; the zero Prefix means the Default* above.
	IPv4A, IPv4B, IPv6A, IPv6B netip.Prefix
	// NoIPv4 and NoIPv6 leave that family unconfigured.
	NoIPv4, NoIPv6 bool
	// NoStaticNeighbors leaves ARP/ND to the kernel. By default each end has a
	// permanent neighbour entry for the other's addresses (PLATFORM pitfall 13), so raw
	// frames need not wait for resolution.
	NoStaticNeighbors bool
}

func (o *PairOptions) setDefaults() error {
	if o.MTU == 0 {
		o.MTU = DefaultMTU
	}
	if o.NumTxQueues == 0 {
		o.NumTxQueues = 1
	}
	if o.NumRxQueues == 0 {
		o.NumRxQueues = 1
	}
	def := func(p *netip.Prefix, d netip.Prefix) {
		if !p.IsValid() {
			*p = d
		}
	}
	def(&o.IPv4A, DefaultIPv4A)
	def(&o.IPv4B, DefaultIPv4B)
	def(&o.IPv6A, DefaultIPv6A)
	def(&o.IPv6B, DefaultIPv6B)

	switch {
	case o.MTU < 68 || o.MTU > 65535:
		return fmt.Errorf("%w: MTU %d outside 68..65535", ErrInvalidOptions, o.MTU)
	case o.NumTxQueues < 0 || o.NumRxQueues < 0 || o.NumTxQueues > 4096 || o.NumRxQueues > 4096:
		return fmt.Errorf("%w: queue counts %d/%d", ErrInvalidOptions, o.NumTxQueues, o.NumRxQueues)
	case o.NumRxQueues < o.NumTxQueues:
		return fmt.Errorf("%w: %d RX queues < %d TX queues: native XDP attach would fail (PLATFORM pitfall 2)",
			ErrInvalidOptions, o.NumRxQueues, o.NumTxQueues)
	case !o.IPv4A.Addr().Is4() || !o.IPv4B.Addr().Is4():
		return fmt.Errorf("%w: IPv4 addresses %v, %v", ErrInvalidOptions, o.IPv4A, o.IPv4B)
	case !o.IPv6A.Addr().Is6() || o.IPv6A.Addr().Is4In6() || !o.IPv6B.Addr().Is6() || o.IPv6B.Addr().Is4In6():
		return fmt.Errorf("%w: IPv6 addresses %v, %v", ErrInvalidOptions, o.IPv6A, o.IPv6B)
	case len(o.NameA) >= unix.IFNAMSIZ || len(o.NameB) >= unix.IFNAMSIZ:
		return fmt.Errorf("%w: interface names %q, %q longer than 15", ErrInvalidOptions, o.NameA, o.NameB)
	case o.MACA != nil && len(o.MACA) != 6, o.MACB != nil && len(o.MACB) != 6:
		return fmt.Errorf("%w: MACs %v, %v", ErrInvalidOptions, o.MACA, o.MACB)
	}
	return nil
}

// Endpoint is one end of a Pair. A plain value filled in by NewVethPair; NS is shared
// with the Pair and follows NS's contract.
type Endpoint struct {
	NS    *NS
	Name  string
	Index int
	MAC   net.HardwareAddr
	MTU   int
	// IPv4 and IPv6 are the end's addresses (invalid when that family is off);
	// IPv4Prefix and IPv6Prefix carry the same addresses with their prefix lengths.
	IPv4, IPv6             netip.Addr
	IPv4Prefix, IPv6Prefix netip.Prefix
}

// Do runs fn inside the endpoint's namespace (NS.Do).
func (e *Endpoint) Do(fn func() error) error { return e.NS.Do(fn) }

// Pair is a veth pair whose ends A and B live in namespaces of their own. Its fields
// are set by NewVethPair and read-only afterwards, so any goroutine may read them;
// Close follows NS.Close.
type Pair struct {
	A, B Endpoint
}

// prepare sets the defaults and names A's and B's interfaces after a fresh
// number from nsCounter, which it returns for further names.
func (o *PairOptions) prepare() (uint64, error) {
	if err := o.setDefaults(); err != nil {
		return 0, err
	}
	n := nsCounter.Add(1)
	if o.NameA == "" {
		o.NameA = ifName(n, 'a')
	}
	if o.NameB == "" {
		o.NameB = ifName(n, 'b')
	}
	return n, nil
}

// NewVethPair creates two namespaces and a veth pair between them, configured as opts
// says, links up. On error nothing is left behind.
func NewVethPair(opts PairOptions) (_ *Pair, err error) {
	if _, err := opts.prepare(); err != nil {
		return nil, err
	}

	p := &Pair{}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Close())
		}
	}()
	sep := ""
	if opts.Label != "" {
		sep = "-"
	}
	if p.A.NS, err = NewNS(opts.Label + sep + "a"); err != nil {
		return nil, err
	}
	if p.B.NS, err = NewNS(opts.Label + sep + "b"); err != nil {
		return nil, err
	}

	hA, err := p.A.NS.NewHandle()
	if err != nil {
		return nil, err
	}
	defer hA.Close()
	hB, err := p.B.NS.NewHandle()
	if err != nil {
		return nil, err
	}
	defer hB.Close()

	// Created from inside A with the peer placed straight into B: no end ever
	// appears in the caller's namespace, so a crash cannot leak links there.
	attrs := netlink.NewLinkAttrs()
	attrs.Name = opts.NameA
	attrs.MTU = opts.MTU
	attrs.NumTxQueues = opts.NumTxQueues
	attrs.NumRxQueues = opts.NumRxQueues
	attrs.HardwareAddr = opts.MACA
	veth := &netlink.Veth{
		LinkAttrs:        attrs,
		PeerName:         opts.NameB,
		PeerHardwareAddr: opts.MACB,
		PeerTxQLen:       -1,
		PeerNumTxQueues:  uint32(opts.NumTxQueues),
		PeerNumRxQueues:  uint32(opts.NumRxQueues),
		PeerMTU:          uint32(opts.MTU),
	}
	if err := p.B.NS.withHandle(func(fd int) error {
		veth.PeerNamespace = netlink.NsFd(fd)
		return hA.LinkAdd(veth)
	}); err != nil {
		return nil, fmt.Errorf("testenv: create veth %s/%s: %w", opts.NameA, opts.NameB, err)
	}
	if err := p.configure(opts, hA, hB); err != nil {
		return nil, err
	}
	return p, nil
}

// configure sets up the ends named opts.NameA in A's namespace (handle hA) and
// opts.NameB in B's: the Endpoint fields, addresses, static neighbours, links up,
// then waits until both can carry traffic. NewVethPair and NewVethWire share it.
func (p *Pair) configure(opts PairOptions, hA, hB *netlink.Handle) error {
	ends := []struct {
		e, peer *Endpoint
		h       *netlink.Handle
		name    string
		v4, v6  netip.Prefix
	}{
		{&p.A, &p.B, hA, opts.NameA, opts.IPv4A, opts.IPv6A},
		{&p.B, &p.A, hB, opts.NameB, opts.IPv4B, opts.IPv6B},
	}
	for _, x := range ends {
		l, err := x.h.LinkByName(x.name)
		if err != nil {
			return fmt.Errorf("testenv: find %s in %s: %w", x.name, x.e.NS.Name, err)
		}
		x.e.Name, x.e.Index = x.name, l.Attrs().Index
		x.e.MAC, x.e.MTU = l.Attrs().HardwareAddr, l.Attrs().MTU
		if !opts.NoIPv4 {
			x.e.IPv4, x.e.IPv4Prefix = x.v4.Addr(), x.v4
			if err := addAddr(x.h, l, x.v4); err != nil {
				return fmt.Errorf("testenv: %s in %s: %w", x.name, x.e.NS.Name, err)
			}
		}
		if !opts.NoIPv6 {
			x.e.IPv6, x.e.IPv6Prefix = x.v6.Addr(), x.v6
			if err := addAddr(x.h, l, x.v6); err != nil {
				return fmt.Errorf("testenv: %s in %s: %w", x.name, x.e.NS.Name, err)
			}
		}
	}
	if !opts.NoStaticNeighbors {
		for _, x := range ends {
			for _, ip := range []netip.Addr{x.peer.IPv4, x.peer.IPv6} {
				if !ip.IsValid() {
					continue
				}
				ne := &netlink.Neigh{
					LinkIndex:    x.e.Index,
					Family:       family(ip),
					State:        netlink.NUD_PERMANENT,
					IP:           ip.AsSlice(),
					HardwareAddr: x.peer.MAC,
				}
				if err := x.h.NeighSet(ne); err != nil {
					return fmt.Errorf("testenv: static neighbour %s on %s: %w", ip, x.name, err)
				}
			}
		}
	}
	for _, x := range ends {
		l, err := x.h.LinkByIndex(x.e.Index)
		if err == nil {
			err = x.h.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("testenv: set %s up: %w", x.name, err)
		}
	}
	for _, e := range []*Endpoint{&p.A, &p.B} {
		if err := e.waitReady(!opts.NoIPv6); err != nil {
			return err
		}
	}
	return nil
}

// readyWait bounds waitReady: linkwatch batches carrier events up to 1 s apart.
const readyWait = 5 * time.Second

// waitReady waits until the end can carry traffic. Link up is not enough: the
// carrier and operational state follow through linkwatch, up to a second later, and
// only then does IPv6 add the ff00::/8 route without which incoming neighbour
// solicitations are dropped (Ip6InNoRoutes), costing the peer's first ND a 1 s
// retransmission. The end must also have joined its address's solicited-node group.
func (e *Endpoint) waitReady(ipv6 bool) error {
	var group string
	if ipv6 {
		a := e.IPv6.As16()
		group = fmt.Sprintf("ff0200000000000000000001ff%02x%02x%02x", a[13], a[14], a[15])
	}
	deadline := time.Now().Add(readyWait)
	return e.NS.Do(func() error {
		for {
			ready, what, err := e.ready(group)
			if err != nil || ready {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("testenv: %s in %s not ready after %v: %s", e.Name, e.NS.Name, readyWait, what)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
}

// ready runs inside the namespace; what says what is still missing.
func (e *Endpoint) ready(group string) (ok bool, what string, err error) {
	l, err := netlink.LinkByIndex(e.Index)
	if err != nil {
		return false, "", fmt.Errorf("testenv: %s: %w", e.Name, err)
	}
	if f := l.Attrs().RawFlags; f&unix.IFF_UP == 0 || f&unix.IFF_RUNNING == 0 {
		return false, "carrier/operstate not up", nil
	}
	if group == "" {
		return true, "", nil
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V6,
		&netlink.Route{Table: unix.RT_TABLE_LOCAL, LinkIndex: e.Index},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
	if err != nil {
		return false, "", fmt.Errorf("testenv: routes of %s: %w", e.Name, err)
	}
	if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
		return r.Dst != nil && r.Dst.String() == "ff00::/8"
	}) {
		return false, "no ff00::/8 route yet", nil
	}
	// thread-self: /proc/net follows the main thread's namespace, not this thread's.
	b, err := os.ReadFile("/proc/thread-self/net/igmp6")
	if err != nil {
		return false, "", fmt.Errorf("testenv: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == e.Name && f[2] == group {
			return true, "", nil
		}
	}
	return false, "solicited-node group " + group + " not joined", nil
}

// Close removes both namespaces, which removes the veth with them.
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range []*NS{p.A.NS, p.B.NS} {
		if ns != nil {
			errs = append(errs, ns.Close())
		}
	}
	return errors.Join(errs...)
}

// Namespaces returns the pair's two namespaces, A first.
func (p *Pair) Namespaces() []*NS { return []*NS{p.A.NS, p.B.NS} }

func addAddr(h *netlink.Handle, l netlink.Link, pfx netip.Prefix) error {
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   pfx.Addr().AsSlice(),
		Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen()),
	}}
	if pfx.Addr().Is6() {
		// Usable at once: no duplicate address detection (tentative for ~1 s otherwise).
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(l, a); err != nil {
		return fmt.Errorf("add address %s: %w", pfx, err)
	}
	return nil
}

func family(ip netip.Addr) int {
	if ip.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// ifName builds "xr<pid>.<n><end>" in base 36: unique in this process, <= 15 bytes.
func ifName(n uint64, end byte) string {
	const mod = 36 * 36 * 36 * 36 * 36
	return "xr" + strconv.FormatInt(int64(os.Getpid()), 36) + "." + strconv.FormatUint(n%mod, 36) + string(end)
}

// withHandle lends the namespace's descriptor to fn, keeping Close out meanwhile.
func (ns *NS) withHandle(fn func(fd int) error) error {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.closed {
		return fmt.Errorf("%w: %s", ErrClosed, ns.Name)
	}
	return fn(int(ns.handle))
}
