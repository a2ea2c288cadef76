// Sentinel errors of the engine's API: the errs vocabulary under the engine's names.

package engine

import (
	"fmt"

	"github.com/xrnic/xrnic/nic/errs"
)

// Sentinel errors. Every error the API returns wraps one of them (errors.Is); each
// is the errs value of the same name, so the layers above test with theirs.
var (
	ErrInvalid     = errs.ErrInvalid
	ErrClosed      = errs.ErrClosed
	ErrBusy        = errs.ErrBusy
	ErrWrongState  = errs.ErrWrongState
	ErrWrongPD     = errs.ErrWrongPD
	ErrBadLKey     = errs.ErrBadLKey
	ErrSGERange    = errs.ErrSGERange
	ErrAccess      = errs.ErrAccess
	ErrQueueFull   = errs.ErrQueueFull
	ErrUnsupported = errs.ErrUnsupported
	ErrLimit       = errs.ErrLimit
	ErrUnreachable = errs.ErrUnreachable
	ErrDeadlock    = errs.ErrDeadlock
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("engine: %s: %w", fmt.Sprintf(format, args...), sentinel)
}

// Errors of the control plane's fixed cases, made once: returning them allocates
// nothing.
var (
	errClosedParent = errorf(ErrClosed, "the parent object is closed or closing")
	errClosedAgain  = errorf(ErrClosed, "the object is closed or closing already")
	errBusyChildren = errorf(ErrBusy, "the object still has children")
	errDeadlockWait = errorf(ErrDeadlock, "waiting for a close from the callback it waits for")
	errDevClosed    = errorf(ErrClosed, "device is closed")
)

// Errors of the post verbs, made once so that a failed post allocates nothing
// (perftest's loops spin on ErrQueueFull).
var (
	errSRQClosed = errorf(ErrClosed, "SRQ")
	errSRQFull   = errorf(ErrQueueFull, "SRQ full")
	errSRQSGEs   = errorf(ErrInvalid, "more SGEs than the SRQ's max_sge")
)

// wrap passes on an error of a layer below (cq, mr, qpattr), which wraps its own
// class of the errs vocabulary and its detail sentinel: both stay visible.
func wrap(err error) error { return fmt.Errorf("engine: %w", err) }

// The post verbs' failures, made once: a failed post allocates nothing (perftest's
// loops spin on ErrQueueFull under back-pressure). They name the rule broken,
// not the values.
var (
	errPostClosed      = errorf(ErrClosed, "post on a destroyed QP")
	errPostSendState   = errorf(ErrWrongState, "post send in a state that takes none (RESET, INIT, RTR)")
	errPostRecvState   = errorf(ErrWrongState, "post receive in RESET")
	errPostSendFull    = errorf(ErrQueueFull, "send queue full")
	errPostRecvFull    = errorf(ErrQueueFull, "receive queue full")
	errPostRecvSRQ     = errorf(ErrInvalid, "the QP takes its receives from an SRQ")
	errPostOpcode      = errorf(ErrUnsupported, "work request opcode not supported on this QP type")
	errPostFlags       = errorf(ErrInvalid, "unknown send flags")
	errPostSGEs        = errorf(ErrInvalid, "more SGEs than the QP's max_sge")
	errPostInlineOp    = errorf(ErrInvalid, "inline data on a READ or atomic")
	errPostInlineSGL   = errorf(ErrInvalid, "both InlineData and an SGL")
	errPostInlineLen   = errorf(ErrInvalid, "inline data longer than the QP's max_inline_data")
	errPostAtomicLen   = errorf(ErrInvalid, "an atomic's local SGL is not 8 bytes")
	errPostAtomicAlign = errorf(ErrInvalid, "an atomic's remote address is not 8-byte aligned")
	errPostNoAH        = errorf(ErrInvalid, "UD send without an AH")
	errPostAHPD        = errorf(ErrWrongPD, "the AH belongs to another PD")
	errPostAHClosed    = errorf(ErrClosed, "the AH is destroyed")
	errPostRemoteQPN   = errorf(ErrInvalid, "remote QPN wider than 24 bits")
	errPostMsgSize     = errorf(ErrInvalid, "message longer than 8 MiB (max_msg_sz)")
	errPostBadLKey     = errorf(ErrBadLKey, "an SGE's L_Key names no memory region")
	errPostLKeyPD      = errorf(ErrWrongPD, "an SGE's L_Key belongs to another PD")
	errPostLKeyAccess  = errorf(ErrAccess, "an SGE's region lacks LOCAL_WRITE")
	errPostSGERange    = errorf(ErrSGERange, "an SGE reaches outside its region")
	errPostSGE         = errorf(ErrInvalid, "a bad SGE")
	errBindMWType      = errorf(ErrInvalid, "BindMW takes a type 1 window of this device")
	errPostBindType1   = errorf(ErrInvalid, "BIND_MW work request for a type 1 window (use BindMW)")
	errPostNoMW        = errorf(ErrInvalid, "BIND_MW without a window of this device")
	errPostNoMR        = errorf(ErrInvalid, "REG_MR without a fast-reg region of this device")
	errPostBindMR      = errorf(ErrInvalid, "bind to a region of another device")
	errPostLocalData   = errorf(ErrInvalid, "a local operation with data (SGL or inline)")
	errPostFlush       = errorf(ErrInvalid, "FLUSH with an unknown placement type or selectivity")
)
