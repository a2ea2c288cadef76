// Fuzzing the receive path: whatever arrives, the engine neither panics nor
// touches memory it should not, and keeps serving.

package engine

import (
	"testing"

	"github.com/xrnic/xrnic/nic/wire"
)

func FuzzReceive(f *testing.F) {
	r, n := newRawPeer(f, nodeOpts{bufLen: 64 << 10}, connOpts{rdAtomic: 4})
	for i := range 8 {
		recv(f, n, uint64(i), 0, 4096)
	}
	va, rk := n.mr.Addr(), n.mr.RKey()
	seeds := [][]byte{
		r.req(wire.RCSendOnly, 1000, wire.IBFields{Payload: []byte("hello")}),
		r.req(wire.RCSendFirst, 1000, wire.IBFields{Payload: make([]byte, 1024)}),
		r.req(wire.RCRDMAWriteOnly, 1000, wire.IBFields{RETH: wire.RETHFields{VA: va, RKey: rk, DMALen: 4}, Payload: []byte("abcd")}),
		r.req(wire.RCRDMAReadRequest, 1000, wire.IBFields{RETH: wire.RETHFields{VA: va, RKey: rk, DMALen: 3000}}),
		r.req(wire.RCFetchAdd, 1000, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: va, RKey: rk, SwapAdd: 1}}),
		r.req(wire.RCCompareSwap, 1000, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: va + 8, RKey: rk}}),
		r.req(wire.RCSendOnlyWithInvalidate, 1000, wire.IBFields{IETH: rk}),
		r.frame(wire.IBFields{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: 5000}, AETH: wire.AETHFields{Syndrome: ack}}),
		r.frame(wire.IBFields{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseOnly, PSN: 5000}, AETH: wire.AETHFields{Syndrome: ack}, Payload: []byte("data")}),
		r.frame(wire.IBFields{BTH: wire.BTHFields{Opcode: wire.RCAtomicAcknowledge, PSN: 5000}, AETH: wire.AETHFields{Syndrome: ack}}),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		r.t = t
		var p wire.Packet
		if wire.Parse(frame, &p) == nil {
			p.UpdateICRC() // let mutations past the ICRC check
		}
		r.send(frame)
		r.recv(0, 0)
	})
}
