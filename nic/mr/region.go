// Region: a registered memory region (ibv_mr), and the immutable view of one
// registration that lookups read.

package mr

import (
	"math"
	"sync/atomic"
	"unsafe"
)

// kind is the rxe MR type a region has.
type kind uint8

const (
	kindUser    kind = iota // Register: IB_MR_TYPE_USER, never invalidated
	kindFastReg             // AllocFastReg: IB_MR_TYPE_MEM_REG, bound by FastReg, invalidated by Invalidate
)

// View states (rxe's RXE_MR_STATE_FREE and RXE_MR_STATE_VALID). The zero value is
// Free, so nothing half-built is ever usable.
const (
	stateFree uint32 = iota
	stateValid
)

// view is one registration of a region or one binding of a memory window: key,
// PD, rights and memory. Everything but state is immutable once the view is
// published (stored into a slot), so lookups read it without locks; Reregister,
// FastReg and Bind publish a new view instead of changing an old one. state
// moves Valid -> Free on Invalidate, Deregister and DeallocWindow.
type view struct {
	r      *Region // the region; nil for a window
	w      *Window // the window; nil for a region
	bound  *Region // a bound window's region (its count of windows holds it)
	key    uint32
	pd     uint32
	qpn    uint32 // a type 2 window's QP: the only one that may use it (IBTA 10.6.7.2.2)
	access Access
	inval  bool // Invalidate may end it: a fast-reg region or a type 2 window
	iova   uint64
	m      mem
	state  atomic.Uint32
}

// offset returns where [va, va+length) starts in the view's memory, or ok=false
// when the range is not inside it. It never overflows: va-iova is taken only when
// va >= iova, and length is compared with what is left after the offset.
func (v *view) offset(va uint64, length int) (off uint64, ok bool) {
	n := v.m.n
	if length < 0 || va < v.iova {
		return 0, false
	}
	off = va - v.iova
	if off > n || uint64(length) > n-off {
		return 0, false
	}
	return off, true
}

// Region is a memory region registered in a Table: a Go byte slice (from the heap
// or from MapAnonymous), the IOVA a peer names it by, its access rights, its
// protection domain and its keys. It is the handle an application keeps, like
// struct ibv_mr: Reregister and FastReg change what it describes and Deregister
// ends it.
//
// Concurrency: the accessors are safe from any goroutine at any time. Each one
// reads the current registration atomically, so two calls made across a
// concurrent Reregister may see different registrations; after Deregister they keep
// returning the last one (and Valid reports false).
type Region struct {
	t     *Table
	index uint32
	kind  kind
	cur   atomic.Pointer[view] // never nil once the region is returned

	nmw      atomic.Int32 // memory windows bound to it: it may not change or go while > 0
	maxPages int          // fast reg: the most pages MapSG may map (ib_alloc_mr's max_num_sg)

	// Guarded by t.mu.
	live   bool       // in the table: not yet deregistered
	pins   []*mapping // the MapAnonymous mappings its memory lies in
	staged mem        // fast reg: the page list MapSG set for the next REG_MR
	sIOVA  uint64     // the IOVA of staged's first byte
}

// LKey is the local key: index<<8 | key byte.
func (r *Region) LKey() uint32 { return r.cur.Load().key }

// RKey is the remote key. As in rxe it equals LKey, and it means something only
// when the region has a remote right (Access().Remote()): an R_Key lookup of a
// region without one fails with FaultInvalidKey.
func (r *Region) RKey() uint32 { return r.cur.Load().key }

// PD is the protection domain the region belongs to.
func (r *Region) PD() uint32 { return r.cur.Load().pd }

// Addr is the IOVA of the region's first byte, the address a peer puts in a RETH
// or AtomicETH: the address of Bytes()[0] by default, 0 for a ZeroBased region,
// or the IOVA given to Register.
func (r *Region) Addr() uint64 { return r.cur.Load().iova }

// Len is the region's length in bytes (0 for a fast-reg region not yet bound).
func (r *Region) Len() int { return int(r.cur.Load().m.n) }

// Access is the region's access flags as registered.
func (r *Region) Access() Access { return r.cur.Load().access }

// Bytes is the registered memory: nil for a fast-reg region not yet bound, and
// for one bound to a page list (its pages need not be adjacent; see MapSG).
func (r *Region) Bytes() []byte { return r.cur.Load().m.buf }

// Windows is the number of memory windows bound to the region.
func (r *Region) Windows() int { return int(r.nmw.Load()) }

// Valid reports whether lookups can currently succeed on the region: it is
// registered and, for a fast-reg region, bound by FastReg and not invalidated.
func (r *Region) Valid() bool { return r.cur.Load().state.Load() == stateValid }

// FastReg reports whether the region came from AllocFastReg.
func (r *Region) FastReg() bool { return r.kind == kindFastReg }

// LockedAtomics reports whether atomics on this region take the locked fallback
// of CompareSwap and FetchAdd: true when the host address of an 8-byte aligned
// IOVA is not itself 8-byte aligned, which happens when the buffer's address and
// its IOVA differ modulo 8 (a sub-slice at an odd offset, a ZeroBased region on
// such a slice, or a caller-given IOVA). Linux's ib_uverbs_reg_mr avoids the case
// by requiring start and IOVA to share their offset within a page; this package
// accepts any IOVA and stays correct, only slower.
func (r *Region) LockedAtomics() bool {
	v := r.cur.Load()
	if v.m.pages != nil {
		return (v.m.off0-v.iova)&(AtomicLen-1) != 0 // pages start aligned: byte 0 sits at off0
	}
	if len(v.m.buf) == 0 {
		return false
	}
	return (hostAddr(v.m.buf)-v.iova)&(AtomicLen-1) != 0
}

// hostAddr is the address of b[0] as an integer.
func hostAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// resolveIOVA applies Register's IOVA rules: ZeroBased means 0 (and the caller
// must pass 0), 0 otherwise means the address of buf[0]. It also checks that the
// region is not empty and that [iova, iova+len) does not wrap past 2^64.
func resolveIOVA(buf []byte, iova uint64, access Access) (uint64, error) {
	if len(buf) == 0 {
		return 0, errEmpty
	}
	switch {
	case access&ZeroBased != 0:
		if iova != 0 {
			return 0, errZeroBasedIOVA
		}
	case iova == 0:
		iova = hostAddr(buf)
	}
	if uint64(len(buf))-1 > math.MaxUint64-iova {
		return 0, errWrap
	}
	return iova, nil
}
