package ndk

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/verbs"
)

// LT4: a connector's calls are safe concurrently with its Close. A call takes
// a hold, then c.mu; one that failed let go of its hold with c.mu still held,
// and when that was the last hold of a connector Close had marked closing,
// the release it ran took c.mu again: the goroutine deadlocked on itself and
// Close (and the adapter's Close) never completed. The test lines the two up
// in that window by holding c.mu.
func TestLT4DisconnectRacingClose(t *testing.T) {
	da, _ := memDevices(t)
	a, err := OpenAdapter(da)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitNode := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			c.n.mu.Lock()
			ok := cond()
			c.n.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("waiting for %s", what)
			}
		}
	}
	c.mu.Lock()
	derr := make(chan error, 1)
	go func() { derr <- c.Disconnect(nil) }() // an idle connector: ErrState
	waitNode("Disconnect's hold", func() bool { return c.n.holds == 1 })
	cerr := make(chan error, 1)
	go func() { cerr <- c.Close(nil) }()
	waitNode("Close to mark it closing", func() bool { return c.n.st == stClosing })
	c.mu.Unlock()
	select {
	case err := <-derr:
		if !errors.Is(err, ErrState) {
			t.Fatalf("Disconnect of an idle connector: %v, want ErrState", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Disconnect never returned: it deadlocked on the connector's lock")
	}
	select {
	case <-cerr:
	case <-time.After(5 * time.Second):
		t.Fatal("Close never returned")
	}
	a.Close() // not deferred: after a deadlock above it would wait for ever
}

// Disconnect after Connect completed and before CompleteConnect refuses the
// peer's REP: it completes at once (nil), the client's QP is in ERR, and the
// server's pending Accept fails. It used to move the QP to ERR and then fail
// with the CM's state error, the connector left connecting.
func TestDisconnectBeforeCompleteConnect(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	accepted := make(chan error, 1)
	var sc atomic.Pointer[Connector]
	l, err := srv.ad.CreateListener(func(c *Connector) {
		sc.Store(c)
		if err := c.Accept(srv.qp, 1, 1, nil, func(err error) { accepted <- err }); !errors.Is(err, ErrPending) {
			accepted <- err
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(ipB, 4320), nil); err != nil {
		t.Fatal(err)
	}
	c, _ := cli.ad.CreateConnector(nil, nil)
	done, ch := cb()
	if err := c.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 4320), 1, 1, nil, done); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := wait(t, "Connect", ch); err != nil {
		t.Fatal(err)
	}
	if err := c.Disconnect(func(error) { t.Error("Disconnect's callback after it returned nil") }); err != nil {
		t.Fatalf("Disconnect before CompleteConnect: %v, want nil", err)
	}
	if a, _, err := cli.qp.qp.Query(); err != nil || a.State != verbs.QPSErr {
		t.Errorf("client QP in %v (%v) after Disconnect, want ERR", a.State, err)
	}
	if err := wait(t, "Accept", accepted); err == nil {
		t.Error("the server's Accept succeeded though the client refused its REP")
	}
	if err := c.CompleteConnect(nil); !errors.Is(err, ErrState) {
		t.Errorf("CompleteConnect after Disconnect: %v, want ErrState", err)
	}
	closeWait(t, "client connector", c.Close)
	if s := sc.Load(); s != nil {
		closeWait(t, "server connector", s.Close)
	}
	closeWait(t, "listener", l.Close)
}
