// Memory regions (ibv_mr): registration, fast registration, re-registration.

package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xrnic/xrnic/nic/mr"
)

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
		return nil, wrap(err)
	}
	return &MR{pd: pd, r: r}, nil
}

// AllocFastRegMR reserves a fast-registration region of up to maxPages pages
// (ib_alloc_mr with IB_MR_TYPE_MEM_REG and max_num_sg): it has keys but no memory
// until MapSG gives it a page list and a REG_MR work request registers it. Only
// such regions (and type 2 memory windows) can be invalidated.
func (pd *PD) AllocFastRegMR(maxPages int) (*MR, error) {
	if err := pd.use(); err != nil {
		return nil, err
	}
	r, err := pd.d.mrs.AllocFastReg(pd.handle, maxPages)
	if err != nil {
		pd.unuse()
		return nil, wrap(err)
	}
	return &MR{pd: pd, r: r}, nil
}

// MapSG sets the page list the next REG_MR work request on a fast-reg region
// registers, as ib_map_mr_sg does (see mr.Table.MapSG for the rules): sgl's
// buffers as one range from IOVA iova (the address of sgl[0][0] when 0), in pages
// of pageSize bytes. It returns how many buffers it mapped; fewer than len(sgl),
// with an error wrapping ErrLimit, when they need more pages than the region's
// maximum.
func (m *MR) MapSG(sgl [][]byte, pageSize int, iova uint64) (int, error) {
	n, err := m.pd.d.mrs.MapSG(m.r, sgl, pageSize, iova)
	if err != nil {
		return n, wrap(err)
	}
	return n, nil
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

// Dereg deregisters the region (ibv_dereg_mr): its keys stop working at once,
// and work requests already posted with them fail when the engine reaches them.
// A refusal's Op is complete when Dereg returns. Otherwise the Op completes once
// every engine has passed its loop once more (a stopped one holds nothing):
// none still holds a slice of the region it looked up before, so the memory may
// be unmapped or reused when Wait returns, as after ibv_dereg_mr. Until then a
// packet in flight may still be copied to or from it.
func (m *MR) Dereg() *Op {
	if err := m.dereg(); err != nil {
		return m.pd.d.doneOp(err)
	}
	return m.pd.d.fanOut(nil, true)
}

// Close is Dereg: a region has no children to wait for.
func (m *MR) Close() *Op { return m.Dereg() }

// Dereg fails with ErrBusy while memory windows are bound to the region (IBTA
// 10.6.7.2.6; rxe answers EINVAL).
func (m *MR) dereg() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead.Load() {
		return errorf(ErrClosed, "MR %#x", m.r.LKey())
	}
	if err := m.pd.d.mrs.Deregister(m.r); err != nil {
		return wrap(err) // windows bound: the region stays, and so does m
	}
	m.dead.Store(true)
	m.pd.unuse()
	return nil
}
