// Sentinel errors of the engine's API.

package engine

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the API returns wraps one of them (errors.Is).
var (
	ErrClosed        = errors.New("device closed")
	ErrDestroyed     = errors.New("object destroyed")
	ErrInvalidArg    = errors.New("invalid argument")
	ErrWrongState    = errors.New("operation not allowed in the QP's state")
	ErrWrongPD       = errors.New("object belongs to another protection domain")
	ErrBadLKey       = errors.New("bad local key")
	ErrSGERange      = errors.New("scatter/gather entry outside its memory region")
	ErrQueueFull     = errors.New("work queue full")
	ErrUnsupportedOp = errors.New("opcode not supported on this QP type")
	ErrLimit         = errors.New("device limit exceeded")
	ErrBusy          = errors.New("object in use")
	ErrUnreachable   = errors.New("destination unreachable")
	ErrAccess        = errors.New("memory region lacks the access the work request needs")
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("engine: %s: %w", fmt.Sprintf(format, args...), sentinel)
}
