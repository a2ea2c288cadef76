package link

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/wakeup"
	"github.com/xrnic/xrnic/nic/wire"
)

// UDPOptions configures NewUDP.
type UDPOptions struct {
	Interface string       // interface whose addresses the sockets bind (required)
	Addrs     []netip.Addr // local addresses to bind; default: every address of the interface but link-local ones
	Port      int          // UDP port, default 4791 (RoCEv2)
	Batch     int          // most datagrams per recvmmsg/sendmmsg, default 64
	// Offload sends runs of frames to one peer as one GSO send (UDP_SEGMENT)
	// and receives coalesced datagrams (UDP_GRO). Only for peers that read
	// with sockets or behind a device that segments: veth hands a GSO send to
	// its peer whole, and an XDP program there sees one frame of many packets.
	Offload bool
}

// UDP is a Link over kernel UDP sockets bound to port 4791: it needs no privilege, and
// it is the fallback when the XDP program cannot attach. It follows the Link contract.
//
// The kernel owns the IP and UDP headers here, so on receive the link rebuilds them in
// front of each datagram as the kernel sent them: IPv4 with identification 0 and DF
// set (an unconnected socket with IP_PMTUDISC_DO sends exactly that), so that the ICRC
// check above it covers the real header fields (IBTA 17.3.4 masks TOS, TTL and the
// checksum, but not the identification). Info reports FixedSourcePort and FixedIPv4ID
// so the engine builds frames whose ICRC matches what the kernel puts on the wire.
// The same holds on receive: a socket never shows the identification, so the link
// verifies IPv4 frames only of peers that send 0, as xrnic's UDP link does. rxe
// numbers its packets (__ip_select_ident): towards rxe, use IPv6 or the AF_XDP link.
type UDP struct {
	info  Info
	socks []*udpSock
	wake  *wakeup.Pipe // Wake rings it, Wait polls it; nil once closed
	pfds  []unix.PollFd
	next  int // socket ReadBatch starts with, for fairness

	closeMu sync.RWMutex // Close takes it exclusively so no syscall uses a closed fd
	closed  atomic.Bool
	stats   struct{ rxFrames, rxBytes, txFrames, txBytes, rxDropped, txDropped, txErrors atomic.Uint64 }
}

var _ Link = (*UDP)(nil)

type udpSock struct {
	fd    int
	local netip.Addr
	hdr   int // bytes of Ethernet + IP + UDP header rebuilt in front of a datagram
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for either family
	oob   []byte                  // per message: a UDP_SEGMENT control message
	gso   bool                    // sends runs of equal datagrams as one (UDP_SEGMENT)
	shift wire.ICRCShift          // the writer's, for setIPv4ID
	gro   *groStage               // receives coalesced datagrams (UDP_GRO); nil without
}

// GSO (UDP_SEGMENT, Linux 4.18): a run of datagrams to one destination, all of
// one length but the last, goes to the kernel as one send, and through veth
// (and to a peer socket with UDP_GRO) as one buffer. The kernel numbers the
// IPv4 identifications of the segments of an unconnected DF send 0, 1, 2...
// (ip_select_ident_segs, inet_gso_segment), and the ICRC covers that field
// (IBTA 17.3.4 masks TOS, TTL and checksum only): segment i's ICRC is
// computed with identification i.
const (
	gsoMaxSegs  = 64    // UDP_MAX_SEGMENTS is 64 before Linux 5.6
	gsoMaxBytes = 65000 // the run's UDP payload fits one IP datagram
)

// NewUDP opens one UDP socket per local address. The sockets live in the network
// namespace of the calling thread.
func NewUDP(opts UDPOptions) (*UDP, error) {
	if opts.Port == 0 {
		opts.Port = RoCEv2Port
	}
	if opts.Batch == 0 {
		opts.Batch = 64
	}
	if opts.Port < 1 || opts.Port > 65535 || opts.Batch < 1 || opts.Batch > 1024 {
		return nil, fmt.Errorf("%w: UDP port %d, batch %d", ErrBadOption, opts.Port, opts.Batch)
	}
	ifc, err := net.InterfaceByName(opts.Interface)
	if err != nil {
		return nil, fmt.Errorf("%w: interface %q: %v", ErrUnavailable, opts.Interface, err)
	}
	if len(opts.Addrs) == 0 {
		opts.Addrs, err = interfaceAddrs(ifc)
		if err != nil {
			return nil, err
		}
		if len(opts.Addrs) == 0 {
			return nil, fmt.Errorf("%w: interface %s has no IPv4 or global IPv6 address to bind", ErrUnavailable, ifc.Name)
		}
	}
	kind := KindUDP
	if opts.Offload {
		kind = KindUDPGSO
	}
	l := &UDP{info: Info{Kind: kind, Name: ifc.Name, Index: ifc.Index, MTU: ifc.MTU, MAC: ifc.HardwareAddr,
		Speed: interfaceSpeed(ifc.Name), FixedSourcePort: uint16(opts.Port), FixedIPv4ID: true}}
	ok := false
	defer func() {
		if !ok {
			l.closeFDs()
		}
	}()
	l.wake, err = wakeup.New()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for _, a := range opts.Addrs {
		s, err := openUDPSock(a.Unmap(), opts.Port, opts.Batch, opts.Offload)
		if err != nil {
			return nil, fmt.Errorf("%w: UDP socket on [%s]:%d: %w", ErrUnavailable, a, opts.Port, err)
		}
		l.socks = append(l.socks, s)
		l.pfds = append(l.pfds, unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN})
	}
	l.pfds = append(l.pfds, unix.PollFd{Fd: int32(l.wake.FD()), Events: unix.POLLIN})
	ok = true
	return l, nil
}

func interfaceAddrs(ifc *net.Interface) ([]netip.Addr, error) {
	as, err := ifc.Addrs()
	if err != nil {
		return nil, fmt.Errorf("%w: addresses of %s: %v", ErrUnavailable, ifc.Name, err)
	}
	var out []netip.Addr
	for _, a := range as {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		if ad := p.Addr(); !ad.IsLinkLocalUnicast() {
			out = append(out, ad)
		}
	}
	return out, nil
}

func openUDPSock(a netip.Addr, port, batch int, offload bool) (*udpSock, error) {
	s := &udpSock{local: a, fd: -1}
	var sa unix.Sockaddr
	if a.Is4() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			return nil, err
		}
		s.fd, s.hdr = fd, 14+20+8
		// DF on every datagram: RoCEv2 is never fragmented, and DF makes the kernel
		// send identification 0, which the ICRC covers.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			unix.Close(fd)
			return nil, err
		}
		sa = &unix.SockaddrInet4{Port: port, Addr: a.As4()}
	} else {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			return nil, err
		}
		s.fd, s.hdr = fd, 14+40+8
		for _, o := range [][3]int{
			{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1},
			{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO},
			// RoCEv2 senders (rxe, RNICs) leave the UDP checksum 0 and rely on the
			// ICRC; accept that over IPv6 as rxe's own tunnel socket does (RFC 6936).
			{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1},
		} {
			if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
				unix.Close(fd)
				return nil, err
			}
		}
		sa = &unix.SockaddrInet6{Port: port, Addr: a.As16()}
	}
	// Deep socket buffers absorb bursts while the engine is busy; FORCE works as root,
	// the plain option caps at net.core.*mem_max otherwise.
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o[0], 8<<20) != nil {
			_ = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o[1], 8<<20)
		}
	}
	if err := unix.Bind(s.fd, sa); err != nil {
		unix.Close(s.fd)
		return nil, err
	}
	s.msgs = make([]unix.Mmsghdr, batch)
	s.iovs = make([]unix.Iovec, batch)
	s.names = make([]unix.RawSockaddrInet6, batch)
	s.oob = make([]byte, batch*unix.CmsgSpace(2))
	s.gso = offload
	if offload && unix.SetsockoptInt(s.fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil {
		s.gro = newGROStage()
	}
	return s, nil
}

// ReadBatch implements Link. Each datagram lands after room for the headers, which are
// then rebuilt in front of it.
func (l *UDP) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return 0, ErrClosed
	}
	n := 0
	for k := 0; k < len(l.socks) && n < len(bufs) && n < len(sizes); k++ {
		s := l.socks[(l.next+k)%len(l.socks)]
		got, err := s.recv(bufs[n:], sizes[n:], &l.stats.rxDropped)
		if err != nil {
			return n, err
		}
		for i := n; i < n+got; i++ {
			l.stats.rxBytes.Add(uint64(sizes[i]))
		}
		n += got
	}
	l.next++
	l.stats.rxFrames.Add(uint64(n))
	return n, nil
}

func (s *udpSock) recv(bufs [][]byte, sizes []int, dropped *atomic.Uint64) (int, error) {
	if s.gro != nil {
		return s.gro.recv(s, bufs, sizes, dropped)
	}
	m := min(len(bufs), len(sizes), len(s.msgs))
	k := 0 // buffers with room for a header; a smaller one ends the batch
	for ; k < m; k++ {
		b := bufs[k]
		if len(b) <= s.hdr {
			break
		}
		s.iovs[k] = unix.Iovec{Base: &b[s.hdr]}
		s.iovs[k].SetLen(len(b) - s.hdr)
		s.msgs[k] = unix.Mmsghdr{}
		s.msgs[k].Hdr.Iov = &s.iovs[k]
		s.msgs[k].Hdr.SetIovlen(1)
		s.msgs[k].Hdr.Name = (*byte)(unsafe.Pointer(&s.names[k]))
		s.msgs[k].Hdr.Namelen = uint32(unsafe.Sizeof(s.names[k]))
	}
	if k == 0 {
		return 0, nil
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msgs[0])), uintptr(k), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return 0, nil
	}
	if e != 0 {
		return 0, fmt.Errorf("recvmmsg: %w", e)
	}
	n := 0
	for i := 0; i < int(r); i++ {
		if s.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
			dropped.Add(1) // larger than the buffer: drop and count, as the Link contract says
			continue
		}
		plen := int(s.msgs[i].Len)
		if n != i { // close the gap a dropped datagram left
			if s.hdr+plen > len(bufs[n]) {
				dropped.Add(1) // longer than the buffer it would move to (buffers may differ)
				continue
			}
			copy(bufs[n][s.hdr:], bufs[i][s.hdr:s.hdr+plen])
		}
		sizes[n] = s.hdr + s.rebuildHeader(bufs[n], &s.names[i], plen, 0)
		n++
	}
	return n, nil
}

// rebuildHeader writes Ethernet + IP + UDP in front of a plen-byte datagram from the
// peer in name, as the kernel sent it (see UDP) with IPv4 identification id, and
// returns plen.
func (s *udpSock) rebuildHeader(b []byte, name *unix.RawSockaddrInet6, plen int, id uint16) int {
	// MACs are not known through a socket, and the ICRC does not cover them.
	eth := wire.EthernetFields{EtherType: wire.EtherTypeIPv6}
	var sport uint16
	if s.local.Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		sport = ntohs(sa.Port)
		eth.EtherType = wire.EtherTypeIPv4
		ip := wire.IPv4Fields{TotalLength: wire.IPv4Len + wire.UDPLen + plen, ID: id, Flags: wire.IPv4FlagDF, TTL: 64,
			Protocol: wire.IPProtoUDP, Src: netip.AddrFrom4(sa.Addr), Dst: s.local}
		ip.Encode(b[wire.EthernetLen:])
	} else {
		sport = ntohs(name.Port)
		ip := wire.IPv6Fields{PayloadLength: wire.UDPLen + plen, NextHeader: wire.IPProtoUDP, HopLimit: 64,
			Src: netip.AddrFrom16(name.Addr), Dst: s.local}
		ip.Encode(b[wire.EthernetLen:])
	}
	eth.Encode(b)
	// Checksum 0: the ICRC masks it, and the kernel has already checked it.
	u := wire.UDPFields{SrcPort: sport, DstPort: RoCEv2Port, Length: wire.UDPLen + plen}
	u.Encode(b[s.hdr-wire.UDPLen:])
	return plen
}

func ntohs(p uint16) uint16 { return p>>8 | p<<8 }

// JoinGroup refuses (link.Multicaster): the link's socket, bound to the
// interface's unicast address, never receives a group's datagrams, so a
// QP attached to a group here would wait for nothing.
func (l *UDP) JoinGroup(ip netip.Addr) error {
	return fmt.Errorf("%w: the UDP link receives no multicast (group %v): use AF_XDP", ErrUnavailable, ip)
}

// LeaveGroup has nothing to leave (JoinGroup refuses).
func (l *UDP) LeaveGroup(netip.Addr) error { return nil }

// WriteBatch implements Link: each frame's IP destination and UDP payload become one
// datagram. Frames of a family no socket serves, or that are not IP/UDP, are taken,
// dropped and counted.
func (l *UDP) WriteBatch(frames [][]byte) (int, error) {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return 0, ErrClosed
	}
	done := 0
	for done < len(frames) {
		// Gather the longest run of frames for one socket, then send it in one call.
		s := l.sockFor(frames[done])
		if s == nil {
			l.stats.txDropped.Add(1)
			done++
			continue
		}
		// k frames in m messages: a message is one datagram, or a GSO run.
		k, m := 0, 0
		for done+k < len(frames) && k < len(s.iovs) && m < len(s.msgs) {
			f := frames[done+k]
			if l.sockFor(f) != s {
				break
			}
			dst, payload, ok := splitFrame(f)
			if !ok {
				break
			}
			run := s.gather(frames[done+k:], s.iovs[k:], dst, payload)
			s.names[m] = unix.RawSockaddrInet6{}
			if s.local.Is4() {
				sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.names[m]))
				sa.Family = unix.AF_INET
				sa.Port = ntohs(RoCEv2Port)
				sa.Addr = dst.As4()
				s.msgs[m].Hdr.Namelen = unix.SizeofSockaddrInet4
			} else {
				sa := &s.names[m]
				sa.Family = unix.AF_INET6
				sa.Port = ntohs(RoCEv2Port)
				sa.Addr = dst.As16()
				s.msgs[m].Hdr.Namelen = unix.SizeofSockaddrInet6
			}
			s.msgs[m].Hdr.Name = (*byte)(unsafe.Pointer(&s.names[m]))
			s.msgs[m].Hdr.Iov = &s.iovs[k]
			s.msgs[m].Hdr.SetIovlen(run)
			s.msgs[m].Hdr.Control, s.msgs[m].Hdr.Controllen, s.msgs[m].Hdr.Flags = nil, 0, 0
			if run > 1 {
				oob := s.oob[m*unix.CmsgSpace(2) : (m+1)*unix.CmsgSpace(2)]
				h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
				h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
				h.SetLen(unix.CmsgLen(2))
				*(*uint16)(unsafe.Pointer(&oob[unix.CmsgLen(0)])) = uint16(len(payload))
				s.msgs[m].Hdr.Control = &oob[0]
				s.msgs[m].Hdr.SetControllen(len(oob))
			}
			s.msgs[m].Len = 0
			k += run
			m++
		}
		if k == 0 { // not IP/UDP: drop
			l.stats.txDropped.Add(1)
			done++
			continue
		}
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msgs[0])), uintptr(m), unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EAGAIN || e == unix.ENOBUFS || e == unix.EINTR:
			return done, nil // full for now: the engine retries the rest
		case e != 0 && s.msgs[0].Hdr.Controllen != 0:
			// The kernel refused the first run (EIO: a route without checksum
			// offload, EINVAL: an older kernel): send single datagrams from now
			// on, and this run again.
			s.gso = false
			continue
		case e != 0:
			// The first datagram was refused (EMSGSIZE, unreachable): count it, go on.
			l.stats.txErrors.Add(1)
			done++
			continue
		}
		// r messages went: the frames of their runs.
		sent := 0
		for i := 0; i < int(r); i++ {
			sent += int(s.msgs[i].Hdr.Iovlen)
		}
		r = uintptr(sent)
		for i := 0; i < int(r); i++ {
			l.stats.txBytes.Add(uint64(len(frames[done+i])))
		}
		l.stats.txFrames.Add(uint64(r))
		done += int(r)
		if int(r) < k {
			return done, nil
		}
	}
	return done, nil
}

// sockFor returns the socket of the frame's IP family and source address (or of its
// family when no socket has that source), nil when none fits.
func (l *UDP) sockFor(f []byte) *udpSock {
	v4, src, ok := frameSource(f)
	if !ok {
		return nil
	}
	var fam *udpSock
	for _, s := range l.socks {
		if s.local.Is4() != v4 {
			continue
		}
		if s.local == src {
			return s
		}
		if fam == nil {
			fam = s
		}
	}
	return fam
}

// l3 returns the offset of the IP header, skipping one 802.1Q tag.
func l3(f []byte) (off int, etype uint16, ok bool) {
	if len(f) < 14 {
		return 0, 0, false
	}
	off, etype = 14, binary.BigEndian.Uint16(f[12:])
	if etype == 0x8100 || etype == 0x88A8 {
		if len(f) < 18 {
			return 0, 0, false
		}
		off, etype = 18, binary.BigEndian.Uint16(f[16:])
	}
	return off, etype, true
}

func frameSource(f []byte) (v4 bool, src netip.Addr, ok bool) {
	off, et, ok := l3(f)
	switch {
	case !ok:
		return false, src, false
	case et == 0x0800 && len(f) >= off+20:
		return true, netip.AddrFrom4([4]byte(f[off+12 : off+16])), true
	case et == 0x86DD && len(f) >= off+40:
		return false, netip.AddrFrom16([16]byte(f[off+8 : off+24])), true
	}
	return false, src, false
}

// splitFrame returns a frame's IP destination and UDP payload.
func splitFrame(f []byte) (dst netip.Addr, payload []byte, ok bool) {
	off, et, ok := l3(f)
	if !ok {
		return dst, nil, false
	}
	var udp int
	switch {
	case et == 0x0800 && len(f) >= off+20 && f[off+9] == unix.IPPROTO_UDP:
		dst = netip.AddrFrom4([4]byte(f[off+16 : off+20]))
		udp = off + int(f[off]&0x0f)*4
	case et == 0x86DD && len(f) >= off+40 && f[off+6] == unix.IPPROTO_UDP:
		dst = netip.AddrFrom16([16]byte(f[off+24 : off+40]))
		udp = off + 40
	default:
		return dst, nil, false
	}
	if len(f) < udp+8 {
		return dst, nil, false
	}
	ulen := int(binary.BigEndian.Uint16(f[udp+4:]))
	if ulen < 8 || udp+ulen > len(f) {
		return dst, nil, false
	}
	return dst, f[udp+8 : udp+ulen], true
}

// Wait implements Link with poll(2) over the sockets and the wake-up pipe.
func (l *UDP) Wait(timeout time.Duration) error {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return ErrClosed
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for i := range l.pfds {
		l.pfds[i].Revents = 0
	}
	_, err := unix.Poll(l.pfds, ms)
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("poll: %w", err)
	}
	if l.pfds[len(l.pfds)-1].Revents&unix.POLLIN != 0 {
		l.wake.Drain()
	}
	return nil
}

// Wake implements Link.
func (l *UDP) Wake() {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if !l.closed.Load() {
		_ = l.wake.Wake()
	}
}

// WakeFD implements Waker.
func (l *UDP) WakeFD() (int, error) {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closed.Load() {
		return -1, ErrClosed
	}
	return l.wake.Writer()
}

// Info implements Link.
func (l *UDP) Info() Info { return l.info }

// Stats implements Link.
func (l *UDP) Stats() Stats {
	return Stats{
		RxFrames: l.stats.rxFrames.Load(), RxBytes: l.stats.rxBytes.Load(),
		TxFrames: l.stats.txFrames.Load(), TxBytes: l.stats.txBytes.Load(),
		RxDropped: l.stats.rxDropped.Load(), TxDropped: l.stats.txDropped.Load(),
		TxErrors: l.stats.txErrors.Load(),
	}
}

// Close implements Link. It wakes a Wait in progress, then waits for it to return
// before it closes the file descriptors, so no syscall can use a reused fd.
func (l *UDP) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	_ = l.wake.Wake()
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	l.closeFDs()
	return nil
}

func (l *UDP) closeFDs() {
	for _, s := range l.socks {
		unix.Close(s.fd)
	}
	l.socks = nil
	if l.wake != nil {
		l.wake.Close()
		l.wake = nil
	}
}

// gather puts into iovs the UDP payloads of the frames that go as one
// message, and returns how many: the first (to dst, its payload first), then,
// with GSO, the frames after it to the same destination from the same source
// with payloads of first's length, and one shorter one to end the run. Each
// IPv4 frame gets the identification the kernel will give its segment.
func (s *udpSock) gather(frames [][]byte, iovs []unix.Iovec, dst netip.Addr, first []byte) int {
	n, total := 0, 0
	var src0 netip.Addr
	for n < len(frames) && n < len(iovs) {
		pl := first
		if n > 0 {
			if !s.gso || len(first) == 0 || n == gsoMaxSegs {
				break
			}
			d, p, ok := splitFrame(frames[n])
			if !ok || d != dst || len(p) > len(first) || len(p) == 0 || total+len(p) > gsoMaxBytes {
				break
			}
			if _, src, _ := frameSource(frames[n]); src != src0 {
				break // another socket's
			}
			pl = p
		} else {
			_, src0, _ = frameSource(frames[0])
		}
		if s.local.Is4() {
			setIPv4ID(frames[n], uint16(n), &s.shift)
		}
		iovs[n] = unix.Iovec{}
		if len(pl) > 0 {
			iovs[n] = unix.Iovec{Base: &pl[0]}
			iovs[n].SetLen(len(pl))
		}
		n++
		total += len(pl)
		if len(pl) < len(first) {
			break // a shorter datagram ends a run
		}
	}
	return n
}

// setIPv4ID sets an IPv4 frame's identification to id and, if it changed,
// carries the change into its ICRC (wire.PatchICRC: no pass over the frame;
// an ICRC that was wrong stays wrong).
func setIPv4ID(f []byte, id uint16, sh *wire.ICRCShift) {
	off, et, ok := l3(f)
	if !ok || et != 0x0800 || len(f) < off+wire.IPv4Len {
		return
	}
	ip := f[off : off+wire.IPv4Len]
	was := binary.BigEndian.Uint16(ip[4:])
	if was == id {
		return
	}
	binary.BigEndian.PutUint16(ip[4:], id)
	udp := off + int(ip[0]&0x0f)*4
	if len(f) < udp+wire.UDPLen+wire.BTHLen+wire.ICRCLen || ip[0]&0x0f != 5 {
		return
	}
	ulen := int(binary.BigEndian.Uint16(f[udp+4:]))
	if ulen < wire.UDPLen+wire.BTHLen+wire.ICRCLen || udp+ulen > len(f) {
		return
	}
	at := udp + ulen - wire.ICRCLen
	diff := [2]byte{byte((was ^ id) >> 8), byte(was ^ id)}
	after := at - (off + 6) // covered bytes after the identification (ip[4:6])
	wire.PutICRC(f[at:], wire.PatchICRC(wire.GetICRC(f[at:]), diff[:], after, sh))
}

// groStage receives coalesced datagrams (UDP_GRO) and hands them out one
// segment, one frame, at a time. Owned by the link's reader.
type groStage struct {
	bufs  [][]byte
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	oob   []byte
	lens  []int // bytes of each datagram received, -1 if it was truncated
	segs  []int // its segment size, 0 if not coalesced
	n     int   // datagrams received
	cur   int   // datagram being handed out
	off   int   // offset of its next segment
	idx   int   // that segment's index
	zero  bool  // the datagram's segments carry identification 0 (found at its second)

	coalesced, fixedID uint64 // datagrams GRO coalesced; segments of them sent one by one (tests)
}

const (
	groBufs   = 8
	groBufLen = 65536
	groOOB    = 32 // room for one int cmsg
)

func newGROStage() *groStage {
	g := &groStage{bufs: make([][]byte, groBufs), msgs: make([]unix.Mmsghdr, groBufs), iovs: make([]unix.Iovec, groBufs),
		names: make([]unix.RawSockaddrInet6, groBufs), oob: make([]byte, groBufs*groOOB),
		lens: make([]int, groBufs), segs: make([]int, groBufs)}
	for i := range g.bufs {
		g.bufs[i] = make([]byte, groBufLen)
	}
	return g
}

// fill receives up to groBufs datagrams; it returns how many.
func (g *groStage) fill(fd int, dropped *atomic.Uint64) (int, error) {
	for i := range g.msgs {
		g.iovs[i] = unix.Iovec{Base: &g.bufs[i][0]}
		g.iovs[i].SetLen(groBufLen)
		g.msgs[i] = unix.Mmsghdr{}
		g.msgs[i].Hdr.Iov = &g.iovs[i]
		g.msgs[i].Hdr.SetIovlen(1)
		g.msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&g.names[i]))
		g.msgs[i].Hdr.Namelen = uint32(unsafe.Sizeof(g.names[i]))
		g.msgs[i].Hdr.Control = &g.oob[i*groOOB]
		g.msgs[i].Hdr.SetControllen(groOOB)
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&g.msgs[0])), groBufs, unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return 0, nil
	}
	if e != 0 {
		return 0, fmt.Errorf("recvmmsg: %w", e)
	}
	for i := 0; i < int(r); i++ {
		g.lens[i], g.segs[i] = int(g.msgs[i].Len), 0
		if g.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
			dropped.Add(1)
			g.lens[i] = -1
			continue
		}
		// The one control message there can be: UDP_GRO, the segment size.
		oob := g.oob[i*groOOB : i*groOOB+int(g.msgs[i].Hdr.Controllen)]
		if len(oob) >= unix.CmsgLen(4) {
			h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
			if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && int(h.Len) >= unix.CmsgLen(4) {
				g.segs[i] = int(*(*int32)(unsafe.Pointer(&oob[unix.CmsgLen(0)])))
				g.coalesced++
			}
		}
	}
	g.n, g.cur, g.off, g.idx, g.zero = int(r), 0, 0, 0, false
	return int(r), nil
}

// recv hands out received segments as frames, receiving once when none is
// left.
func (g *groStage) recv(s *udpSock, bufs [][]byte, sizes []int, dropped *atomic.Uint64) (int, error) {
	n := 0
	filled := false
	for n < len(bufs) && n < len(sizes) {
		if g.cur >= g.n {
			if filled {
				break
			}
			filled = true
			got, err := g.fill(s.fd, dropped)
			if err != nil || got == 0 {
				return n, err
			}
		}
		plen := g.lens[g.cur] - g.off
		if seg := g.segs[g.cur]; seg > 0 && plen > seg {
			plen = seg
		}
		if plen >= 0 {
			if b := bufs[n]; len(b) < s.hdr+plen {
				dropped.Add(1) // larger than the reader's buffer (the Link contract)
			} else {
				copy(b[s.hdr:], g.bufs[g.cur][g.off:g.off+plen])
				sizes[n] = s.hdr + s.rebuildHeader(b, &g.names[g.cur], plen, uint16(g.idx))
				// GRO coalesces a flow's datagrams while their identifications
				// all go up by one or are all the same, which it decides at the
				// second (inet_gro_flush in include/net/gro.h): the second
				// segment's ICRC tells which for every segment after it, so
				// only it takes a pass here (the engine checks every frame).
				if g.idx == 1 && s.local.Is4() {
					// Identification 0 for all: datagrams sent one by one (a
					// peer without GSO) that GRO coalesced.
					g.zero = !icrcMatches(b[:sizes[n]])
				}
				if g.idx > 0 && g.zero {
					s.rebuildHeader(b, &g.names[g.cur], plen, 0)
					g.fixedID++
				}
				n++
			}
		}
		g.off += plen
		g.idx++
		if plen <= 0 || g.off >= g.lens[g.cur] {
			g.cur, g.off, g.idx, g.zero = g.cur+1, 0, 0, false
		}
	}
	return n, nil
}

// icrcMatches reports whether a rebuilt IPv4 frame (Ethernet, a 20-byte IPv4
// header, UDP, then the RoCE packet) carries the ICRC of its contents.
func icrcMatches(f []byte) bool {
	const udp = wire.EthernetLen + wire.IPv4Len
	if len(f) < udp+wire.UDPLen+wire.BTHLen+wire.ICRCLen {
		return false
	}
	icrc, ok := wire.ICRCInPlace(f[wire.EthernetLen:len(f)-wire.ICRCLen], wire.IPv4Len) // the reader's buffer, ours now
	return ok && icrc == wire.GetICRC(f[len(f)-wire.ICRCLen:])
}
