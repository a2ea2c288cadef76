// What the engine puts on the wire: headers as rxe sends them, PSNs, AckReq,
// the UDP source port, and frames that parse and verify.

package engine

import (
	"testing"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

func TestWireFormat(t *testing.T) {
	tap := &tapLink{}
	p := newPair(t, pairOpts{wrapA: func(l link.Link) link.Link { tap.Link = l; return tap }})
	a := newNode(t, p.a, nodeOpts{})
	b := newNode(t, p.b, nodeOpts{})
	connect(t, a, b, connOpts{mtu: qpattr.MTU1024, psnA: 0xfffffe})
	recv(t, b, 1, 0, 4096)
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled | SendSolicited, SGL: []SGE{a.mr.SGE(0, 3000)}})
	pollOne(t, a.cq)
	send(t, a, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1030)},
		RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey()})
	pollOne(t, a.cq)

	type want struct {
		op     wire.Opcode
		psn    wire.PSN
		ackReq bool
		se     bool
		n      int
	}
	wants := []want{
		{wire.RCSendFirst, 0xfffffe, false, false, 1024},
		{wire.RCSendMiddle, 0xffffff, false, false, 1024},
		{wire.RCSendLast, 0, true, true, 952},
		{wire.RCRDMAWriteFirst, 1, false, false, 1024},
		{wire.RCRDMAWriteLast, 2, true, false, 6},
	}
	frames := tap.frames()
	if len(frames) != len(wants) {
		t.Fatalf("got %d frames, want %d", len(frames), len(wants))
	}
	sport := wire.UDPSport(0, a.qp.QPN(), b.qp.QPN())
	for i, f := range frames {
		var pk wire.Packet
		if err := wire.ParseAndVerify(f, &pk); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		w := wants[i]
		bth := pk.BTH
		if pk.Opcode != w.op || bth.PSN() != w.psn || bth.AckReq() != w.ackReq || bth.SE() != w.se || len(pk.Payload) != w.n {
			t.Errorf("frame %d: got %v PSN %#x AckReq %v SE %v %d bytes, want %v %#x %v %v %d",
				i, pk.Opcode, bth.PSN(), bth.AckReq(), bth.SE(), len(pk.Payload), w.op, w.psn, w.ackReq, w.se, w.n)
		}
		if bth.DestQPN() != b.qp.QPN() || bth.PKey() != 0xffff || bth.TVer() != 0 || bth.PadCount() != -w.n&3 {
			t.Errorf("frame %d: BTH %x", i, []byte(bth))
		}
		ip := pk.IPv4
		if ip == nil || ip.Src() != addrA || ip.Dst() != addrB || ip.TTL() != 64 || ip.Flags() != wire.IPv4FlagDF || ip.TOS() != 0 {
			t.Errorf("frame %d: IPv4 header %x", i, []byte(ip))
		}
		if pk.UDP.SrcPort() != sport || pk.UDP.Checksum() != 0 {
			t.Errorf("frame %d: UDP source port %d checksum %#x, want %d 0", i, pk.UDP.SrcPort(), pk.UDP.Checksum(), sport)
		}
		if got, wantMAC := pk.Ethernet.Dst(), wire.MAC(p.b.info.MAC); got != wantMAC {
			t.Errorf("frame %d: destination MAC %v, want %v", i, got, wantMAC)
		}
		if w.op == wire.RCRDMAWriteFirst {
			r := pk.RETH
			if r.VA() != b.mr.Addr()+8 || r.RKey() != b.mr.RKey() || r.DMALen() != 1030 {
				t.Errorf("RETH: VA %#x R_Key %#x length %d", r.VA(), r.RKey(), r.DMALen())
			}
		}
	}
}
