// The RC requester's congestion window.
//
// Go-back-N (RoCE's only recovery) resends every packet after a loss, and
// rxe's fixed window of 128 unacknowledged PSNs is per QP: with many QPs the
// packets in flight outgrow the receiver's ring (an AF_XDP RX ring here, a
// NIC's buffers elsewhere), every QP loses packets, every retry resends its
// whole window into the same overflow, and retry_cnt runs out (issue 20's 256
// QPs). IBTA leaves the requester free to send less than it may (it only
// bounds what is outstanding: 9.7.7, C9-151); this window shrinks on each
// retry and grows as ACKs come, as TCP's does (RFC 5681). Nothing on the wire
// changes but how much is in flight.
//
// The windows of many QPs still add up past any ring: 256 QPs at the least
// window of 2 are 512 packets, and after each retry they grow again into the
// overflow. So a shard also bounds what its RC QPs to one destination have in
// flight together (maxDestInflight), as rxe bounds each QP's packets in the
// kernel's queues (RXE_INFLIGHT_SKBS_PER_QP_HIGH): a QP past the bound waits
// until ACKs bring the total down, in turn with the others (RFC 3124's
// congestion manager shares one window among the flows to a host). Per
// destination, so that QPs to an address that does not answer hold up only
// the traffic to it; and a QP's PSNs stop counting once no ACK has moved them
// for roomStale, so that QPs no peer answers (a wrong destination QPN, with a
// local ACK timeout of hours) do not hold up the others to a healthy peer.

package engine

import (
	"slices"
	"time"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// maxDestInflight is the most RC request PSNs a shard's QPs to one
// destination have sent and not had acknowledged, together. A receiver's
// AF_XDP ring here holds 2048 frames (1024 of RoCE MTU 4096, two chunks
// each); the bound keeps one sender to half of that, far above the
// bandwidth-delay product of a veth pair (about 60 packets of 4 KiB at 1 GB/s
// and 250 us) and of a real link.
const maxDestInflight = 512

// An AF_XDP receiver's fill ring keeps room for one sender's bound
// (link.FillReserveFrames): the constant overflows, and the build fails, if
// the bound outgrows it.
const _ = uint(link.FillReserveFrames - maxDestInflight)

// roomStale is how long a QP's PSNs count in its destination's room with no
// ACK moving them: after that they no longer hold others back, until an ACK
// comes. A QP's local ACK timeout is its own (up to 4.096 us x 2^31, hours),
// and QPs that are never answered (a destination QPN the peer does not have)
// would otherwise hold another process's traffic to a healthy peer that long.
// perftest's default timeout (14) is 67 ms: such a QP has retried by then.
const roomStale = 100 * time.Millisecond

// destRoom is what a shard's RC QPs to one destination GID have in flight.
// Engine-owned; it lives while a QP to the destination that may send (RTS,
// SQD) has used it.
type destRoom struct {
	gid      netdev.GID
	inflight int32         // the PSNs counted by its QPs
	qps      []*QP         // the QPs that use it
	wait     []*QP         // QPs waiting for inflight to fall, in the order they came
	swept    time.Duration // when sweep last looked for stale QPs
}

// destFull reports whether qp's next PSN would take its destination past
// maxDestInflight; then qp waits in the destination's room until account
// wakes it.
func (e *engine) destFull(qp *QP) bool {
	r := e.roomOf(qp)
	if r.inflight+max(qp.req.psn.Sub(qp.comp.psn), 0)-qp.counted < maxDestInflight {
		return false
	}
	if e.sweep(r) {
		return e.destFull(qp)
	}
	if !qp.roomWait {
		qp.roomWait = true
		r.wait = append(r.wait, qp)
		e.sh.ecnt.inc(EngRoomWaits)
		// Should only QPs that never get an ACK hold the room, no ACK
		// would wake the waiters: the timer sweeps for them.
		e.timers.set(&qp.roomTimer, e.now+roomStale/4)
	}
	return true
}

// roomTimerExpired sweeps qp's room while qp still waits there, and looks
// again later if that freed nothing.
func (e *engine) roomTimerExpired(qp *QP) {
	r := qp.room
	if !qp.roomWait || r == nil {
		return
	}
	e.sweep(r)
	if qp.roomWait { // not scheduled by the sweep
		e.timers.set(&qp.roomTimer, e.now+roomStale/4)
	}
}

// sweep takes out of r the PSNs of its QPs that have had no ACK for
// roomStale, and reports whether it took any. A full room looks at most
// four times per roomStale: sooner, it takes nothing.
func (e *engine) sweep(r *destRoom) bool {
	if e.now-r.swept < roomStale/4 {
		return false
	}
	r.swept = e.now
	took := false
	for _, q := range r.qps {
		if q.counted > 0 && e.now-q.roomSince > roomStale {
			q.roomStale = true
			r.inflight -= q.counted
			q.counted = 0
			took = true
			e.sh.ecnt.inc(EngRoomStale)
		}
	}
	if took {
		e.roomFreed(r)
	}
	return took
}

// roomOf returns qp's destination room, joining it on first use.
func (e *engine) roomOf(qp *QP) *destRoom {
	if qp.room == nil {
		r := e.rooms[qp.av.DGID]
		if r == nil {
			r = &destRoom{gid: qp.av.DGID}
			e.rooms[qp.av.DGID] = r
		}
		r.qps = append(r.qps, qp)
		qp.room = r
		qp.roomAcked = qp.comp.psn
	}
	return qp.room
}

// account brings qp's share of its destination's inflight up to date: its
// PSNs sent and not acknowledged while it may send (none while stale), none
// once it cannot (ERR, RESET, destroyed), when it also leaves the room.
func (e *engine) account(qp *QP) {
	r := qp.room
	if r == nil {
		return // nothing counted, not waiting
	}
	sending := qp.live && qp.typ == qpattr.RC && (qp.state == qpattr.RTS || qp.state == qpattr.SQD)
	var out int32
	if sending {
		out = max(qp.req.psn.Sub(qp.comp.psn), 0)
	}
	if qp.comp.psn != qp.roomAcked || qp.counted == 0 && !qp.roomStale {
		// An ACK moved it, or it starts counting: its clock starts again.
		qp.roomAcked, qp.roomSince, qp.roomStale = qp.comp.psn, e.now, false
	}
	if qp.roomStale {
		out = 0
	}
	if out != qp.counted {
		r.inflight += out - qp.counted
		qp.counted = out
		e.roomFreed(r)
	}
	if !sending { // the engine holds no pointer to a QP that cannot send
		if qp.roomWait {
			r.wait = slices.DeleteFunc(r.wait, func(w *QP) bool { return w == qp })
			qp.roomWait = false
		}
		e.timers.stop(&qp.roomTimer) // roomFreed may have left it to lapse
		r.qps = slices.DeleteFunc(r.qps, func(w *QP) bool { return w == qp })
		qp.room, qp.roomStale = nil, false
		if len(r.qps) == 0 {
			delete(e.rooms, r.gid)
		}
	}
}

// roomFreed schedules the QPs that waited in r once its total has fallen to
// three quarters of the bound.
func (e *engine) roomFreed(r *destRoom) {
	if len(r.wait) == 0 || r.inflight > maxDestInflight*3/4 {
		return
	}
	for i, w := range r.wait {
		w.roomWait = false
		e.timers.lapse(&w.roomTimer) // a QP that can send: its next wait sets it again
		e.schedule(w)
		r.wait[i] = nil
	}
	r.wait = r.wait[:0]
}

// cwndLoss shrinks the window as a retry from acked starts: to half after a
// NAK, which says the rest got through; to minCwnd after a timeout, which
// says nothing did, then doubling per window acknowledged up to half of what
// it was. A NAK for a packet sent before the last shrink is the same
// congestion, seen again while go-back-N resends (RFC 6582's recovery point).
func (r *reqState) cwndLoss(timeout bool, acked wire.PSN) {
	if !timeout && r.recovering && acked.Sub(r.recover) < 0 {
		return
	}
	r.recovering, r.recover = true, r.hiPSN
	r.ssthresh = max(r.cwnd/2, minCwnd)
	r.cwnd = r.ssthresh
	if timeout {
		r.cwnd = minCwnd
	}
	r.cwndAcc = 0
}

// cwndAcked grows the window by n packets newly acknowledged, up to PSN to: by n
// below ssthresh (slow start), by about one packet per window above it
// (congestion avoidance), never past maxUnackedPSNs. An ACK that reaches the
// recovery point ends the recovery (RFC 6582's full acknowledgment); left on,
// the 24-bit compare in cwndLoss would take a new loss 2^23 PSNs later for the
// old one.
func (r *reqState) cwndAcked(n int32, to wire.PSN) {
	if r.recovering && to.Sub(r.recover) >= 0 {
		r.recovering = false
	}
	if r.cwnd >= maxUnackedPSNs || n <= 0 {
		return
	}
	if r.cwnd < r.ssthresh {
		r.cwnd = min(r.cwnd+n, r.ssthresh)
		return
	}
	r.cwndAcc += n
	if r.cwndAcc >= r.cwnd {
		r.cwndAcc -= r.cwnd
		r.cwnd++
	}
}
