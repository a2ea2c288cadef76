// Goroutine leak check for the package tests, and helpers shared by them.

package cq

import (
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// watchdog is the generous deadline of the tests that wait for another
// goroutine. It bounds a hang, it does not measure speed.
const watchdog = 30 * time.Second

// mustNew creates a CQ and closes it (and waits for its dispatcher) at cleanup.
func mustNew(t testing.TB, cqe int, opts Options) *CQ {
	t.Helper()
	c, err := New(cqe, opts)
	if err != nil {
		t.Fatalf("New(%d): %v", cqe, err)
	}
	t.Cleanup(func() { closeAndWait(t, c) })
	return c
}

// closeAndWait closes c unless it is closed already, acknowledging its events
// first, and waits until its dispatcher has finished.
func closeAndWait(t testing.TB, c *CQ) {
	t.Helper()
	if n := c.UnackedEvents(); n > 0 {
		c.AckEvents(n)
	}
	_ = c.Close()
	select {
	case <-c.Done():
	case <-time.After(watchdog):
		t.Errorf("CQ dispatcher did not stop within %v", watchdog)
	}
}

// stacks returns every goroutine's stack, for watchdog failures.
func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
