package rdmacm

import (
	"crypto/rand"
	"encoding/binary"
	"net/netip"
)

// The port spaces' bind lists (cma.c's struct rdma_bind_list): rdma_bind_addr
// reserves its port here, so that a second bind of the address and port fails
// at once, and rdma_destroy_id frees it. Everything here is under reg's lock;
// an ID's owner record holds what the checks read of it (its address, its
// reuseaddr and afonly, whether it listens), so that no check takes another
// ID's lock.

// portKey names a bind list: a port in a port space (cma_ps_find).
type portKey struct {
	ps   PortSpace
	port uint16
}

// bindList is the IDs bound to one port of one port space.
type bindList struct {
	key    portKey
	owners []*portOwner
}

// portOwner is an ID's place on its bind list; the ID keeps it, and so frees
// its port without a search (cma_release_port).
type portOwner struct {
	bl        *bindList
	addr      netip.Addr
	reuse     bool // rdma_set_reuseaddr
	afonly    bool // rdma_set_afonly, or the family's default at bind
	listening bool // RDMA_CM_LISTEN, which cma_check_port shares with nobody
}

// Linux's default ip_local_port_range, which cma_alloc_any_port draws from.
const ephemeralLo, ephemeralHi = 32768, 60999

// checkPortLocked is cma_check_port: whether o may hold its address on bl.
// Another owner lets it share when both have reuse (o's reuse as given: a
// listen checks again without) and that owner does not listen; owners of
// different families that both set afonly never meet; an unspecified
// address overlaps any other (EADDRNOTAVAIL), the same address is
// EADDRINUSE.
func checkPortLocked(bl *bindList, o *portOwner, reuse bool) error {
	for _, cur := range bl.owners {
		if cur == o {
			continue
		}
		if !cur.listening && reuse && cur.reuse {
			continue
		}
		if o.afonly && cur.afonly && o.addr.Is4() != cur.addr.Is4() {
			continue
		}
		if o.addr.IsUnspecified() || cur.addr.IsUnspecified() {
			return ErrAddrNotAvail
		}
		if o.addr == cur.addr {
			return ErrInUse
		}
	}
	return nil
}

// uniqueLocked is cma_port_is_unique for an ID that has no destination yet:
// an automatic port is shared only with owners of other specific addresses.
func uniqueLocked(bl *bindList, o *portOwner) bool {
	for _, cur := range bl.owners {
		if o.addr.IsUnspecified() || cur.addr.IsUnspecified() || o.addr == cur.addr {
			return false
		}
	}
	return true
}

func (o *portOwner) joinLocked(k portKey) {
	bl := reg.ports[k]
	if bl == nil {
		bl = &bindList{key: k}
		reg.ports[k] = bl
	}
	o.bl = bl
	bl.owners = append(bl.owners, o)
}

// lastPort is cma_alloc_any_port's last_used_port: a port just freed is not
// handed out again at once.
var lastPort uint16

// getPort is cma_get_port: it reserves a's port in port space ps for an
// owner with reuse and afonly (afonlySet false: the family's default, as
// rdma_bind_addr sets it: IPv4 only, IPv6 dual as bindv6only's default 0).
// Port 0 draws a free port from the ephemeral range (cma_alloc_any_port).
func getPort(ps PortSpace, a netip.AddrPort, reuse, afonly, afonlySet bool) (*portOwner, uint16, error) {
	if !afonlySet {
		afonly = a.Addr().Is4()
	}
	o := &portOwner{addr: a.Addr(), reuse: reuse, afonly: afonly}
	reg.Lock()
	defer reg.Unlock()
	if p := a.Port(); p != 0 {
		k := portKey{ps, p}
		if bl := reg.ports[k]; bl != nil {
			if err := checkPortLocked(bl, o, reuse); err != nil {
				return nil, 0, err
			}
		}
		o.joinLocked(k)
		return o, p, nil
	}
	var b [2]byte
	rand.Read(b[:])
	n := ephemeralHi - ephemeralLo + 1
	rover := ephemeralLo + int(binary.LittleEndian.Uint16(b[:]))%n
	for range n {
		p := uint16(rover)
		if rover++; rover > ephemeralHi {
			rover = ephemeralLo
		}
		if p == lastPort {
			continue
		}
		k := portKey{ps, p}
		if bl := reg.ports[k]; bl == nil || uniqueLocked(bl, o) {
			o.joinLocked(k)
			lastPort = p
			return o, p, nil
		}
	}
	return nil, 0, ErrAddrNotAvail
}

// release is cma_release_port: the owner leaves its bind list, which goes
// with its last owner.
func (o *portOwner) release() {
	reg.Lock()
	defer reg.Unlock()
	bl := o.bl
	for i, x := range bl.owners {
		if x == o {
			bl.owners = append(bl.owners[:i], bl.owners[i+1:]...)
			break
		}
	}
	if len(bl.owners) == 0 && reg.ports[bl.key] == bl {
		delete(reg.ports, bl.key)
	}
}

// listen marks the owner listening. One bound with reuse checks its port
// again without it first (cma_listen's cma_bind_listen): a listener shares
// its port with nobody that overlaps its address.
func (o *portOwner) listen() error {
	reg.Lock()
	defer reg.Unlock()
	if o.reuse {
		if err := checkPortLocked(o.bl, o, false); err != nil {
			return err
		}
	}
	o.listening = true
	return nil
}

// unlisten undoes listen, for a Listen that failed after it.
func (o *portOwner) unlisten() {
	reg.Lock()
	o.listening = false
	reg.Unlock()
}

// set updates what the checks read of the owner's options.
func (o *portOwner) set(reuse, afonly bool) {
	reg.Lock()
	o.reuse, o.afonly = reuse, afonly
	reg.Unlock()
}
