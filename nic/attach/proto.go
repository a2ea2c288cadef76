// Package attach is the control protocol between the xrnic daemon and the
// processes attached to it (docs/attach.md is its written form): messages on
// a SOCK_SEQPACKET Unix socket, one request and its reply at a time, file
// descriptors (memfds, pipe ends, sockets) passed with SCM_RIGHTS. The data path does
// not cross the socket: it runs on the rings of package shm.
//
// Every message is a 16-byte Header and a fixed-layout payload, little-endian,
// whose structs below are laid out with natural alignment (no padding a C
// compiler would add differently).
package attach

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Version is the protocol's, the newest the daemon speaks; HELLO refuses one
// before MinVersion or after Version.
const Version = 6

// MinVersion is the oldest version the daemon still serves: version 5 differs
// only in QUERY_PORT's reply, whose active_width and active_speed were pad
// (a version 5 client reads them as such).
const MinVersion = 5

// MaxMessage bounds a message, header and payload.
const MaxMessage = 1024

// MaxFDs bounds the descriptors one message carries.
const MaxFDs = 2

// Op is a request's operation (and its reply's).
type Op uint32

const (
	OpHello Op = iota + 1
	OpQueryDevice
	OpQueryPort
	OpQueryGID
	OpAllocPD
	OpRegMR
	OpCreateCompChannel
	OpCreateCQ
	OpCreateQP
	OpModifyQP
	OpQueryQP
	OpCreateAH
	OpDestroy
	OpEvent // daemon to client, Seq 0, on the async event socket: an asynchronous event
	OpCreateSRQ
	OpModifySRQ
	// The connection manager: the daemon's rdma_cm, its IDs the process's
	// objects (KindCMID), their events CM_EVENT messages (Seq 0).
	OpCMCreateID
	OpCMBindAddr
	OpCMResolveAddr
	OpCMResolveRoute
	OpCMListen
	OpCMConnect
	OpCMAccept
	OpCMReject
	OpCMDisconnect
	OpCMEstablish
	OpCMInitQPAttr
	OpCMEvent
	// An event channel (rdma_create_event_channel) is an object (KindCMChannel)
	// whose CM_EVENTs come on a socket of its own, the reply's descriptor:
	// librdmacm's channel fd. CM_CREATE_ID names it (0: the control socket).
	OpCMCreateChannel
	OpCMMigrateID
	// rdma_set_option at level RDMA_OPTION_ID (CMOptionReq).
	OpCMSetOption
	// rdma_notify: CMIDReq, Arg the QP's event (enum ibv_event_type).
	OpCMNotify
	// ibv_query_srq: DestroyReq (KindSRQ), replied QuerySRQRep.
	OpQuerySRQ
	// ibv_attach_mcast, ibv_detach_mcast: McastReq (ib_uverbs_attach_mcast).
	OpAttachMcast
	OpDetachMcast
	// rdma_join_multicast, rdma_leave_multicast: CMJoinReq.
	OpCMJoinMcast
	OpCMLeaveMcast
	numOps
)

var opNames = [...]string{"", "HELLO", "QUERY_DEVICE", "QUERY_PORT", "QUERY_GID", "ALLOC_PD", "REG_MR",
	"CREATE_COMP_CHANNEL", "CREATE_CQ", "CREATE_QP", "MODIFY_QP", "QUERY_QP", "CREATE_AH", "DESTROY", "EVENT", "CREATE_SRQ", "MODIFY_SRQ",
	"CM_CREATE_ID", "CM_BIND_ADDR", "CM_RESOLVE_ADDR", "CM_RESOLVE_ROUTE", "CM_LISTEN", "CM_CONNECT", "CM_ACCEPT",
	"CM_REJECT", "CM_DISCONNECT", "CM_ESTABLISH", "CM_INIT_QP_ATTR", "CM_EVENT", "CM_CREATE_CHANNEL", "CM_MIGRATE_ID",
	"CM_SET_OPTION", "CM_NOTIFY", "QUERY_SRQ", "ATTACH_MCAST", "DETACH_MCAST",
	"CM_JOIN_MCAST", "CM_LEAVE_MCAST"}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint32(o))
}

// Header starts every message. Status is 0 or a positive errno in a reply.
type Header struct {
	Op     Op
	Seq    uint32
	Status int32
	Len    uint32 // the payload's length
}

// HeaderLen is the header's size.
const HeaderLen = 16

// Object kinds, for DESTROY.
const (
	KindPD uint32 = iota + 1
	KindMR
	KindCompChannel
	KindCQ
	KindQP
	KindAH
	KindSRQ
	KindCMID
	KindCMChannel
)

// Payloads. A request's name ends in Req, its reply's in Rep; an op without
// one has an empty payload.
type (
	HelloReq struct {
		Version uint32
		_       uint32
	}
	// HelloRep comes with two descriptors: the session's doorbell, an
	// pipe's write end the client writes to when a ring it produces says
	// RingNeedWakeup; and the async event socket, on which each EVENT comes
	// as a datagram (libibverbs' async_fd).
	HelloRep struct {
		Version  uint32
		_        uint32
		NodeGUID uint64
		Name     [32]byte // the device's, NUL-padded
	}
	DeviceRep struct {
		NodeGUID       uint64
		MaxMRSize      uint64
		PageSizeCap    uint64
		VendorID       uint32
		VendorPartID   uint32
		HWVer          uint32
		MaxQP          uint32
		MaxQPWR        uint32
		MaxSGE         uint32
		MaxCQ          uint32
		MaxCQE         uint32
		MaxMR          uint32
		MaxPD          uint32
		MaxQPRdAtom    uint32
		MaxQPInitRdAtm uint32
		MaxAH          uint32
		MaxSRQ         uint32
		MaxSRQWR       uint32
		MaxSRQSGE      uint32
		MaxInline      uint32
		AtomicCap      uint32
		FWVer          [32]byte
	}
	PortRep struct {
		State      uint32
		MaxMTU     uint32
		ActiveMTU  uint32
		GIDTblLen  uint32
		MaxMsgSize uint32
		// ActiveWidth and ActiveSpeed are ibv_port_attr's (version 6).
		ActiveWidth uint8
		ActiveSpeed uint8
		_           uint16
	}
	GIDReq struct {
		Index uint32
		_     uint32
	}
	GIDRep struct {
		GID [16]byte
	}
	HandleRep struct {
		Handle uint32
		_      uint32
	}
	// RegMRReq comes with a memfd sealed against shrinking; the region is
	// Length bytes of it at FileOff, which the client maps at Addr (the MR's
	// IOVA: SGEs and remote peers address it by the client's pointers).
	RegMRReq struct {
		Addr    uint64
		Length  uint64
		FileOff uint64
		PD      uint32
		Access  uint32
	}
	RegMRRep struct {
		Handle uint32
		LKey   uint32
		RKey   uint32
		_      uint32
	}
	// CreateCQRep comes with the memfd holding the CQ's ring at offset 0
	// (shm.CQEntrySize bytes per entry).
	CreateCQReq struct {
		CQE     uint32
		Channel uint32 // 0, or a completion channel's handle
	}
	CreateCQRep struct {
		Handle  uint32
		CQN     uint32
		Entries uint32
		_       uint32
	}
	CreateQPReq struct {
		PD         uint32
		Type       uint32 // enum ibv_qp_type
		SendCQ     uint32
		RecvCQ     uint32
		SRQ        uint32 // 0: none
		SigAll     uint32
		MaxSendWR  uint32
		MaxRecvWR  uint32
		MaxSendSGE uint32
		MaxRecvSGE uint32
		MaxInline  uint32
		_          uint32
	}
	// CreateQPRep comes with the memfd of the QP's rings: the send ring at
	// SQOff, the receive ring at RQOff (none with an SRQ: RQEntries 0).
	CreateQPRep struct {
		Handle      uint32
		QPN         uint32
		MaxSendWR   uint32
		MaxRecvWR   uint32
		MaxSendSGE  uint32
		MaxRecvSGE  uint32
		MaxInline   uint32
		SQEntries   uint32
		SQEntrySize uint32
		SQOff       uint32
		RQEntries   uint32
		RQEntrySize uint32
		RQOff       uint32
		MemLen      uint32
	}
	// AV is struct ibv_ah_attr with its GRH, as RoCE needs it.
	AV struct {
		DGID         [16]byte
		FlowLabel    uint32
		SGIDIndex    uint8
		HopLimit     uint8
		TrafficClass uint8
		Port         uint8
	}
	// QPAttr is struct ibv_qp_attr: only the fields whose bit is in the
	// mask (enum ibv_qp_attr_mask) mean anything.
	QPAttr struct {
		QKey            uint32
		RQPSN           uint32
		SQPSN           uint32
		DestQPN         uint32
		AccessFlags     uint32
		MaxSendWR       uint32
		MaxRecvWR       uint32
		MaxSendSGE      uint32
		MaxRecvSGE      uint32
		MaxInline       uint32
		PKeyIndex       uint16
		State           uint8
		CurState        uint8
		PathMTU         uint8
		PathMigState    uint8
		Port            uint8
		Timeout         uint8
		RetryCnt        uint8
		RNRRetry        uint8
		MinRNRTimer     uint8
		MaxRdAtomic     uint8
		MaxDestRdAtomic uint8
		SQDrainNotify   uint8
		_               [2]byte
		AV              AV
	}
	ModifyQPReq struct {
		Handle uint32
		Mask   uint32
		Attr   QPAttr
	}
	CreateAHReq struct {
		PD uint32
		_  uint32
		AV AV
	}
	CreateSRQReq struct {
		PD     uint32
		MaxWR  uint32
		MaxSGE uint32
		Limit  uint32
	}
	// CreateSRQRep comes with the memfd of the SRQ's receive ring, at
	// offset 0.
	CreateSRQRep struct {
		Handle    uint32
		MaxWR     uint32
		MaxSGE    uint32
		Entries   uint32
		EntrySize uint32
		MemLen    uint32
	}
	ModifySRQReq struct {
		Handle uint32
		Mask   uint32 // enum ibv_srq_attr_mask
		MaxWR  uint32
		Limit  uint32
	}
	// QuerySRQRep is QUERY_SRQ's (struct ibv_srq_attr): Limit is the armed
	// limit, 0 once it fired (rxe_query_srq).
	QuerySRQRep struct {
		MaxWR  uint32
		MaxSGE uint32
		Limit  uint32
		_      uint32
	}
	// SockAddr is an IP address and port: Family 4 or 6 (0: none), the
	// address in IP (IPv4 in its first 4 bytes), Port in host order.
	SockAddr struct {
		IP     [16]byte
		Port   uint16
		Family uint16
		_      uint32
	}
	// CMParam is struct rdma_conn_param (and, in events, rdma_ud_param's QPN
	// and Q_Key).
	CMParam struct {
		QPN                uint32
		QKey               uint32
		PrivLen            uint32
		ResponderResources uint8
		InitiatorDepth     uint8
		FlowControl        uint8
		RetryCount         uint8
		RNRRetryCount      uint8
		SRQ                uint8
		_                  [2]byte
		Private            [196]byte
	}
	// CMIDReq names a CM ID, with an argument: CM_LISTEN's backlog,
	// CM_INIT_QP_ATTR's QP state, CM_NOTIFY's event, CM_CREATE_ID's port
	// space (ID 0).
	CMIDReq struct {
		ID  uint32
		Arg uint32
	}
	CMAddrReq struct {
		ID       uint32
		_        uint32
		Src, Dst SockAddr // CM_BIND_ADDR: Src
	}
	// CMJoinReq is CM_JOIN_MCAST's and CM_LEAVE_MCAST's: the group's address
	// (port ignored) and, to join, the process's number for the join, which
	// its MULTICAST_JOIN and MULTICAST_ERROR carry in CMEventMsg.Listen (the
	// uid of ucma_join_multicast).
	CMJoinReq struct {
		ID   uint32
		UID  uint32
		Addr SockAddr
	}
	// CMConnReq is CM_CONNECT's, CM_ACCEPT's and CM_REJECT's: QP is the
	// handle of the process's QP the connection is for (0 for none: the
	// ID's peer learns Param.QPN, which the daemon sets from the QP).
	CMConnReq struct {
		ID    uint32
		QP    uint32
		Param CMParam
	}
	// CMOptionReq is CM_SET_OPTION's: Option is RDMA_OPTION_ID_TOS,
	// _REUSEADDR or _AFONLY (librdmacm's numbers), Value the TOS byte or
	// the flag.
	CMOptionReq struct {
		ID     uint32
		Option uint32
		Value  uint32
		_      uint32
	}
	CMInitQPAttrRep struct {
		Mask uint32
		_    uint32
		Attr QPAttr
	}
	// CMEventMsg is struct rdma_cm_event: on ID, or (CONNECT_REQUEST) on a
	// new ID the daemon made the process's, with Listen its listener.
	// MULTICAST_JOIN and MULTICAST_ERROR: Listen is the join's uid.
	CMEventMsg struct {
		Type     uint32 // enum rdma_cm_event_type
		ID       uint32
		Listen   uint32
		Status   int32
		Src, Dst SockAddr
		Param    CMParam
		AV       AV // UD: the peer's address vector
	}
	DestroyReq struct {
		Kind   uint32
		Handle uint32
	}
	// McastReq is ATTACH_MCAST's and DETACH_MCAST's, laid out as struct
	// ib_uverbs_attach_mcast: the group's GID, the QP, the MLID (ignored on
	// RoCE, IBA A17.5.6).
	McastReq struct {
		GID  [16]byte
		QP   uint32
		MLID uint16
		_    uint16
	}
	// EventMsg is an asynchronous event (enum ibv_event_type) on an object
	// (its kind and handle; 0 for the device's and the port's).
	EventMsg struct {
		Type   uint32
		Kind   uint32
		Handle uint32
		_      uint32
	}
)

// ErrProtocol is a message that breaks the protocol (short, too long, an
// unknown op, a payload of the wrong size, descriptors where none belong).
var ErrProtocol = errors.New("attach: protocol error")

// Encode appends a message: its header and payload p (a pointer to one of
// the payload structs, or nil).
func Encode(b []byte, op Op, seq uint32, status int32, p any) ([]byte, error) {
	n := 0
	if p != nil {
		n = binary.Size(p)
		if n < 0 {
			return nil, fmt.Errorf("attach: %T is not a payload", p)
		}
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(op))
	b = binary.LittleEndian.AppendUint32(b, seq)
	b = binary.LittleEndian.AppendUint32(b, uint32(status))
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	if p != nil {
		return binary.Append(b, binary.LittleEndian, p)
	}
	return b, nil
}

// DecodeHeader reads a message's header and returns its payload, checking
// that the header's length is the payload's.
func DecodeHeader(b []byte) (Header, []byte, error) {
	if len(b) < HeaderLen {
		return Header{}, nil, fmt.Errorf("%w: %d-byte message", ErrProtocol, len(b))
	}
	le := binary.LittleEndian
	h := Header{Op: Op(le.Uint32(b)), Seq: le.Uint32(b[4:]), Status: int32(le.Uint32(b[8:])), Len: le.Uint32(b[12:])}
	if int(h.Len) != len(b)-HeaderLen {
		return h, nil, fmt.Errorf("%w: %v says %d payload bytes, has %d", ErrProtocol, h.Op, h.Len, len(b)-HeaderLen)
	}
	return h, b[HeaderLen:], nil
}

// DecodePayload reads payload b into p, which must be exactly its size.
func DecodePayload(b []byte, p any) error {
	if n := binary.Size(p); n != len(b) {
		return fmt.Errorf("%w: %d payload bytes, want %d for %T", ErrProtocol, len(b), n, p)
	}
	_, err := binary.Decode(b, binary.LittleEndian, p)
	return err
}

// Send writes one message with fds (closing nothing).
func Send(c *net.UnixConn, msg []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(msg, oob, nil)
	if err == nil && n != len(msg) {
		err = fmt.Errorf("attach: short write, %d of %d bytes", n, len(msg))
	}
	return err
}

// Recv reads one message into buf, and the descriptors that came with it
// (the caller owns them). A message longer than buf, or with more than
// MaxFDs descriptors, is ErrProtocol (its descriptors closed).
func Recv(c *net.UnixConn, buf, oob []byte) (msg []byte, fds []int, err error) {
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if errors.Is(err, io.EOF) {
		err = errClosed // also an empty message: EOF is how a SEQPACKET reads one
	}
	if err != nil {
		if oobn > 0 {
			fds, _ := parseRights(oob[:oobn])
			CloseFDs(fds)
		}
		return nil, nil, err
	}
	if oobn > 0 {
		fds, err = parseRights(oob[:oobn])
	}
	switch {
	case err != nil:
	case flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0:
		err = fmt.Errorf("%w: message or descriptors truncated", ErrProtocol)
	case len(fds) > MaxFDs:
		err = fmt.Errorf("%w: %d descriptors", ErrProtocol, len(fds))
	}
	if err != nil {
		CloseFDs(fds)
		return nil, nil, err
	}
	if n == 0 {
		CloseFDs(fds)
		return nil, nil, errClosed
	}
	return buf[:n], fds, nil
}

var errClosed = fmt.Errorf("attach: the other side closed: %w", net.ErrClosed)

// OOBSpace is the control buffer Recv needs.
var OOBSpace = unix.CmsgSpace(4 * (MaxFDs + 1))

func parseRights(oob []byte) ([]int, error) {
	cms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	var fds []int
	for _, cm := range cms {
		r, err := unix.ParseUnixRights(&cm)
		if err != nil {
			CloseFDs(fds)
			return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

// CloseFDs closes descriptors.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// MakeSockAddr is ap as a SockAddr (Family 0 for an invalid ap).
func MakeSockAddr(ap netip.AddrPort) SockAddr {
	var s SockAddr
	a := ap.Addr()
	switch {
	case !a.IsValid():
		return s
	case a.Is4() || a.Is4In6():
		v4 := a.Unmap().As4()
		copy(s.IP[:], v4[:])
		s.Family = 4
	default:
		s.IP = a.As16()
		s.Family = 6
	}
	s.Port = ap.Port()
	return s
}

// AddrPort is s as a netip.AddrPort (invalid for Family 0), or ErrProtocol
// for a family that is neither.
func (s SockAddr) AddrPort() (netip.AddrPort, error) {
	switch s.Family {
	case 0:
		return netip.AddrPort{}, nil
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(s.IP[:4])), s.Port), nil
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(s.IP), s.Port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("%w: address family %d", ErrProtocol, s.Family)
}
