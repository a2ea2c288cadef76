package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing -i"},
		{[]string{"-i", "veth0", "--bogus"}, "unknown flag"},
		{[]string{"-i", "veth0", "--link", "carrier-pigeon"}, "unknown --link"},
		{[]string{"-i", "veth0", "--link", "memory"}, "unknown --link"},
		{[]string{"-i", "veth0", "--xdp-mode", "turbo"}, "unknown --xdp-mode"},
		{[]string{"-i", "veth0", "extra"}, "unexpected argument"},
		{[]string{"-i", "veth0", "--interval", "-1s"}, "negative"},
	} {
		_, err := parse(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	c, err := parse([]string{"-i", "veth0", "--link", "udp", "--interval", "0"})
	if err != nil || c.kind != link.KindUDP || c.iface != "veth0" {
		t.Errorf("parse = %+v, %v", c, err)
	}
}

func TestMissingInterface(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-i", "nosuch0", "--link", "udp"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("run on a missing interface = %v", err)
	}
}

// TestDaemonOnVeth runs the daemon in one namespace of a veth pair, sends RoCEv2
// frames (one with a broken ICRC) from the other, stops it as SIGTERM would, and
// checks its counts and that no XDP program stays attached.
func TestDaemonOnVeth(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	var runErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = p.A.Do(func() error {
			return run(ctx, []string{"-i", p.A.Name, "--interval", "50ms"}, &out, &errOut)
		})
	}()
	// Wait until the link is open (the daemon says so), then send.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errOut.String(), "link") {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("daemon never attached: %v %s", runErr, errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var tx link.Link
	if err := p.B.Do(func() (err error) {
		tx, err = link.NewUDP(link.UDPOptions{Interface: p.B.Name})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	var frames [][]byte
	for i := 0; i < 5; i++ {
		f, err := testenv.RoCESendOnly(&p.B, &p.A, false, uint32(i), []byte(fmt.Sprint("hello ", i)))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	frames[4][len(frames[4])-1] ^= 0xff // break the ICRC of the last one
	if n, err := tx.WriteBatch(frames); n != 5 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	// The daemon prints its counts every 50ms; stop it once all five are in.
	for !strings.Contains(out.String(), ": 5 frames") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("run: %v (stderr %s)", runErr, errOut.String())
	}
	if !strings.Contains(errOut.String(), "AF_XDP link") {
		t.Errorf("stderr does not say which link: %q", errOut.String())
	}
	want := []string{"af_xdp link on " + p.A.Name + ": 5 frames", "0 malformed, 1 bad ICRC", wire.RCSendOnly.String()}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	if xdpAttached(t, &p.A) {
		t.Errorf("XDP program left attached after the daemon stopped")
	}
}

func xdpAttached(t *testing.T, e *testenv.Endpoint) bool {
	t.Helper()
	var on bool
	if err := e.Do(func() error {
		l, err := netlink.LinkByName(e.Name)
		if err != nil {
			return err
		}
		on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return on
}

// syncBuffer is a bytes.Buffer the daemon writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
