package wire

import (
	"bytes"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// CopyUpdateIEEE copies and returns crc32.Update's value, at every length
// around foldCopy's rounds of 256 bytes and from any register, with the fold
// (where the CPU has it) and without.
func TestCopyUpdateIEEE(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 9100)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, len(src)+8)
	check := func(t *testing.T) {
		for _, n := range []int{0, 1, 15, 63, 64, 200, 255, 256, 257, 511, 512, 767, 768, 1024, 4095, 4096, 4097, 4154, 8192, 8999} {
			for _, off := range []int{0, 1, 7} {
				crc := rng.Uint32()
				s := src[off : off+n]
				clear(dst)
				got := CopyUpdateIEEE(crc, dst[3:], s)
				if want := crc32.Update(crc, crc32.IEEETable, s); got != want {
					t.Fatalf("n %d off %d crc %#x: %#x, want %#x", n, off, crc, got, want)
				}
				if !bytes.Equal(dst[3:3+n], s) || dst[3+n] != 0 || dst[2] != 0 {
					t.Fatalf("n %d off %d: dst is not src", n, off)
				}
			}
		}
	}
	t.Run("fold", func(t *testing.T) {
		if !hasFoldCopy {
			t.Skip("no AVX-512 VPCLMULQDQ on this CPU") // the copy-then-CRC path is run below
		}
		check(t)
	})
	t.Run("plain", func(t *testing.T) {
		defer func(h bool) { hasFoldCopy = h }(hasFoldCopy)
		hasFoldCopy = false
		check(t)
	})
}

// The folding constants in copycrc_amd64.s: x^(D±32) mod P, bit-reversed,
// shifted left once, for folds of D = 128, 512 and 2048 bits.
func TestFoldConstants(t *testing.T) {
	k := func(n int) uint64 {
		var r uint64 = 1
		for range n {
			r <<= 1
			if r&(1<<32) != 0 {
				r ^= 1<<32 | uint64(bits.Reverse32(crc32.IEEE))
			}
		}
		return uint64(bits.Reverse32(uint32(r))) << 1
	}
	for _, c := range []struct {
		d      int
		lo, hi uint64
	}{{128, 0x1751997d0, 0x0ccaa009e}, {512, 0x154442bd4, 0x1c6e41596}, {2048, 0x11542778a, 0x1322d1430}} {
		if lo, hi := k(c.d+32), k(c.d-32); lo != c.lo || hi != c.hi {
			t.Errorf("D=%d: %#x %#x, the assembly has %#x %#x", c.d, lo, hi, c.lo, c.hi)
		}
	}
}

// updateIEEE is crc32.Update at every length to 1100 bytes (both sides of
// fold16's bound and of foldCRC's first rounds), and at a 4 KiB frame's
// lengths, from any register and alignment, with foldCRC and fold16 (where
// the CPU has them) and without.
func TestUpdateIEEE(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 4200)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	lens := make([]int, 0, 1110)
	for n := range 1100 {
		lens = append(lens, n)
	}
	lens = append(lens, 4095, 4096, 4097, 4136, 4152, 4190)
	check := func(t *testing.T) {
		for _, n := range lens {
			for _, off := range []int{0, 1, 7} {
				crc := rng.Uint32()
				s := src[off : off+n]
				if got, want := updateIEEE(crc, s), crc32.Update(crc, crc32.IEEETable, s); got != want {
					t.Fatalf("n %d off %d crc %#x: %#x, want %#x", n, off, crc, got, want)
				}
			}
		}
	}
	t.Run("foldCRC", func(t *testing.T) {
		if !hasFoldCopy {
			t.Skip("no AVX-512 VPCLMULQDQ on this CPU") // the paths without it are run below
		}
		check(t)
	})
	t.Run("fold16", func(t *testing.T) {
		if !hasFold16 {
			t.Skip("no PCLMULQDQ on this CPU") // the table path is run below
		}
		defer func(h bool) { hasFoldCopy = h }(hasFoldCopy)
		hasFoldCopy = false
		check(t)
	})
	t.Run("table", func(t *testing.T) {
		defer func(h, c bool) { hasFold16, hasFoldCopy = h, c }(hasFold16, hasFoldCopy)
		hasFold16, hasFoldCopy = false, false
		check(t)
	})
}
