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
