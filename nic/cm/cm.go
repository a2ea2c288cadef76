package cm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/nic/netdev"
)

// GID is a port GID: the address a MAD comes from or goes to.
type GID = netdev.GID

// Transport sends MADs from the port's QP1. SendMAD sends b (mad.Size bytes,
// copied before it returns) from the port's GID src to QP1 of the port with GID
// dst. It must not block for long and must not call back into the CM; a MAD it
// cannot send is lost, as on the wire (the retransmission timers cover it).
type Transport interface {
	SendMAD(src, dst GID, b []byte) error
}

// Config configures New.
type Config struct {
	Transport Transport   // required
	Clock     clock.Clock // default clock.System
	// CAGUID is the local CA GUID that REQ and REP carry; it names the device to
	// its peers and must stay the same for its lifetime (stale-connection
	// detection keys on it).
	CAGUID uint64
	// PacketLifeTime is the path's packet life time exponent; default 18, what
	// rdma_cm gives a RoCE path in the golden captures (Local ACK Timeout 0x13 =
	// cm_ack_timeout(15, 18)).
	PacketLifeTime uint8
	// ResponseTimeout is the CM response timeout exponent the rdma_cm layer puts
	// in its REQs (CMA_CM_RESPONSE_TIMEOUT, Linux's cma_response_timeout module
	// parameter); default 20 (4.3 s). MaxCMRetries is its Max CM Retries;
	// default 15 (CMA_MAX_CM_RETRIES).
	ResponseTimeout uint8
	MaxCMRetries    uint8
	// TargetACKDelay is the CA's ACK delay exponent a REP carries; default 15, as
	// rxe's local_ca_ack_delay.
	TargetACKDelay uint8
	// Backoff doubles a request's timeout on each retransmission, up to
	// MaxRetryTimeout. Off by default, as ib_cm (which retries on a constant
	// timeout) runs; on, a lossy fabric is probed less often.
	Backoff         bool
	MaxRetryTimeout time.Duration // default 32 s
	// MaxIDs bounds the CM IDs alive at once, those in TimeWait included: a REQ or
	// SIDR_REQ past it is rejected (NO_RESOURCES) and counted, so a flood of REQs
	// holds bounded memory. Those a REQ or SIDR_REQ made hold at most three
	// quarters of it, so that the peers cannot take every ID from local connects.
	// Default 4096.
	MaxIDs int
	// MaxPassiveWait bounds how long an ID made by a REQ or SIDR_REQ waits for
	// its consumer's answer: the REQ's own fields set the wait (its sender's
	// timeout times its retries), up to this; a SIDR_REQ, which carries none,
	// waits what our own SIDR_REQ would. Default 5 minutes.
	MaxPassiveWait time.Duration
}

// Errors. Each wraps a sentinel of the errs vocabulary.
var (
	ErrClosed = fmt.Errorf("cm: closed: %w", errs.ErrClosed)
	ErrState  = fmt.Errorf("cm: not allowed in the CM ID's state: %w", errs.ErrWrongState)
	ErrInUse  = fmt.Errorf("cm: service ID already listened on: %w", errs.ErrExists)
	ErrLimit  = fmt.Errorf("cm: too many CM IDs: %w", errs.ErrLimit)
	// ErrIsConn is Established's on a connection established already
	// (cm_establish: -EISCONN).
	ErrIsConn = fmt.Errorf("cm: connection established already: %w (%w)", errs.ErrWrongState, syscall.EISCONN)
)

// CM is one port's connection manager. All methods are safe for concurrent use;
// handlers run one at a time on the CM's goroutine, RoutineCMEvents, never in the
// call chain of a method or of Receive.
type CM struct {
	cfg Config

	mu        sync.Mutex
	closed    bool
	ids       map[uint32]*ID    // by local comm ID (IDs in TimeWait included)
	remote    map[remoteKey]*ID // by the peer's comm ID and CA GUID: duplicate and stale REQs
	sidr      map[sidrKey]*ID   // SIDR_REQs being answered, by the peer's request ID
	wireIDs   int               // IDs in ids a REQ or SIDR_REQ made
	listeners map[uint64]*ID    // by service ID
	tidHi     uint64

	counters [NumCounters]atomic.Uint64
	events   eventQueue
}

type remoteKey struct {
	commID uint32
	guid   uint64
}

type sidrKey struct {
	gid GID
	id  uint32
}

// New starts a CM and its RoutineCMEvents goroutine; Close stops them.
func New(cfg Config) (*CM, error) {
	if cfg.Transport == nil {
		return nil, fmt.Errorf("cm: a transport is required: %w", errs.ErrInvalid)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.PacketLifeTime == 0 {
		cfg.PacketLifeTime = 18
	}
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 20
	}
	if cfg.MaxCMRetries == 0 {
		cfg.MaxCMRetries = 15
	}
	if cfg.TargetACKDelay == 0 {
		cfg.TargetACKDelay = 15
	}
	if cfg.MaxRetryTimeout == 0 {
		cfg.MaxRetryTimeout = 32 * time.Second
	}
	if cfg.MaxIDs == 0 {
		cfg.MaxIDs = 4096
	}
	if cfg.MaxPassiveWait == 0 {
		cfg.MaxPassiveWait = 5 * time.Minute
	}
	c := &CM{cfg: cfg, ids: map[uint32]*ID{}, remote: map[remoteKey]*ID{},
		sidr: map[sidrKey]*ID{}, listeners: map[uint64]*ID{}}
	c.tidHi = uint64(random32()) << 32
	c.events.start()
	return c, nil
}

// Close stops the CM: every ID's timer is cancelled, no MAD is sent or taken, and no
// handler runs after Close returns (events not yet delivered are discarded).
// IDs are left without notice; the owner tells their consumers first (rdma_cm's
// DEVICE_REMOVAL). From a handler it fails with errs.ErrDeadlock.
func (c *CM) Close() error {
	if c.events.inRoutine() {
		return fmt.Errorf("cm: Close from a handler: %w", errs.ErrDeadlock)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for _, id := range c.ids {
		id.stopTimer()
	}
	c.mu.Unlock()
	c.events.stop()
	return nil
}

// ResponseTimeout and MaxCMRetries return the values the consumer's REQs and
// SIDR_REQs should carry (Config).
func (c *CM) ResponseTimeout() uint8 { return c.cfg.ResponseTimeout }

func (c *CM) MaxCMRetries() uint8 { return c.cfg.MaxCMRetries }

// LocalACKTimeout returns the QP Local ACK Timeout exponent a connection gets
// (ib_cm's cm_ack_timeout of the CA's ACK delay and the packet life time): the
// value of a REQ path's Local ACK Timeout.
func (c *CM) LocalACKTimeout() uint8 {
	return ackTimeout(c.cfg.TargetACKDelay, c.cfg.PacketLifeTime)
}

// ackTimeout is ib_cm's cm_ack_timeout: the packet life time plus one, raised to
// the CA's ACK delay, at most 31.
func ackTimeout(caACKDelay, pktLife uint8) uint8 {
	t := int(pktLife) + 1
	d := int(caACKDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(pktLife)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(31, t))
}

// NumIDs returns the number of CM IDs the CM holds (TimeWait included).
func (c *CM) NumIDs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// newIDLocked allocates a local comm ID, random and unused (Linux draws them
// cyclically from a random start; a random one is as hard to guess).
func (c *CM) newIDLocked(h Handler) *ID {
	id := &ID{cm: c}
	id.handler.Store(&h)
	for {
		v := random32()
		if _, ok := c.ids[v]; v != 0 && !ok {
			id.localID = v
			break
		}
	}
	id.tid = c.tidHi | uint64(id.localID)
	c.ids[id.localID] = id
	return id
}

// wireFullLocked reports whether a REQ or SIDR_REQ must be refused for lack of
// IDs (MaxIDs).
func (c *CM) wireFullLocked() bool {
	return len(c.ids) >= c.cfg.MaxIDs || c.wireIDs >= c.cfg.MaxIDs*3/4
}

// newWireIDLocked is newIDLocked for an ID a REQ or SIDR_REQ makes.
func (c *CM) newWireIDLocked(h Handler) *ID {
	id := c.newIDLocked(h)
	id.fromWire = true
	c.wireIDs++
	return id
}

// freeIDLocked forgets id's local comm ID.
func (c *CM) freeIDLocked(id *ID) {
	if _, ok := c.ids[id.localID]; ok && id.fromWire {
		c.wireIDs--
	}
	delete(c.ids, id.localID)
}

// NewID creates a CM ID in Idle whose events go to h (ib_create_cm_id).
func (c *CM) NewID(h Handler) (*ID, error) {
	if h == nil {
		return nil, fmt.Errorf("cm: a handler is required: %w", errs.ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if len(c.ids) >= c.cfg.MaxIDs {
		return nil, ErrLimit
	}
	return c.newIDLocked(h), nil
}

func random32() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return binary.LittleEndian.Uint32(b[:])
}

// sendLocked sends one MAD: tid and m, from src to dst.
func (c *CM) sendLocked(src, dst GID, tid uint64, m mad.Message, buf *[mad.Size]byte) {
	mad.Marshal(buf[:], tid, m)
	c.transmit(src, dst, buf[:])
}

func (c *CM) transmit(src, dst GID, b []byte) {
	if err := c.cfg.Transport.SendMAD(src, dst, b); err != nil {
		c.inc(CntSendErrors)
		return
	}
	c.inc(CntSent)
}

// reply answers a MAD for which no ID exists (a REJ for an unknown service, a
// DREP for a connection long gone, a SIDR_REP), with the request's TID.
func (c *CM) reply(src, dst GID, tid uint64, m mad.Message) {
	var buf [mad.Size]byte
	c.sendLocked(src, dst, tid, m, &buf)
}
