package verbs

import "github.com/xrnic/xrnic/nic/errs"

// Sentinel errors: xrnic's one vocabulary (nic/errs), the same values every layer
// below wraps, so errors.Is(err, verbs.ErrClosed) holds whichever layer failed.
// Every error of this package and of the objects it hands out wraps one of them.
var (
	ErrInvalid     = errs.ErrInvalid     // EINVAL: a bad argument
	ErrClosed      = errs.ErrClosed      // the object or its device is closed (destroyed, deallocated, deregistered)
	ErrBusy        = errs.ErrBusy        // EBUSY: the object still has children or users
	ErrWrongState  = errs.ErrWrongState  // not allowed in the QP's state
	ErrWrongPD     = errs.ErrWrongPD     // the objects belong to different PDs
	ErrBadLKey     = errs.ErrBadLKey     // a local key names no memory region
	ErrSGERange    = errs.ErrSGERange    // an SGE reaches outside its region
	ErrAccess      = errs.ErrAccess      // the region lacks the access a WR needs
	ErrQueueFull   = errs.ErrQueueFull   // ENOMEM from a post: no free slot
	ErrUnsupported = errs.ErrUnsupported // EOPNOTSUPP
	ErrLimit       = errs.ErrLimit       // a device limit is reached
	ErrUnreachable = errs.ErrUnreachable // no route or neighbour for the destination
	ErrExists      = errs.ErrExists      // EEXIST: a device name is taken
	ErrNotFound    = errs.ErrNotFound    // ENOENT: no such device or client
	ErrOverrun     = errs.ErrOverrun     // a CQ overflowed (IBV_EVENT_CQ_ERR)
	ErrDeadlock    = errs.ErrDeadlock    // EDEADLK: a waiting call from the callback it waits for
)
