// The responder against a hand-driven peer: crafted requests, the exact
// responses they get, and hostile frames that must be dropped and counted.

package engine

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

const rawQPN = 0x77 // the hand-driven peer's QP number

// rawPeer drives one end of a memory link by hand.
type rawPeer struct {
	t     testing.TB
	l     link.Link
	d     *Device // the device on the other end
	dqpn  uint32  // the device QP's number
	bufs  [][]byte
	sizes []int
}

// newRawPeer opens a device on one end of a memory link, creates an RC node on
// it connected to rawQPN at addrA, and returns both.
func newRawPeer(t testing.TB, no nodeOpts, co connOpts) (*rawPeer, *node) {
	t.Helper()
	return newRawPeerLink(t, link.MemoryOptions{}, no, co)
}

// newRawPeerLink is newRawPeer over a memory link with options lo.
func newRawPeerLink(t testing.TB, lo link.MemoryOptions, no nodeOpts, co connOpts) (*rawPeer, *node) {
	t.Helper()
	la, lb, err := link.NewMemoryPair(lo)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(lb, Config{GIDs: gids(addrB)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		la.Close()
		lb.Close()
	})
	n := newNode(t, d, no)
	rawConnect(t, n.qp, no.typ, la.Info().MAC, co)
	r := &rawPeer{t: t, l: la, d: d, dqpn: n.qp.QPN(), bufs: make([][]byte, 64), sizes: make([]int, 64)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, 9000)
	}
	return r, n
}

// rawConnect takes qp to RTS, connected to the raw peer's rawQPN at addrA.
func rawConnect(t testing.TB, qp *QP, typ qpattr.Type, dmac net.HardwareAddr, co connOpts) {
	t.Helper()
	if co.mtu == 0 {
		co.mtu = qpattr.MTU1024
	}
	if co.access == 0 {
		co.access = qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead | qpattr.AccessRemoteAtomic
	}
	steps := []struct {
		a    QPAttr
		mask qpattr.AttrMask
	}{
		{QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1, AccessFlags: co.access}},
			qpattr.AttrState | qpattr.AttrPKeyIndex | qpattr.AttrPort | qpattr.AttrAccessFlags},
		{QPAttr{Attr: qpattr.Attr{State: qpattr.RTR, PathMTU: co.mtu, DestQPN: rawQPN, RQPSN: 1000,
			MaxDestRdAtomic: max(co.rdAtomic, 1), MinRNRTimer: 5}, AV: AV{DGID: gids(addrA)[0], DMAC: dmac}},
			qpattr.AttrState | qpattr.AttrAV | qpattr.AttrPathMTU | qpattr.AttrDestQPN | qpattr.AttrRQPSN |
				qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer},
		{QPAttr{Attr: qpattr.Attr{State: qpattr.RTS, SQPSN: 5000, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}},
			qpattr.AttrState | qpattr.AttrSQPSN | qpattr.AttrTimeout | qpattr.AttrRetryCnt | qpattr.AttrRNRRetry | qpattr.AttrMaxQPRdAtomic},
	}
	if typ == qpattr.UC {
		// UC has no responder resources, RNR, timeout or retries.
		steps[0].a.AccessFlags &^= qpattr.AccessRemoteRead | qpattr.AccessRemoteAtomic
		steps[1].mask &^= qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer
		steps[2].mask &^= qpattr.AttrTimeout | qpattr.AttrRetryCnt | qpattr.AttrRNRRetry | qpattr.AttrMaxQPRdAtomic
	}
	for _, s := range steps {
		if err := qp.ModifySync(&s.a, s.mask); err != nil {
			t.Fatalf("modify to %v: %v", s.a.State, err)
		}
	}
}

// frame builds a frame from the peer with the given IB part.
func (r *rawPeer) frame(ib wire.IBFields) []byte {
	r.t.Helper()
	if ib.BTH.DestQPN == 0 {
		ib.BTH.DestQPN = r.dqpn
	}
	if ib.BTH.PKey == 0 {
		ib.BTH.PKey = wire.DefaultPKey
	}
	f := wire.FrameFields{
		Ethernet:  wire.EthernetFields{Dst: wire.MAC(r.d.info.MAC), Src: wire.MAC{2, 0, 0, 0, 0, 0xa}},
		IPVersion: 4,
		IPv4:      wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: addrA, Dst: addrB},
		UDP:       wire.UDPFields{SrcPort: 0xc000},
		IB:        ib,
	}
	b := make([]byte, f.Len())
	n, err := f.Encode(b)
	if err != nil {
		r.t.Fatalf("encode: %v", err)
	}
	return b[:n]
}

// send writes frames to the device in one batch and waits until the engine has
// handled them.
func (r *rawPeer) send(frames ...[]byte) {
	r.t.Helper()
	if n, err := r.l.WriteBatch(frames); n != len(frames) || err != nil {
		r.t.Fatalf("WriteBatch: %d, %v", n, err)
	}
	r.d.Sync().Wait()
	r.d.Sync().Wait()
}

// req builds a request.
func (r *rawPeer) req(op wire.Opcode, psn wire.PSN, ib wire.IBFields) []byte {
	ib.BTH.Opcode = op
	ib.BTH.PSN = psn
	ib.BTH.AckReq = true
	return r.frame(ib)
}

// recv returns the packets the device sent, waiting up to d for at least want.
func (r *rawPeer) recv(want int, d time.Duration) []wire.Packet {
	r.t.Helper()
	var got []wire.Packet
	deadline := time.Now().Add(d)
	for {
		n, err := r.l.ReadBatch(r.bufs, r.sizes)
		if err != nil {
			r.t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			var p wire.Packet
			f := append([]byte(nil), r.bufs[i][:r.sizes[i]]...)
			if err := wire.ParseAndVerify(f, &p); err != nil {
				r.t.Fatalf("device sent a bad frame: %v", err)
			}
			got = append(got, p)
		}
		if len(got) >= want && (n == 0 || len(got) > want) {
			return got
		}
		if n == 0 {
			if time.Now().After(deadline) {
				return got
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// expect checks one response: opcode, PSN and AETH syndrome.
func expectAck(t testing.TB, p wire.Packet, op wire.Opcode, psn wire.PSN, syn wire.Syndrome) {
	t.Helper()
	if p.Opcode != op || p.BTH.PSN() != psn || (p.AETH != nil && p.AETH.Syndrome() != syn) || p.BTH.DestQPN() != rawQPN {
		s := wire.Syndrome(0)
		if p.AETH != nil {
			s = p.AETH.Syndrome()
		}
		t.Fatalf("response: got %v PSN %d %v to QP %#x, want %v PSN %d %v", p.Opcode, p.BTH.PSN(), s, p.BTH.DestQPN(), op, psn, syn)
	}
}

var ack = wire.ACKSyndrome(wire.CreditsUnlimited)

func TestResponderPSN(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{}, connOpts{})
	for i := range 4 {
		recv(t, n, uint64(i), uint64(i)*64, 64)
	}
	send := func(psn wire.PSN) []byte {
		return r.req(wire.RCSendOnly, psn, wire.IBFields{Payload: []byte{byte(psn)}})
	}
	// C9-94: an out-of-sequence PSN gets one NAK (sequence error) naming the
	// expected PSN, and no more until the gap closes.
	r.send(send(1002), send(1003))
	got := r.recv(1, time.Second)
	if len(got) != 1 {
		t.Fatalf("got %d responses to two out-of-sequence requests, want 1", len(got))
	}
	expectAck(t, got[0], wire.RCAcknowledge, 1000, wire.NAKSyndrome(wire.NAKPSNSequenceError))
	// In order: ACKed (coalesced into one ACK for the batch).
	r.send(send(1000), send(1001))
	got = r.recv(1, time.Second)
	if len(got) != 1 {
		t.Fatalf("got %d responses, want 1 coalesced ACK", len(got))
	}
	expectAck(t, got[0], wire.RCAcknowledge, 1001, ack)
	if a := got[0].AETH.MSN(); a != 2 {
		t.Fatalf("MSN: got %d, want 2", a)
	}
	// C9-105: a duplicate SEND is acknowledged again, not executed again.
	r.send(send(1000))
	got = r.recv(1, time.Second)
	expectAck(t, got[0], wire.RCAcknowledge, 1001, ack)
	wcs := pollN(t, n.cq, 2, time.Second)
	for i, w := range wcs {
		if w.WRID != uint64(i) || w.ByteLen != 1 || n.buf[i*64] != byte(1000+i) {
			t.Fatalf("receive %d: %+v", i, w)
		}
	}
	noMore(t, n.cq)
	c := r.d.Counters()
	if c[CntOutOfSeqReq] != 1 || c[CntDupReq] != 1 || c[CntAckDeferred] != 1 {
		t.Fatalf("out_of_seq_request %d duplicate_request %d ack_deferred %d, want 1 1 1", c[CntOutOfSeqReq], c[CntDupReq], c[CntAckDeferred])
	}
}

// TestResponderDuplicateSendACKBeforeRead: C9-105's ACK of a duplicate SEND
// covers the last SEND or WRITE, never a READ or atomic executed after it
// (their responses are their acknowledgement). rxe's requester completes a
// READ on a plain ACK at its PSN, without its data: an rping server over a
// lossy link printed the previous ping's data that way.
func TestResponderDuplicateSendACKBeforeRead(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{}, connOpts{rdAtomic: 4})
	recv(t, n, 1, 0, 64)
	binary.NativeEndian.PutUint64(n.buf[8192:], 10)
	send := r.req(wire.RCSendOnly, 1000, wire.IBFields{Payload: []byte("go")})
	read := r.req(wire.RCRDMAReadRequest, 1001, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr() + 4096, RKey: n.mr.RKey(), DMALen: 100}})
	fa := r.req(wire.RCFetchAdd, 1002, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: n.mr.Addr() + 8192, RKey: n.mr.RKey(), SwapAdd: 5}})
	r.send(send, read, fa)
	if got := r.recv(3, time.Second); len(got) != 3 {
		t.Fatalf("got %d responses, want the SEND's ACK, the READ response and the atomic ACK", len(got))
	}
	r.send(send)
	got := r.recv(1, time.Second)
	if len(got) != 1 {
		t.Fatalf("got %d responses to the duplicate SEND, want 1", len(got))
	}
	expectAck(t, got[0], wire.RCAcknowledge, 1000, ack)
}

func TestResponderDuplicateReadAndAtomic(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{}, connOpts{rdAtomic: 4})
	fill(n.buf[:3000], 61)
	binary.NativeEndian.PutUint64(n.buf[8192:], 10)
	read := r.req(wire.RCRDMAReadRequest, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 3000}})
	fa := r.req(wire.RCFetchAdd, 1003, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: n.mr.Addr() + 8192, RKey: n.mr.RKey(), SwapAdd: 5}})
	r.send(read, fa)
	got := r.recv(4, time.Second)
	if len(got) != 4 {
		t.Fatalf("got %d responses, want 4", len(got))
	}
	expectAck(t, got[0], wire.RCRDMAReadResponseFirst, 1000, ack)
	expectAck(t, got[1], wire.RCRDMAReadResponseMiddle, 1001, 0)
	expectAck(t, got[2], wire.RCRDMAReadResponseLast, 1002, ack)
	expectAck(t, got[3], wire.RCAtomicAcknowledge, 1003, ack)
	if v := got[3].AtomicAckETH.OrigRemData(); v != 10 {
		t.Fatalf("atomic original: got %d, want 10", v)
	}
	// Both again: the READ is executed again from its middle (C9-113 allows a tail),
	// the atomic is answered from the saved result and not executed twice (C9-112).
	fill(n.buf[:3000], 62)
	tail := r.req(wire.RCRDMAReadRequest, 1001, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr() + 1024, RKey: n.mr.RKey(), DMALen: 1976}})
	r.send(tail, fa)
	got = r.recv(3, time.Second)
	if len(got) != 3 {
		t.Fatalf("got %d responses to duplicates, want 3", len(got))
	}
	expectAck(t, got[0], wire.RCRDMAReadResponseMiddle, 1001, 0)
	expectAck(t, got[1], wire.RCRDMAReadResponseLast, 1002, ack)
	checkBytes(t, "replayed READ data", got[0].Payload, n.buf[1024:2048])
	expectAck(t, got[2], wire.RCAtomicAcknowledge, 1003, ack)
	if v := got[2].AtomicAckETH.OrigRemData(); v != 10 {
		t.Fatalf("replayed atomic original: got %d, want 10", v)
	}
	if v := binary.NativeEndian.Uint64(n.buf[8192:]); v != 15 {
		t.Fatalf("atomic target: got %d, want 15 (executed once)", v)
	}
}

// TestResponderInvalidRequests: class C errors NAK with Invalid Request and move
// the QP to ERR.
func TestResponderInvalidRequests(t *testing.T) {
	cases := []struct {
		name   string
		co     connOpts
		frames func(r *rawPeer, n *node) [][]byte
		nakPSN wire.PSN
		code   wire.NAKCode
		recvSt cq.Status // the receive's status when a message was under way
	}{
		{"misaligned atomic", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{r.req(wire.RCCompareSwap, 1000, wire.IBFields{AtomicETH: wire.AtomicETHFields{VA: n.mr.Addr() + 4, RKey: n.mr.RKey()}})}
		}, 1000, wire.NAKInvalidRequest, 0},
		{"MIDDLE without FIRST", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{r.req(wire.RCSendMiddle, 1000, wire.IBFields{Payload: make([]byte, 1024)})}
		}, 1000, wire.NAKInvalidRequest, 0},
		{"ONLY inside a message", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{
				r.req(wire.RCRDMAWriteFirst, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 4096}, Payload: make([]byte, 1024)}),
				r.req(wire.RCSendOnly, 1001, wire.IBFields{Payload: []byte("x")}),
			}
		}, 1001, wire.NAKInvalidRequest, 0},
		{"FIRST shorter than the MTU", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{r.req(wire.RCRDMAWriteFirst, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 4096}, Payload: make([]byte, 1000)})}
		}, 1000, wire.NAKInvalidRequest, 0},
		{"WRITE longer than its RETH", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{r.req(wire.RCRDMAWriteOnly, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 10}, Payload: make([]byte, 20)})}
		}, 1000, wire.NAKInvalidRequest, 0},
		// A LAST or ONLY ends the RETH's DMA: one that would leave some of it
		// (a PMTU of it, which rxe takes) is an invalid request, not a
		// message shorter than the RETH said.
		{"WRITE ONLY shorter than its RETH", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{r.req(wire.RCRDMAWriteOnly, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 2048}, Payload: make([]byte, 1024)})}
		}, 1000, wire.NAKInvalidRequest, 0},
		{"WRITE LAST before its RETH's end", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{
				r.req(wire.RCRDMAWriteFirst, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 3072}, Payload: make([]byte, 1024)}),
				r.req(wire.RCRDMAWriteLast, 1001, wire.IBFields{Payload: make([]byte, 1024)}),
			}
		}, 1001, wire.NAKInvalidRequest, 0},
		// The payload fits the DMA, but with its pad it does not fill whole
		// 4-byte words (rxe's check_rkey: pad != -resid & 3).
		{"WRITE ONLY with a wrong pad", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{unpadded(r.t, r.req(wire.RCRDMAWriteOnly, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 5}, Payload: []byte("abcde")}))}
		}, 1000, wire.NAKInvalidRequest, 0},
		// A LAST carries 1 to PMTU bytes (C9-92; rxe: "last packet zero or
		// too long"): a malformed request, the remote's invalid request at
		// this end too, as rxe's RESPST_ERR_LENGTH; only a message longer
		// than the receive buffer is a local length error.
		{"SEND LAST with no payload", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{
				r.req(wire.RCSendFirst, 1000, wire.IBFields{Payload: make([]byte, 1024)}),
				r.req(wire.RCSendLast, 1001, wire.IBFields{}),
			}
		}, 1001, wire.NAKInvalidRequest, cq.RemInvReqErr},
		{"SEND longer than the receive", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{
				r.req(wire.RCSendFirst, 1000, wire.IBFields{Payload: make([]byte, 1024)}),
				r.req(wire.RCSendMiddle, 1001, wire.IBFields{Payload: make([]byte, 1024)}),
			}
		}, 1001, wire.NAKInvalidRequest, cq.LocLenErr},
		{"too many READs", connOpts{rdAtomic: 2}, func(r *rawPeer, n *node) [][]byte {
			var f [][]byte
			for i := range 3 {
				f = append(f, r.req(wire.RCRDMAReadRequest, wire.PSN(1000+i), wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 8}}))
			}
			return f
		}, 1002, wire.NAKInvalidRequest, 0},
		{"bad R_Key", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{r.req(wire.RCRDMAWriteOnly, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: 0, DMALen: 4}, Payload: []byte("abcd")})}
		}, 1000, wire.NAKRemoteAccessError, 0},
		{"SEND_WITH_INVALIDATE of a plain region", connOpts{}, func(r *rawPeer, n *node) [][]byte {
			return [][]byte{r.req(wire.RCSendOnlyWithInvalidate, 1000, wire.IBFields{IETH: n.mr.RKey(), Payload: []byte("x")})}
		}, 1000, wire.NAKInvalidRequest, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, n := newRawPeer(t, nodeOpts{}, c.co)
			recv(t, n, 1, 0, 1500)
			r.send(c.frames(r, n)...)
			got := r.recv(1, time.Second)
			last := got[len(got)-1]
			expectAck(t, last, wire.RCAcknowledge, c.nakPSN, wire.NAKSyndrome(c.code))
			if s, ok := errState(n.qp); !ok {
				t.Fatalf("state: got %v, want ERR", s)
			}
			w := pollOne(t, n.cq)
			if w.WRID != 1 || w.Status == cq.Success || (c.recvSt != 0 && w.Status != c.recvSt) {
				t.Fatalf("receive after the error: %+v, want status %v", w, c.recvSt)
			}
			// Nothing more leaves an ERR QP.
			r.send(r.req(wire.RCSendOnly, c.nakPSN+1, wire.IBFields{}))
			if extra := r.recv(0, 20*time.Millisecond); len(extra) != 0 {
				t.Fatalf("an ERR QP answered: %v", extra[0].Opcode)
			}
		})
	}
}

// unpadded cuts an IPv4 frame's pad bytes off and sets its pad count to 0: the
// payload stays, but payload and pad no longer fill whole 4-byte words. The
// lengths, checksum and ICRC are made right again.
func unpadded(t testing.TB, f []byte) []byte {
	t.Helper()
	var p wire.Packet
	if err := wire.Parse(f, &p); err != nil {
		t.Fatal(err)
	}
	pad := p.BTH.PadCount()
	if pad == 0 {
		t.Fatal("the frame has no pad to cut")
	}
	icrc := len(f) - wire.ICRCLen
	f = append(f[:icrc-pad:icrc-pad], f[icrc:]...)
	if err := wire.Parse(f, &p); err == nil {
		t.Fatal("the cut frame still parses with its old lengths")
	}
	ip := wire.IPv4(f[wire.EthernetLen:])
	ip.SetTotalLength(ip.TotalLength() - pad)
	ip.UpdateChecksum()
	udp := wire.UDP(f[wire.EthernetLen+wire.IPv4Len:])
	udp.SetLength(udp.Length() - pad)
	udp.SetChecksum(0)
	if err := wire.Parse(f, &p); err != nil {
		t.Fatal(err)
	}
	p.BTH.SetPadCount(0)
	p.UpdateICRC()
	return f
}

// TestHostileFrames: garbage, truncated and mutated frames, wrong keys and
// addresses are dropped and counted; the engine keeps serving.
func TestHostileFrames(t *testing.T) {
	r, n := newRawPeer(t, nodeOpts{}, connOpts{})
	good := r.req(wire.RCRDMAWriteOnly, 1000, wire.IBFields{RETH: wire.RETHFields{VA: n.mr.Addr(), RKey: n.mr.RKey(), DMALen: 4}, Payload: []byte("good")})
	// Wrong P_Key, wrong source or destination address: dropped and counted
	// before anything else.
	r.send(r.req(wire.RCSendOnly, 1000, wire.IBFields{BTH: wire.BTHFields{PKey: 0x1234}}))
	var p wire.Packet
	for _, set := range []func(wire.IPv4){
		func(h wire.IPv4) { h.SetSrc(netipMust("192.0.2.99")) },
		func(h wire.IPv4) { h.SetDst(netipMust("192.0.2.99")) },
	} {
		other := r.req(wire.RCSendOnly, 1000, wire.IBFields{})
		if err := wire.Parse(other, &p); err != nil {
			t.Fatal(err)
		}
		set(p.IPv4)
		p.IPv4.UpdateChecksum()
		p.UpdateICRC()
		r.send(other)
	}
	c := r.d.Counters()
	if c[CntRcvdBadPKey] != 1 || c[CntRcvdBadAddr] != 2 {
		t.Fatalf("rcvd_bad_pkey %d rcvd_bad_addr %d, want 1 2", c[CntRcvdBadPKey], c[CntRcvdBadAddr])
	}
	if s := n.qp.State(); s != qpattr.RTS {
		t.Fatalf("state after dropped frames: got %v, want RTS", s)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	var frames [][]byte
	for range 2000 {
		f := append([]byte(nil), good...)
		switch rng.IntN(4) {
		case 0: // random bytes
			f = make([]byte, rng.IntN(200))
			for i := range f {
				f[i] = byte(rng.Uint32())
			}
		case 1: // truncated
			f = f[:rng.IntN(len(f))]
		case 2: // a bit flipped
			i := rng.IntN(len(f) * 8)
			f[i/8] ^= 1 << (i % 8)
		case 3: // a byte changed and the ICRC fixed up: a well-formed hostile packet
			i := 14 + 20 + 8 + rng.IntN(len(f)-14-20-8-4)
			f[i] = byte(rng.Uint32())
			if wire.Parse(f, &p) == nil {
				p.UpdateICRC()
			}
		}
		frames = append(frames, f)
	}
	for i := 0; i < len(frames); i += 32 {
		r.send(frames[i:min(i+32, len(frames))]...)
	}
	r.recv(0, 10*time.Millisecond)
	c = r.d.Counters()
	t.Logf("malformed %d bad_icrc %d unknown_qp %d bad_state %d bad_pkey %d bad_addr %d",
		c[CntRcvdMalformed], c[CntRcvdBadICRC], c[CntRcvdUnknownQP], c[CntRcvdBadState], c[CntRcvdBadPKey], c[CntRcvdBadAddr])
	if c[CntRcvdMalformed] == 0 || c[CntRcvdBadICRC] == 0 {
		t.Fatalf("hostile frames not counted")
	}
	// The engine still serves.
	if err := r.d.Sync().Wait(); err != nil {
		t.Fatal(err)
	}
}
