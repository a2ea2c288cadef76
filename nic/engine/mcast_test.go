// UD multicast (mcast.go): groups, the receive fan-out to every member with
// its own checks, the send to the group's MAC and the loop to the sender's
// own device's members.

package engine

import (
	"errors"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
)

// mcLink records the groups its device asks for (link.Multicaster).
type mcLink struct {
	link.Link
	mu     sync.Mutex
	joined []netip.Addr
	events []string
}

func (l *mcLink) JoinGroup(ip netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.joined = append(l.joined, ip)
	l.events = append(l.events, "join "+ip.String())
	return nil
}

func (l *mcLink) LeaveGroup(ip netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.joined = slices.DeleteFunc(l.joined, func(a netip.Addr) bool { return a == ip })
	l.events = append(l.events, "leave "+ip.String())
	return nil
}

func (l *mcLink) groups() []netip.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.joined)
}

func testMGID(v6 bool) netdev.GID {
	if v6 {
		return netdev.GIDFromAddr(netip.MustParseAddr("ff0e::1:2345"))
	}
	return netdev.GIDFromAddr(netip.MustParseAddr("239.1.2.3"))
}

func attach(t testing.TB, n *node, mgid netdev.GID) {
	t.Helper()
	if err := n.qp.AttachMcast(mgid); err != nil {
		t.Fatalf("AttachMcast %v: %v", mgid, err)
	}
}

func detach(t testing.TB, n *node, mgid netdev.GID) {
	t.Helper()
	if err := n.qp.DetachMcast(mgid); err != nil {
		t.Fatalf("DetachMcast %v: %v", mgid, err)
	}
}

// TestMcast: a UD send to a group reaches two members on the other device and
// one on the sender's own (the kernel's multicast loop), each with its own
// receive WQE; a member with another Q_Key drops it and counts it; a detached
// QP gets no more; a group without members on a device counts the packet
// rcvd_unknown_qp. Over one queue and over two, where the members of one
// device are on both shards and a copy is handed over.
func TestMcast(t *testing.T) {
	for _, c := range []struct {
		name   string
		v6     bool
		queues int
	}{{"v4", false, 1}, {"v6", true, 1}, {"v4 two queues", false, 2}} {
		t.Run(c.name, func(t *testing.T) {
			var da, db *Device
			var tap *tapLink
			var mla *mcLink
			if c.queues == 1 {
				p := newPair(t, pairOpts{v6: c.v6, wrapA: func(l link.Link) link.Link {
					tap = &tapLink{Link: l}
					mla = &mcLink{Link: tap}
					return mla
				}})
				da, db = p.a, p.b
			} else {
				da, db = memoryQueues(t, c.queues, Config{})
			}
			const qkey = 0x1111
			ud := nodeOpts{typ: qpattr.UD, bufLen: 1 << 16}
			snd := newNode(t, da, ud)
			la := newNode(t, da, ud)
			b1, b2, b3 := newNode(t, db, ud), newNode(t, db, ud), newNode(t, db, ud)
			for _, n := range []*node{snd, la, b1, b2} {
				udUp(t, n, qkey)
			}
			udUp(t, b3, 0x2222) // another Q_Key: drops the group's packets
			if c.queues == 2 && b1.qp.sh == b2.qp.sh {
				t.Fatalf("b1 and b2 on one shard")
			}
			mgid := testMGID(c.v6)
			for _, n := range []*node{la, b1, b2, b3} {
				attach(t, n, mgid)
			}
			attach(t, b1, mgid) // again: nothing to do
			if mla != nil {
				if g := mla.groups(); len(g) != 1 || g[0] != mgid.Addr() {
					t.Fatalf("link groups %v, want %v", g, mgid.Addr())
				}
			}
			ah, err := snd.pd.CreateAH(AV{DGID: mgid}) // no MAC, no resolution
			if err != nil {
				t.Fatal(err)
			}
			defer ah.Destroy()
			msg := func(id uint64, s string) {
				t.Helper()
				send(t, snd, SendWR{WRID: id, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte(s), AH: ah,
					RemoteQPN: McastQPN, RemoteQKey: qkey})
				checkWC(t, pollOne(t, snd.cq), cq.WC{WRID: id, Opcode: cq.Send, ByteLen: uint32(len(s)), QPN: snd.qp.QPN()})
			}
			got := func(n *node, id uint64, off int, s string) {
				t.Helper()
				checkWC(t, pollOne(t, n.cq), cq.WC{WRID: id, Opcode: cq.Recv, ByteLen: uint32(40 + len(s)), QPN: n.qp.QPN(),
					SrcQP: snd.qp.QPN(), Flags: cq.GRH})
				checkBytes(t, "payload", n.buf[off+40:off+40+len(s)], []byte(s))
				// The GRH's destination is the group.
				if c.v6 {
					if d := wire.IPv6(n.buf[off : off+40]).Dst(); d != mgid.Addr() {
						t.Fatalf("GRH destination %v", d)
					}
				} else if d := wire.IPv4(n.buf[off+20 : off+40]).Dst(); d != mgid.Addr() {
					t.Fatalf("GRH destination %v", d)
				}
			}
			for _, n := range []*node{la, b1, b2, b3} {
				recv(t, n, 1, 0, 1024)
				recv(t, n, 2, 1024, 1024)
				recv(t, n, 3, 2048, 1024)
			}

			msg(10, "to the group")
			for _, n := range []*node{la, b1, b2} {
				got(n, 1, 0, "to the group")
			}
			time.Sleep(10 * time.Millisecond)
			noMore(t, b3.cq)
			if n := db.Counters()[CntRcvdBadQKey]; n != 1 {
				t.Fatalf("B rcvd_bad_qkey %d, want 1", n)
			}
			if tap != nil {
				fs := tap.frames()
				if len(fs) != 1 {
					t.Fatalf("%d frames to the link, want 1", len(fs))
				}
				var p wire.Packet
				if err := wire.Parse(fs[0], &p); err != nil {
					t.Fatal(err)
				}
				if m := wire.MAC(fs[0][0:6]); m != McastMAC(mgid) {
					t.Fatalf("destination MAC %v, want %v", m, McastMAC(mgid))
				}
				if p.BTH.DestQPN() != McastQPN {
					t.Fatalf("DestQPN %#x", p.BTH.DestQPN())
				}
			}

			// b1 detached: b2 and the sender's device's member still get it.
			detach(t, b1, mgid)
			if err := b1.qp.DetachMcast(mgid); !errors.Is(err, ErrInvalid) {
				t.Fatalf("detach again: %v, want ErrInvalid", err)
			}
			msg(11, "second")
			got(la, 2, 1024, "second")
			got(b2, 2, 1024, "second")
			time.Sleep(10 * time.Millisecond)
			noMore(t, b1.cq)

			// No member left on B: counted there as a packet without a QP.
			detach(t, b2, mgid)
			detach(t, b3, mgid)
			unknown := db.Counters()[CntRcvdUnknownQP]
			msg(12, "third")
			got(la, 3, 2048, "third")
			waitFor(t, "rcvd_unknown_qp on B", func() bool { return db.Counters()[CntRcvdUnknownQP] == unknown+1 })
			noMore(t, b2.cq)

			// Destroying the last member leaves the group, and the link's filter.
			la.qp.Destroy().Wait()
			if mla != nil {
				if g := mla.groups(); len(g) != 0 {
					t.Fatalf("link groups %v after the last member went", g)
				}
			}
			if da.mcastMask(mgid) != 0 || len(da.mcgs) != 0 {
				t.Fatalf("A still has the group")
			}
		})
	}
}

// TestMcastAttachErrors: ib_attach_mcast's and rxe's checks.
func TestMcastAttachErrors(t *testing.T) {
	p := newPair(t, pairOpts{})
	rc := newNode(t, p.a, nodeOpts{bufLen: 4096})
	ud := newNode(t, p.a, nodeOpts{typ: qpattr.UD, bufLen: 4096})
	mgid := testMGID(false)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"RC QP", rc.qp.AttachMcast(mgid)},
		{"unicast GID", ud.qp.AttachMcast(netdev.GIDFromAddr(addrB))},
		{"IPv6 unicast GID", ud.qp.AttachMcast(netdev.GIDFromAddr(netip.MustParseAddr("2001:db8::1")))},
		{"detach unattached", ud.qp.DetachMcast(mgid)},
		{"detach RC", rc.qp.DetachMcast(mgid)},
	} {
		if !errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
	// RXE_MAX_MCAST_QP_ATTACH QPs per group.
	c, err := p.a.CreateCQ(16, CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var qps []*QP
	defer func() {
		for _, qp := range qps {
			qp.Destroy().Wait()
		}
	}()
	for i := range MaxMcastQPAttach + 1 {
		qp, err := ud.pd.CreateQP(QPInitAttr{Type: qpattr.UD, SendCQ: c, RecvCQ: c, Cap: qpattr.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qps = append(qps, qp)
		err = qp.AttachMcast(mgid)
		if i < MaxMcastQPAttach && err != nil {
			t.Fatalf("attach %d: %v", i, err)
		}
		if i == MaxMcastQPAttach && !errors.Is(err, ErrInvalid) {
			t.Fatalf("attach %d: %v, want ErrInvalid", i, err)
		}
	}
	// A destroyed QP attaches no more.
	qps[0].Destroy().Wait()
	if err := qps[0].AttachMcast(mgid); !errors.Is(err, ErrClosed) {
		t.Fatalf("attach after destroy: %v, want ErrClosed", err)
	}
}

// TestMcastDoesNotAllocate: sends to a group, on the wire and looped to the
// sender's device, and their receive cost no allocation per packet.
func TestMcastDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	p := newPair(t, pairOpts{})
	ud := nodeOpts{typ: qpattr.UD, bufLen: 1 << 16}
	snd, la, rb := newNode(t, p.a, ud), newNode(t, p.a, ud), newNode(t, p.b, ud)
	for _, n := range []*node{snd, la, rb} {
		udUp(t, n, 5)
	}
	mgid := testMGID(false)
	attach(t, la, mgid)
	attach(t, rb, mgid)
	ah, err := snd.pd.CreateAH(AV{DGID: mgid})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	wr := []SendWR{{Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{snd.mr.SGE(0, 256)}, AH: ah, RemoteQPN: McastQPN, RemoteQKey: 5}}
	rwr := func(n *node) []RecvWR { return []RecvWR{{SGL: []SGE{n.mr.SGE(0, 512)}}} }
	rla, rrb := rwr(la), rwr(rb)
	wcs := make([]cq.WC, 4)
	poll := func(c *CQ) {
		deadline := time.Now().Add(10 * time.Second)
		for c.Poll(wcs[:1]) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no completion")
			}
			runtime.Gosched()
		}
		if wcs[0].Status != cq.Success {
			t.Fatalf("WC %+v", wcs[0])
		}
	}
	run := func(n int) uint64 {
		return mallocsOf(func() {
			for range n {
				if _, err := la.qp.PostRecv(rla); err != nil {
					t.Fatal(err)
				}
				if _, err := rb.qp.PostRecv(rrb); err != nil {
					t.Fatal(err)
				}
				if _, err := snd.qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				poll(snd.cq)
				poll(la.cq)
				poll(rb.cq)
			}
		})
	}
	run(100)
	small, big := run(200), run(2000)
	t.Logf("%d allocations for 200 multicast sends, %d for 2000", small, big)
	if big > small+100 {
		t.Errorf("%d allocations for 200 multicast sends, %d for 2000: the multicast path allocates", small, big)
	}
}

// TestMcastVeth: a UD send to a group crosses a veth pair between two AF_XDP
// devices: the receiver's device joined the group on its interface and its
// XDP program steers the group's MAC to the engine.
func TestMcastVeth(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	for _, v6 := range []bool{false, true} {
		t.Run(name("v6=%v", v6), func(t *testing.T) {
			a, b := vethNodes(t, p, link.KindAFXDP, v6, qpattr.MTU1024, qpattr.UD)
			udUp(t, a, 9)
			udUp(t, b, 9)
			mgid := testMGID(v6)
			attach(t, b, mgid)
			ah, err := a.pd.CreateAH(AV{DGID: mgid})
			if err != nil {
				t.Fatal(err)
			}
			defer ah.Destroy()
			recv(t, b, 1, 0, 1024)
			send(t, a, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("over the veth"), AH: ah,
				RemoteQPN: McastQPN, RemoteQKey: 9})
			pollOne(t, a.cq)
			checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 40 + 13, QPN: b.qp.QPN(),
				SrcQP: a.qp.QPN(), Flags: cq.GRH})
			detach(t, b, mgid)
		})
	}
}

// TestMcastUDPLinkRefuses: the UDP link, its socket bound to the interface's
// unicast address, cannot receive a group: attaching fails EOPNOTSUPP rather
// than leave the QP waiting for nothing.
func TestMcastUDPLinkRefuses(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	d := openVeth(t, &p.A, link.KindUDP, false)
	n := newNode(t, d, nodeOpts{typ: qpattr.UD})
	udUp(t, n, 9)
	if err := n.qp.AttachMcast(testMGID(false)); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("AttachMcast on a UDP link: %v, want ErrUnsupported", err)
	}
}
