// Package errs is xrnic's one vocabulary of sentinel errors. Every layer (the
// links, nic/cq, nic/mr, nic/engine, verbs and what sits on verbs) wraps these
// same values, so errors.Is(err, verbs.ErrClosed) holds whichever layer failed;
// a package's own name for one (cq.ErrClosed, engine.ErrBusy) is the same value.
// Packages add detail sentinels of their own (mr.ErrInvalidKey,
// qpattr.ErrBadTransition) and wrap both. The comments name the errno that
// libibverbs returns for the same failure.
package errs

import "errors"

var (
	// ErrInvalid: a bad argument (EINVAL).
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed: the object, or the device or link it belongs to, is closed:
	// destroyed, deallocated, deregistered (EINVAL on a stale handle, ENODEV).
	ErrClosed = errors.New("closed")
	// ErrBusy: the object still has children or users (EBUSY).
	ErrBusy = errors.New("object in use")
	// ErrWrongState: not allowed in the QP's current state (EINVAL).
	ErrWrongState = errors.New("operation not allowed in the QP's state")
	// ErrWrongPD: the objects belong to different protection domains (EINVAL).
	ErrWrongPD = errors.New("object belongs to another protection domain")
	// ErrBadLKey: a local key names no memory region (EINVAL).
	ErrBadLKey = errors.New("bad local key")
	// ErrSGERange: a scatter/gather entry reaches outside its region (EINVAL).
	ErrSGERange = errors.New("scatter/gather entry outside its memory region")
	// ErrAccess: the region lacks the access the work request needs (EACCES).
	ErrAccess = errors.New("memory region lacks the access the work request needs")
	// ErrQueueFull: the work queue has no free slot (ENOMEM from ibv_post_*).
	ErrQueueFull = errors.New("work queue full")
	// ErrUnsupported: the device does not implement this (EOPNOTSUPP).
	ErrUnsupported = errors.New("not supported")
	// ErrLimit: a device limit is reached (ENOMEM).
	ErrLimit = errors.New("device limit exceeded")
	// ErrUnreachable: no route or neighbour for the destination (ENETUNREACH,
	// EHOSTUNREACH).
	ErrUnreachable = errors.New("destination unreachable")
	// ErrExists: a name or registration is already taken (EEXIST).
	ErrExists = errors.New("already exists")
	// ErrNotFound: no such name or registration (ENOENT).
	ErrNotFound = errors.New("not found")
	// ErrOverrun: a CQ overflowed and is in the error state (IBV_EVENT_CQ_ERR).
	ErrOverrun = errors.New("CQ overrun")
	// ErrDeadlock: a call that waits was made from a callback it would wait for
	// (a blocking close from the object's own handler; EDEADLK).
	ErrDeadlock = errors.New("would deadlock: called from a callback the call waits for")
)
