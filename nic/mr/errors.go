// Sentinel errors and the preallocated errors of the control path.

package mr

import (
	"fmt"

	"github.com/xrnic/xrnic/nic/errs"
)

// Sentinel errors. Every error this package returns wraps exactly one of them, so
// callers test with errors.Is. (The hot path returns a Fault, never an error.)
var (
	// ErrBadAccess: access flags that contradict each other or the rules of IBTA
	// 10.6.3.1 (REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE), or unknown
	// bits; ib_check_mr_access returns EINVAL for these.
	ErrBadAccess = fmt.Errorf("invalid access flags: %w", errs.ErrInvalid)
	// ErrNotSupported: a flag this NIC does not implement (ON_DEMAND,
	// FLUSH_PERSISTENT); the kernel says EOPNOTSUPP.
	ErrNotSupported = errs.ErrUnsupported
	// ErrInvalidKey: the region is not (or no longer) registered in this table:
	// deregistered twice, reregistered after Deregister, from another table, nil.
	ErrInvalidKey = fmt.Errorf("invalid key: %w", errs.ErrInvalid)
	// ErrTooMany: every index of the table is in use.
	ErrTooMany = fmt.Errorf("too many memory regions: %w", errs.ErrLimit)
	// ErrBadLength: an empty buffer, or an IOVA range that wraps past 2^64.
	ErrBadLength = fmt.Errorf("bad length: %w", errs.ErrInvalid)
	// ErrInUse: Unmap of a mapping that a registered region still covers;
	// Deregister or Reregister of a region with memory windows bound.
	ErrInUse = errs.ErrBusy
	// ErrNoMemory: mmap(2) or mlock(2) failed; the error also wraps the errno.
	ErrNoMemory = fmt.Errorf("cannot map or lock memory: %w", errs.ErrLimit)
	// ErrInvalid: any other bad argument (rereg flags, a ZeroBased region with a
	// non-zero IOVA, FastReg of a region that is not a free fast-reg region).
	ErrInvalid = errs.ErrInvalid
)

func e(sentinel error, what string) error { return fmt.Errorf("mr: %s: %w", what, sentinel) }

// Built once: FastReg runs on the engine's send path and must not allocate, even
// to fail.
var (
	errNoRegion         = e(ErrInvalidKey, "region is not registered in this table")
	errEmpty            = e(ErrBadLength, "empty buffer")
	errWrap             = e(ErrBadLength, "IOVA + length wraps past 2^64")
	errTooMany          = e(ErrTooMany, "every index is in use")
	errZeroBasedIOVA    = e(ErrInvalid, "ZeroBased region with a non-zero IOVA")
	errReregFlags       = e(ErrInvalid, "Reregister flags are zero or unknown")
	errReregFastReg     = e(ErrInvalid, "Reregister of a fast-reg region (ibv_rereg_mr takes plain MRs only)")
	errReregZeroBased   = e(ErrInvalid, "ZeroBased changes only together with the translation")
	errNotFastReg       = e(ErrInvalid, "not a fast-reg region (AllocFastReg)")
	errNotFree          = e(ErrInvalid, "FastReg of a region that is not free (invalidate it first)")
	errFastRegPD        = e(ErrInvalid, "FastReg from a QP of another PD")
	errFastRegIndex     = e(ErrInvalid, "FastReg key names another index (only the key byte may change)")
	errMapLen           = e(ErrBadLength, "mapping length must be positive")
	errWindowsBound     = e(ErrInUse, "memory windows are bound to the region (IBTA 10.6.7.2.6)")
	errMaxPages         = e(ErrInvalid, "max pages out of range")
	errPageSize         = e(ErrInvalid, "page size is not a power of two in range")
	errSGAlign          = e(ErrInvalid, "a buffer other than the first starts, or other than the last ends, inside a page")
	errTooManyPages     = e(ErrTooMany, "the page list exceeds the region's max pages")
	errNoPages          = e(ErrInvalid, "REG_MR of a region MapSG gave no pages")
	errWindowType       = e(ErrInvalid, "unknown memory window type")
	errNoWindow         = e(ErrInvalidKey, "window is not allocated in this table")
	errBindAccess       = e(ErrInvalid, "bind access beyond remote rights and zero-based")
	errBindState        = e(ErrInvalid, "bind of a window in the wrong state (type 1 valid, type 2 free: o10-37.2.30)")
	errBindZeroBasedT1  = e(ErrInvalid, "zero-based type 1 window (o10-36.2.2)")
	errBindNothing      = e(ErrInvalid, "type 2 bind to no region or length 0 (o10-37.2.40)")
	errBindPD           = e(ErrInvalid, "bind across protection domains (C10-72)")
	errBindRegion       = e(ErrInvalidKey, "bind to a region that is not registered and valid")
	errBindZeroBasedMR  = e(ErrInvalid, "bind to a zero-based region")
	errBindNoMWBind     = e(ErrInvalid, "bind to a region without MW_BIND (C10-73)")
	errBindNoLocalWrite = e(ErrInvalid, "writable window on a region without local write (C10-74)")
	errBindRange        = e(ErrInvalid, "window outside its region (C10-75)")
	errNotMapped        = e(ErrInvalid, "Unmap of a buffer MapAnonymous did not return")
	errMapped           = e(ErrInUse, "Unmap of a mapping that registered regions still cover")
)
