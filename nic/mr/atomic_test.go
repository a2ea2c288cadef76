package mr

import (
	"encoding/binary"
	"math"
	"sync"
	"testing"
	"unsafe"
)

// words returns an 8-byte aligned word and one at each odd offset 1..7, each
// inside its own buffer with guard bytes around it.
func words() map[string][]byte {
	m := map[string][]byte{}
	for off := range 8 {
		buf := make([]byte, 32) // heap: 8-byte aligned
		w := buf[8+off : 16+off]
		name := "aligned"
		if off != 0 {
			name = "offset " + string(rune('0'+off))
		}
		m[name] = w
	}
	return m
}

func TestAtomicAlignmentDetection(t *testing.T) {
	for name, w := range words() {
		aligned := uintptr(unsafe.Pointer(&w[0]))%8 == 0
		if (word(w) != nil) != aligned {
			t.Errorf("%s: word() aligned = %v, address says %v", name, word(w) != nil, aligned)
		}
	}
}

func TestCompareSwapFetchAdd(t *testing.T) {
	for name, w := range words() {
		t.Run(name, func(t *testing.T) {
			full := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&w[0]), -8)), 24)
			for i := range full {
				full[i] = 0xEE
			}
			Store(w, 100)
			if got := binary.NativeEndian.Uint64(w); got != 100 {
				t.Fatalf("Store: memory holds %d in host order, want 100", got)
			}
			if orig := CompareSwap(w, 99, 7); orig != 100 || Load(w) != 100 {
				t.Errorf("CompareSwap mismatch: orig %d, now %d; want 100, 100", orig, Load(w))
			}
			if orig := CompareSwap(w, 100, 7); orig != 100 || Load(w) != 7 {
				t.Errorf("CompareSwap match: orig %d, now %d; want 100, 7", orig, Load(w))
			}
			if orig := FetchAdd(w, 5); orig != 7 || Load(w) != 12 {
				t.Errorf("FetchAdd: orig %d, now %d; want 7, 12", orig, Load(w))
			}
			Store(w, math.MaxUint64)
			if orig := FetchAdd(w, 2); orig != math.MaxUint64 || Load(w) != 1 {
				t.Errorf("FetchAdd wraps: orig %#x, now %d; want max, 1", orig, Load(w))
			}
			if orig := FetchAdd(w, math.MaxUint64); orig != 1 || Load(w) != 0 { // add -1
				t.Errorf("FetchAdd of -1: orig %d, now %d", orig, Load(w))
			}
			Store(w, 0x0102030405060708)
			if got := binary.NativeEndian.Uint64(w); got != 0x0102030405060708 {
				t.Errorf("host order: %#x", got)
			}
			for i, b := range full {
				if (i < 8 || i >= 16) && b != 0xEE {
					t.Fatalf("byte %d outside the word changed to %#x", i-8, b)
				}
			}
		})
	}
}

func TestAtomicShortSlicePanics(t *testing.T) {
	for name, fn := range map[string]func([]byte){
		"CompareSwap": func(b []byte) { CompareSwap(b, 0, 0) },
		"FetchAdd":    func(b []byte) { FetchAdd(b, 0) },
		"Store":       func(b []byte) { Store(b, 0) },
		"Load":        func(b []byte) { Load(b) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s on 7 bytes did not panic", name)
				}
			}()
			fn(make([]byte, 7))
		}()
	}
}

// TestConcurrentAtomics: FetchAdd and CompareSwap loops from many goroutines on
// one word sum exactly, aligned and unaligned, and unaligned words that overlap
// (sharing stripes) stay consistent.
func TestConcurrentAtomics(t *testing.T) {
	const goroutines, perG = 16, 2000
	for name, w := range words() {
		t.Run(name, func(t *testing.T) {
			Store(w, 0)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for range perG {
						if g%2 == 0 {
							FetchAdd(w, 3)
							continue
						}
						for {
							old := Load(w)
							if CompareSwap(w, old, old+3) == old {
								break
							}
						}
					}
				})
			}
			wg.Wait()
			if got, want := Load(w), uint64(3*goroutines*perG); got != want {
				t.Errorf("sum %d, want %d", got, want)
			}
		})
	}
}

// TestOverlappingUnalignedWords: two unaligned words sharing four bytes; FetchAdd
// on both from many goroutines must not lose updates in the shared bytes.
func TestOverlappingUnalignedWords(t *testing.T) {
	buf := make([]byte, 32)
	a, b := buf[3:11], buf[7:15] // share buf[7:11]
	const n = 4000
	var wg sync.WaitGroup
	for _, w := range [][]byte{a, b, a, b} {
		wg.Go(func() {
			for range n {
				FetchAdd(w, 1) // touches only the low byte's carry chain: little or big endian
			}
		})
	}
	wg.Wait()
	// Each word got 2n increments of its own low-order byte(s); the other word's
	// increments land in its low-order bytes, which lie in this word's high or low
	// half depending on byte order. Check the bytes as a whole.
	var want [32]byte
	add := func(off int) {
		for range 2 * n {
			v := binary.NativeEndian.Uint64(want[off : off+8])
			binary.NativeEndian.PutUint64(want[off:off+8], v+1)
		}
	}
	add(3)
	add(7)
	if string(buf) != string(want[:]) {
		t.Errorf("bytes % x, want % x", buf, want)
	}
}

func TestRegionLockedAtomics(t *testing.T) {
	tb := NewTable(8)
	heap := make([]byte, 64)
	for _, c := range []struct {
		name   string
		buf    []byte
		iova   uint64
		access Access
		want   bool
	}{
		{"default iova", heap, 0, allRights, false},
		{"odd sub-slice, default iova", heap[3:], 0, allRights, false}, // IOVA == host address
		{"odd sub-slice, zero based", heap[3:], 0, allRights | ZeroBased, true},
		{"odd sub-slice, page iova", heap[3:], 0x1000, allRights, true},
		{"sub-slice by 8, page iova", heap[8:], 0x1000, allRights, false},
		{"iova off by 4", heap, 0x1004, allRights, true},
	} {
		r := mustRegister(t, tb, 1, c.buf, c.iova, c.access)
		if got := r.LockedAtomics(); got != c.want {
			t.Errorf("%s: LockedAtomics() = %v, want %v", c.name, got, c.want)
		}
		// The aligned IOVA's word works either way.
		va := (r.Addr() + 7) &^ 7
		w, f := tb.LookupAtomic(r.RKey(), 1, testQP, va)
		if f != FaultNone {
			t.Fatalf("%s: LookupAtomic(%#x): %v", c.name, va, f)
		}
		if (word(w) == nil) != c.want {
			t.Errorf("%s: host alignment of the word disagrees with LockedAtomics", c.name)
		}
		Store(w, 41)
		if FetchAdd(w, 1) != 41 || Load(w) != 42 {
			t.Errorf("%s: FetchAdd through the region", c.name)
		}
		mustDeregister(t, tb, r)
	}
	fr, _ := tb.AllocFastReg(1, MaxFastRegPages)
	if fr.LockedAtomics() {
		t.Errorf("unbound fast-reg region reports locked atomics")
	}
}
