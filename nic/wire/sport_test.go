// UDP source ports against the numbers in the golden captures.

package wire

import "testing"

func TestUDPSport(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  uint16
		want uint16
	}{
		// shared/pcaps/README.md: 49441 for QPN 0x11 (both ends of that connection
		// had QPN 0x11, so it is rdma_get_udp_sport(0, 0x11, 0x11)).
		{"README QPN 0x11", UDPSport(0, 0x11, 0x11), 49441},
		{"rc_send QPN 0x12", UDPSport(0, 0x12, 0x12), 49476},
		{"atomic_cmp_swap QPN 0x19", UDPSport(0, 0x19, 0x19), 49777},
		// The hash_32 scheme gives another port for QPN 0x11: the README's formula
		// is the one UD and QP1 use.
		{"QPSport 0x11", QPSport(0x11), 57236},
		{"ud_send QPN 0x1a", QPSport(0x1A), 64407},
		{"QP1 (CM MADs)", QPSport(1), 55410},
		// rdma_cm_rping: CM ports 0xd3e6 -> 7174.
		{"rping CM label", UDPSport(CMFlowLabel(0xd3e6, 7174), 0x15, 0x15), 50375},
		{"flow label only", FlowLabelToUDPSport(0x8E5EC), 58831},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestFlowLabel(t *testing.T) {
	for _, q := range [][2]uint32{{1, 2}, {0x11, 0x12}, {0xFFFFFF, 0x123456}, {0, 7}} {
		a, b := FlowLabel(q[0], q[1]), FlowLabel(q[1], q[0])
		if a != b {
			t.Errorf("FlowLabel(%#x, %#x) = %#x, reversed %#x: want symmetric", q[0], q[1], a, b)
		}
		if a > 0xFFFFF {
			t.Errorf("FlowLabel(%#x, %#x) = %#x exceeds 20 bits", q[0], q[1], a)
		}
	}
	// (0xFFFFFF*0x123456) = 0x123455EDCBAA; folded as in ib_verbs.h.
	v := uint64(0xFFFFFF) * 0x123456
	v ^= v >> 20
	v ^= v >> 40
	if got, want := FlowLabel(0xFFFFFF, 0x123456), uint32(v&0xFFFFF); got != want {
		t.Errorf("FlowLabel = %#x, want %#x", got, want)
	}
	for fl := uint32(0); fl < 1<<20; fl += 4099 {
		if p := FlowLabelToUDPSport(fl); p < SportMin {
			t.Fatalf("FlowLabelToUDPSport(%#x) = %d, below %d", fl, p, SportMin)
		}
	}
}
