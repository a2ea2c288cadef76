package mr

import (
	"errors"
	"testing"
)

func TestAccessValuesMatchIBVerbs(t *testing.T) {
	// enum ibv_access_flags in libibverbs' verbs.h.
	for _, c := range []struct {
		a    Access
		want uint32
	}{
		{LocalWrite, 1}, {RemoteWrite, 2}, {RemoteRead, 4}, {RemoteAtomic, 8},
		{MWBind, 16}, {ZeroBased, 32}, {OnDemand, 64}, {HugeTLB, 128},
		{FlushGlobal, 1 << 8}, {FlushPersistent, 1 << 9}, {RelaxedOrdering, 1 << 20},
		{OptionalRange, 0x3ff00000},
	} {
		if uint32(c.a) != c.want {
			t.Errorf("%v = %#x, want %#x", c.a, uint32(c.a), c.want)
		}
	}
}

func TestAccessCheck(t *testing.T) {
	for _, c := range []struct {
		a    Access
		want error
	}{
		{0, nil},
		{LocalWrite, nil},
		{RemoteRead, nil}, // remote read alone needs no local write
		{LocalWrite | RemoteWrite, nil},
		{LocalWrite | RemoteAtomic, nil},
		{allRights | MWBind | ZeroBased | HugeTLB | FlushGlobal | RelaxedOrdering, nil},
		{1 << 25, nil}, // optional range: ignorable
		{RemoteWrite, ErrBadAccess},
		{RemoteAtomic, ErrBadAccess},
		{RemoteWrite | RemoteRead | RemoteAtomic, ErrBadAccess},
		{LocalWrite | 1<<10, ErrBadAccess},
		{1 << 31, ErrBadAccess},
		{OnDemand | LocalWrite, ErrNotSupported},
		{FlushPersistent, ErrNotSupported},
	} {
		err := c.a.Check()
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%v.Check() = %v, want %v", c.a, err, c.want)
		}
	}
}

func TestAccessString(t *testing.T) {
	for _, c := range []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{LocalWrite, "LocalWrite"},
		{LocalWrite | RemoteRead, "LocalWrite|RemoteRead"},
		{allRights, "LocalWrite|RemoteWrite|RemoteRead|RemoteAtomic"},
		{ZeroBased | 1<<11, "ZeroBased|0x800"},
		{1 << 11, "0x800"},
		{RelaxedOrdering | 1<<21, "RelaxedOrdering|0x200000"},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(c.a), got, c.want)
		}
	}
}

func TestAccessRemote(t *testing.T) {
	for _, c := range []struct {
		a    Access
		want bool
	}{
		{0, false}, {LocalWrite, false}, {LocalWrite | MWBind | FlushGlobal, false},
		{RemoteRead, true}, {LocalWrite | RemoteWrite, true}, {LocalWrite | RemoteAtomic, true},
	} {
		if got := c.a.Remote(); got != c.want {
			t.Errorf("%v.Remote() = %v, want %v", c.a, got, c.want)
		}
	}
}
