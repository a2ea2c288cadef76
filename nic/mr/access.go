// Access flags: the bits of enum ibv_access_flags, and the checks ibv_reg_mr makes.

package mr

import (
	"strconv"
	"strings"
)

// Access is a set of memory access rights with the bit values of libibverbs' enum
// ibv_access_flags (and the kernel's enum ib_access_flags), so verbs passes them
// through unchanged.
type Access uint32

const (
	LocalWrite      Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE: receive, READ response and atomic result targets
	RemoteWrite     Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE: RDMA WRITE targets
	RemoteRead      Access = 1 << 2 // IBV_ACCESS_REMOTE_READ: RDMA READ sources
	RemoteAtomic    Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC: CmpSwap/FetchAdd targets
	MWBind          Access = 1 << 4 // IBV_ACCESS_MW_BIND: accepted; memory windows are not modelled yet
	ZeroBased       Access = 1 << 5 // IBV_ACCESS_ZERO_BASED: the region's IOVA is 0
	OnDemand        Access = 1 << 6 // IBV_ACCESS_ON_DEMAND: not supported (ErrNotSupported)
	HugeTLB         Access = 1 << 7 // IBV_ACCESS_HUGETLB: accepted and ignored, as the kernel does
	FlushGlobal     Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL: FLUSH (IBTA A19) to global visibility
	FlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT: not supported (no persistent memory)
	RelaxedOrdering Access = 1 << 20

	// OptionalRange holds the optional flags (IBV_ACCESS_OPTIONAL_RANGE): a device
	// may ignore them, and this one does.
	OptionalRange Access = 0x3ff00000

	// RemoteAccess is the set of rights that make a region reachable from the wire
	// (rxe's RXE_ACCESS_REMOTE): only a region with one of them has an R_Key.
	RemoteAccess = RemoteWrite | RemoteRead | RemoteAtomic

	// rights are the bits Lookup checks.
	rights = LocalWrite | RemoteAccess | FlushGlobal

	known = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased |
		OnDemand | HugeTLB | FlushGlobal | FlushPersistent | OptionalRange
)

var accessNames = [...]struct {
	a    Access
	name string
}{
	{LocalWrite, "LocalWrite"},
	{RemoteWrite, "RemoteWrite"},
	{RemoteRead, "RemoteRead"},
	{RemoteAtomic, "RemoteAtomic"},
	{MWBind, "MWBind"},
	{ZeroBased, "ZeroBased"},
	{OnDemand, "OnDemand"},
	{HugeTLB, "HugeTLB"},
	{FlushGlobal, "FlushGlobal"},
	{FlushPersistent, "FlushPersistent"},
	{RelaxedOrdering, "RelaxedOrdering"},
}

// String lists the flags as "LocalWrite|RemoteRead"; unnamed bits show in hex.
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var b strings.Builder
	for _, n := range accessNames {
		if a&n.a != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n.name)
			a &^= n.a
		}
	}
	if a != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(uint64(a), 16))
	}
	return b.String()
}

// Remote reports whether a grants any remote right, that is whether a region with
// these flags can be named by an R_Key.
func (a Access) Remote() bool { return a&RemoteAccess != 0 }

var (
	errUnknownAccess   = e(ErrBadAccess, "unknown access flags")
	errRemoteNoLocal   = e(ErrBadAccess, "REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE (IBTA 10.6.3.1)")
	errOnDemand        = e(ErrNotSupported, "ON_DEMAND (ODP) registration")
	errFlushPersistent = e(ErrNotSupported, "FLUSH_PERSISTENT (no persistent memory)")
)

// Check reports whether a region may be registered with a, as ib_check_mr_access
// does for ibv_reg_mr: no unknown bits, and REMOTE_WRITE or REMOTE_ATOMIC only
// together with LOCAL_WRITE (IBTA 10.6.3.1; the kernel's comment: "Local write
// permission is required if remote write or remote atomic permission is also
// requested"). The error wraps ErrBadAccess, or ErrNotSupported for a flag this
// NIC lacks.
func (a Access) Check() error {
	switch {
	case a&^known != 0:
		return errUnknownAccess
	case a&(RemoteWrite|RemoteAtomic) != 0 && a&LocalWrite == 0:
		return errRemoteNoLocal
	case a&OnDemand != 0:
		return errOnDemand
	case a&FlushPersistent != 0:
		return errFlushPersistent
	}
	return nil
}
