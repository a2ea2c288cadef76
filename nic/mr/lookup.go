// The hot path: key lookups with every responder and requester check, and
// invalidation. Nothing here locks or allocates.

package mr

// Local is the qpn argument of Lookup for an L_Key from a local SGE. (QP 0 is
// the SMI QP, which RoCE does not have, so no request arrives on it.)
const Local uint32 = 0

// Lookup checks an access of length bytes at IOVA va through key, from a QP of
// protection domain pd, and returns the first part of that memory: all of it for
// a region registered from one buffer, the part up to the next page boundary for
// one bound to a page list (MapSG). The caller copies what it got and calls again
// for the rest. qpn is the number of the QP a request arrived on when key is an
// R_Key from the wire (RDMA WRITE, READ, ATOMIC, FLUSH), or Local when it is an
// L_Key from a local SGE. need holds the rights the access requires:
// RemoteWrite for an RDMA WRITE target, RemoteRead for a READ source,
// RemoteAtomic for an atomic target, LocalWrite for a receive buffer, a READ
// response or atomic result target, FlushGlobal for a FLUSH, and nothing for a
// send source (local reads are always allowed); other bits of need are ignored.
//
// The checks follow rxe's lookup_mr, rxe_lookup_mw and mr_check_range, in this
// order: the key names a valid region or bound window (index, key byte, state;
// for an R_Key one with a remote right and, for a type 2 window, this QP; an
// L_Key never names a window) else FaultInvalidKey; the PD matches else FaultPD;
// every right in need is granted else FaultAccess; va >= IOVA and va+length <=
// IOVA+Len, without overflow, else FaultBounds (also for a negative length). A
// window's bounds are its own, not its region's.
//
// A zero length succeeds with a nil slice and checks nothing, not even the key:
// IBTA C9-88 lets a zero-byte RDMA READ or WRITE carry any VA and R_Key, and rxe's
// check_rkey and copy_data skip zero-length transfers and SGEs. The engine must
// not call Lookup for operations that may never be empty (atomics have their own
// functions).
//
// The slice's capacity equals its length. It aliases the region's memory and
// stays valid Go memory after a concurrent Deregister, but the engine must not
// keep it past the packet it was looked up for: a MapAnonymous buffer may be
// unmapped after its region is deregistered, and the next lookup is what sees a
// deregistration.
func (t *Table) Lookup(key, pd uint32, va uint64, length int, need Access, qpn uint32) ([]byte, Fault) {
	if length == 0 {
		return nil, FaultNone
	}
	v, f := t.find(key, pd, need, qpn)
	if f != FaultNone {
		return nil, f
	}
	off, ok := v.offset(va, length)
	if !ok {
		return nil, FaultBounds
	}
	return v.m.piece(off, length), FaultNone
}

// Copy moves len(b) bytes between b and the memory key names from IOVA va: into
// the memory when into is set, out of it otherwise. It makes Lookup's checks
// (key, qpn, pd, need) and calls it once per piece, so a page list is copied page
// by page; on a fault the bytes of earlier pieces have moved. Like Lookup it
// neither locks nor allocates.
func (t *Table) Copy(key, pd uint32, va uint64, b []byte, need Access, qpn uint32, into bool) Fault {
	for len(b) > 0 {
		m, f := t.Lookup(key, pd, va, len(b), need, qpn)
		if f != FaultNone {
			return f
		}
		if into {
			copy(m, b)
		} else {
			copy(b, m)
		}
		b = b[len(m):]
		va += uint64(len(m))
	}
	return FaultNone
}

// Check makes Lookup's checks without returning memory, and checks key, PD and
// rights even when length is 0 (then not the range): a FLUSH's checks (rxe
// check_rkey looks the key up for every FLUSH, and a whole-region FLUSH has no
// range).
func (t *Table) Check(key, pd uint32, va uint64, length int, need Access, qpn uint32) Fault {
	v, f := t.find(key, pd, need, qpn)
	if f != FaultNone {
		return f
	}
	if length > 0 {
		if _, ok := v.offset(va, length); !ok {
			return FaultBounds
		}
	}
	return FaultNone
}

// find is Lookup's checks of the key, the QP, the PD and the rights.
func (t *Table) find(key, pd uint32, need Access, qpn uint32) (*view, Fault) {
	v := t.load(key)
	if v == nil || v.key != key || v.state.Load() != stateValid {
		return nil, FaultInvalidKey
	}
	if qpn == Local {
		if v.w != nil {
			return nil, FaultInvalidKey
		}
	} else if v.access&RemoteAccess == 0 || (v.qpn != 0 && v.qpn != qpn) {
		return nil, FaultInvalidKey
	}
	if v.pd != pd {
		return nil, FaultPD
	}
	if need&rights&^v.access != 0 {
		return nil, FaultAccess
	}
	return v, FaultNone
}

// LookupAtomic checks the target of an RDMA CmpSwap or FetchAdd (R_Key key, PD pd,
// IOVA va) and returns its AtomicLen bytes for CompareSwap or FetchAdd. The checks
// are Lookup's with RemoteAtomic and length 8, then alignment: a va that is not
// 8-byte aligned is FaultAlign, which the responder answers with an Invalid
// Request NAK (rxe: the range check first, then RESPST_ERR_MISALIGNED_ATOMIC).
func (t *Table) LookupAtomic(key, pd, qpn uint32, va uint64) ([]byte, Fault) {
	return t.lookupAligned(key, pd, qpn, va, RemoteAtomic)
}

// LookupAtomicWrite checks the target of an RDMA ATOMIC WRITE (IBTA A19): like
// LookupAtomic, but the region needs RemoteWrite (rxe's check_rkey asks
// IB_ACCESS_REMOTE_WRITE for it). The result goes to Store.
func (t *Table) LookupAtomicWrite(key, pd, qpn uint32, va uint64) ([]byte, Fault) {
	return t.lookupAligned(key, pd, qpn, va, RemoteWrite)
}

// lookupAligned is Lookup of an 8-byte word; a word split across two pages (a
// page list whose host offsets differ from its IOVA's) is misaligned too, as in
// rxe_mr_do_atomic_op.
func (t *Table) lookupAligned(key, pd, qpn uint32, va uint64, need Access) ([]byte, Fault) {
	b, f := t.Lookup(key, pd, va, AtomicLen, need, qpn)
	if f != FaultNone {
		return nil, f
	}
	if va&(AtomicLen-1) != 0 || len(b) != AtomicLen {
		return nil, FaultAlign
	}
	return b, FaultNone
}

// Invalidate executes a local invalidate work request (qpn Local) or the
// invalidation a SEND with Invalidate asks for (IETH; qpn the QP it arrived on),
// on key from a QP of PD pd, as rxe_invalidate_mr and rxe_invalidate_mw do: the
// key must name a fast-reg region (AllocFastReg) or a type 2 memory window
// (o10-37.2.26: a type 1 window cannot be invalidated; neither can a plain
// registered region), else FaultInvalidKey; of PD pd, else FaultPD; a window
// invalidated from the wire must be bound to that QP. A region with windows
// bound to it gives FaultBusy (rxe: EINVAL), and one that is not Valid, because
// it was never bound or is invalidated already, gives FaultInvalidKey: a double
// invalidation is an error, never a silent success. The region or window moves to
// Free, so every later lookup fails, until FastReg or Bind makes it Valid again;
// a window lets go of its region.
//
// Unlike rxe this also checks the PD: a key is used by a QP of its own PD only,
// here as in every other lookup.
func (t *Table) Invalidate(key, pd, qpn uint32) Fault {
	v := t.load(key)
	if v == nil || v.key != key || !v.inval || (qpn != Local && v.qpn != 0 && v.qpn != qpn) {
		return FaultInvalidKey
	}
	if v.pd != pd {
		return FaultPD
	}
	if v.r != nil && v.r.nmw.Load() > 0 {
		return FaultBusy
	}
	if !v.state.CompareAndSwap(stateValid, stateFree) {
		return FaultInvalidKey
	}
	if v.r != nil && v.r.nmw.Load() > 0 {
		// A window was bound meanwhile (Bind counts, then checks the state): it wins.
		v.state.Store(stateValid)
		return FaultBusy
	}
	if v.bound != nil {
		v.bound.nmw.Add(-1)
	}
	return FaultNone
}

// load returns the view in key's slot, or nil: two atomic loads, no lock.
func (t *Table) load(key uint32) *view {
	idx := key >> KeyIndexShift
	if idx < MinIndex || idx > t.max {
		return nil
	}
	c := t.chunks[idx>>chunkShift].Load()
	if c == nil {
		return nil
	}
	return c[idx&(chunkSize-1)].v.Load()
}
