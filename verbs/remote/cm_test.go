package remote

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

var (
	addrA = netip.MustParseAddr("192.0.2.11")
	addrB = netip.MustParseAddr("192.0.2.12")
)

func cmEvent(t *testing.T, d *Device, want rdmacm.EventType) *CMEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := d.GetCMEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want {
		t.Fatalf("event %v (status %d), want %v", ev.Type, ev.Status, want)
	}
	return ev
}

func localCMEvent(t *testing.T, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want {
		t.Fatalf("event %v (status %d), want %v", ev.Type, ev.Status, want)
	}
	return ev
}

// moveQP moves the attached process's QP with the ID's attributes, as a
// librdmacm consumer with its own QP does (rdma_init_qp_attr, ibv_modify_qp).
func moveQP(t *testing.T, id *CMID, qp *QP, states ...verbs.QPState) {
	t.Helper()
	for _, st := range states {
		a, mask, err := id.InitQPAttr(st)
		if err != nil {
			t.Fatalf("InitQPAttr(%v): %v", st, err)
		}
		if err := qp.Modify(&a, mask); err != nil {
			t.Fatalf("to %v: %v", st, err)
		}
	}
}

// The connection manager over the socket, both roles: an attached process
// listens and accepts an in-process peer's rdma_cm connection (the daemon's
// QP1 and CM on the wire), and connects to an in-process listener; data moves
// on each connection and DISCONNECTED reaches both sides.
func TestRemoteCM(t *testing.T) {
	r := newRig(t, server.Config{Logf: t.Logf})
	d := r.dial(t)
	e := newRemoteEnd(t, d, verbs.RC)
	le := newLocalEnd(t, r.b, verbs.RC)
	lch := rdmacm.NewEventChannel()
	defer lch.Close()

	t.Run("passive", func(t *testing.T) {
		lid, err := d.CreateCMID(rdmacm.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer lid.Destroy()
		if _, err := lid.BindAddr(netip.AddrPortFrom(addrA, 7300)); err != nil {
			t.Fatal(err)
		}
		if err := lid.Listen(4); err != nil {
			t.Fatal(err)
		}
		cid, err := lch.CreateID(nil, rdmacm.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer cid.Destroy()
		if err := cid.ResolveAddr(addrB, netip.AddrPortFrom(addrA, 7300)); err != nil {
			t.Fatal(err)
		}
		localCMEvent(t, lch, rdmacm.EventAddrResolved)
		if err := cid.ResolveRoute(); err != nil {
			t.Fatal(err)
		}
		localCMEvent(t, lch, rdmacm.EventRouteResolved)
		cqp, err := cid.CreateQP(le.pd, verbs.QPInitAttr{Type: verbs.RC, SendCQ: le.cq, RecvCQ: le.cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cid.Connect(rdmacm.ConnParam{PrivateData: []byte("hello"), RetryCount: 7, RNRRetryCount: 7,
			ResponderResources: 1, InitiatorDepth: 1}); err != nil {
			t.Fatal(err)
		}
		req := cmEvent(t, d, rdmacm.EventConnectRequest)
		if req.Listen != lid || req.ID == nil || req.ID == lid || !bytes.HasPrefix(req.Param.PrivateData, []byte("hello")) ||
			req.Param.QPN != cqp.QPN() || req.Dst.Addr() != addrB || req.Src != netip.AddrPortFrom(addrA, 7300) {
			t.Fatalf("CONNECT_REQUEST %+v (listener %p)", req, lid)
		}
		conn := req.ID
		defer conn.Destroy()
		moveQP(t, conn, e.qp, verbs.QPSInit)
		if err := conn.Accept(e.qp, rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		moveQP(t, conn, e.qp, verbs.QPSRTR, verbs.QPSRTS)
		if _, err := e.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{e.mr.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		localCMEvent(t, lch, rdmacm.EventEstablished)
		cmEvent(t, d, rdmacm.EventEstablished)
		// CM_NOTIFY: the daemon's ID has cm_establish's errnos.
		if err := conn.Notify(verbs.EventCommEst); !errors.Is(err, syscall.EISCONN) {
			t.Fatalf("Notify(COMM_EST) when established: %v, want EISCONN", err)
		}
		if err := conn.Notify(verbs.EventType(6)); !errors.Is(err, syscall.EINVAL) { // IBV_EVENT_PATH_MIG
			t.Fatalf("Notify(PATH_MIG): %v, want EINVAL", err)
		}
		if err := lid.Notify(verbs.EventCommEst); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("Notify on a listener: %v, want EINVAL", err)
		}
		copy(le.buf[100:], "over rdma_cm")
		if _, err := cqp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{le.mr.SGE(100, 12)}}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollRemote(t, e.cq, 1)[0]; wc.Status != verbs.WCSuccess || string(e.buf[:12]) != "over rdma_cm" {
			t.Fatalf("%+v %q", wc, e.buf[:12])
		}
		pollLocal(t, le.cq, 1)
		// The DREQ's DISCONNECTED, then the peer's rdma_disconnect answers
		// with the DREP that ends the attached side's.
		if err := conn.Disconnect(); err != nil {
			t.Fatal(err)
		}
		localCMEvent(t, lch, rdmacm.EventDisconnected)
		if err := cid.Disconnect(); err != nil {
			t.Fatal(err)
		}
		cmEvent(t, d, rdmacm.EventDisconnected)
	})

	t.Run("active", func(t *testing.T) {
		lid, err := lch.CreateID(nil, rdmacm.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer lid.Destroy()
		if err := lid.BindAddr(netip.AddrPortFrom(addrB, 7301)); err != nil {
			t.Fatal(err)
		}
		if err := lid.Listen(4); err != nil {
			t.Fatal(err)
		}
		qp, err := e.pd.CreateQP(QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer qp.Destroy()
		id, err := d.CreateCMID(rdmacm.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer id.Destroy()
		if err := id.ResolveAddr(addrA, netip.AddrPortFrom(addrB, 7301)); err != nil {
			t.Fatal(err)
		}
		cmEvent(t, d, rdmacm.EventAddrResolved)
		if err := id.ResolveRoute(); err != nil {
			t.Fatal(err)
		}
		cmEvent(t, d, rdmacm.EventRouteResolved)
		moveQP(t, id, qp, verbs.QPSInit)
		if err := id.Connect(qp, rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7, ResponderResources: 1,
			InitiatorDepth: 1}); err != nil {
			t.Fatal(err)
		}
		req := localCMEvent(t, lch, rdmacm.EventConnectRequest)
		defer req.ID.Destroy()
		if req.Param.QPN != qp.QPN() {
			t.Fatalf("the REQ announces QPN %d, the attached process's QP is %d", req.Param.QPN, qp.QPN())
		}
		sqp, err := req.ID.CreateQP(le.pd, verbs.QPInitAttr{Type: verbs.RC, SendCQ: le.cq, RecvCQ: le.cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sqp.PostRecv([]verbs.RecvWR{{WRID: 5, SGL: []verbs.SGE{le.mr.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if err := req.ID.Accept(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
			t.Fatal(err)
		}
		resp := cmEvent(t, d, rdmacm.EventConnectResponse)
		if resp.Param.QPN != sqp.QPN() {
			t.Fatalf("CONNECT_RESPONSE %+v", resp.Param)
		}
		moveQP(t, id, qp, verbs.QPSRTR, verbs.QPSRTS)
		if err := id.Establish(); err != nil {
			t.Fatal(err)
		}
		localCMEvent(t, lch, rdmacm.EventEstablished)
		copy(e.buf[200:], "from the attached side")
		if _, err := qp.PostSend([]verbs.SendWR{{WRID: 6, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{e.mr.SGE(200, 22)}}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollRemote(t, e.cq, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("%+v", wc)
		}
		if wc := pollLocal(t, le.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 5 {
			t.Fatalf("%+v", wc)
		}
		if err := req.ID.Disconnect(); err != nil {
			t.Fatal(err)
		}
		cmEvent(t, d, rdmacm.EventDisconnected)
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
		localCMEvent(t, lch, rdmacm.EventDisconnected)
	})
}

// A QP named by number (librdmacm's conn_param qp_num, for a QP not on the
// ID) must be the process's own: another process's is refused, never
// announced in a REQ.
func TestRemoteCMQPNOwned(t *testing.T) {
	r := newRig(t, server.Config{Logf: t.Logf})
	d1, d2 := r.dial(t), r.dial(t)
	other := newRemoteEnd(t, d2, verbs.RC)
	mine := newRemoteEnd(t, d1, verbs.RC)
	id, err := d1.CreateCMID(rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.ResolveAddr(addrA, netip.AddrPortFrom(addrB, 7302)); err != nil {
		t.Fatal(err)
	}
	cmEvent(t, d1, rdmacm.EventAddrResolved)
	if err := id.ResolveRoute(); err != nil {
		t.Fatal(err)
	}
	cmEvent(t, d1, rdmacm.EventRouteResolved)
	p := rdmacm.ConnParam{QPN: other.qp.QPN(), RetryCount: 7}
	if err := (attachedID{id}).Connect(p); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Connect naming another process's QP %#x: %v", p.QPN, err)
	}
	// Its own QP by number is accepted (a REQ goes out; nobody listens).
	p.QPN = mine.qp.QPN()
	if err := (attachedID{id}).Connect(p); err != nil {
		t.Fatalf("Connect naming its own QP %#x: %v", p.QPN, err)
	}
}

// CM event channels of their own (librdmacm's channel fd): an ID made on a
// channel has its events on the channel's socket, not on the control socket;
// CM_MIGRATE_ID moves it to the control socket's; a channel with an ID on it
// cannot go.
func TestRemoteCMChannel(t *testing.T) {
	r := newRig(t, server.Config{Logf: t.Logf})
	d := r.dial(t)
	var ch attach.HandleRep
	fds, err := d.call(attach.OpCMCreateChannel, nil, &ch)
	if err != nil || len(fds) != 1 {
		t.Fatalf("CM_CREATE_CHANNEL: %v, %d descriptors", err, len(fds))
	}
	sock, err := unixConn(fds[0], "channel")
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	var idRep attach.HandleRep
	if _, err := d.call(attach.OpCMCreateID, &attach.CMIDReq{ID: ch.Handle, Arg: uint32(rdmacm.PSTCP)}, &idRep); err != nil {
		t.Fatal(err)
	}
	id := d.cmID(idRep.Handle)
	if err := id.ResolveAddr(addrA, netip.AddrPortFrom(addrB, 7303)); err != nil {
		t.Fatal(err)
	}
	sock.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, attach.MaxMessage)
	n, err := sock.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	h, p, err := attach.DecodeHeader(buf[:n])
	var ev attach.CMEventMsg
	if err == nil {
		err = attach.DecodePayload(p, &ev)
	}
	if err != nil || h.Op != attach.OpCMEvent || ev.ID != idRep.Handle || rdmacm.EventType(ev.Type) != rdmacm.EventAddrResolved {
		t.Fatalf("on the channel: %v %+v %v", h, ev, err)
	}
	if err := d.destroy(attach.KindCMChannel, ch.Handle); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("destroying a channel with an ID on it: %v", err)
	}
	if _, err := d.call(attach.OpCMMigrateID, &attach.CMIDReq{ID: idRep.Handle, Arg: 0}, nil); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveRoute(); err != nil {
		t.Fatal(err)
	}
	cmEvent(t, d, rdmacm.EventRouteResolved) // on the control socket now
	if err := id.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := d.destroy(attach.KindCMChannel, ch.Handle); err != nil {
		t.Fatalf("destroying the empty channel: %v", err)
	}
	if n, err := sock.Read(buf); n != 0 || err == nil {
		t.Fatalf("the channel's socket after its destroy: %d bytes, %v", n, err)
	}
}

// A process that listens on a CM event channel of its own and never reads it,
// then goes: CONNECT_REQUESTs wait on the daemon's channel while its
// goroutine waits for room on the process's socket. Teardown stops that
// goroutine before anything else, rejects the requests the process never got
// and closes the channel: no CM ID of the process's and no goroutine of its
// session outlive it. Before, the channel's close failed (EBUSY) on the queued
// requests' IDs and its goroutine went on making objects of the dead session.
func TestCMChannelTeardownUnread(t *testing.T) {
	r := newRig(t, server.Config{})
	d, err := Dial(r.sock)
	if err != nil {
		t.Fatal(err)
	}
	var ch attach.HandleRep
	fds, err := d.call(attach.OpCMCreateChannel, nil, &ch)
	if err != nil {
		t.Fatal(err)
	}
	defer attach.CloseFDs(fds) // held open, never read (a forked child's, say)
	udListener(t, d, ch.Handle, 7410)
	lch := rdmacm.NewEventChannel()
	defer lch.Close()
	var ids []*rdmacm.ID
	for range 400 { // more than the channel's socket holds
		ids = append(ids, sidrRequest(t, lch, 7410))
	}
	// The requests reach the daemon's device (r.a); QP1 drops what comes
	// faster than it takes, and the CM resends that after its timeout.
	for end := time.Now().Add(20 * time.Second); len(rdmacm.Resources(r.a)) < 300; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d CM IDs on the daemon's device: the requests did not reach it", len(rdmacm.Resources(r.a)))
		}
	}
	d.Close()
	waitSessions(t, r.srv, 0)
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		st := string(buf[:runtime.Stack(buf, true)])
		left, alive := len(rdmacm.Resources(r.a)), strings.Contains(st, "(*session).cmEvents")
		if left == 0 && !alive {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after the process is gone: %d CM IDs on the daemon's device, its channel's goroutine alive %v", left, alive)
		}
	}
	for _, id := range ids {
		id.Destroy()
	}
}

// A migration waits for the event its old channel's goroutine has in hand:
// no event taken off the old channel before CM_MIGRATE_ID is written to it
// after the reply (the events not yet taken move with the ID), so that a
// client sweeping the old channel at the reply finds them all. The old
// channel's socket is full (a UD listener on it, 400 requests, never read):
// its goroutine holds a request, waiting for room, and MIGRATE_ID of another
// ID of the channel waits until the process reads.
func TestCMMigrateWaitsForEventInHand(t *testing.T) {
	r := newRig(t, server.Config{})
	d, err := Dial(r.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var a, b attach.HandleRep
	fdsA, err := d.call(attach.OpCMCreateChannel, nil, &a)
	if err != nil {
		t.Fatal(err)
	}
	defer attach.CloseFDs(fdsA)
	fdsB, err := d.call(attach.OpCMCreateChannel, nil, &b)
	if err != nil {
		t.Fatal(err)
	}
	defer attach.CloseFDs(fdsB)
	udListener(t, d, a.Handle, 7411)
	var xr attach.HandleRep
	if _, err := d.call(attach.OpCMCreateID, &attach.CMIDReq{ID: a.Handle, Arg: uint32(rdmacm.PSTCP)}, &xr); err != nil {
		t.Fatal(err)
	}
	lch := rdmacm.NewEventChannel()
	defer lch.Close()
	var ids []*rdmacm.ID
	defer func() {
		for _, id := range ids {
			id.Destroy()
		}
	}()
	inHand := func() bool { // a goroutine in writeWithin's poll for room
		buf := make([]byte, 1<<20)
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "server.writeWithin") && strings.Contains(g, "unix.Poll(") {
				return true
			}
		}
		return false
	}
	for i := 0; !inHand(); i++ {
		if i == 400 {
			t.Fatal("400 requests and the channel's goroutine never waited for room")
		}
		ids = append(ids, sidrRequest(t, lch, 7411))
	}
	migrated := make(chan error, 1)
	go func() {
		_, err := d.call(attach.OpCMMigrateID, &attach.CMIDReq{ID: xr.Handle, Arg: b.Handle}, nil)
		migrated <- err
	}()
	select {
	case err := <-migrated:
		t.Fatalf("MIGRATE_ID returned (%v) while its old channel's goroutine held an event to write", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The process reads its channel: the event in hand is written, and the
	// migration completes.
	var buf [attach.MaxMessage]byte
	for end := time.Now().Add(10 * time.Second); ; {
		select {
		case err := <-migrated:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		if time.Now().After(end) {
			t.Fatal("MIGRATE_ID never completed with the channel read")
		}
		if _, _, err := unix.Recvfrom(fdsA[0], buf[:], unix.MSG_DONTWAIT); err != nil {
			time.Sleep(time.Millisecond)
		}
	}
}

// sidrRequest sends a SIDR_REQ from an ID of lch, on the in-process device B,
// to port of the daemon's device A, and paces the next: QP1's receive queue
// takes a burst of 64. The caller destroys the ID.
func sidrRequest(t *testing.T, lch *rdmacm.EventChannel, port uint16) *rdmacm.ID {
	t.Helper()
	cid, err := lch.CreateID(nil, rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := cid.ResolveAddr(addrB, netip.AddrPortFrom(addrA, port)); err != nil {
		t.Fatal(err)
	}
	localCMEvent(t, lch, rdmacm.EventAddrResolved)
	if err := cid.ResolveRoute(); err != nil {
		t.Fatal(err)
	}
	localCMEvent(t, lch, rdmacm.EventRouteResolved)
	if err := cid.Connect(rdmacm.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	return cid
}

// udListener makes a UD CM ID on d's event channel ch (its handle) listening on
// port of address A: the target of sidrRequest.
func udListener(t *testing.T, d *Device, ch uint32, port uint16) {
	t.Helper()
	var idr attach.HandleRep
	if _, err := d.call(attach.OpCMCreateID, &attach.CMIDReq{ID: ch, Arg: uint32(rdmacm.PSUDP)}, &idr); err != nil {
		t.Fatal(err)
	}
	lid := d.cmID(idr.Handle)
	if _, err := lid.BindAddr(netip.AddrPortFrom(addrA, port)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(1); err != nil {
		t.Fatal(err)
	}
}
