package ndk

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// LT13: a close completes only after the pending requests' callbacks and the
// event callbacks running on the object have returned: a connector closed
// while its Connect is pending, whose Connect callback is slow.
func TestLT13CloseWaitsForRequestsAndEvents(t *testing.T) {
	da, _ := memDevices(t)
	cli := newSide(t, da)
	// A peer that never answers: the REQ goes to an address nobody has.
	c, err := cli.ad.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var connectReturned atomic.Bool
	in := make(chan error, 1)
	err = c.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 4300), 1, 1, nil, func(err error) {
		in <- err
		time.Sleep(20 * time.Millisecond)
		connectReturned.Store(true)
	})
	if !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	// Wait for the REJ-less silence: close at once, the Connect still pending.
	done := make(chan bool, 1)
	err = c.Close(func(error) { done <- connectReturned.Load() })
	if !errors.Is(err, ErrPending) {
		t.Fatalf("close with a pending Connect: %v, want ErrPending", err)
	}
	if err := wait(t, "Connect", in); !errors.Is(err, ErrCanceled) && !errors.Is(err, ErrRefused) {
		t.Fatalf("Connect completed with %v", err)
	}
	if !wait(t, "close", done) {
		t.Fatal("close completed before the Connect callback returned")
	}

	// An event callback: a CQ notification that runs while the CQ is closed.
	in2, out2 := make(chan struct{}), make(chan struct{})
	var notifying atomic.Bool
	cq, _ := cli.ad.CreateCQ(16, func(error) {
		notifying.Store(true)
		close(in2)
		<-out2
		notifying.Store(false)
	}, nil)
	qp := createQP(t, cli.pd, cq)
	cq.Arm(NotifyAny)
	qp.Receive(1, []SGE{cli.mr.SGE(0, 64)})
	qp.Flush()
	wait(t, "notification", in2)
	// The QP's close completion waits behind the running callback: one
	// callback at a time per adapter.
	qp.Close(nil)
	cqDone := make(chan bool, 1)
	if err := cq.Close(func(error) { cqDone <- notifying.Load() }); !errors.Is(err, ErrPending) {
		t.Fatalf("CQ close during its notification: %v, want ErrPending", err)
	}
	time.Sleep(10 * time.Millisecond)
	close(out2)
	if wait(t, "CQ close", cqDone) {
		t.Fatal("CQ close completed while its notification callback ran")
	}
}

// LT14: no callback after the close completed: a closed client connector
// hears nothing of the server's disconnect, a closed listener nothing of new
// requests, a closed CQ no notification.
func TestLT14NoCallbackAfterClose(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	x := connect(t, cli, srv, 4301)
	var late atomic.Int32
	x.cc.SetDisconnectEvent(func() { late.Add(1) })
	if err := closeWait(t, "client connector", x.cc.Close); err != nil {
		t.Fatal(err)
	}
	x.sc.Disconnect(nil)
	// The listener: closed, then a connection request.
	l, _ := srv.ad.CreateListener(func(c *Connector) { late.Add(1); c.Close(nil) }, nil)
	if err := l.Listen(netip.AddrPortFrom(ipB, 4302), nil); err != nil {
		t.Fatal(err)
	}
	if err := closeWait(t, "listener", l.Close); err != nil {
		t.Fatal(err)
	}
	c, _ := cli.ad.CreateConnector(nil, nil)
	qp := createQP(t, cli.pd, cli.cq)
	done, ch := cb()
	if err := c.Connect(qp, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 4302), 1, 1, nil, done); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := wait(t, "Connect", ch); !errors.Is(err, ErrRefused) {
		t.Fatalf("Connect to a closed listener: %v", err)
	}
	closeWait(t, "connector", c.Close)
	closeWait(t, "qp", qp.Close)
	// The CQ: armed, closed, then nothing can complete on it.
	cq, _ := cli.ad.CreateCQ(4, func(error) { late.Add(1) }, nil)
	cq.Arm(NotifyAny)
	closeWait(t, "cq", cq.Close)
	time.Sleep(50 * time.Millisecond) // the server's DREQ and DREP cross the link
	barrier(cli.ad)
	barrier(srv.ad)
	if late.Load() != 0 {
		t.Fatalf("%d callbacks after their object's close completed", late.Load())
	}
}

// LT15: a close initiates flushing: a QP's posted receives and sends complete
// cancelled when it closes.
func TestLT15CloseFlushes(t *testing.T) {
	da, _ := memDevices(t)
	s := newSide(t, da)
	cq, _ := s.ad.CreateCQ(16, nil, nil)
	qp := createQP(t, s.pd, cq)
	for i := range 3 {
		if err := qp.Receive(uint64(10+i), []SGE{s.mr.SGE(uint64(i)*64, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	closeWait(t, "qp", qp.Close)
	var rs [8]Result
	n := cq.GetResults(rs[:])
	if n != 3 {
		t.Fatalf("%d results after the QP's close, want its 3 receives", n)
	}
	for i, r := range rs[:n] {
		if !errors.Is(r.Err(), ErrCanceled) || r.RequestContext != uint64(10+i) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	closeWait(t, "cq", cq.Close)
}
