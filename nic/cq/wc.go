// Work completions: the WC record and its status, opcode and flag enums, numbered
// exactly as rdma-core's libibverbs/verbs.h so that values cross the verbs layer
// unchanged.

package cq

import (
	"strconv"
	"strings"
)

// Status is the completion status of a work request, enum ibv_wc_status.
type Status uint8

// The values of enum ibv_wc_status, in order.
const (
	Success          Status = iota // IBV_WC_SUCCESS
	LocLenErr                      // IBV_WC_LOC_LEN_ERR
	LocQPOpErr                     // IBV_WC_LOC_QP_OP_ERR
	LocEECOpErr                    // IBV_WC_LOC_EEC_OP_ERR
	LocProtErr                     // IBV_WC_LOC_PROT_ERR
	WRFlushErr                     // IBV_WC_WR_FLUSH_ERR
	MWBindErr                      // IBV_WC_MW_BIND_ERR
	BadRespErr                     // IBV_WC_BAD_RESP_ERR
	LocAccessErr                   // IBV_WC_LOC_ACCESS_ERR
	RemInvReqErr                   // IBV_WC_REM_INV_REQ_ERR
	RemAccessErr                   // IBV_WC_REM_ACCESS_ERR
	RemOpErr                       // IBV_WC_REM_OP_ERR
	RetryExcErr                    // IBV_WC_RETRY_EXC_ERR
	RNRRetryExcErr                 // IBV_WC_RNR_RETRY_EXC_ERR
	LocRDDViolErr                  // IBV_WC_LOC_RDD_VIOL_ERR
	RemInvRDReqErr                 // IBV_WC_REM_INV_RD_REQ_ERR
	RemAbortErr                    // IBV_WC_REM_ABORT_ERR
	InvEECNErr                     // IBV_WC_INV_EECN_ERR
	InvEECStateErr                 // IBV_WC_INV_EEC_STATE_ERR
	FatalErr                       // IBV_WC_FATAL_ERR
	RespTimeoutErr                 // IBV_WC_RESP_TIMEOUT_ERR
	GeneralErr                     // IBV_WC_GENERAL_ERR
	TMErr                          // IBV_WC_TM_ERR
	TMRndvIncomplete               // IBV_WC_TM_RNDV_INCOMPLETE
)

// statusStr is ibv_wc_status_str's table (libibverbs/enum_strs.c), byte for byte,
// so that logs read the same as those of C programs on the same fabric.
var statusStr = [...]string{
	Success:          "success",
	LocLenErr:        "local length error",
	LocQPOpErr:       "local QP operation error",
	LocEECOpErr:      "local EE context operation error",
	LocProtErr:       "local protection error",
	WRFlushErr:       "Work Request Flushed Error",
	MWBindErr:        "memory management operation error",
	BadRespErr:       "bad response error",
	LocAccessErr:     "local access error",
	RemInvReqErr:     "remote invalid request error",
	RemAccessErr:     "remote access error",
	RemOpErr:         "remote operation error",
	RetryExcErr:      "transport retry counter exceeded",
	RNRRetryExcErr:   "RNR retry counter exceeded",
	LocRDDViolErr:    "local RDD violation error",
	RemInvRDReqErr:   "remote invalid RD request",
	RemAbortErr:      "aborted error",
	InvEECNErr:       "invalid EE context number",
	InvEECStateErr:   "invalid EE context state",
	FatalErr:         "fatal error",
	RespTimeoutErr:   "response timeout error",
	GeneralErr:       "general error",
	TMErr:            "TM error",
	TMRndvIncomplete: "TM software rendezvous",
}

// String returns ibv_wc_status_str's text; like it, "unknown" for values past
// TMRndvIncomplete.
func (s Status) String() string {
	if int(s) < len(statusStr) {
		return statusStr[s]
	}
	return "unknown"
}

// Opcode says what a work completion completed, enum ibv_wc_opcode. Receive-side
// opcodes have the Recv bit (0x80) set, so op&Recv != 0 tests for a receive.
type Opcode uint8

// The values of enum ibv_wc_opcode (rdma-core verbs.h, with IBV_WC_FLUSH and
// IBV_WC_ATOMIC_WRITE).
const (
	Send        Opcode = 0 // IBV_WC_SEND
	RDMAWrite   Opcode = 1 // IBV_WC_RDMA_WRITE
	RDMARead    Opcode = 2 // IBV_WC_RDMA_READ
	CompSwap    Opcode = 3 // IBV_WC_COMP_SWAP
	FetchAdd    Opcode = 4 // IBV_WC_FETCH_ADD
	BindMW      Opcode = 5 // IBV_WC_BIND_MW
	LocalInv    Opcode = 6 // IBV_WC_LOCAL_INV
	TSO         Opcode = 7 // IBV_WC_TSO
	Flush       Opcode = 8 // IBV_WC_FLUSH
	AtomicWrite Opcode = 9 // IBV_WC_ATOMIC_WRITE
	// RegMR completes a REG_MR work request: the kernel's IB_WC_REG_MR (libibverbs
	// has no REG_MR work request, so no IBV_WC_ value).
	RegMR Opcode = 10

	Recv            Opcode = 1 << 7 // IBV_WC_RECV
	RecvRDMAWithImm Opcode = 129    // IBV_WC_RECV_RDMA_WITH_IMM
	TMAdd           Opcode = 130    // IBV_WC_TM_ADD
	TMDel           Opcode = 131    // IBV_WC_TM_DEL
	TMSync          Opcode = 132    // IBV_WC_TM_SYNC
	TMRecv          Opcode = 133    // IBV_WC_TM_RECV
	TMNoTag         Opcode = 134    // IBV_WC_TM_NO_TAG
	Driver1         Opcode = 135    // IBV_WC_DRIVER1
	Driver2         Opcode = 136    // IBV_WC_DRIVER2
	Driver3         Opcode = 137    // IBV_WC_DRIVER3
)

// rdma-core has no ibv_wc_opcode_str; these follow ibv_wr_opcode_str's spelling
// ("rdma-write", "atomic-cmp-and-swp", ...) for the matching work requests.
var opcodeStr = map[Opcode]string{
	Send:            "send",
	RDMAWrite:       "rdma-write",
	RDMARead:        "rdma-read",
	CompSwap:        "atomic-cmp-and-swp",
	FetchAdd:        "atomic-fetch-and-add",
	BindMW:          "bind-mw",
	LocalInv:        "local-inv",
	TSO:             "tso",
	Flush:           "flush",
	AtomicWrite:     "atomic-write",
	RegMR:           "reg-mr",
	Recv:            "recv",
	RecvRDMAWithImm: "recv-rdma-with-imm",
	TMAdd:           "tm-add",
	TMDel:           "tm-del",
	TMSync:          "tm-sync",
	TMRecv:          "tm-recv",
	TMNoTag:         "tm-no-tag",
	Driver1:         "driver1",
	Driver2:         "driver2",
	Driver3:         "driver3",
}

// String names the opcode in ibv_wr_opcode_str's style; "unknown" for values that
// enum ibv_wc_opcode does not define.
func (o Opcode) String() string {
	if s, ok := opcodeStr[o]; ok {
		return s
	}
	return "unknown"
}

// IsRecv reports whether the opcode is a receive-queue completion
// (opcode & IBV_WC_RECV).
func (o Opcode) IsRecv() bool { return o&Recv != 0 }

// Flags are the wc_flags of a work completion, enum ibv_wc_flags.
type Flags uint16

// The bits of enum ibv_wc_flags.
const (
	GRH         Flags = 1 << 0 // IBV_WC_GRH: a GRH precedes the data (UD)
	WithImm     Flags = 1 << 1 // IBV_WC_WITH_IMM: WC.ImmData is valid
	IPCSumOK    Flags = 1 << 2 // IBV_WC_IP_CSUM_OK
	WithInv     Flags = 1 << 3 // IBV_WC_WITH_INV: WC.InvalidatedRKey is valid
	TMSyncReq   Flags = 1 << 4 // IBV_WC_TM_SYNC_REQ
	TMMatch     Flags = 1 << 5 // IBV_WC_TM_MATCH
	TMDataValid Flags = 1 << 6 // IBV_WC_TM_DATA_VALID
)

var flagNames = [...]string{"GRH", "WithImm", "IPCSumOK", "WithInv", "TMSyncReq", "TMMatch", "TMDataValid"}

// String lists the set flags as "GRH|WithImm"; "0" when none is set. Bits that
// ibv_wc_flags does not define are shown as one hex number.
func (f Flags) String() string {
	if f == 0 {
		return "0"
	}
	var b strings.Builder
	for i, name := range flagNames {
		if f&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(name)
		}
	}
	if rest := f &^ (1<<len(flagNames) - 1); rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x" + strconv.FormatUint(uint64(rest), 16))
	}
	return b.String()
}

// WC is a work completion, struct ibv_wc. It is a plain value (48 bytes): Push
// copies it into the CQ's ring and Poll copies it out, so neither keeps a pointer.
//
// When Status is not Success only WRID, Status, QPN and VendorErr are valid
// (ibv_poll_cq(3)).
type WC struct {
	WRID      uint64 // wr_id of the completed work request
	Status    Status
	Opcode    Opcode
	VendorErr uint32 // vendor error syndrome; xrnic puts the rxe-style cause here
	ByteLen   uint32 // bytes transferred (receive: bytes placed, including a UD GRH)

	// ImmData is the immediate data (valid with WithImm) as a number: the 4-byte
	// big-endian ImmDt header read with binary.BigEndian.Uint32. ibv_wc.imm_data
	// holds the same bytes in network order, so ImmData == be32toh(wc.imm_data);
	// the verbs layer converts back with htobe32 (binary.BigEndian.PutUint32).
	ImmData uint32
	// InvalidatedRKey is the R_Key a SEND with Invalidate invalidated (valid with
	// WithInv). In C it shares a union with imm_data; here they are two fields.
	InvalidatedRKey uint32

	QPN          uint32 // local QP number of the completed work request
	SrcQP        uint32 // remote QP number (UD only)
	Flags        Flags
	PKeyIndex    uint16 // P_Key index (GSI QP only)
	SLID         uint16 // source LID (0 on RoCE)
	SL           uint8  // service level
	DLIDPathBits uint8  // DLID path bits (0 on RoCE)
}
