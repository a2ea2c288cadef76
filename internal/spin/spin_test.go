package spin

import "testing"

func TestCounterYieldsEveryNth(t *testing.T) {
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
	c.Idle()
	if calls != 3 || c.Yields() != 3 {
		t.Fatalf("%d empty looks: %d yields, Yields() %d; want 3", 3*Every, calls, c.Yields())
	}
	real() // the system call itself returns, with or without another thread to run
}
