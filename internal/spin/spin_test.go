package spin

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
)

// A run of Every empty looks yields once; a look that finds something starts
// the run again.
func TestCounterYieldsEveryNthOfARun(t *testing.T) {
	real := yield
	defer func() { yield = real }()
	calls := 0
	yield = func() { calls++ }
	var c Counter
	for range 3*Every - 1 {
		c.Idle()
	}
	if calls != 2 || c.Yields() != 2 {
		t.Fatalf("%d empty looks: %d yields, Yields() %d; want 2", 3*Every-1, calls, c.Yields())
	}
	c.Found()
	for range Every - 1 {
		c.Idle()
	}
	if calls != 2 {
		t.Fatalf("%d empty looks after a found one yielded: %d yields, want 2", Every-1, calls)
	}
	c.Idle()
	if calls != 3 || c.Yields() != 3 {
		t.Fatalf("a run of %d empty looks: %d yields, Yields() %d; want 3", Every, calls, c.Yields())
	}
	real() // the system call itself returns, with or without another thread to run
}

// TestYieldIsRaw: Yield's sched_yield is a raw system call, so that Go's
// sysmon does not take the spinning goroutine's P and then wake every 20 us
// (yield's comment). A yield through syscall.Syscall fails it.
func TestYieldIsRaw(t *testing.T) {
	if share := testutil.InSyscallShare(200*time.Millisecond, Yield); share > 0.2 {
		t.Errorf("a loop of Yield was in a system call in %.0f%% of the samples, want none", 100*share)
	}
}
