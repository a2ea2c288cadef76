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

package engine

import "github.com/xrnic/xrnic/nic/wire"

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
