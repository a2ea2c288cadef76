package mr

import "testing"

func TestFaultNAK(t *testing.T) {
	for _, c := range []struct {
		f    Fault
		name string
		nak  NAKClass
	}{
		{FaultNone, "none", NAKNone},
		{FaultInvalidKey, "invalid key", NAKRemoteAccessError},
		{FaultPD, "PD mismatch", NAKRemoteAccessError},
		{FaultAccess, "access violation", NAKRemoteAccessError},
		{FaultBounds, "out of bounds", NAKRemoteAccessError},
		{FaultAlign, "misaligned atomic", NAKInvalidRequest},
		{Fault(200), "Fault(200)", NAKRemoteAccessError},
	} {
		if got := c.f.String(); got != c.name {
			t.Errorf("Fault(%d).String() = %q, want %q", c.f, got, c.name)
		}
		if got := c.f.NAK(); got != c.nak {
			t.Errorf("%v.NAK() = %v, want %v", c.f, got, c.nak)
		}
	}
}

func TestNAKClassString(t *testing.T) {
	for c, want := range map[NAKClass]string{
		NAKNone: "none", NAKRemoteAccessError: "remote access error",
		NAKInvalidRequest: "invalid request", NAKClass(9): "NAKClass(9)",
	} {
		if got := c.String(); got != want {
			t.Errorf("NAKClass(%d).String() = %q, want %q", c, got, want)
		}
	}
}
