package ndk

import (
	"errors"
	"net/netip"
	"testing"
)

// connectFrom connects a new connector of cli to dst (through sep when not
// nil), returning it once connected and completed.
func connectFrom(t *testing.T, cli *side, qp *QP, sep *SharedEndpoint, src, dst netip.AddrPort) (*Connector, error) {
	t.Helper()
	c, err := cli.ad.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, ch := cb()
	if sep != nil {
		err = c.ConnectWithSharedEndpoint(qp, sep, dst, 1, 1, nil, done)
	} else {
		err = c.Connect(qp, src, dst, 1, 1, nil, done)
	}
	if errors.Is(err, ErrPending) {
		err = wait(t, "Connect", ch)
	}
	if err == nil {
		err = c.CompleteConnect(nil)
	}
	return c, err
}

// acceptAll is a listener whose connect event accepts on a fresh QP of srv and
// reports the connector.
func acceptAll(t *testing.T, srv *side, ap netip.AddrPort) (*Listener, chan *Connector) {
	t.Helper()
	got := make(chan *Connector, 16)
	l, err := srv.ad.CreateListener(func(c *Connector) {
		qp := make(chan result[*QP], 1)
		srv.pd.CreateQP(QPOptions{ReceiveCQ: srv.cq, InitiatorCQ: srv.cq, ReceiveDepth: 4, InitiatorDepth: 4},
			func(q *QP, err error) { qp <- result[*QP]{q, err} })
		go func() {
			r := <-qp
			if r.err != nil {
				t.Error(r.err)
				return
			}
			t.Cleanup(func() { r.v.Close(nil) })
			c.Accept(r.v, 1, 1, nil, func(err error) {
				if err != nil {
					t.Errorf("Accept: %v", err)
				}
				got <- c
			})
		}()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(ap, nil); err != nil {
		t.Fatal(err)
	}
	return l, got
}

// EP1, EP4: a connector accepted on a listener shares its endpoint, which
// counts the listener and each accepted connector, and is free at zero.
func TestEP1EP4ListenerEndpointCount(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	lap := netip.AddrPortFrom(ipB, 4400)
	l, got := acceptAll(t, srv, lap)
	if n := l.ep.count(); n != 1 {
		t.Fatalf("listener endpoint count %d, want 1", n)
	}
	var accepted []*Connector
	for i := range 3 {
		qp := createQP(t, cli.pd, cli.cq)
		t.Cleanup(func() { qp.Close(nil) })
		c, err := connectFrom(t, cli, qp, nil, netip.AddrPortFrom(ipA, 0), lap)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeWait(t, "client", c.Close) })
		sc := wait(t, "accept", got)
		accepted = append(accepted, sc)
		if la, _ := sc.GetLocalAddress(); la != lap {
			t.Fatalf("accepted connector's local address %v, want the listener's %v (EP1)", la, lap)
		}
		if sc.ep != l.ep {
			t.Fatal("accepted connector has an endpoint of its own (EP1)")
		}
		if n := l.ep.count(); n != 2+i {
			t.Fatalf("endpoint count %d after %d accepts, want %d", n, i+1, 2+i)
		}
	}
	ep := l.ep
	closeWait(t, "accepted 0", accepted[0].Close)
	if n := ep.count(); n != 3 {
		t.Fatalf("count %d after closing one accepted connector, want 3", n)
	}
	done, lch := cb()
	if err := l.Close(done); !errors.Is(err, ErrPending) {
		t.Fatalf("listener close with accepted connectors: %v, want ErrPending", err)
	}
	for _, c := range accepted[1:] {
		closeWait(t, "accepted", c.Close)
	}
	if err := wait(t, "listener close", lch); err != nil {
		t.Fatal(err)
	}
	if n := ep.count(); n != 0 {
		t.Fatalf("count %d after all closed", n)
	}
	l2, _ := acceptAll(t, srv, lap)
	closeWait(t, "listener again", l2.Close)
}

// EP2, EP8: a Connect connector has its own endpoint, taken by it alone and
// released when it closes.
func TestEP2EP8ConnectEndpoint(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	l, got := acceptAll(t, srv, netip.AddrPortFrom(ipB, 4401))
	t.Cleanup(func() { closeWait(t, "listener", l.Close) })
	src := netip.AddrPortFrom(ipA, 4402)
	c1, err := connectFrom(t, cli, cli.qp, nil, src, netip.AddrPortFrom(ipB, 4401))
	if err != nil {
		t.Fatal(err)
	}
	sc := wait(t, "accept", got)
	t.Cleanup(func() { closeWait(t, "server", sc.Close) })
	if c1.ep.count() != 1 || c1.ep.ap != src {
		t.Fatalf("connector endpoint %v count %d", c1.ep.ap, c1.ep.count())
	}
	if pa, _ := sc.GetPeerAddress(); pa != src {
		t.Fatalf("server sees the client at %v, want %v", pa, src)
	}
	// A second connector gets its own ephemeral endpoint.
	qp := createQP(t, cli.pd, cli.cq)
	t.Cleanup(func() { qp.Close(nil) })
	c2, err := connectFrom(t, cli, qp, nil, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 4401))
	if err != nil {
		t.Fatal(err)
	}
	sc2 := wait(t, "accept", got)
	t.Cleanup(func() { closeWait(t, "server 2", sc2.Close) })
	if c2.ep == c1.ep || c2.ep.ap.Port() < ephemeralLo {
		t.Fatalf("second connector's endpoint %v", c2.ep.ap)
	}
	closeWait(t, "c2", c2.Close)
	ep := c1.ep
	closeWait(t, "c1", c1.Close)
	if ep.count() != 0 {
		t.Fatalf("endpoint count %d after the close", ep.count())
	}
	l2, _ := acceptAll(t, cli, src) // the port is free for a listener again (EP8)
	closeWait(t, "listener on the freed port", l2.Close)
}

// EP3, EP9: connectors of a shared endpoint share its address and port; its
// close stays pending until they are closed, and the port is taken till then.
func TestEP3EP9SharedEndpoint(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	l, got := acceptAll(t, srv, netip.AddrPortFrom(ipB, 4403))
	t.Cleanup(func() { closeWait(t, "listener", l.Close) })
	sap := netip.AddrPortFrom(ipA, 4404)
	sep, err := cli.ad.CreateSharedEndpoint(sap, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cs []*Connector
	for i := range 2 {
		qp := createQP(t, cli.pd, cli.cq)
		t.Cleanup(func() { qp.Close(nil) })
		c, err := connectFrom(t, cli, qp, sep, netip.AddrPort{}, netip.AddrPortFrom(ipB, 4403))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		sc := wait(t, "accept", got)
		t.Cleanup(func() { closeWait(t, "server", sc.Close) })
		if pa, _ := sc.GetPeerAddress(); pa != sap {
			t.Fatalf("server sees connector %d at %v, want the shared %v (EP3)", i, pa, sap)
		}
		if n := sep.ep.count(); n != 2+i {
			t.Fatalf("shared endpoint count %d, want %d (EP9)", n, 2+i)
		}
	}
	done, ch := cb()
	if err := sep.Close(done); !errors.Is(err, ErrPending) {
		t.Fatalf("shared endpoint close with connectors: %v, want ErrPending", err)
	}
	if _, err := cli.ad.CreateSharedEndpoint(sap, nil); !errors.Is(err, ErrInUse) {
		t.Fatalf("a second shared endpoint on the port: %v, want ErrInUse", err)
	}
	for _, c := range cs {
		closeWait(t, "connector", c.Close)
	}
	if err := wait(t, "shared endpoint close", ch); err != nil {
		t.Fatal(err)
	}
	sep2, err := cli.ad.CreateSharedEndpoint(sap, nil)
	if err != nil {
		t.Fatalf("the port after the last close: %v", err)
	}
	closeWait(t, "shared endpoint", sep2.Close)
}

// EP5: while an endpoint's count is above zero, Listen, Connect and
// CreateSharedEndpoint (the start of ConnectWithSharedEndpoint) on its address
// and port fail, from any adapter.
func TestEP5PortInUse(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	ap := netip.AddrPortFrom(ipB, 4405)
	l, _ := acceptAll(t, srv, ap)
	other := openAdapter(t, db)
	l2, _ := other.CreateListener(func(c *Connector) {}, nil)
	if err := l2.Listen(ap, nil); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Listen: %v, want ErrInUse", err)
	}
	if err := l2.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 4405), nil); !errors.Is(err, ErrInUse) {
		t.Fatalf("Listen on 0.0.0.0 and the port: %v, want ErrInUse", err)
	}
	c, _ := srv.ad.CreateConnector(nil, nil)
	if err := c.Connect(srv.qp, ap, netip.AddrPortFrom(ipA, 1), 1, 1, nil, func(error) {}); !errors.Is(err, ErrInUse) {
		t.Fatalf("Connect from the port: %v, want ErrInUse", err)
	}
	if _, err := other.CreateSharedEndpoint(ap, nil); !errors.Is(err, ErrInUse) {
		t.Fatalf("shared endpoint on the port: %v, want ErrInUse", err)
	}
	closeWait(t, "listener", l.Close)
	if err := l2.Listen(ap, nil); err != nil {
		t.Fatalf("Listen once the port is free: %v", err)
	}
	for _, f := range []func(func(error)) error{c.Close, l2.Close} {
		closeWait(t, "object", f)
	}
	_ = cli
}

// EP7: a request handed over before the listener's close was asked for is not
// accepted while that close is pending: Accept fails, the peer is refused, and
// the close completes once the connector is closed. Before, Accept took the
// connection.
func TestEP7NoAcceptWhileListenerCloses(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	lap := netip.AddrPortFrom(ipB, 4407)
	got := make(chan *Connector, 1)
	l, err := srv.ad.CreateListener(func(c *Connector) { got <- c }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(lap, nil); err != nil {
		t.Fatal(err)
	}
	cc, err := cli.ad.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWait(t, "client", cc.Close) })
	conDone, conCh := cb()
	if err := cc.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), lap, 1, 1, nil, conDone); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	sc := wait(t, "connect event", got)
	closeDone, closeCh := cb()
	if err := l.Close(closeDone); !errors.Is(err, ErrPending) {
		t.Fatalf("listener close with a connector open: %v, want ErrPending (EP6)", err)
	}
	accDone, _ := cb()
	if err := sc.Accept(srv.qp, 1, 1, nil, accDone); !errors.Is(err, ErrListenerClosing) {
		t.Fatalf("Accept while the listener closes: %v, want ErrListenerClosing (EP7)", err)
	}
	if err := wait(t, "Connect", conCh); !errors.Is(err, ErrRefused) {
		t.Fatalf("Connect: %v, want ErrRefused", err)
	}
	closeWait(t, "incoming", sc.Close)
	if err := wait(t, "listener close", closeCh); err != nil {
		t.Fatal(err)
	}
}

// EP6, EP7: a listener's close stays pending until its accepted connectors
// close, and from the moment it is called the listener refuses requests.
func TestEP6EP7ClosingListener(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	lap := netip.AddrPortFrom(ipB, 4406)
	l, got := acceptAll(t, srv, lap)
	c1, err := connectFrom(t, cli, cli.qp, nil, netip.AddrPortFrom(ipA, 0), lap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWait(t, "client", c1.Close) })
	sc := wait(t, "accept", got)
	done, ch := cb()
	if err := l.Close(done); !errors.Is(err, ErrPending) {
		t.Fatalf("listener close: %v, want ErrPending (EP6)", err)
	}
	qp := createQP(t, cli.pd, cli.cq)
	t.Cleanup(func() { qp.Close(nil) })
	c2, err := connectFrom(t, cli, qp, nil, netip.AddrPortFrom(ipA, 0), lap)
	t.Cleanup(func() { closeWait(t, "refused", c2.Close) })
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Connect to a closing listener: %v, want ErrRefused (EP7)", err)
	}
	select {
	case <-ch:
		t.Fatal("listener close completed with an accepted connector open")
	default:
	}
	closeWait(t, "accepted", sc.Close)
	if err := wait(t, "listener close", ch); err != nil {
		t.Fatal(err)
	}
}
