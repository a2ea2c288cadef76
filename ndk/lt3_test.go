package ndk

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// LT13: a close requested while a request's callback runs stays pending until
// that callback returned, even when nothing else holds the object: a Connect
// refused by the peer (no listener), closed from another goroutine inside its
// callback.
func TestLT13CloseDuringRequestCallback(t *testing.T) {
	da, db := memDevices(t)
	cli := newSide(t, da)
	openAdapter(t, db) // its CM refuses the REQ: no listener on the port
	c, err := cli.ad.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, out := make(chan error, 1), make(chan struct{})
	var running atomic.Bool
	err = c.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 4310), 1, 1, nil, func(err error) {
		running.Store(true)
		in <- err
		<-out
		running.Store(false)
	})
	if !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := wait(t, "Connect", in); !errors.Is(err, ErrRefused) {
		t.Fatalf("Connect without a listener: %v, want ErrRefused", err)
	}
	done := make(chan bool, 1)
	err = c.Close(func(error) { done <- running.Load() })
	close(out)
	if !errors.Is(err, ErrPending) {
		t.Fatalf("close inside the Connect callback: %v, want ErrPending", err)
	}
	if wait(t, "close", done) {
		t.Fatal("close completed while the Connect callback ran")
	}
}

// LT14: an event callback already queued when the consumer closes the object
// keeps the close pending, so no callback follows a close that returned: a
// connector whose disconnect event waits behind another callback is closed.
// (The connector is the object whose release completes synchronously.)
func TestLT14QueuedEventHoldsClose(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	x := connect(t, cli, srv, 4312)
	var after atomic.Bool // the client connector's close has completed
	event := make(chan bool, 1)
	x.cc.SetDisconnectEvent(func() { event <- after.Load() })
	// Hold the client adapter's callback goroutine; the server disconnects,
	// and the client's disconnect event is queued behind.
	block := make(chan struct{})
	cli.ad.queue(func() { <-block })
	x.sc.Disconnect(nil)
	// cmEvent queues the event in the section of c.mu that marks the peer gone.
	for end := time.Now().Add(hang); ; time.Sleep(time.Millisecond) {
		x.cc.mu.Lock()
		gone := x.cc.st == cPeerGone
		x.cc.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(end) {
			close(block)
			t.Fatal("the peer's disconnect never arrived")
		}
	}
	closed := make(chan struct{})
	err := x.cc.Close(func(error) { after.Store(true); close(closed) })
	if err == nil {
		after.Store(true)
		close(closed)
	}
	close(block)
	if !errors.Is(err, ErrPending) {
		t.Fatalf("connector close with its disconnect event queued: %v, want ErrPending", err)
	}
	if wait(t, "disconnect event", event) {
		t.Fatal("a disconnect event after the connector's close completed")
	}
	wait(t, "connector close", closed)
}

// LT15: closing a connector cancels its pending Connect: the request
// completes with ErrCanceled, not after the CM's timeout.
func TestLT15CloseCancelsConnect(t *testing.T) {
	da, _ := memDevices(t)
	cli := newSide(t, da)
	c, err := cli.ad.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, ch := cb()
	// An address on the link nobody answers for.
	dst := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.99"), 4311)
	if err := c.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), dst, 1, 1, nil, done); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	closed, cch := cb()
	if err := c.Close(closed); !errors.Is(err, ErrPending) {
		t.Fatalf("close with a pending Connect: %v, want ErrPending", err)
	}
	if err := wait(t, "Connect", ch); !errors.Is(err, ErrCanceled) {
		t.Fatalf("Connect after close: %v, want ErrCanceled", err)
	}
	if err := wait(t, "close", cch); err != nil {
		t.Fatal(err)
	}
}

// LT12: adapter close blocks while an object of the adapter is open, and
// returns once it is closed.
func TestLT12AdapterCloseWaitsForObjects(t *testing.T) {
	da, _ := memDevices(t)
	a, err := OpenAdapter(da)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := a.CreatePD(nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	time.Sleep(20 * time.Millisecond) // give a wrong close the chance to return
	select {
	case err := <-closed:
		t.Fatalf("adapter close returned (%v) with a PD open", err)
	default:
	}
	if err := pd.Close(nil); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, "adapter close", closed); err != nil {
		t.Fatal(err)
	}
}
