package testenv

import "testing"

func TestOwnerPID(t *testing.T) {
	for _, c := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"xr-1234-7", 1234, true},
		{"xr-1234-7-TestFoo-a", 1234, true},
		{"xr-0-1", 0, false},
		{"xr-abc-1", 0, false},
		{"xr-1234", 0, false},
		{"xrnic", 0, false},
		{"other-1234-1", 0, false},
	} {
		pid, ok := ownerPID(c.name)
		if pid != c.pid && c.ok || ok != c.ok {
			t.Errorf("ownerPID(%q) = %d, %v; want %d, %v", c.name, pid, ok, c.pid, c.ok)
		}
	}
}

func TestIfName(t *testing.T) {
	for _, n := range []uint64{0, 1, 35, 1 << 40} {
		if s := ifName(n, 'b'); len(s) > 15 {
			t.Errorf("ifName(%d) = %q: longer than 15", n, s)
		}
	}
}
