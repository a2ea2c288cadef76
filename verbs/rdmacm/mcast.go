// Multicast: rdma_join_multicast and rdma_leave_multicast on RoCE
// (cma_join_multicast, cma_iboe_join_multicast). The kernel's part joins the
// group and reports MULTICAST_JOIN with the group's UD parameters; librdmacm's
// part, as it takes that event (ucma_process_join), attaches the ID's QP, and
// detaches it when the consumer leaves (rdma_leave_multicast). Both are done
// here; on an attached device the join is the daemon's ID's.

package rdmacm

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/verbs"
)

// McastQPN is a multicast UD parameter's QPN (IB_MULTICAST_QPN).
const McastQPN = 0xFFFFFF

// MaxJoins bounds an ID's joins. The kernel's are bounded by its memory; a
// daemon's process must not grow the daemon's without end. A device has
// no more groups (RXE_MAX_MCAST_GRP).
const MaxJoins = 8192

// ErrNotJoined is LeaveMulticast of an address the ID did not join
// (librdmacm's rdma_leave_multicast: EADDRNOTAVAIL).
var ErrNotJoined = fmt.Errorf("rdmacm: not joined to that group: %w (%w)", errs.ErrNotFound, syscall.EADDRNOTAVAIL)

// mcJoin is one join of the ID's (struct cma_multicast).
type mcJoin struct {
	addr     netip.Addr
	ctx      any
	uid      uint32 // the daemon's join: its events name it
	mgid     verbs.GID
	attached bool // the ID's QP is attached (ucma_process_join)
}

// mcastGID is the MGID of a group address on RoCEv2 (cma_iboe_set_mgid):
// IPv4-mapped. The unspecified address fails first, as
// cma_iboe_join_multicast's cma_zero_addr (-EINVAL); IPv6 groups then as it
// fails them on RoCEv2 (-ENOTSUPP).
func mcastGID(a netip.Addr) (verbs.GID, error) {
	a = a.Unmap()
	if !a.IsValid() || a.IsUnspecified() {
		return verbs.GID{}, fmt.Errorf("rdmacm: multicast group %v (cma_iboe_join_multicast): %w", a, errs.ErrInvalid)
	}
	if !a.Is4() {
		return verbs.GID{}, fmt.Errorf("rdmacm: IPv6 multicast on RoCEv2 (cma_iboe_join_multicast): %w", errs.ErrUnsupported)
	}
	return verbs.GIDFromAddr(a), nil
}

// mcastUD is a join's UD parameters (cma_make_mc_event,
// ib_init_ah_from_mcmember): the group's GID from the ID's source GID, hop
// limit 64 (IPV6_DEFAULT_HOPLIMIT for RoCEv2 over IPv4), QPN 0xFFFFFF and the
// Q_Key of the UDP port space (cma_set_default_qkey).
func (id *ID) mcastUD(mgid verbs.GID) UDParam {
	return UDParam{AV: verbs.AV{DGID: mgid, SGIDIndex: id.sgid, HopLimit: 64, Port: 1}, QPN: McastQPN, QKey: UDPQKey}
}

// JoinMulticast joins the multicast group addr (rdma_join_multicast): the ID
// must be bound to a device (ADDR_BOUND or ADDR_RESOLVED, else ErrState, as
// EINVAL) and of the UDP port space (ErrInvalid). MULTICAST_JOIN follows,
// with the group's UD parameters and context in Event.Context; GetEvent
// attaches the ID's QP to the group as it returns the event, which becomes
// MULTICAST_ERROR (status -1) if the attach fails (ucma_process_join).
func (id *ID) JoinMulticast(addr netip.Addr, context any) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil || id.st != stAddrBound && id.st != stAddrResolved {
		return ErrState
	}
	if id.ps != PSUDP {
		return fmt.Errorf("rdmacm: multicast on a %v QP: %w", id.qpType(), errs.ErrInvalid)
	}
	mgid, err := mcastGID(addr)
	if err != nil {
		return err
	}
	if len(id.mcs) >= MaxJoins {
		return fmt.Errorf("rdmacm: %d joins: %w", len(id.mcs), errs.ErrLimit)
	}
	mc := &mcJoin{addr: addr.Unmap(), ctx: context, mgid: mgid}
	if id.att != nil {
		id.mcSeq++
		mc.uid = id.mcSeq
		if err := id.att.JoinMulticast(mc.addr, mc.uid); err != nil {
			return err
		}
		id.mcs = append(id.mcs, mc)
		return nil // MULTICAST_JOIN comes from the daemon
	}
	id.mcs = append(id.mcs, mc)
	id.ch.post(&Event{Type: EventMulticastJoin, ID: id, UD: id.mcastUD(mgid), Context: context, mc: mc})
	return nil
}

// LeaveMulticast leaves the group addr (rdma_leave_multicast), its latest
// join: the ID's QP is detached, and the join's events not yet taken
// are discarded (ucma_leave_multicast). ErrNotJoined if the ID did not join
// it.
func (id *ID) LeaveMulticast(addr netip.Addr) error {
	return id.leave(addr.Unmap(), func(*mcJoin) bool { return true })
}

// LeaveMulticastContext is LeaveMulticast of the latest join of addr made
// with context: the daemon leaves the join its client names (by the uid it
// gave JoinMulticast as context), as librdmacm leaves by the join's handle,
// whatever order concurrent joins of one address reached it in.
func (id *ID) LeaveMulticastContext(addr netip.Addr, context any) error {
	return id.leave(addr.Unmap(), func(mc *mcJoin) bool { return mc.ctx == context })
}

// leave leaves the latest join of addr that match accepts.
func (id *ID) leave(addr netip.Addr, match func(*mcJoin) bool) error {
	id.mu.Lock()
	// The latest, as librdmacm's list (newest first) finds.
	i := len(id.mcs) - 1
	for i >= 0 && (id.mcs[i].addr != addr || !match(id.mcs[i])) {
		i--
	}
	if i < 0 {
		id.mu.Unlock()
		return ErrNotJoined
	}
	mc := id.mcs[i]
	id.mcs = slices.Delete(id.mcs, i, i+1)
	if mc.attached && id.qp != nil {
		// librdmacm ignores the detach's error.
		_ = id.qp.DetachMcast(mc.mgid, 0)
		mc.attached = false
	}
	ch, att := id.ch, id.att
	id.mu.Unlock()
	ch.drop(func(ev *Event) bool { return ev.mc == mc })
	if att != nil {
		return att.LeaveMulticast(addr, mc.uid)
	}
	return nil
}

// processJoin is librdmacm's ucma_process_join, in GetEvent's caller: the
// ID's QP joins the group; if it cannot, the event is MULTICAST_ERROR with
// status -1.
func (id *ID) processJoin(ev *Event) {
	mc := ev.mc
	ev.mc = nil
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp == nil || !slices.Contains(id.mcs, mc) {
		return
	}
	if err := id.qp.AttachMcast(mc.mgid, 0); err != nil {
		ev.Type, ev.Status = EventMulticastError, -1
		return
	}
	mc.attached = true
}

// drop discards the queued events that match.
func (ch *EventChannel) drop(match func(*Event) bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	q := ch.q[:0]
	for _, ev := range ch.q {
		if !match(ev) {
			q = append(q, ev)
		}
	}
	clear(ch.q[len(q):])
	ch.q = q
}

// mcastEvent is an attached ID's MULTICAST_JOIN or MULTICAST_ERROR from the
// daemon: the join it names, nil once left. id.mu held.
func (id *ID) mcastEvent(ev AttachedEvent) *Event {
	i := slices.IndexFunc(id.mcs, func(m *mcJoin) bool { return m.uid == ev.MC })
	if i < 0 {
		return nil
	}
	mc := id.mcs[i]
	out := &Event{Type: ev.Type, ID: id, Status: ev.Status, UD: ev.UD, Context: mc.ctx}
	if ev.Type == EventMulticastJoin {
		mc.mgid = ev.UD.AV.DGID
		out.mc = mc
	}
	return out
}
