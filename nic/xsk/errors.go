package xsk

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/errs"
)

// Sentinels for errors.Is. Errors from this package wrap one of them, and the
// errno when the kernel gave one.
var (
	// ErrInvalidOptions: an Options field is out of range (FrameSize, ring sizes,
	// frame counts, TxBudget, queue id).
	ErrInvalidOptions = fmt.Errorf("xsk: invalid options: %w", errs.ErrInvalid)
	// ErrNoInterface: the ifindex names no interface in the caller's network
	// namespace (bind returned ENODEV).
	ErrNoInterface = fmt.Errorf("xsk: no such interface: %w", errs.ErrNotFound)
	// ErrNoQueue: the interface has no such queue (bind returned EINVAL and the
	// queue id is at or above the interface's queue count).
	ErrNoQueue = fmt.Errorf("xsk: no such queue: %w", errs.ErrNotFound)
	// ErrBusy: another XSK holds the queue, or a closed one had not yet released
	// it when the bind retries ran out (PLATFORM 7).
	ErrBusy = errs.ErrBusy
	// ErrNotSupported: the kernel or driver lacks a feature asked for (zero-copy on
	// veth, XDP_MMAP_OFFSETS v2, XDP_MAX_TX_SKB_BUDGET).
	ErrNotSupported = fmt.Errorf("xsk: not supported: %w", errs.ErrUnsupported)
	// ErrMemlock: the kernel refused to pin the UMEM (ENOBUFS/ENOMEM/EPERM from
	// XDP_UMEM_REG), usually RLIMIT_MEMLOCK without CAP_IPC_LOCK (PLATFORM 1).
	ErrMemlock = fmt.Errorf("xsk: cannot pin UMEM (RLIMIT_MEMLOCK?): %w", errs.ErrLimit)
	// ErrLinkDown: sendto() found the interface down or the socket unbound
	// (ENETDOWN, ENXIO); frames stay queued and go out once it comes back.
	ErrLinkDown = fmt.Errorf("xsk: link down: %w", errs.ErrUnreachable)
	// ErrClosed: the Socket was closed.
	ErrClosed = errs.ErrClosed
)

// sysError wraps a failed system call: it matches sentinel and errno in errors.Is.
type sysError struct {
	sentinel error
	op       string
	errno    syscall.Errno
	detail   string
}

func (e *sysError) Error() string {
	msg := "xsk: " + e.op
	if e.sentinel != nil {
		msg = e.sentinel.Error() + ": " + e.op
	}
	if e.detail != "" {
		msg += " (" + e.detail + ")"
	}
	if e.errno != 0 {
		msg += ": " + e.errno.Error()
	}
	return msg
}

func (e *sysError) Unwrap() []error {
	var errs []error
	if e.sentinel != nil {
		errs = append(errs, e.sentinel)
	}
	if e.errno != 0 {
		errs = append(errs, e.errno)
	}
	return errs
}

// errSys wraps err (an errno from x/sys) under sentinel; a nil sentinel leaves
// the errno alone to say what went wrong.
func errSys(sentinel error, op string, err error, detail string) error {
	var errno syscall.Errno
	if err != nil && !errors.As(err, &errno) {
		if sentinel == nil {
			return fmt.Errorf("xsk: %s: %w", op, err)
		}
		return fmt.Errorf("%w: %s: %w", sentinel, op, err)
	}
	return &sysError{sentinel: sentinel, op: op, errno: errno, detail: detail}
}

// isTransientTxErrno reports whether a sendto() errno only means "not all sent
// now" in copy mode (net/xdp/xsk.c __xsk_generic_xmit): EAGAIN when the budget
// or the completion ring ran out or the driver was busy, EBUSY when the device
// dropped a frame (its descriptor is still completed), ENOBUFS/ENOMEM when an
// skb could not be allocated.
func isTransientTxErrno(e unix.Errno) bool {
	switch e {
	case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.ENOMEM, unix.EINTR:
		return true
	}
	return false
}
