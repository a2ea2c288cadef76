package nd

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil/leakcheck"
	"github.com/xrnic/xrnic/internal/testutil/memdev"
	"github.com/xrnic/xrnic/ndk"
	"github.com/xrnic/xrnic/verbs"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var (
	ipA = netip.MustParseAddr("192.0.2.31")
	ipB = netip.MustParseAddr("192.0.2.32")
)

func memDevices(t *testing.T) { memdev.Pair(t, ipA, ipB) }

func waitOv(t *testing.T, what string, ov *Overlapped) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a hang guard
	defer cancel()
	err := ov.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: the overlapped never completed", what)
	}
	return err
}

func notDone(t *testing.T, what string, ov *Overlapped) {
	t.Helper()
	select {
	case <-ov.Done():
		t.Fatalf("%s: the overlapped was used", what)
	default:
	}
}

// end is one side: adapter, CQ, QP, registered buffer.
type end struct {
	ad  *Adapter
	cq  *CompletionQueue
	qp  *QueuePair
	mr  *MemoryRegion
	buf []byte
}

func newEnd(t *testing.T, p *Provider, ip netip.Addr) *end {
	t.Helper()
	e := &end{buf: make([]byte, 4096)}
	var err error
	if e.ad, err = p.OpenAdapter(ip); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.ad.CreateCompletionQueue(16); err != nil {
		t.Fatal(err)
	}
	// ND6: synchronous creation, ready at once.
	if e.qp, err = e.ad.CreateQueuePair(ndk.QPOptions{ReceiveDepth: 8, InitiatorDepth: 8}, e.cq, e.cq); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.ad.CreateMemoryRegion(); err != nil {
		t.Fatal(err)
	}
	ov := NewOverlapped()
	if err := e.mr.Register(e.buf, ndk.AllowLocalWrite|ndk.AllowRemoteWrite, ov); err != nil {
		t.Fatal(err)
	}
	notDone(t, "Register's Success", ov) // ND3
	return e
}

func (e *end) close(t *testing.T) {
	for _, c := range []func() error{e.qp.Close, e.mr.Close, e.cq.Close, e.ad.Close} {
		if err := c(); err != nil {
			t.Error(err)
		}
	}
}

// TestND1to7 runs a connection through the overlapped model: a provider
// opened twice lists both addresses and opens adapters by address (ND2, ND7),
// objects are created synchronously (ND6), Success, Pending and errors keep
// their meaning (ND3), the CQ tells of a completion only after an explicit
// Notify (ND4), and every overlapped operation refuses a nil Overlapped (ND5).
func TestND1to7(t *testing.T) {
	memDevices(t)
	p1, p2 := OpenProvider(), OpenProvider()
	if CanUnloadNow() {
		t.Fatal("CanUnloadNow with two providers open (ND7)")
	}
	addrs := p1.QueryAddressList()
	if !containsAddr(addrs, ipA) || !containsAddr(addrs, ipB) {
		t.Fatalf("QueryAddressList %v lacks the devices' addresses (ND2)", addrs)
	}
	if _, err := p1.OpenAdapter(netip.MustParseAddr("198.51.100.1")); !errors.Is(err, verbs.ErrNotFound) {
		t.Fatalf("OpenAdapter of a foreign address: %v", err)
	}
	cli, srv := newEnd(t, p1, ipA), newEnd(t, p2, ipB)

	// ND5.
	for name, call := range map[string]func() error{
		"Notify":   func() error { return cli.cq.Notify(false, nil) },
		"Register": func() error { return cli.mr.Register(cli.buf, 0, nil) },
		"Connect": func() error {
			return (&Connector{a: cli.ad}).Connect(cli.qp, netip.AddrPort{}, netip.AddrPort{}, 0, 0, nil, nil)
		},
		"GetConnectionRequest": func() error { return (&Listener{}).GetConnectionRequest(&Connector{}, nil) },
		"Disconnect":           func() error { return (&Connector{}).Disconnect(nil) },
		// The rest of the overlapped operations: each refuses the nil at once,
		// whatever its object's state (ND5).
		"Deregister":       func() error { return cli.mr.Deregister(nil) },
		"CompleteConnect":  func() error { return (&Connector{a: cli.ad}).CompleteConnect(nil) },
		"Accept":           func() error { return (&Connector{a: cli.ad}).Accept(cli.qp, 0, 0, nil, nil) },
		"NotifyDisconnect": func() error { return (&Connector{a: cli.ad}).NotifyDisconnect(nil) },
		"SRQ Notify":       func() error { return (&SharedReceiveQueue{}).Notify(nil) },
	} {
		if err := call(); !errors.Is(err, ErrNoOverlapped) || !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%s with a nil Overlapped: %v (ND5)", name, err)
		}
	}

	l, err := srv.ad.CreateListener()
	if err != nil {
		t.Fatal(err)
	}
	lap := netip.AddrPortFrom(ipB, 4500)
	if err := l.Listen(lap); err != nil {
		t.Fatal(err)
	}
	sc, _ := srv.ad.CreateConnector()
	reqOv := NewOverlapped()
	if err := l.GetConnectionRequest(sc, reqOv); !errors.Is(err, ErrPending) {
		t.Fatalf("GetConnectionRequest: %v", err)
	}
	cc, _ := cli.ad.CreateConnector()
	// An error: no overlapped use (ND3).
	badOv := NewOverlapped()
	if err := cc.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), lap, 1, 1, make([]byte, 200), badOv); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Connect with too much private data: %v", err)
	}
	notDone(t, "a failed Connect", badOv)
	conOv := NewOverlapped()
	if err := cc.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), lap, 1, 1, []byte("nd"), conOv); !errors.Is(err, ErrPending) {
		t.Fatalf("Connect: %v", err)
	}
	if err := waitOv(t, "connection request", reqOv); err != nil {
		t.Fatal(err)
	}
	accOv := NewOverlapped()
	if err := sc.Accept(srv.qp, 1, 1, nil, accOv); !errors.Is(err, ErrPending) {
		t.Fatalf("Accept: %v", err)
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

	// ND4: a completion arrives; nothing tells the client until it asks.
	if err := srv.qp.Receive(1, []ndk.SGE{srv.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	copy(cli.buf, "overlapped")
	if err := cli.qp.Send(2, []ndk.SGE{cli.mr.SGE(0, 10)}, 0); err != nil {
		t.Fatal(err)
	}
	var rs [2]ndk.Result
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		if srv.cq.GetResults(rs[:1]) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if rs[0].Err() != nil || string(srv.buf[:10]) != "overlapped" {
		t.Fatalf("receive %+v %q", rs[0], srv.buf[:10])
	}
	// Several Notify requests may be pending; the next completion completes
	// them all, and one for any completion takes precedence over one for
	// solicited ones (IND2CompletionQueue::Notify): this receive is not
	// solicited.
	sov, nov := NewOverlapped(), NewOverlapped()
	if err := srv.cq.Notify(true, sov); !errors.Is(err, ErrPending) {
		t.Fatalf("Notify: %v", err)
	}
	if err := srv.cq.Notify(false, nov); !errors.Is(err, ErrPending) {
		t.Fatalf("a second Notify: %v", err)
	}
	notDone(t, "Notify before a completion", nov)
	srv.qp.Receive(3, []ndk.SGE{srv.mr.SGE(0, 64)})
	cli.qp.Send(4, []ndk.SGE{cli.mr.SGE(0, 10)}, 0)
	if err := waitOv(t, "Notify", nov); err != nil {
		t.Fatal(err)
	}
	if err := waitOv(t, "the solicited Notify pending with it", sov); err != nil {
		t.Fatal(err)
	}

	// Disconnect, notified explicitly on the other side.
	dov := NewOverlapped()
	if err := sc.NotifyDisconnect(dov); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	// A second while it is pending is refused: replacing it, the first would
	// never complete.
	if err := sc.NotifyDisconnect(NewOverlapped()); !errors.Is(err, ndk.ErrState) {
		t.Fatalf("a second NotifyDisconnect: %v, want ErrState", err)
	}
	cdov := NewOverlapped()
	if err := cc.Disconnect(cdov); !errors.Is(err, ErrPending) {
		t.Fatalf("Disconnect: %v", err)
	}
	if err := waitOv(t, "NotifyDisconnect", dov); err != nil {
		t.Fatal(err)
	}
	if err := sc.Disconnect(NewOverlapped()); err != nil {
		t.Fatalf("answering Disconnect: %v", err)
	}
	if err := waitOv(t, "Disconnect", cdov); err != nil {
		t.Fatal(err)
	}
	for _, c := range []func() error{cc.Close, sc.Close, l.Close} {
		if err := c(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cc.NotifyDisconnect(NewOverlapped()); !errors.Is(err, ndk.ErrClosed) {
		t.Fatalf("NotifyDisconnect on a closed connector: %v, want ErrClosed", err)
	}
	cli.close(t)
	srv.close(t)
	p1.Close()
	if CanUnloadNow() {
		t.Fatal("CanUnloadNow with a provider open")
	}
	p2.Close()
	if !CanUnloadNow() {
		t.Fatal("not CanUnloadNow with everything closed (ND7)")
	}

	// ND1: the objects, and extensions found at run time by type assertion.
	var qp any = cli.qp
	if _, ok := qp.(interface {
		Bind(uint64, *ndk.MR, *ndk.MW, uint64, uint64, ndk.Access, ndk.Flags) error
	}); !ok {
		t.Fatal("QueuePair does not offer Bind")
	}
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// TestND4NoCallbackParameters: no exported function or method of the package
// takes a function: the provider has no way to call into the client (ND4).
func TestND4NoCallbackParameters(t *testing.T) {
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, "nd.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || !fd.Name.IsExported() {
			continue
		}
		n++
		for _, p := range fd.Type.Params.List {
			if _, isFunc := p.Type.(*ast.FuncType); isFunc {
				t.Errorf("%s takes a callback", fd.Name.Name)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d exported functions found", n)
	}
	// The exported struct types hold no exported func fields either.
	for _, v := range []any{Overlapped{}, Provider{}, Adapter{}, CompletionQueue{}, MemoryRegion{}, Connector{}, Listener{}} {
		ty := reflect.TypeOf(v)
		for i := range ty.NumField() {
			if f := ty.Field(i); f.IsExported() && f.Type.Kind() == reflect.Func {
				t.Errorf("%s.%s is a callback", ty.Name(), f.Name)
			}
		}
	}
}
