// Interoperability with Linux rxe: replay the requests of a real rxe capture into
// the engine and compare what it answers, and what it sends for the same work,
// with what rxe put on the wire, byte for byte from the IP header on.

package engine

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// readPcap returns the frames of a golden capture.
func readPcap(t testing.TB, name string) [][]byte {
	t.Helper()
	return testutil.ReadPcap(t, filepath.Join(testutil.SharedDir(t), "pcaps", name))
}

// sameFromIP compares two frames from the IP header on, after giving got the IPv4
// identification of want (Linux numbers its datagrams; the ICRC covers the field).
func sameFromIP(t testing.TB, what string, got, want []byte) {
	t.Helper()
	g := append([]byte(nil), got...)
	var p wire.Packet
	if err := wire.Parse(g, &p); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var w wire.Packet
	if err := wire.Parse(want, &w); err != nil {
		t.Fatalf("%s: golden frame: %v", what, err)
	}
	p.IPv4.SetID(w.IPv4.ID())
	p.IPv4.UpdateChecksum()
	p.UpdateICRC()
	if !bytes.Equal(p.Frame[14:], w.Frame[14:]) {
		t.Fatalf("%s:\n got %x\nwant %x", what, p.Frame[14:], w.Frame[14:])
	}
}

// TestGoldenRCSend plays guest b of rc_send.pcap (ibv_rc_pingpong, 3000-byte
// SENDs at path MTU 1024, both QPs numbered 0x12).
func TestGoldenRCSend(t *testing.T) {
	frames := readPcap(t, "rc_send.pcap")
	var p wire.Packet
	aMAC := wire.MAC{0x52, 0x54, 0, 0xc0, 2, 0x0b}
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	d, err := Open(lb, Config{GIDs: []netdev.GID{netdev.GIDFromAddr(netipMust("192.0.2.12"))}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	newNode(t, d, nodeOpts{}) // takes QPN 0x11
	n := newNode(t, d, nodeOpts{})
	if n.qp.QPN() != 0x12 {
		t.Fatalf("QPN %#x, want 0x12", n.qp.QPN())
	}
	// PSNs from the capture: a starts at 3904638, b at 12236652.
	steps := []struct {
		a    QPAttr
		mask qpattr.AttrMask
	}{
		{QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1, AccessFlags: qpattr.AccessLocalWrite}},
			qpattr.AttrState | qpattr.AttrPKeyIndex | qpattr.AttrPort | qpattr.AttrAccessFlags},
		{QPAttr{Attr: qpattr.Attr{State: qpattr.RTR, PathMTU: qpattr.MTU1024, DestQPN: 0x12, RQPSN: 3904638,
			MaxDestRdAtomic: 1, MinRNRTimer: 12}, AV: AV{DGID: netdev.GIDFromAddr(netipMust("192.0.2.11")), DMAC: aMAC[:]}},
			qpattr.AttrState | qpattr.AttrAV | qpattr.AttrPathMTU | qpattr.AttrDestQPN | qpattr.AttrRQPSN |
				qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer},
		{QPAttr{Attr: qpattr.Attr{State: qpattr.RTS, SQPSN: 12236652, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}},
			qpattr.AttrState | qpattr.AttrSQPSN | qpattr.AttrTimeout | qpattr.AttrRetryCnt | qpattr.AttrRNRRetry | qpattr.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := n.qp.ModifySync(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	r := &rawPeer{t: t, l: la, d: d, dqpn: 0x12, bufs: make([][]byte, 64), sizes: make([]int, 64)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, 2048)
	}
	for i := range 3 {
		recv(t, n, uint64(i), uint64(i)*4096, 4096)
	}
	fromA := func(f []byte) bool {
		return wire.Parse(f, &p) == nil && p.IPv4.Src() == netipMust("192.0.2.11")
	}
	var pending [][]byte // a's requests not yet answered
	var bSend [][]byte   // b's SEND packets of the current message
	acks, msgs := 0, 0
	for i := 0; i < len(frames); i++ {
		f := frames[i]
		if err := wire.Parse(f, &p); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		switch {
		case fromA(f) && p.Opcode != wire.RCAcknowledge:
			pending = append(pending, f)
		case fromA(f): // a's ACK of b's SEND
			r.send(f)
		case p.Opcode == wire.RCAcknowledge: // b's ACK: ours must equal it
			r.send(pending...)
			pending = nil
			got := r.recv(1, time.Second)
			if len(got) != 1 {
				t.Fatalf("frame %d: got %d responses, want 1", i, len(got))
			}
			sameFromIP(t, name("ACK at frame %d", i), got[0].Frame, f)
			acks++
		default: // b's SEND packets: post the same message and compare
			bSend = append(bSend, f)
			if wire.Opcodes[p.Opcode].Mask&wire.MaskLast == 0 {
				continue
			}
			var msg []byte
			for _, s := range bSend {
				var q wire.Packet
				wire.Parse(s, &q)
				msg = append(msg, q.Payload...)
			}
			copy(n.buf[1<<19:], msg)
			send(t, n, SendWR{Opcode: WRSend, SGL: []SGE{n.mr.SGE(1<<19, uint32(len(msg)))}})
			got := r.recv(len(bSend), time.Second)
			if len(got) != len(bSend) {
				t.Fatalf("frame %d: sent %d packets, want %d", i, len(got), len(bSend))
			}
			for k := range got {
				sameFromIP(t, name("SEND packet %d before frame %d", k, i), got[k].Frame, bSend[k])
			}
			bSend = nil
			msgs++
		}
	}
	if acks != 3 || msgs != 3 {
		t.Fatalf("compared %d ACKs and %d SENDs, want 3 and 3", acks, msgs)
	}
	wcs := pollN(t, n.cq, 3, time.Second)
	for i, w := range wcs {
		if w.ByteLen != 3000 || w.WRID != uint64(i) {
			t.Fatalf("receive %d: %+v", i, w)
		}
	}
}

// TestGoldenResponder replays the requests of rxe captures, one frame at a time,
// into a device that plays the rxe responder (same QPN, PSNs, memory contents,
// IOVAs; the R_Keys are rewritten to the device's), and compares every response
// it sends with rxe's, in order, byte for byte from the IP header on.
func TestGoldenResponder(t *testing.T) {
	for _, name := range []string{"rc_send.pcap", "rdma_write.pcap", "rdma_read.pcap", "atomic_fetch_add.pcap",
		"atomic_cmp_swap.pcap", "rdma_write_loss_retransmit.pcap"} {
		t.Run(name, func(t *testing.T) { goldenResponder(t, readPcap(t, name)) })
	}
}

func goldenResponder(t *testing.T, frames [][]byte) {
	reqAddr, respAddr := netipMust("192.0.2.11"), netipMust("192.0.2.12")
	var p wire.Packet
	var reqs, resps [][]byte
	var respQPN, reqQPN uint32
	var firstPSN wire.PSN
	lo, hi := ^uint64(0), uint64(0)
	mem := map[uint64][]byte{}        // VA -> bytes seen in READ responses
	var atomicVA, atomicOrig []uint64 // VA of each atomic, original value of each atomic ACK
	var readVA []uint64               // VA of each READ request, in order
	for i, f := range frames {
		if err := wire.Parse(f, &p); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		m := wire.Opcodes[p.Opcode].Mask
		switch {
		case p.IPv4.Src() == reqAddr && m&wire.MaskReq != 0:
			if len(reqs) == 0 {
				respQPN, firstPSN = p.BTH.DestQPN(), p.BTH.PSN()
			}
			reqs = append(reqs, f)
			if p.RETH != nil {
				lo, hi = min(lo, p.RETH.VA()), max(hi, p.RETH.VA()+uint64(p.RETH.DMALen()))
				if m&wire.MaskRead != 0 {
					readVA = append(readVA, p.RETH.VA())
				}
			}
			if p.AtomicETH != nil {
				lo, hi = min(lo, p.AtomicETH.VA()), max(hi, p.AtomicETH.VA()+8)
				atomicVA = append(atomicVA, p.AtomicETH.VA())
			}
		case p.IPv4.Src() == respAddr && m&wire.MaskAck != 0:
			reqQPN = p.BTH.DestQPN()
			resps = append(resps, f)
			if p.AtomicAckETH != nil {
				atomicOrig = append(atomicOrig, p.AtomicAckETH.OrigRemData())
			}
		}
	}
	// The READ data: the k-th response packet of a READ at VA v carries v+k*MTU.
	for i, k, cur := 0, 0, uint64(0); i < len(resps); i++ {
		wire.Parse(resps[i], &p)
		if wire.Opcodes[p.Opcode].Mask&wire.MaskReadResponse == 0 {
			continue
		}
		if wire.Opcodes[p.Opcode].Mask&wire.MaskFirst != 0 {
			if k < len(readVA) {
				cur = readVA[k]
			}
			k++
		}
		mem[cur] = append([]byte(nil), p.Payload...)
		cur += uint64(len(p.Payload))
	}
	if lo > hi {
		lo, hi = 0x10000, 0x10000+4096
	}
	la, pd, n := goldenNode(t, respAddr, respQPN, nodeOpts{bufLen: 64})
	buf := make([]byte, hi-lo+4096)
	for va, b := range mem {
		copy(buf[va-lo:], b)
	}
	// Each word an atomic hits first holds what rxe's first ACK for it reports.
	seen := map[uint64]bool{}
	for i, va := range atomicVA {
		if i < len(atomicOrig) && !seen[va] {
			seen[va] = true
			binary.NativeEndian.PutUint64(buf[va-lo:], atomicOrig[i])
		}
	}
	region, err := pd.RegMR(buf, lo, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Dereg()
	steps := []struct {
		a    QPAttr
		mask qpattr.AttrMask
	}{
		{QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1, AccessFlags: qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead | qpattr.AccessRemoteAtomic}},
			qpattr.AttrState | qpattr.AttrPKeyIndex | qpattr.AttrPort | qpattr.AttrAccessFlags},
		{QPAttr{Attr: qpattr.Attr{State: qpattr.RTR, PathMTU: qpattr.MTU1024, DestQPN: reqQPN, RQPSN: firstPSN,
			MaxDestRdAtomic: 16, MinRNRTimer: 12}, AV: AV{DGID: netdev.GIDFromAddr(reqAddr), DMAC: []byte{0x52, 0x54, 0, 0xc0, 2, 0x0b}}},
			qpattr.AttrState | qpattr.AttrAV | qpattr.AttrPathMTU | qpattr.AttrDestQPN | qpattr.AttrRQPSN |
				qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer},
	}
	for _, s := range steps {
		if err := n.qp.ModifySync(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	ring := make([]byte, 4096)
	rmr, err := pd.RegMR(ring, 0x1000, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer rmr.Dereg()
	for range 100 {
		if _, err := n.qp.PostRecv([]RecvWR{{SGL: []SGE{rmr.SGE(0, 4096)}}}); err != nil {
			break
		}
	}
	r := &rawPeer{t: t, l: la, d: n.d, dqpn: respQPN, bufs: make([][]byte, 64), sizes: make([]int, 64)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, 2048)
	}
	var got []wire.Packet
	for _, f := range reqs {
		f = append([]byte(nil), f...)
		wire.Parse(f, &p)
		if p.RETH != nil {
			p.RETH.SetRKey(region.RKey())
		}
		if p.AtomicETH != nil {
			p.AtomicETH.SetRKey(region.RKey())
		}
		p.UpdateICRC()
		r.send(f)
		got = append(got, r.recv(0, 0)...)
	}
	got = append(got, r.recv(len(resps)-len(got), time.Second)...)
	if len(got) != len(resps) {
		t.Fatalf("the device sent %d responses, rxe %d", len(got), len(resps))
	}
	for i := range got {
		sameFromIP(t, name("response %d (%v)", i, got[i].Opcode), got[i].Frame, resps[i])
	}
	t.Logf("%d requests, %d responses identical to rxe's", len(reqs), len(resps))
}

// TestGoldenRequester posts the work requests behind the requests of rxe captures
// on a device that plays the rxe requester (same QPN and PSNs), compares the
// request frames it sends with rxe's byte for byte from the IP header on, then
// feeds rxe's responses back and checks the completions and the data read.
func TestGoldenRequester(t *testing.T) {
	for _, name := range []string{"rc_send.pcap", "rdma_write.pcap", "rdma_read.pcap", "atomic_fetch_add.pcap",
		"atomic_cmp_swap.pcap", "uc_send.pcap", "ud_send.pcap"} {
		t.Run(name, func(t *testing.T) { goldenRequester(t, readPcap(t, name)) })
	}
}

func goldenRequester(t *testing.T, frames [][]byte) {
	reqAddr, respAddr := netipMust("192.0.2.11"), netipMust("192.0.2.12")
	var p wire.Packet
	var reqs, resps [][]byte
	var reqQPN, respQPN, qkey uint32
	var firstPSN wire.PSN
	typ := qpattr.RC
	for i, f := range frames {
		if err := wire.Parse(f, &p); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		m := wire.Opcodes[p.Opcode].Mask
		switch {
		case p.IPv4.Src() == reqAddr && m&wire.MaskReq != 0:
			if len(reqs) == 0 {
				respQPN, firstPSN = p.BTH.DestQPN(), p.BTH.PSN()
				switch p.Opcode.Transport() {
				case wire.TransportUC:
					typ = qpattr.UC
				case wire.TransportUD:
					typ, reqQPN, qkey = qpattr.UD, p.DETH.SrcQPN(), p.DETH.QKey()
				}
			}
			reqs = append(reqs, f)
		case p.IPv4.Src() == respAddr && m&wire.MaskAck != 0:
			reqQPN = p.BTH.DestQPN()
			resps = append(resps, f)
		case p.IPv4.Src() == respAddr && typ == qpattr.UC:
			reqQPN = p.BTH.DestQPN() // UC pingpong: the peer's SENDs name our QP
		}
	}
	la, pd, n := goldenNode(t, reqAddr, reqQPN, nodeOpts{bufLen: 1 << 20, typ: typ})
	var ah *AH
	var err error
	if typ == qpattr.UD {
		udUpPSN(t, n, qkey, firstPSN)
		if ah, err = pd.CreateAH(AV{DGID: netdev.GIDFromAddr(respAddr), DMAC: []byte{0x52, 0x54, 0, 0xc0, 2, 0x0c}}); err != nil {
			t.Fatal(err)
		}
		defer ah.Destroy()
	}
	steps := []struct {
		a    QPAttr
		mask qpattr.AttrMask
	}{
		{QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1}}, qpattr.AttrState | qpattr.AttrPKeyIndex | qpattr.AttrPort | qpattr.AttrAccessFlags},
		{QPAttr{Attr: qpattr.Attr{State: qpattr.RTR, PathMTU: qpattr.MTU1024, DestQPN: respQPN, RQPSN: 1, MaxDestRdAtomic: 16},
			AV: AV{DGID: netdev.GIDFromAddr(respAddr), DMAC: []byte{0x52, 0x54, 0, 0xc0, 2, 0x0c}}},
			qpattr.AttrState | qpattr.AttrAV | qpattr.AttrPathMTU | qpattr.AttrDestQPN | qpattr.AttrRQPSN |
				qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer},
		{QPAttr{Attr: qpattr.Attr{State: qpattr.RTS, SQPSN: firstPSN, Timeout: 20, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}},
			qpattr.AttrState | qpattr.AttrSQPSN | qpattr.AttrTimeout | qpattr.AttrRetryCnt | qpattr.AttrRNRRetry | qpattr.AttrMaxQPRdAtomic},
	}
	if typ == qpattr.UC {
		steps[1].mask &^= qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer
		steps[2].mask = qpattr.AttrState | qpattr.AttrSQPSN
	}
	for _, s := range steps {
		if typ == qpattr.UD {
			break
		}
		if err := n.qp.ModifySync(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	// The work requests behind the requests: a message is FIRST..LAST or ONLY.
	var wrs []SendWR
	var reads [][2]uint64 // local offset and length of each READ
	off := uint64(0)
	var cur *SendWR
	for _, f := range reqs {
		wire.Parse(f, &p)
		m := wire.Opcodes[p.Opcode].Mask
		if m&wire.MaskFirst != 0 {
			wrs = append(wrs, SendWR{WRID: uint64(len(wrs)), Flags: SendSignaled, SGL: []SGE{n.mr.SGE(off, 0)}})
			cur = &wrs[len(wrs)-1]
			if p.DETH != nil {
				cur.AH, cur.RemoteQPN, cur.RemoteQKey = ah, p.BTH.DestQPN(), p.DETH.QKey()
			}
			switch {
			case m&wire.MaskSend != 0:
				cur.Opcode = WRSend
			case m&wire.MaskWrite != 0:
				cur.Opcode = WRRDMAWrite
			case m&wire.MaskRead != 0:
				cur.Opcode = WRRDMARead
				cur.SGL[0].Length = p.RETH.DMALen()
				reads = append(reads, [2]uint64{off, uint64(p.RETH.DMALen())})
				off += uint64(p.RETH.DMALen())
			case p.Opcode == wire.RCCompareSwap:
				cur.Opcode, cur.Swap, cur.CompareAdd = WRAtomicCmpSwp, p.AtomicETH.SwapAdd(), p.AtomicETH.Compare()
			case p.Opcode == wire.RCFetchAdd:
				cur.Opcode, cur.CompareAdd = WRAtomicFetchAdd, p.AtomicETH.SwapAdd()
			}
			if p.RETH != nil {
				cur.RemoteAddr, cur.RKey = p.RETH.VA(), p.RETH.RKey()
			}
			if p.AtomicETH != nil {
				cur.RemoteAddr, cur.RKey = p.AtomicETH.VA(), p.AtomicETH.RKey()
				cur.SGL[0].Length = 8
				off += 8
			}
		}
		if m&(wire.MaskSend|wire.MaskWrite) != 0 {
			copy(n.buf[off:], p.Payload)
			cur.SGL[0].Length += uint32(len(p.Payload))
			off += uint64(len(p.Payload))
		}
	}
	if _, err := n.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	r := &rawPeer{t: t, l: la, d: n.d, dqpn: reqQPN, bufs: make([][]byte, 64), sizes: make([]int, 64)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, 2048)
	}
	got := r.recv(len(reqs), 2*time.Second)
	if len(got) != len(reqs) {
		t.Fatalf("the device sent %d requests, rxe %d", len(got), len(reqs))
	}
	for i := range got {
		sameFromIP(t, name("request %d (%v)", i, got[i].Opcode), got[i].Frame, reqs[i])
	}
	var readData []byte
	for _, f := range resps {
		wire.Parse(f, &p)
		if wire.Opcodes[p.Opcode].Mask&wire.MaskReadResponse != 0 {
			readData = append(readData, p.Payload...)
		}
		r.send(f)
	}
	wcs := pollN(t, n.cq, len(wrs), 2*time.Second)
	for i, w := range wcs {
		if w.Status != cq.Success || w.WRID != uint64(i) || w.Opcode != wcOpcode(wrs[i].Opcode) {
			t.Fatalf("WC %d: %+v", i, w)
		}
	}
	var local []byte
	for _, rd := range reads {
		local = append(local, n.buf[rd[0]:rd[0]+rd[1]]...)
	}
	checkBytes(t, "READ data", local, readData)
	t.Logf("%d work requests, %d request packets identical to rxe's", len(wrs), len(reqs))
}

// goldenNode opens a device with the capture's address on a fresh memory link, and
// creates QPs until one has the capture's QPN. It returns the other end of the link,
// where the test plays the captured peer, and the node's PD and node.
func goldenNode(t *testing.T, addr netip.Addr, qpn uint32, o nodeOpts) (*link.Memory, *PD, *node) {
	t.Helper()
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close() })
	t.Cleanup(func() { lb.Close() })
	d, err := Open(lb, Config{GIDs: []netdev.GID{netdev.GIDFromAddr(addr)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if o.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	var n *node
	for n == nil || n.qp.QPN() < qpn {
		n = newNode(t, d, o)
	}
	if n.qp.QPN() != qpn {
		t.Fatalf("cannot get QPN %#x", qpn)
	}
	return la, o.pd, n
}
