package link

import (
	"fmt"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"
)

// mcastJoiner joins IP multicast groups on one interface through two UDP
// sockets (IPv4, IPv6) opened with the link, in its namespace: the kernel
// adds each group's MAC to the interface's filter (ip_mc_filter_add and
// igmp6_group_added call dev_mc_add) and reports the membership (IGMP, MLD)
// to the switches, as rxe_mcast_add does with ip_mc_join_group or
// ipv6_sock_mc_join, then dev_mc_add. Closing the sockets leaves every group.
// The kernel's limits are rxe's too (net.ipv4.igmp_max_memberships per
// socket: ENOBUFS).
type mcastJoiner struct {
	ifindex  int
	mu       sync.Mutex
	fd4, fd6 int // -1: none (IPv6 disabled)
}

func newMcastJoiner(ifindex int) (*mcastJoiner, error) {
	m := &mcastJoiner{ifindex: ifindex, fd4: -1, fd6: -1}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("multicast socket: %w", err)
	}
	m.fd4 = fd
	if fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		m.fd6 = fd
	}
	return m, nil
}

// join adds (or with !add drops) the membership of group ip.
func (m *mcastJoiner) join(ip netip.Addr, add bool) error {
	if !ip.IsMulticast() {
		return fmt.Errorf("%w: %v is not a multicast address", ErrBadOption, ip)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fd4 < 0 {
		return ErrClosed
	}
	if ip.Is4() || ip.Is4In6() {
		opt := unix.IP_ADD_MEMBERSHIP
		if !add {
			opt = unix.IP_DROP_MEMBERSHIP
		}
		return unix.SetsockoptIPMreqn(m.fd4, unix.IPPROTO_IP, opt,
			&unix.IPMreqn{Multiaddr: ip.Unmap().As4(), Ifindex: int32(m.ifindex)})
	}
	if m.fd6 < 0 {
		return fmt.Errorf("%w: no IPv6 on this host", ErrUnavailable)
	}
	opt := unix.IPV6_JOIN_GROUP
	if !add {
		opt = unix.IPV6_LEAVE_GROUP
	}
	return unix.SetsockoptIPv6Mreq(m.fd6, unix.IPPROTO_IPV6, opt,
		&unix.IPv6Mreq{Multiaddr: ip.As16(), Interface: uint32(m.ifindex)})
}

func (m *mcastJoiner) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, fd := range []*int{&m.fd4, &m.fd6} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}
