package ndk

import (
	"context"
	"sync"

	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// Adapter is NDK_ADAPTER: the root of the object tree, opened on a device.
// Its methods are safe from any goroutine (LT4). Every callback of the
// adapter's objects runs on the adapter's one callback goroutine, one at a
// time, in the order the completions and events happened, never inside a call.
type Adapter struct {
	n    node
	dev  *verbs.Device
	disp dispatcher

	kidsGone *sync.Cond // on n.mu: signalled when a successor of the adapter goes
	closeMu  sync.Mutex // one Close at a time

	ch     *rdmacm.EventChannel
	stop   context.CancelFunc
	pumped chan struct{}
	unreg  func()

	idMu sync.Mutex
	ids  map[*rdmacm.ID]idOwner // CM IDs of the adapter's connectors and listeners
	srqs map[*verbs.SRQ]*SRQ    // for the SRQ limit event
}

// idOwner receives the CM events of one ID.
type idOwner interface{ cmEvent(ev *rdmacm.Event) }

// OpenAdapter opens an adapter on dev (NDIS opening the provider's miniport:
// synchronous). The adapter does not own dev: Close leaves it open.
func OpenAdapter(dev *verbs.Device) (*Adapter, error) {
	if dev == nil {
		return nil, ErrInvalid
	}
	// The device's CM answers for it from now on (a REQ to a port nobody
	// listens on gets its REJ), as a RoCE device's does.
	if _, err := dev.CM(cm.Config{}); err != nil {
		return nil, err
	}
	a := &Adapter{dev: dev, ch: rdmacm.NewEventChannel(), pumped: make(chan struct{}),
		ids: map[*rdmacm.ID]idOwner{}, srqs: map[*verbs.SRQ]*SRQ{}}
	a.kidsGone = sync.NewCond(&a.n.mu)
	_ = a.n.init(a, nil)
	a.disp.start()
	ctx, stop := context.WithCancel(context.Background())
	a.stop = stop
	go a.pump(ctx)
	a.unreg = dev.RegisterEventHandler(a.asyncEvent)
	return a, nil
}

// Device returns the device the adapter runs on.
func (a *Adapter) Device() *verbs.Device { return a.dev }

func (a *Adapter) queue(f func()) { a.disp.queue(f) }

// kidGone wakes a blocked Close when one of the adapter's own successors went.
func (a *Adapter) kidGone(n *node) {
	if n == &a.n {
		n.mu.Lock()
		a.kidsGone.Broadcast()
		n.mu.Unlock()
	}
}

// AdapterInfo is NDK_ADAPTER_INFO: the adapter's limits, from the device's
// attributes. A plain value.
type AdapterInfo struct {
	VendorID, DeviceID      uint32
	MaxRegistrationSize     uint64
	MaxWindowSize           uint64
	FRMRPageCount           int
	MaxInitiatorRequestSge  int
	MaxReceiveRequestSge    int
	MaxReadRequestSge       int
	MaxTransferLength       uint32
	MaxInlineDataSize       int
	MaxInboundReadLimit     int
	MaxOutboundReadLimit    int
	MaxReceiveQueueDepth    int
	MaxInitiatorQueueDepth  int
	MaxSrqDepth             int
	MaxCqDepth              int
	LargeRequestThreshold   uint32
	MaxCallerData           int // private data of a Connect
	MaxCalleeData           int // private data of an Accept or Reject
	InOrderDMA              bool
	SupportsMultiEngine     bool
	SupportsRemoteInvalidat bool
}

// maxCalleeData is a REP's private data (IBTA 12.6.8: 196 bytes); rdma_cm puts
// no header in it.
const maxCalleeData = 196

// QueryAdapterInfo is NdkQueryAdapterInfo.
func (a *Adapter) QueryAdapterInfo() (AdapterInfo, error) {
	if !a.n.isOpen() {
		return AdapterInfo{}, ErrClosed
	}
	d, p := a.dev.Query(), a.dev.QueryPort()
	return AdapterInfo{
		VendorID:            0xffffff, // rxe's vendor_id: no OUI of its own
		MaxRegistrationSize: d.MaxMRSize, MaxWindowSize: d.MaxMRSize,
		FRMRPageCount:          d.MaxFastRegPageListLen,
		MaxInitiatorRequestSge: d.MaxSGE, MaxReceiveRequestSge: d.MaxSGE, MaxReadRequestSge: d.MaxSGERd,
		MaxTransferLength: p.MaxMsgSize, MaxInlineDataSize: d.MaxInlineData,
		MaxInboundReadLimit: d.MaxQPRdAtom, MaxOutboundReadLimit: d.MaxQPInitRdAtom,
		MaxReceiveQueueDepth: d.MaxQPWR, MaxInitiatorQueueDepth: d.MaxQPWR,
		MaxSrqDepth: d.MaxSRQWR, MaxCqDepth: d.MaxCQE,
		LargeRequestThreshold: 16 << 10,
		MaxCallerData:         rdmacm.MaxREQPrivate, MaxCalleeData: maxCalleeData,
		InOrderDMA: true, SupportsRemoteInvalidat: true,
	}, nil
}

// Close is NdkCloseObject on the adapter, which blocks (LT12): it returns once
// every successor is closed (the consumer closes them; until then Close waits,
// LT8) and every callback of every object of the adapter has returned (LT10).
// Called from inside a callback of the adapter it would wait for itself: it
// fails with ErrDeadlock and changes nothing (LT11). A second Close fails with
// ErrClosed.
func (a *Adapter) Close() error {
	if a.disp.onIt() {
		return ErrDeadlock
	}
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	a.n.mu.Lock()
	if a.n.st == stClosed {
		a.n.mu.Unlock()
		return ErrClosed
	}
	a.n.st = stClosing
	for a.n.kids > 0 {
		a.kidsGone.Wait()
	}
	a.n.mu.Unlock()
	a.unreg()
	a.stop()
	<-a.pumped
	a.ch.Close()
	a.disp.drain()
	a.n.mu.Lock()
	a.n.st = stClosed
	a.n.mu.Unlock()
	return nil
}

// pump takes the adapter's CM events and hands each to its connector or
// listener.
func (a *Adapter) pump(ctx context.Context) {
	defer close(a.pumped)
	for {
		ev, err := a.ch.GetEvent(ctx)
		if err != nil {
			return
		}
		id := ev.ID
		if ev.Type == rdmacm.EventConnectRequest {
			id = ev.Listen
		}
		a.idMu.Lock()
		o := a.ids[id]
		a.idMu.Unlock()
		if o != nil {
			o.cmEvent(ev)
		} else if ev.Type == rdmacm.EventConnectRequest {
			ev.ID.Reject(nil) // the listener is going
			ev.ID.Destroy()
		}
	}
}

func (a *Adapter) track(id *rdmacm.ID, o idOwner) {
	a.idMu.Lock()
	a.ids[id] = o
	a.idMu.Unlock()
}

// untrack forgets id and destroys it: its events not yet taken are dropped.
func (a *Adapter) untrack(id *rdmacm.ID) {
	a.idMu.Lock()
	delete(a.ids, id)
	a.idMu.Unlock()
	id.Destroy()
}

// asyncEvent hands the SRQ limit event to its SRQ's notification callback.
func (a *Adapter) asyncEvent(ev verbs.AsyncEvent) {
	if ev.Type != verbs.EventSRQLimitReached || ev.SRQ == nil {
		return
	}
	a.idMu.Lock()
	s := a.srqs[ev.SRQ]
	a.idMu.Unlock()
	if s != nil && s.notify != nil {
		s.n.event(func() { s.notify(nil) })
	}
}
