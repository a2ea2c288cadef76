package verbs

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/wire"
)

// MaxQueues bounds Options.Queues.
const MaxQueues = engine.MaxQueues

// Options configures Open.
type Options struct {
	// Name is the device name (ibv_get_device_name), e.g. "xrnic0"; default
	// "xrnic<N>" with the first free N.
	Name string
	// Link is the wire to run on. When nil, Open opens one on Interface with
	// link.Open (AF_XDP, else the UDP fallback) and closes it with the device.
	Link      link.Link
	Interface string
	LinkKind  link.Kind
	// XDPMode is the XDP attach mode of an AF_XDP link Open opens (generic by
	// default). Queues above 1 run an engine per receive queue 0..Queues-1 of
	// Interface, each with its own AF_XDP socket (link.OpenQueues,
	// engine.OpenQueues); on a veth that takes native mode.
	XDPMode bpf.AttachMode
	Queues  int
	// Links, instead of Link, are the links of one interface's receive queues
	// (link.OpenQueues): an engine runs on each. The caller owns them, as it
	// owns Link.
	Links []link.Link
	// GIDs is the port's GID table; default: netdev.GIDTable of the interface.
	GIDs []GID
	// Engine tunes the engine (clock, MTU, batch, ...); its GIDs and EventHandler
	// are set by Open.
	Engine EngineConfig
	// Logf reports the link choice and the start and stop of the device's
	// goroutines.
	Logf func(format string, args ...any)
	// Pcap, when set, receives every frame the device sends and receives, in
	// pcap format (link.Capture); Close flushes it. The writer is the caller's.
	Pcap io.Writer

	// Attach, when set, attaches to the daemon serving this socket (xrnic
	// --attach) instead of running an engine here: the device is the daemon's,
	// shared with every process attached to it. Without it, Open attaches to
	// the daemon on Interface when one listens on its default socket
	// (/run/xrnic/IFACE.attach), unless InProcess is set or a Link is given.
	// Either needs the attached backend: import verbs/remote.
	Attach    string
	InProcess bool
}

// Device is an RDMA device registered with the package (struct ib_device as its
// clients see it). It is fully initialized before it is registered and stays usable
// until Close, its unregistration, returns (MID8). All methods are safe from any
// goroutine.
//
// Port events: when Open opens the link itself (Options.Interface), it watches the
// interface's operational state (netdev.SubscribeLinkEvents, in the calling
// thread's network namespace) on the goroutine RoutineLinkEvents: the link going
// down or up makes the port DOWN or ACTIVE (QueryPort) and raises EventPortErr or
// EventPortActive; the interface's removal (deletion, or a move to another
// namespace) raises EventPortErr and then EventDeviceFatal, once, after which the
// device moves no frames and should be closed. The device is not unregistered on
// its own: clients learn of a removal through their Remove when the application
// calls Close. A caller-supplied Options.Link is not watched (its namespace is not
// known here); report its state with SetPortState. If the subscription
// fails later (netlink overflow), Logf says so and the port keeps its last state.
type Device struct {
	name    string
	eng     *engine.Device // in-process; nil when attached
	b       Backend        // attached (Options.Attach); nil in-process
	link    link.Link
	links   []link.Link // Options.Queues' links (link is the first)
	ownLink bool
	capture *link.Capture // Options.Pcap
	logf    func(string, ...any)

	watchStop context.CancelFunc // nil when the link is not watched
	watchDone chan struct{}      // closed when RoutineLinkEvents returns

	evMu     sync.Mutex
	handlers map[int]func(AsyncEvent)
	nextH    int

	gsiMu   sync.Mutex
	gsi     *gsi // QP1 and the CM, from the first CM call
	closing bool

	guidOnce sync.Once
	guid     uint64

	srqs sync.Map // *engine.SRQ to *SRQ, for events (an SRQ has no Context)
	objs sync.Map // attached: attachedKey to *QP, *CQ or *SRQ, for events
	gids []GID    // attached: the port's GID table, read at Open (the engine's is fixed at its Open too)

	closeOnce sync.Once
	closeErr  error
}

// Open starts a device and registers it: every registered client's Add runs before
// Open returns (MID10: clients may use the device from then on).
func Open(o Options) (*Device, error) {
	if path, err := attachPath(&o); err != nil {
		return nil, err
	} else if path != "" {
		return openAttached(o, path)
	}
	d := &Device{handlers: map[int]func(AsyncEvent){}, logf: o.Logf}
	if d.logf == nil {
		d.logf = func(string, ...any) {}
	}
	l := o.Link
	switch {
	case len(o.Links) > 0 && (l != nil || o.Queues > 1):
		return nil, fmt.Errorf("%w: Links with Link or Queues", ErrInvalid)
	case o.Pcap != nil && (o.Queues > 1 || len(o.Links) > 1):
		return nil, fmt.Errorf("%w: a capture of a device of several queues", ErrInvalid)
	case len(o.Links) > 0:
		l, d.links = o.Links[0], o.Links
	case l == nil:
		if o.Interface == "" {
			return nil, fmt.Errorf("%w: neither a link nor an interface", ErrInvalid)
		}
		var err error
		d.links, err = link.OpenQueues(link.Options{Kind: o.LinkKind, Interface: o.Interface, Mode: o.XDPMode, Logf: o.Logf}, o.Queues)
		if err != nil {
			return nil, err
		}
		l, d.ownLink = d.links[0], true
	case o.Queues > 1:
		return nil, fmt.Errorf("%w: queues of a link given: open them with link.OpenQueues and pass them as Links", ErrInvalid)
	}
	if o.Pcap != nil {
		c, err := link.NewCapture(l, o.Pcap)
		if err != nil {
			if d.ownLink {
				l.Close()
			}
			return nil, err
		}
		l, d.capture = c, c
	}
	d.link = l
	gids := o.GIDs
	if len(gids) == 0 {
		ifc, err := netdev.Lookup(l.Info().Name)
		if err != nil {
			d.closeLink()
			return nil, fmt.Errorf("%w: GID table: %w", ErrInvalid, err)
		}
		for _, e := range netdev.GIDTable(ifc) {
			gids = append(gids, e.GID)
		}
	}
	cfg := o.Engine
	cfg.GIDs = gids
	cfg.EventHandler = d.dispatchEngine
	if cfg.Logf == nil {
		cfg.Logf = o.Logf
	}
	links := d.links
	if len(links) <= 1 {
		links = []link.Link{l} // the capture's, when there is one
	}
	eng, err := engine.OpenQueues(links, cfg)
	if err != nil {
		d.closeLink()
		return nil, err
	}
	d.eng = eng
	if d.ownLink {
		if info := l.Info(); info.Index > 0 && info.Kind != link.KindMemory {
			if err := d.watchLink(info); err != nil {
				eng.Close()
				d.closeLink()
				return nil, err
			}
		}
	}
	if err := registry.addDevice(d, o.Name); err != nil {
		d.stopWatch()
		eng.Close()
		d.closeLink()
		return nil, err
	}
	return d, nil
}

// watchLink subscribes to the state of the link's interface, in the calling
// thread's namespace, and starts RoutineLinkEvents.
func (d *Device) watchLink(info link.Info) error {
	ctx, cancel := context.WithCancel(context.Background())
	evs, err := netdev.SubscribeLinkEvents(ctx, info.Index)
	if err != nil {
		cancel()
		return fmt.Errorf("verbs: port events of %s: %w", info.Name, err)
	}
	d.watchStop = cancel
	d.watchDone = make(chan struct{})
	go d.routineLinkEvents(info.Name, evs)
	return nil
}

// routineLinkEvents turns the interface's state changes into port events until
// the subscription ends. Its first event is the state at Open.
func (d *Device) routineLinkEvents(ifname string, evs <-chan netdev.LinkEvent) {
	defer close(d.watchDone)
	d.logf("verbs: RoutineLinkEvents started on %s", ifname)
	defer d.logf("verbs: RoutineLinkEvents stopped on %s", ifname)
	removed := false
	for ev := range evs {
		switch {
		case ev.Err != nil:
			d.logf("verbs: %s: port events end: %v", ifname, ev.Err)
		case removed:
		case ev.Removed:
			removed = true
			d.eng.SetPortState(false)
			d.eng.DispatchEvent(engine.AsyncEvent{Type: engine.EventDeviceFatal})
		default:
			d.eng.SetPortState(ev.Up)
		}
	}
}

// stopWatch ends RoutineLinkEvents and waits for it (and the netlink socket's
// goroutines behind it).
func (d *Device) stopWatch() {
	if d.watchStop != nil {
		d.watchStop()
		<-d.watchDone
	}
}

func (d *Device) closeLink() {
	if d.ownLink {
		d.link.Close() // a capture flushes as it closes
		for i := 1; i < len(d.links); i++ {
			d.links[i].Close()
		}
	} else if d.capture != nil {
		_ = d.capture.Flush()
	}
}

// Close unregisters the device: every client's Remove runs and returns first
// (MID10), then the link watch ends, then the engine stops (flushing what is
// outstanding) and so do its event handler calls, then the link closes if Open
// opened it. Idempotent; later calls return the first result. Called from a
// callback of this device (an event handler, an Op callback, a CQ handler) it
// would wait for itself: it fails with an error wrapping ErrDeadlock instead.
func (d *Device) Close() error {
	if d.b != nil {
		d.closeOnce.Do(func() {
			registry.removeDevice(d)
			d.closeErr = d.b.Close()
		})
		return d.closeErr
	}
	if d.eng.InCallback() {
		return fmt.Errorf("verbs: close of %s from one of its callbacks: %w", d.name, ErrDeadlock)
	}
	d.closeOnce.Do(func() {
		registry.removeDevice(d)
		d.gsiMu.Lock()
		d.closing = true
		if d.gsi != nil {
			d.gsi.stop()
		}
		d.gsiMu.Unlock()
		d.stopWatch()
		d.closeErr = d.eng.Close()
		d.closeLink()
	})
	return d.closeErr
}

// Name is the device's name.
func (d *Device) Name() string { return d.name }

// Engine is the device's engine, for the package's tests. Applications and the
// daemon use the Device's methods.
func (d *Device) Engine() *engine.Device { return d.eng }

// EngineCounters returns the engine loop's counters (not rxe's: loops, polls,
// batches, idle waits).
func (d *Device) EngineCounters() EngineCounters {
	if d.b != nil {
		return EngineCounters{}
	}
	return d.eng.EngineCounters()
}

// QueueCounters returns each queue's engine counters (Options.Queues or
// Links); one entry for a device of one queue, none when attached.
func (d *Device) QueueCounters() []EngineCounters {
	if d.b != nil {
		return nil
	}
	return d.eng.QueueCounters()
}

// Resources returns a snapshot of the device's QPs, CQs and MRs and the number
// of PDs, SRQs and AHs, as `rdma resource show` lists them. It waits for one pass
// of the engine; ErrClosed after Close.
func (d *Device) Resources() (Resources, error) {
	if d.b != nil {
		return Resources{}, errAttached("Resources")
	}
	return d.eng.Resources()
}

// SetPortState reports the link's state when the application watches it itself
// (a caller-supplied Options.Link): the port goes ACTIVE or DOWN with
// EventPortActive or EventPortErr. Never blocks.
func (d *Device) SetPortState(up bool) {
	if d.b == nil {
		d.eng.SetPortState(up)
	}
}

// Link is the wire the device runs on.
func (d *Device) Link() link.Link { return d.link }

// Query returns the device attributes (ibv_query_device).
func (d *Device) Query() DeviceAttr {
	if d.b != nil {
		a, err := d.b.Query()
		if err != nil {
			d.logf("verbs: %s: query: %v", d.name, err)
		}
		return a
	}
	return d.eng.Query()
}

// QueryPort returns port 1's attributes (ibv_query_port).
func (d *Device) QueryPort() PortAttr {
	if d.b != nil {
		a, err := d.b.QueryPort()
		if err != nil {
			d.logf("verbs: %s: query port: %v", d.name, err)
		}
		a.GIDs = d.GIDs()
		return a
	}
	return d.eng.QueryPort()
}

// QueryGID returns entry index of the port's GID table (ibv_query_gid). An index
// outside the table fails with an error wrapping ErrInvalid.
func (d *Device) QueryGID(index int) (GID, error) {
	gids := d.gids
	if d.b == nil {
		gids = d.eng.GIDs()
	}
	if index < 0 || index >= len(gids) {
		return GID{}, fmt.Errorf("%w: GID index %d (table of %d)", ErrInvalid, index, len(gids))
	}
	return gids[index], nil
}

// GIDs returns a copy of the port's GID table: entry i is GID index i.
func (d *Device) GIDs() []GID {
	if d.b != nil {
		return slices.Clone(d.gids)
	}
	return d.eng.GIDs()
}

// Counters returns the device's counters, named like rxe's hw counters.
func (d *Device) Counters() Counters {
	if d.b != nil {
		return Counters{}
	}
	return d.eng.Counters()
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	if d.b != nil {
		p, err := d.b.AllocPD()
		if err != nil {
			return nil, err
		}
		return &PD{r: p, d: d}, nil
	}
	pd, err := d.eng.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{e: pd, d: d}, nil
}

// CreateCQ creates a completion queue of at least cqe entries (ibv_create_cq).
func (d *Device) CreateCQ(cqe int, o CQOptions) (*CQ, error) {
	c := &CQ{ctx: o.Context}
	if d.b != nil {
		if o.Handler != nil || o.OnError != nil {
			return nil, errAttached("a CQ with handlers")
		}
		var notify func()
		if ch := o.Channel; ch != nil {
			if err := ch.bind(true); err != nil {
				return nil, err
			}
			notify = func() { ch.post(c) }
		}
		r, err := d.b.CreateCQ(cqe, notify)
		if err != nil {
			if o.Channel != nil {
				o.Channel.unuse()
			}
			return nil, err
		}
		c.r, c.d = r, d
		if o.Channel != nil {
			c.ch.Store(o.Channel)
		}
		d.track(EventOnCQ, r.Handle(), c)
		return c, nil
	}
	if o.Channel != nil {
		if err := o.Channel.bind(false); err != nil {
			return nil, err
		}
	}
	eo := engine.CQOptions{Context: c, Logf: o.Logf}
	if o.Channel != nil {
		eo.Channel = o.Channel.e
	}
	if h := o.Handler; h != nil {
		eo.Handler = func(*engine.CQ) { h(c) }
	}
	if h := o.OnError; h != nil {
		eo.OnError = func(*engine.CQ) { h(c) }
	}
	e, err := d.eng.CreateCQ(cqe, eo)
	if err != nil {
		return nil, err
	}
	c.e = e
	return c, nil
}

// RegisterEventHandler adds h to the handlers of the device's asynchronous events
// (ib_register_event_handler). Handlers run one event at a time, in order, on the
// engine's event goroutine, never inside an API call (MID5); they must not block for
// long (MID7). The returned function removes h.
func (d *Device) RegisterEventHandler(h func(AsyncEvent)) (unregister func()) {
	d.evMu.Lock()
	id := d.nextH
	d.nextH++
	d.handlers[id] = h
	d.evMu.Unlock()
	return func() {
		d.evMu.Lock()
		delete(d.handlers, id)
		d.evMu.Unlock()
	}
}

// dispatchEngine is dispatch for an engine event: its objects become verbs'.
func (d *Device) dispatchEngine(ev engine.AsyncEvent) {
	v := AsyncEvent{Type: ev.Type, QP: qpOf(ev.QP), CQ: cqOf(ev.CQ), Port: ev.Port}
	if ev.SRQ != nil {
		if s, ok := d.srqs.Load(ev.SRQ); ok {
			v.SRQ = s.(*SRQ)
		}
	}
	d.dispatch(v)
}

// dispatch fans an event out to the registered handlers. The lock is not held while
// they run, so a handler may register or unregister handlers (MID3).
func (d *Device) dispatch(ev AsyncEvent) {
	d.evMu.Lock()
	hs := make([]func(AsyncEvent), 0, len(d.handlers))
	for id := 0; id < d.nextH; id++ {
		if h, ok := d.handlers[id]; ok {
			hs = append(hs, h)
		}
	}
	d.evMu.Unlock()
	for _, h := range hs {
		h(ev)
	}
}

// AVFromWC returns the address vector back to the sender of a UD receive
// (ibv_init_ah_from_wc): wc must carry the GRH flag and grh be the receive's
// first 40 bytes, where RoCEv2 delivers the IPv6 header, or the IPv4 header in
// the last 20. The source GID index is the one holding the packet's
// destination address. Anything else fails with an error wrapping ErrInvalid.
func (d *Device) AVFromWC(wc *WC, grh []byte) (AV, error) {
	if wc.Flags&cq.GRH == 0 || len(grh) < 40 {
		return AV{}, fmt.Errorf("%w: the completion has no GRH", ErrInvalid)
	}
	var av AV
	var dst netip.Addr
	if v6 := wire.IPv6(grh); v6.Version() == 6 {
		av.DGID, dst = GIDFromAddr(v6.Src()), v6.Dst()
		av.FlowLabel, av.TrafficClass = v6.FlowLabel(), v6.TrafficClass()
	} else if v4 := wire.IPv4(grh[20:]); v4.Version() == 4 {
		av.DGID, dst = GIDFromAddr(v4.Src()), v4.Dst()
		av.TrafficClass = v4.TOS()
	} else {
		return AV{}, fmt.Errorf("%w: the GRH holds no IP header", ErrInvalid)
	}
	want := GIDFromAddr(dst)
	for i, g := range d.GIDs() {
		if g == want {
			av.SGIDIndex, av.HopLimit, av.Port = uint8(i), 0xFF, 1
			return av, nil
		}
	}
	return AV{}, fmt.Errorf("%w: no GID holds %v", ErrInvalid, dst)
}

// Poller is work the engine goroutine does in every loop (the attach server's
// rings); see engine.Poller for its contract.
type Poller = engine.Poller

// AddPoller has the engine goroutine run p in every loop until RemovePoller.
func (d *Device) AddPoller(p Poller) error {
	if d.b != nil {
		return errAttached("AddPoller")
	}
	return d.eng.AddPoller(p)
}

// RemovePoller stops running p; when it returns, p runs no more.
func (d *Device) RemovePoller(p Poller) error {
	if d.b != nil {
		return errAttached("RemovePoller")
	}
	return d.eng.RemovePoller(p)
}

// Wake makes the engine run its loop soon: a poller's doorbell.
func (d *Device) Wake() {
	if d.b == nil {
		d.eng.Wake()
	}
}

// MapBuffer returns n bytes of memory for RegMR on this device: MapBuffer's
// for an in-process device, memory the daemon can map for an attached one.
func (d *Device) MapBuffer(n int) ([]byte, error) {
	if d.b != nil {
		return d.b.MapBuffer(n)
	}
	return MapBuffer(n)
}

// WakeFD returns a descriptor whose write wakes the device's engine, when its
// link has one: the doorbell the attach server hands attached processes. The
// caller closes it.
func (d *Device) WakeFD() (int, error) {
	if d.b != nil {
		return -1, errAttached("WakeFD")
	}
	return d.eng.WakeFD()
}
