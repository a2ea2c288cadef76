// Memory windows (ibv_mw): allocation, the type 1 bind verb, deallocation.

package engine

import (
	"sync/atomic"

	"github.com/xrnic/xrnic/nic/mr"
)

// MW is a memory window (ibv_mw, IBTA 10.6.7), a child of its PD. A type 1 window
// is bound with QP.BindMW, a type 2 window with a BIND_MW work request; both give
// a peer an R_Key for part of a region that allows MW_BIND. Safe for concurrent
// use: the accessors read the current binding atomically.
type MW struct {
	pd   *PD
	w    *mr.Window
	dead atomic.Bool
}

// AllocMW allocates a memory window of type typ (ibv_alloc_mw).
func (pd *PD) AllocMW(typ mr.WindowType) (*MW, error) {
	if err := pd.use(); err != nil {
		return nil, err
	}
	w, err := pd.d.mrs.AllocWindow(pd.handle, typ)
	if err != nil {
		pd.unuse()
		return nil, wrap(err)
	}
	return &MW{pd: pd, w: w}, nil
}

// RKey is the window's current R_Key.
func (m *MW) RKey() uint32 { return m.w.RKey() }

// Type is the window's type.
func (m *MW) Type() mr.WindowType { return m.w.Type() }

// PD is the window's protection domain.
func (m *MW) PD() *PD { return m.pd }

// Window is the window in the device's memory table, for its binding's details.
func (m *MW) Window() *mr.Window { return m.w }

// Dealloc frees the window (ibv_dealloc_mw): its R_Key stops working at once and
// its region may be deregistered again. The Op is complete when Dealloc returns.
func (m *MW) Dealloc() *Op { return m.pd.d.doneOp(m.dealloc()) }

// Close is Dealloc: a window has no children to wait for.
func (m *MW) Close() *Op { return m.Dealloc() }

func (m *MW) dealloc() error {
	if m.dead.Swap(true) {
		return errorf(ErrClosed, "MW %#x", m.w.RKey())
	}
	if err := m.pd.d.mrs.DeallocWindow(m.w); err != nil {
		return wrap(err)
	}
	m.pd.unuse()
	return nil
}

// BindMW binds the type 1 window mw (ibv_bind_mw): it posts a BIND_MW work
// request with wrid and flags on qp's send queue, as libibverbs does, and returns
// the R_Key the window will have, the current one with the next key byte
// (ibv_inc_rkey). The bind takes effect, or fails with MW_BIND_ERR, when the
// requester reaches it; its completion (opcode BindMW) is signaled as flags say.
// Errors are PostSend's, and ErrInvalid for a type 2 window or one of another
// device.
func (qp *QP) BindMW(mw *MW, wrid uint64, flags SendFlags, b BindInfo) (uint32, error) {
	if mw == nil || mw.pd.d != qp.d || mw.w.Type() != mr.Type1 {
		return 0, errBindMWType
	}
	old := mw.w.RKey()
	key := old&^0xff | (old+1)&0xff
	wr := SendWR{WRID: wrid, Opcode: WRBindMW, Flags: flags, MW: mw, Key: key, Bind: b}
	if _, err := qp.postSend([]SendWR{wr}, true); err != nil {
		return 0, err
	}
	return key, nil
}
