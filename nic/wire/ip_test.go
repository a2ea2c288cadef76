package wire

import (
	"math/rand/v2"
	"testing"
)

// TestIPv4ChecksumValid: the inline sum agrees with RFC 1071's over random
// headers, with their checksum set and without, and every single-bit flip of
// a valid header makes it invalid.
func TestIPv4ChecksumValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	h := IPv4(make([]byte, IPv4Len))
	for i := range 2000 {
		for k := range h {
			h[k] = byte(rng.Uint32())
		}
		if i%2 == 0 {
			h.UpdateChecksum()
		}
		if got, want := h.ChecksumValid(), fold(sum16(0, h)) == 0xFFFF; got != want {
			t.Fatalf("%x: ChecksumValid %v, RFC 1071 sum says %v", []byte(h), got, want)
		}
		if i%2 != 0 {
			continue
		}
		if !h.ChecksumValid() {
			t.Fatalf("%x: invalid after UpdateChecksum", []byte(h))
		}
		bit := rng.IntN(IPv4Len * 8)
		h[bit/8] ^= 1 << (bit % 8)
		if h.ChecksumValid() {
			t.Fatalf("%x: valid with bit %d flipped", []byte(h), bit)
		}
	}
}
