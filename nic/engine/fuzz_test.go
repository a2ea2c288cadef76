// Fuzzing the receive path: whatever arrives, the engine neither panics nor
// touches memory it should not, and keeps serving.

package engine

import (
	"encoding/binary"
	"testing"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// fuzzFrames are the frames of one fuzz input: a sequence of 16-bit
// big-endian lengths, each followed by that many bytes of frame; what does
// not parse so is the last frame. At most maxFuzzFrames.
const maxFuzzFrames = 8

func fuzzFrames(in []byte) [][]byte {
	var out [][]byte
	for len(in) > 0 && len(out) < maxFuzzFrames {
		if len(in) < 2 || int(binary.BigEndian.Uint16(in)) > len(in)-2 {
			return append(out, in)
		}
		n := int(binary.BigEndian.Uint16(in))
		out = append(out, in[2:2+n])
		in = in[2+n:]
	}
	return out
}

// fuzzInput joins frames in fuzzFrames' format.
func fuzzInput(frames ...[]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	return b
}

// FuzzReceive feeds sequences of frames to an RC QP that every input finds in
// the same state: RTS with expected PSN 1000, four receives posted, and a
// SEND, a READ and a FETCH_AND_ADD of its own outstanding at PSNs 5000, 5001
// and 5004, so requests reach the responder's execute and error paths and
// responses the completer's. The QP is taken through RESET and back before
// each input (before: it stayed in ERR after the first error, and mutated
// requests rarely got past the state check).
func FuzzReceive(f *testing.F) {
	r, n := newRawPeer(f, nodeOpts{bufLen: 64 << 10}, connOpts{rdAtomic: 4})
	mac := r.l.Info().MAC
	va, rk := n.mr.Addr(), n.mr.RKey()
	wcs := make([]cq.WC, 64)
	// drain reads everything the device sent: left in the link, it would fill
	// it, and the device's transmit would wait for room forever.
	drain := func() {
		for len(r.recv(0, 0)) > 0 {
		}
	}
	arm := func(t testing.TB) {
		if err := n.qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: qpattr.Reset}}, qpattr.AttrState); err != nil {
			t.Fatalf("to RESET: %v", err)
		}
		for n.cq.Poll(wcs) > 0 {
		}
		rawConnect(t, n.qp, qpattr.RC, mac, connOpts{rdAtomic: 4})
		for i := range 4 {
			recv(t, n, uint64(i), uint64(i)*4096, 4096)
		}
		send(t, n, SendWR{WRID: 10, Opcode: WRSend, SGL: []SGE{n.mr.SGE(16384, 16)}})
		send(t, n, SendWR{WRID: 11, Opcode: WRRDMARead, SGL: []SGE{n.mr.SGE(20480, 3000)}, RemoteAddr: 0x9000, RKey: 0x1234})
		send(t, n, SendWR{WRID: 12, Opcode: WRAtomicFetchAdd, SGL: []SGE{n.mr.SGE(24576, 8)}, RemoteAddr: 0xa000, RKey: 0x1234, CompareAdd: 1})
		r.d.Sync().Wait()
		drain() // the QP's own requests, sent to the peer
	}
	req := func(op wire.Opcode, psn wire.PSN, ib wire.IBFields) []byte { return r.req(op, psn, ib) }
	reth := func(off uint64, l uint32) wire.RETHFields { return wire.RETHFields{VA: va + off, RKey: rk, DMALen: l} }
	resp := func(op wire.Opcode, psn wire.PSN, ib wire.IBFields) []byte {
		ib.BTH.Opcode, ib.BTH.PSN = op, psn
		ib.AETH = wire.AETHFields{Syndrome: ack}
		return r.frame(ib)
	}
	mtu := make([]byte, 1024)
	seeds := [][][]byte{
		// The responder: every request opcode, valid.
		{req(wire.RCSendOnly, 1000, wire.IBFields{Payload: []byte("hello")})},
		{req(wire.RCSendOnlyWithImmediate, 1000, wire.IBFields{ImmDt: 7, Payload: []byte("imm")})},
		{req(wire.RCSendFirst, 1000, wire.IBFields{Payload: mtu}), req(wire.RCSendMiddle, 1001, wire.IBFields{Payload: mtu}),
			req(wire.RCSendLast, 1002, wire.IBFields{Payload: []byte("end")})},
		{req(wire.RCSendFirst, 1000, wire.IBFields{Payload: mtu}), req(wire.RCSendLastWithImmediate, 1001, wire.IBFields{ImmDt: 9, Payload: []byte("x")})},
		{req(wire.RCSendFirst, 1000, wire.IBFields{Payload: mtu}), req(wire.RCSendLastWithInvalidate, 1001, wire.IBFields{IETH: rk, Payload: []byte("x")})},
		{req(wire.RCSendOnlyWithInvalidate, 1000, wire.IBFields{IETH: rk})},
		{req(wire.RCRDMAWriteOnly, 1000, wire.IBFields{RETH: reth(0, 4), Payload: []byte("abcd")})},
		{req(wire.RCRDMAWriteOnlyWithImmediate, 1000, wire.IBFields{RETH: reth(0, 4), ImmDt: 3, Payload: []byte("abcd")})},
		{req(wire.RCRDMAWriteFirst, 1000, wire.IBFields{RETH: reth(0, 2100), Payload: mtu}), req(wire.RCRDMAWriteMiddle, 1001, wire.IBFields{Payload: mtu}),
			req(wire.RCRDMAWriteLast, 1002, wire.IBFields{Payload: make([]byte, 52)})},
		{req(wire.RCRDMAWriteFirst, 1000, wire.IBFields{RETH: reth(0, 1030), Payload: mtu}),
			req(wire.RCRDMAWriteLastWithImmediate, 1001, wire.IBFields{ImmDt: 5, Payload: make([]byte, 6)})},
		{req(wire.RCRDMAReadRequest, 1000, wire.IBFields{RETH: reth(0, 3000)})},
		{req(wire.RCFetchAdd, 1000, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: va, RKey: rk, SwapAdd: 1}})},
		{req(wire.RCCompareSwap, 1000, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: va + 8, RKey: rk}})},
		{req(wire.RCFlush, 1000, wire.IBFields{FETH: wire.FETHFields{Selectivity: 1, PlacementType: 1}, RETH: reth(0, 64)})},
		{req(wire.RCAtomicWrite, 1000, wire.IBFields{RETH: reth(64, 8), Payload: make([]byte, 8)})},
		// Duplicates, sequence errors, RNR: the responder's other paths.
		{req(wire.RCRDMAReadRequest, 1000, wire.IBFields{RETH: reth(0, 3000)}), req(wire.RCRDMAReadRequest, 1001, wire.IBFields{RETH: reth(1024, 1976)})},
		{req(wire.RCFetchAdd, 1000, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: va, RKey: rk, SwapAdd: 1}}),
			req(wire.RCFetchAdd, 1000, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: va, RKey: rk, SwapAdd: 1}})},
		{req(wire.RCSendOnly, 1000, wire.IBFields{}), req(wire.RCSendOnly, 1000, wire.IBFields{}), req(wire.RCSendOnly, 1005, wire.IBFields{})},
		{req(wire.RCSendOnly, 1000, wire.IBFields{}), req(wire.RCSendOnly, 1001, wire.IBFields{}), req(wire.RCSendOnly, 1002, wire.IBFields{}),
			req(wire.RCSendOnly, 1003, wire.IBFields{}), req(wire.RCSendOnly, 1004, wire.IBFields{})},
		// The completer: answers to the QP's own SEND, READ and atomic.
		{resp(wire.RCAcknowledge, 5000, wire.IBFields{})},
		{resp(wire.RCRDMAReadResponseFirst, 5001, wire.IBFields{Payload: mtu}), resp(wire.RCRDMAReadResponseMiddle, 5002, wire.IBFields{Payload: mtu}),
			resp(wire.RCRDMAReadResponseLast, 5003, wire.IBFields{Payload: make([]byte, 952)}),
			resp(wire.RCAtomicAcknowledge, 5004, wire.IBFields{AtomicAckETH: wire.AtomicAckETHFields{OrigRemData: 41}})},
		{r.frame(wire.IBFields{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: 5000}, AETH: wire.AETHFields{Syndrome: wire.RNRNAKSyndrome(1)}})},
		{r.frame(wire.IBFields{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: 5001}, AETH: wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKPSNSequenceError)}})},
		{r.frame(wire.IBFields{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: 5000}, AETH: wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKRemoteAccessError)}})},
		{resp(wire.RCRDMAReadResponseOnly, 5001, wire.IBFields{Payload: []byte("short")})},
	}
	for _, s := range seeds {
		f.Add(fuzzInput(s...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r.t = t
		arm(t)
		frames := fuzzFrames(in)
		for _, frame := range frames {
			var p wire.Packet
			if wire.Parse(frame, &p) == nil {
				p.UpdateICRC() // let mutations past the ICRC check
			}
		}
		if len(frames) > 0 {
			r.send(frames...)
		}
		drain()
	})
}
