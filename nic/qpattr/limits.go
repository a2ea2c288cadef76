// The widths of the QP attribute fields, and the device limits Validate checks against.

package qpattr

// Largest values of the QP attribute fields, from their widths on the wire and in
// the IBTA attribute definitions.
const (
	MaxPSN         = 1<<24 - 1 // SQ_PSN, RQ_PSN: the 24-bit BTH PSN
	MaxQPN         = 1<<24 - 1 // DEST_QPN: the 24-bit BTH DestQP
	MaxTimeout     = 31        // TIMEOUT: 5 bits, 4.096 µs * 2^timeout, 0 = infinite
	MaxRetryCnt    = 7         // RETRY_CNT: 3 bits
	MaxRNRRetry    = 7         // RNR_RETRY: 3 bits, 7 = retry forever
	MaxMinRNRTimer = 31        // MIN_RNR_TIMER: the 5-bit AETH RNR timer code

	// ControlledQKey is the high Q_Key bit: a Q_Key with it set is a controlled
	// Q_Key, which only a privileged consumer may give a QP (IB_QP_SET_QKEY in the
	// kernel's uverbs; QP1's well-known Q_Key 0x80010000 is one).
	ControlledQKey = 1 << 31
)

// Limits are the device and port limits Validate checks attribute values against:
// the engine fills them from its own limits file (the counterpart of rxe_param.h).
// A zero limit allows nothing (NumPorts 0 makes every port invalid), so fill them
// all. Limits is a plain value.
type Limits struct {
	MaxRdAtomic     uint8  // largest MAX_QP_RD_ATOMIC (device max_qp_init_rd_atom)
	MaxDestRdAtomic uint8  // largest MAX_DEST_RD_ATOMIC (device max_qp_rd_atom)
	NumPorts        uint8  // ports are numbered 1..NumPorts
	NumPKeys        uint16 // P_Key table length: PKEY_INDEX < NumPKeys
	MaxMTU          MTU    // the port's largest path MTU (its active MTU may be lower)

	MaxQPWR       uint32 // largest MaxSendWR and MaxRecvWR
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32

	// PrivilegedQKey lets the consumer set a controlled Q_Key (bit 31) on a UD QP,
	// as the kernel's privileged-qkey netlink setting does.
	PrivilegedQKey bool
}
