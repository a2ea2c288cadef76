package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil/leakcheck"
	"github.com/xrnic/xrnic/internal/testutil/memdev"
	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/verbs"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var (
	addrA = netip.MustParseAddr("192.0.2.11")
	addrB = netip.MustParseAddr("192.0.2.12")
)

// memDevices opens two devices over a memory link, with their CMs started on
// cfg (short timeouts for the tests that wait for them).
func memDevices(t *testing.T, cfg cm.Config) (a, b *verbs.Device) {
	t.Helper()
	a, b = memdev.Pair(t, addrA, addrB)
	for _, d := range []*verbs.Device{a, b} {
		if _, err := d.CM(cfg); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

func getEvent(t *testing.T, ch *EventChannel, want EventType) *Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a hang guard
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

// side is one end: a channel, an ID, and a PD, CQ, buffer and MR for its QP.
type side struct {
	ch  *EventChannel
	id  *ID
	pd  *verbs.PD
	cq  *verbs.CQ
	buf []byte
	mr  *verbs.MR
}

func newSide(t *testing.T, d *verbs.Device) *side {
	t.Helper()
	s := &side{ch: NewEventChannel()}
	var err error
	if s.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = d.CreateCQ(64, verbs.CQOptions{}); err != nil {
		t.Fatal(err)
	}
	if s.buf, err = verbs.MapBuffer(1 << 16); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegMR(s.buf, 0, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessZeroBased); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.mr.Dereg().Wait()
		verbs.UnmapBuffer(s.buf)
		s.cq.Destroy().Wait()
		s.pd.Dealloc().Wait()
		s.ch.Close()
	})
	return s
}

func (s *side) createQP(t *testing.T, id *ID) *verbs.QP {
	t.Helper()
	qp, err := id.CreateQP(s.pd, verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { id.DestroyQP() })
	return qp
}

func (s *side) poll(t *testing.T) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	end := time.Now().Add(20 * time.Second)
	for time.Now().Before(end) {
		if s.cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("no completion")
	return verbs.WC{}
}

// listener binds and listens at addr:port on a new side of d.
func listener(t *testing.T, d *verbs.Device, ps PortSpace, port uint16) *side {
	t.Helper()
	s := newSide(t, d)
	var err error
	if s.id, err = s.ch.CreateID(nil, ps); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.id.Destroy() })
	if err := s.id.BindAddr(netip.AddrPortFrom(addrB, port)); err != nil {
		t.Fatal(err)
	}
	if err := s.id.Listen(8); err != nil {
		t.Fatal(err)
	}
	return s
}

// resolved makes an active ID on a new side of d resolved to addrB:port.
func resolved(t *testing.T, d *verbs.Device, ps PortSpace, port uint16) *side {
	t.Helper()
	s := newSide(t, d)
	var err error
	if s.id, err = s.ch.CreateID("client", ps); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.id.Destroy() })
	if err := s.id.ResolveAddr(addrA, netip.AddrPortFrom(addrB, port)); err != nil {
		t.Fatal(err)
	}
	getEvent(t, s.ch, EventAddrResolved)
	if err := s.id.ResolveRoute(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, s.ch, EventRouteResolved)
	return s
}

func TestRCConnectTransferDisconnect(t *testing.T) {
	a, b := memDevices(t, cm.Config{PacketLifeTime: 8})
	srv := listener(t, b, PSTCP, 7174)
	cli := resolved(t, a, PSTCP, 7174)
	if cli.id.LocalAddr().Addr() != addrA {
		t.Fatalf("resolved source %v", cli.id.LocalAddr())
	}
	cqp := cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{PrivateData: []byte("hello"), ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	if ev.Listen != srv.id || !bytes.HasPrefix(ev.Param.PrivateData, []byte("hello")) ||
		len(ev.Param.PrivateData) != MaxREQPrivate || ev.Param.RetryCount != 7 || ev.Param.QPN != cqp.QPN() {
		t.Fatalf("CONNECT_REQUEST %+v", ev)
	}
	conn := ev.ID
	if conn.PeerAddr() != cli.id.LocalAddr() || conn.LocalAddr() != netip.AddrPortFrom(addrB, 7174) {
		t.Fatalf("addresses %v %v (client %v)", conn.PeerAddr(), conn.LocalAddr(), cli.id.LocalAddr())
	}
	t.Cleanup(func() { conn.Destroy() })
	sqp := srv.createQP(t, conn)
	recv := [1]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{srv.mr.SGE(0, 4096)}}}
	recv2 := [1]verbs.RecvWR{{WRID: 2, SGL: []verbs.SGE{srv.mr.SGE(4096, 4096)}}}
	if _, err := sqp.PostRecv(recv[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := sqp.PostRecv(recv2[:]); err != nil {
		t.Fatal(err)
	}
	if err := conn.Accept(ConnParam{PrivateData: []byte("world"), ResponderResources: 1, InitiatorDepth: 1,
		RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	est := getEvent(t, cli.ch, EventEstablished)
	if !bytes.HasPrefix(est.Param.PrivateData, []byte("world")) || est.Param.QPN != sqp.QPN() {
		t.Fatalf("ESTABLISHED %+v", est.Param)
	}
	getEvent(t, srv.ch, EventEstablished)
	res := Resources(b)
	if len(res) != 2 || res[0].State != "LISTEN" || res[0].Src != netip.AddrPortFrom(addrB, 7174) ||
		res[1].State != "CONNECT" || !res[1].HasQP || res[1].QPN != sqp.QPN() || res[1].Dst != cli.id.LocalAddr() {
		t.Fatalf("resources of b: %+v", res)
	}
	if res := Resources(a); len(res) != 1 || res[0].QPN != cqp.QPN() || res[0].Dst != netip.AddrPortFrom(addrB, 7174) {
		t.Fatalf("resources of a: %+v", res)
	}

	// Linux's PSN rule: each side receives from the PSN it announced, so the
	// peer's send queue starts there.
	ca, _, _ := cqp.Query()
	sa, _, _ := sqp.Query()
	if ca.State != verbs.QPSRTS || sa.State != verbs.QPSRTS || ca.RQPSN != sa.SQPSN || sa.RQPSN != ca.SQPSN ||
		ca.DestQPN != sqp.QPN() || sa.DestQPN != cqp.QPN() {
		t.Fatalf("QPs: client %+v server %+v", ca.Attr, sa.Attr)
	}

	copy(cli.buf, "a message over the connection")
	send := [1]verbs.SendWR{{WRID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cli.mr.SGE(0, 29)}}}
	if _, err := cqp.PostSend(send[:]); err != nil {
		t.Fatal(err)
	}
	if wc := cli.poll(t); wc.Status != verbs.WCSuccess {
		t.Fatalf("send %v", wc.Status)
	}
	if wc := srv.poll(t); wc.Status != verbs.WCSuccess || wc.ByteLen != 29 || string(srv.buf[:29]) != "a message over the connection" {
		t.Fatalf("recv %+v %q", wc, srv.buf[:29])
	}

	if err := cli.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, srv.ch, EventDisconnected)
	if err := conn.Disconnect(); err != nil {
		t.Fatal(err)
	}
	// The server's second receive, never used, completes flushed.
	if wc := srv.poll(t); wc.WRID != 2 || wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("flush %+v", wc)
	}
	getEvent(t, cli.ch, EventDisconnected)
	getEvent(t, cli.ch, EventTimeWaitExit)
	getEvent(t, srv.ch, EventTimeWaitExit)
}

func TestRejectWithPrivateData(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	srv := listener(t, b, PSTCP, 7000)
	cli := resolved(t, a, PSTCP, 7000)
	cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	if err := ev.ID.Reject([]byte("no thanks")); err != nil {
		t.Fatal(err)
	}
	ev.ID.Destroy()
	rej := getEvent(t, cli.ch, EventRejected)
	if rej.Status != cm.RejConsumerDefined || !bytes.HasPrefix(rej.Param.PrivateData, []byte("no thanks")) {
		t.Fatalf("REJECTED %+v", rej)
	}
}

func TestConnectNoListenerRejectedInvalidServiceID(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	listener(t, b, PSTCP, 7000)
	cli := resolved(t, a, PSTCP, 7001)
	cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if rej := getEvent(t, cli.ch, EventRejected); rej.Status != cm.RejInvalidServiceID {
		t.Fatalf("status %d", rej.Status)
	}
}

func TestConnectUnreachableAfterRetries(t *testing.T) {
	// Nobody has 192.0.2.99: b's engine drops the REQs (not its address), and
	// the REQ's three tries (ResponseTimeout 2^12, packet life 2^8) run out.
	a, _ := memDevices(t, cm.Config{PacketLifeTime: 8, ResponseTimeout: 12, MaxCMRetries: 2})
	s := newSide(t, a)
	id, _ := s.ch.CreateID(nil, PSTCP)
	defer id.Destroy()
	if err := id.ResolveAddr(addrA, netip.MustParseAddrPort("192.0.2.99:7000")); err != nil {
		t.Fatal(err)
	}
	getEvent(t, s.ch, EventAddrResolved)
	id.ResolveRoute()
	getEvent(t, s.ch, EventRouteResolved)
	s.createQP(t, id)
	if err := id.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if ev := getEvent(t, s.ch, EventUnreachable); ev.Status != -ETIMEDOUT {
		t.Fatalf("status %d", ev.Status)
	}
}

func TestUDThroughSIDR(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	srv := listener(t, b, PSUDP, 7500)
	cli := resolved(t, a, PSUDP, 7500)
	cqp := cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{PrivateData: []byte("ud?")}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	if !bytes.HasPrefix(ev.UD.PrivateData, []byte("ud?")) {
		t.Fatalf("private data %q", ev.UD.PrivateData[:8])
	}
	t.Cleanup(func() { ev.ID.Destroy() })
	sqp := srv.createQP(t, ev.ID)
	recv := [1]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{srv.mr.SGE(0, 4096)}}}
	if _, err := sqp.PostRecv(recv[:]); err != nil {
		t.Fatal(err)
	}
	if err := ev.ID.Accept(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	est := getEvent(t, cli.ch, EventEstablished)
	if est.UD.QPN != sqp.QPN() || est.UD.QKey != UDPQKey {
		t.Fatalf("ESTABLISHED %+v", est.UD)
	}
	ah, err := cli.pd.CreateAH(est.UD.AV)
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	copy(cli.buf, "datagram")
	send := [1]verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cli.mr.SGE(0, 8)},
		AH: ah, RemoteQPN: est.UD.QPN, RemoteQKey: est.UD.QKey}}
	if _, err := cqp.PostSend(send[:]); err != nil {
		t.Fatal(err)
	}
	if wc := srv.poll(t); wc.Status != verbs.WCSuccess || string(srv.buf[40:48]) != "datagram" {
		t.Fatalf("recv %+v", wc)
	}
}

// TestListenAddressInUse: a listener's address and port are taken from its
// bind on (cma_get_port), so another ID's bind fails, before any listen.
func TestListenAddressInUse(t *testing.T) {
	_, b := memDevices(t, cm.Config{})
	listener(t, b, PSTCP, 7000)
	ch := NewEventChannel()
	defer ch.Close()
	id, _ := ch.CreateID(nil, PSTCP)
	defer id.Destroy()
	if err := id.BindAddr(netip.AddrPortFrom(addrB, 7000)); !errors.Is(err, verbs.ErrExists) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second bind: %v, want EADDRINUSE", err)
	}
}

// TestIPv6Connect: an RC connection between IPv6 GIDs; the rdma_cm header
// carries the IPv6 addresses and the passive side sees them.
func TestIPv6Connect(t *testing.T) {
	a6, b6 := netip.MustParseAddr("2001:db8::11"), netip.MustParseAddr("2001:db8::12")
	a, b := memdev.Pair(t, a6, b6)
	srv := newSide(t, b)
	srv.id, _ = srv.ch.CreateID(nil, PSTCP)
	t.Cleanup(func() { srv.id.Destroy() })
	if err := srv.id.BindAddr(netip.AddrPortFrom(b6, 7174)); err != nil {
		t.Fatal(err)
	}
	srv.id.Listen(1)
	cli := newSide(t, a)
	cli.id, _ = cli.ch.CreateID(nil, PSTCP)
	t.Cleanup(func() { cli.id.Destroy() })
	if err := cli.id.ResolveAddr(a6, netip.AddrPortFrom(b6, 7174)); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventAddrResolved)
	cli.id.ResolveRoute()
	getEvent(t, cli.ch, EventRouteResolved)
	cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{RetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	t.Cleanup(func() { ev.ID.Destroy() })
	if ev.ID.PeerAddr() != cli.id.LocalAddr() || ev.ID.LocalAddr().Addr() != b6 {
		t.Fatalf("addresses %v -> %v", ev.ID.PeerAddr(), ev.ID.LocalAddr())
	}
	srv.createQP(t, ev.ID)
	if err := ev.ID.Accept(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventEstablished)
	getEvent(t, srv.ch, EventEstablished)
}

// TestDeviceRemoval: closing a device tells its IDs (DEVICE_REMOVAL) before it
// goes, and they can still be destroyed.
func TestDeviceRemoval(t *testing.T) {
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	b, err := verbs.Open(verbs.Options{Link: lb, GIDs: []verbs.GID{verbs.GIDFromAddr(addrB)}})
	if err != nil {
		t.Fatal(err)
	}
	ch := NewEventChannel()
	id, _ := ch.CreateID(nil, PSTCP)
	if err := id.BindAddr(netip.AddrPortFrom(addrB, 7000)); err != nil {
		t.Fatal(err)
	}
	if err := id.Listen(1); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, ch, EventDeviceRemoval)
	if err := id.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
}

// plainQP makes a QP of s's that no ID owns, moved to INIT with id's attributes.
func (s *side) plainQP(t *testing.T, id *ID) *verbs.QP {
	t.Helper()
	qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy().Wait() })
	s.moveQP(t, id, qp, verbs.QPSInit)
	return qp
}

// moveQP applies id's InitQPAttr for each state to qp, as a librdmacm consumer
// with its own QP does with rdma_init_qp_attr and ibv_modify_qp.
func (s *side) moveQP(t *testing.T, id *ID, qp *verbs.QP, states ...verbs.QPState) {
	t.Helper()
	for _, st := range states {
		a, mask, err := id.InitQPAttr(st)
		if err != nil {
			t.Fatalf("InitQPAttr(%v): %v", st, err)
		}
		if err := qp.Modify(&a, mask).Wait(); err != nil {
			t.Fatalf("to %v: %v", st, err)
		}
	}
}

// TestConnectResponseEstablishWithoutQP: IDs without QPs on both sides
// (rdma_conn_param's qp_num). The passive side moves its QP with InitQPAttr and
// accepts; the active side gets CONNECT_RESPONSE (not ESTABLISHED: librdmacm
// completes only an ID's own QP), moves its QP and calls Establish, whose RTU
// gives the passive side ESTABLISHED. A SEND each way then proves the QPs'
// attributes: QPNs, PSNs (each side receives from the PSN it announced), path.
func TestConnectResponseEstablishWithoutQP(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	srv := listener(t, b, PSTCP, 7200)
	cli := resolved(t, a, PSTCP, 7200)
	if _, _, err := cli.id.InitQPAttr(verbs.QPSRTR); !errors.Is(err, ErrState) {
		t.Fatalf("RTR attributes before the REP: %v", err)
	}
	cqp := cli.plainQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Connect without QP or QPN: %v", err)
	}
	if err := cli.id.Connect(ConnParam{QPN: cqp.QPN(), PrivateData: []byte("hi"), RetryCount: 7, RNRRetryCount: 7,
		ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	if ev.Param.QPN != cqp.QPN() {
		t.Fatalf("REQ's QPN %d, want %d", ev.Param.QPN, cqp.QPN())
	}
	conn := ev.ID
	t.Cleanup(func() { conn.Destroy() })
	// rdma_cm's delayed MRA: handed over, the request has its MRA ready for
	// a retry of the peer's (cma_ib_req_handler); the same for the reply below.
	if st := conn.cmid.State(); st != cm.StateMRAREQSent {
		t.Fatalf("the request's CM state %v, want MRA_REQ_SENT", st)
	}
	sqp := srv.plainQP(t, conn)
	if err := conn.Accept(ConnParam{QPN: sqp.QPN(), PrivateData: []byte("ho"), RNRRetryCount: 7,
		ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	srv.moveQP(t, conn, sqp, verbs.QPSRTR, verbs.QPSRTS)
	recv := [1]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{srv.mr.SGE(0, 4096)}}}
	if _, err := sqp.PostRecv(recv[:]); err != nil {
		t.Fatal(err)
	}

	resp := getEvent(t, cli.ch, EventConnectResponse)
	if resp.Param.QPN != sqp.QPN() || !bytes.HasPrefix(resp.Param.PrivateData, []byte("ho")) {
		t.Fatalf("CONNECT_RESPONSE %+v", resp.Param)
	}
	if st := cli.id.cmid.State(); st != cm.StateMRAREPSent {
		t.Fatalf("the reply's CM state %v, want MRA_REP_SENT", st)
	}
	if err := conn.Establish(); !errors.Is(err, ErrState) {
		t.Fatalf("Establish on the passive side: %v", err)
	}
	if err := cli.id.Accept(ConnParam{}); !errors.Is(err, ErrState) {
		t.Fatalf("Accept on the active side: %v", err)
	}
	cli.moveQP(t, cli.id, cqp, verbs.QPSRTR, verbs.QPSRTS)
	crecv := [1]verbs.RecvWR{{WRID: 3, SGL: []verbs.SGE{cli.mr.SGE(0, 4096)}}}
	if _, err := cqp.PostRecv(crecv[:]); err != nil {
		t.Fatal(err)
	}
	if err := cli.id.Establish(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, srv.ch, EventEstablished)
	ca, _, _ := cqp.Query()
	sa, _, _ := sqp.Query()
	if ca.RQPSN != sa.SQPSN || sa.RQPSN != ca.SQPSN || ca.DestQPN != sqp.QPN() || sa.DestQPN != cqp.QPN() {
		t.Fatalf("QPs: client %+v server %+v", ca.Attr, sa.Attr)
	}

	for _, dir := range []struct {
		from, to *side
		qp       *verbs.QP
		msg      string
	}{{cli, srv, cqp, "from the active side"}, {srv, cli, sqp, "from the passive side"}} {
		copy(dir.from.buf[8192:], dir.msg)
		send := [1]verbs.SendWR{{WRID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{dir.from.mr.SGE(8192, uint32(len(dir.msg)))}}}
		if _, err := dir.qp.PostSend(send[:]); err != nil {
			t.Fatal(err)
		}
		if wc := dir.from.poll(t); wc.Status != verbs.WCSuccess {
			t.Fatalf("send %s: %v", dir.msg, wc.Status)
		}
		if wc := dir.to.poll(t); wc.Status != verbs.WCSuccess || string(dir.to.buf[:wc.ByteLen]) != dir.msg {
			t.Fatalf("recv %s: %+v %q", dir.msg, wc, dir.to.buf[:wc.ByteLen])
		}
	}
}

// TestConnectErrorWhenQPRefuses: the REP arrives but the ID's QP cannot go to
// RTR (the consumer put it in ERR): GetEvent gives CONNECT_ERROR with
// librdmacm's status -1 (ucma_process_conn_resp), and the passive side, whose
// REP went out, gets REJECTED, consumer defined, as ib_cm's REJ tells it.
func TestConnectErrorWhenQPRefuses(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	srv := listener(t, b, PSTCP, 7201)
	cli := resolved(t, a, PSTCP, 7201)
	cqp := cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	conn := ev.ID
	t.Cleanup(func() { conn.Destroy() })
	srv.createQP(t, conn)
	if err := cqp.Modify(&verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSErr}}, verbs.AttrState).Wait(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Accept(ConnParam{RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	if ev := getEvent(t, cli.ch, EventConnectError); ev.Status != -1 {
		t.Fatalf("CONNECT_ERROR status %d, want -1", ev.Status)
	}
	if ev := getEvent(t, srv.ch, EventRejected); ev.Status != cm.RejConsumerDefined {
		t.Fatalf("REJECTED status %d, want %d", ev.Status, cm.RejConsumerDefined)
	}
	if a, _, _ := cqp.Query(); a.State != verbs.QPSErr {
		t.Fatalf("QP state %v after CONNECT_ERROR", a.State)
	}
}

// TestIBPortSpaceConnect: an ID of the IB port space is RC (librdmacm's
// rdma_create_id) with service IDs of its own: a client of that space connects
// to a listener of it and moves data; a TCP-space client of the same port
// finds no listener (REJ, invalid service ID), and a UD (SIDR) client neither.
func TestIBPortSpaceConnect(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	srv := listener(t, b, PSIB, 7300)
	cli := resolved(t, a, PSIB, 7300)
	cqp := cli.createQP(t, cli.id)
	if cqp.Type() != verbs.RC {
		t.Fatalf("IB port space QP %v, want RC", cqp.Type())
	}
	if err := cli.id.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	conn := ev.ID
	t.Cleanup(func() { conn.Destroy() })
	if conn.PortSpace() != PSIB {
		t.Fatalf("CONNECT_REQUEST on port space %#x", conn.PortSpace())
	}
	srv.createQP(t, conn)
	if err := conn.Accept(ConnParam{RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventEstablished)
	getEvent(t, srv.ch, EventEstablished)

	tcp := resolved(t, a, PSTCP, 7300)
	tcp.createQP(t, tcp.id)
	if err := tcp.id.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if rej := getEvent(t, tcp.ch, EventRejected); rej.Status != cm.RejInvalidServiceID {
		t.Fatalf("TCP-space client of an IB-space listener: status %d", rej.Status)
	}
	udp := resolved(t, a, PSUDP, 7300)
	if err := udp.id.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if ev := getEvent(t, udp.ch, EventUnreachable); ev.Status != int(cm.SIDRUnsupported) {
		t.Fatalf("UDP-space client of an IB-space listener: status %d", ev.Status)
	}
}

// queued waits until ch has an event, without taking it.
func queued(t *testing.T, ch *EventChannel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a hang guard
	defer cancel()
	if err := ch.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A listener's requests not yet taken move with it, their IDs too, as the
// kernel's ucma_move_events moves them as the listener's events: the request
// and its ID's later events come on the new channel, and the old one holds no
// ID. Before, the request stayed behind.
func TestMigrateListenerTakesItsRequests(t *testing.T) {
	a, b := memDevices(t, cm.Config{PacketLifeTime: 8})
	ch2 := NewEventChannel()
	t.Cleanup(func() { // after the IDs' cleanups, registered later
		if err := ch2.Close(); err != nil {
			t.Errorf("closing the new channel: %v", err)
		}
	})
	srv := listener(t, b, PSTCP, 7020)
	cli := resolved(t, a, PSTCP, 7020)
	cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	queued(t, srv.ch)
	if err := srv.id.Migrate(ch2); err != nil {
		t.Fatal(err)
	}
	if ev, err := srv.ch.TryGetEvent(); ev != nil || err != nil {
		t.Fatalf("the old channel after the migration: %v %v, want nothing", ev, err)
	}
	ev := getEvent(t, ch2, EventConnectRequest)
	if ev.Listen != srv.id {
		t.Fatalf("CONNECT_REQUEST of %p, want the listener %p", ev.Listen, srv.id)
	}
	conn := ev.ID
	t.Cleanup(func() { conn.Destroy() })
	srv.createQP(t, conn)
	if err := conn.Accept(ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventEstablished)
	getEvent(t, ch2, EventEstablished)
	if err := srv.ch.Close(); err != nil {
		t.Fatalf("closing the old channel: %v, want no ID left on it", err)
	}
}

// Destroying a listener refuses its requests not yet taken and destroys their
// IDs (ucma_cleanup_ctx_events): the peer hears a REJ at once, and the
// channel holds no ID. Before, the request stayed queued, its ID holding the
// channel, and the peer waited for its REQ to time out.
func TestDestroyListenerRefusesItsRequests(t *testing.T) {
	a, b := memDevices(t, cm.Config{PacketLifeTime: 8})
	srv := listener(t, b, PSTCP, 7021)
	cli := resolved(t, a, PSTCP, 7021)
	cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	queued(t, srv.ch)
	if err := srv.id.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srv.ch.Close(); err != nil {
		t.Fatalf("closing the channel: %v, want no ID left on it", err)
	}
	if rej := getEvent(t, cli.ch, EventRejected); rej.Status != cm.RejConsumerDefined {
		t.Fatalf("REJECTED, status %d", rej.Status)
	}
}

// A REP the CM's event goroutine had taken when the device went away reaches
// an ID whose CM ID deviceRemoved has taken: it is posted, and the delayed MRA
// is not asked of a CM ID that is no longer there. Before, onCM dereferenced
// the nil CM ID and the process died.
func TestREPAfterDeviceRemovalNoPanic(t *testing.T) {
	a, _ := memDevices(t, cm.Config{})
	cli := resolved(t, a, PSTCP, 7300)
	cli.id.mu.Lock()
	cli.id.cmid = nil // as deviceRemoved leaves it
	cli.id.st = stConnect
	cli.id.mu.Unlock()
	cli.id.onCM(cm.Event{Type: cm.EventREPReceived, Msg: &mad.REP{LocalQPN: 0x22}})
	getEvent(t, cli.ch, EventConnectResponse)
}

// A DREQ of ours that runs out of retries ends the connection with
// DISCONNECTED and status -ETIMEDOUT, as cma_ib_handler reports
// IB_CM_DREQ_ERROR; a DREP's DISCONNECTED has status 0. Before, the timeout's
// DISCONNECTED had status 0 as well.
func TestDisconnectedAfterDREQTimeoutIsETIMEDOUT(t *testing.T) {
	a, _ := memDevices(t, cm.Config{})
	for _, c := range []struct {
		ev   cm.EventType
		want int
	}{{cm.EventDREQError, -ETIMEDOUT}, {cm.EventDREPReceived, 0}} {
		cli := resolved(t, a, PSTCP, 7301)
		cli.id.mu.Lock()
		cli.id.st = stDisconnect // as Disconnect leaves it, its DREQ sent
		cli.id.mu.Unlock()
		cli.id.onCM(cm.Event{Type: c.ev})
		if ev := getEvent(t, cli.ch, EventDisconnected); ev.Status != c.want {
			t.Fatalf("%v: DISCONNECTED status %d, want %d", c.ev, ev.Status, c.want)
		}
	}
}

// A connection ends once for the consumer: cma_ib_handler turns the first of
// DREQ_RECEIVED, DREP_RECEIVED and DREQ_ERROR into DISCONNECTED as the ID
// leaves RDMA_CM_CONNECT and drops the rest. Crossing DREQs give each side a
// DREQ, and the DREP that answers it later; before, each was a DISCONNECTED.
func TestDisconnectedOnce(t *testing.T) {
	a, _ := memDevices(t, cm.Config{})
	cli := resolved(t, a, PSTCP, 7302)
	cli.id.mu.Lock()
	cli.id.st = stDisconnect // Disconnect's DREQ sent
	cli.id.mu.Unlock()
	cli.id.onCM(cm.Event{Type: cm.EventDREQReceived}) // the peer's, crossing ours
	getEvent(t, cli.ch, EventDisconnected)
	cli.id.onCM(cm.Event{Type: cm.EventDREPReceived})
	cli.id.onCM(cm.Event{Type: cm.EventDREQError})
	cli.id.onCM(cm.Event{Type: cm.EventTimeWaitExit})
	getEvent(t, cli.ch, EventTimeWaitExit) // and no DISCONNECTED before it
}

// A UD request refused with private data (rdma_reject: SIDR_REP, status
// REJECT) reaches the active side as UNREACHABLE with the SIDR status and the
// SIDR_REP's private data, as cma_sidr_rep_handler sets param.ud's private
// data before it looks at the status. Before, the private data was lost.
func TestSIDRRejectPrivateDataReachesUnreachable(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	srv := listener(t, b, PSUDP, 7501)
	cli := resolved(t, a, PSUDP, 7501)
	cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	t.Cleanup(func() { ev.ID.Destroy() })
	if err := ev.ID.Reject([]byte("full")); err != nil {
		t.Fatal(err)
	}
	un := getEvent(t, cli.ch, EventUnreachable)
	if un.Status != int(cm.SIDRReject) || !bytes.HasPrefix(un.UD.PrivateData, []byte("full")) {
		t.Fatalf("UNREACHABLE status %d, private data %q", un.Status, un.UD.PrivateData)
	}
}

// A SIDR_REP that accepts with a Q_Key other than the ID's (RDMA_UDP_QKEY)
// gives ADDR_ERROR with -EINVAL: cma_sidr_rep_handler's cma_set_qkey fails.
// Before, it was UNREACHABLE.
func TestSIDRREPWrongQKeyAddrError(t *testing.T) {
	a, _ := memDevices(t, cm.Config{})
	cli := resolved(t, a, PSUDP, 7502)
	cli.id.mu.Lock()
	cli.id.st = stConnect // as Connect leaves it, its SIDR_REQ sent
	cli.id.mu.Unlock()
	cli.id.onCM(cm.Event{Type: cm.EventSIDRREPReceived, Msg: &mad.SIDRREP{Status: cm.SIDRSuccess, QPN: 0x22, QKey: 0x1111}})
	if ev := getEvent(t, cli.ch, EventAddrError); ev.Status != -EINVAL {
		t.Fatalf("ADDR_ERROR status %d, want %d", ev.Status, -EINVAL)
	}
}

// rdma_disconnect sends a DREQ from ESTABLISHED and a DREP from DREQ_RCVD and
// nothing otherwise (ib_send_cm_dreq and ib_send_cm_drep refuse other
// states, and rdma_disconnect ignores that): before Accept, or after it
// while the RTU is on its way, it succeeds, sends no REJ, and the connection
// can still be established. Before, Disconnect failed before Accept, and sent
// a REJ after it, so that the peer's CONNECT_RESPONSE was followed by
// REJECTED.
func TestDisconnectBeforeEstablishedSendsNothing(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	srv := listener(t, b, PSTCP, 7202)
	cli := resolved(t, a, PSTCP, 7202)
	cqp := cli.plainQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{QPN: cqp.QPN(), RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	conn := ev.ID
	t.Cleanup(func() { conn.Destroy() })
	sqp := srv.plainQP(t, conn)
	if err := conn.Disconnect(); err != nil {
		t.Fatalf("Disconnect of a CONNECT_REQUEST: %v", err)
	}
	if st := conn.cmid.State(); st != cm.StateMRAREQSent {
		t.Fatalf("the request's CM state %v after Disconnect, want MRA_REQ_SENT", st)
	}
	if err := conn.Accept(ConnParam{QPN: sqp.QPN(), RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	srv.moveQP(t, conn, sqp, verbs.QPSRTR, verbs.QPSRTS)
	if err := conn.Disconnect(); err != nil {
		t.Fatalf("Disconnect before the RTU: %v", err)
	}
	if st := conn.cmid.State(); st != cm.StateREPSent {
		t.Fatalf("the reply's CM state %v after Disconnect, want REP_SENT (no REJ)", st)
	}
	getEvent(t, cli.ch, EventConnectResponse)
	cli.moveQP(t, cli.id, cqp, verbs.QPSRTR, verbs.QPSRTS)
	if err := cli.id.Establish(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, srv.ch, EventEstablished)
}

// srqQP makes id's QP on an SRQ of s's.
func (s *side) srqQP(t *testing.T, id *ID) {
	t.Helper()
	srq, err := s.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srq.Destroy().Wait() })
	if _, err := id.CreateQP(s.pd, verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { id.DestroyQP() })
}

// For an ID with a QP, the REQ's and the REP's SRQ bit say whether that QP
// has an SRQ, whatever the parameters' srq (librdmacm's rdma_connect and
// rdma_accept pass id->qp->srq != NULL to ucma_copy_conn_param_to_kern).
// Before, the parameters' srq went out, and a consumer that left it 0 told
// the peer its QP had no SRQ.
func TestSRQBitFromTheIDsQP(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	srv := listener(t, b, PSTCP, 7203)
	cli := resolved(t, a, PSTCP, 7203)
	cli.srqQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	conn := ev.ID
	t.Cleanup(func() { conn.Destroy() })
	if !ev.Param.SRQ {
		t.Errorf("CONNECT_REQUEST's srq 0, the peer's QP has an SRQ")
	}
	srv.srqQP(t, conn)
	if err := conn.Accept(ConnParam{RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	if est := getEvent(t, cli.ch, EventEstablished); !est.Param.SRQ {
		t.Errorf("ESTABLISHED's srq 0, the peer's QP has an SRQ")
	}
}

// TestConnectToOwnAddress: an ID that connects to its own device's address
// reaches a listener there, its CM MADs and its QP's frames looped back by
// the device (rxe_loopback; the kernel resolves the address to the device's
// own MAC), none on the link.
func TestConnectToOwnAddress(t *testing.T) {
	// The device's address, and the unspecified address with a source
	// address (cma_resolve_loopback: the destination is the source).
	for _, c := range []struct{ src, dst netip.Addr }{{netip.Addr{}, addrB}, {addrB, netip.IPv4Unspecified()}} {
		t.Run(c.dst.String(), func(t *testing.T) { connectToOwnAddress(t, c.src, c.dst) })
	}
}

func connectToOwnAddress(t *testing.T, src, dst netip.Addr) {
	a, b := memDevices(t, cm.Config{PacketLifeTime: 8})
	srv := listener(t, b, PSTCP, 7180)
	cli := newSide(t, b)
	var err error
	if cli.id, err = cli.ch.CreateID("client", PSTCP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.id.Destroy() })
	if err := cli.id.ResolveAddr(src, netip.AddrPortFrom(dst, 7180)); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventAddrResolved)
	if err := cli.id.ResolveRoute(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventRouteResolved)
	cqp := cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	conn := ev.ID
	t.Cleanup(func() { conn.Destroy() })
	if conn.PeerAddr() != cli.id.LocalAddr() || conn.PeerAddr().Addr() != addrB {
		t.Fatalf("the request came from %v (the client is %v)", conn.PeerAddr(), cli.id.LocalAddr())
	}
	sqp := srv.createQP(t, conn)
	recv := [1]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{srv.mr.SGE(0, 4096)}}}
	if _, err := sqp.PostRecv(recv[:]); err != nil {
		t.Fatal(err)
	}
	if err := conn.Accept(ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventEstablished)
	getEvent(t, srv.ch, EventEstablished)
	copy(cli.buf, "to myself")
	send := [1]verbs.SendWR{{WRID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cli.mr.SGE(0, 9)}}}
	if _, err := cqp.PostSend(send[:]); err != nil {
		t.Fatal(err)
	}
	if wc := cli.poll(t); wc.Status != verbs.WCSuccess {
		t.Fatalf("send %v", wc.Status)
	}
	if wc := srv.poll(t); wc.Status != verbs.WCSuccess || string(srv.buf[:9]) != "to myself" {
		t.Fatalf("recv %+v %q", wc, srv.buf[:9])
	}
	if err := cli.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, srv.ch, EventDisconnected)
	if err := conn.Disconnect(); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventDisconnected)
	c := b.EngineCounters()
	if c[verbs.EngLoopback] == 0 || c[verbs.EngTxFrames] != 0 || a.EngineCounters()[verbs.EngRxFrames] != 0 {
		t.Errorf("looped back %d, to the link %d, the link's peer received %d",
			c[verbs.EngLoopback], c[verbs.EngTxFrames], a.EngineCounters()[verbs.EngRxFrames])
	}
}

// TestResolveUnspecifiedOfSeveralDevices: the unspecified address with no
// source resolves to the first device, its own address the destination
// (cma_resolve_loopback, cma_bind_loopback: the first device with an active
// port), however many devices there are; it is no route to choose.
func TestResolveUnspecifiedOfSeveralDevices(t *testing.T) {
	a, _ := memDevices(t, cm.Config{})
	s := newSide(t, a)
	id, err := s.ch.CreateID(nil, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(netip.IPv4Unspecified(), 7182)); err != nil {
		t.Fatal(err)
	}
	getEvent(t, s.ch, EventAddrResolved)
	if src, dst := id.LocalAddr(), id.PeerAddr(); src.Addr() != addrA || dst != netip.AddrPortFrom(addrA, 7182) {
		t.Fatalf("resolved %v to %v, want the first device's %v to itself", src, dst, addrA)
	}
}

// TestResolveAddrFamily: a destination of another family than the ID's
// source, or than the address it is bound to, is EINVAL (resolve_prepare_src),
// the unspecified address of that family too: it resolved, an IPv4 source to
// an IPv6 peer, or "::" to the IPv4 source itself.
func TestResolveAddrFamily(t *testing.T) {
	a, _ := memDevices(t, cm.Config{})
	s := newSide(t, a)
	for _, dst := range []netip.Addr{netip.IPv6Unspecified(), netip.MustParseAddr("fd00::1")} {
		for _, bound := range []bool{false, true} {
			id, err := s.ch.CreateID(nil, PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			src := addrA
			if bound {
				if err := id.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
					t.Fatal(err)
				}
				src = netip.Addr{}
			}
			if err := id.ResolveAddr(src, netip.AddrPortFrom(dst, 7183)); !errors.Is(err, verbs.ErrInvalid) {
				t.Errorf("bound %v, source %v, destination %v: %v (peer %v), want EINVAL", bound, src, dst, err, id.PeerAddr())
			}
			id.Destroy()
		}
	}
}
