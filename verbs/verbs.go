// Package verbs is xrnic's libibverbs-shaped Go API: devices, protection domains,
// memory regions, completion queues and channels, queue pairs (RC, UC, UD), shared
// receive queues, address handles, work requests and completions, and asynchronous
// events. It obeys the Linux IB midlayer rules (shared/reference/ib-midlayer-locking.txt,
// MID1-MID10): posting, polling and arming never block and are safe from any
// goroutine; completion and event handlers run on goroutines of their own, never in
// the caller's call chain; devices register with the package and clients are told
// when a device comes and goes. A device opened on an interface follows the
// interface's link state with port events (see Device).
//
// The objects are the engine's (nic/engine), named here as libibverbs names them.
// Applications import this package only (and nic/link for link kinds): its types,
// constants and sentinel errors are the whole API.
//
// The control contract: creates return the object at once (they never wait for
// the network: address resolution is asynchronous). Every Modify, Destroy,
// Dealloc, Dereg and Close returns an *Op, complete on return or later, which the
// caller waits for (Wait, Done) or hands a callback (Notify) that runs on the
// device's callback goroutine, never in the caller's call chain. Each object
// knows its parent and its children: Destroy, Dealloc and Dereg answer ErrBusy
// while children live, as libibverbs' EBUSY; Close instead stays pending until the
// last child is gone (NDKPI's close, for ndk). Closing flushes outstanding work
// with WR_FLUSH_ERR, and no event or callback names an object after its close
// completed. A wait that would wait for the calling callback itself fails with
// ErrDeadlock.
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
	"github.com/xrnic/xrnic/nic/qpattr"
)

// The verbs objects. Each states its concurrency contract where it is defined.
type (
	MWType      = mr.WindowType
	FlushType   = engine.FlushType
	FlushLevel  = engine.FlushLevel
	AV          = engine.AV
	Op          = engine.Op
	QPAttr      = engine.QPAttr
	SRQAttr     = engine.SRQAttr
	RecvWR      = engine.RecvWR
	SGE         = engine.SGE
	WROpcode    = engine.WROpcode
	SendFlags   = engine.SendFlags
	DeviceAttr  = engine.DeviceAttr
	PortAttr    = engine.PortAttr
	PortWidth   = engine.PortWidth
	PortSpeed   = engine.PortSpeed
	EventType   = engine.EventType
	Counters    = engine.Counters
	WC          = cq.WC
	WCStatus    = cq.Status
	WCOpcode    = cq.Opcode
	WCFlags     = cq.Flags
	QPState     = qpattr.State
	MigState    = qpattr.MigState
	QPType      = qpattr.Type
	AttrMask    = qpattr.AttrMask
	MTU         = qpattr.MTU
	QPCap       = qpattr.Cap
	Access      = mr.Access
	ReregFlags  = mr.ReregFlags
	SRQAttrMask = engine.SRQAttrMask
	PortState   = engine.PortState
	AtomicCap   = engine.AtomicCap

	// The device side: what the daemon and monitoring read (rdma statistic,
	// rdma resource).
	EngineConfig   = engine.Config
	Counter        = engine.Counter
	EngineCounter  = engine.EngineCounter
	EngineCounters = engine.EngineCounters
	Resources      = engine.Resources
	QPInfo         = engine.QPInfo
	CQInfo         = engine.CQInfo
	MRInfo         = engine.MRInfo
)

// The numbers of counters: Counters()[i] is Counter(i), EngineCounters()[i] is
// EngineCounter(i).
const (
	NumCounters       = engine.NumCounters
	NumEngineCounters = engine.NumEngineCounters
	EngRxFrames       = engine.EngRxFrames // EngineCounters()[EngRxFrames]: frames the engine received
	EngTxFrames       = engine.EngTxFrames // frames the link took
	EngLoopback       = engine.EngLoopback // frames to the device's own address, taken to its receive path
)

// QP types.
const (
	RC  = qpattr.RC
	UC  = qpattr.UC
	UD  = qpattr.UD
	GSI = qpattr.GSI
)

// Memory access flags (enum ibv_access_flags).
const (
	AccessLocalWrite   = mr.LocalWrite
	AccessRemoteWrite  = mr.RemoteWrite
	AccessRemoteRead   = mr.RemoteRead
	AccessRemoteAtomic = mr.RemoteAtomic
	AccessMWBind       = mr.MWBind      // the region may have memory windows bound to it
	AccessZeroBased    = mr.ZeroBased   // IOVA 0 is the first byte (regions, type 2 windows)
	AccessFlushGlobal  = mr.FlushGlobal // the region takes FLUSH to global visibility
)

// Memory window types (enum ibv_mw_type), for PD.AllocMW.
const (
	MWType1 = mr.Type1
	MWType2 = mr.Type2
)

// FLUSH placement types and selectivity (IBTA A19), SendWR.FlushType and
// FlushLevel.
const (
	FlushGlobal     = engine.FlushGlobal
	FlushPersistent = engine.FlushPersistent
	FlushRange      = engine.FlushRange
	FlushMR         = engine.FlushMR
)

// Memory region re-registration flags (enum ibv_rereg_mr_flags), for MR.Rereg.
const (
	ReregTranslation = mr.ReregTranslation
	ReregPD          = mr.ReregPD
	ReregAccess      = mr.ReregAccess
)

// QP states (enum ibv_qp_state).
const (
	QPSReset = qpattr.Reset
	QPSInit  = qpattr.Init
	QPSRTR   = qpattr.RTR
	QPSRTS   = qpattr.RTS
	QPSSQD   = qpattr.SQD
	QPSSQE   = qpattr.SQE
	QPSErr   = qpattr.Err
)

// Send work request opcodes (enum ibv_wr_opcode) and flags (enum ibv_send_flags).
const (
	WRRDMAWrite        = engine.WRRDMAWrite
	WRRDMAWriteWithImm = engine.WRRDMAWriteWithImm
	WRSend             = engine.WRSend
	WRSendWithImm      = engine.WRSendWithImm
	WRRDMARead         = engine.WRRDMARead
	WRAtomicCmpSwp     = engine.WRAtomicCmpSwp
	WRAtomicFetchAdd   = engine.WRAtomicFetchAdd
	WRSendWithInv      = engine.WRSendWithInv
	WRLocalInv         = engine.WRLocalInv
	WRBindMW           = engine.WRBindMW
	WRFlush            = engine.WRFlush
	WRAtomicWrite      = engine.WRAtomicWrite
	WRRegMR            = engine.WRRegMR

	SendFence     = engine.SendFence
	SendSignaled  = engine.SendSignaled
	SendSolicited = engine.SendSolicited
	SendInline    = engine.SendInline
)

// Work completion statuses (enum ibv_wc_status), opcodes (enum ibv_wc_opcode) and
// flags (enum ibv_wc_flags); the rest are in nic/cq.
const (
	WCSuccess        = cq.Success
	WCLocLenErr      = cq.LocLenErr
	WCLocQPOpErr     = cq.LocQPOpErr
	WCLocProtErr     = cq.LocProtErr
	WCMWBindErr      = cq.MWBindErr
	WCWRFlushErr     = cq.WRFlushErr
	WCRemInvReqErr   = cq.RemInvReqErr
	WCRemAccessErr   = cq.RemAccessErr
	WCRemOpErr       = cq.RemOpErr
	WCRetryExcErr    = cq.RetryExcErr
	WCRNRRetryExcErr = cq.RNRRetryExcErr

	WCSend            = cq.Send
	WCRDMAWrite       = cq.RDMAWrite
	WCRDMARead        = cq.RDMARead
	WCCompSwap        = cq.CompSwap
	WCFetchAdd        = cq.FetchAdd
	WCBindMW          = cq.BindMW
	WCLocalInv        = cq.LocalInv
	WCFlush           = cq.Flush
	WCAtomicWrite     = cq.AtomicWrite
	WCRegMR           = cq.RegMR
	WCRecv            = cq.Recv
	WCRecvRDMAWithImm = cq.RecvRDMAWithImm

	WCGRH     = cq.GRH
	WCWithImm = cq.WithImm
	WCWithInv = cq.WithInv
)

// SRQ attribute mask bits (enum ibv_srq_attr_mask), for SRQ.Modify.
const (
	SRQMaxWR = engine.SRQMaxWR
	SRQLimit = engine.SRQLimit
)

// Port states (enum ibv_port_state), PortAttr.State.
const (
	PortDown   = engine.PortDown
	PortActive = engine.PortActive
)

// Port widths and lane speeds (enum ibv_port_width, ibv_port_attr's
// active_speed), PortAttr.ActiveWidth and ActiveSpeed.
const (
	Width1X    = engine.Width1X
	Width2X    = engine.Width2X
	Width4X    = engine.Width4X
	Width8X    = engine.Width8X
	Width12X   = engine.Width12X
	SpeedSDR   = engine.SpeedSDR
	SpeedDDR   = engine.SpeedDDR
	SpeedQDR   = engine.SpeedQDR
	SpeedFDR10 = engine.SpeedFDR10
	SpeedFDR   = engine.SpeedFDR
	SpeedEDR   = engine.SpeedEDR
	SpeedHDR   = engine.SpeedHDR
	SpeedNDR   = engine.SpeedNDR
)

// Asynchronous event types (enum ibv_event_type) that xrnic raises.
const (
	EventCQErr            = engine.EventCQErr
	EventQPFatal          = engine.EventQPFatal
	EventQPReqErr         = engine.EventQPReqErr
	EventQPAccessErr      = engine.EventQPAccessErr
	EventCommEst          = engine.EventCommEst
	EventSQDrained        = engine.EventSQDrained
	EventDeviceFatal      = engine.EventDeviceFatal
	EventPortActive       = engine.EventPortActive
	EventPortErr          = engine.EventPortErr
	EventSRQLimitReached  = engine.EventSRQLimitReached
	EventQPLastWQEReached = engine.EventQPLastWQEReached
)
