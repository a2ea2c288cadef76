// Address vectors and their resolution: the checks against the port and the
// next hop's MAC (rxe_av.c, rxe_net.c).

package engine

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/wire"
)

// AV is an address vector: struct ibv_ah_attr with its GRH, which RoCE always
// needs. A plain value.
type AV struct {
	DGID         netdev.GID // destination GID: the peer's IP address
	SGIDIndex    uint8      // index of the source GID in the port's table
	FlowLabel    uint32     // IPv6 flow label; also seeds the UDP source port
	HopLimit     uint8      // IPv6 hop limit (0: 64); IPv4 always sends TTL 64
	TrafficClass uint8      // IPv6 traffic class, IPv4 TOS
	Port         uint8      // 0 or 1
	// DMAC is the next hop's MAC. When nil the device resolves it
	// (Config.ResolveMAC) when the AV is set, and caches the answer.
	DMAC net.HardwareAddr
}

// resolveAV checks an AV against the port and finds its next hop, in the caller's
// goroutine (it may block on neighbour resolution).
func (d *Device) resolveAV(av *AV) (routeParams, error) {
	var p routeParams
	if av.Port > 1 {
		return p, errorf(ErrInvalid, "port %d (the device has port 1)", av.Port)
	}
	if int(av.SGIDIndex) >= len(d.cfg.GIDs) {
		return p, errorf(ErrInvalid, "source GID index %d (table of %d)", av.SGIDIndex, len(d.cfg.GIDs))
	}
	if av.DGID.IsZero() {
		return p, errorf(ErrInvalid, "zero destination GID")
	}
	p.src = d.cfg.GIDs[av.SGIDIndex].Addr()
	p.dst = av.DGID.Addr()
	if p.src.Is4() != p.dst.Is4() {
		return p, errorf(ErrInvalid, "source GID %v and destination GID %v are of different IP families",
			d.cfg.GIDs[av.SGIDIndex], av.DGID)
	}
	p.smac = d.smac
	p.tclass = av.TrafficClass
	p.flowLabel = av.FlowLabel & 0xFFFFF
	p.hopLimit = av.HopLimit
	switch {
	case len(av.DMAC) == 6:
		p.dmac = wire.MAC(av.DMAC)
	case len(av.DMAC) != 0:
		return p, errorf(ErrInvalid, "destination MAC %v", av.DMAC)
	default:
		mac, err := d.nextHop(p.dst)
		if err != nil {
			return p, err
		}
		p.dmac = mac
	}
	return p, nil
}

// nextHop resolves and caches the MAC of dst.
func (d *Device) nextHop(dst netip.Addr) (wire.MAC, error) {
	if d.cfg.ResolveMAC == nil {
		return wire.MAC{}, nil
	}
	d.mu.Lock()
	m, ok := d.macs[dst]
	d.mu.Unlock()
	if ok {
		return m, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	hw, err := d.cfg.ResolveMAC(ctx, dst)
	if err != nil || len(hw) != 6 {
		return m, errorf(ErrUnreachable, "next hop of %v: %v", dst, err)
	}
	m = wire.MAC(hw)
	d.mu.Lock()
	d.macs[dst] = m
	d.mu.Unlock()
	return m, nil
}
