// Memory windows (IBTA 10.6.7; rxe_mw.c): R_Keys for a part of a region, bound
// and unbound by the application through its QP, without registering again.

package mr

import "sync/atomic"

// WindowType is a memory window's type, enum ibv_mw_type. A plain value.
type WindowType uint8

const (
	// Type1 windows (IBV_MW_TYPE_1) are bound with the bind verb (ibv_bind_mw),
	// unbound by a bind of length 0, and never invalidated (o10-36.2.2: never
	// zero-based).
	Type1 WindowType = 1
	// Type2 windows (IBV_MW_TYPE_2; type 2B as rxe implements it) are bound by a
	// BIND_MW work request to one QP, which alone may use them, and invalidated
	// locally or by the peer's SEND with Invalidate.
	Type2 WindowType = 2
)

func (w WindowType) String() string {
	switch w {
	case Type1:
		return "type 1"
	case Type2:
		return "type 2"
	}
	return "WindowType(?)"
}

// windowRights are the access flags a bind may grant (ibv_mw_bind_info's
// mw_access_flags).
const windowRights = RemoteAccess | ZeroBased

// Window is a memory window in a Table (ibv_mw). Its R_Key shares the key space
// of the regions.
//
// Concurrency: the accessors are safe from any goroutine; each reads the current
// binding atomically.
type Window struct {
	t     *Table
	index uint32
	typ   WindowType
	pd    uint32
	cur   atomic.Pointer[view]

	live bool // guarded by t.mu
}

// RKey is the window's current R_Key.
func (w *Window) RKey() uint32 { return w.cur.Load().key }

// Type is the window's type.
func (w *Window) Type() WindowType { return w.typ }

// PD is the window's protection domain.
func (w *Window) PD() uint32 { return w.pd }

// Valid reports whether the window is bound (a type 1 window bound with length 0
// is Valid and matches nothing).
func (w *Window) Valid() bool { return w.cur.Load().state.Load() == stateValid }

// Addr is the IOVA a peer names the window's first byte with (0 when zero-based).
func (w *Window) Addr() uint64 { return w.cur.Load().iova }

// Len is the window's length in bytes.
func (w *Window) Len() uint64 { return w.cur.Load().m.n }

// Access is the rights the window grants.
func (w *Window) Access() Access { return w.cur.Load().access }

// QPN is the QP a type 2 window is bound to (0 when unbound or type 1).
func (w *Window) QPN() uint32 { return w.cur.Load().qpn }

// Region is the region the window is bound to, or nil.
func (w *Window) Region() *Region { return w.cur.Load().bound }

// AllocWindow allocates a memory window of PD pd (ibv_alloc_mw): a type 1 window
// is Valid and bound to nothing, a type 2 window is Free (rxe_alloc_mw). Errors
// wrap ErrInvalid (unknown type) or ErrTooMany.
func (t *Table) AllocWindow(pd uint32, typ WindowType) (*Window, error) {
	if typ != Type1 && typ != Type2 {
		return nil, errWindowType
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	idx, s, err := t.allocLocked()
	if err != nil {
		return nil, err
	}
	w := &Window{t: t, index: idx, typ: typ, pd: pd, live: true}
	v := &view{w: w, key: t.nextKeyLocked(idx, s), pd: pd, inval: typ == Type2}
	if typ == Type1 {
		v.state.Store(stateValid)
	}
	w.cur.Store(v)
	s.v.Store(v)
	if t.windows == nil {
		t.windows = make(map[*Window]struct{})
	}
	t.windows[w] = struct{}{}
	return w, nil
}

// DeallocWindow frees w (ibv_dealloc_mw): its R_Key stops working at once and its
// region is let go. Errors wrap ErrInvalidKey (freed twice, another table's).
func (t *Table) DeallocWindow(w *Window) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w == nil || w.t != t || !w.live {
		return errNoWindow
	}
	t.slot(w.index).v.Store(nil)
	t.unbindLocked(w.cur.Load())
	w.live = false
	delete(t.windows, w)
	t.free = append(t.free, w.index)
	return nil
}

// unbindLocked ends binding v, if it is still Valid, and lets go of its region.
// The state's compare-and-swap decides against a racing Invalidate.
func (t *Table) unbindLocked(v *view) {
	if v.state.CompareAndSwap(stateValid, stateFree) && v.bound != nil {
		v.bound.nmw.Add(-1)
	}
}

// BindInfo is what a bind gives a window (struct ibv_mw_bind_info): Length bytes
// of Region from IOVA Addr, with Access (remote rights, and ZeroBased for a type
// 2 window presented at IOVA 0). A nil Region with Length 0 unbinds a type 1
// window.
type BindInfo struct {
	Region *Region
	Addr   uint64
	Length uint64
	Access Access
}

// Bind executes a bind of w (rxe_bind_mw), from a QP of PD pd with number qpn: the
// type 1 bind verb or a type 2 BIND_MW work request. The window's new R_Key takes
// key's low byte, the consumer's choice (ibv_inc_rkey), on w's index. The rules
// are rxe_check_bind_mw's with IBTA's numbers where rxe cites them, plus the PD
// and range checks rxe leaves out:
//   - a type 1 window is Valid and is never zero-based (o10-36.2.2); a type 2
//     window is Free (o10-37.2.30), binds from a QP of its own PD (C10-72) and
//     never to nothing (o10-37.2.40);
//   - the region is registered and Valid, of the window's PD, not zero-based, and
//     allows MW_BIND (C10-73); a window with remote write or atomic rights needs a
//     region with local write (C10-74);
//   - [Addr, Addr+Length) lies inside the region (C10-75; rxe checks only the
//     length of a zero-based window);
//   - Access holds only remote rights and ZeroBased.
//
// On success the old binding of a type 1 window ends (its R_Key stops matching)
// and a type 2 window is bound to qpn. The region counts its windows and refuses
// Deregister, Reregister and Invalidate while any is bound.
//
// It runs on the engine's send path: its errors are preallocated and wrap
// ErrInvalid or ErrInvalidKey (they map to an MW_BIND_ERR completion); it takes
// the table mutex and allocates one view per bind.
func (t *Table) Bind(w *Window, key, pd, qpn uint32, b BindInfo) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w == nil || w.t != t || !w.live {
		return errNoWindow
	}
	old := w.cur.Load()
	st := old.state.Load()
	switch {
	case b.Access&^windowRights != 0:
		return errBindAccess
	case w.typ == Type1 && st != stateValid:
		return errBindState
	case w.typ == Type1 && b.Access&ZeroBased != 0:
		return errBindZeroBasedT1
	case w.typ == Type2 && st != stateFree:
		return errBindState
	case w.typ == Type2 && (b.Region == nil || b.Length == 0):
		return errBindNothing
	case pd != w.pd:
		return errBindPD
	}
	nv := &view{w: w, key: w.index<<KeyIndexShift | key&0xff, pd: w.pd, access: b.Access, inval: w.typ == Type2}
	if w.typ == Type2 {
		nv.qpn = qpn
	}
	if b.Region != nil && b.Length > 0 {
		r := b.Region
		if !t.ownsLocked(r) {
			return errBindRegion
		}
		rv := r.cur.Load()
		off := b.Addr - rv.iova
		switch {
		case rv.state.Load() != stateValid:
			return errBindRegion
		case rv.pd != w.pd:
			return errBindPD
		case rv.access&ZeroBased != 0:
			return errBindZeroBasedMR
		case rv.access&MWBind == 0:
			return errBindNoMWBind
		case b.Access&(RemoteWrite|RemoteAtomic) != 0 && rv.access&LocalWrite == 0:
			return errBindNoLocalWrite
		case b.Addr < rv.iova || off > rv.m.n || b.Length > rv.m.n-off:
			return errBindRange
		}
		nv.bound = r
		nv.iova = b.Addr
		if b.Access&ZeroBased != 0 {
			nv.iova = 0
		}
		nv.m = rv.m.sub(off, b.Length)
		// Count first, then check the region is still Valid: a racing Invalidate
		// changes the state first, then checks the count (see Invalidate).
		r.nmw.Add(1)
		if rv.state.Load() != stateValid || r.cur.Load() != rv {
			r.nmw.Add(-1)
			return errBindRegion
		}
	}
	t.unbindLocked(old)
	nv.state.Store(stateValid)
	w.cur.Store(nv)
	t.slot(w.index).v.Store(nv)
	return nil
}

// InvalidateWindows ends the bindings of the type 2 windows bound to QP qpn, for
// when the QP is destroyed (its number may come back on a new QP, which must not
// inherit them). It returns how many it ended.
func (t *Table) InvalidateWindows(qpn uint32) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for w := range t.windows {
		if v := w.cur.Load(); v.qpn == qpn && v.state.Load() == stateValid {
			t.unbindLocked(v)
			n++
		}
	}
	return n
}

// Windows calls yield for each memory window, in no particular order, as Regions
// does for regions (same locking rules).
func (t *Table) Windows(yield func(*Window) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for w := range t.windows {
		if !yield(w) {
			return
		}
	}
}
