package mr

import (
	"math"
	"testing"
)

// lookupFixture is a table with one region of each shape the tests need.
type lookupFixture struct {
	tb                  *Table
	rw, ro, local, top  *Region
	zb                  *Region
	bufRW, bufTop, bufZ []byte
	stale               uint32 // R_Key of a deregistered region whose index is reused
	free                uint32 // a key at a free index
}

const (
	pd1    = 1
	pd2    = 2
	iovaRW = 0x7f0000001000
	iovaRO = 0x7f0000100000
	iovaLo = 0x7f0000200000
)

func newLookupFixture(t testing.TB) *lookupFixture {
	x := &lookupFixture{tb: NewTable(10)}
	x.bufRW = pattern(4096, 0x11)
	x.bufTop = pattern(64, 0x22)
	x.bufZ = pattern(256, 0x33)
	x.rw = mustRegister(t, x.tb, pd1, x.bufRW, iovaRW, allRights)
	x.ro = mustRegister(t, x.tb, pd1, pattern(4096, 0x44), iovaRO, RemoteRead)
	x.local = mustRegister(t, x.tb, pd1, pattern(4096, 0x55), iovaLo, LocalWrite)
	x.top = mustRegister(t, x.tb, pd1, x.bufTop, math.MaxUint64-63, allRights)
	x.zb = mustRegister(t, x.tb, pd2, x.bufZ, 0, LocalWrite|RemoteRead|RemoteWrite|ZeroBased)
	old := mustRegister(t, x.tb, pd1, make([]byte, 64), 0x5000, allRights)
	x.stale = old.RKey()
	mustDeregister(t, x.tb, old)
	// Use up the never-used indices so the next Register reuses the freed one.
	var last *Region
	for {
		r := mustRegister(t, x.tb, pd1, make([]byte, 64), 0x5000, allRights)
		if r.RKey()>>KeyIndexShift == x.stale>>KeyIndexShift {
			break
		}
		last = r
	}
	x.free = last.RKey()
	mustDeregister(t, x.tb, last) // leaves one free index, for AllocFastReg
	return x
}

func TestLookup(t *testing.T) {
	x := newLookupFixture(t)
	rw, ro, lo, top, zb := x.rw.RKey(), x.ro.RKey(), x.local.LKey(), x.top.RKey(), x.zb.RKey()
	for _, c := range []struct {
		name   string
		key    uint32
		pd     uint32
		va     uint64
		length int
		need   Access
		remote bool
		want   Fault
		off    int // offset of the expected slice in its buffer, when want is FaultNone
		buf    []byte
	}{
		// Success, remote and local.
		{"remote write whole region", rw, pd1, iovaRW, 4096, RemoteWrite, true, FaultNone, 0, x.bufRW},
		{"remote read middle", rw, pd1, iovaRW + 100, 200, RemoteRead, true, FaultNone, 100, x.bufRW},
		{"remote atomic rights", rw, pd1, iovaRW + 8, 8, RemoteAtomic, true, FaultNone, 8, x.bufRW},
		{"last byte", rw, pd1, iovaRW + 4095, 1, RemoteWrite, true, FaultNone, 4095, x.bufRW},
		{"local send gather", ro, pd1, iovaRO, 10, 0, false, FaultNone, 0, nil},
		{"local receive", lo, pd1, iovaLo + 1, 10, LocalWrite, false, FaultNone, 1, nil},
		{"several rights", rw, pd1, iovaRW, 16, RemoteRead | RemoteWrite | LocalWrite, true, FaultNone, 0, x.bufRW},
		{"top of the address space", top, pd1, math.MaxUint64 - 63, 64, RemoteWrite, true, FaultNone, 0, x.bufTop},
		{"very last byte of 2^64", top, pd1, math.MaxUint64, 1, RemoteRead, true, FaultNone, 63, x.bufTop},
		{"zero based", zb, pd2, 0, 256, RemoteWrite, true, FaultNone, 0, x.bufZ},
		{"zero based end", zb, pd2, 255, 1, RemoteRead, true, FaultNone, 255, x.bufZ},

		// Zero length: nothing is checked (C9-88).
		{"zero length, good key", rw, pd1, iovaRW, 0, RemoteWrite, true, FaultNone, -1, nil},
		{"zero length, garbage key", 0xdeadbeef, 99, math.MaxUint64, 0, RemoteWrite, true, FaultNone, -1, nil},
		{"zero length, no rights", ro, pd2, 0, 0, RemoteAtomic, true, FaultNone, -1, nil},

		// Keys.
		{"key byte off by one", rw + 1, pd1, iovaRW, 8, RemoteWrite, true, FaultInvalidKey, 0, nil},
		{"key byte flipped", rw ^ 0x80, pd1, iovaRW, 8, RemoteWrite, true, FaultInvalidKey, 0, nil},
		{"index 0", uint32(uint8(rw)), pd1, iovaRW, 8, RemoteWrite, true, FaultInvalidKey, 0, nil},
		{"index past the table", uint32(MaxIndex) << KeyIndexShift, pd1, iovaRW, 8, RemoteWrite, true, FaultInvalidKey, 0, nil},
		{"free index", x.free, pd1, 0x5000, 8, RemoteWrite, true, FaultInvalidKey, 0, nil},
		{"all ones", math.MaxUint32, pd1, iovaRW, 8, RemoteWrite, true, FaultInvalidKey, 0, nil},
		{"stale key of a reused index", x.stale, pd1, 0x5000, 8, RemoteWrite, true, FaultInvalidKey, 0, nil},
		{"rkey of a local-only region", lo, pd1, iovaLo, 8, 0, true, FaultInvalidKey, 0, nil},
		{"rkey of a local-only region, right PD and rights", lo, pd1, iovaLo, 8, LocalWrite, true, FaultInvalidKey, 0, nil},

		// PD.
		{"remote PD mismatch", rw, pd2, iovaRW, 8, RemoteWrite, true, FaultPD, 0, nil},
		{"local PD mismatch", lo, pd2, iovaLo, 8, LocalWrite, false, FaultPD, 0, nil},

		// Rights.
		{"write to read-only", ro, pd1, iovaRO, 8, RemoteWrite, true, FaultAccess, 0, nil},
		{"atomic on read-only", ro, pd1, iovaRO, 8, RemoteAtomic, true, FaultAccess, 0, nil},
		{"local write to read-only", ro, pd1, iovaRO, 8, LocalWrite, false, FaultAccess, 0, nil},
		{"one of two rights missing", ro, pd1, iovaRO, 8, RemoteRead | RemoteWrite, true, FaultAccess, 0, nil},
		{"atomic on zero based without it", zb, pd2, 0, 8, RemoteAtomic, true, FaultAccess, 0, nil},

		// Bounds.
		{"below the region", rw, pd1, iovaRW - 1, 8, RemoteWrite, true, FaultBounds, 0, nil},
		{"far below", rw, pd1, 0, 8, RemoteWrite, true, FaultBounds, 0, nil},
		{"va at the end", rw, pd1, iovaRW + 4096, 1, RemoteWrite, true, FaultBounds, 0, nil},
		{"one byte too long", rw, pd1, iovaRW, 4097, RemoteWrite, true, FaultBounds, 0, nil},
		{"straddles the end", rw, pd1, iovaRW + 4095, 2, RemoteWrite, true, FaultBounds, 0, nil},
		{"negative length", rw, pd1, iovaRW, -1, RemoteWrite, true, FaultBounds, 0, nil},
		{"most negative length", rw, pd1, iovaRW, math.MinInt, RemoteWrite, true, FaultBounds, 0, nil},
		{"huge length", rw, pd1, iovaRW, math.MaxInt, RemoteWrite, true, FaultBounds, 0, nil},
		{"max DMA length", rw, pd1, iovaRW, math.MaxUint32, RemoteWrite, true, FaultBounds, 0, nil},
		{"va at 2^64-1", rw, pd1, math.MaxUint64, 1, RemoteWrite, true, FaultBounds, 0, nil},
		{"wraps past 2^64", top, pd1, math.MaxUint64, 2, RemoteWrite, true, FaultBounds, 0, nil},
		{"wraps from the region start", top, pd1, math.MaxUint64 - 63, 65, RemoteWrite, true, FaultBounds, 0, nil},
		{"va+len wraps to inside", rw, pd1, iovaRW + 8, math.MaxInt, RemoteWrite, true, FaultBounds, 0, nil},
		{"zero based past the end", zb, pd2, 256, 1, RemoteRead, true, FaultBounds, 0, nil},
		{"zero based va near 2^64", zb, pd2, math.MaxUint64, 1, RemoteRead, true, FaultBounds, 0, nil},
		{"local out of bounds", lo, pd1, iovaLo + 4000, 97, LocalWrite, false, FaultBounds, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, f := x.tb.Lookup(c.key, c.pd, c.va, c.length, c.need, qpOf(c.remote))
			if f != c.want {
				t.Fatalf("Lookup = %v, want %v", f, c.want)
			}
			switch {
			case f != FaultNone || c.length == 0:
				if b != nil {
					t.Fatalf("got a %d-byte slice with %v", len(b), f)
				}
			case c.buf != nil:
				if want := c.buf[c.off : c.off+c.length]; !sameMemory(b, want) {
					t.Fatalf("slice is not buf[%d:%d]", c.off, c.off+c.length)
				}
				fallthrough
			default:
				if len(b) != c.length || cap(b) != c.length {
					t.Fatalf("len %d cap %d, want both %d", len(b), cap(b), c.length)
				}
			}
		})
	}
}

func TestLookupAtomic(t *testing.T) {
	x := newLookupFixture(t)
	rw, ro := x.rw.RKey(), x.ro.RKey()
	for _, c := range []struct {
		name  string
		key   uint32
		pd    uint32
		va    uint64
		write bool // LookupAtomicWrite
		want  Fault
	}{
		{"aligned", rw, pd1, iovaRW + 16, false, FaultNone},
		{"last word", rw, pd1, iovaRW + 4088, false, FaultNone},
		{"misaligned by 4", rw, pd1, iovaRW + 4, false, FaultAlign},
		{"misaligned by 1", rw, pd1, iovaRW + 1, false, FaultAlign},
		{"misaligned and past the end", rw, pd1, iovaRW + 4092, false, FaultBounds}, // range first, as rxe
		{"past the end", rw, pd1, iovaRW + 4096, false, FaultBounds},
		{"no atomic right", ro, pd1, iovaRO, false, FaultAccess},
		{"misaligned without the right", ro, pd1, iovaRO + 1, false, FaultAccess},
		{"PD", rw, pd2, iovaRW, false, FaultPD},
		{"key", rw ^ 2, pd1, iovaRW, false, FaultInvalidKey},
		{"top word of 2^64", x.top.RKey(), pd1, math.MaxUint64 - 7, false, FaultNone},
		{"atomic write", rw, pd1, iovaRW + 8, true, FaultNone},
		{"atomic write misaligned", rw, pd1, iovaRW + 9, true, FaultAlign},
		{"atomic write to read-only", ro, pd1, iovaRO, true, FaultAccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			lookup := x.tb.LookupAtomic
			if c.write {
				lookup = x.tb.LookupAtomicWrite
			}
			b, f := lookup(c.key, c.pd, testQP, c.va)
			if f != c.want {
				t.Fatalf("got %v, want %v", f, c.want)
			}
			if f == FaultNone && (len(b) != AtomicLen || cap(b) != AtomicLen) {
				t.Fatalf("len %d cap %d, want 8", len(b), cap(b))
			}
			if f != FaultNone && b != nil {
				t.Fatalf("slice with a fault")
			}
		})
	}
	b, _ := x.tb.LookupAtomic(rw, pd1, testQP, iovaRW+16)
	if !sameMemory(b, x.bufRW[16:24]) {
		t.Errorf("atomic slice is not bufRW[16:24]")
	}
}

// TestLookupAllocs: nothing on the hot path allocates, success or failure.
func TestLookupAllocs(t *testing.T) {
	x := newLookupFixture(t)
	fr, err := x.tb.AllocFastReg(pd1, MaxFastRegPages)
	if err != nil {
		t.Fatal(err)
	}
	if err := fastReg(t, x.tb, fr, fr.LKey(), pd1, make([]byte, 64), 0, RemoteWrite|LocalWrite); err != nil {
		t.Fatal(err)
	}
	aligned := make([]byte, 16)
	unaligned := make([]byte, 24)[3:11]
	var sink []byte
	var fsink Fault
	for name, fn := range map[string]func(){
		"hit":         func() { sink, fsink = x.tb.Lookup(x.rw.RKey(), pd1, iovaRW+64, 1024, RemoteWrite, testQP) },
		"local hit":   func() { sink, fsink = x.tb.Lookup(x.local.LKey(), pd1, iovaLo, 64, LocalWrite, Local) },
		"zero length": func() { sink, fsink = x.tb.Lookup(1, 2, 3, 0, RemoteWrite, testQP) },
		"bad key":     func() { sink, fsink = x.tb.Lookup(0xdeadbeef, pd1, 0, 8, RemoteWrite, testQP) },
		"stale key":   func() { sink, fsink = x.tb.Lookup(x.stale, pd1, 0x5000, 8, RemoteWrite, testQP) },
		"PD":          func() { sink, fsink = x.tb.Lookup(x.rw.RKey(), pd2, iovaRW, 8, RemoteWrite, testQP) },
		"access":      func() { sink, fsink = x.tb.Lookup(x.ro.RKey(), pd1, iovaRO, 8, RemoteWrite, testQP) },
		"bounds":      func() { sink, fsink = x.tb.Lookup(x.rw.RKey(), pd1, math.MaxUint64, 8, RemoteWrite, testQP) },
		"atomic":      func() { sink, fsink = x.tb.LookupAtomic(x.rw.RKey(), pd1, testQP, iovaRW) },
		"misaligned":  func() { sink, fsink = x.tb.LookupAtomic(x.rw.RKey(), pd1, testQP, iovaRW+1) },
		"invalidate": func() {
			fsink = x.tb.Invalidate(fr.LKey(), pd1, Local)
			fsink = x.tb.Invalidate(x.rw.RKey(), pd1, Local)
		},
		"atomics": func() {
			FetchAdd(aligned, 1)
			CompareSwap(aligned, 1, 2)
			Store(aligned, 3)
			FetchAdd(unaligned, 1)
			CompareSwap(unaligned, 1, 2)
			Store(unaligned, Load(unaligned))
		},
	} {
		if n := testing.AllocsPerRun(200, fn); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
	_, _ = sink, fsink
}

// TestLocalLookupIgnoresRemoteRule: an L_Key works on a region without remote
// rights; the same number as an R_Key does not.
func TestLocalLookupIgnoresRemoteRule(t *testing.T) {
	tb := NewTable(1)
	buf := make([]byte, 32)
	r := mustRegister(t, tb, 3, buf, 0, 0) // no rights at all: local reads only
	if b, f := tb.Lookup(r.LKey(), 3, r.Addr(), 32, 0, Local); f != FaultNone || !sameMemory(b, buf) {
		t.Errorf("local read of a no-rights region: %v", f)
	}
	if _, f := tb.Lookup(r.LKey(), 3, r.Addr(), 32, LocalWrite, Local); f != FaultAccess {
		t.Errorf("local write of a no-rights region: %v, want access violation", f)
	}
	if _, f := tb.Lookup(r.RKey(), 3, r.Addr(), 32, RemoteRead, testQP); f != FaultInvalidKey {
		t.Errorf("remote read of a no-rights region: %v, want invalid key", f)
	}
}

// TestLookupUnusedChunk: an index in range whose chunk was never allocated.
func TestLookupUnusedChunk(t *testing.T) {
	tb := NewTable(5 * chunkSize)
	r := mustRegister(t, tb, 1, make([]byte, 8), 0, allRights)
	for _, idx := range []uint32{2, chunkSize, 3*chunkSize + 7, 5 * chunkSize} {
		key := idx<<KeyIndexShift | r.RKey()&0xFF
		if _, f := tb.Lookup(key, 1, r.Addr(), 8, RemoteRead, testQP); f != FaultInvalidKey {
			t.Errorf("index %d: %v, want invalid key", idx, f)
		}
	}
	if f := tb.Invalidate(3*chunkSize<<KeyIndexShift, 1, Local); f != FaultInvalidKey {
		t.Errorf("Invalidate of an unused chunk: %v", f)
	}
}
