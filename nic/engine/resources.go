// Read-only snapshots of a device's objects, for introspection in the manner of
// `rdma resource show qp|cq|mr` (the daemon's control socket and metrics).

package engine

import (
	"cmp"
	"runtime"
	"slices"
	"sync"
	"weak"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpstate"
	"github.com/xrnic/xrnic/nic/wire"
)

// QPInfo is one QP as `rdma resource show qp` shows it. A plain value.
type QPInfo struct {
	QPN     uint32
	Type    qpstate.Type
	State   qpstate.State
	DestQPN uint32   // the connected peer's QPN (RC, UC)
	SQPSN   wire.PSN // PSN of the next request packet the requester sends
	RQPSN   wire.PSN // PSN the responder expects next (ePSN)
	PathMTU int      // bytes; 0 before RTR
	PD      uint32   // PD handle (pdn)
	SendCQ  uint32   // CQNs (CQInfo.CQN)
	RecvCQ  uint32
	SRQ     bool       // receives come from a shared receive queue
	DGID    netdev.GID // the peer's GID (connected QPs after RTR)
	// Ring occupancy: send WRs posted and not yet completed, receive WRs posted
	// and not yet consumed, against the QP's capacities.
	SQOutstanding, SQCap int
	RQPosted, RQCap      int
}

// CQInfo is one completion queue, as `rdma resource show cq` shows it. A plain
// value.
type CQInfo struct {
	CQN    uint32 // a number the snapshots give the CQ for as long as it lives
	CQE    int    // capacity
	Queued int    // completions waiting to be polled
	Users  int    // QPs of the snapshot that post to it
	Stats  cq.Stats
}

// MRInfo is one memory region, as `rdma resource show mr` shows it. A plain
// value.
type MRInfo struct {
	LKey, RKey uint32
	Addr       uint64 // IOVA of the first byte
	Len        int    // bytes; 0 for a fast-reg region not yet bound
	Access     mr.Access
	PD         uint32 // PD handle (pdn)
	FastReg    bool   // from AllocFastRegMR
	Valid      bool   // its keys work now (false for a fast-reg region unbound or invalidated)
}

// MRN is the region's number, the index in its keys (rxe's mrn).
func (m MRInfo) MRN() uint32 { return m.LKey >> mr.KeyIndexShift }

// Resources is a snapshot of a device's objects. The engine keeps QPs in a table,
// so QPs are listed one by one, and memory regions live in the device's mr.Table,
// so they are listed too; CQs are not registered with the device (any cq.CQ works
// with it), so the CQs listed are those the listed QPs use; protection domains,
// SRQs and AHs are counted, not listed, because the device keeps only their
// number. A plain value.
type Resources struct {
	QPs  []QPInfo // by QPN
	CQs  []CQInfo // by CQN
	MRs  []MRInfo // by MRN
	PDs  int
	SRQs int
	AHs  int
}

// Resources returns a snapshot of the device's objects. The QPs' transport state
// is read on the engine goroutine, so the call waits for one pass of its loop; it
// fails with ErrClosed once the device is closed. Safe from any goroutine but the
// device's event handler (it would wait for the engine while the engine may wait
// for the handler).
func (d *Device) Resources() (Resources, error) {
	var r Resources
	var cqs []*cq.CQ
	err := d.exec(func(e *engine) error {
		r.QPs = make([]QPInfo, 0, len(e.qps))
		for _, qp := range e.qps {
			if !qp.live {
				continue
			}
			r.QPs = append(r.QPs, qp.infoLocked())
			cqs = append(cqs, qp.scq, qp.rcq)
		}
		return nil
	}).Wait()
	if err != nil {
		return Resources{}, err
	}
	// The CQs' own locks are taken here, off the engine goroutine.
	users := map[*cq.CQ]int{}
	for i := range r.QPs {
		s, rc := cqs[2*i], cqs[2*i+1]
		r.QPs[i].SendCQ = cqNumber(s)
		r.QPs[i].RecvCQ = cqNumber(rc)
		users[s]++
		if rc != s {
			users[rc]++
		}
	}
	for c, n := range users {
		r.CQs = append(r.CQs, CQInfo{CQN: cqNumber(c), CQE: c.Cqe(), Queued: c.Len(), Users: n, Stats: c.Stats()})
	}
	slices.SortFunc(r.QPs, func(a, b QPInfo) int { return cmp.Compare(a.QPN, b.QPN) })
	slices.SortFunc(r.CQs, func(a, b CQInfo) int { return cmp.Compare(a.CQN, b.CQN) })
	d.mu.Lock()
	r.PDs, r.SRQs, r.AHs = d.npd, d.nsrq, d.nah
	d.mu.Unlock()
	// The table's mutex keeps each region's registration still while it is read.
	for m := range d.mrs.Regions {
		r.MRs = append(r.MRs, MRInfo{LKey: m.LKey(), RKey: m.RKey(), Addr: m.Addr(), Len: m.Len(),
			Access: m.Access(), PD: m.PD(), FastReg: m.FastReg(), Valid: m.Valid()})
	}
	return r, nil
}

// infoLocked reads the QP's state; the caller is the engine goroutine.
func (qp *QP) infoLocked() QPInfo {
	i := QPInfo{
		QPN: qp.qpn, Type: qp.typ, State: qp.state, DestQPN: qp.attr.DestQPN,
		SQPSN: qp.req.psn, RQPSN: qp.resp.psn, PD: qp.pd.handle, SRQ: qp.srq != nil,
		DGID:          qp.av.DGID,
		SQOutstanding: int(qp.sq.count()), SQCap: int(qp.sq.cap),
	}
	if qp.state != qpstate.Reset && qp.state != qpstate.Init {
		i.PathMTU = qp.mtu
	}
	if qp.srq == nil {
		i.RQPosted, i.RQCap = int(qp.rq.count()), int(qp.rq.cap)
	}
	return i
}

// CQ numbers: handed out in order the first time a snapshot meets a CQ, and
// forgotten when the CQ is garbage collected. The map holds weak pointers, so
// naming a CQ never keeps it alive.
var cqNums struct {
	mu   sync.Mutex
	m    map[weak.Pointer[cq.CQ]]uint32
	next uint32
}

func cqNumber(c *cq.CQ) uint32 {
	if c == nil {
		return 0
	}
	wp := weak.Make(c)
	cqNums.mu.Lock()
	defer cqNums.mu.Unlock()
	if n, ok := cqNums.m[wp]; ok {
		return n
	}
	if cqNums.m == nil {
		cqNums.m = make(map[weak.Pointer[cq.CQ]]uint32)
	}
	cqNums.next++
	n := cqNums.next
	cqNums.m[wp] = n
	runtime.AddCleanup(c, func(wp weak.Pointer[cq.CQ]) {
		cqNums.mu.Lock()
		delete(cqNums.m, wp)
		cqNums.mu.Unlock()
	}, wp)
	return n
}
