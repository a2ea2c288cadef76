// Every limit of the engine, in one place, after rxe_param.h.

package engine

import "time"

// Device limits (rxe_param.h enum rxe_device_param), reported by Device.Query.
const (
	MaxQP            = 0x10000 // RXE_MAX_QP
	MaxQPWR          = 0x4000  // RXE_MAX_QP_WR: send or receive WRs per queue
	MaxInlineData    = 400     // RXE_MAX_INLINE_DATA
	MaxSGE           = 32      // RXE_MAX_SGE
	MaxSGERd         = 32      // RXE_MAX_SGE_RD
	MaxCQ            = 16384   // RXE_MAX_CQ
	MaxCQE           = 1 << 15 // 1 << RXE_MAX_LOG_CQE
	MaxMR            = 256 * 1024
	MaxPD            = 0x7ffc
	MaxQPRdAtom      = 128 // RXE_MAX_QP_RD_ATOM: responder resources per QP
	MaxQPInitRdAtom  = 128 // RXE_MAX_QP_INIT_RD_ATOM: initiator depth per QP
	MaxResRdAtom     = 0x3f000
	MaxAH            = 100 // RXE_MAX_AH
	MaxSRQ           = 960
	MaxSRQWR         = 0x4000
	MaxSRQSGE        = 27
	MaxPKeys         = 64
	LocalCAAckDelay  = 15
	MaxMsgSize       = 0x800000 // RXE_PORT_MAX_MSG_SZ: 8 MiB
	GIDTableLen      = 1024     // RXE_PORT_GID_TBL_LEN
	MaxAsyncEvents   = 4096     // queued for the event handler before drops are counted
	DefaultBatch     = 64       // frames per ReadBatch and WriteBatch
	DefaultTxBudget  = 16       // packets a requester sends before the next QP's turn
	minQPN           = 0x11     // RXE_MIN_QP_INDEX is 16; rxe's first user QP is 0x11
	maxQPN           = 0x20000  // RXE_MAX_QP_INDEX
	gsiQPN           = 1
	maxPktPerAck     = 64  // RXE_MAX_PKT_PER_ACK: AckReq at least this often
	maxUnackedPSNs   = 128 // RXE_MAX_UNACKED_PSNS: requester window, and the most cwnd grows to
	minCwnd          = 2   // the least a retry shrinks an RC requester's window to
	defaultHopLimit  = 64
	ipv4TTL          = 64
	maxEthernetLen   = 18 // Ethernet header with an 802.1Q tag
	roceOverhead     = 40 + 8 + 40 + 4
	blockedTxBackoff = 50 * time.Microsecond // retry a full TX ring this soon
	idleSpins        = 20                    // empty passes the engine yields through before it sleeps (shard.go)
)

// roceOverhead is what an IP MTU must hold beyond the RoCE payload: an IPv6 header
// (the larger), UDP, the longest BTH plus extension headers, and the ICRC.
// rxe's eth_mtu_int_to_enum subtracts RXE_MAX_HDR_LENGTH the same way.

// ibMTUs are the IB path MTUs (IBTA 9.7.x; enum ib_mtu 1..5).
var ibMTUs = [...]int{256, 512, 1024, 2048, 4096}

// activeMTU returns the largest IB MTU a link with IP MTU linkMTU carries.
func activeMTU(linkMTU int) int {
	best := 0
	for _, m := range ibMTUs {
		if m+roceOverhead <= linkMTU {
			best = m
		}
	}
	return best
}

// ackTimeout is the local ACK timeout of a QP timeout code: 4.096 us * 2^code
// (IBTA 9.7.6.1.3). Code 0 means infinite: no retransmission timer.
func ackTimeout(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	if code > 31 {
		code = 31
	}
	return time.Duration(4096<<code) * time.Nanosecond
}

// Next-hop resolution (av.go): how many destinations may be resolved at once, and
// how long one may take before its waiters fail with ErrUnreachable.
const (
	MaxPendingResolutions = 256
	ResolveTimeout        = 3 * time.Second
)
