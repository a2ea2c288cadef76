// ICMP echo from inside a namespace, so tests need no ping binary.

package testenv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/xrnic/xrnic/nic/wire"
)

// Ping sends one ICMP or ICMPv6 echo request to dst from inside the namespace, over a
// raw socket (root), and waits for the matching reply until ctx is done (or 2 s when
// ctx has no deadline).
func (ns *NS) Ping(ctx context.Context, dst netip.Addr) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	dst = dst.Unmap()
	network, typ, replyTyp := "ip4:icmp", byte(8), byte(0)
	if dst.Is6() {
		network, typ, replyTyp = "ip6:ipv6-icmp", 128, 129
	}
	var conn net.PacketConn
	if err := ns.Do(func() (err error) {
		conn, err = net.ListenPacket(network, "")
		return err
	}); err != nil {
		return fmt.Errorf("testenv: ping %s from %s: %w", dst, ns.Name, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()

	id, seq := uint16(os.Getpid()), uint16(nsCounter.Add(1))
	req := make([]byte, 8, 8+16)
	req[0] = typ
	binary.BigEndian.PutUint16(req[4:], id)
	binary.BigEndian.PutUint16(req[6:], seq)
	req = append(req, "xrnic testenv..."...)
	if dst.Is4() {
		binary.BigEndian.PutUint16(req[2:], wire.Checksum(req)) // the kernel sums ICMPv6
	}
	to := &net.IPAddr{IP: dst.AsSlice(), Zone: dst.Zone()}
	if _, err := conn.WriteTo(req, to); err != nil {
		return fmt.Errorf("testenv: ping %s from %s: %w", dst, ns.Name, err)
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
				err = ctx.Err()
			}
			return fmt.Errorf("testenv: ping %s from %s: no reply: %w", dst, ns.Name, err)
		}
		// Raw sockets see every ICMP message in the namespace; keep only our reply.
		b := buf[:n]
		if len(b) < 8 || b[0] != replyTyp || b[1] != 0 ||
			binary.BigEndian.Uint16(b[4:]) != id || binary.BigEndian.Uint16(b[6:]) != seq {
			continue
		}
		if a, ok := from.(*net.IPAddr); ok {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() != dst.WithZone("") {
				continue
			}
		}
		return nil
	}
}
