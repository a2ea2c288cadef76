// Address resolution off the caller's goroutine: CreateAH and Modify with an AV
// never wait for the network (MID1).

package engine

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/testenv"
)

// blockingResolver answers ResolveMAC only when the test releases it, with mac
// or with err.
type blockingResolver struct {
	release chan struct{}
	calls   atomic.Int32
	err     error
	mac     net.HardwareAddr
}

func newBlockingResolver() *blockingResolver {
	return &blockingResolver{release: make(chan struct{}), mac: net.HardwareAddr{2, 0, 0, 0, 0, 0x12}}
}

func (r *blockingResolver) resolve(ctx context.Context, _ netip.Addr) (net.HardwareAddr, error) {
	r.calls.Add(1)
	select {
	case <-r.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return r.mac, r.err
}

// returnsWhileBlocked runs call and fails the test if it has not returned by the
// time the watchdog fires: it must return while the resolver is still blocked
// (the resolver is released only after call returned).
func returnsWhileBlocked[T any](t *testing.T, what string, call func() T) T {
	t.Helper()
	got := make(chan T, 1)
	go func() { got <- call() }()
	select {
	case v := <-got:
		return v
	case <-time.After(lifetimeDeadline):
		t.Fatalf("%s blocked on next-hop resolution", what)
		panic("unreachable")
	}
}

// TestMID1CreateAHNeverBlocksOnResolution: CreateAH returns while the next hop
// is being resolved; UD sends posted with the AH wait in the send queue and go,
// in order, once the MAC is known. The old CreateAH resolved in the caller, up to
// 3 s on AF_XDP.
func TestMID1CreateAHNeverBlocksOnResolution(t *testing.T) {
	r := newBlockingResolver()
	p := newPair(t, pairOpts{resolveA: r.resolve})
	t.Cleanup(func() { close(r.release) })
	a := newNode(t, p.a, nodeOpts{typ: qpattr.UD})
	b := newNode(t, p.b, nodeOpts{typ: qpattr.UD})
	const qkey = 0x1111
	udUp(t, a, qkey)
	udUp(t, b, qkey)
	type res struct {
		ah  *AH
		err error
	}
	c := returnsWhileBlocked(t, "CreateAH", func() res {
		ah, err := a.pd.CreateAH(AV{DGID: b.gid()})
		return res{ah, err}
	})
	if c.err != nil {
		t.Fatal(c.err)
	}
	for i := range 2 {
		recv(t, b, uint64(i), uint64(i)*256, 40+8)
		send(t, a, SendWR{WRID: uint64(10 + i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)},
			AH: c.ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
	}
	// Both engines run a pass and nothing has gone: the sends wait for the MAC.
	for range 2 {
		waitOp(t, p.a.Sync())
		waitOp(t, p.b.Sync())
	}
	if n := a.cq.Len() + b.cq.Len(); n != 0 {
		t.Fatalf("%d completions before the next hop was resolved", n)
	}
	r.release <- struct{}{} // one resolution, one answer
	for i := range 2 {
		checkWC(t, pollOne(t, a.cq), cq.WC{WRID: uint64(10 + i), Opcode: cq.Send, ByteLen: 8, QPN: a.qp.QPN()})
		checkWC(t, pollOne(t, b.cq), cq.WC{WRID: uint64(i), Opcode: cq.Recv, ByteLen: 40 + 8, QPN: b.qp.QPN(),
			SrcQP: a.qp.QPN(), Flags: cq.GRH})
	}
	// The answer is cached: the next AH is resolved at once.
	ah2, err := a.pd.CreateAH(AV{DGID: b.gid()})
	if err != nil || ah2.rt.Load() == nil || r.calls.Load() != 1 {
		t.Fatalf("second AH: %v, route %v, %d resolutions", err, ah2.rt.Load() != nil, r.calls.Load())
	}
}

// A failed resolution completes the sends that waited for it with
// LOC_QP_OP_ERR, as rxe completes a WR it cannot route; nothing is lost.
func TestAHResolutionFailureCompletesSends(t *testing.T) {
	r := newBlockingResolver()
	r.err = errors.New("no neighbour")
	p := newPair(t, pairOpts{resolveA: r.resolve})
	a := newNode(t, p.a, nodeOpts{typ: qpattr.UD})
	udUp(t, a, 1)
	ah, err := a.pd.CreateAH(AV{DGID: netdev.GIDFromAddr(addrB)})
	if err != nil {
		t.Fatal(err)
	}
	send(t, a, SendWR{WRID: 7, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)}, AH: ah, RemoteQPN: 2, RemoteQKey: 1})
	close(r.release)
	wc := pollOne(t, a.cq)
	if wc.WRID != 7 || wc.Status != cq.LocQPOpErr {
		t.Fatalf("the send waiting for a failed resolution: %+v, want LOC_QP_OP_ERR", wc)
	}
}

// TestMID1ModifyWithAVNeverBlocks: Modify with an AV returns its Op while the
// next hop is resolved; the Op completes after the resolution, with the path
// applied, or with ErrUnreachable and nothing changed.
func TestMID1ModifyWithAVNeverBlocks(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(name("fail=%v", fail), func(t *testing.T) {
			r := newBlockingResolver()
			if fail {
				r.err = errors.New("no neighbour")
			}
			p := newPair(t, pairOpts{resolveA: r.resolve})
			a := newNode(t, p.a, nodeOpts{})
			init := QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1}}
			if err := a.qp.ModifySync(&init, qpattr.AttrState|qpattr.AttrPort|qpattr.AttrPKeyIndex|qpattr.AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			rtr := QPAttr{Attr: qpattr.Attr{State: qpattr.RTR, PathMTU: qpattr.MTU1024, DestQPN: 0x20, MaxDestRdAtomic: 1},
				AV: AV{DGID: netdev.GIDFromAddr(addrB)}}
			mask := qpattr.AttrState | qpattr.AttrAV | qpattr.AttrPathMTU | qpattr.AttrDestQPN | qpattr.AttrRQPSN |
				qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer
			op := returnsWhileBlocked(t, "Modify with an AV", func() *Op { return a.qp.Modify(&rtr, mask) })
			select {
			case <-op.Done():
				t.Fatalf("the Modify completed (%v) before its next hop was resolved", op.Err())
			default:
			}
			close(r.release)
			err := waitOp(t, op)
			attr, _, qerr := a.qp.Query()
			if qerr != nil {
				t.Fatal(qerr)
			}
			switch {
			case fail && (!errors.Is(err, ErrUnreachable) || attr.State != qpattr.Init):
				t.Fatalf("failed resolution: %v, state %v; want ErrUnreachable in INIT", err, attr.State)
			case !fail && (err != nil || attr.State != qpattr.RTR || attr.AV.DMAC.String() != r.mac.String()):
				t.Fatalf("Modify: %v, state %v, DMAC %v", err, attr.State, attr.AV.DMAC)
			}
		})
	}
}

// TestMID1CreateAHNeverBlocksOnAFXDP: on a veth pair with the real XDP program
// and AF_XDP sockets, CreateAH to a peer whose MAC the device does not know
// returns while the kernel's neighbour resolution (netdev.ResolveNeighbor in A's
// namespace, held back by the test) is pending, and the UD send posted with it
// reaches the peer once the neighbour is resolved.
func TestMID1CreateAHNeverBlocksOnAFXDP(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	resolve := func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var mac net.HardwareAddr
		err := p.A.Do(func() error {
			n, err := netdev.ResolveNeighbor(ctx, ip)
			mac = n.MAC
			return err
		})
		return mac, err
	}
	da := openVethConfig(t, &p.A, link.KindAFXDP, false, Config{ResolveMAC: resolve})
	t.Cleanup(free) // before the devices close
	db := openVeth(t, &p.B, link.KindAFXDP, false)
	a := newNode(t, da, nodeOpts{typ: qpattr.UD})
	b := newNode(t, db, nodeOpts{typ: qpattr.UD})
	udUp(t, a, 7)
	udUp(t, b, 7)
	type res struct {
		ah  *AH
		err error
	}
	c := returnsWhileBlocked(t, "CreateAH on AF_XDP", func() res {
		ah, err := a.pd.CreateAH(AV{DGID: b.gid()})
		return res{ah, err}
	})
	if c.err != nil {
		t.Fatal(c.err)
	}
	recv(t, b, 1, 0, 40+64)
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}, AH: c.ah,
		RemoteQPN: b.qp.QPN(), RemoteQKey: 7})
	free()
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.Send, ByteLen: 64, QPN: a.qp.QPN()})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 40 + 64, QPN: b.qp.QPN(), SrcQP: a.qp.QPN(), Flags: cq.GRH})
	if got := c.ah.rt.Load(); got == nil || net.HardwareAddr(got.dmac[:]).String() != p.B.MAC.String() {
		t.Fatalf("the AH's next hop: %v, want %v", got, p.B.MAC)
	}
}
