package mr

import (
	"math"
	"math/big"
	"sync"
	"testing"
	"unsafe"
)

// modelRegion is the naive model's view of one registration.
type modelRegion struct {
	key    uint32
	pd     uint32
	access Access
	iova   uint64
	buf    []byte
	valid  bool
	fast   bool
}

// lookupModel is a deliberately plain re-statement of Lookup's rules, with
// arbitrary-precision bounds arithmetic, to test the real one against.
type lookupModel struct {
	byIndex map[uint32]*modelRegion // current occupant of each index
	keys    []uint32                // every key ever handed out, stale ones included
	bufs    [][]byte                // every registered buffer
}

func (m *lookupModel) lookup(key, pd uint32, va uint64, length int, need Access, remote bool) (*modelRegion, uint64, Fault) {
	if length == 0 {
		return nil, 0, FaultNone
	}
	r := m.byIndex[key>>8]
	if r == nil || r.key != key || !r.valid {
		return nil, 0, FaultInvalidKey
	}
	if remote && r.access&(RemoteRead|RemoteWrite|RemoteAtomic) == 0 {
		return nil, 0, FaultInvalidKey
	}
	if r.pd != pd {
		return nil, 0, FaultPD
	}
	for _, right := range []Access{LocalWrite, RemoteWrite, RemoteRead, RemoteAtomic, FlushGlobal} {
		if need&right != 0 && r.access&right == 0 {
			return nil, 0, FaultAccess
		}
	}
	lo := new(big.Int).SetUint64(va)
	hi := new(big.Int).Add(lo, big.NewInt(int64(length)))
	start := new(big.Int).SetUint64(r.iova)
	end := new(big.Int).Add(start, big.NewInt(int64(len(r.buf))))
	if length < 0 || lo.Cmp(start) < 0 || hi.Cmp(end) > 0 {
		return nil, 0, FaultBounds
	}
	return r, va - r.iova, FaultNone
}

var (
	fuzzOnce  sync.Once
	fuzzTable *Table
	fuzzModel *lookupModel
)

// fuzzFixture builds one table and its model: regions of every shape, a stale key
// at a reused index, fast-reg regions valid, invalidated and never bound.
func fuzzFixture(t testing.TB) (*Table, *lookupModel) {
	fuzzOnce.Do(func() {
		tb := NewTable(12)
		m := &lookupModel{byIndex: map[uint32]*modelRegion{}}
		add := func(r *Region) {
			v := r.cur.Load()
			mr := &modelRegion{key: v.key, pd: v.pd, access: v.access, iova: v.iova, buf: v.m.buf,
				valid: v.state.Load() == stateValid, fast: v.inval}
			m.byIndex[v.key>>8] = mr
			m.keys = append(m.keys, v.key)
			if len(v.m.buf) > 0 {
				m.bufs = append(m.bufs, v.m.buf)
			}
		}
		reg := func(pd uint32, n int, iova uint64, acc Access) *Region {
			r := mustRegister(t, tb, pd, make([]byte, n), iova, acc)
			add(r)
			return r
		}
		reg(1, 4096, 0x10000, allRights)
		reg(1, 100, 0, RemoteRead)
		reg(2, 64, math.MaxUint64-63, allRights)
		reg(2, 33, 0, LocalWrite|RemoteWrite|ZeroBased)
		reg(1, 17, 0x7, LocalWrite)
		reg(3, 8, 0xFFFF_FFFF_0000_0000, 0)
		reg(1, 4096, 0x8000_0000_0000_0000, LocalWrite|RemoteAtomic)
		heap := make([]byte, 64)
		r := mustRegister(t, tb, 1, heap[5:], 0x2000, allRights|FlushGlobal) // locked atomics
		add(r)
		fr, _ := tb.AllocFastReg(1, MaxFastRegPages)
		add(fr) // never bound: Free
		fr2, _ := tb.AllocFastReg(2, MaxFastRegPages)
		// A new key byte at the same index: +3 on the byte alone, since a key
		// byte of 253 or more would carry into the index.
		key := fr2.LKey()&^0xff | (fr2.LKey()+3)&0xff
		if err := fastReg(t, tb, fr2, key, 2, make([]byte, 256), 0x3000, LocalWrite|RemoteRead); err != nil {
			t.Fatal(err)
		}
		add(fr2)
		fr3, _ := tb.AllocFastReg(2, MaxFastRegPages)
		if err := fastReg(t, tb, fr3, fr3.LKey(), 2, make([]byte, 256), 0x4000, LocalWrite|RemoteWrite); err != nil {
			t.Fatal(err)
		}
		tb.Invalidate(fr3.LKey(), 2, Local)
		add(fr3)
		// A stale key: deregister, fill, reuse the index.
		old := reg(1, 128, 0x9000, allRights)
		mustDeregister(t, tb, old)
		delete(m.byIndex, old.LKey()>>8)
		add(mustRegister(t, tb, 1, make([]byte, 128), 0x9000, allRights))
		fuzzTable, fuzzModel = tb, m
	})
	return fuzzTable, fuzzModel
}

// FuzzLookup drives Lookup, LookupAtomic and Invalidate-free checks with hostile
// keys, PDs, VAs, lengths and rights and compares every answer with the model:
// same Fault, and on success exactly the model's sub-slice, which lies inside a
// registered buffer.
func FuzzLookup(f *testing.F) {
	f.Add(uint8(0), uint32(0), uint32(1), uint64(0x10000), false, int64(4096), uint32(RemoteWrite), true)
	f.Add(uint8(0), uint32(0), uint32(1), uint64(0xFFFF), false, int64(2), uint32(RemoteRead), true)
	f.Add(uint8(2), uint32(0), uint32(2), uint64(63), true, int64(1), uint32(RemoteRead), true)
	f.Add(uint8(2), uint32(0), uint32(2), uint64(math.MaxUint64), false, int64(2), uint32(RemoteRead), true)
	f.Add(uint8(3), uint32(0), uint32(2), uint64(0), false, int64(33), uint32(RemoteWrite), true)
	f.Add(uint8(4), uint32(0), uint32(1), uint64(0x7), false, int64(17), uint32(LocalWrite), false)
	f.Add(uint8(4), uint32(0), uint32(1), uint64(0x7), false, int64(17), uint32(0), true)
	f.Add(uint8(7), uint32(0), uint32(1), uint64(0x2000), false, int64(8), uint32(RemoteAtomic), true)
	f.Add(uint8(12), uint32(0), uint32(1), uint64(0x9000), false, int64(8), uint32(RemoteWrite), true)
	f.Add(uint8(12), uint32(1), uint32(1), uint64(0x9000), false, int64(8), uint32(RemoteWrite), true)
	f.Add(uint8(9), uint32(0), uint32(2), uint64(0x3000), false, int64(-1), uint32(RemoteRead), true)
	f.Add(uint8(1), uint32(0xFFFFFF00), uint32(1), uint64(0), false, int64(math.MaxInt64), uint32(0), false)
	f.Add(uint8(0), uint32(0), uint32(1), uint64(8), true, int64(math.MinInt64), uint32(0), false)
	f.Fuzz(func(t *testing.T, sel uint8, keyXor, pd uint32, va uint64, vaRel bool, length int64, need uint32, remote bool) {
		tb, m := fuzzFixture(t)
		key := m.keys[int(sel)%len(m.keys)] ^ keyXor
		if vaRel {
			if r := m.byIndex[key>>8]; r != nil {
				va += r.iova // wraps freely
			}
		}
		n := int(length)
		b, f := tb.Lookup(key, pd, va, n, Access(need), qpOf(remote))
		mr, off, want := m.lookup(key, pd, va, n, Access(need), remote)
		if f != want {
			t.Fatalf("Lookup(%#x, %d, %#x, %d, %v, %v) = %v, model says %v", key, pd, va, n, Access(need), remote, f, want)
		}
		checkSlice(t, m, b, f, mr, off, n)

		b, f = tb.LookupAtomic(key, pd, testQP, va)
		mr, off, want = m.lookup(key, pd, va, AtomicLen, RemoteAtomic, true)
		if want == FaultNone && va%8 != 0 {
			want, mr = FaultAlign, nil
		}
		if f != want {
			t.Fatalf("LookupAtomic(%#x, %d, testQP, %#x) = %v, model says %v", key, pd, va, f, want)
		}
		checkSlice(t, m, b, f, mr, off, AtomicLen)
	})
}

func checkSlice(t *testing.T, m *lookupModel, b []byte, f Fault, mr *modelRegion, off uint64, n int) {
	t.Helper()
	if f != FaultNone || mr == nil {
		if b != nil {
			t.Fatalf("%v with a %d-byte slice", f, len(b))
		}
		return
	}
	if want := mr.buf[off : off+uint64(n)]; !sameMemory(b, want) || cap(b) != n {
		t.Fatalf("slice (len %d cap %d) is not the model's buf[%d:%d]", len(b), cap(b), off, off+uint64(n))
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, buf := range m.bufs {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
		if lo >= start && lo+uintptr(n) <= start+uintptr(len(buf)) {
			return
		}
	}
	t.Fatalf("slice at %#x+%d lies in no registered buffer", lo, n)
}
