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
// destination, so that a peer that stops acknowledging (or QPs to an address
// that does not answer, with a long local ACK timeout) holds up only the
// traffic to it, never another peer's or another process's.

package engine

import (
	"slices"

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

// destRoom is what a shard's RC QPs to one destination GID have in flight.
// Engine-owned; it lives while a QP to the destination that may send (RTS,
// SQD) has used it: at most one room per such QP.
type destRoom struct {
	gid      netdev.GID
	inflight int32 // the PSNs counted by its QPs
	holders  int   // its QPs with PSNs counted or waiting
	wait     []*QP // QPs waiting for inflight to fall, in the order they came
}

// destFull reports whether qp's next PSN would take its destination past
// maxDestInflight; then qp waits in the destination's room until account
// wakes it.
func (e *engine) destFull(qp *QP) bool {
	r := e.roomOf(qp)
	if r.inflight+max(qp.req.psn.Sub(qp.comp.psn), 0)-qp.counted < maxDestInflight {
		return false
	}
	if !qp.roomWait {
		qp.roomWait = true
		r.wait = append(r.wait, qp)
		e.sh.ecnt.inc(EngRoomWaits)
	}
	return true
}

// roomOf returns qp's destination room, taking one for it on first use.
func (e *engine) roomOf(qp *QP) *destRoom {
	if qp.room == nil {
		r := e.rooms[qp.av.DGID]
		if r == nil {
			r = &destRoom{gid: qp.av.DGID}
			e.rooms[qp.av.DGID] = r
		}
		r.holders++
		qp.room = r
	}
	return qp.room
}

// account brings qp's share of its destination's inflight up to date: its
// PSNs sent and not acknowledged while it may send, none once it cannot (ERR,
// RESET, destroyed), when it also leaves the room. Once a room's total falls
// to three quarters of the bound, the QPs that waited are scheduled again.
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
	if out != qp.counted {
		r.inflight += out - qp.counted
		qp.counted = out
		if len(r.wait) > 0 && r.inflight <= maxDestInflight*3/4 {
			for i, w := range r.wait {
				w.roomWait = false
				e.schedule(w)
				r.wait[i] = nil
			}
			r.wait = r.wait[:0]
		}
	}
	if !sending { // the engine holds no pointer to a QP that cannot send
		if qp.roomWait {
			r.wait = slices.DeleteFunc(r.wait, func(w *QP) bool { return w == qp })
			qp.roomWait = false
		}
		qp.room = nil
		if r.holders--; r.holders == 0 {
			delete(e.rooms, r.gid)
		}
	}
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

// cwndAcked grows the window by n packets newly acknowledged: by n below
// ssthresh (slow start), by about one packet per window above it (congestion
// avoidance), never past maxUnackedPSNs.
func (r *reqState) cwndAcked(n int32) {
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
