// IBTA atomics on region memory: CmpSwap, FetchAdd and the A19 ATOMIC WRITE.

package mr

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The operand is the 64-bit word at b[0:8] in host byte order, as rxe does
// (rxe_mr_do_atomic_op works on *(u64 *)va): the engine converts the AtomicETH's
// big-endian Compare and Swap/Add fields to integers and the original value back to
// big-endian for the AtomicAckETH. An application reads the word with
// binary.NativeEndian or sync/atomic.
//
// When the word's host address is 8-byte aligned (always for heap buffers and
// MapAnonymous buffers registered without an odd offset or IOVA; see
// Region.LockedAtomics) the operation is one sync/atomic instruction, atomic with
// respect to every other atomic on that word from any goroutine. Otherwise it runs
// under striped locks keyed by the 8-byte blocks the word touches, so it is atomic
// with respect to every other unaligned atomic through this package; mixing
// aligned and unaligned atomics on overlapping bytes (the same memory registered
// twice with IOVAs that differ modulo 8) is not atomic. IBTA promises atomicity
// only among the HCA's own atomics (IBV_ATOMIC_HCA); plain CPU or RDMA WRITE
// access to the same bytes is the application's race, as on hardware.
//
// Each function panics if len(b) < 8: a slice from LookupAtomic or
// LookupAtomicWrite is always 8 bytes.

// CompareSwap replaces the word with swap if it equals cmp, and returns the
// original value either way (the IBTA CmpSwap atomic).
func CompareSwap(b []byte, cmp, swap uint64) (orig uint64) {
	if p := word(b); p != nil {
		for {
			old := atomic.LoadUint64(p)
			if old != cmp || atomic.CompareAndSwapUint64(p, old, swap) {
				return old
			}
		}
	}
	i, j := lockStripes(b)
	orig = binary.NativeEndian.Uint64(b)
	if orig == cmp {
		binary.NativeEndian.PutUint64(b, swap)
	}
	unlockStripes(i, j)
	return orig
}

// FetchAdd adds add to the word (modulo 2^64) and returns the original value
// (the IBTA FetchAdd atomic).
func FetchAdd(b []byte, add uint64) (orig uint64) {
	if p := word(b); p != nil {
		return atomic.AddUint64(p, add) - add
	}
	i, j := lockStripes(b)
	orig = binary.NativeEndian.Uint64(b)
	binary.NativeEndian.PutUint64(b, orig+add)
	unlockStripes(i, j)
	return orig
}

// Store writes v to the word atomically, after all earlier writes (IBTA A19 ATOMIC
// WRITE; rxe_mr_do_atomic_write uses smp_store_release).
func Store(b []byte, v uint64) {
	if p := word(b); p != nil {
		atomic.StoreUint64(p, v)
		return
	}
	i, j := lockStripes(b)
	binary.NativeEndian.PutUint64(b, v)
	unlockStripes(i, j)
}

// Load reads the word atomically.
func Load(b []byte) uint64 {
	if p := word(b); p != nil {
		return atomic.LoadUint64(p)
	}
	i, j := lockStripes(b)
	v := binary.NativeEndian.Uint64(b)
	unlockStripes(i, j)
	return v
}

// word returns b[0:8] as a *uint64 if it is 8-byte aligned in memory, else nil.
func word(b []byte) *uint64 {
	p := unsafe.Pointer(unsafe.SliceData(b[:AtomicLen])) // bounds check without a read the race detector would see
	if uintptr(p)&(AtomicLen-1) != 0 {
		return nil
	}
	return (*uint64)(p)
}

// stripes serialise atomics on unaligned words. A word touches two 8-byte blocks;
// both blocks' stripes are taken, lower stripe first, so any two overlapping words
// share a lock and no two callers deadlock.
var stripes [atomicStripes]struct {
	sync.Mutex
	_ [64 - unsafe.Sizeof(sync.Mutex{})%64]byte // one cache line each
}

func lockStripes(b []byte) (i, j uintptr) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b[:AtomicLen])))
	i, j = (p>>3)%atomicStripes, ((p+AtomicLen-1)>>3)%atomicStripes
	if i > j {
		i, j = j, i
	}
	stripes[i].Lock()
	if j != i {
		stripes[j].Lock()
	}
	return i, j
}

func unlockStripes(i, j uintptr) {
	if j != i {
		stripes[j].Unlock()
	}
	stripes[i].Unlock()
}
