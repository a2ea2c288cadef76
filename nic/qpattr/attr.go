// QP attribute values and their range checks (rxe_qp_chk_attr and the IBTA widths).

package qpattr

import (
	"fmt"
	"strconv"

	"github.com/xrnic/xrnic/nic/wire"
)

// MTU is a path MTU as enum ibv_mtu numbers it: the IBTA encoding of 256 << (m-1)
// bytes. The zero MTU is invalid. An MTU is a plain value.
type MTU uint8

// The five IBTA path MTUs.
const (
	MTU256  MTU = 1 // IBV_MTU_256
	MTU512  MTU = 2 // IBV_MTU_512
	MTU1024 MTU = 3 // IBV_MTU_1024
	MTU2048 MTU = 4 // IBV_MTU_2048
	MTU4096 MTU = 5 // IBV_MTU_4096
)

// Valid reports whether m is one of the five MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes returns the MTU in bytes of payload per packet (256..4096), or 0 if m is
// invalid.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 256 << (m - 1)
}

// String returns the size in bytes ("1024"), or "MTU(9)" when invalid.
func (m MTU) String() string {
	if !m.Valid() {
		return "MTU(" + strconv.Itoa(int(m)) + ")"
	}
	return strconv.Itoa(m.Bytes())
}

// MTUFromBytes returns the MTU of exactly n bytes; ok is false unless n is 256, 512,
// 1024, 2048 or 4096.
func MTUFromBytes(n int) (m MTU, ok bool) {
	for m = MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// MTUFloor returns the largest MTU of at most n bytes, as rxe picks a port's MTU from
// the link MTU less the RoCE headers (eth_mtu_int_to_enum); ok is false when n < 256.
func MTUFloor(n int) (m MTU, ok bool) {
	for m = MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m, true
		}
	}
	return 0, false
}

// MigState is the path migration state (enum ibv_mig_state). RoCE has no alternate
// path, so the only meaningful value is MigMigrated; the others pass as the kernel
// passes them.
type MigState uint8

// The path migration states.
const (
	MigMigrated MigState = iota // IBV_MIG_MIGRATED
	MigRearm                    // IBV_MIG_REARM
	MigArmed                    // IBV_MIG_ARMED
)

// String returns "MIGRATED", "REARM" or "ARMED" (as the rdma tool prints them), or
// "MigState(5)".
func (s MigState) String() string {
	switch s {
	case MigMigrated:
		return "MIGRATED"
	case MigRearm:
		return "REARM"
	case MigArmed:
		return "ARMED"
	}
	return "MigState(" + strconv.Itoa(int(s)) + ")"
}

// QP access flags: the enum ibv_access_flags bits that mean something on a QP, where
// they enable incoming RDMA operations (IBTA §11.2.5.2 access controls). Local write
// means nothing on a QP but consumers pass it, and rxe accepts it.
const (
	AccessLocalWrite   = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  = 1 << 1 // IBV_ACCESS_REMOTE_WRITE: accept RDMA Write
	AccessRemoteRead   = 1 << 2 // IBV_ACCESS_REMOTE_READ: accept RDMA Read
	AccessRemoteAtomic = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC: accept atomics
	AccessFlushGlobal  = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL: accept FLUSH to global visibility (IBTA A19)

	// QPAccessFlags is every access bit a QP accepts. IBV_ACCESS_FLUSH_PERSISTENT
	// is not among them: there is no persistent memory to flush to.
	QPAccessFlags = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal
)

// Cap is a QP's queue sizes (struct ibv_qp_cap). A Cap is a plain value.
type Cap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// Attr holds the scalar QP attributes of a Modify QP (struct ibv_qp_attr less the
// address vectors, which the engine checks). Only the fields whose bit is in the
// mask mean anything. An Attr is plain data: not safe for concurrent mutation.
type Attr struct {
	State           State    // STATE: the state to move to
	CurState        State    // CUR_STATE: the state the consumer believes the QP is in
	PathMTU         MTU      // PATH_MTU
	PathMigState    MigState // PATH_MIG_STATE
	QKey            uint32   // QKEY (UD, GSI)
	RQPSN           wire.PSN // RQ_PSN: the first PSN the responder expects
	SQPSN           wire.PSN // SQ_PSN: the first PSN the requester sends
	DestQPN         uint32   // DEST_QPN (RC, UC)
	AccessFlags     uint32   // ACCESS_FLAGS (RC, UC): Access* bits
	PKeyIndex       uint16   // PKEY_INDEX
	Port            uint8    // PORT: 1-based
	Timeout         uint8    // TIMEOUT: local ACK timeout exponent
	RetryCnt        uint8    // RETRY_CNT
	RNRRetry        uint8    // RNR_RETRY
	MinRNRTimer     uint8    // MIN_RNR_TIMER: the code the responder puts in RNR NAKs
	MaxRdAtomic     uint8    // MAX_QP_RD_ATOMIC: reads/atomics outstanding as requester
	MaxDestRdAtomic uint8    // MAX_DEST_RD_ATOMIC: reads/atomics accepted as responder
	SQDrainNotify   bool     // EN_SQD_ASYNC_NOTIFY: raise Send Queue Drained
	Cap             Cap      // CAP
}

// Validate checks the values of the attributes in mask, the way rxe_qp_chk_attr and
// the uverbs layer do, plus the IBTA field widths: the 24-bit PSNs and destination
// QPN, TIMEOUT and MIN_RNR_TIMER 0..31, RETRY_CNT and RNR_RETRY 0..7, a valid PATH_MTU
// no larger than the port's, PORT 1..NumPorts, PKEY_INDEX below NumPKeys, the RDMA
// read/atomic depths within the device's, only QP access bits (and only on RC and
// UC), and the queue sizes of CAP within the device's. It does not check which
// attributes the transition takes: that is CheckModify.
//
// It returns the first fault found, lowest mask bit first: ErrBadAttr naming the
// attribute and value, ErrUnexpectedAttr for a bit libibverbs does not define,
// ErrNotSupported for ALT_PATH (alternate paths are IB-only; the kernel refuses them
// on RoCE) and RATE_LIMIT (raw packet QPs only), and ErrNotPermitted for a
// controlled Q_Key on a QP other than GSI without lim.PrivilegedQKey.
func Validate(t Type, a *Attr, mask AttrMask, lim Limits) error {
	if a == nil {
		return errNilAttr
	}
	if unknown := mask &^ AttrKnown; unknown != 0 {
		return fmt.Errorf("qpattr: mask bits %s: %w", unknown, ErrUnexpectedAttr)
	}
	if mask&AttrState != 0 && !a.State.Valid() {
		return bad("STATE", a.State, "is not a QP state")
	}
	if mask&AttrCurState != 0 && !a.CurState.Valid() {
		return bad("CUR_STATE", a.CurState, "is not a QP state")
	}
	if mask&AttrAccessFlags != 0 {
		if !t.Connected() {
			return fmt.Errorf("qpattr: ACCESS_FLAGS on a %s QP: %w", t, ErrBadAttr)
		}
		if extra := a.AccessFlags &^ QPAccessFlags; extra != 0 {
			return bad("ACCESS_FLAGS", fmt.Sprintf("%#x", a.AccessFlags),
				fmt.Sprintf("has bits %#x a QP does not take", extra))
		}
	}
	if mask&AttrPKeyIndex != 0 && a.PKeyIndex >= lim.NumPKeys {
		return bad("PKEY_INDEX", a.PKeyIndex, fmt.Sprintf("is not below the table length %d", lim.NumPKeys))
	}
	if mask&AttrPort != 0 && (a.Port < 1 || a.Port > lim.NumPorts) {
		return bad("PORT", a.Port, fmt.Sprintf("is not a port (1..%d)", lim.NumPorts))
	}
	if mask&AttrQKey != 0 && a.QKey&ControlledQKey != 0 && t != GSI && !lim.PrivilegedQKey {
		return fmt.Errorf("qpattr: QKEY %#x is a controlled Q_Key: %w", a.QKey, ErrNotPermitted)
	}
	if mask&AttrPathMTU != 0 {
		if !a.PathMTU.Valid() {
			return bad("PATH_MTU", a.PathMTU, "is not an MTU (1..5)")
		}
		if a.PathMTU > lim.MaxMTU {
			return bad("PATH_MTU", a.PathMTU, "exceeds the port MTU "+lim.MaxMTU.String())
		}
	}
	if mask&AttrTimeout != 0 && a.Timeout > MaxTimeout {
		return bad("TIMEOUT", a.Timeout, "exceeds 31")
	}
	if mask&AttrRetryCnt != 0 && a.RetryCnt > MaxRetryCnt {
		return bad("RETRY_CNT", a.RetryCnt, "exceeds 7")
	}
	if mask&AttrRNRRetry != 0 && a.RNRRetry > MaxRNRRetry {
		return bad("RNR_RETRY", a.RNRRetry, "exceeds 7")
	}
	if mask&AttrRQPSN != 0 && !a.RQPSN.Valid() {
		return bad("RQ_PSN", fmt.Sprintf("%#x", uint32(a.RQPSN)), "exceeds 24 bits")
	}
	if mask&AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > lim.MaxRdAtomic {
		return bad("MAX_QP_RD_ATOMIC", a.MaxRdAtomic, fmt.Sprintf("exceeds the device's %d", lim.MaxRdAtomic))
	}
	if mask&AttrAltPath != 0 {
		return fmt.Errorf("qpattr: ALT_PATH: RoCE has no alternate path (APM is InfiniBand-only): %w", ErrNotSupported)
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > MaxMinRNRTimer {
		return bad("MIN_RNR_TIMER", a.MinRNRTimer, "exceeds 31")
	}
	if mask&AttrSQPSN != 0 && !a.SQPSN.Valid() {
		return bad("SQ_PSN", fmt.Sprintf("%#x", uint32(a.SQPSN)), "exceeds 24 bits")
	}
	if mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > lim.MaxDestRdAtomic {
		return bad("MAX_DEST_RD_ATOMIC", a.MaxDestRdAtomic, fmt.Sprintf("exceeds the device's %d", lim.MaxDestRdAtomic))
	}
	if mask&AttrPathMigState != 0 && a.PathMigState > MigArmed {
		return bad("PATH_MIG_STATE", a.PathMigState, "is not a migration state")
	}
	if mask&AttrCap != 0 {
		if err := ValidateCap(a.Cap, lim, false); err != nil {
			return err
		}
	}
	if mask&AttrDestQPN != 0 && a.DestQPN > MaxQPN {
		return bad("DEST_QPN", fmt.Sprintf("%#x", a.DestQPN), "exceeds 24 bits")
	}
	if mask&AttrRateLimit != 0 {
		return fmt.Errorf("qpattr: RATE_LIMIT applies to raw packet QPs only: %w", ErrNotSupported)
	}
	return nil
}

// ValidateCap checks queue sizes against the device limits, as rxe_qp_chk_cap does
// at create time: with a shared receive queue (srq) the receive sizes are not the
// QP's and are not checked. The error wraps ErrBadAttr.
func ValidateCap(c Cap, lim Limits, srq bool) error {
	if c.MaxSendWR > lim.MaxQPWR {
		return bad("CAP max_send_wr", c.MaxSendWR, fmt.Sprintf("exceeds the device's %d", lim.MaxQPWR))
	}
	if c.MaxSendSGE > lim.MaxSendSGE {
		return bad("CAP max_send_sge", c.MaxSendSGE, fmt.Sprintf("exceeds the device's %d", lim.MaxSendSGE))
	}
	if !srq {
		if c.MaxRecvWR > lim.MaxQPWR {
			return bad("CAP max_recv_wr", c.MaxRecvWR, fmt.Sprintf("exceeds the device's %d", lim.MaxQPWR))
		}
		if c.MaxRecvSGE > lim.MaxRecvSGE {
			return bad("CAP max_recv_sge", c.MaxRecvSGE, fmt.Sprintf("exceeds the device's %d", lim.MaxRecvSGE))
		}
	}
	if c.MaxInlineData > lim.MaxInlineData {
		return bad("CAP max_inline_data", c.MaxInlineData, fmt.Sprintf("exceeds the device's %d", lim.MaxInlineData))
	}
	return nil
}

var errNilAttr = fmt.Errorf("qpattr: nil *Attr: %w", ErrBadAttr)

func bad(attr string, v any, why string) error {
	return fmt.Errorf("qpattr: %s %v %s: %w", attr, v, why, ErrBadAttr)
}
