// The Modify QP attribute mask, bit for bit enum ibv_qp_attr_mask.

package qpattr

import (
	"math/bits"
	"strconv"
	"strings"
)

// AttrMask says which attributes a Modify QP call sets. Its bits are those of enum
// ibv_qp_attr_mask (libibverbs/verbs.h), so a mask from a consumer passes through
// unchanged. An AttrMask is a plain value.
type AttrMask uint32

// The attribute bits. (The names carry an Attr prefix because State and Cap are
// types of this package.)
const (
	AttrState            AttrMask = 1 << 0  // IBV_QP_STATE
	AttrCurState         AttrMask = 1 << 1  // IBV_QP_CUR_STATE
	AttrEnSQDAsyncNotify AttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	AttrAccessFlags      AttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	AttrPKeyIndex        AttrMask = 1 << 4  // IBV_QP_PKEY_INDEX
	AttrPort             AttrMask = 1 << 5  // IBV_QP_PORT
	AttrQKey             AttrMask = 1 << 6  // IBV_QP_QKEY
	AttrAV               AttrMask = 1 << 7  // IBV_QP_AV
	AttrPathMTU          AttrMask = 1 << 8  // IBV_QP_PATH_MTU
	AttrTimeout          AttrMask = 1 << 9  // IBV_QP_TIMEOUT
	AttrRetryCnt         AttrMask = 1 << 10 // IBV_QP_RETRY_CNT
	AttrRNRRetry         AttrMask = 1 << 11 // IBV_QP_RNR_RETRY
	AttrRQPSN            AttrMask = 1 << 12 // IBV_QP_RQ_PSN
	AttrMaxQPRdAtomic    AttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	AttrAltPath          AttrMask = 1 << 14 // IBV_QP_ALT_PATH
	AttrMinRNRTimer      AttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	AttrSQPSN            AttrMask = 1 << 16 // IBV_QP_SQ_PSN
	AttrMaxDestRdAtomic  AttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	AttrPathMigState     AttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	AttrCap              AttrMask = 1 << 19 // IBV_QP_CAP
	AttrDestQPN          AttrMask = 1 << 20 // IBV_QP_DEST_QPN
	// Bits 21-24 were the kernel-internal SMAC, ALT_SMAC, VID and ALT_VID, never
	// exposed by libibverbs.
	AttrRateLimit AttrMask = 1 << 25 // IBV_QP_RATE_LIMIT

	// AttrKnown is every bit libibverbs defines.
	AttrKnown AttrMask = 1<<21 - 1 | AttrRateLimit
)

// maskNames are the IBV_QP_ names without the prefix, by bit number.
var maskNames = [32]string{
	0: "STATE", 1: "CUR_STATE", 2: "EN_SQD_ASYNC_NOTIFY", 3: "ACCESS_FLAGS",
	4: "PKEY_INDEX", 5: "PORT", 6: "QKEY", 7: "AV", 8: "PATH_MTU", 9: "TIMEOUT",
	10: "RETRY_CNT", 11: "RNR_RETRY", 12: "RQ_PSN", 13: "MAX_QP_RD_ATOMIC",
	14: "ALT_PATH", 15: "MIN_RNR_TIMER", 16: "SQ_PSN", 17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE", 19: "CAP", 20: "DEST_QPN", 25: "RATE_LIMIT",
}

// String lists the set bits by their IBV_QP_ names without the prefix, lowest bit
// first and joined by "|", as in "STATE|PKEY_INDEX|PORT"; bits libibverbs does not
// define follow as one hex number ("STATE|0x200000"). The empty mask is "0".
func (m AttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var b strings.Builder
	unknown := m &^ AttrKnown
	for k := m & AttrKnown; k != 0; k &= k - 1 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(maskNames[bits.TrailingZeros32(uint32(k))])
	}
	if unknown != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(uint64(unknown), 16))
	}
	return b.String()
}
