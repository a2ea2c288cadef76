// Page-aligned, prefaulted (optionally locked) buffers from mmap(2), and the pins
// that keep them mapped while regions cover them.

package mr

import (
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapping is one MapAnonymous buffer and the number of registrations covering it.
type mapping struct {
	b      []byte // as unix.Mmap returned it: unix.Munmap wants this very slice
	lo, hi uintptr
	pins   int // guarded by mappings.mu
}

// mappings lists the live MapAnonymous buffers, sorted by address. Lock order:
// Table.mu before mappings.mu.
var mappings struct {
	mu   sync.Mutex
	list []*mapping
}

// MapAnonymous returns n bytes of fresh, zeroed, page-aligned anonymous memory
// from mmap(2) (MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE: prefaulted, so the first
// RDMA into it takes no page faults). It lives outside the Go heap until Unmap.
// Errors wrap ErrBadLength, or ErrNoMemory and the errno.
func MapAnonymous(n int) ([]byte, error) { return mapAnonymous(n, false) }

// MapAnonymousPinned is MapAnonymous plus mlock(2), for callers that want the
// pages pinned in RAM, as ibv_reg_mr pins them; it fails with ErrNoMemory and
// EPERM or ENOMEM when RLIMIT_MEMLOCK is too small (and CAP_IPC_LOCK is missing).
func MapAnonymousPinned(n int) ([]byte, error) { return mapAnonymous(n, true) }

// HugePage is the size of the huge pages MapAnonymousHuge maps.
const HugePage = 2 << 20

// MapAnonymousHuge is MapAnonymous from the system's 2 MiB huge pages
// (MAP_HUGETLB), n rounded up to whole pages; it fails with ErrNoMemory when
// none are free (vm.nr_hugepages). The slice is n bytes long; Unmap frees the
// whole mapping.
func MapAnonymousHuge(n int) ([]byte, error) {
	if n <= 0 {
		return nil, errMapLen
	}
	b, err := mapFlags((n+HugePage-1)/HugePage*HugePage, unix.MAP_HUGETLB, false)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}

func mapAnonymous(n int, lock bool) ([]byte, error) {
	if n <= 0 {
		return nil, errMapLen
	}
	return mapFlags(n, 0, lock)
}

func mapFlags(n, flags int, lock bool) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE|flags)
	if err != nil {
		return nil, fmt.Errorf("mr: mmap %d bytes: %w: %w", n, ErrNoMemory, err)
	}
	if lock {
		if err := unix.Mlock(b); err != nil {
			_ = unix.Munmap(b)
			return nil, fmt.Errorf("mr: mlock %d bytes: %w: %w", n, ErrNoMemory, err)
		}
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	m := &mapping{b: b, lo: lo, hi: lo + uintptr(len(b))}
	mappings.mu.Lock()
	i := sort.Search(len(mappings.list), func(i int) bool { return mappings.list[i].lo > lo })
	mappings.list = append(mappings.list, nil)
	copy(mappings.list[i+1:], mappings.list[i:])
	mappings.list[i] = m
	mappings.mu.Unlock()
	return b, nil
}

// Unmap releases a buffer from MapAnonymous (b must start where it started). It
// fails with ErrInUse while a registered region covers the buffer, and with
// ErrInvalid for a buffer MapAnonymous did not return or already unmapped.
//
// After Unmap the memory is gone: any slice into it faults on use. Deregister
// every region first, and make sure no engine goroutine still holds a slice
// looked up before the deregistration (the engine drops such slices after each
// packet, so one pass of every engine loop suffices).
func Unmap(b []byte) error {
	if len(b) == 0 {
		return errNotMapped
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	mappings.mu.Lock()
	i := sort.Search(len(mappings.list), func(i int) bool { return mappings.list[i].lo >= lo })
	if i == len(mappings.list) || mappings.list[i].lo != lo {
		mappings.mu.Unlock()
		return errNotMapped
	}
	m := mappings.list[i]
	if m.pins > 0 {
		mappings.mu.Unlock()
		return errMapped
	}
	mappings.list = append(mappings.list[:i], mappings.list[i+1:]...)
	mappings.mu.Unlock()
	if err := unix.Munmap(m.b); err != nil {
		return fmt.Errorf("mr: munmap: %w: %w", ErrInvalid, err)
	}
	return nil
}

// pin counts a registration of buf against the mapping buf starts in, if any.
func pin(buf []byte) *mapping {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	mappings.mu.Lock()
	defer mappings.mu.Unlock()
	i := sort.Search(len(mappings.list), func(i int) bool { return mappings.list[i].lo > p })
	if i == 0 {
		return nil
	}
	m := mappings.list[i-1]
	if p >= m.hi {
		return nil
	}
	m.pins++
	return m
}

// unpin undoes pin; a nil mapping is a no-op.
func (m *mapping) unpin() {
	if m == nil {
		return
	}
	mappings.mu.Lock()
	m.pins--
	mappings.mu.Unlock()
}

// pinMem pins every mapping m's memory starts in: its buffer, or each page.
func pinMem(m *mem) []*mapping {
	var pins []*mapping
	add := func(b []byte) {
		if p := pin(b); p != nil {
			pins = append(pins, p)
		}
	}
	if m.pages == nil {
		if len(m.buf) > 0 {
			add(m.buf)
		}
		return pins
	}
	for _, pg := range m.pages {
		add(pg)
	}
	return pins
}

// unpinAll undoes pinMem.
func unpinAll(pins []*mapping) {
	for _, p := range pins {
		p.unpin()
	}
}
