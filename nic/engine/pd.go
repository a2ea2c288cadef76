// Protection domains (ibv_pd): the parent of memory regions, address handles,
// shared receive queues and queue pairs.

package engine

// PD is a protection domain (ibv_pd). Safe for concurrent use.
type PD struct {
	d      *Device
	handle uint32
	n      lifetime // children: MRs, AHs, SRQs and QPs created in it
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	if err := d.reserve(&d.npd, MaxPD, "PDs"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.pdSeq++
	pd := &PD{d: d, handle: d.pdSeq}
	d.mu.Unlock()
	if err := pd.n.adopt(&d.n); err != nil {
		d.forget(&d.npd)
		return nil, err
	}
	return pd, nil
}

// reserve counts one more object of a kind the device limits to max.
func (d *Device) reserve(count *int, max int, what string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if *count >= max {
		return errorf(ErrLimit, "%d %s", max, what)
	}
	*count++
	return nil
}

// forget decrements one of the device's object counts.
func (d *Device) forget(count *int) {
	d.mu.Lock()
	*count--
	d.mu.Unlock()
}

// Handle is the PD's number, the pd argument of mr.Table lookups.
func (pd *PD) Handle() uint32 { return pd.handle }

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.d }

// Dealloc frees the PD (ibv_dealloc_pd). It fails with ErrBusy, changing nothing,
// while objects created in it exist; once it has succeeded no object can be
// created in the PD. The Op is complete when Dealloc returns.
func (pd *PD) Dealloc() *Op {
	return pd.d.doneOp(pd.closeBusy())
}

func (pd *PD) closeBusy() error {
	if err := pd.n.closeBusy(); err != nil {
		return err
	}
	pd.teardown()
	return nil
}

// Close frees the PD once the last object created in it is gone (NDKPI's close of
// an antecedent, LT8): from now on nothing can be created in it, and the Op
// completes when its last child is destroyed (at once if it has none).
func (pd *PD) Close() *Op {
	op := pd.d.newOp()
	if err := pd.n.closeWhenIdle(func() {
		pd.teardown()
		op.finish(nil)
	}); err != nil {
		op.finish(err)
	}
	return op
}

func (pd *PD) teardown() {
	pd.d.forget(&pd.d.npd)
	pd.n.orphan()
}

// use takes a reference for an object created in the PD (the object's lifetime
// adopts the PD's instead where it has one).
func (pd *PD) use() error { return pd.n.acquire() }

func (pd *PD) unuse() { pd.n.release() }
