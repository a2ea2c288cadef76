package verbs

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/xrnic/xrnic/nic/engine"
)

// A device's objects stand on one of two backends: the engine in this
// process, or a daemon's device this process attached to (Options.Attach).
// The attached backend is a provider that registers itself, as libibverbs'
// providers do: import verbs/remote for it (bench does).

// Backend is an attached device: what verbs/remote gives. Its objects'
// methods do their work before they return (the daemon answers each call).
type Backend interface {
	Name() string
	NodeGUID() uint64
	Close() error
	Query() (DeviceAttr, error)
	QueryPort() (PortAttr, error)
	QueryGID(index int) (GID, error)
	AllocPD() (BackendPD, error)
	// CreateCQ creates a CQ; with notify, the CQ has a completion channel
	// of the daemon's, and notify runs for each of its events.
	CreateCQ(cqe int, notify func()) (BackendCQ, error)
	// MapBuffer returns memory the daemon can map (RegMR takes no other).
	MapBuffer(n int) ([]byte, error)
	// SetEventHandler has h called, one event at a time on a goroutine of
	// the backend's, with the device's asynchronous events: their type and the
	// object they concern (kind 0 for the device's and the port's).
	SetEventHandler(h func(t EventType, kind EventObject, handle uint32))
}

// Backend returns an attached device's backend, nil for an in-process device
// (verbs/rdmacm reaches the daemon's CM through it).
func (d *Device) Backend() Backend {
	if d.b == nil {
		return nil
	}
	return d.b
}

// EventObject is the kind of object an attached device's event concerns.
type EventObject uint8

const (
	EventOnDevice EventObject = iota
	EventOnQP
	EventOnCQ
	EventOnSRQ
)

// attachedKey names an attached device's QP, CQ or SRQ for its events.
type attachedKey struct {
	kind   EventObject
	handle uint32
}

// eventAttached is an attached device's event, with verbs' objects.
func (d *Device) eventAttached(t EventType, kind EventObject, handle uint32) {
	ev := AsyncEvent{Type: t, Port: 1}
	if kind != EventOnDevice {
		o, ok := d.objs.Load(attachedKey{kind, handle})
		if !ok {
			return // destroyed meanwhile: no event names it
		}
		switch x := o.(type) {
		case *QP:
			ev.QP = x
		case *CQ:
			ev.CQ = x
		case *SRQ:
			ev.SRQ = x
		}
	}
	d.dispatch(ev)
}

// track keeps an attached object for its events until op destroyed it.
func (d *Device) track(kind EventObject, handle uint32, o any) {
	d.objs.Store(attachedKey{kind, handle}, o)
}

func (d *Device) untrack(kind EventObject, handle uint32, op *Op) *Op {
	if op.Err() == nil {
		d.objs.Delete(attachedKey{kind, handle})
	}
	return op
}

// BackendPD is an attached device's PD.
type BackendPD interface {
	RegMR(buf []byte, iova uint64, access Access) (BackendMR, error)
	CreateAH(av AV) (BackendAH, error)
	CreateSRQ(a SRQAttr) (BackendSRQ, error)
	CreateQP(a BackendQPInit) (BackendQP, error)
	Dealloc() error
}

// BackendMR is an attached device's memory region.
type BackendMR interface {
	LKey() uint32
	RKey() uint32
	Dereg() error
}

// BackendAH is an attached device's address handle.
type BackendAH interface{ Destroy() error }

// BackendCQ is an attached device's CQ.
type BackendCQ interface {
	Handle() uint32
	Poll(wcs []WC) (int, error)
	// Len is how many completions wait to be polled.
	Len() int
	ReqNotify(solicitedOnly bool)
	Destroy() error
}

// BackendSRQ is an attached device's SRQ.
type BackendSRQ interface {
	Handle() uint32
	PostRecv(wrs []RecvWR) (int, error)
	Modify(a SRQAttr, mask SRQAttrMask) error
	Query() (SRQAttr, error)
	Destroy() error
}

// BackendQPInit is QPInitAttr for a backend.
type BackendQPInit struct {
	Type           QPType
	SendCQ, RecvCQ BackendCQ
	SRQ            BackendSRQ
	Cap            QPCap
	SigAll         bool
}

// BackendQP is an attached device's QP. PostSend's work requests name AHs by
// verbs' objects: AH.Backend gives the backend's.
type BackendQP interface {
	Handle() uint32
	QPN() uint32
	Cap() QPCap
	PostSend(wrs []SendWR) (int, error)
	PostRecv(wrs []RecvWR) (int, error)
	Modify(attr *QPAttr, mask AttrMask) error
	Query() (QPAttr, error)
	Destroy() error
}

// BackendMcastQP is a BackendQP that attaches to multicast groups
// (ibv_attach_mcast, ibv_detach_mcast); a backend without it answers
// ErrUnsupported.
type BackendMcastQP interface {
	AttachMcast(gid GID, lid uint16) error
	DetachMcast(gid GID, lid uint16) error
}

// ErrNoAttacher is Options.Attach without an attached backend registered.
var ErrNoAttacher = fmt.Errorf("verbs: no attached backend (import github.com/xrnic/xrnic/verbs/remote): %w", ErrUnsupported)

var attacher struct {
	sync.Mutex
	dial   func(path string) (Backend, error)
	socket func(iface string) string
}

// RegisterAttacher registers the attached backend: dial attaches to the daemon
// on a socket, socket names the socket of the daemon on an interface.
// verbs/remote calls it.
func RegisterAttacher(dial func(path string) (Backend, error), socket func(iface string) string) {
	attacher.Lock()
	defer attacher.Unlock()
	attacher.dial, attacher.socket = dial, socket
}

// attachPath is the socket Open attaches through: Options.Attach, or the
// daemon's on Options.Interface when one is listening there (and no Link is
// given), or "".
func attachPath(o *Options) (string, error) {
	attacher.Lock()
	dial, socket := attacher.dial, attacher.socket
	attacher.Unlock()
	switch {
	case o.Attach != "":
		if dial == nil {
			return "", ErrNoAttacher
		}
		return o.Attach, nil
	case o.InProcess || o.Link != nil || len(o.Links) > 0 || o.Interface == "" || socket == nil:
		return "", nil
	}
	p := socket(o.Interface)
	if _, err := os.Stat(p); err != nil {
		return "", nil
	}
	return p, nil
}

// openAttached opens a device on a daemon's.
func openAttached(o Options, path string) (*Device, error) {
	attacher.Lock()
	dial := attacher.dial
	attacher.Unlock()
	if o.Pcap != nil || o.Link != nil {
		return nil, fmt.Errorf("%w: Pcap and Link are an in-process device's (the daemon's --pcap records its own)", ErrInvalid)
	}
	b, err := dial(path)
	if err != nil {
		return nil, err
	}
	d := &Device{handlers: map[int]func(AsyncEvent){}, logf: o.Logf, b: b}
	if d.logf == nil {
		d.logf = func(string, ...any) {}
	}
	if err := d.readGIDs(); err != nil {
		b.Close()
		return nil, err
	}
	b.SetEventHandler(d.eventAttached)
	name := o.Name
	if name == "" {
		name = b.Name()
	}
	err = registry.addDevice(d, name)
	if errors.Is(err, ErrExists) && o.Name == "" {
		err = registry.addDevice(d, "") // the daemon's name is taken here: the next free
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return d, nil
}

// attachedOp is the Op of an attached backend's call, done when it returned.
func attachedOp(err error) *Op { return engine.DoneOp(err) }

// errAttached is what an attached device answers for what it does not do yet.
func errAttached(what string) error {
	return fmt.Errorf("verbs: %s on an attached device: %w", what, ErrUnsupported)
}

// readGIDs reads the attached port's GID table once: GIDs, QueryGID and
// AVFromWC (once per UD receive) answer from it without a round trip.
func (d *Device) readGIDs() error {
	a, err := d.b.QueryPort()
	if err != nil {
		return err
	}
	// The table's length is its capacity: the entries end at the first
	// index the daemon has none for.
	for i := range a.GIDTblLen {
		g, err := d.b.QueryGID(i)
		if err != nil {
			break
		}
		d.gids = append(d.gids, g)
	}
	return nil
}
