// 24-bit modular packet sequence numbers.

package wire

// PSN is a 24-bit packet sequence number (IBTA 9.7.1). Arithmetic wraps modulo 2^24
// and comparison is modular: a PSN is "before" another when it lies in the half of
// the number space behind it. IBTA's reliable service uses the same half-window split
// to tell duplicate requests from out-of-sequence ones, and rxe's psn_compare
// computes the same signed 24-bit distance.
type PSN uint32

// PSNMask keeps the 24 bits of a PSN.
const PSNMask = 0xFFFFFF

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return p.Add(1) }

// Sub returns the signed distance p-q in [-2^23, 2^23): positive when p is after q.
func (p PSN) Sub(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// LessThan reports whether p is before q in modular order.
func (p PSN) LessThan(q PSN) bool { return p.Sub(q) < 0 }

// InRange reports whether p lies in the modular window [first, first+n).
func (p PSN) InRange(first PSN, n uint32) bool {
	return (uint32(p)-uint32(first))&PSNMask < n
}

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }
