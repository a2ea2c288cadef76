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
// overflow. So a shard also bounds what all its RC QPs have in flight
// together (maxShardInflight), as rxe bounds each QP's packets in the
// kernel's queues (RXE_INFLIGHT_SKBS_PER_QP_HIGH): a QP past the bound waits
// until ACKs bring the total down, in turn with the others (RFC 3124's
// congestion manager shares one window among the flows to a host, in the
// same spirit).

package engine

import (
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// maxShardInflight is the most RC request PSNs a shard's QPs have sent and
// not had acknowledged, together. A receiver's AF_XDP ring here holds 2048
// frames (1024 of RoCE MTU 4096, two chunks each); the bound keeps one sender
// to half of that, far above the bandwidth-delay product of a veth pair (about
// 60 packets of 4 KiB at 1 GB/s and 250 us) and of a real link.
const maxShardInflight = 512

// shardFull reports whether qp's next PSN would take the shard past
// maxShardInflight; then qp waits in roomWait until account wakes it.
func (e *engine) shardFull(qp *QP) bool {
	if e.inflight+max(qp.req.psn.Sub(qp.comp.psn), 0)-qp.counted < maxShardInflight {
		return false
	}
	if !qp.roomWait {
		qp.roomWait = true
		e.roomWait = append(e.roomWait, qp)
		e.sh.ecnt.inc(EngRoomWaits)
	}
	return true
}

// account brings qp's share of the shard's inflight up to date: its PSNs sent
// and not acknowledged while it may send, none once it cannot (ERR, RESET,
// destroyed). Once the total falls to three quarters of the bound, the QPs
// that waited are scheduled again, in the order they came.
func (e *engine) account(qp *QP) {
	var out int32
	if qp.live && qp.typ == qpattr.RC && (qp.state == qpattr.RTS || qp.state == qpattr.SQD) {
		out = max(qp.req.psn.Sub(qp.comp.psn), 0)
	}
	if out == qp.counted {
		return
	}
	e.inflight += out - qp.counted
	qp.counted = out
	if len(e.roomWait) > 0 && e.inflight <= maxShardInflight*3/4 {
		for i, w := range e.roomWait {
			w.roomWait = false
			e.schedule(w)
			e.roomWait[i] = nil
		}
		e.roomWait = e.roomWait[:0]
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
