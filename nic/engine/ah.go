// Address handles (ibv_ah) for UD sends.

package engine

import (
	"sync"
	"sync/atomic"

	"github.com/xrnic/xrnic/nic/wire"
)

// AH is an address handle (ibv_ah) for UD sends. Safe for concurrent use. Its
// route is built when the next hop's MAC is known: at once, or when a background
// resolution answers; UD sends posted with it meanwhile wait in their QP's send
// queue, in order, and go when it is resolved, or complete with LOC_QP_OP_ERR if
// it cannot be (rxe completes a WR it cannot route with IB_WC_LOC_QP_OP_ERR).
type AH struct {
	pd     *PD
	av     AV
	rt     atomic.Pointer[route] // nil until resolved
	failed atomic.Bool           // the resolution failed: sends with it fail
	dead   atomic.Bool

	waitMu  sync.Mutex // the engines of several queues may park QPs at once
	waiters []*QP      // QPs whose next WQE waits for rt
}

// CreateAH creates an address handle (ibv_create_ah). It never blocks (MID1):
// when the AV has no MAC and the device has none cached for its next hop, the AH
// is returned with its resolution under way (see AH).
func (pd *PD) CreateAH(av AV) (*AH, error) {
	d := pd.d
	rp, needMAC, err := d.checkAV(&av)
	if err != nil {
		return nil, err
	}
	ah := &AH{pd: pd, av: av}
	if !needMAC {
		rt, err := newRoute(rp)
		if err != nil {
			return nil, err
		}
		ah.rt.Store(rt)
	}
	if err := d.reserve(&d.nah, MaxAH, "AHs"); err != nil {
		return nil, err
	}
	if err := pd.use(); err != nil {
		d.forget(&d.nah)
		return nil, err
	}
	if needMAC {
		if err := d.resolveMAC(rp.dst, func(mac wire.MAC, err error) { ah.resolved(rp, mac, err) }); err != nil {
			pd.unuse()
			d.forget(&d.nah)
			return nil, err
		}
	}
	return ah, nil
}

// resolved builds the AH's route from the resolution's answer and wakes the QPs
// waiting for it.
func (ah *AH) resolved(rp routeParams, mac wire.MAC, err error) {
	if err == nil {
		rp.dmac = mac
		var rt *route
		if rt, err = newRoute(rp); err == nil {
			ah.rt.Store(rt)
		}
	}
	if err != nil {
		ah.failed.Store(true)
	}
	// Each waiter's doorbell gives it a turn on its own engine.
	ah.waitMu.Lock()
	w := ah.waiters
	ah.waiters = nil
	ah.waitMu.Unlock()
	for _, qp := range w {
		qp.ring()
	}
}

// route returns the AH's route, or nil while it is being resolved; the engine
// calls it and, on nil, parks qp until the resolution ends. failed reports a
// resolution that failed.
func (e *engine) ahRoute(ah *AH, qp *QP) (rt *route, failed bool) {
	if rt = ah.rt.Load(); rt != nil {
		return rt, false
	}
	ah.waitMu.Lock()
	defer ah.waitMu.Unlock()
	// Looked at again under the lock: resolved stores before it takes the list.
	if rt = ah.rt.Load(); rt != nil {
		return rt, false
	}
	if ah.failed.Load() {
		return nil, true
	}
	ah.waiters = append(ah.waiters, qp)
	return nil, false
}

// AV returns the address vector the AH was created with.
func (ah *AH) AV() AV { return ah.av }

// Destroy destroys the AH (ibv_destroy_ah). Sends already posted with it still
// go. The Op is complete when Destroy returns.
func (ah *AH) Destroy() *Op {
	d := ah.pd.d
	if ah.dead.Swap(true) {
		return d.doneOp(errorf(ErrClosed, "AH"))
	}
	d.forget(&d.nah)
	ah.pd.unuse()
	return d.doneOp(nil)
}

// Close is Destroy: an address handle has no children to wait for.
func (ah *AH) Close() *Op { return ah.Destroy() }
