// Package rdmacm is xrnic's librdmacm-shaped connection API: event channels, CM
// IDs bound to IP addresses and ports, and the IB CM (nic/cm) underneath, on the
// device's QP1, speaking Linux rdma_cm's dialect on the wire: service IDs from
// the TCP, UDP and IB port spaces, the 36-byte rdma_cm header at the start of a
// REQ's and SIDR_REQ's private data, SIDR for UD.
//
// As librdmacm does for a QP made with CreateQP, the ID moves its QP through
// INIT, RTR and RTS itself: the passive side in Accept, the active side when
// GetEvent takes the peer's REP (and then reports ESTABLISHED, not
// CONNECT_RESPONSE). Disconnect moves the QP to ERR, so every posted work request
// completes (flushed) before DISCONNECTED.
//
// Events are queued on the ID's EventChannel and handed out by GetEvent, in the
// caller's goroutine: nothing is ever delivered inside another call.
package rdmacm

import (
	"fmt"
	"syscall"

	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/nic/mad"
)

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space): it picks the QP
// type and the service IDs.
type PortSpace uint16

const (
	PSTCP PortSpace = mad.PortSpaceTCP // RC, connected with REQ/REP/RTU
	PSUDP PortSpace = mad.PortSpaceUDP // UD, resolved with SIDR
	PSIB  PortSpace = mad.PortSpaceIB  // RC, as librdmacm's rdma_create_id makes it; service IDs of its own
)

// Option is an rdma_set_option option of level RDMA_OPTION_ID, with
// librdmacm's numbers (RDMA_OPTION_ID_*).
type Option uint32

const (
	OptionTOS       Option = 0 // RDMA_OPTION_ID_TOS: the ID's type of service
	OptionReuseAddr Option = 1 // RDMA_OPTION_ID_REUSEADDR: SetReuseAddr
	OptionAFOnly    Option = 2 // RDMA_OPTION_ID_AFONLY: SetAFOnly
)

// UDPQKey is the Q_Key rdma_cm gives UD QPs of the UDP port space (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// EventType is enum rdma_cm_event_type, with its values.
type EventType int

const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimeWaitExit
)

var eventNames = [...]string{"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
	"RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST",
	"RDMA_CM_EVENT_CONNECT_RESPONSE", "RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
	"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED",
	"RDMA_CM_EVENT_DEVICE_REMOVAL", "RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
	"RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT"}

// String is rdma_event_str's name.
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "UNKNOWN EVENT"
}

// Errno values librdmacm puts, negated, in Event.Status.
const (
	ETIMEDOUT    = 110
	ECONNREFUSED = 111
	ECONNRESET   = 104
	EINVAL       = 22
	ENODEV       = 19
)

// ConnParam is struct rdma_conn_param: what Connect and Accept send, and what a
// CONNECT_REQUEST, ESTABLISHED or REJECTED event received. A plain value.
type ConnParam struct {
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        bool
	RetryCount         uint8 // ignored by Accept
	RNRRetryCount      uint8
	SRQ                bool
	QPN                uint32 // UD: the peer's QPN (ESTABLISHED); Accept: default the ID's QP
}

// UDParam is struct rdma_ud_param: how to reach a UD peer after ESTABLISHED.
type UDParam struct {
	PrivateData []byte
	AV          AV
	QPN         uint32
	QKey        uint32
}

// Errors. Each wraps a sentinel of the errs (and so verbs) vocabulary.
var (
	ErrState   = fmt.Errorf("rdmacm: not allowed in the ID's state: %w", errs.ErrWrongState)
	ErrAddr    = fmt.Errorf("rdmacm: no device has that address: %w", errs.ErrNotFound)
	ErrPrivate = fmt.Errorf("rdmacm: private data too long: %w", errs.ErrInvalid)
	ErrClosed  = fmt.Errorf("rdmacm: closed: %w", errs.ErrClosed)
	ErrBusy    = fmt.Errorf("rdmacm: IDs remain on the channel: %w", errs.ErrBusy)
	// ErrIsConn is Notify's on an established connection (cm_establish's
	// -EISCONN).
	ErrIsConn = fmt.Errorf("rdmacm: connection established already: %w (%w)", errs.ErrWrongState, syscall.EISCONN)
)

// The bind errors are cma_check_port's, and carry its errno for the daemon's
// replies: the same address and port bound already (EADDRINUSE); an overlap
// with an unspecified address on the port, or no free port to draw
// (EADDRNOTAVAIL).
var (
	ErrInUse        = fmt.Errorf("rdmacm: address and port in use: %w (%w)", errs.ErrExists, syscall.EADDRINUSE)
	ErrAddrNotAvail = fmt.Errorf("rdmacm: port taken on an overlapping address: %w (%w)", errs.ErrExists, syscall.EADDRNOTAVAIL)
)

// Private data room for the consumer (librdmacm's limits).
const (
	MaxREQPrivate     = mad.REQPrivateLen - mad.CMAHeaderLen     // 56
	MaxSIDRREQPrivate = mad.SIDRREQPrivateLen - mad.CMAHeaderLen // 180
)
