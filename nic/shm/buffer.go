package shm

import (
	"errors"
	"os"
	"sync"
	"unsafe"
)

// ErrNotShared is a buffer that no Buffer call made.
var ErrNotShared = errors.New("shm: buffer not from shm.Buffer")

// Buffers from Buffer, by their first byte's address.
var buffers struct {
	sync.Mutex
	m map[uintptr]*Region
}

// Buffer returns n bytes of memory another process can map: a sealed memfd
// mapped here (what a process registers with the daemon).
func Buffer(n int) ([]byte, error) {
	// Whole pages: the daemon maps the pages an MR spans, and a file
	// shorter than they are is refused.
	page := os.Getpagesize()
	r, err := Create("xrnic-buffer", (n+page-1)&^(page-1))
	if err != nil {
		return nil, err
	}
	b := r.Bytes()[:n:n]
	buffers.Lock()
	if buffers.m == nil {
		buffers.m = map[uintptr]*Region{}
	}
	buffers.m[uintptr(unsafe.Pointer(&b[0]))] = r
	buffers.Unlock()
	return b, nil
}

// FreeBuffer unmaps a buffer from Buffer (the whole of it: b must start where
// it starts). Another process's mapping of it stays.
func FreeBuffer(b []byte) error {
	if len(b) == 0 {
		return ErrNotShared
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	buffers.Lock()
	r, ok := buffers.m[p]
	delete(buffers.m, p)
	buffers.Unlock()
	if !ok {
		return ErrNotShared
	}
	return r.Close()
}

// BufferOf finds the memfd under b (which may be a part of a buffer from
// Buffer) and b's offset in it.
func BufferOf(b []byte) (*Region, uint64, error) {
	if len(b) == 0 {
		return nil, 0, ErrNotShared
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	buffers.Lock()
	defer buffers.Unlock()
	for base, r := range buffers.m {
		mem := r.Bytes()
		if p >= base && p+uintptr(len(b)) <= base+uintptr(len(mem)) {
			return r, uint64(p - base), nil
		}
	}
	return nil, 0, ErrNotShared
}
