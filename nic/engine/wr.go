// Work requests as the application posts them (struct ibv_send_wr, ibv_recv_wr),
// and the per-QP rings that carry them to the engine.

package engine

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// WROpcode is a send work request opcode, numbered as enum ibv_wr_opcode. A plain
// value.
type WROpcode uint8

// The send opcodes. The engine executes them on the QP types the IBTA allows
// them on (rxe_opcode.c rxe_wr_opcode_info; see PostSend); the others are refused
// with ErrUnsupported.
const (
	WRRDMAWrite        WROpcode = 0    // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm WROpcode = 1    // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend             WROpcode = 2    // IBV_WR_SEND
	WRSendWithImm      WROpcode = 3    // IBV_WR_SEND_WITH_IMM
	WRRDMARead         WROpcode = 4    // IBV_WR_RDMA_READ
	WRAtomicCmpSwp     WROpcode = 5    // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAdd   WROpcode = 6    // IBV_WR_ATOMIC_FETCH_AND_ADD
	WRLocalInv         WROpcode = 7    // IBV_WR_LOCAL_INV: invalidate InvalidateRKey here
	WRBindMW           WROpcode = 8    // IBV_WR_BIND_MW: bind a type 2 window (MW, Key, Bind)
	WRSendWithInv      WROpcode = 9    // IBV_WR_SEND_WITH_INV
	WRTSO              WROpcode = 10   // IBV_WR_TSO (not supported)
	WRFlush            WROpcode = 14   // IBV_WR_FLUSH (IBTA A19): RemoteAddr, RKey, FlushLen, FlushType, FlushLevel
	WRAtomicWrite      WROpcode = 15   // IBV_WR_ATOMIC_WRITE (IBTA A19): AtomicData at RemoteAddr, RKey
	WRRegMR            WROpcode = 0x20 // IB_WR_REG_MR (the kernel's): MR's MapSG page list under Key with Access
)

// wrInfo is one row of the work-request opcode table (rxe_opcode.c
// rxe_wr_opcode_info): the opcode's name, what its packets do in opcode-table
// terms, and the QP types that execute it. An opcode with no QP types is refused
// with ErrUnsupported.
type wrInfo struct {
	name  string
	mask  wire.OpMask
	qpts  qpTypeSet
	local bool // sends nothing: done when the requester reaches it (rxe WR_LOCAL_OP_MASK)
}

// qpTypeSet is a set of QP types, one bit per qpattr.Type.
type qpTypeSet uint8

func qpts(ts ...qpattr.Type) qpTypeSet {
	var s qpTypeSet
	for _, t := range ts {
		s |= 1 << t
	}
	return s
}

type wrTable [WRRegMR + 1]wrInfo

// wrOpcodes is the table, indexed by opcode. UD and GSI QPs send only SENDs (IBTA
// 9.8.3); UC has no READ or atomics (IBTA 9.4), and binds windows but neither
// fast-registers nor invalidates (rxe).
var wrOpcodes = wrTable{
	WRRDMAWrite:        {"rdma-write", wire.MaskWrite, qpts(qpattr.RC, qpattr.UC), false},
	WRRDMAWriteWithImm: {"rdma-write-with-imm", wire.MaskWrite | wire.MaskImmDt, qpts(qpattr.RC, qpattr.UC), false},
	WRSend:             {"send", wire.MaskSend, qpts(qpattr.RC, qpattr.UC, qpattr.UD, qpattr.GSI), false},
	WRSendWithImm:      {"send-with-imm", wire.MaskSend | wire.MaskImmDt, qpts(qpattr.RC, qpattr.UC, qpattr.UD, qpattr.GSI), false},
	WRRDMARead:         {"rdma-read", wire.MaskRead, qpts(qpattr.RC), false},
	WRAtomicCmpSwp:     {"atomic-cmp-and-swp", wire.MaskAtomic, qpts(qpattr.RC), false},
	WRAtomicFetchAdd:   {"atomic-fetch-and-add", wire.MaskAtomic, qpts(qpattr.RC), false},
	WRLocalInv:         {"local-inv", 0, qpts(qpattr.RC), true},
	WRBindMW:           {"bind-mw", 0, qpts(qpattr.RC, qpattr.UC), true},
	WRSendWithInv:      {"send-with-inv", wire.MaskSend | wire.MaskIETH, qpts(qpattr.RC), false},
	WRTSO:              {name: "tso"},
	WRFlush:            {"flush", wire.MaskFlush, qpts(qpattr.RC), false},
	WRAtomicWrite:      {"atomic-write", wire.MaskAtomicWrite, qpts(qpattr.RC), false},
	WRRegMR:            {"reg-mr", 0, qpts(qpattr.RC), true},
}

// respOps are the requests whose answer is a response of their own (READ
// response, atomic acknowledge, or the empty READ response of a FLUSH or ATOMIC
// WRITE), not a plain ACK: a plain ACK past one of them means its response was
// lost.
const respOps = wire.MaskRead | wire.MaskAtomic | wire.MaskFlush | wire.MaskAtomicWrite

// rdAtomicOps take one of the requester's max_rd_atomic slots and the
// responder's max_dest_rd_atomic resources (rxe: READ, atomics and ATOMIC WRITE;
// a FLUSH takes none, so an rxe requester may send more than the depth).
const rdAtomicOps = wire.MaskRead | wire.MaskAtomic | wire.MaskAtomicWrite

// mask says what op's packets do; 0 for an opcode outside the table.
func (t *wrTable) mask(op WROpcode) wire.OpMask {
	if int(op) < len(t) {
		return t[op].mask
	}
	return 0
}

// allowed reports whether a QP of type qt executes op.
func (t *wrTable) allowed(qt qpattr.Type, op WROpcode) bool {
	return int(op) < len(t) && t[op].qpts&(1<<qt) != 0
}

// String returns ibv_wr_opcode_str's text.
func (o WROpcode) String() string {
	if int(o) < len(wrOpcodes) && wrOpcodes[o].name != "" {
		return wrOpcodes[o].name
	}
	return "WROpcode(" + strconv.Itoa(int(o)) + ")"
}

// SendFlags are the send_flags of a work request, enum ibv_send_flags. A plain value.
type SendFlags uint32

const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE: wait for earlier READs and atomics
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED: complete with a WC
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED: set SE on the last packet
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE: copy the data at post time

	knownSendFlags = SendFence | SendSignaled | SendSolicited | SendInline
)

// SGE is a scatter/gather element, struct ibv_sge: Length bytes at Addr in the
// memory region of LKey. A plain value.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request, struct ibv_send_wr. PostSend copies what it needs,
// so the caller may reuse the WR (and, for inline data, its buffer) at once.
type SendWR struct {
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// InlineData, when not nil, is the payload, copied at post time: an inline send
	// from a Go slice rather than registered memory (SGL must then be empty; the
	// SendInline flag is implied). Up to the QP's MaxInlineData bytes.
	InlineData []byte

	ImmData        uint32 // *_WITH_IMM: the ImmDt, big-endian on the wire
	InvalidateRKey uint32 // SEND_WITH_INV: the R_Key the responder invalidates; LOCAL_INV: the key invalidated here

	RemoteAddr uint64 // RDMA WRITE, READ and atomics: remote VA
	RKey       uint32 // RDMA WRITE, READ and atomics: remote R_Key
	CompareAdd uint64 // CMP_AND_SWP: compare; FETCH_AND_ADD: add
	Swap       uint64 // CMP_AND_SWP: swap

	AH         *AH    // UD: the destination
	RemoteQPN  uint32 // UD: destination QP
	RemoteQKey uint32 // UD: Q_Key; with the high bit set the QP's own is used

	FlushLen   uint32     // FLUSH: bytes from RemoteAddr (FlushRange)
	FlushType  FlushType  // FLUSH: placement type
	FlushLevel FlushLevel // FLUSH: selectivity
	AtomicData [8]byte    // ATOMIC_WRITE: the 8 bytes written, as given (ibv_wr_atomic_write)

	MW     *MW       // BIND_MW: the window (type 2; type 1 windows bind with QP.BindMW)
	MR     *MR       // REG_MR: the fast-reg region, mapped by MR.MapSG
	Key    uint32    // BIND_MW, REG_MR: the new R_Key; only its low byte, the consumer's, is taken
	Access mr.Access // REG_MR: the region's rights
	Bind   BindInfo  // BIND_MW: what the window covers
}

// BindInfo is what a bind gives a memory window (struct ibv_mw_bind_info): Length
// bytes of MR from IOVA Addr, with remote rights and, for a type 2 window,
// ZeroBased. A type 1 bind with a nil MR and Length 0 unbinds.
type BindInfo struct {
	MR     *MR
	Addr   uint64
	Length uint64
	Access mr.Access
}

// FlushType is a FLUSH's placement type (enum ib_placement_type, IBTA A19): the
// bits of the FETH's PLT field. A plain value.
type FlushType uint8

const (
	FlushGlobal     FlushType = 1 << 0 // IB_FLUSH_GLOBAL: to global visibility
	FlushPersistent FlushType = 1 << 1 // IB_FLUSH_PERSISTENT: to persistence (no such memory here)
)

// FlushLevel is a FLUSH's selectivity (enum ib_selectivity_level): the FETH's
// SEL field. A plain value.
type FlushLevel uint8

const (
	FlushRange FlushLevel = 0 // IB_FLUSH_RANGE: RemoteAddr, FlushLen
	FlushMR    FlushLevel = 1 // IB_FLUSH_MR: the whole region RKey names
)

// RecvWR is a receive work request, struct ibv_recv_wr. PostRecv copies it.
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// wqeState is where a send WQE stands (rxe enum wqe_state).
type wqeState uint8

const (
	wqePosted     wqeState = iota // not started
	wqeProcessing                 // some packets sent
	wqePending                    // all packets sent, waiting for the ACK (RC)
	wqeDone                       // complete, WC not yet written (UC, UD)
	wqeError                      // failed locally
)

// dmaCursor walks a WQE's data: the SGL or the inline buffer.
type dmaCursor struct {
	resid  uint32 // bytes left
	sge    int    // current SGE
	offset uint32 // offset in it
}

// sendWQE is one send queue slot. The fields above the line are written by the
// poster before it publishes the slot (sendQueue.prod) and read-only afterwards;
// the ones below are the engine's.
type sendWQE struct {
	wrid       uint64
	opcode     WROpcode
	flags      SendFlags
	sgl        []SGE // capacity MaxSendSGE, reused
	inline     []byte
	isInline   bool
	length     uint32
	imm        uint32
	invRKey    uint32
	remoteAddr uint64
	rkey       uint32
	compareAdd uint64
	swap       uint64
	ah         *AH    // UD: the address handle
	rt         *route // UD: its route, once resolved
	remoteQPN  uint32
	remoteQKey uint32
	mask       wire.OpMask // what the WR does: MaskSend, MaskWrite, MaskRead, MaskAtomic, MaskImmDt...
	local      bool        // LOCAL_INV, BIND_MW, REG_MR: executed by the requester, nothing sent
	flushLen   uint32
	flushType  FlushType
	flushLevel FlushLevel
	mw         *MW
	mr         *MR
	key        uint32
	access     mr.Access
	bind       BindInfo
	// ---- engine-owned ----
	state       wqeState
	status      cq.Status
	firstPSN    wire.PSN
	lastPSN     wire.PSN
	iova        uint64
	dma         dmaCursor
	hasRdAtomic bool // holds one of the requester's max_rd_atomic slots
}

// recvWQE is one receive queue slot, written by the poster before it publishes it.
type recvWQE struct {
	wrid   uint64
	sgl    []SGE // capacity MaxRecvSGE, reused
	length uint32
}

// ring indexes a power-of-two slot array with free-running counters. prod is
// written by posters under mu, cons by the engine; each side reads the other's with
// an atomic load, which orders the slot contents (release/acquire).
type ring struct {
	mu   sync.Mutex // posters of this ring only
	prod atomic.Uint32
	cons atomic.Uint32
	mask uint32
	cap  uint32 // WRs the ring accepts (the QP's cap), <= len(slots)
}

func (r *ring) init(capacity int) int {
	n := 1
	for n < capacity {
		n <<= 1
	}
	r.mask = uint32(n - 1)
	r.cap = uint32(capacity)
	return n
}

// count is the number of posted WRs the engine has not consumed.
func (r *ring) count() uint32 { return r.prod.Load() - r.cons.Load() }
