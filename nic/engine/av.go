// Address vectors and their resolution: the checks against the port and the
// next hop's MAC (rxe_av.c, rxe_net.c).

package engine

import (
	"context"
	"net"
	"net/netip"
	"sync"

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

// checkAV checks an AV against the port and fills the route parameters. It never
// blocks: when the next hop's MAC is neither in the AV nor in the device's cache,
// it reports needMAC and the caller resolves it with resolveMAC.
func (d *Device) checkAV(av *AV) (p routeParams, needMAC bool, err error) {
	if av.Port > 1 {
		return p, false, errorf(ErrInvalid, "port %d (the device has port 1)", av.Port)
	}
	if int(av.SGIDIndex) >= len(d.cfg.GIDs) {
		return p, false, errorf(ErrInvalid, "source GID index %d (table of %d)", av.SGIDIndex, len(d.cfg.GIDs))
	}
	if av.DGID.IsZero() {
		return p, false, errorf(ErrInvalid, "zero destination GID")
	}
	p.src = d.cfg.GIDs[av.SGIDIndex].Addr()
	p.dst = av.DGID.Addr()
	if p.src.Is4() != p.dst.Is4() {
		return p, false, errorf(ErrInvalid, "source GID %v and destination GID %v are of different IP families",
			d.cfg.GIDs[av.SGIDIndex], av.DGID)
	}
	p.smac = d.smac
	p.tclass = av.TrafficClass
	p.flowLabel = av.FlowLabel & 0xFFFFF
	p.hopLimit = av.HopLimit
	local := d.portAddr(p.dst)
	if IsMcastGID(av.DGID) {
		// The group's MAC, whatever the AV says (ib_resolve_eth_dmac).
		mcastRouteParams(&p, av.DGID)
		return p, false, nil
	}
	switch {
	case len(av.DMAC) == 6:
		p.dmac = wire.MAC(av.DMAC)
	case len(av.DMAC) != 0:
		return p, false, errorf(ErrInvalid, "destination MAC %v", av.DMAC)
	case local:
		// The kernel resolves one of the host's addresses to the
		// device's own MAC (rdma_resolve_ip's is_dst_local).
		p.dmac = d.smac
	case d.cfg.ResolveMAC == nil:
		// Links that address peers by IP take a zero MAC.
	default:
		d.mu.Lock()
		m, ok := d.macs[p.dst]
		d.mu.Unlock()
		p.dmac = m
		needMAC = !ok
	}
	// rxe_prepare loops back a frame to the device's own MAC (rxe_loopback):
	// it never reaches the wire. Here the destination must be the port's too,
	// as rxe's receive then requires (rxe_chk_dgid); a link without MACs (UDP)
	// loops the port's addresses.
	p.loop = local && p.dmac == p.smac
	return p, needMAC, nil
}

// portAddr reports whether a is the address of one of the port's GIDs.
func (d *Device) portAddr(a netip.Addr) bool {
	for _, g := range d.cfg.GIDs {
		if g.Addr() == a {
			return true
		}
	}
	return false
}

// resolver runs next-hop resolutions (Config.ResolveMAC) on goroutines of its
// own, so that neither an API call nor the engine ever waits for the network
// (MID1: the AH verbs never block; rxe resolves through the kernel's neighbour
// table the same way, off the verb). One resolution runs per destination; the
// callers of the same destination share its answer.
type resolver struct {
	mu      sync.Mutex
	pending map[netip.Addr][]func(wire.MAC, error) // guarded by mu
	stopped bool                                   // guarded by mu
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func (r *resolver) init() {
	r.pending = make(map[netip.Addr][]func(wire.MAC, error))
	r.ctx, r.cancel = context.WithCancel(context.Background())
}

// resolveMAC has done called with dst's next-hop MAC, or the error wrapping
// ErrUnreachable, on a resolver goroutine. It fails at once with ErrLimit when
// MaxPendingResolutions destinations are being resolved, and with ErrClosed after
// the device's close.
func (d *Device) resolveMAC(dst netip.Addr, done func(wire.MAC, error)) error {
	r := &d.res
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return errDevClosed
	}
	if waiters, ok := r.pending[dst]; ok {
		r.pending[dst] = append(waiters, done)
		return nil
	}
	if len(r.pending) >= MaxPendingResolutions {
		return errorf(ErrLimit, "%d next hops being resolved", MaxPendingResolutions)
	}
	r.pending[dst] = []func(wire.MAC, error){done}
	r.wg.Add(1)
	go d.routineResolve(dst)
	return nil
}

// routineResolve resolves one destination, caches the answer and hands it to
// every caller waiting for it.
func (d *Device) routineResolve(dst netip.Addr) {
	r := &d.res
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(r.ctx, ResolveTimeout)
	hw, err := d.cfg.ResolveMAC(ctx, dst)
	cancel()
	var m wire.MAC
	if err != nil || len(hw) != 6 {
		err = errorf(ErrUnreachable, "next hop of %v: %v", dst, err)
	} else {
		m = wire.MAC(hw)
		d.mu.Lock()
		d.macs[dst] = m
		d.mu.Unlock()
	}
	r.mu.Lock()
	waiters := r.pending[dst]
	delete(r.pending, dst)
	r.mu.Unlock()
	for _, f := range waiters {
		f(m, err)
	}
}

// stop cancels the resolutions in flight and waits for their goroutines (their
// callers get ErrUnreachable).
func (r *resolver) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}
