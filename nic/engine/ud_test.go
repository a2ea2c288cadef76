// UD (with the GRH delivered as libibverbs does, and Q_Key checks) and UC (no
// ACKs; a lost packet drops its message).

package engine

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// udUp takes a UD QP to RTS with Q_Key qkey.
func udUp(t testing.TB, n *node, qkey uint32) {
	t.Helper()
	udUpPSN(t, n, qkey, 0x1234)
}

// udUpPSN is udUp with the send queue's first PSN.
func udUpPSN(t testing.TB, n *node, qkey uint32, psn wire.PSN) {
	t.Helper()
	steps := []struct {
		a    qpattr.Attr
		mask qpattr.AttrMask
	}{
		{qpattr.Attr{State: qpattr.Init, Port: 1, QKey: qkey}, qpattr.AttrState | qpattr.AttrPKeyIndex | qpattr.AttrPort | qpattr.AttrQKey},
		{qpattr.Attr{State: qpattr.RTR}, qpattr.AttrState},
		{qpattr.Attr{State: qpattr.RTS, SQPSN: psn}, qpattr.AttrState | qpattr.AttrSQPSN},
	}
	for _, s := range steps {
		if err := n.qp.ModifySync(&QPAttr{Attr: s.a}, s.mask); err != nil {
			t.Fatalf("UD to %v: %v", s.a.State, err)
		}
	}
}

func TestUD(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(name("v6=%v", v6), func(t *testing.T) {
			p := newPair(t, pairOpts{v6: v6})
			a := newNode(t, p.a, nodeOpts{typ: qpattr.UD})
			b := newNode(t, p.b, nodeOpts{typ: qpattr.UD})
			const qkey = 0x11111111
			udUp(t, a, 0x2222)
			udUp(t, b, qkey)
			ah, err := a.pd.CreateAH(AV{DGID: b.gid(), DMAC: b.d.info.MAC})
			if err != nil {
				t.Fatal(err)
			}
			defer ah.Destroy()
			fill(a.buf[:1024], 31)
			recv(t, b, 1, 0, 40+1024)
			recv(t, b, 2, 4096, 40+1024)
			send(t, a, SendWR{WRID: 10, Opcode: WRSendWithImm, Flags: SendSignaled, ImmData: 77, SGL: []SGE{a.mr.SGE(0, 1024)},
				AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
			checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 10, Opcode: cq.Send, ByteLen: 1024, QPN: a.qp.QPN(), Flags: cq.WithImm})
			checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 40 + 1024, QPN: b.qp.QPN(),
				SrcQP: a.qp.QPN(), Flags: cq.GRH | cq.WithImm, ImmData: 77})
			checkBytes(t, "UD payload", b.buf[40:40+1024], a.buf[:1024])
			// The GRH area: the IPv6 header, or the IPv4 header in its last 20 bytes.
			grh := b.buf[:40]
			if v6 {
				ip := wire.IPv6(grh)
				if ip.Version() != 6 || ip.Src() != a.gid().Addr() || ip.Dst() != b.gid().Addr() || ip.NextHeader() != wire.IPProtoUDP {
					t.Fatalf("GRH: %x", grh)
				}
			} else {
				checkBytes(t, "GRH reserved", grh[:20], make([]byte, 20))
				ip := wire.IPv4(grh[20:])
				if ip.Version() != 4 || ip.Src() != addrA || ip.Dst() != addrB || ip.TotalLength() != 20+8+12+8+4+1024+4 {
					t.Fatalf("GRH: %x", grh)
				}
			}

			// A wrong Q_Key is dropped and counted; the high bit takes the sender QP's Q_Key
			// (0x2222 here), which is wrong too.
			for _, k := range []uint32{0x12345, 0x80000000} {
				send(t, a, SendWR{WRID: 11, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("x"), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: k})
				pollOne(t, a.cq)
			}
			noMore(t, b.cq)
			if n := p.b.Counters()[CntRcvdBadQKey]; n != 2 {
				t.Fatalf("rcvd_bad_qkey: got %d, want 2", n)
			}
			// Too long for the receive buffer: dropped, the WQE stays for the next one.
			recvLen := uint32(40 + 1024)
			send(t, a, SendWR{WRID: 12, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, recvLen)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
			pollOne(t, a.cq)
			send(t, a, SendWR{WRID: 13, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("fits"), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
			pollOne(t, a.cq)
			checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 2, Opcode: cq.Recv, ByteLen: 44, QPN: b.qp.QPN(), SrcQP: a.qp.QPN(), Flags: cq.GRH})
			// No receive posted: dropped silently (class D).
			send(t, a, SendWR{WRID: 14, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("lost"), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
			pollOne(t, a.cq)
			noMore(t, b.cq)
			// Longer than the port MTU: no packet and no error, a successful
			// completion (C10-93.1.1, as rxe). The message after it arrives.
			recv(t, b, 3, 0, 8192)
			sent := p.a.Counters()[CntSentPkts]
			long := uint32(p.a.QueryPort().ActiveMTU.Bytes() + 1)
			send(t, a, SendWR{WRID: 15, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, long)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
			checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 15, Opcode: cq.Send, ByteLen: long, QPN: a.qp.QPN()})
			send(t, a, SendWR{WRID: 16, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("after"), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
			pollOne(t, a.cq)
			checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 3, Opcode: cq.Recv, ByteLen: 45, QPN: b.qp.QPN(), SrcQP: a.qp.QPN(), Flags: cq.GRH})
			if n := p.a.Counters()[CntSentPkts] - sent; n != 1 {
				t.Fatalf("sent %d packets for the long message and the next, want 1", n)
			}
		})
	}
}

func TestUC(t *testing.T) {
	t.Run("send and write", func(t *testing.T) {
		_, a, b := rcPair(t, pairOpts{}, nodeOpts{typ: qpattr.UC}, connOpts{mtu: qpattr.MTU1024})
		fill(a.buf[:5000], 41)
		recv(t, b, 1, 0, 8192)
		recv(t, b, 2, 0, 8192)
		send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 5000)}})
		send(t, a, SendWR{WRID: 2, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, ImmData: 5, SGL: []SGE{a.mr.SGE(0, 3000)},
			RemoteAddr: b.mr.Addr() + 100000, RKey: b.mr.RKey()})
		got := pollN(t, a.cq, 2, 5*time.Second)
		checkWC(t, got[0], cq.WC{WRID: 1, Opcode: cq.Send, ByteLen: 5000, QPN: a.qp.QPN()})
		checkWC(t, got[1], cq.WC{WRID: 2, Opcode: cq.RDMAWrite, ByteLen: 3000, QPN: a.qp.QPN(), Flags: cq.WithImm})
		rg := pollN(t, b.cq, 2, 5*time.Second)
		checkWC(t, rg[0], cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 5000, QPN: b.qp.QPN()})
		checkWC(t, rg[1], cq.WC{WRID: 2, Opcode: cq.RecvRDMAWithImm, ByteLen: 3000, QPN: b.qp.QPN(), Flags: cq.WithImm, ImmData: 5})
		checkBytes(t, "UC send", b.buf[:5000], a.buf[:5000])
		checkBytes(t, "UC write", b.buf[100000:103000], a.buf[:3000])
	})
	t.Run("loss drops the message", func(t *testing.T) {
		// Drop the second packet A sends (the MIDDLE of the first message).
		tap := &tapLink{drop: func(i int, _ *wire.Packet) bool { return i == 1 }}
		p := newPair(t, pairOpts{wrapA: func(l link.Link) link.Link { tap.Link = l; return tap }})
		a := newNode(t, p.a, nodeOpts{typ: qpattr.UC})
		b := newNode(t, p.b, nodeOpts{typ: qpattr.UC})
		connect(t, a, b, connOpts{mtu: qpattr.MTU1024})
		fill(a.buf[:3000], 51)
		recv(t, b, 1, 0, 8192)
		recv(t, b, 2, 8192, 8192)
		send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 3000)}})
		send(t, a, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 2500)}})
		pollN(t, a.cq, 2, 5*time.Second) // UC completes on transmission
		// The first message is lost; the second lands in the first receive WQE,
		// which was reused (class D1).
		checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 2500, QPN: b.qp.QPN()})
		checkBytes(t, "UC after loss", b.buf[:2500], a.buf[:2500])
		noMore(t, b.cq)
		if n := p.b.Counters()[CntRcvdDropped]; n == 0 {
			t.Fatalf("rcvd_dropped: got 0")
		}
		if got := tap.opcodes(); len(got) != 6 || got[0] != wire.UCSendFirst || got[3] != wire.UCSendFirst {
			t.Fatalf("opcodes sent: %v", got)
		}
	})
}

// TestGSI: QP1 on each device, UD with the well-known Q_Key, from source QP 1
// (what the CM's MADs ride on).
func TestGSI(t *testing.T) {
	p := newPair(t, pairOpts{})
	a := newNode(t, p.a, nodeOpts{typ: qpattr.GSI})
	b := newNode(t, p.b, nodeOpts{typ: qpattr.GSI})
	if a.qp.QPN() != 1 || b.qp.QPN() != 1 {
		t.Fatalf("GSI QPNs %d, %d, want 1", a.qp.QPN(), b.qp.QPN())
	}
	if _, err := a.pd.CreateQP(QPInitAttr{Type: qpattr.GSI, SendCQ: a.cq}); err == nil {
		t.Fatalf("a second GSI QP was created")
	}
	for _, n := range []*node{a, b} {
		steps := []struct {
			a    qpattr.Attr
			mask qpattr.AttrMask
		}{
			{qpattr.Attr{State: qpattr.Init, QKey: wire.QP1QKey}, qpattr.AttrState | qpattr.AttrPKeyIndex | qpattr.AttrQKey},
			{qpattr.Attr{State: qpattr.RTR}, qpattr.AttrState},
			{qpattr.Attr{State: qpattr.RTS}, qpattr.AttrState | qpattr.AttrSQPSN},
		}
		for _, s := range steps {
			if err := n.qp.ModifySync(&QPAttr{Attr: s.a}, s.mask); err != nil {
				t.Fatalf("GSI to %v: %v", s.a.State, err)
			}
		}
	}
	ah, err := a.pd.CreateAH(AV{DGID: b.gid(), DMAC: b.d.info.MAC})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	recv(t, b, 1, 0, 40+256)
	mad := make([]byte, 256)
	mad[1] = 0x07 // MgmtClass CM
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: mad[:200], AH: ah, RemoteQPN: 1})
	pollOne(t, a.cq)
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 240, QPN: 1, SrcQP: 1, Flags: cq.GRH})
}
