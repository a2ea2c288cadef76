// Package mr is xrnic's memory-region table: protection domains' registered
// memory, its L_Keys and R_Keys, and the checks a responder and a requester make
// before touching it (IBTA 10.6 memory management; Linux rxe_mr.c, rxe_pool.c).
//
// # Registration
//
// An application registers a Go byte slice, from the heap or from MapAnonymous
// (page-aligned, prefaulted, optionally mlocked memory outside the Go heap), with
// Table.Register: a protection domain, an IOVA (the buffer's address, 0 with
// ZeroBased, or one of the caller's choosing) and access flags with the values of
// enum ibv_access_flags. Reregister changes PD, translation or access like
// ibv_rereg_mr; Deregister ends the region. AllocFastReg, FastReg and Invalidate
// give the fast-registration regions that SEND with Invalidate and local
// invalidate work on.
//
// Keys are index<<8 | key byte, L_Key == R_Key as in rxe. The key byte changes on
// every registration at an index and on every Reregister, so a peer's stale R_Key
// stops matching at once.
//
// # Hot path
//
// The engine calls Lookup for every RDMA WRITE, READ and local SGE, LookupAtomic
// and LookupAtomicWrite for atomics, and Invalidate for IETH and local invalidate.
// They return the exact sub-slice of the region (capacity == length) or a Fault
// (invalid key, PD, access, bounds, alignment) whose NAK method names the NAK
// class; they never lock, never allocate, and never return memory outside a
// registered region however hostile the key, VA and length. CompareSwap, FetchAdd,
// Store and Load perform the atomics on the returned 8 bytes.
//
// # Concurrency
//
// The control calls (Register, Reregister, Deregister, AllocFastReg, FastReg) may
// come from any goroutine and serialise on the table's mutex. The hot-path calls
// may run on any number of goroutines at the same time as the control calls: each
// slot is an atomic pointer to an immutable registration, so a lookup racing with
// Deregister or Reregister either succeeds on the registration it loaded or fails.
// A slice returned just before a Deregister stays valid Go memory (the GC keeps a
// heap buffer alive), but the engine must not hold a slice beyond the packet it
// was looked up for: only the next lookup sees a deregistration, and a
// MapAnonymous buffer can be unmapped once its regions are gone. Region accessors
// and the atomics are safe from any goroutine.
package mr
