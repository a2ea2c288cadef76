package verbs

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/nic/wire"
)

// PSN is a 24-bit packet sequence number, as QPAttr's SQPSN and RQPSN take it.
type PSN = wire.PSN

// QP attribute mask bits (enum ibv_qp_attr_mask) for QP.Modify.
const (
	AttrState           = qpattr.AttrState
	AttrCurState        = qpattr.AttrCurState
	AttrAccessFlags     = qpattr.AttrAccessFlags
	AttrPKeyIndex       = qpattr.AttrPKeyIndex
	AttrPort            = qpattr.AttrPort
	AttrQKey            = qpattr.AttrQKey
	AttrAV              = qpattr.AttrAV
	AttrPathMTU         = qpattr.AttrPathMTU
	AttrTimeout         = qpattr.AttrTimeout
	AttrRetryCnt        = qpattr.AttrRetryCnt
	AttrRNRRetry        = qpattr.AttrRNRRetry
	AttrRQPSN           = qpattr.AttrRQPSN
	AttrMaxQPRdAtomic   = qpattr.AttrMaxQPRdAtomic
	AttrMinRNRTimer     = qpattr.AttrMinRNRTimer
	AttrSQPSN           = qpattr.AttrSQPSN
	AttrMaxDestRdAtomic = qpattr.AttrMaxDestRdAtomic
	AttrCap             = qpattr.AttrCap
	AttrDestQPN         = qpattr.AttrDestQPN
)

// Path MTUs (enum ibv_mtu).
const (
	MTU256  = qpattr.MTU256
	MTU512  = qpattr.MTU512
	MTU1024 = qpattr.MTU1024
	MTU2048 = qpattr.MTU2048
	MTU4096 = qpattr.MTU4096
)

// QPBaseAttr are QPAttr's scalar attributes (the part of struct ibv_qp_attr
// besides the address vector), for composite literals.
type QPBaseAttr = qpattr.Attr

// QP access flags for QPAttr.AccessFlags (the remote rights a QP grants).
const (
	QPAccessLocalWrite   = qpattr.AccessLocalWrite
	QPAccessRemoteWrite  = qpattr.AccessRemoteWrite
	QPAccessRemoteRead   = qpattr.AccessRemoteRead
	QPAccessRemoteAtomic = qpattr.AccessRemoteAtomic
	QPAccessFlushGlobal  = qpattr.AccessFlushGlobal
)

// GID is a port GID (union ibv_gid): for RoCEv2, an IPv6 address or an
// IPv4-mapped one.
type GID = netdev.GID

// GIDFromAddr returns the GID of an IP address (IPv4 addresses are mapped).
func GIDFromAddr(a netip.Addr) GID { return netdev.GIDFromAddr(a) }

// ParseGID parses a GID in the text form ibv_devinfo and rdma print (an IPv6
// address, or an IPv4 address).
func ParseGID(s string) (GID, error) { return netdev.ParseGID(s) }

// MTUFromBytes returns the IB MTU of exactly n bytes (256, 512, ..., 4096).
func MTUFromBytes(n int) (MTU, bool) { return qpattr.MTUFromBytes(n) }

// MapBuffer maps n bytes of anonymous, page-aligned memory for a memory region,
// as perftest allocates its buffers (mmap rather than the Go heap). Free it with
// UnmapBuffer after the region is deregistered.
func MapBuffer(n int) ([]byte, error) { return mr.MapAnonymous(n) }

// MapHugeBuffer is MapBuffer from 2 MiB huge pages (mr.MapAnonymousHuge): it
// fails wrapping ErrNoMemory when the system has none free.
func MapHugeBuffer(n int) ([]byte, error) { return mr.MapAnonymousHuge(n) }

// UnmapBuffer frees a buffer from MapBuffer or Device.MapBuffer. It fails
// while an in-process region uses it.
func UnmapBuffer(b []byte) error {
	if err := shm.FreeBuffer(b); !errors.Is(err, shm.ErrNotShared) {
		return err // an attached device's: the daemon keeps its own mapping
	}
	return mr.Unmap(b)
}

// InterfaceFor names the interface an RDMA device should run on to reach remote
// from local (how rdma_cm picks a device from addresses): the interface that
// holds local when it is given, else the one the kernel routes remote through.
// It also returns the source address: local, or the route's. It looks in the
// calling thread's network namespace.
func InterfaceFor(local, remote netip.Addr) (string, netip.Addr, error) {
	if local.IsValid() && !local.IsUnspecified() {
		ifc, err := netdev.InterfaceWithAddr(local)
		if err != nil {
			return "", netip.Addr{}, err
		}
		return ifc.Name, local, nil
	}
	if !remote.IsValid() {
		return "", netip.Addr{}, fmt.Errorf("verbs: no address to pick an interface by: %w", ErrInvalid)
	}
	ifc, src, err := netdev.RouteInterface(remote)
	if err != nil {
		return "", netip.Addr{}, err
	}
	return ifc.Name, src, nil
}
