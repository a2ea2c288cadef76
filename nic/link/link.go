// Package link is the NIC engine's wire: it moves whole Ethernet frames carrying
// RoCEv2 between the engine and the network, in batches (DESIGN.md, "Link interface").
//
// Three implementations share one interface: AF_XDP (the fast path: an XDP program
// steers UDP port 4791 into AF_XDP sockets), a UDP socket on port 4791 (no privileges
// needed: the fallback) and an in-memory pair for tests. The engine always builds and
// parses whole frames, so its ICRC covers exactly the headers that travel.
package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/xrnic/xrnic/nic/errs"
)

// Kind names a Link implementation.
type Kind int

// Link kinds.
const (
	KindAuto   Kind = iota // AF_XDP when the program attaches, else UDP (Open only)
	KindAFXDP              // XDP steering program + AF_XDP sockets
	KindUDP                // a kernel UDP socket bound to port 4791
	KindMemory             // an in-memory pair (tests)
	KindUDPGSO             // KindUDP sending with GSO and receiving with GRO (UDPOptions.Offload)
)

func (k Kind) String() string {
	switch k {
	case KindAuto:
		return "auto"
	case KindAFXDP:
		return "af_xdp"
	case KindUDP:
		return "udp"
	case KindMemory:
		return "memory"
	case KindUDPGSO:
		return "udp-gso"
	}
	return "kind(?)"
}

// ParseKind reads a kind as the daemon's and bench's flags spell it.
func ParseKind(s string) (Kind, error) {
	for k := KindAuto; k <= KindUDPGSO; k++ {
		if k.String() == s {
			return k, nil
		}
	}
	if s == "xdp" || s == "afxdp" {
		return KindAFXDP, nil
	}
	return 0, errors.Join(ErrBadOption, errors.New("unknown link kind "+s+" (want auto, af_xdp, udp, udp-gso or memory)"))
}

// RoCEv2Port is the IANA UDP destination port of RoCEv2 (IBTA Annex A17.2.3).
const RoCEv2Port = 4791

// Sentinel errors; every error a Link returns wraps one of them.
var (
	ErrClosed      = errs.ErrClosed
	ErrBadOption   = fmt.Errorf("bad link option: %w", errs.ErrInvalid)
	ErrBadFrame    = fmt.Errorf("frame cannot be sent on this link: %w", errs.ErrInvalid)
	ErrUnavailable = fmt.Errorf("link unavailable: %w", errs.ErrUnsupported)
)

// Link moves frames in batches. ReadBatch and WriteBatch belong to one goroutine at a
// time (whoever runs the engine's loop: its goroutine, or a busy poller holding the
// engine's drive lock); Wait belongs to the engine goroutine, and may run while another
// goroutine reads and writes (it touches none of their state). Wake, Info, Stats and
// Close may be called from any goroutine. After Close, every method returns
// ErrClosed (Close itself is idempotent).
type Link interface {
	// ReadBatch copies up to len(bufs) received frames into bufs and stores their
	// lengths in sizes. It never blocks: with nothing pending it returns 0, nil. A
	// frame longer than its buffer is dropped and counted (RxDropped).
	ReadBatch(bufs [][]byte, sizes []int) (int, error)
	// WriteBatch queues frames for transmission and returns how many it took, in
	// order; fewer than len(frames) means the ring is full for now. It never blocks
	// and keeps no reference to the frames after it returns.
	WriteBatch(frames [][]byte) (int, error)
	// Wait blocks until frames may be readable, Wake is called, or timeout passes (a
	// negative timeout waits without limit). Spurious returns are allowed.
	Wait(timeout time.Duration) error
	// Wake makes a current or the next Wait return. Safe from any goroutine.
	Wake()
	Info() Info
	Stats() Stats
	Close() error
}

// Lender is a Link that lends its received frames where they lie (an AF_XDP
// socket's UMEM), instead of copying them into the caller's buffers as
// ReadBatch does: the copy out of memory the kernel just wrote on another CPU
// was the largest copy of a received frame (issue 20's profiles). Lend and
// Reclaim belong to the goroutine that reads.
type Lender interface {
	// Lend stores up to len(frames) received frames in frames. They are the
	// link's memory, which the caller may read and write until it calls
	// Reclaim; a Lend that returned frames must be followed by Reclaim
	// before anything else reads, and Close waits for it. It never blocks:
	// with nothing pending it returns 0, nil and holds nothing. Frames it
	// cannot lend whole are copied into the link's own buffers, and those
	// longer than them dropped and counted (RxDropped), as ReadBatch does.
	Lend(frames [][]byte) (int, error)
	// Reclaim takes back the frames of the last Lend.
	Reclaim()
}

// Lending returns l as a Lender: l itself when it lends, otherwise a Lender
// that copies up to batch frames of up to frameCap bytes into buffers of its
// own (ReadBatch) and lends those, with nothing to give back. It belongs to
// ReadBatch's owner.
func Lending(l Link, batch, frameCap int) Lender {
	if x, ok := l.(Lender); ok {
		return x
	}
	c := &copyLender{l: l, bufs: make([][]byte, batch), sizes: make([]int, batch)}
	for i := range c.bufs {
		c.bufs[i] = make([]byte, frameCap)
	}
	return c
}

// copyLender is Lending's Lender for a link that does not lend.
type copyLender struct {
	l     Link
	bufs  [][]byte
	sizes []int
}

func (c *copyLender) Lend(frames [][]byte) (int, error) {
	n, err := c.l.ReadBatch(c.bufs[:min(len(frames), len(c.bufs))], c.sizes)
	for i := range n {
		frames[i] = c.bufs[i][:c.sizes[i]]
	}
	return n, err
}

func (c *copyLender) Reclaim() {}

// TxLender is a Link that lends its transmit buffers (an AF_XDP socket's
// UMEM), for the writer to build frames where the kernel reads them instead
// of WriteBatch copying them there (3.7 % of the sending engine's thread at
// 64 KiB messages: issue 20's profiles). ReserveTx and SendTx belong to the
// goroutine that writes.
type TxLender interface {
	// TxBufLen is the length of each buffer ReserveTx lends; 0 when the
	// link lends none.
	TxBufLen() int
	// ReserveTx lends up to len(bufs) free transmit buffers, stores them in
	// bufs and returns how many: 0 when none is free now, or the link is
	// closed. They are the link's memory, the caller's to write until
	// SendTx, which must follow before anything else writes (Close waits
	// for it). Several ReserveTx may come before one SendTx; their buffers
	// count in the order lent.
	ReserveTx(bufs [][]byte) int
	// SendTx queues frames for transmission in order, frames[i] the front of
	// the i-th buffer lent since the last SendTx (len(frames) at most their
	// number), and takes back every lent buffer, those beyond frames unsent.
	// Each lent buffer holds its room in the transmit ring, so it queues all
	// of frames; err is as WriteBatch's, with what was queued staying queued.
	SendTx(frames [][]byte) (int, error)
}

// PreWaiter is a Link that readies itself for a Wait in which its reader
// reads nothing: an AF_XDP socket keeps few of its receive buffers on the
// fill ring while the reader keeps up (xsk.Options.FillFrames), and gives the
// kernel all of them before the reader sleeps. BeforeWait belongs to the
// goroutine that reads.
type PreWaiter interface {
	BeforeWait()
}

// Waker is a Link whose Wake rings a wake-up pipe (internal/wakeup): WakeFD
// returns a new write end of it, for another process to wake the link's Wait
// directly (the attach protocol's doorbell). The caller closes it.
type Waker interface {
	WakeFD() (int, error)
}

var errNoWakeFD = fmt.Errorf("link: no wake-up descriptor: %w", errs.ErrUnsupported)

// Info describes a link to the engine.
type Info struct {
	Kind  Kind
	Name  string // interface name ("" for memory links)
	Index int    // interface index
	MTU   int    // IP MTU of the interface: the largest IP packet a frame may carry
	MAC   net.HardwareAddr
	// Speed is the interface's link speed in Mb/s as ethtool reports it when
	// the link is opened (InterfaceSpeed), DefaultSpeed when it reports none;
	// 0 for memory links. The port's active width and speed follow it.
	Speed uint32
	// FixedSourcePort, when non-zero, is the UDP source port every frame leaves with,
	// whatever the engine wrote (a kernel socket bound to 4791 sends from 4791). The
	// engine must build frames with it so that the ICRC the peer checks matches.
	FixedSourcePort uint16
	// FixedIPv4ID: the link sends IPv4 with identification 0 and DF set, whatever the
	// frame said (the kernel does so for an unconnected DF socket); the ICRC covers the
	// IPv4 identification (IBTA 17.3.4 masks only TOS, TTL and checksum).
	FixedIPv4ID bool
}

// Stats counts a link's traffic. Frames dropped for being malformed or too long are
// counted here, never returned as errors.
type Stats struct {
	RxFrames, RxBytes uint64
	TxFrames, TxBytes uint64
	RxDropped         uint64 // received but dropped (buffer too small, malformed for this link)
	TxDropped         uint64 // taken by WriteBatch but not sent (unroutable, too long)
	TxErrors          uint64 // the kernel refused to send
}

// Multicaster is a Link whose interface filters multicast frames (a NIC's
// MAC filter): the engine asks it for a group's frames when a QP first joins
// the group and tells it when the last leaves, as rxe_mcast_add and
// rxe_mcast_del do for the netdev. ip is the group's address (IPv4 or IPv6).
// Safe from any goroutine.
type Multicaster interface {
	JoinGroup(ip netip.Addr) error
	LeaveGroup(ip netip.Addr) error
}
