// The data path over a real veth pair between two namespaces: AF_XDP links (and
// the UDP fallback, whose fixed source port the ICRC must cover) at RoCE MTU 1024
// and 4096.

package engine

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/testenv"
)

// openVeth opens a link of kind k on e inside its namespace and a device on it.
func openVeth(t testing.TB, e *testenv.Endpoint, k link.Kind, v6 bool) *Device {
	t.Helper()
	return openVethConfig(t, e, k, v6, Config{})
}

// openVethConfig is openVeth with the rest of the device's Config.
func openVethConfig(t testing.TB, e *testenv.Endpoint, k link.Kind, v6 bool, cfg Config) *Device {
	t.Helper()
	var l link.Link
	err := e.Do(func() (err error) {
		switch k {
		case link.KindAFXDP:
			l, err = link.NewAFXDP(link.AFXDPOptions{Interface: e.Name})
		case link.KindUDP:
			l, err = link.NewUDP(link.UDPOptions{Interface: e.Name})
		default:
			err = fmt.Errorf("kind %v", k)
		}
		return err
	})
	if err != nil {
		t.Fatalf("open %v link on %s: %v", k, e.Name, err)
	}
	g := netdev.GIDFromAddr(e.IPv4)
	if v6 {
		g = netdev.GIDFromAddr(e.IPv6)
	}
	cfg.GIDs = []netdev.GID{g}
	d, err := Open(l, cfg)
	if err != nil {
		l.Close()
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close device: %v", err)
		}
		l.Close()
	})
	return d
}

// vethNodes opens devices on both ends and connects an RC node pair.
func vethNodes(t testing.TB, p *testenv.Pair, k link.Kind, v6 bool, mtu qpattr.MTU, typ qpattr.Type) (*node, *node) {
	t.Helper()
	da := openVeth(t, &p.A, k, v6)
	db := openVeth(t, &p.B, k, v6)
	cap := qpattr.Cap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}
	a := newNode(t, da, nodeOpts{typ: typ, bufLen: 4 << 20, cap: cap})
	b := newNode(t, db, nodeOpts{typ: typ, bufLen: 4 << 20, cap: cap})
	if typ != qpattr.UD {
		connect(t, a, b, connOpts{mtu: mtu, timeout: 14})
	}
	return a, b
}

func TestVeth(t *testing.T) {
	for _, mtu := range []qpattr.MTU{qpattr.MTU1024, qpattr.MTU4096} {
		p := testenv.NewTestPair(t, testenv.PairOptions{MTU: max(mtu.Bytes()+128, 1500)})
		for _, k := range []link.Kind{link.KindAFXDP, link.KindUDP} {
			for _, v6 := range []bool{false, true} {
				t.Run(fmt.Sprintf("mtu%d/%v/v6=%v", mtu.Bytes(), k, v6), func(t *testing.T) {
					vethRC(t, p, k, v6, mtu)
				})
			}
		}
		t.Run(fmt.Sprintf("mtu%d/UD", mtu.Bytes()), func(t *testing.T) {
			vethUD(t, p, mtu)
		})
	}
}

func vethRC(t *testing.T, p *testenv.Pair, k link.Kind, v6 bool, mtu qpattr.MTU) {
	a, b := vethNodes(t, p, k, v6, mtu, qpattr.RC)
	if got := a.d.QueryPort().ActiveMTU; got < mtu {
		t.Fatalf("port MTU %v below the path MTU %v", got, mtu)
	}
	const size = 256 << 10
	fill(a.buf[:size], 71)
	fill(b.buf[2<<20:2<<20+size], 72)
	binary.NativeEndian.PutUint64(b.buf[3<<20:], 1)
	recv(t, b, 1, 0, size)
	wrs := []SendWR{
		{WRID: 1, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 65536)}},
		{WRID: 2, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr() + 1<<20, RKey: b.mr.RKey()},
		{WRID: 3, Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(1<<20, size)}, RemoteAddr: b.mr.Addr() + 2<<20, RKey: b.mr.RKey()},
		{WRID: 4, Opcode: WRAtomicFetchAdd, SGL: []SGE{a.mr.SGE(3<<20, 8)}, RemoteAddr: b.mr.Addr() + 3<<20, RKey: b.mr.RKey(), CompareAdd: 41},
	}
	for i := range wrs {
		wrs[i].Flags = SendSignaled
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	got := pollN(t, a.cq, len(wrs), 10*time.Second)
	for i, w := range got {
		if w.WRID != uint64(i+1) || w.Status != cq.Success {
			t.Fatalf("WC %d: %+v", i, w)
		}
	}
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 65536, QPN: b.qp.QPN()})
	// The kernel carries the ACK between the engines, out of the race detector's
	// sight: a pass of B's engine orders its writes before the reads below.
	b.d.Sync().Wait()
	checkBytes(t, "send", b.buf[:65536], a.buf[:65536])
	checkBytes(t, "write", b.buf[1<<20:1<<20+size], a.buf[:size])
	checkBytes(t, "read", a.buf[1<<20:1<<20+size], b.buf[2<<20:2<<20+size])
	if v := binary.NativeEndian.Uint64(a.buf[3<<20:]); v != 1 {
		t.Fatalf("fetch-add original: got %d, want 1", v)
	}
	if v := binary.NativeEndian.Uint64(b.buf[3<<20:]); v != 42 {
		t.Fatalf("fetch-add target: got %d, want 42", v)
	}
	c := a.d.Counters()
	if c[CntRcvdBadICRC] != 0 || c[CntRcvdMalformed] != 0 || b.d.Counters()[CntRcvdBadICRC] != 0 {
		t.Fatalf("bad frames on a clean wire: a %v b %v", c, b.d.Counters())
	}
}

func vethUD(t *testing.T, p *testenv.Pair, mtu qpattr.MTU) {
	a, b := vethNodes(t, p, link.KindAFXDP, false, mtu, qpattr.UD)
	udUp(t, a, 7)
	udUp(t, b, 7)
	ah, err := a.pd.CreateAH(AV{DGID: b.gid(), DMAC: p.B.MAC})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	n := uint32(mtu.Bytes())
	fill(a.buf[:n], 81)
	recv(t, b, 1, 0, 40+n)
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, n)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 7})
	pollOne(t, a.cq)
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 40 + n, QPN: b.qp.QPN(), SrcQP: a.qp.QPN(), Flags: cq.GRH})
	checkBytes(t, "UD over veth", b.buf[40:40+n], a.buf[:n])
}
