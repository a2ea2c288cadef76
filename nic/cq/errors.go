// Sentinel errors and the preallocated errors of the verbs.

package cq

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns wraps exactly one of them, so
// callers test with errors.Is.
var (
	// ErrInvalid: a depth out of range or contradictory options (EINVAL in rxe).
	ErrInvalid = errors.New("invalid argument")
	// ErrTooSmall: Resize to fewer entries than are queued (rxe_cq_chk_attr, EINVAL).
	ErrTooSmall = errors.New("fewer entries than queued completions")
	// ErrBusy: Close while QPs still reference the CQ (IBA C11-17) or while events
	// returned by GetEvent are unacknowledged; Channel.Close while CQs use it.
	ErrBusy = errors.New("busy")
	// ErrClosed: the CQ or channel was closed.
	ErrClosed = errors.New("closed")
	// ErrOverrun: the CQ overflowed and is in the error state (IBV_EVENT_CQ_ERR).
	ErrOverrun = errors.New("CQ overrun")
)

func e(sentinel error, what string) error { return fmt.Errorf("cq: %s: %w", what, sentinel) }

// Built once: ReqNotify is on the hot path and must not allocate, even to fail.
var (
	errNotifyClosed  = e(ErrClosed, "ReqNotify on a closed CQ")
	errNotifyOverrun = e(ErrOverrun, "ReqNotify on a CQ in the error state")
)
