package o2ib

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil/leakcheck"
	"github.com/xrnic/xrnic/internal/testutil/memdev"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var (
	ipA = netip.MustParseAddr("192.0.2.41")
	ipB = netip.MustParseAddr("192.0.2.42")
)

// hang bounds every wait: a guard against hanging, not a timing.
const hang = 20 * time.Second

// pair opens an NI on each of two memory-linked devices, B listening on port.
func pair(t *testing.T, port uint16, cfg Config) (a, b *NI) {
	t.Helper()
	da, db := memdev.Pair(t, ipA, ipB)
	var err error
	if b, err = New(db, netip.AddrPortFrom(ipB, port), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNI(t, b) })
	if a, err = New(da, netip.AddrPortFrom(ipA, port), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNI(t, a) })
	return a, b
}

// closeNI closes ni, but does not hang a test that already failed (and may
// have left a count above zero) for ever.
func closeNI(t *testing.T, ni *NI) {
	done := make(chan struct{})
	go func() { ni.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(hang):
		t.Errorf("NI close blocked: %d connections never freed", ni.Conns())
	}
}

func dial(t *testing.T, a *NI, port uint16) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	c, err := a.Connect(ctx, netip.AddrPortFrom(ipB, port))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func recvMsg(t *testing.T, ni *NI) Message {
	t.Helper()
	select {
	case m := <-ni.Recv():
		return m
	case <-time.After(hang):
		t.Fatal("no message")
	}
	return Message{}
}

func waitErr(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(hang):
		t.Fatalf("%s: no completion", what)
	}
	return nil
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// TestPutGet: an inline message, a PUT by RDMA WRITE and a GET by RDMA READ,
// each checked byte for byte; then both NIs close and every connection is
// freed with its count at zero.
func TestPutGet(t *testing.T) {
	obj := pattern(300_000, 9)
	cfg := Config{OnGet: func(key uint64, n int) []byte {
		if key == 77 && n == len(obj) {
			return obj
		}
		return nil
	}}
	a, b := pair(t, 4700, cfg)
	c := dial(t, a, 4700)
	for _, n := range []int{1, 100, 4096 - hdrLen, 4096 - hdrLen + 1, 1 << 20} {
		data := pattern(n, byte(n))
		done := make(chan error, 1)
		if err := c.Put(data, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := waitErr(t, "put", done); err != nil {
			t.Fatalf("put of %d: %v", n, err)
		}
		if m := recvMsg(t, b); !bytes.Equal(m.Data, data) {
			t.Fatalf("put of %d: received %d bytes, not the same", n, len(m.Data))
		}
	}
	got := make(chan []byte, 1)
	into := make([]byte, len(obj))
	if err := c.Get(77, into, func(d []byte, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- d
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if !bytes.Equal(d, obj) {
			t.Fatal("GET: the bytes differ")
		}
	case <-time.After(hang):
		t.Fatal("GET: no completion")
	}
	refused := make(chan error, 1)
	c.Get(78, make([]byte, 10), func(_ []byte, err error) { refused <- err })
	if err := waitErr(t, "get of nothing", refused); !errors.Is(err, ErrRefused) {
		t.Fatalf("GET of a key the peer does not serve: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(hang); b.Conns() > 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
	}
	if a.Conns() != 0 || b.Conns() != 0 || c.Refs() != 0 {
		t.Fatalf("connections left: %d and %d; the client's count %d", a.Conns(), b.Conns(), c.Refs())
	}
}
