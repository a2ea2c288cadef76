package ndk

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// barrier waits until every callback queued on a so far has returned.
func barrier(a *Adapter) {
	ch := make(chan struct{})
	a.queue(func() { close(ch) })
	<-ch
}

// counter is a callback that counts its calls.
type counter struct{ n atomic.Int32 }

func (c *counter) done(error) { c.n.Add(1) }

// LT1: CreateQP completes through its callback, once; the synchronous creates
// never call theirs.
func TestLT1CreateCompletion(t *testing.T) {
	da, _ := memDevices(t)
	a := openAdapter(t, da)
	var calls atomic.Int32
	pd, err := a.CreatePD(func(*PD, error) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	cq, err := a.CreateCQ(16, nil, func(*CQ, error) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.CreateMR(false, func(*MR, error) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	mw, err := pd.CreateMW(func(*MW, error) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(16, 1, 0, nil, func(*SRQ, error) { calls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan result[*QP], 2)
	if err := pd.CreateQP(QPOptions{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveDepth: 4, InitiatorDepth: 4},
		func(q *QP, err error) { ch <- result[*QP]{q, err} }); !errors.Is(err, ErrPending) {
		t.Fatalf("CreateQP: %v, want ErrPending", err)
	}
	r := wait(t, "CreateQP", ch)
	if r.err != nil || r.v == nil {
		t.Fatalf("CreateQP completed with %v %v", r.v, r.err)
	}
	// Ready: a receive goes in.
	buf := make([]byte, 64)
	if err := mr.Register(buf, AllowLocalWrite, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.v.Receive(1, []SGE{mr.SGE(0, 64)}); err != nil {
		t.Fatalf("Receive on the created QP: %v", err)
	}
	barrier(a)
	if len(ch) != 0 || calls.Load() != 0 {
		t.Fatalf("extra create completions: QP %d, synchronous ones %d", len(ch), calls.Load())
	}
	// A create that fails at once calls nothing either.
	if err := pd.CreateQP(QPOptions{ReceiveCQ: cq}, func(*QP, error) { calls.Add(1) }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CreateQP without an initiator CQ: %v", err)
	}
	for _, c := range []func(func(error)) error{r.v.Close, srq.Close, mw.Close, mr.Close, cq.Close, pd.Close} {
		closeWait(t, "object", c)
	}
	barrier(a)
	if calls.Load() != 0 {
		t.Fatalf("%d create completions", calls.Load())
	}
}

// LT2: requests complete through their completion callbacks, once each.
func TestLT2RequestCompletion(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	// A refused Connect (no listener) completes through the callback.
	c, err := cli.ad.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	ch := make(chan error, 2)
	err = c.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 4100), 1, 1, nil,
		func(err error) { n.Add(1); ch <- err })
	if !errors.Is(err, ErrPending) {
		t.Fatalf("Connect: %v", err)
	}
	if err := wait(t, "Connect", ch); !errors.Is(err, ErrRefused) {
		t.Fatalf("Connect to no listener completed with %v, want ErrRefused", err)
	}
	closeWait(t, "connector", c.Close)
	barrier(cli.ad)
	if n.Load() != 1 {
		t.Fatalf("Connect's callback ran %d times", n.Load())
	}
	// A successful Connect, Accept and Disconnect each complete once
	// (connect and wait check it, and a second call would find the channel full).
	x := connect(t, cli, srv, 4101)
	go func() {
		wait(t, "server's disconnect event", x.srvDiscon)
		if err := x.sc.Disconnect(nil); err != nil {
			t.Errorf("answering Disconnect: %v", err)
		}
	}()
	done, dch := cb()
	if err := x.cc.Disconnect(done); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := wait(t, "Disconnect", dch); err != nil {
		t.Fatal(err)
	}
}

// LT3: a close that completes synchronously never calls its callback, with
// success or with an error; one that returns ErrPending calls it once.
func TestLT3CloseCompletion(t *testing.T) {
	da, _ := memDevices(t)
	s := newSide(t, da)
	var c counter
	if err := s.mr.Close(c.done); err != nil {
		t.Fatalf("MR close: %v, want a synchronous success", err)
	}
	if err := s.mr.Close(c.done); !errors.Is(err, ErrClosed) {
		t.Fatalf("second MR close: %v, want ErrClosed", err)
	}
	var q counter
	if err := s.qp.Close(q.done); !errors.Is(err, ErrPending) && err != nil {
		t.Fatalf("QP close: %v", err)
	} else if errors.Is(err, ErrPending) {
		for end := time.Now().Add(hang); q.n.Load() == 0 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		barrier(s.ad)
		if q.n.Load() != 1 {
			t.Fatalf("pending QP close completed %d times", q.n.Load())
		}
	}
	barrier(s.ad)
	if c.n.Load() != 0 {
		t.Fatalf("synchronous closes called their callback %d times", c.n.Load())
	}
}

// LT4: every function may be called concurrently, before earlier callbacks
// returned: posts, polls, arms, registrations and closes of siblings from
// many goroutines at once (run with -race).
func TestLT4ConcurrentCalls(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	connect(t, cli, srv, 4102)
	var wg sync.WaitGroup
	const per = 200
	for g := range 4 {
		wg.Add(3)
		go func() {
			defer wg.Done()
			for i := range per {
				off := uint64(g*per+i) % 64 * 64
				if err := srv.qp.Receive(uint64(i), []SGE{srv.mr.SGE(off, 64)}); err != nil && !errors.Is(err, verbs.ErrQueueFull) {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			var rs [8]Result
			for range per {
				srv.cq.GetResults(rs[:])
				srv.cq.Arm(NotifyAny)
			}
		}()
		go func() {
			defer wg.Done()
			for range per / 10 {
				m, err := cli.pd.CreateMR(false, nil)
				if err != nil {
					t.Error(err)
					return
				}
				b := make([]byte, 128)
				if err := m.Register(b, AllowRemoteRead, nil); err != nil {
					t.Error(err)
				}
				if m.RemoteToken() == 0 {
					t.Error("no token")
				}
				if err := m.Close(nil); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// LT5: the consumer may close an object from inside a completion callback of
// a call on that object, before the call returned: Connect's failure closes
// the connector while Connect has not returned yet.
func TestLT5CloseInsideCallbackBeforeReturn(t *testing.T) {
	da, db := memDevices(t)
	cli := newSide(t, da)
	openAdapter(t, db) // its CM refuses the REQ
	closed := make(chan error, 1)
	var c *Connector
	released := make(chan struct{})
	testHookConnectReturn = func() {
		select {
		case <-released:
		case <-time.After(hang):
			t.Error("the callback never closed the connector")
		}
	}
	t.Cleanup(func() { testHookConnectReturn = nil })
	c, err := cli.ad.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Connect(cli.qp, netip.AddrPortFrom(ipA, 4103), netip.AddrPortFrom(ipB, 4103), 1, 1, nil, func(error) {
		// Connect has not returned (the hook holds it): close from here.
		err := c.Close(func(err error) { closed <- err; close(released) })
		if err == nil {
			closed <- nil
			close(released)
		} else if !errors.Is(err, ErrPending) {
			closed <- err
			close(released)
		}
	})
	if !errors.Is(err, ErrPending) {
		t.Fatalf("Connect: %v", err)
	}
	if err := wait(t, "close", closed); err != nil {
		t.Fatalf("close from the callback: %v", err)
	}
}

// LT6, LT7: the connect-failure case. Connect's completion is initiated
// (queued) before Connect returns, the consumer closes the connector in the
// callback, and Connect must not touch it after: no deadlock, and the close
// really released everything the connector held (its CM ID and its port),
// which a Connect that stored state after initiating would leak.
func TestLT6LT7ConnectFailureCloseInCallback(t *testing.T) {
	da, db := memDevices(t)
	cli := newSide(t, da)
	openAdapter(t, db) // its CM refuses the REQs
	for i := range 20 {
		port := uint16(4200 + i)
		released := make(chan struct{})
		testHookConnectReturn = func() {
			select {
			case <-released:
			case <-time.After(hang):
				t.Error("no completion while Connect was held")
			}
		}
		c, err := cli.ad.CreateConnector(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Connect(cli.qp, netip.AddrPortFrom(ipA, port), netip.AddrPortFrom(ipB, port), 1, 1, nil, func(err error) {
			if !errors.Is(err, ErrRefused) {
				t.Errorf("Connect completed with %v", err)
			}
			if err := c.Close(func(error) { close(released) }); err == nil {
				close(released)
			}
		})
		testHookConnectReturn = nil
		if !errors.Is(err, ErrPending) {
			t.Fatalf("Connect: %v", err)
		}
		barrier(cli.ad)
		if ids := rdmacm.Resources(da); len(ids) != 0 {
			t.Fatalf("round %d: CM IDs left after the close: %+v", i, ids)
		}
		ep, err := reserve(netip.AddrPortFrom(ipA, port))
		if err != nil {
			t.Fatalf("round %d: the connector's port is still held after its close: %v", i, err)
		}
		ep.unref()
	}
}

// LT8: closing an antecedent before its successors returns ErrPending and
// completes only when every successor is closed.
func TestLT8AntecedentClosePending(t *testing.T) {
	da, _ := memDevices(t)
	a := openAdapter(t, da)
	pd, _ := a.CreatePD(nil)
	cq, _ := a.CreateCQ(16, nil, nil)
	qp := createQP(t, pd, cq)
	mr, _ := pd.CreateMR(false, nil)
	pdDone, pdCh := cb()
	if err := pd.Close(pdDone); !errors.Is(err, ErrPending) {
		t.Fatalf("PD close with successors: %v, want ErrPending", err)
	}
	cqDone, cqCh := cb()
	if err := cq.Close(cqDone); !errors.Is(err, ErrPending) {
		t.Fatalf("CQ close with a QP: %v, want ErrPending", err)
	}
	if err := mr.Close(nil); err != nil {
		t.Fatal(err)
	}
	barrier(a)
	select {
	case <-pdCh:
		t.Fatal("PD close completed while its QP lives")
	default:
	}
	closeWait(t, "qp", qp.Close)
	if err := wait(t, "PD close", pdCh); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, "CQ close", cqCh); err != nil {
		t.Fatal(err)
	}
}

// LT9: after an antecedent's close the successors keep working (the close is
// a dereference until the last one goes), and nothing new is created on it.
func TestLT9ClosedAntecedentIsADereference(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	connect(t, cli, srv, 4104)
	pdDone, pdCh := cb()
	if err := cli.pd.Close(pdDone); !errors.Is(err, ErrPending) {
		t.Fatalf("PD close: %v", err)
	}
	if _, err := cli.pd.CreateMR(false, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("CreateMR on a closing PD: %v, want ErrClosed", err)
	}
	if err := srv.qp.Receive(1, []SGE{srv.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	copy(cli.buf, "still")
	if err := cli.qp.Send(2, []SGE{cli.mr.SGE(0, 5)}, 0); err != nil {
		t.Fatal(err)
	}
	if r := poll(t, srv.cq); r.Err() != nil || string(srv.buf[:5]) != "still" {
		t.Fatalf("send through a closing PD's QP: %+v", r)
	}
	poll(t, cli.cq)
	closeWait(t, "qp", cli.qp.Close)
	closeWait(t, "mr", cli.mr.Close)
	if err := wait(t, "PD close", pdCh); err != nil {
		t.Fatal(err)
	}
}

// LT10: an antecedent's close, the adapter's included, does not complete
// while a successor's close callback runs.
func TestLT10NoAntecedentCloseDuringSuccessorCallback(t *testing.T) {
	da, _ := memDevices(t)
	a, err := OpenAdapter(da)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := a.CreatePD(nil)
	cq, _ := a.CreateCQ(16, nil, nil)
	qp := createQP(t, pd, cq)
	pdDone, pdCh := cb()
	if err := pd.Close(pdDone); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	in, out := make(chan struct{}), make(chan struct{})
	var inCallback atomic.Bool
	err = qp.Close(func(error) {
		inCallback.Store(true)
		close(in)
		<-out
		inCallback.Store(false)
	})
	if !errors.Is(err, ErrPending) {
		t.Fatalf("QP close: %v", err)
	}
	wait(t, "QP close callback", in)
	if err := cq.Close(nil); !errors.Is(err, ErrPending) {
		t.Fatalf("CQ close while its QP's close callback runs: %v, want ErrPending", err)
	}
	adClosed := make(chan error, 1)
	go func() { adClosed <- a.Close() }()
	time.Sleep(20 * time.Millisecond) // give a wrong close the chance to complete
	select {
	case <-pdCh:
		t.Fatal("PD close completed while the QP's close callback runs")
	case <-adClosed:
		t.Fatal("adapter close returned while a close callback runs")
	default:
	}
	close(out)
	if err := wait(t, "PD close", pdCh); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, "adapter close", adClosed); err != nil {
		t.Fatal(err)
	}
	if inCallback.Load() {
		t.Fatal("adapter closed with a callback running")
	}
}

// LT11: closing the adapter from inside one of its callbacks is refused with
// ErrDeadlock, and the adapter stays usable.
func TestLT11AdapterCloseInsideCallback(t *testing.T) {
	da, _ := memDevices(t)
	s := newSide(t, da)
	got := make(chan error, 1)
	s.ad.queue(func() { got <- s.ad.Close() })
	if err := wait(t, "close from a callback", got); !errors.Is(err, ErrDeadlock) {
		t.Fatalf("adapter close from a callback: %v, want ErrDeadlock", err)
	}
	if _, err := s.ad.QueryAdapterInfo(); err != nil {
		t.Fatalf("adapter after the refused close: %v", err)
	}
	// A real callback: a QP's create completion.
	ch := make(chan error, 1)
	err := s.pd.CreateQP(QPOptions{ReceiveCQ: s.cq, InitiatorCQ: s.cq, ReceiveDepth: 1, InitiatorDepth: 1},
		func(q *QP, err error) {
			ch <- s.ad.Close()
			q.Close(nil)
		})
	if !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := wait(t, "create callback", ch); !errors.Is(err, ErrDeadlock) {
		t.Fatalf("adapter close from a create callback: %v", err)
	}
}

// LT12: adapter close blocks until every callback of every object has
// returned: here a CQ notification still running when the consumer closes
// everything and then the adapter.
func TestLT12AdapterCloseWaitsForCallbacks(t *testing.T) {
	da, _ := memDevices(t)
	a, err := OpenAdapter(da)
	if err != nil {
		t.Fatal(err)
	}
	in, out := make(chan struct{}), make(chan struct{})
	var running atomic.Bool
	cq, err := a.CreateCQ(16, func(error) {
		running.Store(true)
		close(in)
		<-out
		running.Store(false)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := a.CreatePD(nil)
	qp := createQP(t, pd, cq)
	mr, _ := pd.CreateMR(false, nil)
	if err := mr.Register(make([]byte, 64), AllowLocalWrite, nil); err != nil {
		t.Fatal(err)
	}
	if err := cq.Arm(NotifyAny); err != nil {
		t.Fatal(err)
	}
	if err := qp.Receive(1, []SGE{mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	qp.Flush() // the flushed receive fires the notification
	wait(t, "notification", in)
	for _, c := range []func(func(error)) error{qp.Close, mr.Close, cq.Close, pd.Close} {
		c(nil)
	}
	closed := make(chan bool, 1)
	go func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		closed <- running.Load()
	}()
	time.Sleep(20 * time.Millisecond) // give a wrong close the chance to return
	select {
	case <-closed:
		t.Fatal("adapter close returned while a notification callback runs")
	default:
	}
	close(out)
	if wait(t, "adapter close", closed) {
		t.Fatal("adapter close returned with the callback running")
	}
}
