// The hot path: key lookups with every responder and requester check, and
// invalidation. Nothing here locks or allocates.

package mr

// Lookup checks an access of length bytes at IOVA va through key, from a QP of
// protection domain pd, and returns exactly that part of the region's memory, or
// the Fault that forbids it. remote says key is an R_Key from the wire (RDMA
// WRITE, READ, ATOMIC); otherwise it is an L_Key from a local SGE. need holds the
// rights the access requires: RemoteWrite for an RDMA WRITE target, RemoteRead
// for a READ source, RemoteAtomic for an atomic target, LocalWrite for a receive
// buffer, a READ response or atomic result target, FlushGlobal for a FLUSH, and
// nothing for a send source (local reads are always allowed); other bits of need
// are ignored.
//
// The checks follow rxe's lookup_mr and mr_check_range, in this order: the key
// names a valid region (index, key byte, state; and for an R_Key a region with a
// remote right) else FaultInvalidKey; the PD matches else FaultPD; every right in
// need is granted else FaultAccess; va >= IOVA and va+length <= IOVA+Len, without
// overflow, else FaultBounds (also for a negative length).
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
func (t *Table) Lookup(key, pd uint32, va uint64, length int, need Access, remote bool) ([]byte, Fault) {
	if length == 0 {
		return nil, FaultNone
	}
	v := t.load(key)
	if v == nil || v.key != key || v.state.Load() != stateValid || (remote && v.access&RemoteAccess == 0) {
		return nil, FaultInvalidKey
	}
	if v.pd != pd {
		return nil, FaultPD
	}
	if need&rights&^v.access != 0 {
		return nil, FaultAccess
	}
	off, ok := v.offset(va, length)
	if !ok {
		return nil, FaultBounds
	}
	end := off + uint64(length)
	return v.buf[off:end:end], FaultNone
}

// LookupAtomic checks the target of an RDMA CmpSwap or FetchAdd (R_Key key, PD pd,
// IOVA va) and returns its AtomicLen bytes for CompareSwap or FetchAdd. The checks
// are Lookup's with RemoteAtomic and length 8, then alignment: a va that is not
// 8-byte aligned is FaultAlign, which the responder answers with an Invalid
// Request NAK (rxe: the range check first, then RESPST_ERR_MISALIGNED_ATOMIC).
func (t *Table) LookupAtomic(key, pd uint32, va uint64) ([]byte, Fault) {
	return t.lookupAligned(key, pd, va, RemoteAtomic)
}

// LookupAtomicWrite checks the target of an RDMA ATOMIC WRITE (IBTA A19): like
// LookupAtomic, but the region needs RemoteWrite (rxe's check_rkey asks
// IB_ACCESS_REMOTE_WRITE for it). The result goes to Store.
func (t *Table) LookupAtomicWrite(key, pd uint32, va uint64) ([]byte, Fault) {
	return t.lookupAligned(key, pd, va, RemoteWrite)
}

func (t *Table) lookupAligned(key, pd uint32, va uint64, need Access) ([]byte, Fault) {
	b, f := t.Lookup(key, pd, va, AtomicLen, need, true)
	if f != FaultNone {
		return nil, f
	}
	if va&(AtomicLen-1) != 0 {
		return nil, FaultAlign
	}
	return b, FaultNone
}

// Invalidate executes a local invalidate work request or the invalidation a SEND
// with Invalidate asks for (IETH), on key from a QP of PD pd, as rxe_invalidate_mr
// does: the key must name a region (FaultInvalidKey) that was made by
// AllocFastReg, since rxe invalidates only IB_MR_TYPE_MEM_REG regions; a plain
// registered region cannot be invalidated and gives FaultInvalidKey too. The
// region moves to Free, so every later lookup fails, until FastReg binds it again.
// Invalidating a Free fast-reg region succeeds (rxe does not check the state).
//
// Unlike rxe_invalidate_mr this also checks the PD (FaultPD): a key is used by a
// QP of its own PD only, here as in every other lookup.
//
// Memory windows are not modelled, so an MW R_Key is never found here.
func (t *Table) Invalidate(key, pd uint32) Fault {
	v := t.load(key)
	if v == nil || v.key != key || !v.fast {
		return FaultInvalidKey
	}
	if v.pd != pd {
		return FaultPD
	}
	v.state.Store(stateFree)
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
