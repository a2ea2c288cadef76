// Sentinel errors.

package qpstate

import "errors"

// Sentinel errors. Every error this package returns wraps exactly one of them.
var (
	// ErrBadTransition: the table has no such transition for the QP type, or a
	// state or type is out of range.
	ErrBadTransition = errors.New("invalid QP state transition")
	// ErrMissingAttr: the mask lacks an attribute the transition requires.
	ErrMissingAttr = errors.New("missing required QP attribute")
	// ErrUnexpectedAttr: the mask holds an attribute the transition does not allow.
	ErrUnexpectedAttr = errors.New("QP attribute not allowed here")
	// ErrBadAttr: an attribute's value is out of range.
	ErrBadAttr = errors.New("invalid QP attribute value")
	// ErrNotSupported: a valid IBTA attribute xrnic does not implement on RoCE.
	ErrNotSupported = errors.New("QP attribute not supported")
	// ErrNotPermitted: the attribute needs privilege (a controlled Q_Key).
	ErrNotPermitted = errors.New("QP attribute not permitted")
	// ErrDraining: the QP is in SQD and its send queue has not drained yet.
	ErrDraining = errors.New("send queue still draining")
)
