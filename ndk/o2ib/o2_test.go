package o2ib

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/goid"
	"github.com/xrnic/xrnic/ndk"
)

// waitReaped waits until ni has freed every connection.
func waitReaped(t *testing.T, ni *NI) {
	t.Helper()
	for end := time.Now().Add(hang); ni.Conns() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d connections never freed", ni.Conns())
		}
	}
}

// O2-1: a connection starts with 1 + (number of posted receives) references:
// its maker's and one per receive.
func TestO2_1StartRefs(t *testing.T) {
	a, _ := pair(t, 4710, Config{Credits: 6})
	c := dial(t, a, 4710)
	if n := c.Refs(); n != 1+6 {
		t.Fatalf("an idle established connection holds %d references, want 1 + 6 receives", n)
	}
}

// O2-2: a connect that fails (here the peer rejects: nothing listens on the
// port) drops the maker's reference; the flushed receives drop theirs, and
// connd frees the connection.
func TestO2_2ConnectFailure(t *testing.T) {
	a, _ := pair(t, 4711, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if _, err := a.Connect(ctx, netip.AddrPortFrom(ipB, 4799)); err == nil {
		t.Fatal("Connect to a port nobody listens on succeeded")
	}
	waitReaped(t, a)
	if s := a.Stats(); s.Reaped != 1 || s.Established != 0 {
		t.Fatalf("stats %+v, want one connection reaped, none established", s)
	}
}

// O2-2, the passive side: an Accept that fails (here the active side refuses
// the REP: it disconnects before CompleteConnect, a REJ) drops the maker's
// reference too; the flushed receives drop theirs, and connd frees the
// connection. The active side is a bare ndk connector speaking o2ib's
// connection data.
func TestO2_2AcceptFailure(t *testing.T) {
	a, b := pair(t, 4718, Config{})
	cq, err := a.ad.CreateCQ(16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ndk.Await(cq.Close)
	qch := make(chan error, 1)
	var qp *ndk.QP
	if err := a.pd.CreateQP(ndk.QPOptions{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveDepth: 4, InitiatorDepth: 4},
		func(q *ndk.QP, err error) { qp = q; qch <- err }); !errors.Is(err, ndk.ErrPending) {
		t.Fatal(err)
	}
	if err := waitErr(t, "CreateQP", qch); err != nil {
		t.Fatal(err)
	}
	defer ndk.Await(qp.Close)
	cn, err := a.ad.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ndk.Await(cn.Close)
	ch := make(chan error, 1)
	err = cn.Connect(qp, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 4718), 1, 1, a.private(),
		func(err error) { ch <- err })
	if errors.Is(err, ndk.ErrPending) {
		err = waitErr(t, "Connect", ch)
	}
	if err != nil {
		t.Fatalf("Connect to the NI: %v", err)
	}
	if err := cn.Disconnect(nil); err != nil {
		t.Fatalf("Disconnect before CompleteConnect: %v", err)
	}
	waitReaped(t, b)
	if s := b.Stats(); s.Reaped != 1 || s.Established != 0 {
		t.Fatalf("passive stats %+v, want one connection reaped, none established", s)
	}
}

// O2-3: a receive whose post fails drops its reference (kiblnd_drop_rx): here
// one more receive than the QP's receive queue holds.
func TestO2_3FailedPostDropsRef(t *testing.T) {
	a, _ := pair(t, 4712, Config{Credits: 4})
	c := dial(t, a, 4712)
	before := c.Refs()
	c.addref()               // the extra buffer's own reference, as newConn counts it
	c.postRx(a.txBufs() + 3) // a send buffer's index: the receive queue is full
	if n := c.Refs(); n != before {
		t.Fatalf("after a failed post: %d references, want %d", n, before)
	}
}

// O2-4: each queued send holds a reference until it ends; sends queued and
// not posted are dropped when the connection closes (their callbacks say
// ErrClosed), posted ones end with their completions, and the count comes
// back to zero.
func TestO2_4QueuedSendsHoldRefs(t *testing.T) {
	a, b := pair(t, 4713, Config{})
	c := dial(t, a, 4713)
	c.mu.Lock()
	credits := c.credits
	c.credits = 0 // the peer's receives are full, as far as c knows: nothing posts
	c.mu.Unlock()
	before := c.Refs()
	const n = 3
	ends := make(chan error, n)
	for range n {
		if err := c.Put([]byte("queued"), func(err error) { ends <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Refs(); got != before+n {
		t.Fatalf("%d sends queued: %d references, want %d", n, got, before+n)
	}
	c.Close()
	for range n {
		if err := waitErr(t, "queued send", ends); !errors.Is(err, ErrClosed) {
			t.Fatalf("a queued send of a closed connection ended with %v, want ErrClosed", err)
		}
	}
	waitReaped(t, a)
	_ = credits
	_ = b
}

// O2-4: a send already posted when the connection closes is not dropped
// with the queued ones: it waits for its completion (its message buffer and
// RDMA slot are the hardware's until then), and ends, dropping its
// reference, only once the flush or the send completes, and then with the
// close's error: the PUT did not happen. The scheduler is held so that the
// PUT's message stays in flight across the close. (It used to end with the
// send's success: done(nil) for a PUT whose data never went.)
func TestO2_4PostedSendWaitsForCompletion(t *testing.T) {
	a, _ := pair(t, 4717, Config{})
	c := dial(t, a, 4717)
	block, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var armed atomic.Bool
	a.testHookSched = func(x *Conn) {
		if x == c && armed.Load() {
			once.Do(func() { close(entered); <-block })
		}
	}
	unblock := sync.OnceFunc(func() { close(block) })
	defer unblock() // a failure below must not leave the scheduler held
	ends := make(chan error, 1)
	armed.Store(true)
	// Larger than a message: a PUT_REQ, posted at once, then waiting for the
	// peer's answer with its RDMA slot taken.
	if err := c.Put(make([]byte, 3*a.cfg.MsgSize), func(err error) { ends <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(hang):
		t.Fatal("the scheduler never took the connection after the post")
	}
	c.mu.Lock()
	var posted int
	for _, x := range c.sent {
		if x != nil {
			posted += x.posted
		}
	}
	c.mu.Unlock()
	if posted == 0 {
		t.Fatal("no send in flight: the test did not hold the PUT's message")
	}
	c.Close()
	select {
	case err := <-ends:
		t.Fatalf("a posted send ended (%v) at the close, before its completion", err)
	case <-time.After(20 * time.Millisecond):
	}
	unblock()
	if err := waitErr(t, "posted send", ends); err == nil {
		t.Fatal("a PUT of a closed connection ended with success")
	}
	waitReaped(t, a)
}

// O2-5: a CQ event holds a reference while its connection waits for the
// scheduler, dropped once the scheduler handled it.
func TestO2_5CQEventHoldsRef(t *testing.T) {
	a, b := pair(t, 4714, Config{})
	c := dial(t, a, 4714)
	idle := c.Refs()
	var mu sync.Mutex
	var seen []int
	a.testHookSched = func(x *Conn) {
		if x == c {
			mu.Lock()
			seen = append(seen, x.Refs())
			mu.Unlock()
		}
	}
	done := make(chan error, 1)
	if err := c.Put([]byte("event"), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, "put", done); err != nil {
		t.Fatal(err)
	}
	recvMsg(t, b)
	for end := time.Now().Add(hang); c.Refs() != idle; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("references %d after the send, want %d again", c.Refs(), idle)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the scheduler never took the connection")
	}
	for _, n := range seen {
		// The event's reference, and the send's while it was queued or posted.
		if n < idle+1 {
			t.Fatalf("the scheduler took the connection with %d references, want the event's on top of %d", n, idle)
		}
	}
}

// O2-6: a disconnect (the peer's, here) flushes every posted receive, each
// dropping its reference, so the count reaches zero and the connection is
// freed.
func TestO2_6DisconnectFlushesReceives(t *testing.T) {
	a, b := pair(t, 4715, Config{})
	c := dial(t, a, 4715)
	var peer *Conn
	for end := time.Now().Add(hang); peer == nil; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		for x := range b.conns {
			peer = x
		}
		b.mu.Unlock()
		if time.Now().After(end) {
			t.Fatal("the passive side's connection never appeared")
		}
	}
	for end := time.Now().Add(hang); b.Stats().Established == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the passive side never established")
		}
	}
	peer.Close()
	waitReaped(t, a)
	waitReaped(t, b)
	if c.Refs() != 0 || peer.Refs() != 0 {
		t.Fatalf("counts %d and %d after the disconnect, want 0", c.Refs(), peer.Refs())
	}
}

// O2-7: the last reference hands the connection to connd, which frees it on
// its own goroutine: not on the one that dropped the reference (the
// scheduler's, or a callback's). The test holds a reference of its own past
// the close, so that the last one drops on the test's goroutine.
func TestO2_7LastRefToReaper(t *testing.T) {
	a, _ := pair(t, 4716, Config{})
	type ev struct{ zero, free uint64 }
	got := make(chan ev, 4)
	var zeroAt uint64
	a.testHookZero = func(*Conn) { zeroAt = goid.ID() }
	a.testHookFree = func(*Conn) { got <- ev{zeroAt, goid.ID()} }
	c := dial(t, a, 4716)
	c.addref()
	c.Close()
	for end := time.Now().Add(hang); c.Refs() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d references after the close, want the test's alone", c.Refs())
		}
	}
	me := goid.ID()
	c.decref()
	select {
	case e := <-got:
		if e.zero != me {
			t.Fatalf("the last reference dropped on goroutine %d, not the test's (%d)", e.zero, me)
		}
		if e.free == me {
			t.Fatalf("freed on goroutine %d, the one that dropped the last reference", e.free)
		}
	case <-time.After(hang):
		t.Fatal("never freed")
	}
	waitReaped(t, a)
}
