package attach

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/errs"
)

// errnos pairs the errnos a reply carries with the sentinels verbs' errors
// wrap: libibverbs' errno for the same failure. The first match wins, both
// ways; anything else is EINVAL.
var errnos = []struct {
	errno    syscall.Errno
	sentinel error
}{
	{unix.EBUSY, errs.ErrBusy},
	{unix.ENOMEM, errs.ErrLimit},
	{unix.ENOMEM, errs.ErrQueueFull},
	{unix.EOPNOTSUPP, errs.ErrUnsupported},
	{unix.EACCES, errs.ErrAccess},
	{unix.EHOSTUNREACH, errs.ErrUnreachable},
	{unix.ENODEV, errs.ErrClosed},
	{unix.ENOENT, errs.ErrNotFound},
	{unix.EINVAL, errs.ErrInvalid},
}

// Errno is the errno a reply carries for err (0 for nil).
func Errno(err error) int32 {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return int32(en)
	}
	for _, e := range errnos {
		if errors.Is(err, e.sentinel) {
			return int32(e.errno)
		}
	}
	return int32(unix.EINVAL)
}

// Sentinel is the sentinel error for a reply's errno.
func Sentinel(e syscall.Errno) error {
	for _, x := range errnos {
		if x.errno == e {
			return x.sentinel
		}
	}
	return errs.ErrInvalid
}
