// Package wakeup is the descriptor an owner sleeps on in poll(2) that other
// goroutines, and other processes, ring to wake it.
//
// It is a pipe, not an eventfd. A descriptor passed to another process
// (SCM_RIGHTS) or duplicated shares its open file description: a process
// given the owner's eventfd could read it, taking wake-ups meant for the owner,
// and clear its O_NONBLOCK, after which the owner's own read (or write) of it
// blocks. A pipe's ends are separate descriptions, and Writer opens a new one
// for each process that rings: a process holds a write end of its own and
// nothing it does to it reaches the owner's ends. Nor can it reopen its end
// for reading: the pipe is write-only (New).
package wakeup

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// size is the pipe's capacity (F_SETPIPE_SZ's least, a page): one read of
// Drain's buffer empties it, and a ring while it is full is not needed (it is
// readable already).
const size = 4096

// ring is what Wake writes: any byte.
var ring = [1]byte{1}

// Pipe is a wake-up pipe. Wake, FD and Writer are safe from any goroutine;
// Drain is the owner's, from one goroutine. Close once, after the owner has
// stopped polling FD.
type Pipe struct {
	r, w int
	buf  [size]byte // Drain's
}

// New makes a wake-up pipe; both of its ends are non-blocking.
func New() (*Pipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("wakeup: pipe2: %w", err)
	}
	// Best effort: a pipe keeps its default (16 pages) where the limit is
	// lower; Drain then empties it over several polls.
	_, _ = unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, size)
	// Write-only, even for its owner: /proc/self/fd/N of a write end can be
	// opened for reading too, and a process given one could then take the
	// owner's wake-ups. A user other than the owner cannot open it at all.
	// (root can, as root can do anything to the owner.)
	if err := unix.Fchmod(fds[1], 0o200); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("wakeup: fchmod: %w", err)
	}
	return &Pipe{r: fds[0], w: fds[1]}, nil
}

// FD is the descriptor to poll for POLLIN.
func (p *Pipe) FD() int { return p.r }

// Wake makes the owner's next poll return at once. It never blocks: a full
// pipe is readable already.
func (p *Pipe) Wake() error {
	if _, err := unix.Write(p.w, ring[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("wakeup: write: %w", err)
	}
	return nil
}

// Drain takes the wake-ups rung so far. It never blocks.
func (p *Pipe) Drain() {
	_, _ = unix.Read(p.r, p.buf[:])
}

// Writer opens a new write end of the pipe (a description of its own, through
// /proc/self/fd: a pipe, unlike an eventfd, can be opened there), non-blocking,
// for another process to ring the owner with. The caller closes it.
func (p *Pipe) Writer() (int, error) {
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(p.w), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("wakeup: open a write end: %w", err)
	}
	return fd, nil
}

// Close closes both ends.
func (p *Pipe) Close() error {
	return errors.Join(unix.Close(p.r), unix.Close(p.w))
}
