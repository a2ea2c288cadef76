package rdmacm

import (
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/xrnic/xrnic/verbs"
)

// IDInfo describes one CM ID as `rdma resource show cm_id` does. A plain value.
type IDInfo struct {
	N      uint32 // cm-idn
	QPN    uint32 // lqpn, with QPType, when the ID has a QP
	QPType verbs.QPType
	HasQP  bool
	State  string // rdma_cm's state name (enum rdma_cm_state)
	PS     PortSpace
	Src    netip.AddrPort
	Dst    netip.AddrPort
}

var idSeq atomic.Uint32

// N is the ID's cm-idn, as Resources shows it.
func (id *ID) N() uint32 { return id.n }

// stateNames are iproute2's names of rdma_cm's states; an established
// connection is CONNECT there, as in the kernel.
var stateNames = map[state]string{stIdle: "IDLE", stAddrBound: "ADDR_BOUND", stAddrResolved: "ADDR_RESOLVED",
	stRouteResolved: "ROUTE_RESOLVED", stListen: "LISTEN", stConnect: "CONNECT", stEstablished: "CONNECT",
	stDisconnect: "DISCONNECT", stDestroying: "DESTROYING"}

// String is iproute2's name of a port space.
func (ps PortSpace) String() string {
	switch ps {
	case PSTCP:
		return "TCP"
	case PSUDP:
		return "UDP"
	case PSIB:
		return "IPoIB"
	}
	return "---"
}

// Resources lists the CM IDs on d, listeners on every device included, in
// cm-idn order.
func Resources(d *verbs.Device) []IDInfo {
	reg.Lock()
	var ids []*ID
	for id := range reg.ids[d] {
		ids = append(ids, id)
	}
	for _, l := range reg.listeners {
		if l.dev == d {
			for _, id := range l.ids {
				if id.dev == nil {
					ids = append(ids, id)
				}
			}
		}
	}
	reg.Unlock()
	out := make([]IDInfo, 0, len(ids))
	for _, id := range ids {
		id.mu.Lock()
		info := IDInfo{N: id.n, State: stateNames[id.st], PS: id.ps, Src: id.src, Dst: id.dst}
		if id.removed {
			info.State = "DEVICE_REMOVAL"
		}
		if id.qp != nil {
			info.HasQP, info.QPN, info.QPType = true, id.qp.QPN(), id.qp.Type()
		}
		id.mu.Unlock()
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b IDInfo) int { return int(a.N) - int(b.N) })
	return slices.CompactFunc(out, func(a, b IDInfo) bool { return a.N == b.N })
}
