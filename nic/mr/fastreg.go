// Fast registration (IBTA 10.6.3.3, the memory management extensions): regions
// allocated without memory, given a page list by MapSG and made valid by a REG_MR
// work request (FastReg), then invalidated to be registered again.

package mr

import (
	"math"
	"math/bits"
)

// AllocFastReg reserves a region for fast registration (ib_alloc_mr with
// IB_MR_TYPE_MEM_REG and max_num_sg maxPages; the NDK's fast-register MR): it has
// an index, keys and a PD but no memory, and stays Free, so every lookup of its key
// fails, until MapSG and FastReg give it memory. Deregister releases it. Errors
// wrap ErrTooMany, or ErrInvalid for maxPages out of [1, MaxFastRegPages].
func (t *Table) AllocFastReg(pd uint32, maxPages int) (*Region, error) {
	if maxPages < 1 || maxPages > MaxFastRegPages {
		return nil, errMaxPages
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	idx, s, err := t.allocLocked()
	if err != nil {
		return nil, err
	}
	t.n++
	r := &Region{t: t, index: idx, kind: kindFastReg, live: true, maxPages: maxPages}
	v := &view{r: r, key: t.nextKeyLocked(idx, s), pd: pd, inval: true} // state Free
	r.cur.Store(v)
	s.v.Store(v)
	return r, nil
}

// MaxPages is the most pages MapSG may map into r (0 for a region that is not a
// fast-reg region).
func (r *Region) MaxPages() int { return r.maxPages }

// MapSG sets the page list the next FastReg of r binds, as ib_map_mr_sg does:
// sgl's buffers, in order, become one IOVA range starting at iova (the address of
// sgl[0][0] when iova is 0), split into pages of pageSize bytes (a power of two
// from MinPageSize to MaxPageSize). As in ib_sg_to_pages, only the first buffer
// may start inside a page and only the last may end inside one; the others start
// and end on page boundaries of host memory (MapAnonymous memory is page
// aligned), so the pages need not be adjacent. Empty buffers are refused.
//
// It returns how many buffers of sgl it mapped: fewer than len(sgl), with an
// error wrapping ErrTooMany, when the pages would exceed r's MaxPages (the
// mapped prefix stays set, as ib_map_mr_sg leaves it). Other errors (ErrInvalid,
// ErrBadLength, ErrInvalidKey) change nothing. The list takes effect only with
// FastReg, so a region that is Valid keeps what it has until it is invalidated
// and registered again.
func (t *Table) MapSG(r *Region, sgl [][]byte, pageSize int, iova uint64) (int, error) {
	if pageSize < MinPageSize || pageSize > MaxPageSize || pageSize&(pageSize-1) != 0 {
		return 0, errPageSize
	}
	if len(sgl) == 0 {
		return 0, errEmpty
	}
	mask := uint64(pageSize - 1)
	var total uint64
	for i, b := range sgl {
		if len(b) == 0 {
			return 0, errEmpty
		}
		a := hostAddr(b)
		if (i > 0 && a&mask != 0) || (i < len(sgl)-1 && (a+uint64(len(b)))&mask != 0) {
			return 0, errSGAlign
		}
		total += uint64(len(b))
	}
	if iova == 0 {
		iova = hostAddr(sgl[0])
	}
	if total-1 > math.MaxUint64-iova {
		return 0, errWrap
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ownsLocked(r) {
		return 0, errNoRegion
	}
	if r.kind != kindFastReg {
		return 0, errNotFastReg
	}
	shift := uint8(bits.TrailingZeros(uint(pageSize)))
	first := hostAddr(sgl[0])
	m := mem{shift: shift, off0: first & mask, base0: first & mask}
	n := 0
	for _, b := range sgl {
		a := hostAddr(b)
		np := int((a+uint64(len(b))+mask)>>shift - a>>shift)
		if len(m.pages)+np > r.maxPages {
			break
		}
		for len(b) > 0 {
			k := min(len(b), pageSize-int(hostAddr(b)&mask))
			m.pages = append(m.pages, b[:k:k])
			b = b[k:]
		}
		m.n += uint64(len(sgl[n]))
		n++
	}
	if n == 0 {
		return 0, errTooManyPages
	}
	if n == 1 {
		m = contiguous(sgl[0]) // one buffer: the fast path, and Bytes works
	}
	r.staged, r.sIOVA = m, iova
	if n < len(sgl) {
		return n, errTooManyPages
	}
	return n, nil
}

// FastReg executes a REG_MR work request (rxe_reg_fast_mr): it makes the page list
// MapSG set for r Valid under key with access, from a QP of PD pd. key's index
// must be r's: only the key byte, the consumer's, may change (IBTA 10.6.3.3). r
// must be Free (new, or invalidated), pd must be r's, and MapSG must have mapped
// something. With ZeroBased the IOVA is 0, else the one MapSG set.
//
// It runs on the engine's send path: its errors are preallocated (they wrap
// ErrInvalidKey, ErrInvalid, ErrBadAccess or ErrNotSupported and map to a
// local-operation-error completion); it takes the table mutex and allocates one
// small object, once per REG_MR work request, never per packet.
func (t *Table) FastReg(r *Region, key, pd uint32, access Access) error {
	if err := access.Check(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ownsLocked(r) {
		return errNoRegion
	}
	old := r.cur.Load()
	switch {
	case r.kind != kindFastReg:
		return errNotFastReg
	case key>>KeyIndexShift != r.index:
		return errFastRegIndex
	case pd != old.pd:
		return errFastRegPD
	case old.state.Load() != stateFree:
		return errNotFree
	case r.staged.n == 0:
		return errNoPages
	}
	iova := r.sIOVA
	if access&ZeroBased != 0 {
		iova = 0
	}
	nv := &view{r: r, key: key, pd: pd, access: access, inval: true, iova: iova, m: r.staged}
	nv.state.Store(stateValid)
	s := t.slot(r.index)
	s.keyByte = uint8(key) // the next automatic key byte differs from the consumer's
	unpinAll(r.pins)
	r.pins = pinMem(&nv.m)
	r.cur.Store(nv)
	s.v.Store(nv)
	return nil
}
