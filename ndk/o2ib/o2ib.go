// Package o2ib moves messages between peers the way Lustre's o2iblnd does,
// on the ndk layer: one connection per peer pair made with ndk's connector
// and listener, receives posted up front, credits returned in message
// headers so that no sender overruns a receiver, small messages inline and
// large ones by RDMA (a PUT is written by its sender into a buffer its
// receiver lends, a GET read by its requester from a buffer its server
// lends), one scheduler goroutine per NI driven by CQ notifications, and a
// reaper (connd) that disconnects and frees connections outside that path.
//
// A connection is counted as ../shared/reference/o2iblnd-conn-refcount.txt
// says (rules O2-1..O2-7): it starts with one reference for its maker and
// one per posted receive; each queued send and each CQ event waiting for the
// scheduler holds one; its disconnect flushes every posted receive, each
// dropping its own; and the last reference hands it to connd, which frees it.
package o2ib

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/xrnic/xrnic/ndk"
	"github.com/xrnic/xrnic/verbs"
)

// Config sizes an NI. A plain value; zero fields take the defaults.
type Config struct {
	Credits   int // receives a connection posts, which its peer may fill: 8
	MsgSize   int // a message buffer, header included: 4096
	MaxRDMA   int // the largest PUT or GET: 1 MiB
	RDMASlots int // buffers of MaxRDMA for the NI's own PUTs and GETs, and as many for its peers': 8
	// OnGet serves a peer's GET of length bytes named key: the bytes, or nil
	// to refuse. It runs on the scheduler goroutine and must not block.
	OnGet func(key uint64, length int) []byte
	// Timeout closes a connection with sends waiting on its peer that has
	// heard nothing from it this long (kiblnd_check_conns): a dead peer's,
	// whose QP has nothing in flight to fail. 10 s.
	Timeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Credits <= 0 {
		c.Credits = 8
	}
	if c.MsgSize <= 0 {
		c.MsgSize = 4096
	}
	if c.MaxRDMA <= 0 {
		c.MaxRDMA = 1 << 20
	}
	if c.RDMASlots <= 0 {
		c.RDMASlots = 8
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
}

// Errors.
var (
	ErrClosed  = fmt.Errorf("o2ib: connection closed: %w", verbs.ErrClosed)
	ErrRefused = errors.New("o2ib: the peer refused the request")
	ErrTooLong = fmt.Errorf("o2ib: message longer than MaxRDMA: %w", verbs.ErrInvalid)
	ErrTimeout = fmt.Errorf("o2ib: the peer said nothing for Config.Timeout: %w", verbs.ErrUnreachable)
)

// Message is a message a peer sent, as NI.Recv delivers it. A plain value;
// Data is the receiver's.
type Message struct {
	Conn *Conn
	Data []byte
}

// Stats count an NI's connections. A plain value.
type Stats struct {
	Established, Reaped   uint64
	BadMsg, Overrun, RDMA uint64 // connections closed for what their peer did
	TimedOut              uint64 // connections closed for their peer's silence
}

// NI is one network interface of the layer: an ndk adapter, its PD, an RDMA
// slab, a listener, a scheduler and connd. Safe for concurrent use.
type NI struct {
	cfg  Config
	ad   *ndk.Adapter
	pd   *ndk.PD
	slab *ndk.MR
	buf  []byte // the slab's memory: 2 x RDMASlots x MaxRDMA
	pools
	lst  *ndk.Listener
	addr netip.Addr // the listener's: connections go out from it too
	recv chan Message

	schedMu sync.Mutex
	schedC  *sync.Cond
	schedQ  []*Conn
	// connd's lists, as kiblnd's kib_connd_zombies and kib_connd_conns:
	// lists under a lock and a wakeup that never blocks, since connd itself
	// closes (a timeout) and drops last references.
	conndMu   sync.Mutex
	zombies   []*Conn // at zero references, to free (O2-7)
	closing   []*Conn // to disconnect
	conndWake chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup

	mu     sync.Mutex
	conns  map[*Conn]struct{} // every connection not yet freed
	reaped *sync.Cond         // on mu: a connection was freed
	stats  Stats
	done   bool

	// testHookZero runs when a connection's count reaches zero, on the
	// goroutine that dropped the last reference, and testHookFree when connd
	// frees it (O2-7's tests).
	testHookZero, testHookFree func(*Conn)
	// testHookSched runs when the scheduler takes a connection off its list
	// (O2-5's test); testHookAck may rewrite a PUT_ACK or GET_ACK before it
	// goes (a hostile peer's, in the bad-input test).
	testHookSched func(*Conn)
	testHookAck   func(*hdr)
}

// New opens an NI on dev, listening on ap for peers' connections.
func New(dev *verbs.Device, ap netip.AddrPort, cfg Config) (*NI, error) {
	cfg.setDefaults()
	ad, err := ndk.OpenAdapter(dev)
	if err != nil {
		return nil, err
	}
	ni := &NI{cfg: cfg, ad: ad, recv: make(chan Message, 1024),
		conndWake: make(chan struct{}, 1), stop: make(chan struct{}),
		conns: map[*Conn]struct{}{}}
	ni.schedC = sync.NewCond(&ni.schedMu)
	ni.reaped = sync.NewCond(&ni.mu)
	if err := ni.open(ap); err != nil {
		ni.closeObjects()
		ad.Close()
		return nil, err
	}
	ni.wg.Add(2)
	go ni.scheduler()
	go ni.connd()
	return ni, nil
}

func (ni *NI) open(ap netip.AddrPort) error {
	var err error
	if ni.pd, err = ni.ad.CreatePD(nil); err != nil {
		return err
	}
	if ni.buf, err = verbs.MapBuffer(2 * ni.cfg.RDMASlots * ni.cfg.MaxRDMA); err != nil {
		return err
	}
	if ni.slab, err = ni.pd.CreateMR(false, nil); err != nil {
		return err
	}
	if err := ni.slab.Register(ni.buf, ndk.AllowLocalWrite|ndk.AllowRemoteRead|ndk.AllowRemoteWrite, nil); err != nil {
		return err
	}
	ni.pools.init(ni.cfg.RDMASlots)
	if ni.lst, err = ni.ad.CreateListener(ni.incoming, nil); err != nil {
		return err
	}
	ni.addr = ap.Addr()
	return ni.lst.Listen(ap, nil)
}

// Recv delivers the messages peers send, in each connection's order. The
// scheduler waits while it is full: read it.
func (ni *NI) Recv() <-chan Message { return ni.recv }

// Stats returns the NI's counts.
func (ni *NI) Stats() Stats {
	ni.mu.Lock()
	defer ni.mu.Unlock()
	return ni.stats
}

// Conns is the number of connections not yet freed.
func (ni *NI) Conns() int {
	ni.mu.Lock()
	defer ni.mu.Unlock()
	return len(ni.conns)
}

// Connections are the NI's connections not yet freed.
func (ni *NI) Connections() []*Conn {
	ni.mu.Lock()
	defer ni.mu.Unlock()
	cs := make([]*Conn, 0, len(ni.conns))
	for c := range ni.conns {
		cs = append(cs, c)
	}
	return cs
}

// Close closes every connection, waits until connd freed them all, and closes
// the NI.
func (ni *NI) Close() error {
	ni.mu.Lock()
	if ni.done {
		ni.mu.Unlock()
		return ErrClosed
	}
	ni.done = true
	ni.mu.Unlock()
	ni.lst.ControlConnectEvents(true) // no new connections while the old go
	for _, c := range ni.Connections() {
		c.Close()
	}
	ni.mu.Lock()
	for len(ni.conns) > 0 {
		ni.reaped.Wait()
	}
	ni.mu.Unlock()
	close(ni.stop)
	ni.schedMu.Lock()
	ni.schedC.Broadcast()
	ni.schedMu.Unlock()
	ni.wg.Wait()
	ni.closeObjects()
	return ni.ad.Close()
}

func (ni *NI) closeObjects() {
	if ni.lst != nil {
		ndk.Await(ni.lst.Close)
	}
	if ni.slab != nil {
		ndk.Await(ni.slab.Close)
	}
	if ni.pd != nil {
		ndk.Await(ni.pd.Close)
	}
	if ni.buf != nil {
		_ = verbs.UnmapBuffer(ni.buf)
		ni.buf = nil
	}
}

func (ni *NI) slotBytes(i, n int) []byte { return ni.buf[i*ni.cfg.MaxRDMA : i*ni.cfg.MaxRDMA+n] }
func (ni *NI) slotAddr(i int) uint64     { return ni.slab.Addr() + uint64(i*ni.cfg.MaxRDMA) }
func (ni *NI) slotSGE(i, n int) ndk.SGE  { return ni.slab.SGE(uint64(i*ni.cfg.MaxRDMA), uint32(n)) }

func (ni *NI) count(f func(*Stats)) {
	ni.mu.Lock()
	f(&ni.stats)
	ni.mu.Unlock()
}

// private is the connection data both sides send: the magic and the
// credits their receives give.
func (ni *NI) private() []byte {
	b := make([]byte, 6)
	binary.BigEndian.PutUint32(b, magic)
	binary.BigEndian.PutUint16(b[4:], uint16(ni.cfg.Credits))
	return b
}

func peerCredits(p []byte) (int, error) {
	if len(p) < 6 || binary.BigEndian.Uint32(p) != magic || binary.BigEndian.Uint16(p[4:]) == 0 {
		return 0, fmt.Errorf("o2ib: the peer's connection data is not o2ib's: %w", verbs.ErrInvalid)
	}
	return int(binary.BigEndian.Uint16(p[4:])), nil
}

// Connect makes a connection to the NI listening on dst and returns it
// established.
func (ni *NI) Connect(ctx context.Context, dst netip.AddrPort) (*Conn, error) {
	c, err := ni.newConn()
	if err != nil {
		return nil, err
	}
	if c.cn, err = ni.ad.CreateConnector(c.peerDisconnected, nil); err != nil {
		c.fail(err)
		return nil, err
	}
	ch := make(chan error, 1)
	src := netip.AddrPortFrom(ni.addr, 0) // the NI's own address, a port of ndk's
	err = c.cn.Connect(c.qp, src, dst, 1, 1, ni.private(), func(err error) { ch <- err })
	if errors.Is(err, ndk.ErrPending) {
		select {
		case err = <-ch:
		case <-ctx.Done():
			c.fail(ctx.Err()) // the close cancels the Connect
			return nil, ctx.Err()
		}
	}
	if err == nil {
		var p []byte
		if _, _, p, err = c.cn.GetConnectionData(); err == nil {
			if c.credits, err = peerCredits(p); err == nil {
				c.maxCredits = c.credits
				err = c.cn.CompleteConnect(nil)
			}
		}
	}
	if err != nil {
		c.fail(err) // O2-2
		return nil, err
	}
	c.established()
	return c, nil
}

// incoming is the listener's connect event, on the adapter's callback
// goroutine: the connection is made and accepted on another, since making
// it waits for callbacks of the same adapter (kiblnd_passive_connect).
func (ni *NI) incoming(cn *ndk.Connector) { go ni.accept(cn) }

func (ni *NI) accept(cn *ndk.Connector) {
	_, _, p, err := cn.GetConnectionData()
	credits := 0
	if err == nil {
		credits, err = peerCredits(p)
	}
	var c *Conn
	if err == nil {
		c, err = ni.newConn()
	}
	if err != nil {
		cn.Reject(nil)
		ndk.Await(cn.Close)
		return
	}
	// Set before the Accept: the peer's first message may come before the
	// Accept's completion.
	c.cn, c.credits, c.maxCredits = cn, credits, credits
	cn.SetDisconnectEvent(c.peerDisconnected)
	err = cn.Accept(c.qp, 1, 1, ni.private(), func(err error) {
		if err != nil {
			c.fail(err) // O2-2
			return
		}
		c.established()
	})
	if err != nil && !errors.Is(err, ndk.ErrPending) {
		c.fail(err) // O2-2
	}
}
