package verbs

import (
	"net/netip"

	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpstate"
	"github.com/xrnic/xrnic/nic/wire"
)

// PSN is a 24-bit packet sequence number, as QPAttr's SQPSN and RQPSN take it.
type PSN = wire.PSN

// QP attribute mask bits (enum ibv_qp_attr_mask) for QP.Modify.
const (
	AttrState           = qpstate.AttrState
	AttrCurState        = qpstate.AttrCurState
	AttrAccessFlags     = qpstate.AttrAccessFlags
	AttrPKeyIndex       = qpstate.AttrPKeyIndex
	AttrPort            = qpstate.AttrPort
	AttrQKey            = qpstate.AttrQKey
	AttrAV              = qpstate.AttrAV
	AttrPathMTU         = qpstate.AttrPathMTU
	AttrTimeout         = qpstate.AttrTimeout
	AttrRetryCnt        = qpstate.AttrRetryCnt
	AttrRNRRetry        = qpstate.AttrRNRRetry
	AttrRQPSN           = qpstate.AttrRQPSN
	AttrMaxQPRdAtomic   = qpstate.AttrMaxQPRdAtomic
	AttrMinRNRTimer     = qpstate.AttrMinRNRTimer
	AttrSQPSN           = qpstate.AttrSQPSN
	AttrMaxDestRdAtomic = qpstate.AttrMaxDestRdAtomic
	AttrCap             = qpstate.AttrCap
	AttrDestQPN         = qpstate.AttrDestQPN
)

// Path MTUs (enum ibv_mtu).
const (
	MTU256  = qpstate.MTU256
	MTU512  = qpstate.MTU512
	MTU1024 = qpstate.MTU1024
	MTU2048 = qpstate.MTU2048
	MTU4096 = qpstate.MTU4096
)

// QPBaseAttr are QPAttr's scalar attributes (the part of struct ibv_qp_attr
// besides the address vector), for composite literals.
type QPBaseAttr = qpstate.Attr

// QP access flags for QPAttr.AccessFlags (the remote rights a QP grants).
const (
	QPAccessLocalWrite   = qpstate.AccessLocalWrite
	QPAccessRemoteWrite  = qpstate.AccessRemoteWrite
	QPAccessRemoteRead   = qpstate.AccessRemoteRead
	QPAccessRemoteAtomic = qpstate.AccessRemoteAtomic
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
func MTUFromBytes(n int) (MTU, bool) { return qpstate.MTUFromBytes(n) }

// The access flag for a zero-based region (IBV_ACCESS_ZERO_BASED): its IOVA is 0.
const AccessZeroBased = mr.ZeroBased

// MapBuffer maps n bytes of anonymous, page-aligned memory for a memory region,
// as perftest allocates its buffers (mmap rather than the Go heap). Free it with
// UnmapBuffer after the region is deregistered.
func MapBuffer(n int) ([]byte, error) { return mr.MapAnonymous(n) }

// UnmapBuffer frees a buffer from MapBuffer. It fails while a region uses it.
func UnmapBuffer(b []byte) error { return mr.Unmap(b) }
