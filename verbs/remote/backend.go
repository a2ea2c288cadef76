package remote

import (
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
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
	return verbs.DeviceAttr{MaxMRSize: r.MaxMRSize, PageSizeCap: r.PageSizeCap, MaxQP: int(r.MaxQP),
		MaxQPWR: int(r.MaxQPWR), MaxSGE: int(r.MaxSGE), MaxSGERd: int(r.MaxSGE), MaxCQ: int(r.MaxCQ),
		MaxCQE: int(r.MaxCQE), MaxMR: int(r.MaxMR), MaxPD: int(r.MaxPD), MaxQPRdAtom: int(r.MaxQPRdAtom),
		MaxQPInitRdAtom: int(r.MaxQPInitRdAtm), MaxSRQ: int(r.MaxSRQ), MaxSRQWR: int(r.MaxSRQWR),
		MaxSRQSGE: int(r.MaxSRQSGE), MaxAH: int(r.MaxAH), MaxInlineData: int(r.MaxInline), PhysPortCnt: 1,
		AtomicCap: verbs.AtomicCap(r.AtomicCap)}, err
}

func (b backend) QueryPort() (verbs.PortAttr, error) {
	r, err := b.Device.QueryPort()
	return verbs.PortAttr{State: verbs.PortState(r.State), MaxMTU: verbs.MTU(r.MaxMTU), ActiveMTU: verbs.MTU(r.ActiveMTU),
		GIDTblLen: int(r.GIDTblLen), PKeyTblLen: 1, MaxMsgSize: r.MaxMsgSize, LinkLayer: "Ethernet",
		PortCapRoCE: true}, err
}

func (b backend) AllocPD() (verbs.BackendPD, error) {
	pd, err := b.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return backendPD{pd}, nil
}

func (b backend) CreateCQ(cqe int) (verbs.BackendCQ, error) {
	c, err := b.Device.CreateCQ(cqe, nil)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (b backend) MapBuffer(n int) ([]byte, error) { return shm.Buffer(n) }

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
	scq, ok1 := a.SendCQ.(*CQ)
	rcq, ok2 := a.RecvCQ.(*CQ)
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
