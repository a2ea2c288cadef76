package ndk

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil/leakcheck"
	"github.com/xrnic/xrnic/internal/testutil/memdev"
	"github.com/xrnic/xrnic/verbs"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var (
	ipA = netip.MustParseAddr("192.0.2.21")
	ipB = netip.MustParseAddr("192.0.2.22")
)

// hang bounds every wait of the tests: a guard against hanging, not a timing.
const hang = 20 * time.Second

// memDevices opens two devices over a memory link, with GIDs ipA and ipB.
func memDevices(t testing.TB) (a, b *verbs.Device) { return memdev.Pair(t, ipA, ipB) }

func openAdapter(t testing.TB, d *verbs.Device) *Adapter {
	t.Helper()
	a, err := OpenAdapter(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A test that failed may have left objects open, and adapter close
		// waits for them (LT12): do not hang on top of the failure.
		closed := make(chan error, 1)
		go func() { closed <- a.Close() }()
		select {
		case err := <-closed:
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("adapter close: %v", err)
			}
		case <-time.After(hang):
			t.Error("adapter close blocked: objects left open")
		}
	})
	return a
}

// result is a completion callback's report.
type result[T any] struct {
	v   T
	err error
}

// cb returns a completion callback and the channel it reports on.
func cb() (func(error), chan error) {
	ch := make(chan error, 1)
	return func(err error) { ch <- err }, ch
}

func wait[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hang):
		t.Fatalf("%s: no completion", what)
	}
	var z T
	return z
}

// closeWait closes an object and waits for its completion, whichever way it comes.
func closeWait(t testing.TB, what string, close func(func(error)) error) error {
	t.Helper()
	done, ch := cb()
	err := close(done)
	if errors.Is(err, ErrPending) {
		return wait(t, what+" close", ch)
	}
	return err
}

// side is one end of a connection: adapter, PD, CQ, QP and a registered buffer.
type side struct {
	ad  *Adapter
	pd  *PD
	cq  *CQ
	qp  *QP
	mr  *MR
	buf []byte
}

func newSide(t testing.TB, d *verbs.Device) *side {
	t.Helper()
	s := &side{ad: openAdapter(t, d)}
	var err error
	if s.pd, err = s.ad.CreatePD(nil); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = s.ad.CreateCQ(64, nil, nil); err != nil {
		t.Fatal(err)
	}
	s.qp = createQP(t, s.pd, s.cq)
	if s.mr, err = s.pd.CreateMR(false, nil); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, 1<<16)
	if err := s.mr.Register(s.buf, AllowLocalWrite|AllowRemoteRead|AllowRemoteWrite, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.closeAll(t) })
	return s
}

// closeAll closes the side's objects, successors first.
func (s *side) closeAll(t testing.TB) {
	t.Helper()
	for _, c := range []struct {
		what  string
		close func(func(error)) error
	}{{"qp", s.qp.Close}, {"mr", s.mr.Close}, {"cq", s.cq.Close}, {"pd", s.pd.Close}} {
		if err := closeWait(t, c.what, c.close); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("%s close: %v", c.what, err)
		}
	}
}

func createQP(t testing.TB, pd *PD, c *CQ) *QP {
	t.Helper()
	ch := make(chan result[*QP], 1)
	err := pd.CreateQP(QPOptions{ReceiveCQ: c, InitiatorCQ: c, ReceiveDepth: 32, InitiatorDepth: 32,
		MaxReceiveSGE: 2, MaxInitiatorSGE: 2, InlineDataSize: 64}, func(q *QP, err error) { ch <- result[*QP]{q, err} })
	if !errors.Is(err, ErrPending) {
		t.Fatalf("CreateQP: %v, want ErrPending", err)
	}
	r := wait(t, "CreateQP", ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

// poll waits for one result on c.
func poll(t testing.TB, c *CQ) Result {
	t.Helper()
	var rs [1]Result
	end := time.Now().Add(hang)
	for time.Now().Before(end) {
		if c.GetResults(rs[:]) == 1 {
			return rs[0]
		}
		time.Sleep(50 * time.Microsecond)
	}
	t.Fatal("no result")
	return Result{}
}

// connected is a connection between two sides, made through a listener.
type connected struct {
	cli, srv  *side
	cc, sc    *Connector
	lst       *Listener
	srvDiscon chan struct{}
	cliDiscon chan struct{}
}

// connect listens on srv at port and connects cli to it, both sides done.
func connect(t testing.TB, cli, srv *side, port uint16) *connected {
	t.Helper()
	x := &connected{cli: cli, srv: srv, srvDiscon: make(chan struct{}, 1), cliDiscon: make(chan struct{}, 1)}
	accepted := make(chan error, 1)
	var err error
	x.lst, err = srv.ad.CreateListener(func(c *Connector) {
		x.sc = c
		c.SetDisconnectEvent(func() { x.srvDiscon <- struct{}{} })
		if _, _, p, err := c.GetConnectionData(); err != nil || !bytes.HasPrefix(p, []byte("hello")) {
			t.Errorf("connection data %q %v", p, err)
		}
		if err := c.Accept(srv.qp, 4, 4, []byte("welcome"), func(err error) { accepted <- err }); !errors.Is(err, ErrPending) {
			accepted <- err
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.lst.Listen(netip.AddrPortFrom(ipv4(t, srv), port), nil); err != nil {
		t.Fatal(err)
	}
	x.cc, err = cli.ad.CreateConnector(func() { x.cliDiscon <- struct{}{} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, ch := cb()
	src := netip.AddrPortFrom(ipv4(t, cli), 0)
	dst := netip.AddrPortFrom(ipv4(t, srv), port)
	if err := x.cc.Connect(cli.qp, src, dst, 4, 4, []byte("hello"), done); !errors.Is(err, ErrPending) {
		t.Fatalf("Connect: %v", err)
	}
	if err := wait(t, "Connect", ch); err != nil {
		t.Fatalf("Connect completed with %v", err)
	}
	if _, _, p, err := x.cc.GetConnectionData(); err != nil || !bytes.HasPrefix(p, []byte("welcome")) {
		t.Fatalf("connection data %q %v", p, err)
	}
	if err := x.cc.CompleteConnect(nil); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, "Accept", accepted); err != nil {
		t.Fatalf("Accept completed with %v", err)
	}
	t.Cleanup(func() {
		closeWait(t, "client connector", x.cc.Close)
		if x.sc != nil {
			closeWait(t, "server connector", x.sc.Close)
		}
		closeWait(t, "listener", x.lst.Close)
	})
	return x
}

// ipv4 is the side's first IPv4 address.
func ipv4(t testing.TB, s *side) netip.Addr {
	t.Helper()
	for _, g := range s.ad.dev.GIDs() {
		if g.Addr().Is4() {
			return g.Addr()
		}
	}
	t.Fatal("no IPv4 GID")
	return netip.Addr{}
}
