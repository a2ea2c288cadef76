// Sentinel errors and the preallocated errors of the verbs.

package cq

import (
	"fmt"

	"github.com/xrnic/xrnic/nic/errs"
)

// Sentinel errors. Every error this package returns wraps exactly one of them, so
// callers test with errors.Is.
var (
	// ErrInvalid: a depth out of range or contradictory options (EINVAL in rxe).
	ErrInvalid = errs.ErrInvalid
	// ErrTooSmall: Resize to fewer entries than are queued (rxe_cq_chk_attr, EINVAL).
	ErrTooSmall = fmt.Errorf("fewer entries than queued completions: %w", errs.ErrInvalid)
	// ErrBusy: Close while QPs still reference the CQ (IBA C11-17) or while events
	// returned by GetEvent are unacknowledged; Channel.Close while CQs use it.
	ErrBusy = errs.ErrBusy
	// ErrClosed: the CQ or channel was closed.
	ErrClosed = errs.ErrClosed
	// ErrOverrun: the CQ overflowed and is in the error state (IBV_EVENT_CQ_ERR).
	ErrOverrun = errs.ErrOverrun
)

func e(sentinel error, what string) error { return fmt.Errorf("cq: %s: %w", what, sentinel) }

// Built once: ReqNotify is on the hot path and must not allocate, even to fail.
var (
	errNotifyClosed  = e(ErrClosed, "ReqNotify on a closed CQ")
	errNotifyOverrun = e(ErrOverrun, "ReqNotify on a CQ in the error state")
)

var errReleaseUnheld = fmt.Errorf("cq: Release without Acquire: %w", ErrInvalid)
