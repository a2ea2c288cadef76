package ndk

import (
	"net/netip"
	"sync"
)

// endpoint is a local address and port held by listeners, connectors and
// shared endpoints, with the reference count of
// ndkpi-listeners-connectors-endpoints.txt: the port is free again, for
// every adapter of the process, when the count reaches zero (EP4, EP8, EP9).
type endpoint struct {
	ap   netip.AddrPort
	refs int // under eps.mu
}

var eps = struct {
	sync.Mutex
	m    map[netip.AddrPort]*endpoint
	next uint16 // the next ephemeral port to try
}{m: map[netip.AddrPort]*endpoint{}}

// The ephemeral range NDK providers allocate from (NdkCreateSharedEndpoint's
// STATUS_TOO_MANY_ADDRESSES names it).
const ephemeralLo, ephemeralHi = 49152, 65535

// inUse reports whether ap overlaps a held endpoint: the same port on the
// same address, or either address unspecified.
func inUse(ap netip.AddrPort) bool {
	for k := range eps.m {
		if k.Port() == ap.Port() && (k.Addr() == ap.Addr() || k.Addr().IsUnspecified() || ap.Addr().IsUnspecified()) {
			return true
		}
	}
	return false
}

// reserve takes ap with one reference, or a free ephemeral port of its
// address when its port is 0. While the address and port are held, it fails
// with ErrInUse (EP5).
func reserve(ap netip.AddrPort) (*endpoint, error) {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	eps.Lock()
	defer eps.Unlock()
	if ap.Port() == 0 {
		for range ephemeralHi - ephemeralLo + 1 {
			p := ephemeralLo + eps.next%(ephemeralHi-ephemeralLo+1)
			eps.next++
			if c := netip.AddrPortFrom(ap.Addr(), p); !inUse(c) {
				ap = c
				break
			}
		}
		if ap.Port() == 0 {
			return nil, ErrNoPorts
		}
	} else if inUse(ap) {
		return nil, ErrInUse
	}
	e := &endpoint{ap: ap, refs: 1}
	eps.m[ap] = e
	return e, nil
}

func (e *endpoint) ref() {
	eps.Lock()
	e.refs++
	eps.Unlock()
}

func (e *endpoint) unref() {
	eps.Lock()
	defer eps.Unlock()
	if e.refs--; e.refs == 0 {
		delete(eps.m, e.ap)
	}
}

// count is the endpoint's reference count, for the tests.
func (e *endpoint) count() int {
	eps.Lock()
	defer eps.Unlock()
	return e.refs
}

// SharedEndpoint is NDK_SHARED_ENDPOINT: a local address and port several
// connectors connect from (ConnectWithSharedEndpoint). Its close stays
// pending until those connectors are closed, and the port stays taken until
// then (EP9).
type SharedEndpoint struct {
	n  node
	ep *endpoint
}

// CreateSharedEndpoint is NdkCreateSharedEndpoint on the local address ap
// (port 0: an ephemeral port). Synchronous; ErrInUse while ap is held.
func (a *Adapter) CreateSharedEndpoint(ap netip.AddrPort, done func(*SharedEndpoint, error)) (*SharedEndpoint, error) {
	if err := a.checkLocal(ap.Addr()); err != nil {
		return nil, err
	}
	s := &SharedEndpoint{}
	if err := s.n.init(a, &a.n); err != nil {
		return nil, err
	}
	ep, err := reserve(ap)
	if err != nil {
		s.n.leaveParents()
		return nil, err
	}
	s.ep = ep
	s.n.release = func(fin func(error)) {
		ep.unref()
		fin(nil)
	}
	return s, nil
}

// LocalAddress is the shared endpoint's address and port.
func (s *SharedEndpoint) LocalAddress() netip.AddrPort { return s.ep.ap }

// Close is NdkCloseObject: pending until the endpoint's connectors close.
func (s *SharedEndpoint) Close(done func(error)) error { return s.n.close(done) }
