package nd

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xrnic/xrnic/ndk"
)

// TestND1SharedReceiveQueue: ND1 names IND2SharedReceiveQueue among the
// objects, made by IND2Adapter::CreateSharedReceiveQueue, with queue pairs
// from CreateQueuePairWithSrq taking their receives from it. Creation is
// synchronous (ND6), Notify refuses a nil Overlapped (ND5), and the
// notification is one the client asked for (ND4): the Overlapped of Notify
// completes once fewer receives than the threshold are posted, not before.
func TestND1SharedReceiveQueue(t *testing.T) {
	memDevices(t)
	p := OpenProvider()
	defer p.Close()
	cli, srv := newEnd(t, p, ipA), newEnd(t, p, ipB)
	srq, err := srv.ad.CreateSharedReceiveQueue(16, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	sqp, err := srv.ad.CreateQueuePairWithSrq(ndk.QPOptions{InitiatorDepth: 4}, srv.cq, srv.cq, srq)
	if err != nil {
		t.Fatal(err)
	}
	if err := srq.Notify(nil); !errors.Is(err, ErrNoOverlapped) {
		t.Fatalf("Notify with a nil Overlapped: %v (ND5)", err)
	}

	l, err := srv.ad.CreateListener()
	if err != nil {
		t.Fatal(err)
	}
	lap := netip.AddrPortFrom(ipB, 4510)
	if err := l.Listen(lap); err != nil {
		t.Fatal(err)
	}
	sc, _ := srv.ad.CreateConnector()
	reqOv := NewOverlapped()
	if err := l.GetConnectionRequest(sc, reqOv); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	cc, _ := cli.ad.CreateConnector()
	conOv := NewOverlapped()
	if err := cc.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), lap, 1, 1, nil, conOv); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := waitOv(t, "connection request", reqOv); err != nil {
		t.Fatal(err)
	}
	accOv := NewOverlapped()
	if err := sc.Accept(sqp, 1, 1, nil, accOv); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := waitOv(t, "Connect", conOv); err != nil {
		t.Fatal(err)
	}
	if err := cc.CompleteConnect(NewOverlapped()); err != nil {
		t.Fatal(err)
	}
	if err := waitOv(t, "Accept", accOv); err != nil {
		t.Fatal(err)
	}

	for i := range 4 {
		if err := srq.Receive(uint64(i), []ndk.SGE{srv.mr.SGE(uint64(64*i), 64)}); err != nil {
			t.Fatal(err)
		}
	}
	// Two Notify requests pending, both completed by the one event; a
	// Modify with threshold 0 keeps the threshold and its arming
	// (IND2SharedReceiveQueue::Notify, ::Modify).
	nov, nov2 := NewOverlapped(), NewOverlapped()
	if err := srq.Notify(nov); !errors.Is(err, ErrPending) {
		t.Fatalf("Notify: %v, want ErrPending", err)
	}
	if err := srq.Notify(nov2); !errors.Is(err, ErrPending) {
		t.Fatalf("a second Notify: %v, want ErrPending", err)
	}
	if err := srq.Modify(0, 0); err != nil {
		t.Fatal(err)
	}
	consume := func(n int) {
		t.Helper()
		for i := range n {
			if err := cli.qp.Send(uint64(100+i), []ndk.SGE{cli.mr.SGE(0, 8)}, 0); err != nil {
				t.Fatal(err)
			}
		}
		var rs [1]ndk.Result
		for got, end := 0, time.Now().Add(20*time.Second); got < n; {
			if srv.cq.GetResults(rs[:]) == 1 {
				if rs[0].Err() != nil || rs[0].Type != ndk.OpReceive || rs[0].QP != sqp.QP {
					t.Fatalf("receive through the SRQ: %+v", rs[0])
				}
				got++
				continue
			}
			if time.Now().After(end) {
				t.Fatalf("%d of %d receives through the SRQ", got, n)
			}
			time.Sleep(time.Millisecond)
		}
		for drained, end := 0, time.Now().Add(20*time.Second); drained < n; {
			if cli.cq.GetResults(rs[:]) == 1 {
				drained++
				continue
			}
			if time.Now().After(end) {
				t.Fatalf("%d of %d send completions", drained, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	consume(2) // two left: not below the threshold
	time.Sleep(10 * time.Millisecond)
	notDone(t, "Notify with the threshold not crossed", nov)
	consume(1) // one left
	if err := waitOv(t, "SRQ Notify", nov); err != nil {
		t.Fatalf("SRQ Notify completed with %v", err)
	}
	if err := waitOv(t, "the SRQ Notify pending with it", nov2); err != nil {
		t.Fatalf("SRQ Notify completed with %v", err)
	}

	// A Notify pending at Close completes, cancelled (its threshold still
	// the first one's: the Modify kept it).
	last := NewOverlapped()
	if err := srq.Notify(last); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	dov := NewOverlapped()
	if err := cc.Disconnect(dov); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := sc.Disconnect(NewOverlapped()); err != nil && !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	waitOv(t, "Disconnect", dov)
	for _, c := range []func() error{cc.Close, sc.Close, l.Close, sqp.Close, srq.Close} {
		if err := c(); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitOv(t, "Notify at Close", last); !errors.Is(err, ndk.ErrCanceled) {
		t.Fatalf("a Notify pending at Close: %v, want ErrCanceled", err)
	}
	cli.close(t)
	srv.close(t)
}
