package verbs

import (
	"fmt"
	"slices"
	"sync"
)

// Client is a consumer of devices (struct ib_client): Add runs once for every device
// while both are registered, Remove once for every device Add ran for. Add may use
// the device at once; Remove must release everything it holds of the device before
// it returns. Both may block (MID10).
type Client struct {
	Name   string
	Add    func(*Device)
	Remove func(*Device)
}

// The registry holds devices and clients. Its lock is never held while a client's
// Add or Remove runs, so those may call back into the package, register other
// clients, or list devices without deadlock (MID9). Per device-client pair a state
// records whether Add ran, so Remove runs exactly once, after Add returned, whoever
// (device or client) unregisters first.
type registryT struct {
	mu      sync.Mutex
	cond    *sync.Cond
	devices []*Device
	clients []*Client
	pairs   map[pairKey]pairState
}

type pairKey struct {
	d *Device
	c *Client
}

type pairState uint8

const (
	pairAdding pairState = iota + 1
	pairAdded
	pairRemoving
)

var registry = func() *registryT {
	r := &registryT{pairs: map[pairKey]pairState{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}()

// Devices lists the registered devices (ibv_get_device_list).
func Devices() []*Device {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return slices.Clone(registry.devices)
}

// DeviceByName finds a registered device.
func DeviceByName(name string) (*Device, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, d := range registry.devices {
		if d.name == name {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: device %q", ErrNotFound, name)
}

// RegisterClient registers c and runs its Add for every registered device before it
// returns (ib_register_client).
func RegisterClient(c *Client) error {
	if c == nil || c.Add == nil || c.Remove == nil {
		return fmt.Errorf("%w: a client needs Add and Remove", ErrInvalid)
	}
	r := registry
	r.mu.Lock()
	if slices.Contains(r.clients, c) {
		r.mu.Unlock()
		return fmt.Errorf("%w: client %q", ErrExists, c.Name)
	}
	r.clients = append(r.clients, c)
	devs := slices.Clone(r.devices)
	r.mu.Unlock()
	for _, d := range devs {
		r.add(d, c)
	}
	return nil
}

// UnregisterClient runs c's Remove for every device its Add ran for and forgets c
// (ib_unregister_client). When it returns, no callback of c runs or will run.
func UnregisterClient(c *Client) error {
	r := registry
	r.mu.Lock()
	i := slices.Index(r.clients, c)
	if i < 0 {
		r.mu.Unlock()
		return fmt.Errorf("%w: client", ErrNotFound)
	}
	r.clients = slices.Delete(r.clients, i, i+1)
	var devs []*Device
	for k := range r.pairs {
		if k.c == c {
			devs = append(devs, k.d)
		}
	}
	r.mu.Unlock()
	for _, d := range devs {
		r.remove(d, c)
	}
	return nil
}

// add runs c.Add(d) unless the pair exists or either side is leaving.
func (r *registryT) add(d *Device, c *Client) {
	r.mu.Lock()
	k := pairKey{d, c}
	if _, ok := r.pairs[k]; ok || !slices.Contains(r.devices, d) || !slices.Contains(r.clients, c) {
		r.mu.Unlock()
		return
	}
	r.pairs[k] = pairAdding
	r.mu.Unlock()
	c.Add(d)
	r.mu.Lock()
	r.pairs[k] = pairAdded
	r.cond.Broadcast()
	r.mu.Unlock()
}

// remove waits for a running Add of the pair, then runs c.Remove(d) once; a second
// remover of the same pair waits until the first is done.
func (r *registryT) remove(d *Device, c *Client) {
	k := pairKey{d, c}
	r.mu.Lock()
	for {
		st, ok := r.pairs[k]
		if !ok {
			r.mu.Unlock()
			return
		}
		if st == pairAdded {
			break
		}
		r.cond.Wait() // Adding: wait for Add; Removing: wait for the other remover
	}
	r.pairs[k] = pairRemoving
	r.mu.Unlock()
	c.Remove(d)
	r.mu.Lock()
	delete(r.pairs, k)
	r.cond.Broadcast()
	r.mu.Unlock()
}

// addDevice names and registers a fully opened device, then runs every client's Add.
func (r *registryT) addDevice(d *Device, name string) error {
	r.mu.Lock()
	if name == "" {
		for i := 0; ; i++ {
			name = fmt.Sprintf("xrnic%d", i)
			if !r.hasNameLocked(name) {
				break
			}
		}
	} else if r.hasNameLocked(name) {
		r.mu.Unlock()
		return fmt.Errorf("%w: device name %q", ErrExists, name)
	}
	d.name = name
	r.devices = append(r.devices, d)
	cs := slices.Clone(r.clients)
	r.mu.Unlock()
	for _, c := range cs {
		r.add(d, c)
	}
	return nil
}

func (r *registryT) hasNameLocked(name string) bool {
	for _, d := range r.devices {
		if d.name == name {
			return true
		}
	}
	return false
}

// removeDevice unregisters d and runs Remove of every client its Add ran for; when
// it returns no client holds d.
func (r *registryT) removeDevice(d *Device) {
	r.mu.Lock()
	i := slices.Index(r.devices, d)
	if i >= 0 {
		r.devices = slices.Delete(r.devices, i, i+1)
	}
	var cs []*Client
	for k := range r.pairs {
		if k.d == d {
			cs = append(cs, k.c)
		}
	}
	r.mu.Unlock()
	for _, c := range cs {
		r.remove(d, c)
	}
}
