// Sentinel errors.

package qpattr

import (
	"fmt"

	"github.com/xrnic/xrnic/nic/errs"
)

// Sentinel errors. Every error this package returns wraps exactly one of them, and
// each wraps the errs class libibverbs would answer with (EINVAL, EOPNOTSUPP, EPERM
// as EINVAL, EBUSY).
var (
	// ErrBadTransition: the table has no such transition for the QP type, or a
	// state or type is out of range.
	ErrBadTransition = fmt.Errorf("invalid QP state transition: %w", errs.ErrInvalid)
	// ErrMissingAttr: the mask lacks an attribute the transition requires.
	ErrMissingAttr = fmt.Errorf("missing required QP attribute: %w", errs.ErrInvalid)
	// ErrUnexpectedAttr: the mask holds an attribute the transition does not allow.
	ErrUnexpectedAttr = fmt.Errorf("QP attribute not allowed here: %w", errs.ErrInvalid)
	// ErrBadAttr: an attribute's value is out of range.
	ErrBadAttr = fmt.Errorf("invalid QP attribute value: %w", errs.ErrInvalid)
	// ErrNotSupported: a valid IBTA attribute xrnic does not implement on RoCE.
	ErrNotSupported = fmt.Errorf("QP attribute not supported: %w", errs.ErrUnsupported)
	// ErrNotPermitted: the attribute needs privilege (a controlled Q_Key).
	ErrNotPermitted = fmt.Errorf("QP attribute not permitted: %w", errs.ErrInvalid)
	// ErrDraining: the QP is in SQD and its send queue has not drained yet.
	ErrDraining = fmt.Errorf("send queue still draining: %w", errs.ErrBusy)
)
