// Protection domains and what lives in them: memory regions, address handles,
// shared receive queues; and completion queues on the device.

package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
)

// PD is a protection domain (ibv_pd). Safe for concurrent use.
type PD struct {
	d      *Device
	handle uint32
	refs   atomic.Int32 // MRs, QPs, AHs and SRQs created in it
	dead   atomic.Bool
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	if d.isClosed() {
		return nil, errorf(ErrClosed, "device is closed")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.npd >= MaxPD {
		return nil, errorf(ErrLimit, "%d PDs", MaxPD)
	}
	d.npd++
	d.pdSeq++
	return &PD{d: d, handle: d.pdSeq}, nil
}

func (d *Device) isClosed() bool {
	d.ctlMu.Lock()
	defer d.ctlMu.Unlock()
	return d.stopped
}

// Handle is the PD's number, the pd argument of mr.Table lookups.
func (pd *PD) Handle() uint32 { return pd.handle }

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.d }

// Dealloc frees the PD (ibv_dealloc_pd); it fails with ErrBusy while objects
// created in it exist.
func (pd *PD) Dealloc() error {
	if pd.refs.Load() != 0 {
		return errorf(ErrBusy, "PD %d still has %d objects", pd.handle, pd.refs.Load())
	}
	if pd.dead.Swap(true) {
		return errorf(ErrClosed, "PD %d", pd.handle)
	}
	pd.d.mu.Lock()
	pd.d.npd--
	pd.d.mu.Unlock()
	return nil
}

// use takes a reference for an object created in the PD.
func (pd *PD) use() error {
	if pd.dead.Load() {
		return errorf(ErrClosed, "PD %d", pd.handle)
	}
	if pd.d.isClosed() {
		return errorf(ErrClosed, "device is closed")
	}
	pd.refs.Add(1)
	return nil
}

func (pd *PD) unuse() { pd.refs.Add(-1) }

// MR is a registered memory region (ibv_mr). Safe for concurrent use: Rereg and
// Dereg serialise on the MR's own mutex; the accessors read the current
// registration atomically.
type MR struct {
	mu   sync.Mutex // guards pd against Rereg; held by Rereg and Dereg
	pd   *PD
	r    *mr.Region
	dead atomic.Bool
}

// RegMR registers buf as a memory region whose first byte has IOVA iova
// (ibv_reg_mr with an explicit IOVA; Go has no addresses to offer).
func (pd *PD) RegMR(buf []byte, iova uint64, access mr.Access) (*MR, error) {
	if err := pd.use(); err != nil {
		return nil, err
	}
	r, err := pd.d.mrs.Register(pd.handle, buf, iova, access)
	if err != nil {
		pd.unuse()
		return nil, errorf(ErrInvalid, "%v", err)
	}
	return &MR{pd: pd, r: r}, nil
}

// AllocFastRegMR reserves a fast-registration region (ib_alloc_mr): it has keys
// but no memory until Region().FastReg binds some. Only such regions can be
// invalidated by a SEND with Invalidate.
func (pd *PD) AllocFastRegMR() (*MR, error) {
	if err := pd.use(); err != nil {
		return nil, err
	}
	r, err := pd.d.mrs.AllocFastReg(pd.handle)
	if err != nil {
		pd.unuse()
		return nil, errorf(ErrLimit, "%v", err)
	}
	return &MR{pd: pd, r: r}, nil
}

// FastReg binds buf at iova with access to a fast-registration region under key,
// whose low byte the consumer picks (the REG_MR work request's effect, IBTA
// 10.6.3.3).
func (m *MR) FastReg(key uint32, buf []byte, iova uint64, access mr.Access) error {
	if err := m.pd.d.mrs.FastReg(m.r, key, m.pd.handle, buf, iova, access); err != nil {
		return errorf(ErrInvalid, "%v", err)
	}
	return nil
}

// LKey is the local key.
func (m *MR) LKey() uint32 { return m.r.LKey() }

// RKey is the remote key.
func (m *MR) RKey() uint32 { return m.r.RKey() }

// Addr is the IOVA of the region's first byte.
func (m *MR) Addr() uint64 { return m.r.Addr() }

// Len is the region's length.
func (m *MR) Len() int { return m.r.Len() }

// Bytes is the registered memory.
func (m *MR) Bytes() []byte { return m.r.Bytes() }

// Region is the underlying mr.Region.
func (m *MR) Region() *mr.Region { return m.r }

// SGE returns an SGE for length bytes at offset off of the region.
func (m *MR) SGE(off uint64, length uint32) SGE {
	return SGE{Addr: m.Addr() + off, Length: length, LKey: m.LKey()}
}

// PD returns the MR's protection domain (the new one after a Rereg with ReregPD).
func (m *MR) PD() *PD {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pd
}

// Rereg changes what the region describes (ibv_rereg_mr): flags says which of pd,
// the translation (buf, whose first byte gets IOVA iova) and access to take; the
// other arguments are ignored (a non-zero access without ReregAccess is an error,
// as in libibverbs). The region keeps its index but gets a new key byte: its old
// L_Key and R_Key stop working at once (a peer's RDMA with the old R_Key fails
// with REM_ACCESS_ERR) and LKey and RKey return the new ones. Work requests
// already posted with the old L_Key fail when the engine reaches them. On error
// nothing changes; errors wrap ErrInvalid and the mr package's sentinel,
// ErrClosed, or ErrWrongPD for a PD of another device.
func (m *MR) Rereg(flags mr.ReregFlags, pd *PD, buf []byte, iova uint64, access mr.Access) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead.Load() {
		return errorf(ErrClosed, "MR %#x", m.r.LKey())
	}
	npd := m.pd
	if flags&mr.ReregPD != 0 {
		if pd == nil {
			return errorf(ErrInvalid, "rereg to a nil PD")
		}
		if pd.d != m.pd.d {
			return errorf(ErrWrongPD, "the PD belongs to another device")
		}
		if pd != m.pd {
			if err := pd.use(); err != nil {
				return err
			}
			npd = pd
		}
	}
	if _, err := m.pd.d.mrs.Reregister(m.r, flags, npd.handle, buf, iova, access); err != nil {
		if npd != m.pd {
			npd.unuse()
		}
		return fmt.Errorf("engine: rereg MR %#x: %w: %w", m.r.LKey(), ErrInvalid, err)
	}
	if npd != m.pd {
		m.pd.unuse()
		m.pd = npd
	}
	return nil
}

// Dereg deregisters the region (ibv_dereg_mr): its keys stop working at once.
func (m *MR) Dereg() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead.Swap(true) {
		return errorf(ErrClosed, "MR %#x", m.r.LKey())
	}
	if err := m.pd.d.mrs.Deregister(m.r); err != nil {
		return errorf(ErrInvalid, "%v", err)
	}
	m.pd.unuse()
	return nil
}

// AH is an address handle (ibv_ah) for UD sends. Immutable; safe for concurrent use.
type AH struct {
	pd   *PD
	av   AV
	rt   *route
	dead atomic.Bool
}

// CreateAH creates an address handle (ibv_create_ah). It resolves the next hop's
// MAC if the AV has none, so it may block like ibv_create_ah does for RoCE.
func (pd *PD) CreateAH(av AV) (*AH, error) {
	d := pd.d
	rp, err := d.resolveAV(&av)
	if err != nil {
		return nil, err
	}
	rt, err := newRoute(rp)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.nah >= MaxAH {
		d.mu.Unlock()
		return nil, errorf(ErrLimit, "%d AHs", MaxAH)
	}
	d.nah++
	d.mu.Unlock()
	if err := pd.use(); err != nil {
		d.mu.Lock()
		d.nah--
		d.mu.Unlock()
		return nil, err
	}
	return &AH{pd: pd, av: av, rt: rt}, nil
}

// AV returns the address vector the AH was created with.
func (ah *AH) AV() AV { return ah.av }

// Destroy destroys the AH (ibv_destroy_ah). Sends already posted with it still go.
func (ah *AH) Destroy() error {
	if ah.dead.Swap(true) {
		return errorf(ErrClosed, "AH")
	}
	d := ah.pd.d
	d.mu.Lock()
	d.nah--
	d.mu.Unlock()
	ah.pd.unuse()
	return nil
}

// CreateCQ creates a completion queue for at least cqe completions (cq.New). Its
// overflow is also reported to the device's event handler as EventCQErr, after
// opts.OnError. Any cq.CQ works with the device; this one just reports there.
func (d *Device) CreateCQ(cqe int, opts cq.Options) (*cq.CQ, error) {
	if d.isClosed() {
		return nil, errorf(ErrClosed, "device is closed")
	}
	if cqe > MaxCQE {
		return nil, errorf(ErrInvalid, "CQ of %d entries exceeds %d", cqe, MaxCQE)
	}
	user := opts.OnError
	opts.OnError = func(c *cq.CQ) {
		if user != nil {
			user(c)
		}
		d.evq.post(AsyncEvent{Type: EventCQErr, CQ: c})
	}
	c, err := cq.New(cqe, opts)
	if err != nil {
		return nil, errorf(ErrInvalid, "%v", err)
	}
	return c, nil
}
