package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xrnic/xrnic/cmd/internal/perftest"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// dialBench opens a TCP connection from B's namespace to the daemon's bench
// server on A.
func dialBench(t *testing.T, p *testenv.Pair, port int) net.Conn {
	t.Helper()
	var c net.Conn
	if err := p.B.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(p.A.IPv4.String(), strconv.Itoa(port)), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer waits (up to guard) for the server to close c, reading and
// dropping what it sends.
func closedByServer(c net.Conn, guard time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(guard))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF: the server closed it
}

// TestBenchServerHostileClients plays the clients the review played against
// the daemon's bench server, which serves anyone who reaches it:
//   - idle connections: one source holds at most maxPerSource sessions (the
//     next is turned away at once), and each idle one is closed once its first
//     exchange has waited benchExchangeTimeout (before: 30 s, and 64 of them
//     held every slot);
//   - a client that announces a 1 GiB cycle buffer (before: the server mapped
//     and filled 2 GiB per session) is refused before any memory is taken;
//   - a client whose QP announces a GID that is not its own address (before:
//     the server sent its traffic wherever the client said) is refused;
//   - a session that runs past --bench-session-limit is ended;
//   - the server listens on the interface's own address only, not on every
//     address of the host.
func TestBenchServerHostileClients(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	// The third host's address, on B's own interface: a GID the client can
	// announce from its device's GID table.
	third := netip.MustParseAddr("192.0.2.199")
	if err := p.B.Do(func() error {
		l, err := netlink.LinkByName(p.B.Name)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(l, &netlink.Addr{IPNet: netlink.NewIPNet(third.AsSlice())})
	}); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, p, "--bench-session-limit", "8s") // longer than benchExchangeTimeout
	port := perftest.DefaultPort

	t.Run("idle connections", func(t *testing.T) {
		idle := make([]net.Conn, maxPerSource)
		for i := range idle {
			idle[i] = dialBench(t, p, port)
		}
		// The daemon lists each before taking the next; the one past the
		// bound is closed at once.
		extra := dialBench(t, p, port)
		if !closedByServer(extra, benchExchangeTimeout/2) {
			t.Fatalf("connection %d from one source was not turned away at once", maxPerSource+1)
		}
		for i, c := range idle {
			if !closedByServer(c, 3*benchExchangeTimeout) {
				t.Fatalf("idle connection %d still open after %v", i, 3*benchExchangeTimeout)
			}
		}
		if e := d.errOut.String(); !strings.Contains(e, "sessions from "+p.B.IPv4.String()+" are running") ||
			!strings.Contains(e, "did not answer within "+benchExchangeTimeout.String()) {
			t.Errorf("the daemon's log does not say why:\n%s", e)
		}
	})

	t.Run("cycle buffer", func(t *testing.T) {
		c := perftest.NewConn(dialBench(t, p, port), true)
		if _, _, err := c.XchgVersions(perftest.Version); err != nil {
			t.Fatal(err)
		}
		_, _, err := c.XchgSysData(1<<30, 64)
		if err == nil {
			// The server answered with its own values; it must then end the session.
			_, err = c.XchgMTU(1024)
		}
		if err == nil {
			t.Fatal("the server went on with a 1 GiB cycle buffer")
		}
		if !waitLog(d, "sent cycle buffer 1073741824") {
			t.Errorf("the daemon's log does not name the refused cycle buffer:\n%s", d.errOut.String())
		}
	})

	t.Run("foreign GID", func(t *testing.T) {
		dev := clientDevice(t, p)
		x := -1
		for i, g := range dev.QueryPort().GIDs {
			if g.Addr() == third {
				x = i
			}
		}
		if x < 0 {
			t.Fatalf("the client device has no GID for %v: %v", third, dev.QueryPort().GIDs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var out testutil.SyncBuffer
		err := wait(t, "client", client(t, ctx, p, dev, &out, "write_bw", "-n", "100", "-x", strconv.Itoa(x)))
		if err == nil {
			t.Fatalf("a client announcing %v from %v was served:\n%s", third, p.B.IPv4, out.String())
		}
		if !waitLog(d, "announced GID "+third.String()+" for QP 0: not its own address") {
			t.Errorf("the daemon's log does not name the foreign GID:\n%s", d.errOut.String())
		}
	})

	t.Run("session limit", func(t *testing.T) {
		dev := clientDevice(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var out testutil.SyncBuffer
		err := wait(t, "client", client(t, ctx, p, dev, &out, "write_bw", "-s", "4096", "-D", "20"))
		if err == nil || !errors.Is(err, perftest.ErrPeer) {
			t.Errorf("a 20 s client of a daemon with an 8 s session limit: %v", err)
		}
		if !waitLog(d, "ended after --bench-session-limit 8s") {
			t.Errorf("the daemon's log does not say the session was ended:\n%s", d.errOut.String())
		}
	})

	t.Run("listen address", func(t *testing.T) {
		err := p.A.Do(func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			t.Fatal("the bench server answers on 127.0.0.1: it listens on every address")
		}
	})
}

// waitLog waits (up to 15 s, a guard) for the daemon's log to contain s.
func waitLog(d *testDaemon, s string) bool {
	_, ok := d.errOut.WaitFor(s, 15*time.Second)
	return ok
}
