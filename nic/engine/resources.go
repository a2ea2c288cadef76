// Read-only snapshots of a device's objects, for introspection in the manner of
// `rdma resource show qp|cq|mr` (the daemon's control socket and metrics).

package engine

import (
	"cmp"
	"slices"
	"sync"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// QPInfo is one QP as `rdma resource show qp` shows it. A plain value.
type QPInfo struct {
	QPN     uint32
	Type    qpattr.Type
	State   qpattr.State
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
	CQN    uint32 // the CQ's number (cqn), given at creation
	CQE    int    // capacity
	Queued int    // completions waiting to be polled
	Users  int    // QPs that post to it
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

// Resources is a snapshot of a device's objects: QPs, CQs and memory regions are
// listed; protection domains, SRQs and AHs are counted, not listed, because the
// device keeps only their number. A plain value.
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
	var mu sync.Mutex // the engines of several queues append at once
	err := d.execAll(func(e *engine) error {
		mu.Lock()
		defer mu.Unlock()
		e.qps.all(func(qp *QP) {
			if qp.live {
				r.QPs = append(r.QPs, qp.engineInfo())
			}
		})
		return nil
	}).Wait()
	if err != nil {
		return Resources{}, err
	}
	// The CQs' own locks are taken here, off the engine goroutine.
	d.mu.Lock()
	for c := range d.cqs {
		r.CQs = append(r.CQs, CQInfo{CQN: c.cqn, CQE: c.Cqe(), Queued: c.Len(), Users: c.n.live(), Stats: c.Stats()})
	}
	d.mu.Unlock()
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

// engineInfo reads the QP's state; the caller is the engine goroutine.
func (qp *QP) engineInfo() QPInfo {
	i := QPInfo{
		QPN: qp.qpn, Type: qp.typ, State: qp.state, DestQPN: qp.attr.DestQPN,
		SQPSN: qp.req.psn, RQPSN: qp.resp.psn, PD: qp.pd.handle, SRQ: qp.srq != nil,
		SendCQ: qp.scq.cqn, RecvCQ: qp.rcq.cqn,
		DGID:          qp.av.DGID,
		SQOutstanding: int(qp.sendQ.count()), SQCap: int(qp.sendQ.cap),
	}
	if qp.state != qpattr.Reset && qp.state != qpattr.Init {
		i.PathMTU = qp.mtu
	}
	if qp.srq == nil {
		i.RQPosted, i.RQCap = int(qp.recvQ.count()), int(qp.recvQ.cap)
	}
	return i
}
