// The introspection tables, in the manner of iproute2's rdma tool: one line per
// object, "key value" pairs.

package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/verbs"
)

// formatStatistic is `rdma statistic`: the port's counters on one line; details
// add the link's, the XDP program's and the engine loop's counters and the bench
// sessions.
func formatStatistic(w io.Writer, s *snapshot, details bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "link %s/%d", s.Device, s.Port)
	for _, c := range s.Counters {
		fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
	}
	b.WriteString("\n")
	if details {
		ls := s.LinkStats
		fmt.Fprintf(&b, "    netdev %s link %s", s.Interface, s.Link)
		if s.XDPMode != "" {
			fmt.Fprintf(&b, " xdp-mode %s", s.XDPMode)
		}
		fmt.Fprintf(&b, " state %s", s.PortState)
		if s.Width != "" {
			// ibv_devinfo's "10.0 Gbps" as one word.
			fmt.Fprintf(&b, " width %s speed %s", s.Width, strings.ReplaceAll(s.Speed, " ", ""))
		}
		if s.Link != "af_xdp" {
			// The AF_XDP link counts no frames of its own: the XDP program and
			// the engine do.
			fmt.Fprintf(&b, " rx_frames %d rx_bytes %d tx_frames %d tx_bytes %d", ls.RxFrames, ls.RxBytes, ls.TxFrames, ls.TxBytes)
		}
		fmt.Fprintf(&b, " rx_dropped %d tx_dropped %d tx_errors %d\n", ls.RxDropped, ls.TxDropped, ls.TxErrors)
		if x := s.XDP; x != nil {
			fmt.Fprintf(&b, "    xdp seen %d redirected %d passed %d malformed %d unsteered %d\n", x.Seen, x.Redirected, x.Passed, x.Malformed, x.Unsteered)
		}
		if len(s.Engine) > 0 {
			// Not rxe counters: the engine goroutine's own, without their prefix.
			b.WriteString("    engine")
			for _, c := range s.Engine {
				fmt.Fprintf(&b, " %s %d", strings.TrimPrefix(c.Name, "engine_"), c.Value)
			}
			b.WriteString("\n")
		}
		if len(s.Queues) > 0 {
			b.WriteString("    queues rx_frames") // each queue's engine's, by queue
			for _, q := range s.Queues {
				fmt.Fprintf(&b, " %s %d", q.Name, q.Value)
			}
			b.WriteString("\n")
		}
		if len(s.CM) > 0 {
			b.WriteString("    cm") // ib_cm's counters (sysfs infiniband_cm), and its drops
			for _, c := range s.CM {
				fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "    bench sessions %d ended-ok %d ended-failed %d\n", len(s.Sessions), s.Ended[0], s.Ended[1])
	}
	io.WriteString(w, b.String())
}

// formatResources is `rdma resource show`: the objects counted.
func formatResources(w io.Writer, s *snapshot) {
	r := &s.Resources
	fmt.Fprintf(w, "0: %s: pd %d cq %d qp %d mr %d srq %d ah %d sessions %d attached %d\n",
		s.Device, r.PDs, len(r.CQs), len(r.QPs), len(r.MRs), r.SRQs, r.AHs, len(s.Sessions), len(s.Attached))
}

// owner is who made an object: a bench session of the daemon's, or an
// attached process.
type owner struct {
	bench    *sessionInfo
	attached *server.SessionInfo
}

// owners maps QPNs, CQNs, PD handles and cm-idns to their owners.
type owners struct {
	qp map[uint32]owner
	cq map[uint32]owner
	pd map[uint32]owner
	cm map[uint32]owner
}

func ownersOf(s *snapshot) owners {
	o := owners{qp: map[uint32]owner{}, cq: map[uint32]owner{}, pd: map[uint32]owner{}, cm: map[uint32]owner{}}
	for i := range s.Sessions {
		for _, q := range s.Sessions[i].QPNs {
			o.qp[q] = owner{bench: &s.Sessions[i]}
		}
	}
	for i := range s.Attached {
		for _, q := range s.Attached[i].QPNs {
			o.qp[q] = owner{attached: &s.Attached[i]}
		}
		for _, n := range s.Attached[i].CMIDs {
			o.cm[n] = owner{attached: &s.Attached[i]}
		}
	}
	for _, q := range s.Resources.QPs {
		if ow, ok := o.qp[q.QPN]; ok {
			o.cq[q.SendCQ] = ow
			o.cq[q.RecvCQ] = ow
			o.pd[q.PD] = ow
		}
	}
	return o
}

// comm ends a line: the process (the attached one, or the daemon), and the
// bench session when there is one.
func comm(b *strings.Builder, s *snapshot, ow owner) {
	if a := ow.attached; a != nil {
		fmt.Fprintf(b, " pid %d comm %s\n", a.PID, a.Comm)
		return
	}
	fmt.Fprintf(b, " pid %d comm %s", s.PID, s.Comm)
	if ss := ow.bench; ss != nil {
		fmt.Fprintf(b, " session %d peer %s", ss.ID, ss.Peer)
	}
	b.WriteString("\n")
}

// formatQPs is `rdma resource show qp`, with the rings' occupancy.
func formatQPs(w io.Writer, s *snapshot) {
	o := ownersOf(s)
	var b strings.Builder
	for _, q := range s.Resources.QPs {
		connected := q.Type == verbs.RC || q.Type == verbs.UC
		fmt.Fprintf(&b, "link %s/%d lqpn %d", s.Device, s.Port, q.QPN)
		if connected && q.State != verbs.QPSReset && q.State != verbs.QPSInit {
			fmt.Fprintf(&b, " rqpn %d", q.DestQPN)
		}
		fmt.Fprintf(&b, " type %s state %s", q.Type, q.State)
		if connected {
			fmt.Fprintf(&b, " rq-psn %#x", uint32(q.RQPSN))
		}
		fmt.Fprintf(&b, " sq-psn %#x", uint32(q.SQPSN))
		if q.PathMTU > 0 {
			fmt.Fprintf(&b, " path-mtu %d", q.PathMTU)
		}
		fmt.Fprintf(&b, " pdn %d sq %d/%d", q.PD, q.SQOutstanding, q.SQCap)
		if q.SRQ {
			b.WriteString(" rq srq")
		} else {
			fmt.Fprintf(&b, " rq %d/%d", q.RQPosted, q.RQCap)
		}
		comm(&b, s, o.qp[q.QPN])
	}
	io.WriteString(w, b.String())
}

// formatCMIDs is `rdma resource show cm_id`: the device's RDMA CM IDs, each
// with its process (an attached one's, or the daemon's).
func formatCMIDs(w io.Writer, s *snapshot) {
	o := ownersOf(s)
	var b strings.Builder
	for _, c := range s.CMIDs {
		pid, cmd := s.PID, s.Comm
		if a := o.cm[c.N].attached; a != nil {
			pid, cmd = a.PID, a.Comm
		}
		fmt.Fprintf(&b, "link %s/%d cm-idn %d", s.Device, s.Port, c.N)
		if c.HasQP {
			fmt.Fprintf(&b, " lqpn %d qp-type %s", c.QPN, c.QPType)
		}
		fmt.Fprintf(&b, " state %s ps %s pid %d comm %s", c.State, c.PS, pid, cmd)
		if c.Src.IsValid() {
			fmt.Fprintf(&b, " src-addr %s:%d", c.Src.Addr(), c.Src.Port())
		}
		if c.Dst.IsValid() {
			fmt.Fprintf(&b, " dst-addr %s:%d", c.Dst.Addr(), c.Dst.Port())
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}

// formatCQs is `rdma resource show cq`, with the CQs' counters.
func formatCQs(w io.Writer, s *snapshot) {
	o := ownersOf(s)
	var b strings.Builder
	for _, c := range s.Resources.CQs {
		fmt.Fprintf(&b, "dev %s cqn %d cqe %d users %d queued %d completions %d polled %d lost %d",
			s.Device, c.CQN, c.CQE, c.Users, c.Queued, c.Stats.Completions, c.Stats.Polled, c.Stats.Lost)
		if c.Stats.Overruns > 0 {
			b.WriteString(" overflowed")
		}
		comm(&b, s, o.cq[c.CQN])
	}
	io.WriteString(w, b.String())
}

// formatMRs is `rdma resource show mr`, with the keys, IOVA and access flags
// that `rdma resource show mr -d` would add. A fast-reg region is marked, and so
// is one whose keys do not work now (unbound or invalidated).
func formatMRs(w io.Writer, s *snapshot) {
	o := ownersOf(s)
	var b strings.Builder
	for _, m := range s.Resources.MRs {
		fmt.Fprintf(&b, "dev %s mrn %d mrlen %d lkey %#x rkey %#x iova %#x access %s pdn %d",
			s.Device, m.MRN(), m.Len, m.LKey, m.RKey, m.Addr, m.Access, m.PD)
		if m.FastReg {
			b.WriteString(" fastreg")
		}
		if !m.Valid {
			b.WriteString(" invalid")
		}
		comm(&b, s, o.pd[m.PD])
	}
	io.WriteString(w, b.String())
}
