// PSN arithmetic across the 24-bit wrap.

package wire

import "testing"

func TestPSNAdd(t *testing.T) {
	for _, tc := range []struct {
		p    PSN
		n    uint32
		want PSN
	}{
		{0, 1, 1},
		{0xFFFFFE, 1, 0xFFFFFF},
		{0xFFFFFF, 1, 0},
		{0xFFFFFF, 2, 1},
		{0xFFFFF0, 0x20, 0x10},
		{5, 0xFFFFFF, 4}, // adding 2^24-1 is subtracting 1
		{123, 1 << 24, 123},
	} {
		if got := tc.p.Add(tc.n); got != tc.want {
			t.Errorf("PSN(%#x).Add(%#x) = %#x, want %#x", tc.p, tc.n, got, tc.want)
		}
	}
	if got := PSN(0xFFFFFF).Next(); got != 0 {
		t.Errorf("PSN(0xffffff).Next() = %#x, want 0", got)
	}
}

func TestPSNSubLessThan(t *testing.T) {
	for _, tc := range []struct {
		p, q PSN
		sub  int32
		less bool
	}{
		{5, 5, 0, false},
		{6, 5, 1, false},
		{5, 6, -1, true},
		{0, 0xFFFFFF, 1, false}, // wrapped: 0 is after 0xffffff
		{0xFFFFFF, 0, -1, true},
		{0x000010, 0xFFFFF0, 0x20, false},
		{0xFFFFF0, 0x000010, -0x20, true},
		{0x7FFFFF, 0, 0x7FFFFF, false}, // just inside the forward half-window
		{0x800000, 0, -0x800000, true}, // exactly half way counts as behind
		{0x800001, 0, -0x7FFFFF, true},
		{0, 0x800000, -0x800000, true},
		{0, 0x800001, 0x7FFFFF, false},
	} {
		if got := tc.p.Sub(tc.q); got != tc.sub {
			t.Errorf("PSN(%#x).Sub(%#x) = %d, want %d", tc.p, tc.q, got, tc.sub)
		}
		if got := tc.p.LessThan(tc.q); got != tc.less {
			t.Errorf("PSN(%#x).LessThan(%#x) = %v, want %v", tc.p, tc.q, got, tc.less)
		}
	}
}

func TestPSNInRange(t *testing.T) {
	for _, tc := range []struct {
		p, first PSN
		n        uint32
		want     bool
	}{
		{10, 10, 1, true},
		{10, 10, 0, false},
		{11, 10, 1, false},
		{9, 10, 5, false},
		{0, 0xFFFFFE, 3, true},
		{1, 0xFFFFFE, 3, false},
		{0xFFFFFF, 0xFFFFFE, 3, true},
	} {
		if got := tc.p.InRange(tc.first, tc.n); got != tc.want {
			t.Errorf("PSN(%#x).InRange(%#x, %d) = %v, want %v", tc.p, tc.first, tc.n, got, tc.want)
		}
	}
}

func TestPSNAgreesWithIntegerModel(t *testing.T) {
	// Differential check against plain modular integers over a wrap-around.
	for _, base := range []int64{0, 0x7FFFF0, 0xFFFFF0} {
		for d := int64(-40); d <= 40; d++ {
			p := PSN(base)
			q := PSN(((base+d)%(1<<24) + (1 << 24)) % (1 << 24))
			if got := q.Sub(p); int64(got) != d {
				t.Fatalf("PSN(%#x).Sub(%#x) = %d, want %d", q, p, got, d)
			}
			if got := p.Add(uint32(d + 1<<24)); got != q {
				t.Fatalf("PSN(%#x).Add(%d) = %#x, want %#x", p, d, got, q)
			}
		}
	}
}
