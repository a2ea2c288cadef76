package ndk

import (
	"errors"
	"testing"
	"time"
)

// LT4: a connector's calls are safe concurrently with its Close. A call takes
// a hold, then c.mu; one that failed let go of its hold with c.mu still held,
// and when that was the last hold of a connector Close had marked closing,
// the release it ran took c.mu again: the goroutine deadlocked on itself and
// Close (and the adapter's Close) never completed. The test lines the two up
// in that window by holding c.mu.
func TestLT4DisconnectRacingClose(t *testing.T) {
	da, _ := memDevices(t)
	a, err := OpenAdapter(da)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.CreateConnector(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitNode := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			c.n.mu.Lock()
			ok := cond()
			c.n.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("waiting for %s", what)
			}
		}
	}
	c.mu.Lock()
	derr := make(chan error, 1)
	go func() { derr <- c.Disconnect(nil) }() // an idle connector: ErrState
	waitNode("Disconnect's hold", func() bool { return c.n.holds == 1 })
	cerr := make(chan error, 1)
	go func() { cerr <- c.Close(nil) }()
	waitNode("Close to mark it closing", func() bool { return c.n.st == stClosing })
	c.mu.Unlock()
	select {
	case err := <-derr:
		if !errors.Is(err, ErrState) {
			t.Fatalf("Disconnect of an idle connector: %v, want ErrState", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Disconnect never returned: it deadlocked on the connector's lock")
	}
	select {
	case <-cerr:
	case <-time.After(5 * time.Second):
		t.Fatal("Close never returned")
	}
	a.Close() // not deferred: after a deadlock above it would wait for ever
}
