// Fault: why a lookup failed, and the NAK class a responder answers it with.

package mr

import "strconv"

// Fault is the outcome of a hot-path check (Lookup, LookupAtomic, Invalidate). It
// is a plain value, never an error, so a hostile packet costs no allocation.
type Fault uint8

const (
	// FaultNone: the access is allowed.
	FaultNone Fault = iota
	// FaultInvalidKey: no region has this key: index out of range or free, key byte
	// mismatch (a stale key from an earlier registration), region deregistered or
	// invalidated, an R_Key for a region without remote rights, or an Invalidate
	// of a region that cannot be invalidated.
	FaultInvalidKey
	// FaultPD: the region belongs to another protection domain than the QP.
	FaultPD
	// FaultAccess: the region lacks a right the operation needs.
	FaultAccess
	// FaultBounds: [va, va+length) is not inside the region (including a negative
	// length and a range that wraps past 2^64).
	FaultBounds
	// FaultAlign: an atomic's VA is not 8-byte aligned.
	FaultAlign
	// FaultBusy: an Invalidate of a region that memory windows are bound to.
	FaultBusy

	numFaults
)

var faultNames = [numFaults]string{
	FaultNone:       "none",
	FaultInvalidKey: "invalid key",
	FaultPD:         "PD mismatch",
	FaultAccess:     "access violation",
	FaultBounds:     "out of bounds",
	FaultAlign:      "misaligned atomic",
	FaultBusy:       "windows bound",
}

func (f Fault) String() string {
	if f < numFaults {
		return faultNames[f]
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// NAKClass is the kind of NAK an RC responder sends for a Fault; the engine turns
// it into the AETH syndrome (nic/wire.NAKCode) and the completion status.
type NAKClass uint8

const (
	// NAKNone: no NAK; the access is allowed.
	NAKNone NAKClass = iota
	// NAKRemoteAccessError: AETH NAK code 2, Remote Access Error (IBTA 9.7.5.2):
	// R_Key, PD, access rights or bounds violated. rxe: RESPST_ERR_RKEY_VIOLATION
	// -> AETH_NAK_REM_ACC_ERR, IB_WC_REM_ACCESS_ERR (class C).
	NAKRemoteAccessError
	// NAKInvalidRequest: AETH NAK code 1, Invalid Request (IBTA 9.7.5.2). rxe:
	// RESPST_ERR_MISALIGNED_ATOMIC -> AETH_NAK_INVALID_REQ, IB_WC_REM_INV_REQ_ERR
	// (class C).
	NAKInvalidRequest
)

func (c NAKClass) String() string {
	switch c {
	case NAKNone:
		return "none"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKInvalidRequest:
		return "invalid request"
	}
	return "NAKClass(" + strconv.Itoa(int(c)) + ")"
}

// NAK returns the NAK class an RC responder answers f with, as rxe_responder
// does: a misaligned atomic is an invalid request, every other fault a remote
// access error. (For Invalidate faults rxe sends no NAK: RESPST_ERR_INVALIDATE_RKEY
// completes the receive with IB_WC_REM_INV_REQ_ERR and moves the QP to error,
// class J; the engine handles that case itself.)
func (f Fault) NAK() NAKClass {
	switch f {
	case FaultNone:
		return NAKNone
	case FaultAlign:
		return NAKInvalidRequest
	}
	return NAKRemoteAccessError
}
