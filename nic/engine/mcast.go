// UD multicast: groups keyed by MGID with their attached QPs (rxe_mcast.c),
// the receive fan-out (rxe_recv.c rxe_rcv_mcast_pkt) and the send to a
// group's MAC.
//
// Per queue: a group's members live on their QPs' shards, in each engine's own
// list (engine.mcg), which only that engine reads. The device keeps, for the
// receive path, which shards have members of which group (mcastTable, a
// snapshot replaced on every change, read with one atomic load): a multicast
// frame is checked where it comes in and a copy handed to every other shard
// with members (handOver), each delivering it to its own QPs. A frame cannot be
// steered to one shard (shard.go), and a shard may not touch another's QPs.

package engine

import (
	"errors"
	"math/bits"
	"slices"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// Multicast limits (rxe_param.h).
const (
	MaxMcastGrp           = 8192    // RXE_MAX_MCAST_GRP
	MaxMcastQPAttach      = 56      // RXE_MAX_MCAST_QP_ATTACH: QPs per group
	MaxTotalMcastQPAttach = 0x70000 // RXE_MAX_TOT_MCAST_QP_ATTACH
)

// McastQPN is the destination QPN of a multicast packet (IB_MULTICAST_QPN).
const McastQPN = 0xFFFFFF

// IsMcastGID reports whether g is a multicast GID: an IPv6 multicast address
// or an IPv4-mapped one (rdma_is_multicast_addr).
func IsMcastGID(g netdev.GID) bool {
	return g[0] == 0xff || g.IsIPv4Mapped() && g[12]&0xf0 == 0xe0
}

// McastMAC returns the Ethernet address of a multicast GID (ip_eth_mc_map for
// IPv4, ipv6_eth_mc_map for IPv6, as rxe_mcast_add maps them).
func McastMAC(g netdev.GID) wire.MAC {
	if g.IsIPv4Mapped() {
		return wire.MAC{0x01, 0x00, 0x5e, g[13] & 0x7f, g[14], g[15]}
	}
	return wire.MAC{0x33, 0x33, g[12], g[13], g[14], g[15]}
}

// mcGroup is a group's control-side record, guarded by Device.mcMu.
type mcGroup struct {
	qps      []*QP
	perShard [MaxQueues]uint16 // members on each shard
}

// mcastTable is which shards have members of each group, a bit per shard;
// immutable once published.
type mcastTable map[netdev.GID]uint64

// mcastMask returns the shards with members of mgid (0: none).
func (d *Device) mcastMask(mgid netdev.GID) uint64 {
	t := d.mcast.Load()
	if t == nil {
		return 0
	}
	return (*t)[mgid]
}

// publishMcastLocked replaces the snapshot; d.mcMu held.
func (d *Device) publishMcastLocked() {
	t := make(mcastTable, len(d.mcgs))
	for g, r := range d.mcgs {
		var m uint64
		for i, n := range r.perShard[:len(d.sh)] {
			if n > 0 {
				m |= 1 << i
			}
		}
		t[g] = m
	}
	d.mcast.Store(&t)
}

// checkMcastArgs makes ib_attach_mcast's and ib_detach_mcast's checks: a UD
// QP and a multicast GID (the MLID is ignored on RoCE, IBA A17.5.6).
func (qp *QP) checkMcastArgs(mgid netdev.GID) error {
	if qp.typ != qpattr.UD {
		return errorf(ErrInvalid, "multicast on a %v QP: UD only", qp.typ)
	}
	if !IsMcastGID(mgid) {
		return errorf(ErrInvalid, "%v is not a multicast GID", mgid)
	}
	return nil
}

// AttachMcast attaches the QP to the multicast group mgid (ibv_attach_mcast,
// rxe_attach_mcast). Attaching again is no error. The first member of a group
// asks the link for its frames (rxe_mcast_add's dev_mc_add). Limits fail with
// ErrInvalid, as rxe_alloc_mcg and rxe_attach_mcg answer EINVAL.
func (qp *QP) AttachMcast(mgid netdev.GID) error {
	if err := qp.checkMcastArgs(mgid); err != nil {
		return err
	}
	d := qp.d
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	if qp.mcDead {
		return errorf(ErrClosed, "QP %#x", qp.qpn)
	}
	if slices.Contains(qp.mcgs, mgid) {
		return nil
	}
	if d.mcAttached >= MaxTotalMcastQPAttach {
		return errorf(ErrInvalid, "%d multicast attachments (max_total_mcast_qp_attach)", d.mcAttached)
	}
	g := d.mcgs[mgid]
	fresh := g == nil
	if fresh {
		if len(d.mcgs) >= MaxMcastGrp {
			return errorf(ErrInvalid, "%d multicast groups (max_mcast_grp)", len(d.mcgs))
		}
		if err := d.linkMcast(mgid, true); err != nil {
			return err
		}
		g = &mcGroup{}
	} else if len(g.qps) >= MaxMcastQPAttach {
		return errorf(ErrInvalid, "%d QPs in group %v (max_mcast_qp_attach)", len(g.qps), mgid)
	}
	// The engine's list first, then the snapshot: a frame handed over finds
	// the member there.
	err := qp.sh.exec(func(e *engine) error {
		if !qp.live {
			return errorf(ErrClosed, "QP %#x", qp.qpn)
		}
		if e.mcg == nil {
			e.mcg = make(map[netdev.GID][]*QP)
		}
		e.mcg[mgid] = append(e.mcg[mgid], qp)
		return nil
	}).Wait()
	if err != nil {
		if fresh {
			d.linkMcast(mgid, false)
		}
		return err
	}
	if fresh {
		d.mcgs[mgid] = g
	}
	g.qps = append(g.qps, qp)
	qp.mcgs = append(qp.mcgs, mgid)
	d.mcAttached++
	if g.perShard[qp.sh.idx]++; g.perShard[qp.sh.idx] == 1 {
		d.publishMcastLocked()
	}
	return nil
}

// DetachMcast detaches the QP from the group mgid (ibv_detach_mcast,
// rxe_detach_mcast): ErrInvalid when the QP is not attached to it. The last
// member gone, the link stops taking the group's frames (dev_mc_del). No
// frame reaches the QP from the group once it returns.
func (qp *QP) DetachMcast(mgid netdev.GID) error {
	if err := qp.checkMcastArgs(mgid); err != nil {
		return err
	}
	d := qp.d
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	if !slices.Contains(qp.mcgs, mgid) {
		return errorf(ErrInvalid, "QP %#x is not attached to %v", qp.qpn, mgid)
	}
	d.dropMemberLocked(qp, mgid)
	return qp.sh.exec(func(e *engine) error {
		e.forgetMcast(qp, mgid)
		return nil
	}).Wait()
}

// dropMemberLocked takes qp out of group mgid's record and the snapshot; the
// engine's list is the caller's. d.mcMu held.
func (d *Device) dropMemberLocked(qp *QP, mgid netdev.GID) {
	g := d.mcgs[mgid]
	g.qps = slices.DeleteFunc(g.qps, func(q *QP) bool { return q == qp })
	qp.mcgs = slices.DeleteFunc(qp.mcgs, func(m netdev.GID) bool { return m == mgid })
	d.mcAttached--
	g.perShard[qp.sh.idx]--
	if len(g.qps) == 0 {
		delete(d.mcgs, mgid)
		d.linkMcast(mgid, false) // rxe_cleanup_mcg's rxe_mcast_del: its error is only logged
	}
	if g.perShard[qp.sh.idx] == 0 {
		d.publishMcastLocked()
	}
}

// dropAllMcast detaches a QP being destroyed from its groups, as uverbs does
// for the QPs of a process that goes (ib_uverbs_detach_umcast), and keeps it
// from attaching again. Its engine forgets it in destroyQP.
func (qp *QP) dropAllMcast() {
	d := qp.d
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	qp.mcDead = true
	for len(qp.mcgs) > 0 {
		d.dropMemberLocked(qp, qp.mcgs[0])
	}
}

// linkMcast asks the link for a group's frames, or tells it it needs them no
// more (link.Multicaster); links without a filter need nothing.
func (d *Device) linkMcast(mgid netdev.GID, join bool) error {
	m, ok := d.sh[0].link.(link.Multicaster)
	if !ok {
		return nil
	}
	ip := mgid.Addr()
	if join {
		if err := m.JoinGroup(ip); err != nil {
			if errors.Is(err, ErrUnsupported) { // the link cannot (UDP)
				return errorf(ErrUnsupported, "link %s: join %v: %v", d.info.Name, ip, err)
			}
			return errorf(ErrInvalid, "link %s: join %v: %v", d.info.Name, ip, err)
		}
		return nil
	}
	if err := m.LeaveGroup(ip); err != nil {
		d.cfg.Logf("engine: link %s: leave %v: %v", d.info.Name, ip, err)
	}
	return nil
}

// forgetMcast takes qp out of the engine's list of group mgid.
func (e *engine) forgetMcast(qp *QP, mgid netdev.GID) {
	l := slices.DeleteFunc(e.mcg[mgid], func(q *QP) bool { return q == qp })
	if len(l) == 0 {
		delete(e.mcg, mgid)
		return
	}
	e.mcg[mgid] = l
}

// forgetMcastAll takes a destroyed qp out of every list of the engine.
func (e *engine) forgetMcastAll(qp *QP) {
	for mgid := range e.mcg {
		e.forgetMcast(qp, mgid)
	}
}

// pktDGID returns p's destination address as a GID (rxe_rcv_mcast_pkt's
// ipv6_addr_set_v4mapped for IPv4).
func pktDGID(p *wire.Packet) (g netdev.GID) {
	if p.IPv6 != nil {
		copy(g[:], p.IPv6[24:40])
		return g
	}
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], p.IPv4[16:20])
	return g
}

// rcvMcast takes a packet to the multicast QPN, its ICRC checked
// (rxe_rcv_mcast_pkt). One from the link is counted here, once (rxe_rcv
// counts rcvd_pkts before the fan-out), and a copy handed to every other
// shard with members of its group; one handed over (handed) goes to this
// shard's members only. A group
// without members, or a destination that is no group, has no QP to take the
// packet: rcvd_unknown_qp, as a unicast QPN without a QP (rxe drops it
// uncounted). Each member makes its own checks (check_type_state,
// check_keys: a wrong Q_Key counts rcvd_bad_qkey and skips that QP only)
// and takes a receive WQE of its own.
func (e *engine) rcvMcast(b []byte, handed bool) {
	p := &e.pkt
	c := &e.d.cnt
	mgid := pktDGID(p)
	if !handed {
		c.inc(CntRcvdPkts)
		mask := e.d.mcastMask(mgid)
		if mask == 0 {
			c.inc(CntRcvdUnknownQP)
			return
		}
		self := uint64(1) << e.sh.idx
		for m := mask &^ self; m != 0; m &= m - 1 {
			e.handOver(e.d.sh[bits.TrailingZeros64(m)], b)
		}
		if mask&self == 0 {
			return
		}
	}
	in := &wire.Opcodes[p.Opcode]
	for _, qp := range e.mcg[mgid] {
		if !e.checkQP(qp, p, in.Mask) {
			continue
		}
		if qp.state == qpattr.RTR && !qp.commEst {
			qp.commEst = true
			e.d.evq.post(AsyncEvent{Type: EventCommEst, QP: qp})
		}
		e.respond(qp, p)
		e.checkError(qp)
	}
}

// loopMcast gives the frame of n bytes being built, to group rt.mgid, to the
// device's own members too, a copy to each shard with members: the kernel's
// IP multicast loop (IP_MULTICAST_LOOP, on by default on rxe's QP sockets)
// gives rxe_rcv a copy of what rxe_send sent to a group the device joined
// (rxe_mcast_add joins it: ip_mc_join_group, ipv6_sock_mc_join). rxe_loopback
// takes none: a group's MAC is not the device's. Counted received once, as
// rxe_rcv counts the looped copy; a full ring holds the copy (hold).
func (e *engine) loopMcast(rt *route, n int) {
	mask := e.d.mcastMask(rt.mgid)
	if mask == 0 {
		return
	}
	e.d.cnt.inc(CntRcvdPkts)
	f := e.tx.next()[:n]
	for m := mask; m != 0; m &= m - 1 {
		e.giveOwn(e.d.sh[bits.TrailingZeros64(m)], f)
	}
}

// mcastRouteParams fills p for a multicast destination: its MAC, with no
// neighbour to resolve (the kernel's arp_mc_map / ndisc_mc_map, which
// ib_resolve_eth_dmac applies to an AH's multicast DGID).
func mcastRouteParams(p *routeParams, dgid netdev.GID) {
	p.dmac = McastMAC(dgid)
	p.mcast = true
	p.mgid = dgid
}

// McastAttached reports whether the QP is attached to a multicast group
// (uverbs refuses a user's destroy of such a QP: uverbs_free_qp).
func (qp *QP) McastAttached() bool {
	qp.d.mcMu.Lock()
	defer qp.d.mcMu.Unlock()
	return len(qp.mcgs) > 0
}
