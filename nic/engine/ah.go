// Address handles (ibv_ah) for UD sends.

package engine

import "sync/atomic"

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
