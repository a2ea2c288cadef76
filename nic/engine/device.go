// The device: Open on a link, the engine goroutine and its loop, control
// operations, device and port attributes.

package engine

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// Config configures Open. The zero value of each field picks its default. A plain
// value: Open copies it.
type Config struct {
	// Clock is where time comes from: clock.System when nil. Tests pass a
	// clock.Manual to move timers deterministically. The engine keeps its own
	// timer heap (no allocation per timer) and reads only Now; a clock.Subscriber
	// wakes it when the time jumps.
	Clock clock.Clock
	// GIDs is the port's GID table (netdev.GIDTable gives it for an interface):
	// index i is GID index i of address vectors. At least one is needed.
	GIDs []netdev.GID
	// MTU caps the port's active MTU, in bytes (256..4096); 0 takes the largest IB
	// MTU the link's IP MTU carries (rxe: eth_mtu_int_to_enum).
	MTU int
	// Batch is the number of frames per ReadBatch and WriteBatch (DefaultBatch).
	Batch int
	// TxBudget is how many packets one QP's requester sends before the next QP's
	// turn (DefaultTxBudget).
	TxBudget int
	// MaxMR is the memory region table size (mr.DefaultMaxRegions when 0).
	MaxMR int
	// ResolveMAC finds the next-hop MAC of an address vector that has none; it runs
	// on a goroutine of its own, never the caller's or the engine's. The default
	// asks the kernel (netdev.Resolver) on AF_XDP links, in the network namespace
	// of Open's caller, and uses a zero MAC on other links, which address peers by
	// IP.
	ResolveMAC func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error)
	// EventHandler receives asynchronous events, one at a time and in order, on the
	// device's RoutineEvents goroutine. It must not block for long.
	EventHandler func(AsyncEvent)
	// Logf, if set, logs the start and stop of the device's goroutines.
	Logf func(format string, args ...any)
	// BusyPoll: a CQ poll that finds nothing runs a pass of the engine's loop
	// itself when no other goroutine does (Drive): run to completion, for the
	// latency of a thread that spins on its CQ. A post runs one too while no
	// CQ poller drives, so the posting thread sends its WR with no wake-up;
	// while one does, the post leaves its WR to that poller's next pass, so
	// that a burst of posts leaves in one transmit call (or, should the
	// pollers stop, to the engine goroutine within busyTick, 1 ms). A pass
	// that brings the polled CQ a completion leaves its transmit (the ACKs)
	// to the next pass, so that the completion comes back first and its ACK
	// goes with the reply. Callbacks (CQ handlers, event handlers) may then
	// run in the polling or posting thread. A process whose one goroutine
	// polls does best with GOMAXPROCS 1: with a second P, Go's scheduler
	// moves the poller between threads (bench --busy-poll sets it;
	// docs/performance.md).
	BusyPoll bool
	// PlainThread leaves the engine goroutine's thread at the process's
	// priority. By default the engine locks its thread and raises it to
	// engineNice, as rxe's work runs in softirq, ahead of every thread: a
	// software NIC's engine that waits out the time slices of the threads
	// spinning on its CQs costs them milliseconds (bench's send_lat on a veth
	// pair, 2 cores: 99 % 2.8 ms, against 0.75-1.3 ms raised). Raising takes
	// CAP_SYS_NICE or an RLIMIT_NICE that allows it; without, the thread stays
	// as it is (Logf says so). Not with BusyPoll, whose pollers run the engine
	// themselves and which the goroutine's periodic pass would preempt.
	PlainThread bool
}

// engineNice is the engine thread's nice value: the highest priority of the
// fair class.
const engineNice = -20

// DeviceAttr are the device attributes (struct ibv_device_attr), rxe's values. A
// plain value.
type DeviceAttr struct {
	MaxMRSize       uint64
	PageSizeCap     uint64
	MaxQP           int
	MaxQPWR         int
	MaxSGE          int
	MaxSGERd        int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxResRdAtom    int
	MaxSRQ          int
	MaxSRQWR        int
	MaxSRQSGE       int
	MaxAH           int
	MaxPKeys        int
	MaxInlineData   int
	LocalCAAckDelay int
	PhysPortCnt     int
	AtomicCap       AtomicCap
	// MaxMW is the number of memory windows (they share the regions' key table),
	// MaxFastRegPageListLen the longest page list of a fast-reg region.
	MaxMW                 int
	MaxFastRegPageListLen int
	// CapFlags are the device capability bits (enum ib_uverbs_device_cap_flags)
	// of what this device does beyond the basics.
	CapFlags DeviceCap
}

// DeviceCap is a set of device capability bits with the values of the kernel's
// enum ib_uverbs_device_cap_flags (ibv_device_attr_ex.device_cap_flags_ex). A
// plain value.
type DeviceCap uint64

const (
	CapMemWindow        DeviceCap = 1 << 17 // IB_UVERBS_DEVICE_MEM_WINDOW
	CapMemMgtExtensions DeviceCap = 1 << 21 // IB_UVERBS_DEVICE_MEM_MGT_EXTENSIONS: REG_MR, LOCAL_INV, SEND_WITH_INV
	CapMemWindowType2B  DeviceCap = 1 << 24 // IB_UVERBS_DEVICE_MEM_WINDOW_TYPE_2B
	CapFlushGlobal      DeviceCap = 1 << 38 // IB_UVERBS_DEVICE_FLUSH_GLOBAL
	CapAtomicWrite      DeviceCap = 1 << 40 // IB_UVERBS_DEVICE_ATOMIC_WRITE
)

// AtomicCap is enum ibv_atomic_cap. A plain value.
type AtomicCap uint8

const (
	AtomicNone AtomicCap = iota // IBV_ATOMIC_NONE
	AtomicHCA                   // IBV_ATOMIC_HCA: atomic with respect to this device's atomics
	AtomicGlob                  // IBV_ATOMIC_GLOB
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "ATOMIC_NONE"
}

// PortState is enum ibv_port_state. A plain value.
type PortState uint8

const (
	PortNop    PortState = 0
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

func (s PortState) String() string {
	switch s {
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	}
	return "NOP"
}

// PortAttr are the port attributes (struct ibv_port_attr) of the device's one port.
// A plain value; its slices are copies.
type PortAttr struct {
	State       PortState
	MaxMTU      qpattr.MTU
	ActiveMTU   qpattr.MTU
	GIDTblLen   int
	PKeyTblLen  int
	MaxMsgSize  uint32
	LinkLayer   string // "Ethernet"
	LinkMTU     int    // the link's IP MTU
	LinkKind    link.Kind
	MAC         net.HardwareAddr
	GIDs        []netdev.GID
	PortCapRoCE bool // RDMA_CORE_CAP_PROT_ROCE_UDP_ENCAP
	// ActiveWidth and ActiveSpeed are the link's speed as rxe reports a
	// netdev's (EthWidthSpeed of link.Info.Speed).
	ActiveWidth PortWidth
	ActiveSpeed PortSpeed
}

// Device is one RDMA device: a port on a link, its engine goroutine, and the
// objects created on it. All methods are safe for concurrent use (MID3).
//
// Lock order: Device.mu, then a QP's ring locks. The engine goroutine takes a QP's
// ring locks to change its state, and Device.mu briefly when it destroys a QP; it
// never waits for anything while holding either, and no API call holds them while
// it waits for the engine. The event handler must not call Close (it would wait
// for itself).
type Device struct {
	info  link.Info
	cfg   Config
	clock clock.Clock
	epoch time.Time
	mtu   qpattr.MTU // active port MTU
	smac  wire.MAC
	mrs   *mr.Table
	lim   qpattr.Limits
	cnt   counters
	evq   eventQueue

	// sh are the engines, one per queue (shard.go); a QP belongs to
	// sh[QPN % len(sh)].
	sh []*shard

	closeOnce sync.Once
	closeErr  error

	// The port's administrative state, as SetPortState reports it. portMu orders a
	// change with its event, so events follow the changes in order.
	portMu   sync.Mutex
	portDown atomic.Bool

	n lifetime // the device's lifetime: its children are PDs and CQs

	mu      sync.Mutex // guards the object bookkeeping below
	cqs     map[*CQ]struct{}
	qpns    map[uint32]*QP
	nextQPN uint32
	npd     int
	nsrq    int
	nah     int
	pdSeq   uint32
	cqSeq   uint32
	macs    map[netip.Addr]wire.MAC // resolved next hops
	res     resolver                // next-hop resolutions in flight
	nsRes   *netdev.Resolver        // the default ResolveMAC's namespace, if any

	// Multicast groups (mcast.go): the control side under mcMu, and the
	// receive path's snapshot of the shards with members.
	mcMu       sync.Mutex
	mcgs       map[netdev.GID]*mcGroup
	mcAttached int
	mcast      atomic.Pointer[mcastTable]
}

type ctlReq struct {
	fn    func(e *engine) error // nil: a Sync, finished at the end of the pass
	op    *Op
	close *lifetime // a close: op completes through evq.finishClose
	fan   *fan      // one of execAll's: fan completes instead of op
}

// finish completes the request's Op (or its share of an execAll).
func (r *ctlReq) finish(err error) {
	if r.fan != nil {
		r.fan.finish(err)
		return
	}
	r.op.finish(err)
}

// Open starts a device on l. The device does not own l: close the device first,
// then the link.
func Open(l link.Link, cfg Config) (*Device, error) { return OpenQueues([]link.Link{l}, cfg) }

// OpenQueues starts a device with one engine goroutine per link: the links of
// one interface's receive queues (link.OpenQueues), each with its own AF_XDP
// socket. A QP belongs to the engine of queue QPN % len(links), which owns its
// transport state and transmits its frames on that queue; a frame that comes in
// on another queue is handed to it (shard.go). The device does not own the
// links: close the device first, then the links.
func OpenQueues(links []link.Link, cfg Config) (*Device, error) {
	if len(links) == 0 || slices.Contains(links, nil) {
		return nil, errorf(ErrInvalid, "no link, or a nil one")
	}
	if len(links) > MaxQueues {
		return nil, errorf(ErrInvalid, "%d queues exceed %d", len(links), MaxQueues)
	}
	info := links[0].Info()
	for _, l := range links[1:] {
		if i := l.Info(); i.Kind != info.Kind || i.Index != info.Index || i.MTU != info.MTU || i.Name != info.Name {
			return nil, errorf(ErrInvalid, "the links are not one interface's queues (%s %s, %s %s)", info.Kind, info.Name, i.Kind, i.Name)
		}
	}
	if len(cfg.GIDs) == 0 {
		return nil, errorf(ErrInvalid, "the GID table is empty")
	}
	if len(cfg.GIDs) > GIDTableLen {
		return nil, errorf(ErrInvalid, "%d GIDs exceed the table's %d", len(cfg.GIDs), GIDTableLen)
	}
	for i, g := range cfg.GIDs {
		if g.IsZero() {
			return nil, errorf(ErrInvalid, "GID %d is zero", i)
		}
	}
	mtuBytes := activeMTU(info.MTU)
	if mtuBytes == 0 {
		return nil, errorf(ErrInvalid, "link MTU %d cannot carry RoCE", info.MTU)
	}
	if cfg.MTU != 0 {
		if _, ok := qpattr.MTUFromBytes(cfg.MTU); !ok {
			return nil, errorf(ErrInvalid, "MTU %d is not an IB MTU", cfg.MTU)
		}
		mtuBytes = min(mtuBytes, cfg.MTU)
	}
	mtu, _ := qpattr.MTUFromBytes(mtuBytes)
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.TxBudget <= 0 {
		cfg.TxBudget = DefaultTxBudget
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	var nsResolver *netdev.Resolver
	if cfg.ResolveMAC == nil && info.Kind == link.KindAFXDP {
		// Resolutions run on goroutines of their own: they look in the namespace
		// of the caller of Open, where the link was opened.
		r, err := netdev.NewResolver()
		if err != nil {
			return nil, errorf(ErrInvalid, "neighbour resolution: %v", err)
		}
		nsResolver = r
		cfg.ResolveMAC = func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
			n, err := r.Resolve(ctx, ip)
			return n.MAC, err
		}
	}
	d := &Device{
		info:    info,
		cfg:     cfg,
		clock:   cfg.Clock,
		epoch:   cfg.Clock.Now(),
		mtu:     mtu,
		mrs:     mr.NewTable(cfg.MaxMR),
		qpns:    make(map[uint32]*QP),
		cqs:     make(map[*CQ]struct{}),
		nextQPN: minQPN,
		macs:    make(map[netip.Addr]wire.MAC),
		mcgs:    make(map[netdev.GID]*mcGroup),
		nsRes:   nsResolver,
	}
	if len(info.MAC) == 6 {
		d.smac = wire.MAC(info.MAC)
	}
	d.lim = qpattr.Limits{
		MaxRdAtomic: MaxQPInitRdAtom, MaxDestRdAtomic: MaxQPRdAtom, NumPorts: 1,
		NumPKeys: MaxPKeys, MaxMTU: mtu, MaxQPWR: MaxQPWR, MaxSendSGE: MaxSGE,
		MaxRecvSGE: MaxSGE, MaxInlineData: MaxInlineData,
	}
	for i, l := range links {
		d.sh = append(d.sh, newShard(d, i, l))
	}
	d.connectShards()
	d.res.init()
	d.evq.start(cfg.EventHandler, cfg.Logf, &d.cnt)
	if s, ok := cfg.Clock.(clock.Subscriber); ok {
		s.Subscribe(d.wake)
	}
	for _, sh := range d.sh {
		go sh.routineEngine()
	}
	d.evq.post(AsyncEvent{Type: EventPortActive, Port: 1})
	return d, nil
}

// wake makes every engine run its loop soon.
func (d *Device) wake() {
	for _, sh := range d.sh {
		sh.wake()
	}
}

// execAll runs fn on every engine goroutine, each on its own queue's engine
// and possibly at the same time; the Op completes when all have, with the
// first error.
func (d *Device) execAll(fn func(e *engine) error) *Op { return d.fanOut(fn, false) }

// fanOut is execAll; with stoppedOK a stopped engine counts as done, not as
// ErrClosed.
func (d *Device) fanOut(fn func(e *engine) error, stoppedOK bool) *Op {
	op := d.newOp()
	f := &fan{op: op, stoppedOK: stoppedOK}
	f.left.Store(int32(len(d.sh)))
	for _, sh := range d.sh {
		sh.enqueueReq(ctlReq{fn: fn, fan: f})
	}
	return op
}

// newOp returns a pending Op whose callbacks run on the device's RoutineEvents.
func (d *Device) newOp() *Op { return newOp(&d.evq) }

// doneOp returns an Op that has completed with err.
func (d *Device) doneOp(err error) *Op {
	o := d.newOp()
	o.finish(err)
	return o
}

// Sync returns an Op that completes after every engine has run one more pass
// of its loop, timers included: after a clock.Manual.Advance, Sync().Wait() returns
// once the timers that became due have fired.
func (d *Device) Sync() *Op { return d.execAll(nil) }

// Close flushes every QP (each outstanding work request completes with
// WR_FLUSH_ERR), stops the engine, stops every CQ's handler calls and waits for
// its handler goroutine (the completions stay pollable), then stops
// RoutineEvents: when Close returns, no callback of any
// object of the device runs or will run (NDKPI LT12). Later calls return the first
// result. Objects of a closed device fail with ErrClosed. Called from a callback
// of the device (an event handler, an Op callback, a CQ handler) it would wait for
// itself: it returns an error wrapping ErrDeadlock and does nothing (LT11).
func (d *Device) Close() error {
	if d.InCallback() {
		return errorf(ErrDeadlock, "device close from one of its callbacks")
	}
	d.closeOnce.Do(func() {
		d.n.markClosing()
		d.res.stop()
		if d.nsRes != nil {
			d.nsRes.Close()
		}
		op := d.execAll(func(e *engine) error {
			e.shutdown()
			return nil
		})
		d.closeErr = op.Wait()
		for _, sh := range d.sh {
			<-sh.done
		}
		d.mu.Lock()
		cqs := make([]*CQ, 0, len(d.cqs))
		for c := range d.cqs {
			cqs = append(cqs, c)
		}
		d.mu.Unlock()
		for _, c := range cqs {
			c.StopCallbacks() // the flush completions stay pollable
			<-c.Done()
		}
		d.evq.close()
	})
	return d.closeErr
}

// InCallback reports whether the caller is one of the device's callback
// goroutines: RoutineEvents (event handlers, Op callbacks) or a CQ's dispatcher.
func (d *Device) InCallback() bool {
	if d.evq.onGoroutine() {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.cqs {
		if c.OnDispatcher() {
			return true
		}
	}
	return false
}

// Query returns the device attributes (ibv_query_device).
func (d *Device) Query() DeviceAttr {
	return DeviceAttr{
		MaxMRSize: ^uint64(0), PageSizeCap: 0xfffff000, MaxQP: MaxQP, MaxQPWR: MaxQPWR,
		MaxSGE: MaxSGE, MaxSGERd: MaxSGERd, MaxCQ: MaxCQ, MaxCQE: cq.MaxCQE, MaxMR: d.mrs.Cap(),
		MaxPD: MaxPD, MaxQPRdAtom: MaxQPRdAtom, MaxQPInitRdAtom: MaxQPInitRdAtom,
		MaxResRdAtom: MaxResRdAtom, MaxSRQ: MaxSRQ, MaxSRQWR: MaxSRQWR, MaxSRQSGE: MaxSRQSGE,
		MaxAH: MaxAH, MaxPKeys: MaxPKeys, MaxInlineData: MaxInlineData,
		LocalCAAckDelay: LocalCAAckDelay, PhysPortCnt: 1, AtomicCap: AtomicHCA,
		MaxMW: d.mrs.Cap(), MaxFastRegPageListLen: mr.MaxFastRegPages,
		CapFlags: CapMemWindow | CapMemMgtExtensions | CapMemWindowType2B | CapFlushGlobal | CapAtomicWrite,
	}
}

// QueryPort returns the attributes of port 1 (ibv_query_port).
func (d *Device) QueryPort() PortAttr {
	st := PortActive
	if d.linkDead() || d.portDown.Load() {
		st = PortDown
	}
	maxMTU, _ := qpattr.MTUFloor(activeMTU(d.info.MTU))
	width, speed := EthWidthSpeed(d.info.Speed)
	return PortAttr{
		State: st, MaxMTU: maxMTU, ActiveMTU: d.mtu, GIDTblLen: GIDTableLen,
		PKeyTblLen: MaxPKeys, MaxMsgSize: MaxMsgSize, LinkLayer: "Ethernet",
		LinkMTU: d.info.MTU, LinkKind: d.info.Kind, MAC: d.info.MAC,
		GIDs: append([]netdev.GID(nil), d.cfg.GIDs...), PortCapRoCE: true,
		ActiveWidth: width, ActiveSpeed: speed,
	}
}

// Counters returns a snapshot of the device's counters.
func (d *Device) Counters() Counters { return d.cnt.snapshot() }

// EngineCounters returns a snapshot of the engine loop's counters (not rxe's).
// A device of several queues sums its engines' (QueueCounters has each).
func (d *Device) EngineCounters() EngineCounters {
	var s EngineCounters
	for _, q := range d.QueueCounters() {
		for i, v := range q {
			s[i] += v
		}
	}
	return s
}

// QueueCounters returns a snapshot of each queue's engine counters, in the
// order of OpenQueues' links.
func (d *Device) QueueCounters() []EngineCounters {
	s := make([]EngineCounters, len(d.sh))
	for i, sh := range d.sh {
		s[i] = sh.ecnt.snapshot()
	}
	return s
}

// GIDs returns a copy of the port's GID table: index i is GID index i of address
// vectors (ibv_query_gid). Safe from any goroutine; the table never changes.
func (d *Device) GIDs() []netdev.GID { return slices.Clone(d.cfg.GIDs) }

// SetPortState reports a change of the port's link, as a netdev notifier does
// for rxe: QueryPort's State becomes ACTIVE or DOWN and EventPortActive or
// EventPortErr is raised, once per change, in the order of the changes, and a
// change to DOWN counts link_downed. A call that changes nothing raises nothing;
// after a link failure (the engine's own EventPortErr) the port stays DOWN and
// raises nothing more. Safe from any goroutine, including handlers; it never
// blocks (MID1, MID2).
//
// The rules, rxe's and ib_core's, and where the engine departs from them:
//
//   - The port follows the netdev, ACTIVE when it runs with carrier: a veth whose
//     peer goes down takes this port down too (rxe_net.c rxe_notify ->
//     rxe_port_up, rxe_port_down, rxe_set_port_state on NETDEV_UP, NETDEV_DOWN,
//     NETDEV_CHANGE; since Linux 6.14 core/device.c ib_dispatch_port_state_event,
//     one event per change of ib_get_curr_port_state). rxe counts link_downed
//     as the port goes down.
//   - No QP is touched (core/cache.c only refreshes its port cache): QPs stay in
//     RTS, and posts are taken, since rxe_verbs.c rxe_post_send checks the QP's
//     state, never the port's.
//   - Nor is the data path: the requester keeps handing frames to the link,
//     which drops them while the interface is down, and RC QPs settle by the
//     local ACK timeout (IBTA 9.7.6.1.3; rxe_comp.c retransmit_timer,
//     COMPST_ERROR_RETRY): a link back in time gets the retransmissions, else
//     after retry_cnt+1 timeouts without progress the WR completes with
//     RETRY_EXC_ERR, the QP goes to ERR and the rest is flushed (COMPST_ERROR,
//     rxe_qp_error). rxe is harsher: it routes each packet, and a packet its
//     own stack refuses (no route with the interface down, rxe_net.c
//     rxe_find_route; a drop on the way out, rxe_send) fails the WR at once with
//     LOC_QP_OP_ERR (rxe_req.c rxe_requester). That is an artefact of its path
//     through the IP stack, and would end any flap in a QP error; RoCE NICs ride
//     it out by the timer, and so does the engine. The port state could not gate
//     the data path anyway: it trails the link by up to a second (linkwatch).
//   - NETDEV_UNREGISTER unregisters the rxe device (ib_unregister_device_queued);
//     verbs reports EventPortErr, then EventDeviceFatal (DispatchEvent). The
//     QPs run on as above until the device is closed.
func (d *Device) SetPortState(up bool) {
	d.portMu.Lock()
	defer d.portMu.Unlock()
	if d.portDown.Load() != up {
		return
	}
	d.portDown.Store(!up)
	if d.linkDead() {
		return
	}
	ev := AsyncEvent{Type: EventPortErr, Port: 1}
	if up {
		ev.Type = EventPortActive
	} else {
		d.cnt.inc(CntLinkDowned) // rxe_port_down
	}
	d.evq.post(ev)
}

// DispatchEvent queues ev for the event handler behind the events the engine
// raised before it (ib_dispatch_event). It is for the layers above the engine that
// see conditions the engine cannot, such as the removal of the link's interface
// (EventDeviceFatal). Safe from any goroutine, including handlers; it never blocks
// and never calls the handler itself (MID2, MID5). Events posted after Close are
// dropped.
func (d *Device) DispatchEvent(ev AsyncEvent) { d.evq.post(ev) }

// MRTable is the device's memory region table, for lookups outside the engine.
func (d *Device) MRTable() *mr.Table { return d.mrs }

// since returns the engine's time.
func (d *Device) since() time.Duration { return d.clock.Now().Sub(d.epoch) }

// step is one pass of the engine's loop: control operations, the pollers,
// the frames that came, the timers, the doorbells, and a turn of transmit. It
// reports whether the engine stops, whether it has more work at once, and
// whether the link refused frames. The caller holds e.sh.drive: the engine
// goroutine, or a busy poller (Drive).
func (e *engine) step() (stop, more, blocked bool) {
	d := e.d
	e.sh.ecnt.inc(EngLoops)
	e.now = d.since()
	if !e.runControl() {
		return true, false, false
	}
	// The pollers first: a receive an attached process posted before
	// these frames arrived is on its QP's queue when they are taken
	// (rxe's receive queue is the posted one itself); a UD or UC
	// message otherwise finds none and is dropped.
	busy := e.poll()
	if e.takeHanded() {
		busy = true
	}
	if e.receive() {
		busy = true
	}
	e.fireTimers()
	e.drainDoorbells()
	wrote := e.wrote
	e.wrote = false
	if w := e.wants; w != nil && !e.deferred && (w.Len() > 0 || wrote) {
		// A busy poller's completion is in, or a WRITE it may spin on
		// (perftest's write_lat watches the last byte): it takes it before
		// this pass's ACKs and responses go, which go with its next post or
		// Drive (one pass later at most: a receiver that only polls still
		// ACKs). Its reply then shares their transmit call.
		e.deferred = true
		e.sh.ecnt.inc(EngTxDeferred)
		busy = true
	} else {
		e.deferred = false
		blocked = e.transmit()
	}
	if e.handed != 0 {
		// Frames this pass looped back to its own engine are its next
		// pass's work.
		busy = busy || e.handed&(1<<e.sh.idx) != 0
		e.wakeHanded()
	}
	for _, r := range e.syncs {
		r.finish(nil)
	}
	e.syncs = e.syncs[:0]
	return false, busy || (len(e.active) > 0 && !blocked), blocked
}

// engine is the state of the engine's loop: only the holder of its shard's drive
// touches it (the engine goroutine, or a busy poller in Drive).
type engine struct {
	d        *Device
	sh       *shard
	now      time.Duration
	qps      qpTable
	active   []*QP // QPs with transmit work, in turn order
	next     []*QP // the next round of active
	timers   timerHeap
	tx       txBatch
	rx       link.Lender // the link, lending its frames in place or copies of them
	rxFrames [][]byte    // the frames of the last Lend
	pkt      wire.Packet
	wc       cq.WC
	syncs    []ctlReq
	pending  []ctlReq
	handed   uint64      // the shards this pass handed frames to, a bit each
	held     []heldFrame // frames to the device itself whose engine's ring was full (hold)
	pollers  []Poller    // AddPoller's
	budget   int
	mtu      int                      // port MTU in bytes (UD)
	scratch  []byte                   // one READ response's payload gathered from a page list
	wants    *cq.CQ                   // Drive's: the CQ its caller polls
	deferred bool                     // the last pass left its transmit to the next (wants)
	wrote    bool                     // this pass ended an inbound WRITE message
	polled   bool                     // the goroutine's: busy pollers drove while it last slept
	nap      *time.Timer              // the goroutine's: waitKick's timer
	rooms    map[netdev.GID]*destRoom // RC PSNs in flight per destination (cwnd.go)
	mcg      map[netdev.GID][]*QP     // this shard's members of each multicast group (mcast.go)
	// The pollers ran since the frames being handled were taken (lookAgain).
	lookedAgain bool

	linkDead atomic.Bool // read by QueryPort
}

func (e *engine) init(d *Device, sh *shard) {
	e.d, e.sh = d, sh
	e.rooms = make(map[netdev.GID]*destRoom)
	frameCap := d.info.MTU + maxEthernetLen
	e.tx = newTxBatch(sh.link, d.cfg.Batch, frameCap, d.info.FixedIPv4ID)
	e.rx = link.Lending(sh.link, d.cfg.Batch, frameCap)
	e.rxFrames = make([][]byte, d.cfg.Batch)
	e.budget = d.cfg.TxBudget
	e.mtu = d.mtu.Bytes()
	e.scratch = make([]byte, qpattr.MTU4096.Bytes())
}

// runControl executes the queued control operations; false means shut down.
func (e *engine) runControl() bool {
	d, sh := e.d, e.sh
	sh.ctlMu.Lock()
	e.pending, sh.ctlQ = sh.ctlQ, e.pending[:0]
	stopped := sh.stopped
	sh.ctlMu.Unlock()
	if e.deferred && (len(e.pending) > 0 || stopped) {
		// The last pass left its ACKs and responses to this one (a busy
		// poller's completion first): they leave before an operation that
		// may destroy, reset or flush their QP, as a NIC's would have.
		e.deferred = false
		e.transmit()
	}
	for i := range e.pending {
		r := &e.pending[i]
		switch {
		case r.fn == nil:
			e.syncs = append(e.syncs, *r)
		case r.close != nil:
			d.evq.finishClose(r.close, r.op, r.fn(e))
		default:
			r.finish(r.fn(e))
		}
		*r = ctlReq{}
	}
	if stopped {
		// shutdown ran: refuse what raced in after it.
		sh.ctlMu.Lock()
		rest := sh.ctlQ
		sh.ctlQ = nil
		sh.ctlMu.Unlock()
		for _, r := range rest {
			r.finish(errDevClosed)
		}
		return false
	}
	return !e.stopping()
}

func (e *engine) stopping() bool {
	e.sh.ctlMu.Lock()
	defer e.sh.ctlMu.Unlock()
	return e.sh.stopped
}

// shutdown destroys every QP, flushing its work requests, and stops the engine.
func (e *engine) shutdown() {
	e.qps.all(e.destroyQP)
	e.tx.flush(e.sh.link, &e.d.cnt, &e.sh.ecnt)
	e.sh.ctlMu.Lock()
	e.sh.stopped = true
	e.sh.ctlMu.Unlock()
}

// receive reads up to passBatches batches of frames and handles them; it
// reports whether any came.
func (e *engine) receive() bool {
	got := false
	// Up to passBatches batches while they come full: as many frames as a
	// pass may send (transmit), so that the ACKs of a pass's requests are
	// taken as fast as the requests go (below).
	for range passBatches {
		if e.linkDead.Load() {
			return got
		}
		n, err := e.rx.Lend(e.rxFrames)
		e.sh.ecnt.inc(EngRxPolls)
		if err != nil {
			e.linkFailed()
			return got
		}
		if n == 0 {
			return got
		}
		got = true
		e.lookedAgain = false
		e.sh.ecnt.inc(EngRxBatches)
		e.sh.ecnt.add(EngRxFrames, uint64(n))
		for _, f := range e.rxFrames[:n] {
			e.handleFrame(f, false)
		}
		e.rx.Reclaim()
		if n < len(e.rxFrames) {
			return got
		}
	}
	return got
}

// passBatches bounds a pass of the engine's loop (NAPI's budget): it takes
// at most this many batches of frames, and sends at most as many frames,
// before it looks at the other side again. Unbounded, one pass of 256 QPs'
// requesters sent 460 frames on average while it took one batch of 64 (write_bw
// -q 256 -t 31 -D 14): their ACKs waited in the ring while timers fired on
// requests the responder had (duplicate_request).
const passBatches = 4

// linkFailed marks the port down: the engine keeps serving control operations
// (and flushes on destroy) but moves no more frames.
func (e *engine) linkFailed() {
	if e.linkDead.Swap(true) {
		return
	}
	if !e.d.portDown.Load() {
		e.d.cnt.inc(CntLinkDowned) // not counted twice for one outage
	}
	e.d.evq.post(AsyncEvent{Type: EventPortErr, Port: 1})
}

// busyTick is the longest the engine goroutine sleeps with Config.BusyPoll.
var busyTick = time.Millisecond // a variable for a test that needs sleeps to last

// sleepFor is how long the engine may sleep: until its next timer, or a
// short back-off when the link refused frames; -1 is until woken. The
// caller holds e.sh.drive.
func (e *engine) sleepFor(blocked bool) time.Duration {
	timeout := time.Duration(-1)
	if when, ok := e.timers.next(); ok {
		timeout = max(when-e.d.since(), 0)
	}
	if blocked && (timeout < 0 || timeout > blockedTxBackoff) {
		timeout = blockedTxBackoff
	}
	// A busy poller may arm timers while the engine goroutine sleeps; it
	// looks at them at least every busyTick rather than be woken for each
	// (rxe's timers tick in jiffies, 4 ms at HZ 250).
	if e.d.cfg.BusyPoll && (timeout < 0 || timeout > busyTick) {
		timeout = busyTick
	}
	return timeout
}

// idle waits for frames, a doorbell, a control operation or timeout (-1:
// none). It holds nothing: a busy poller may drive the engine meanwhile.
// quiet: pollers took the frames while it last slept, and no attached process
// rings the link's wake-up pipe itself (no Poller), so only sh.wake can matter.
// It reports whether sh.kick ended the wait before timeout (false when the
// link's Wait ended it, whatever ended that).
func (e *engine) idle(timeout time.Duration, quiet bool) (woken bool) {
	if timeout == 0 {
		return false
	}
	if quiet || e.linkDead.Load() {
		// Pollers that drove while it last slept take the frames: sleep till
		// a doorbell (none while CQ pollers drive: ring) or busyTick, and a
		// frame wakes no one (the sender's kernel skips the wake-up, and
		// this goroutine does not take the drive from a poller). Once none
		// has driven for a busyTick, frames wake it again (a side that does
		// not poll, as read_lat's responder). It parks on sh.kick rather
		// than in poll(2): a goroutine in a system call holds its P, and
		// with every other P spinning in a poller Go's sysmon takes that P
		// back, then stays at its shortest period (20 us, 70 with timer
		// slack) while it finds such Ps. On two cores each of its wake-ups
		// took 9 us from a poller: write_lat --busy-poll's 99 % was 3-4
		// times typical. A dead link's engine waits so too, for sh.wake
		// alone.
		if quiet {
			e.sh.ecnt.inc(EngWakeWaits)
		}
		return e.waitKick(timeout)
	}
	if err := e.sh.link.Wait(timeout); err != nil {
		e.linkFailed()
	}
	select {
	case <-e.sh.kick: // sh.wake's ring ended that wait, or will end the next
	default:
	}
	return false
}

// waitKick waits on sh.kick, which sh.wake sends to, for at most timeout (-1:
// none), and reports whether the kick came first. Its timer is reused: no
// allocation per wait.
func (e *engine) waitKick(timeout time.Duration) bool {
	var tc <-chan time.Time
	if timeout > 0 {
		if e.nap == nil {
			e.nap = time.NewTimer(timeout)
		} else {
			e.nap.Reset(timeout)
		}
		defer e.nap.Stop() // since Go 1.23, no stale tick is left behind
		tc = e.nap.C
	}
	select {
	case <-e.sh.kick:
		return true
	case <-tc:
		return false
	}
}

// fireTimers runs every timer that is due.
func (e *engine) fireTimers() {
	for t := e.timers.popDue(e.now); t != nil; t = e.timers.popDue(e.now) {
		e.sh.ecnt.inc(EngTimersFired)
		qp := t.qp
		switch t.kind {
		case timerRetransmit:
			e.retransmitTimeout(qp)
		case timerRNR:
			e.rnrTimerExpired(qp)
		case timerRoom:
			e.roomTimerExpired(qp)
		}
		e.checkError(qp) // a completion the timer made may have overrun its CQ
	}
}

// drainDoorbells takes the QPs posters rang for and schedules them.
func (e *engine) drainDoorbells() {
	qp := e.sh.dbHead.Swap(nil)
	for qp != nil {
		next := qp.dbNext
		qp.dbNext = nil
		qp.dbQueued.Store(false)
		if qp.live {
			e.doorbell(qp)
		}
		qp = next
	}
}

// schedule puts qp on the active list for the transmit phase.
func (e *engine) schedule(qp *QP) {
	if qp.inActive || !qp.live {
		return
	}
	qp.inActive = true
	e.active = append(e.active, qp)
}

// transmit gives the active QPs turns (responder output first, then the
// requester within the budget), round after round while they have work and
// the pass's bound (passBatches) allows, and writes the frames. It reports
// whether the link left frames unsent (its transmit ring is full), or frames
// to the device itself wait for an engine's ring (hold).
func (e *engine) transmit() (blocked bool) {
	if len(e.held) != 0 && !e.giveHeld() {
		// Frames to the device itself wait for room (hold): no QP
		// builds more meanwhile, as none does before a full transmit
		// ring.
		e.tx.flush(e.sh.link, &e.d.cnt, &e.sh.ecnt)
		return true
	}
	if len(e.active) == 0 && e.tx.empty() {
		// Most passes of an engine that spins, or of a busy poller, have
		// nothing to send: 2.7 a WRITE, 55 instructions each, at 256 QPs
		// (BenchmarkInstructions).
		return false
	}
	e.tx.built = 0
	limit := passBatches * len(e.tx.bufs)
	// The budget is a QP's turn, for fairness among QPs, not the pass's
	// bound: one QP with 100 WRs posted went out 16 frames a pass, each
	// pass a transmit call (write_bw -s 64: 14.7 frames a call). A round
	// that built nothing (its QPs wait on a window, a fence, local work)
	// ends the pass.
	for built := -1; len(e.active) > 0 && e.tx.built > built; {
		built = e.tx.built
		list := e.active
		e.active = e.next[:0]
		for i, qp := range list {
			if blocked || e.tx.built >= limit {
				// The QPs not served keep their turn, ahead of those served
				// (scheduled again so far): in list's storage, which holds
				// both, as the served are among list[:i].
				served := e.active
				n := copy(list, list[i:])
				clear(list[n:])
				e.active = append(list[:n], served...)
				e.next = served[:0]
				e.tx.flush(e.sh.link, &e.d.cnt, &e.sh.ecnt)
				return blocked || e.tx.n > 0
			}
			list[i] = nil
			qp.inActive = false
			if !qp.live {
				continue
			}
			if e.respFlush(qp) || e.runRequester(qp, e.budget) {
				e.schedule(qp)
			}
			if qp.errPending { // a completion the requester made overran its CQ
				e.checkError(qp)
			}
			e.account(qp)
			if e.tx.full() && e.tx.flush(e.sh.link, &e.d.cnt, &e.sh.ecnt) == 0 || len(e.held) != 0 {
				blocked = true
			}
		}
		e.next = list[:0]
		if blocked {
			break
		}
	}
	e.tx.flush(e.sh.link, &e.d.cnt, &e.sh.ecnt)
	return blocked || e.tx.n > 0
}

// txReserve makes room for one frame, writing the batch if it is full; false
// means the link's ring is full and the frame must wait.
func (e *engine) txReserve() bool {
	if !e.tx.full() {
		return true
	}
	e.tx.flush(e.sh.link, &e.d.cnt, &e.sh.ecnt)
	return !e.tx.full()
}
