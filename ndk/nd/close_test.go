package nd

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xrnic/xrnic/ndk"
)

// EP6, EP7: a connection request whose connect event is queued when the
// listener's Close runs is refused, not left waiting: left, it held the
// ndk listener's close, and Close hung for ever.
func TestEP7ListenerCloseRacingRequest(t *testing.T) {
	memDevices(t)
	p := OpenProvider()
	defer p.Close()
	cli, srv := newEnd(t, p, ipA), newEnd(t, p, ipB)
	l, err := srv.ad.CreateListener()
	if err != nil {
		t.Fatal(err)
	}
	lap := netip.AddrPortFrom(ipB, 4590)
	if err := l.Listen(lap); err != nil {
		t.Fatal(err)
	}
	// Hold the server adapter's callback goroutine with a create completion,
	// so that the request's connect event waits behind it.
	pd, err := srv.ad.pd()
	if err != nil {
		t.Fatal(err)
	}
	block, in := make(chan struct{}), make(chan struct{})
	qch := make(chan *ndk.QP, 1)
	if err := pd.CreateQP(ndk.QPOptions{ReceiveCQ: srv.cq.cq, InitiatorCQ: srv.cq.cq, ReceiveDepth: 1, InitiatorDepth: 1},
		func(q *ndk.QP, err error) { close(in); <-block; qch <- q }); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	<-in
	cc, _ := cli.ad.CreateConnector()
	conOv := NewOverlapped()
	if err := cc.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), lap, 1, 1, nil, conOv); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the REQ arrives; its connect event waits behind the block
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	time.Sleep(200 * time.Millisecond) // Close has taken the (empty) lists and waits
	close(block)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		l.mu.Lock()
		w := append([]*ndk.Connector(nil), l.waiting...)
		l.mu.Unlock()
		for _, nc := range w { // rescue, so that the test ends
			nc.Reject(nil)
			ndk.Await(nc.Close)
		}
		<-closed
		t.Fatalf("Listener.Close hung: %d requests left waiting after it had started", len(w))
	}
	ndk.Await((<-qch).Close)
	waitOv(t, "client connect", conOv)
	cc.Close()
	cli.close(t)
	srv.close(t)
}

// LT14, EP6: a connector closed while its GetConnectionRequest is pending gets
// that request's Overlapped completed once, with ErrCanceled, and no request
// after: the next one waits for the next ask. Before, the closed connector was
// handed it (the Overlapped completed again, with success), and the ndk
// connector nobody would close held the listener's close for ever.
func TestLT14ClosedConnectorGetsNoRequest(t *testing.T) {
	memDevices(t)
	p := OpenProvider()
	defer p.Close()
	cli, srv := newEnd(t, p, ipA), newEnd(t, p, ipB)
	l, _ := srv.ad.CreateListener()
	lap := netip.AddrPortFrom(ipB, 4591)
	if err := l.Listen(lap); err != nil {
		t.Fatal(err)
	}
	sc, _ := srv.ad.CreateConnector()
	reqOv := NewOverlapped()
	if err := l.GetConnectionRequest(sc, reqOv); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := sc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitOv(t, "the closed connector's request", reqOv); !errors.Is(err, ndk.ErrCanceled) {
		t.Fatalf("the request of a closed connector: %v, want ErrCanceled", err)
	}
	cc, _ := cli.ad.CreateConnector()
	conOv := NewOverlapped()
	if err := cc.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), lap, 1, 1, nil, conOv); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the request reaches the listener
	sc.mu.Lock()
	got := sc.c
	sc.mu.Unlock()
	if got != nil {
		t.Fatal("a closed connector was handed a connection request")
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Listener.Close hung")
	}
	waitOv(t, "client connect", conOv)
	cc.Close()
	cli.close(t)
	srv.close(t)
}
