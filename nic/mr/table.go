// Table: the device's memory regions, their indices and keys, and the control
// verbs (Register, Reregister, Deregister, AllocFastReg, FastReg).

package mr

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Table holds the memory regions of one device, indexed by the upper 24 bits of
// their keys.
//
// Concurrency: Register, Reregister, Deregister, AllocFastReg, FastReg and Regions
// may be called from any goroutine; they serialise on the table's mutex. Lookup,
// LookupAtomic, LookupAtomicWrite and Invalidate take no lock and may run from any
// number of goroutines concurrently with everything else: they read a slot's
// current view with one atomic load, and every view is immutable but for its
// state, which is atomic. A lookup racing with Deregister or Reregister either
// succeeds on the registration it loaded or fails cleanly; it never mixes two
// registrations.
//
// Keys: index<<8 | key byte, both unpredictable to a peer that holds other
// keys of the device. Never-used indices are handed out in the order of a
// random permutation of the table's range (a peer cannot walk from a key it
// was given to its neighbours'); freed indices come back oldest first, so a
// stale key's index returns as late as possible. Every registration at an
// index, and every Reregister, takes a fresh random key byte different from
// the last one there (rxe_get_next_key), so a stale key matches the new
// registration with odds of 1 in 255.
type Table struct {
	max    uint32                  // highest index in use or usable
	chunks []atomic.Pointer[chunk] // index>>chunkShift -> slots, allocated on first use

	mu   sync.Mutex
	perm permutation // the order never-used indices are handed out in

	// Guarded by mu.
	next     uint32   // never-used indices handed out so far, plus MinIndex
	free     []uint32 // freed indices, oldest first, from freeHead on
	freeHead int
	n        int                  // regions in the table
	windows  map[*Window]struct{} // memory windows in the table
}

type chunk [chunkSize]slot

type slot struct {
	v atomic.Pointer[view] // nil when the index is free

	// Guarded by Table.mu.
	keyByte uint8 // last key byte handed out at this index
	used    bool  // keyByte is meaningful
}

// NewTable returns an empty table for up to max regions: DefaultMaxRegions if max
// is 0 or less, at most MaxRegions. It costs 8 bytes per 1024 possible regions up
// front and 16 KiB per 1024 indices once they are used.
func NewTable(max int) *Table {
	if max <= 0 {
		max = DefaultMaxRegions
	}
	if max > MaxRegions {
		max = MaxRegions
	}
	hi := uint32(MinIndex + max - 1)
	return &Table{
		max:    hi,
		chunks: make([]atomic.Pointer[chunk], hi>>chunkShift+1),
		next:   MinIndex,
		perm:   newPermutation(uint32(max)),
	}
}

// Cap is the number of regions the table can hold.
func (t *Table) Cap() int { return int(t.max - MinIndex + 1) }

// Len is the number of regions in the table (registered and not deregistered).
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// Regions calls yield for each region in the table, in index order, until yield
// returns false; it has the shape of an iter.Seq, so `for r := range t.Regions`
// works. It is for introspection (`rdma resource show mr`): it holds the table's
// mutex throughout, so no Register, Reregister, Deregister or FastReg runs
// meanwhile and each region's accessors agree with one another during yield
// (Invalidate, which takes no lock, may still make a region not Valid). yield
// must not call the table's control methods (it would deadlock); the lookups and
// the region's accessors are fine. It allocates nothing and costs one atomic load
// per index of each chunk of slots in use.
func (t *Table) Regions(yield func(*Region) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for idx := uint32(MinIndex); idx <= t.max; {
		c := t.chunks[idx>>chunkShift].Load()
		end := min((idx>>chunkShift+1)<<chunkShift, t.max+1)
		if c == nil {
			idx = end
			continue
		}
		for ; idx < end; idx++ {
			if v := c[idx&(chunkSize-1)].v.Load(); v != nil && v.r != nil && !yield(v.r) {
				return
			}
		}
	}
}

// ReregFlags says what Reregister changes: the bits of enum ibv_rereg_mr_flags.
type ReregFlags uint32

const (
	ReregTranslation ReregFlags = 1 << 0 // IBV_REREG_MR_CHANGE_TRANSLATION: buf and iova
	ReregPD          ReregFlags = 1 << 1 // IBV_REREG_MR_CHANGE_PD
	ReregAccess      ReregFlags = 1 << 2 // IBV_REREG_MR_CHANGE_ACCESS

	reregAll = ReregTranslation | ReregPD | ReregAccess // IBV_REREG_MR_FLAGS_SUPPORTED
)

// Register registers buf as a memory region of protection domain pd (ibv_reg_mr,
// ibv_reg_mr_iova). Its IOVA, the address a peer uses, is iova, or the address of
// buf[0] when iova is 0; with ZeroBased it is 0 and iova must be 0.
//
// access must pass Access.Check. buf must not be empty and [IOVA, IOVA+len(buf))
// must not wrap past 2^64. The region keeps buf (a heap buffer stays alive as long
// as the region does); buf may come from MapAnonymous, which then refuses to Unmap
// it until the region is deregistered.
//
// Errors wrap ErrBadAccess, ErrNotSupported, ErrBadLength, ErrInvalid or ErrTooMany.
func (t *Table) Register(pd uint32, buf []byte, iova uint64, access Access) (*Region, error) {
	if err := access.Check(); err != nil {
		return nil, err
	}
	iova, err := resolveIOVA(buf, iova, access)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	idx, s, err := t.allocLocked()
	if err != nil {
		return nil, err
	}
	t.n++
	r := &Region{t: t, index: idx, kind: kindUser, live: true}
	v := &view{r: r, key: t.nextKeyLocked(idx, s), pd: pd, access: access, iova: iova, m: contiguous(buf)}
	v.state.Store(stateValid)
	r.pins = pinMem(&v.m)
	r.cur.Store(v)
	s.v.Store(v)
	return r, nil
}

// Reregister changes what r describes, as ibv_rereg_mr does: flags says which of
// pd, the translation (buf and iova, with Register's rules) and access to take;
// the others are ignored, except that a non-zero access without ReregAccess is an
// error (as in libibverbs). ZeroBased may change only together with the
// translation.
//
// r keeps its index but gets a new key byte, so its old L_Key and R_Key stop
// working at once; read the new ones from r (it is returned for convenience).
// (rxe keeps the keys on PD and access changes; a stale key that keeps working
// after its rights changed is what this package avoids.) On error nothing changes.
// Lookups that loaded the old registration before the swap may still complete on
// it. Fast-reg regions cannot be reregistered (ibv_rereg_mr takes IBV_MR_TYPE_MR
// only).
//
// A region with memory windows bound to it cannot be reregistered (IBTA
// 10.6.7.2.6: the windows would outlive what they were bound to).
//
// Errors wrap ErrInvalidKey (r not registered here), ErrInUse (windows bound),
// ErrInvalid, ErrBadAccess, ErrNotSupported or ErrBadLength.
func (t *Table) Reregister(r *Region, flags ReregFlags, pd uint32, buf []byte, iova uint64, access Access) (*Region, error) {
	if flags == 0 || flags&^reregAll != 0 || (access != 0 && flags&ReregAccess == 0) {
		return nil, errReregFlags
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ownsLocked(r) {
		return nil, errNoRegion
	}
	if r.kind != kindUser {
		return nil, errReregFastReg
	}
	if r.nmw.Load() > 0 {
		return nil, errWindowsBound
	}
	old := r.cur.Load()
	nv := &view{r: r, pd: old.pd, access: old.access, iova: old.iova, m: old.m}
	if flags&ReregAccess != 0 {
		if err := access.Check(); err != nil {
			return nil, err
		}
		if flags&ReregTranslation == 0 && (access^old.access)&ZeroBased != 0 {
			return nil, errReregZeroBased
		}
		nv.access = access
	}
	if flags&ReregPD != 0 {
		nv.pd = pd
	}
	if flags&ReregTranslation != 0 {
		var err error
		if nv.iova, err = resolveIOVA(buf, iova, nv.access); err != nil {
			return nil, err
		}
		nv.m = contiguous(buf)
	}
	s := t.slot(r.index)
	nv.key = t.nextKeyLocked(r.index, s)
	nv.state.Store(stateValid)
	if flags&ReregTranslation != 0 {
		unpinAll(r.pins)
		r.pins = pinMem(&nv.m)
	}
	r.cur.Store(nv)
	s.v.Store(nv)
	return r, nil
}

// Deregister removes r from the table (ibv_dereg_mr): its keys stop working at
// once. A lookup that loaded r before may still complete on it; the memory stays
// valid for Go (the slice keeps it alive), but a MapAnonymous buffer may be
// unmapped only once no engine goroutine can still hold a slice from such a lookup.
// Deregistering twice, or a region of another table, fails with ErrInvalidKey; a
// region with memory windows bound to it fails with ErrInUse and stays (IBTA
// 10.6.7.2.6; rxe_dereg_mr says EINVAL).
func (t *Table) Deregister(r *Region) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ownsLocked(r) {
		return errNoRegion
	}
	if r.nmw.Load() > 0 {
		return errWindowsBound
	}
	s := t.slot(r.index)
	s.v.Store(nil)
	r.cur.Load().state.Store(stateFree)
	r.live = false
	unpinAll(r.pins)
	r.pins = nil
	r.staged = mem{}
	t.free = append(t.free, r.index)
	t.n--
	return nil
}

// ownsLocked reports whether r is registered in t.
func (t *Table) ownsLocked(r *Region) bool { return r != nil && r.t == t && r.live }

// allocLocked hands out an index: never-used ones first, then the one freed
// longest ago, so an index (and with it a key) comes back as late as possible.
func (t *Table) allocLocked() (uint32, *slot, error) {
	var idx uint32
	switch {
	case t.next <= t.max:
		idx = MinIndex + t.perm.at(t.next-MinIndex)
		t.next++
	case t.freeHead < len(t.free):
		idx = t.free[t.freeHead]
		t.freeHead++
		if t.freeHead == len(t.free) {
			t.free, t.freeHead = t.free[:0], 0
		} else if t.freeHead >= 1024 && t.freeHead*2 >= len(t.free) {
			t.free = t.free[:copy(t.free, t.free[t.freeHead:])]
			t.freeHead = 0
		}
	default:
		return 0, nil, errTooMany
	}
	c := t.chunks[idx>>chunkShift].Load()
	if c == nil {
		c = new(chunk)
		t.chunks[idx>>chunkShift].Store(c)
	}
	return idx, &c[idx&(chunkSize-1)], nil
}

// nextKeyLocked returns the next key for idx: a random key byte, different
// from the last one handed out at idx (rxe_get_next_key).
func (t *Table) nextKeyLocked(idx uint32, s *slot) uint32 {
	b := uint8(rand.Uint32())
	for s.used && b == s.keyByte {
		b = uint8(rand.Uint32())
	}
	s.keyByte, s.used = b, true
	return idx<<KeyIndexShift | uint32(b)
}

// slot returns the slot of an index that has been handed out.
func (t *Table) slot(idx uint32) *slot {
	return &t.chunks[idx>>chunkShift].Load()[idx&(chunkSize-1)]
}
