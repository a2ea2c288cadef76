package shm

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotSealed is a memfd the other side could shrink under a mapping: a
// shrunk file turns a read of the mapping into SIGBUS, so a region from
// another process must carry F_SEAL_SHRINK.
var ErrNotSealed = errors.New("shm: memfd without F_SEAL_SHRINK")

// ErrHugeTLB is a memfd on hugetlbfs from another process: a hole it punches
// is refilled from the huge page pool at our next touch, and an empty pool
// makes that touch SIGBUS.
var ErrHugeTLB = errors.New("shm: memfd on hugetlbfs")

// Region is shared memory: a memfd and this process's mapping of it. Not safe
// for concurrent Close.
type Region struct {
	fd  int
	off int64
	mem []byte
}

// Create makes a sealed memfd of size bytes (its size can no longer change)
// and maps it read-write.
func Create(name string, size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrLayout, size)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: ftruncate: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
		unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: sealing: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: mmap: %w", err)
	}
	return &Region{fd: fd, mem: mem}, nil
}

// Map maps size bytes at off of another process's memfd, which it takes
// ownership of (Close closes it). The file must be sealed against shrinking
// and hold off+size bytes.
func Map(fd int, off int64, size int) (*Region, error) {
	r, err := mapFD(fd, off, size)
	if err != nil {
		unix.Close(fd)
	}
	return r, err
}

func mapFD(fd int, off int64, size int) (*Region, error) {
	if size <= 0 || off < 0 || off%int64(os.Getpagesize()) != 0 {
		return nil, fmt.Errorf("%w: %d bytes at %d", ErrLayout, size, off)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSealed, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, ErrNotSealed
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return nil, fmt.Errorf("shm: fstatfs: %w", err)
	}
	if fs.Type == unix.HUGETLBFS_MAGIC {
		return nil, ErrHugeTLB
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: fstat: %w", err)
	}
	if st.Size < off || st.Size-off < int64(size) {
		return nil, fmt.Errorf("%w: %d bytes at %d of a %d-byte file", ErrLayout, size, off, st.Size)
	}
	mem, err := unix.Mmap(fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap: %w", err)
	}
	return &Region{fd: fd, off: off, mem: mem}, nil
}

// Bytes is the mapping; FD the memfd (to pass to the other side).
func (r *Region) Bytes() []byte { return r.mem }
func (r *Region) FD() int       { return r.fd }

// Close unmaps the region and closes its memfd.
func (r *Region) Close() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	return err
}
