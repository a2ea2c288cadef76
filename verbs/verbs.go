// Package verbs is xrnic's libibverbs-shaped Go API: devices, protection domains,
// memory regions, completion queues and channels, queue pairs (RC, UC, UD), shared
// receive queues, address handles, work requests and completions, and asynchronous
// events. It obeys the Linux IB midlayer rules (shared/reference/ib-midlayer-locking.txt,
// MID1-MID10): posting, polling and arming never block and are safe from any
// goroutine; completion and event handlers run on goroutines of their own, never in
// the caller's call chain; devices register with the package and clients are told
// when a device comes and goes.
//
// The objects are the engine's (nic/engine), named here as libibverbs names them.
// Control operations that change a QP (Modify, Destroy) complete asynchronously and
// return an Op to wait on; the ndk layer builds its completions on that.
//
// A minimal RC connection (both ends exchange QPN, PSN, GID, rkey and address out of
// band, as ibv_rc_pingpong does over TCP):
//
//	dev, _ := verbs.Open(verbs.Options{Interface: "veth0"})
//	pd, _ := dev.AllocPD()
//	buf := make([]byte, 1<<20)
//	mr, _ := pd.RegMR(buf, 0, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	cq, _ := dev.CreateCQ(256, verbs.CQOptions{})
//	qp, _ := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: ...})
//	// RESET -> INIT -> RTR -> RTS with qp.ModifySync(&attr, mask), then
//	qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, ...}})
package verbs

import (
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpstate"
)

// The verbs objects. Each states its concurrency contract where it is defined.
type (
	PD          = engine.PD
	MR          = engine.MR
	QP          = engine.QP
	SRQ         = engine.SRQ
	AH          = engine.AH
	AV          = engine.AV
	Op          = engine.Op
	QPAttr      = engine.QPAttr
	QPInitAttr  = engine.QPInitAttr
	SRQAttr     = engine.SRQAttr
	SendWR      = engine.SendWR
	RecvWR      = engine.RecvWR
	SGE         = engine.SGE
	WROpcode    = engine.WROpcode
	SendFlags   = engine.SendFlags
	DeviceAttr  = engine.DeviceAttr
	PortAttr    = engine.PortAttr
	AsyncEvent  = engine.AsyncEvent
	EventType   = engine.EventType
	Counters    = engine.Counters
	CQ          = cq.CQ
	CQOptions   = cq.Options
	CompChannel = cq.Channel
	WC          = cq.WC
	WCStatus    = cq.Status
	WCOpcode    = cq.Opcode
	WCFlags     = cq.Flags
	QPState     = qpstate.State
	QPType      = qpstate.Type
	AttrMask    = qpstate.AttrMask
	MTU         = qpstate.MTU
	QPCap       = qpstate.Cap
	Access      = mr.Access
)

// QP types.
const (
	RC  = qpstate.RC
	UC  = qpstate.UC
	UD  = qpstate.UD
	GSI = qpstate.GSI
)

// Memory access flags (enum ibv_access_flags).
const (
	AccessLocalWrite   = mr.LocalWrite
	AccessRemoteWrite  = mr.RemoteWrite
	AccessRemoteRead   = mr.RemoteRead
	AccessRemoteAtomic = mr.RemoteAtomic
)

// NewCompChannel returns a completion channel (ibv_create_comp_channel).
func NewCompChannel() *CompChannel { return cq.NewChannel() }
