package xsk

// Raw Ethernet + IPv4 + UDP frames for the tests.

import (
	"encoding/binary"
	"net"
	"net/netip"
)

const hdrLen = 14 + 20 + 8

type udpFrame struct {
	dstMAC, srcMAC net.HardwareAddr
	srcIP, dstIP   netip.Addr
	srcPort        uint16
	dstPort        uint16
}

// build returns the frame carrying payload, with IPv4 header checksum and UDP
// checksum filled in, DF set.
func (u udpFrame) build(payload []byte) []byte {
	b := make([]byte, hdrLen+len(payload))
	u.buildInto(b, payload)
	return b
}

func (u udpFrame) buildInto(b, payload []byte) {
	copy(b[0:6], u.dstMAC)
	copy(b[6:12], u.srcMAC)
	binary.BigEndian.PutUint16(b[12:14], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	ip[1] = 0
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+8+len(payload)))
	binary.BigEndian.PutUint16(ip[4:6], 0)
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17
	ip[10], ip[11] = 0, 0
	src, dst := u.srcIP.As4(), u.dstIP.As4()
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:12], ^fold(sum(ip, 0)))
	udp := b[34:]
	binary.BigEndian.PutUint16(udp[0:2], u.srcPort)
	binary.BigEndian.PutUint16(udp[2:4], u.dstPort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(8+len(payload)))
	udp[6], udp[7] = 0, 0
	copy(udp[8:], payload)
	// Pseudo-header: addresses, protocol, UDP length.
	ps := sum(ip[12:20], 17+uint32(8+len(payload)))
	c := ^fold(sum(udp[:8+len(payload)], ps))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
}

func sum(b []byte, acc uint32) uint32 {
	for len(b) >= 2 {
		acc += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	return acc
}

func fold(acc uint32) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// numbered returns n frames whose payloads, size bytes of pattern each, start
// with the frame's index (big endian), so that receivers can check the order.
func (u udpFrame) numbered(n, size int) [][]byte {
	frames := make([][]byte, n)
	for i := range frames {
		p := pattern(size, i)
		binary.BigEndian.PutUint32(p, uint32(i))
		frames[i] = u.build(p)
	}
	return frames
}

// pattern returns n bytes that differ per seed and position, so that a swapped,
// shifted or truncated segment shows.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*131 + i>>8)
	}
	return b
}
