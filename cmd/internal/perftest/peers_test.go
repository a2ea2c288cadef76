package perftest

import (
	"context"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/oob"
	"github.com/xrnic/xrnic/internal/testutil"
)

// runPair runs a server with srv's arguments against a client with cli's
// (another test, or the same with other options) over lo, and returns both
// outputs and errors.
func runPair(t *testing.T, srv, cli []string) (sout, cout string, serr, cerr error) {
	t.Helper()
	sa, ca := netip.MustParseAddr("127.0.0.15"), netip.MustParseAddr("127.0.0.16")
	ds, closeS := openSide(t, sa)
	dc, closeC := openSide(t, ca)
	ln, err := net.Listen("tcp", "127.0.0.15:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	sp := mustParse(t, srv[0], append([]string{"-d", "lo", "-p", port}, srv[1:]...)...)
	cp := mustParse(t, cli[0], append([]string{"-d", "lo", "127.0.0.15", "-p", port}, cli[1:]...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	sch := make(chan error, 1)
	var so, co testutil.SyncBuffer
	go func() {
		c, err := oob.Accept(ctx, ln)
		ln.Close()
		if err != nil {
			closeS()
			sch <- err
			return
		}
		conn := NewConn(c, false)
		conn.Timeout = 3 * time.Second // a mismatch waits for a handshake that never comes
		sch <- runConn(ctx, sp, &so, io.Discard, ds, closeS, "lo", conn)
	}()
	c, err := oob.Dial(ctx, ln.Addr().String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := NewConn(c, true)
	conn.Timeout = 3 * time.Second
	cerr = runConn(ctx, cp, &co, io.Discard, dc, closeC, "lo", conn)
	serr = <-sch
	return so.String(), co.String(), serr, cerr
}

// TestMismatchedPeers: a peer running another test or connection type fails
// the run with one line that says so may be the cause.
func TestMismatchedPeers(t *testing.T) {
	for _, c := range []struct{ srv, cli []string }{
		{[]string{"send_bw", "-n", "50"}, []string{"write_bw", "-n", "50"}},
		{[]string{"write_bw", "-n", "50"}, []string{"read_bw", "-n", "50"}},
		{[]string{"write_lat", "-n", "50"}, []string{"write_bw", "-n", "50"}},
		{[]string{"send_bw", "-n", "50", "-c", "UD"}, []string{"send_bw", "-n", "50"}},
	} {
		_, _, serr, cerr := runPair(t, c.srv, c.cli)
		t.Logf("server %s, client %s:\n server: %v\n client: %v", c.srv[0], c.cli[0], serr, cerr)
		for side, err := range map[string]error{"server": serr, "client": cerr} {
			if err == nil || !strings.Contains(err.Error(), "is the other side running") || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s of a mismatched pair: %v, want one line naming the possible mismatch", side, err)
			}
		}
	}
}

// TestLateReceiver: a SEND receiver that starts polling after every message
// arrived (a loaded host) times the run from the last handshake, not from a
// first receive it found already there: its bandwidth stays what the wire
// could carry instead of the speed of polling a full CQ.
func TestLateReceiver(t *testing.T) {
	serverLate = func() { time.Sleep(300 * time.Millisecond) }
	defer func() { serverLate = nil }()
	sout, cout, serr, cerr := runPair(t, []string{"send_bw", "-c", "UD", "-n", "200", "-s", "1024"},
		[]string{"send_bw", "-c", "UD", "-n", "200", "-s", "1024"})
	if serr != nil || cerr != nil {
		t.Fatalf("server: %v\n%s\nclient: %v\n%s", serr, sout, cerr, cout)
	}
	m := regexp.MustCompile(`(?m)^ 1024 +200 +[\d.]+ +([\d.]+)`).FindStringSubmatch(sout)
	if m == nil {
		t.Fatalf("server printed no result:\n%s", sout)
	}
	// 200 KiB in at least the 300 ms the server slept: under 1 MB/s.
	if avg, _ := strconv.ParseFloat(m[1], 64); avg <= 0 || avg > 1 {
		t.Errorf("a late receiver reports %v MB/s for 200 KiB that took at least 300 ms", avg)
	}
}
