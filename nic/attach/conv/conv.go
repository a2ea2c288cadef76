// Package conv converts between verbs' values and the attach protocol's
// payloads: one mapping for the daemon's side (nic/attach/server) and the
// client's (verbs/remote), so the two cannot drift apart.
package conv

import (
	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// WireAV is av as the protocol carries it (the DMAC stays the daemon's to
// resolve).
func WireAV(av verbs.AV) attach.AV {
	return attach.AV{DGID: av.DGID, SGIDIndex: av.SGIDIndex, FlowLabel: av.FlowLabel,
		HopLimit: av.HopLimit, TrafficClass: av.TrafficClass, Port: av.Port}
}

// VerbsAV is WireAV's inverse.
func VerbsAV(a attach.AV) verbs.AV {
	return verbs.AV{DGID: a.DGID, SGIDIndex: a.SGIDIndex, FlowLabel: a.FlowLabel,
		HopLimit: a.HopLimit, TrafficClass: a.TrafficClass, Port: a.Port}
}

// WireQPAttr is a as the protocol carries it (struct ibv_qp_attr).
func WireQPAttr(a *verbs.QPAttr) attach.QPAttr {
	return attach.QPAttr{QKey: a.QKey, RQPSN: uint32(a.RQPSN), SQPSN: uint32(a.SQPSN),
		DestQPN: a.DestQPN, AccessFlags: a.AccessFlags, MaxSendWR: a.Cap.MaxSendWR,
		MaxRecvWR: a.Cap.MaxRecvWR, MaxSendSGE: a.Cap.MaxSendSGE, MaxRecvSGE: a.Cap.MaxRecvSGE,
		MaxInline: a.Cap.MaxInlineData, PKeyIndex: a.PKeyIndex, State: uint8(a.State),
		CurState: uint8(a.CurState), PathMTU: uint8(a.PathMTU), PathMigState: uint8(a.PathMigState),
		Port: a.Port, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
		MinRNRTimer: a.MinRNRTimer, MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic,
		SQDrainNotify: b2u(a.SQDrainNotify), AV: WireAV(a.AV)}
}

// VerbsQPAttr is WireQPAttr's inverse.
func VerbsQPAttr(r *attach.QPAttr) verbs.QPAttr {
	a := verbs.QPAttr{AV: VerbsAV(r.AV)}
	a.State, a.CurState, a.PathMTU = verbs.QPState(r.State), verbs.QPState(r.CurState), verbs.MTU(r.PathMTU)
	a.PathMigState = verbs.MigState(r.PathMigState)
	a.QKey, a.RQPSN, a.SQPSN, a.DestQPN, a.AccessFlags = r.QKey, verbs.PSN(r.RQPSN), verbs.PSN(r.SQPSN), r.DestQPN, r.AccessFlags
	a.PKeyIndex, a.Port, a.Timeout, a.RetryCnt, a.RNRRetry = r.PKeyIndex, r.Port, r.Timeout, r.RetryCnt, r.RNRRetry
	a.MinRNRTimer, a.MaxRdAtomic, a.MaxDestRdAtomic = r.MinRNRTimer, r.MaxRdAtomic, r.MaxDestRdAtomic
	a.SQDrainNotify = r.SQDrainNotify != 0
	a.Cap = verbs.QPCap{MaxSendWR: r.MaxSendWR, MaxRecvWR: r.MaxRecvWR, MaxSendSGE: r.MaxSendSGE,
		MaxRecvSGE: r.MaxRecvSGE, MaxInlineData: r.MaxInline}
	return a
}

// WireDevice is a device's attributes as QUERY_DEVICE answers them.
func WireDevice(a verbs.DeviceAttr, nodeGUID uint64) attach.DeviceRep {
	return attach.DeviceRep{NodeGUID: nodeGUID, MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
		MaxQP: u32(a.MaxQP), MaxQPWR: u32(a.MaxQPWR), MaxSGE: u32(a.MaxSGE), MaxCQ: u32(a.MaxCQ),
		MaxCQE: u32(a.MaxCQE), MaxMR: u32(a.MaxMR), MaxPD: u32(a.MaxPD), MaxQPRdAtom: u32(a.MaxQPRdAtom),
		MaxQPInitRdAtm: u32(a.MaxQPInitRdAtom), MaxAH: u32(a.MaxAH), MaxSRQ: u32(a.MaxSRQ),
		MaxSRQWR: u32(a.MaxSRQWR), MaxSRQSGE: u32(a.MaxSRQSGE), MaxInline: u32(a.MaxInlineData),
		AtomicCap: uint32(a.AtomicCap), VendorID: rxeVendorID}
}

// rxeVendorID is the vendor_id rxe reports (no OUI of its own), as ndk's
// adapter does: ibv_devinfo shows xrnic as it shows rxe.
const rxeVendorID = 0xffffff

// VerbsDevice is WireDevice's inverse, for what the protocol carries (one
// port; the read SGE limit is the SGE limit).
func VerbsDevice(r attach.DeviceRep) verbs.DeviceAttr {
	return verbs.DeviceAttr{MaxMRSize: r.MaxMRSize, PageSizeCap: r.PageSizeCap, MaxQP: int(r.MaxQP),
		MaxQPWR: int(r.MaxQPWR), MaxSGE: int(r.MaxSGE), MaxSGERd: int(r.MaxSGE), MaxCQ: int(r.MaxCQ),
		MaxCQE: int(r.MaxCQE), MaxMR: int(r.MaxMR), MaxPD: int(r.MaxPD), MaxQPRdAtom: int(r.MaxQPRdAtom),
		MaxQPInitRdAtom: int(r.MaxQPInitRdAtm), MaxSRQ: int(r.MaxSRQ), MaxSRQWR: int(r.MaxSRQWR),
		MaxSRQSGE: int(r.MaxSRQSGE), MaxAH: int(r.MaxAH), MaxInlineData: int(r.MaxInline), PhysPortCnt: 1,
		AtomicCap: verbs.AtomicCap(r.AtomicCap)}
}

// WirePort is a port's attributes as QUERY_PORT answers them.
func WirePort(a verbs.PortAttr) attach.PortRep {
	return attach.PortRep{State: uint32(a.State), MaxMTU: uint32(a.MaxMTU), ActiveMTU: uint32(a.ActiveMTU),
		GIDTblLen: uint32(a.GIDTblLen), MaxMsgSize: a.MaxMsgSize, ActiveWidth: uint8(a.ActiveWidth),
		ActiveSpeed: uint8(a.ActiveSpeed)}
}

// VerbsPort is WirePort's inverse: a RoCE port with one P_Key.
func VerbsPort(r attach.PortRep) verbs.PortAttr {
	return verbs.PortAttr{State: verbs.PortState(r.State), MaxMTU: verbs.MTU(r.MaxMTU), ActiveMTU: verbs.MTU(r.ActiveMTU),
		GIDTblLen: int(r.GIDTblLen), PKeyTblLen: 1, MaxMsgSize: r.MaxMsgSize, LinkLayer: "Ethernet",
		PortCapRoCE: true, ActiveWidth: verbs.PortWidth(r.ActiveWidth),
		ActiveSpeed: verbs.PortSpeed(r.ActiveSpeed)}
}

func u32(n int) uint32 { return uint32(max(n, 0)) }

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// WireConnParam is p as the protocol carries it (struct rdma_conn_param). It
// fails with rdmacm.ErrPrivate, the rest converted and the private data cut,
// when p's private data do not fit.
func WireConnParam(p rdmacm.ConnParam) (attach.CMParam, error) {
	c := attach.CMParam{QPN: p.QPN, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		FlowControl: b2u(p.FlowControl), RetryCount: p.RetryCount, RNRRetryCount: p.RNRRetryCount, SRQ: b2u(p.SRQ)}
	c.PrivLen = uint32(copy(c.Private[:], p.PrivateData))
	if len(p.PrivateData) > len(c.Private) {
		return c, rdmacm.ErrPrivate
	}
	return c, nil
}

// VerbsConnParam is WireConnParam's inverse, its private data a copy. ok is
// false when the length the other side wrote exceeds the field (the private
// data are then cut to it).
func VerbsConnParam(c *attach.CMParam) (p rdmacm.ConnParam, ok bool) {
	n := min(c.PrivLen, uint32(len(c.Private)))
	return rdmacm.ConnParam{PrivateData: append([]byte(nil), c.Private[:n]...),
		ResponderResources: c.ResponderResources, InitiatorDepth: c.InitiatorDepth, FlowControl: c.FlowControl != 0,
		RetryCount: c.RetryCount, RNRRetryCount: c.RNRRetryCount, SRQ: c.SRQ != 0, QPN: c.QPN}, n == c.PrivLen
}
