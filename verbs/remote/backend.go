package remote

import (
	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/conv"
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// The attached backend of package verbs: importing this package lets
// verbs.Open attach to a daemon (Options.Attach, or the daemon listening on
// an interface's default socket), with verbs' own API on top.
func init() {
	verbs.RegisterAttacher(func(path string) (verbs.Backend, error) {
		d, err := Dial(path)
		if err != nil {
			return nil, err
		}
		return backend{d}, nil
	}, SocketFor)
}

// backend is a Device as verbs.Backend.
type backend struct{ *Device }

func (b backend) Query() (verbs.DeviceAttr, error) {
	r, err := b.Device.Query()
	return conv.VerbsDevice(r), err
}

func (b backend) QueryPort() (verbs.PortAttr, error) {
	r, err := b.Device.QueryPort()
	return conv.VerbsPort(r), err
}

func (b backend) AllocPD() (verbs.BackendPD, error) {
	pd, err := b.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return backendPD{pd}, nil
}

func (b backend) CreateCQ(cqe int, notify func()) (verbs.BackendCQ, error) {
	if notify == nil {
		c, err := b.Device.CreateCQ(cqe, nil)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	// A channel of the CQ's own, whose events a goroutine hands to notify
	// until the channel closes (the CQ's Destroy, or the device's Close).
	ch, err := b.NewCompChannel()
	if err != nil {
		return nil, err
	}
	c, err := b.Device.CreateCQ(cqe, ch)
	if err != nil {
		ch.Destroy()
		return nil, err
	}
	go func() {
		for {
			if _, err := ch.GetEvent(); err != nil {
				return
			}
			notify()
		}
	}()
	return channelCQ{c, ch}, nil
}

// channelCQ is a CQ with its own completion channel.
type channelCQ struct {
	*CQ
	ch *CompChannel
}

func (c channelCQ) Destroy() error {
	if err := c.CQ.Destroy(); err != nil {
		return err
	}
	return c.ch.Destroy()
}

func (b backend) MapBuffer(n int) ([]byte, error) { return shm.Buffer(n) }

func (b backend) SetEventHandler(h func(t verbs.EventType, kind verbs.EventObject, handle uint32)) {
	b.Device.SetEventHandler(func(ev attach.EventMsg) {
		k := verbs.EventOnDevice
		switch ev.Kind {
		case attach.KindQP:
			k = verbs.EventOnQP
		case attach.KindCQ:
			k = verbs.EventOnCQ
		case attach.KindSRQ:
			k = verbs.EventOnSRQ
		}
		h(verbs.EventType(ev.Type), k, ev.Handle)
	})
}

// backendPD is a PD as verbs.BackendPD.
type backendPD struct{ *PD }

func (p backendPD) RegMR(buf []byte, iova uint64, access verbs.Access) (verbs.BackendMR, error) {
	m, err := p.regMR(buf, iova, access)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (p backendPD) CreateAH(av verbs.AV) (verbs.BackendAH, error) {
	ah, err := p.PD.CreateAH(av)
	if err != nil {
		return nil, err
	}
	return ah, nil
}

func (p backendPD) CreateSRQ(a verbs.SRQAttr) (verbs.BackendSRQ, error) {
	s, err := p.PD.CreateSRQ(a)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (p backendPD) CreateQP(a verbs.BackendQPInit) (verbs.BackendQP, error) {
	scq, ok1 := cqOf(a.SendCQ)
	rcq, ok2 := cqOf(a.RecvCQ)
	if !ok1 || !ok2 {
		return nil, errCQ
	}
	init := QPInitAttr{Type: a.Type, SendCQ: scq, RecvCQ: rcq, Cap: a.Cap, SigAll: a.SigAll}
	if a.SRQ != nil {
		if init.SRQ, ok1 = a.SRQ.(*SRQ); !ok1 {
			return nil, errCQ
		}
	}
	qp, err := p.PD.CreateQP(init)
	if err != nil {
		return nil, err
	}
	return qp, nil
}

// cqOf is the CQ behind a backend CQ.
func cqOf(b verbs.BackendCQ) (*CQ, bool) {
	switch c := b.(type) {
	case *CQ:
		return c, true
	case channelCQ:
		return c.CQ, true
	}
	return nil, false
}

// The daemon's CM, as verbs/rdmacm's AttachedCM: rdmacm's IDs on an attached
// device forward to the daemon's.

func (b backend) CreateCMID(ps rdmacm.PortSpace) (rdmacm.AttachedID, error) {
	id, err := b.Device.CreateCMID(ps)
	if err != nil {
		return nil, err
	}
	return attachedID{id}, nil
}

func (b backend) SetCMEventHandler(h func(rdmacm.AttachedEvent)) {
	b.Device.SetCMEventHandler(func(ev *CMEvent) {
		out := rdmacm.AttachedEvent{Type: ev.Type, ID: attachedID{ev.ID}, Status: ev.Status, Src: ev.Src, Dst: ev.Dst,
			Param: ev.Param, UD: ev.UD, MC: ev.MC}
		if ev.Listen != nil {
			out.Listen = attachedID{ev.Listen}
		}
		h(out)
	})
}

// attachedID is a CMID as rdmacm.AttachedID: Connect and Accept name the QP by
// the parameters' QPN.
type attachedID struct{ *CMID }

func (id attachedID) Connect(p rdmacm.ConnParam) error { return id.conn(attach.OpCMConnect, nil, p) }
func (id attachedID) Accept(p rdmacm.ConnParam) error  { return id.conn(attach.OpCMAccept, nil, p) }

var _ rdmacm.AttachedCM = backend{}

var _ verbs.BackendMcastQP = (*QP)(nil)
