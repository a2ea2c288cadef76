package ndk

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/verbs"
)

// notes counts a notification callback's calls and reports each on a channel.
type notes struct {
	n  atomic.Int32
	ch chan error
}

func newNotes() *notes { return &notes{ch: make(chan error, 16)} }

func (c *notes) fn(err error) { c.n.Add(1); c.ch <- err }

// sendN posts n Sends of 4 bytes from cli with flags f and waits for their results.
func sendN(t *testing.T, cli *side, n int, f Flags) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := cli.qp.Send(uint64(100+i), []SGE{cli.mr.SGE(0, 4)}, f); err != nil {
			t.Fatal(err)
		}
		if r := poll(t, cli.cq); r.Err() != nil {
			t.Fatalf("send %d: %+v", i, r)
		}
	}
}

// TestCQArmResize: NdkArmCq's callback runs once per Arm, for any completion or
// only a solicited one; NdkResizeCq keeps the queued results in order, refuses
// a depth below them, and lets more arrive than the old depth held.
func TestCQArmResize(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	// The server's CQ is replaced by one with a notification and a depth of 4.
	note := newNotes()
	if err := closeWait(t, "qp", srv.qp.Close); err != nil {
		t.Fatal(err)
	}
	if err := closeWait(t, "cq", srv.cq.Close); err != nil {
		t.Fatal(err)
	}
	var err error
	if srv.cq, err = srv.ad.CreateCQ(4, note.fn, nil); err != nil {
		t.Fatal(err)
	}
	srv.qp = createQP(t, srv.pd, srv.cq)
	connect(t, cli, srv, 4100)
	recv := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := srv.qp.Receive(uint64(i), []SGE{srv.mr.SGE(0, 64)}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Armed for solicited: a plain Send does not fire it, a solicited one does,
	// once. (The responder completes a receive before it acknowledges, so a
	// finished Send means its receive's result is queued.)
	recv(5) // contexts 0-4
	if err := srv.cq.Arm(NotifySolicited); err != nil {
		t.Fatal(err)
	}
	sendN(t, cli, 1, 0)
	poll(t, srv.cq) // receive 0
	barrier(srv.ad) // any callback it caused has run
	if n := note.n.Load(); n != 0 {
		t.Fatalf("%d notifications for a plain Send, armed for solicited", n)
	}
	sendN(t, cli, 1, SendAndSolicitEvent)
	if err := wait(t, "solicited notification", note.ch); err != nil {
		t.Fatal(err)
	}
	sendN(t, cli, 2, 0)
	barrier(srv.ad)
	if n := note.n.Load(); n != 1 {
		t.Fatalf("%d notifications for one Arm", n)
	}

	// Receives 1-3 are queued: a smaller depth is refused, a larger one keeps them.
	if err := srv.cq.Resize(2); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Resize(2) with 3 results queued: %v, want ErrInvalid", err)
	}
	if err := srv.cq.Resize(64); err != nil {
		t.Fatal(err)
	}
	// Sixteen more (receive 4 and 15 new ones): four times the old depth.
	recv(15)
	sendN(t, cli, 16, 0)
	var rs [32]Result
	n := 0
	for end := time.Now().Add(hang); n < 19 && time.Now().Before(end); {
		n += srv.cq.GetResults(rs[n:])
	}
	if n != 19 {
		t.Fatalf("%d results after Resize, want 19", n)
	}
	for i, r := range rs[:n] {
		want := uint64(i + 1)
		if i >= 4 {
			want = uint64(i - 4)
		}
		if r.Err() != nil || r.Type != OpReceive || r.RequestContext != want {
			t.Fatalf("result %d after Resize: %+v, want receive %d", i, r, want)
		}
	}

	// Arm for any: the next completion fires it; the ones after, unarmed, do not.
	if err := srv.cq.Arm(NotifyAny); err != nil {
		t.Fatal(err)
	}
	recv(3)
	sendN(t, cli, 2, 0)
	if err := wait(t, "notification", note.ch); err != nil {
		t.Fatal(err)
	}
	barrier(srv.ad)
	if n := note.n.Load(); n != 2 {
		t.Fatalf("%d notifications for two Arms", n)
	}

	// After close, Arm and Resize fail with ErrClosed.
	srv.closeAll(t)
	if err := srv.cq.Arm(NotifyAny); !errors.Is(err, ErrClosed) {
		t.Fatalf("Arm after close: %v", err)
	}
	if err := srv.cq.Resize(128); !errors.Is(err, ErrClosed) {
		t.Fatalf("Resize after close: %v", err)
	}
}

// TestSRQNotification: the SRQ's callback runs once when its posted receives
// fall below the threshold (the SRQ limit event), is then disarmed, and Modify
// arms it again.
func TestSRQNotification(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	note := newNotes()
	srq, err := srv.pd.CreateSRQ(16, 1, 2, note.fn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := closeWait(t, "qp", srv.qp.Close); err != nil {
		t.Fatal(err)
	}
	ch := make(chan result[*QP], 1)
	err = srv.pd.CreateQPWithSRQ(QPOptions{ReceiveCQ: srv.cq, InitiatorCQ: srv.cq, InitiatorDepth: 4, MaxInitiatorSGE: 1},
		srq, func(q *QP, err error) { ch <- result[*QP]{q, err} })
	if !errors.Is(err, ErrPending) {
		t.Fatalf("CreateQPWithSRQ: %v", err)
	}
	r := wait(t, "CreateQPWithSRQ", ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	srv.qp = r.v
	// The QP goes before the SRQ, the SRQ before the side's PD.
	t.Cleanup(func() {
		closeWait(t, "qp", srv.qp.Close)
		if err := closeWait(t, "srq", srq.Close); err != nil && !errors.Is(err, ErrClosed) {
			t.Error(err)
		}
	})
	connect(t, cli, srv, 4101)
	post := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := srq.Receive(uint64(i), []SGE{srv.mr.SGE(uint64(64*i), 64)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	consume := func(n int) {
		t.Helper()
		sendN(t, cli, n, 0)
		for i := 0; i < n; i++ {
			if r := poll(t, srv.cq); r.Err() != nil || r.Type != OpReceive || r.QP != srv.qp {
				t.Fatalf("receive through the SRQ: %+v", r)
			}
		}
	}

	post(4)
	consume(2) // two left: not below the threshold
	barrier(srv.ad)
	if n := note.n.Load(); n != 0 {
		t.Fatalf("%d notifications with the threshold not crossed", n)
	}
	consume(1) // one left
	if err := wait(t, "SRQ notification", note.ch); err != nil {
		t.Fatal(err)
	}
	consume(1) // none left; disarmed, so no second call
	if err := srq.Modify(0, 3, nil); err != nil {
		t.Fatal(err)
	}
	// A threshold of 0 keeps the threshold and its arming (NdkModifySrq).
	if err := srq.Modify(0, 0, nil); err != nil {
		t.Fatal(err)
	}
	post(4)
	consume(2) // two left, below three
	wait(t, "SRQ notification after Modify", note.ch)
	if n := note.n.Load(); n != 2 {
		t.Fatalf("%d notifications, want 2 (one per arming)", n)
	}
}

// TestListenerControlConnectEvents: a paused listener holds connection
// requests without calling its connect callback and hands them over on
// resume; closing it refuses those still held.
func TestListenerControlConnectEvents(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	lap := netip.AddrPortFrom(ipB, 4102)
	l, got := acceptAll(t, srv, lap)
	l.ControlConnectEvents(true)
	held := func(n int) {
		t.Helper()
		for end := time.Now().Add(hang); time.Now().Before(end); time.Sleep(time.Millisecond) {
			l.mu.Lock()
			k := len(l.backlog)
			l.mu.Unlock()
			if k == n {
				return
			}
		}
		t.Fatalf("the paused listener never held %d requests", n)
	}
	type conn struct {
		c   *Connector
		err error
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []*Connector
	)
	connectAsync := func(qp *QP) chan conn {
		ch := make(chan conn, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := connectFrom(t, cli, qp, nil, netip.AddrPortFrom(ipA, 0), lap)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			ch <- conn{c, err}
		}()
		return ch
	}
	// On failure too, every connector is closed before the sides' objects
	// (closing one twice is harmless: ErrClosed).
	t.Cleanup(func() {
		wg.Wait() // each Connect ends, at the latest by the CM's timeout
		for _, c := range conns {
			closeWait(t, "connector", c.Close)
		}
		// The listener's close completes once its accepted connectors close.
		done, lclosed := cb()
		if err := l.Close(done); !errors.Is(err, ErrPending) {
			return // closed already
		}
		for {
			select {
			case sc := <-got:
				closeWait(t, "accepted", sc.Close)
			case <-lclosed:
				return
			case <-time.After(hang):
				t.Error("listener close never completed")
				return
			}
		}
	})

	first := connectAsync(cli.qp)
	held(1)
	select {
	case <-got:
		t.Fatal("a paused listener called its connect callback")
	default:
	}
	l.ControlConnectEvents(false)
	sc := wait(t, "accept after resume", got)
	c1 := wait(t, "connect after resume", first)
	if c1.err != nil {
		t.Fatalf("Connect to a resumed listener: %v", c1.err)
	}
	closeWait(t, "client", c1.c.Close)
	closeWait(t, "accepted", sc.Close)

	// Paused again: the held request is refused when the listener closes.
	l.ControlConnectEvents(true)
	qp := createQP(t, cli.pd, cli.cq)
	t.Cleanup(func() { closeWait(t, "qp", qp.Close) })
	second := connectAsync(qp)
	held(1)
	if err := closeWait(t, "listener", l.Close); err != nil {
		t.Fatal(err)
	}
	c2 := wait(t, "connect to a closed listener", second)
	closeWait(t, "refused", c2.c.Close)
	if !errors.Is(c2.err, ErrRefused) {
		t.Fatalf("Connect held by a listener that closed: %v, want ErrRefused", c2.err)
	}
}
