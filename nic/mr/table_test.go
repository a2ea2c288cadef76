package mr

import (
	"errors"
	"math"
	"testing"
)

func TestNewTableCapacity(t *testing.T) {
	for _, c := range []struct{ max, want int }{
		{0, DefaultMaxRegions}, {-1, DefaultMaxRegions}, {1, 1}, {5000, 5000},
		{MaxRegions, MaxRegions}, {MaxRegions + 10, MaxRegions},
	} {
		if got := NewTable(c.max).Cap(); got != c.want {
			t.Errorf("NewTable(%d).Cap() = %d, want %d", c.max, got, c.want)
		}
	}
}

func TestRegisterAccessors(t *testing.T) {
	tb := NewTable(4)
	buf := make([]byte, 100, 200)
	r := mustRegister(t, tb, 7, buf, 0, LocalWrite|RemoteRead)
	if r.LKey() != r.RKey() {
		t.Errorf("LKey %#x != RKey %#x", r.LKey(), r.RKey())
	}
	if idx := r.LKey() >> KeyIndexShift; idx != MinIndex {
		t.Errorf("first index = %d, want %d", idx, MinIndex)
	}
	if got, want := r.Addr(), hostAddr(buf); got != want {
		t.Errorf("Addr() = %#x, want the buffer's address %#x", got, want)
	}
	if r.PD() != 7 || r.Len() != 100 || r.Access() != LocalWrite|RemoteRead || !r.Valid() || r.FastReg() {
		t.Errorf("got PD %d Len %d Access %v Valid %v FastReg %v, want 7 100 LocalWrite|RemoteRead true false",
			r.PD(), r.Len(), r.Access(), r.Valid(), r.FastReg())
	}
	if b := r.Bytes(); !sameMemory(b, buf) || cap(b) != len(buf) {
		t.Errorf("Bytes() is not buf with cap == len (len %d cap %d)", len(b), cap(b))
	}
	if tb.Len() != 1 {
		t.Errorf("Len() = %d, want 1", tb.Len())
	}

	z := mustRegister(t, tb, 7, buf, 0, RemoteRead|ZeroBased)
	if z.Addr() != 0 {
		t.Errorf("ZeroBased Addr() = %#x, want 0", z.Addr())
	}
	g := mustRegister(t, tb, 7, buf, 0xabc000, RemoteRead)
	if g.Addr() != 0xabc000 {
		t.Errorf("given IOVA: Addr() = %#x, want 0xabc000", g.Addr())
	}
	top := mustRegister(t, tb, 7, buf, math.MaxUint64-99, RemoteRead)
	if top.Addr() != math.MaxUint64-99 {
		t.Errorf("top IOVA: Addr() = %#x", top.Addr())
	}
	if tb.Len() != 4 {
		t.Errorf("Len() = %d, want 4", tb.Len())
	}
}

func TestRegisterErrors(t *testing.T) {
	buf := make([]byte, 64)
	for _, c := range []struct {
		name   string
		buf    []byte
		iova   uint64
		access Access
		want   error
	}{
		{"remote write without local write", buf, 0, RemoteWrite, ErrBadAccess},
		{"remote atomic without local write", buf, 0, RemoteRead | RemoteAtomic, ErrBadAccess},
		{"unknown flag", buf, 0, LocalWrite | 1<<12, ErrBadAccess},
		{"on demand", buf, 0, LocalWrite | OnDemand, ErrNotSupported},
		{"flush persistent", buf, 0, LocalWrite | FlushPersistent, ErrNotSupported},
		{"nil buffer", nil, 0, LocalWrite, ErrBadLength},
		{"empty buffer", buf[:0], 0, LocalWrite, ErrBadLength},
		{"wraps past 2^64", buf, math.MaxUint64 - 62, LocalWrite, ErrBadLength},
		{"wraps at the top", buf, math.MaxUint64, LocalWrite, ErrBadLength},
		{"zero based with an iova", buf, 0x1000, LocalWrite | ZeroBased, ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := NewTable(2)
			r, err := tb.Register(1, c.buf, c.iova, c.access)
			if !errors.Is(err, c.want) || r != nil {
				t.Fatalf("Register = %v, %v; want nil, %v", r, err, c.want)
			}
			if tb.Len() != 0 {
				t.Errorf("Len() = %d after a failed Register", tb.Len())
			}
		})
	}
}

func TestRegisterTooMany(t *testing.T) {
	tb := NewTable(3)
	buf := make([]byte, 8)
	var rs []*Region
	for range 3 {
		rs = append(rs, mustRegister(t, tb, 1, buf, 0, LocalWrite))
	}
	if _, err := tb.Register(1, buf, 0, LocalWrite); !errors.Is(err, ErrTooMany) {
		t.Fatalf("4th Register: %v, want ErrTooMany", err)
	}
	if _, err := tb.AllocFastReg(1, MaxFastRegPages); !errors.Is(err, ErrTooMany) {
		t.Fatalf("AllocFastReg on a full table: %v, want ErrTooMany", err)
	}
	mustDeregister(t, tb, rs[1])
	r := mustRegister(t, tb, 1, buf, 0, LocalWrite)
	if r.LKey()>>KeyIndexShift != rs[1].LKey()>>KeyIndexShift {
		t.Errorf("reused index %d, want the freed %d", r.LKey()>>KeyIndexShift, rs[1].LKey()>>KeyIndexShift)
	}
}

// TestIndexReuseOrder: never-used indices first, then the one freed longest ago.
func TestIndexReuseOrder(t *testing.T) {
	tb := NewTable(4)
	buf := make([]byte, 8)
	idx := func(r *Region) uint32 { return r.LKey() >> KeyIndexShift }
	a := mustRegister(t, tb, 1, buf, 0, LocalWrite)
	b := mustRegister(t, tb, 1, buf, 0, LocalWrite)
	mustDeregister(t, tb, b)
	mustDeregister(t, tb, a)
	c := mustRegister(t, tb, 1, buf, 0, LocalWrite)
	d := mustRegister(t, tb, 1, buf, 0, LocalWrite)
	e := mustRegister(t, tb, 1, buf, 0, LocalWrite)
	f := mustRegister(t, tb, 1, buf, 0, LocalWrite)
	got := []uint32{idx(c), idx(d), idx(e), idx(f)}
	want := []uint32{3, 4, idx(b), idx(a)}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("indices %v, want %v", got, want)
		}
	}
}

// TestKeyByteChangesOnReuse: a stale R_Key from an earlier registration at the same
// index never matches, for 255 reuses in a row.
func TestKeyByteChangesOnReuse(t *testing.T) {
	tb := NewTable(1)
	buf := make([]byte, 64)
	r := mustRegister(t, tb, 1, buf, 0x1000, LocalWrite|RemoteWrite)
	first := r.RKey()
	var stale []uint32
	for i := range 255 {
		old := r.RKey()
		mustDeregister(t, tb, r)
		if _, f := tb.Lookup(old, 1, 0x1000, 8, RemoteWrite, testQP); f != FaultInvalidKey {
			t.Fatalf("lookup after Deregister: %v, want invalid key", f)
		}
		r = mustRegister(t, tb, 1, buf, 0x1000, LocalWrite|RemoteWrite)
		if r.RKey()>>KeyIndexShift != old>>KeyIndexShift {
			t.Fatalf("index changed: %#x -> %#x", old, r.RKey())
		}
		if got, want := uint8(r.RKey()), uint8(old)+1; got != want {
			t.Fatalf("reuse %d: key byte %#x, want %#x (previous + 1)", i, got, want)
		}
		stale = append(stale, old)
		for _, k := range stale {
			if _, f := tb.Lookup(k, 1, 0x1000, 8, RemoteWrite, testQP); f != FaultInvalidKey {
				t.Fatalf("stale key %#x: %v, want invalid key", k, f)
			}
		}
		if _, f := tb.Lookup(r.RKey(), 1, 0x1000, 8, RemoteWrite, testQP); f != FaultNone {
			t.Fatalf("current key %#x: %v", r.RKey(), f)
		}
	}
	// The 256th registration brings the first key byte back: 8 bits is all IBTA has.
	mustDeregister(t, tb, r)
	r = mustRegister(t, tb, 1, buf, 0x1000, LocalWrite|RemoteWrite)
	if r.RKey() != first {
		t.Errorf("after 256 registrations key %#x, want the first key %#x again", r.RKey(), first)
	}
}

func TestDeregister(t *testing.T) {
	tb := NewTable(4)
	other := NewTable(4)
	buf := make([]byte, 64)
	r := mustRegister(t, tb, 1, buf, 0, allRights)
	key := r.LKey()
	mustDeregister(t, tb, r)
	if r.Valid() || r.LKey() != key || r.Len() != 64 {
		t.Errorf("after Deregister: Valid %v LKey %#x Len %d, want false %#x 64", r.Valid(), r.LKey(), r.Len(), key)
	}
	if tb.Len() != 0 {
		t.Errorf("Len() = %d, want 0", tb.Len())
	}
	for name, r := range map[string]*Region{"twice": r, "nil": nil, "other table": mustRegister(t, other, 1, buf, 0, 0)} {
		if err := tb.Deregister(r); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Deregister %s: %v, want ErrInvalidKey", name, err)
		}
	}
	if _, err := tb.Reregister(r, ReregPD, 2, nil, 0, 0); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Reregister after Deregister: %v, want ErrInvalidKey", err)
	}
}

func TestReregister(t *testing.T) {
	bufA, bufB := pattern(256, 0xA0), pattern(128, 0xB0)
	const iovaA, iovaB = 0x10000, 0x20000
	for _, c := range []struct {
		name    string
		flags   ReregFlags
		pd      uint32
		buf     []byte
		iova    uint64
		access  Access
		wantPD  uint32
		wantBuf []byte
		wantVA  uint64
		wantAcc Access
	}{
		{"pd", ReregPD, 2, nil, 0, 0, 2, bufA, iovaA, LocalWrite | RemoteRead},
		{"access", ReregAccess, 9, nil, 0, LocalWrite | RemoteWrite, 1, bufA, iovaA, LocalWrite | RemoteWrite},
		{"translation", ReregTranslation, 9, bufB, iovaB, 0, 1, bufB, iovaB, LocalWrite | RemoteRead},
		{"translation default iova", ReregTranslation, 9, bufB, 0, 0, 1, bufB, hostAddr(bufB), LocalWrite | RemoteRead},
		{"translation to zero based", ReregTranslation | ReregAccess, 9, bufB, 0, RemoteRead | ZeroBased, 1, bufB, 0, RemoteRead | ZeroBased},
		{"all", ReregTranslation | ReregPD | ReregAccess, 3, bufB, iovaB, allRights, 3, bufB, iovaB, allRights},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := NewTable(2)
			r := mustRegister(t, tb, 1, bufA, iovaA, LocalWrite|RemoteRead)
			old := r.RKey()
			got, err := tb.Reregister(r, c.flags, c.pd, c.buf, c.iova, c.access)
			if err != nil || got != r {
				t.Fatalf("Reregister = %p, %v; want r, nil", got, err)
			}
			if r.RKey()>>KeyIndexShift != old>>KeyIndexShift || uint8(r.RKey()) != uint8(old)+1 {
				t.Errorf("key %#x -> %#x, want same index and key byte + 1", old, r.RKey())
			}
			if r.PD() != c.wantPD || !sameMemory(r.Bytes(), c.wantBuf) || r.Addr() != c.wantVA || r.Access() != c.wantAcc {
				t.Errorf("got PD %d Addr %#x Access %v Len %d, want PD %d Addr %#x Access %v Len %d",
					r.PD(), r.Addr(), r.Access(), r.Len(), c.wantPD, c.wantVA, c.wantAcc, len(c.wantBuf))
			}
			need := c.wantAcc & RemoteAccess
			if _, f := tb.Lookup(old, c.wantPD, c.wantVA, 8, need, testQP); f != FaultInvalidKey {
				t.Errorf("old rkey after Reregister: %v, want invalid key", f)
			}
			b, f := tb.Lookup(r.RKey(), c.wantPD, c.wantVA, 8, need, testQP)
			if f != FaultNone || !sameMemory(b, c.wantBuf[:8]) {
				t.Errorf("new rkey: %v (slice ok: %v)", f, sameMemory(b, c.wantBuf[:8]))
			}
			if c.flags&ReregPD != 0 {
				if _, f := tb.Lookup(r.RKey(), 1, c.wantVA, 8, need, testQP); f != FaultPD {
					t.Errorf("new key with the old PD: %v, want PD mismatch", f)
				}
			}
			if c.flags&ReregTranslation != 0 {
				if _, f := tb.Lookup(r.RKey(), c.wantPD, c.wantVA+uint64(len(c.wantBuf)), 1, need, testQP); f != FaultBounds {
					t.Errorf("past the new end: %v, want out of bounds", f)
				}
			}
		})
	}
}

func TestReregisterErrors(t *testing.T) {
	buf := make([]byte, 64)
	for _, c := range []struct {
		name   string
		flags  ReregFlags
		buf    []byte
		iova   uint64
		access Access
		zb     bool // register ZeroBased first
		want   error
	}{
		{"no flags", 0, nil, 0, 0, false, ErrInvalid},
		{"unknown flag", ReregPD | 8, nil, 0, 0, false, ErrInvalid},
		{"access without the flag", ReregPD, nil, 0, LocalWrite, false, ErrInvalid},
		{"bad access", ReregAccess, nil, 0, RemoteWrite, false, ErrBadAccess},
		{"unsupported access", ReregAccess, nil, 0, LocalWrite | OnDemand, false, ErrNotSupported},
		{"zero based on without translation", ReregAccess, nil, 0, RemoteRead | ZeroBased, false, ErrInvalid},
		{"zero based off without translation", ReregAccess, nil, 0, RemoteRead, true, ErrInvalid},
		{"empty translation", ReregTranslation, nil, 0, 0, false, ErrBadLength},
		{"wrapping translation", ReregTranslation, buf, math.MaxUint64 - 10, 0, false, ErrBadLength},
		{"zero based translation with an iova", ReregTranslation | ReregAccess, buf, 5, RemoteRead | ZeroBased, false, ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := NewTable(2)
			acc := LocalWrite | RemoteRead
			if c.zb {
				acc |= ZeroBased
			}
			r := mustRegister(t, tb, 1, buf, 0, acc)
			key, addr := r.RKey(), r.Addr()
			if _, err := tb.Reregister(r, c.flags, 2, c.buf, c.iova, c.access); !errors.Is(err, c.want) {
				t.Fatalf("Reregister: %v, want %v", err, c.want)
			}
			if r.RKey() != key || r.PD() != 1 || r.Access() != acc || r.Addr() != addr {
				t.Errorf("a failed Reregister changed the region")
			}
			if _, f := tb.Lookup(key, 1, addr, 8, RemoteRead, testQP); f != FaultNone {
				t.Errorf("old key after a failed Reregister: %v", f)
			}
		})
	}
}

func TestFastReg(t *testing.T) {
	tb := NewTable(4)
	buf := pattern(128, 0)
	fr, err := tb.AllocFastReg(5, MaxFastRegPages)
	if err != nil {
		t.Fatal(err)
	}
	if fr.Valid() || !fr.FastReg() || fr.Len() != 0 || fr.PD() != 5 {
		t.Errorf("new fast-reg region: Valid %v FastReg %v Len %d PD %d", fr.Valid(), fr.FastReg(), fr.Len(), fr.PD())
	}
	if _, f := tb.Lookup(fr.LKey(), 5, 0, 1, 0, Local); f != FaultInvalidKey {
		t.Errorf("lookup of a free fast-reg region: %v, want invalid key", f)
	}
	base := fr.LKey() &^ 0xFF
	key := base | uint32(uint8(fr.LKey())+0x42)

	for _, c := range []struct {
		name string
		r    *Region
		key  uint32
		pd   uint32
		acc  Access
		want error
	}{
		{"other index", fr, base + 1<<KeyIndexShift, 5, RemoteRead, ErrInvalid},
		{"other PD", fr, key, 6, RemoteRead, ErrInvalid},
		{"bad access", fr, key, 5, RemoteWrite, ErrBadAccess},
		{"nil region", nil, key, 5, RemoteRead, ErrInvalidKey},
	} {
		if err := fastReg(t, tb, c.r, c.key, c.pd, buf, 0x9000, c.acc); !errors.Is(err, c.want) {
			t.Errorf("FastReg %s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := fastReg(t, tb, fr, key, 5, buf, 0x9000, LocalWrite|RemoteWrite); err != nil {
		t.Fatalf("FastReg: %v", err)
	}
	if fr.LKey() != key || fr.RKey() != key || !fr.Valid() || fr.Addr() != 0x9000 || !sameMemory(fr.Bytes(), buf) {
		t.Errorf("after FastReg: key %#x Valid %v Addr %#x, want %#x true 0x9000", fr.LKey(), fr.Valid(), fr.Addr(), key)
	}
	if b, f := tb.Lookup(key, 5, 0x9010, 16, RemoteWrite, testQP); f != FaultNone || !sameMemory(b, buf[16:32]) {
		t.Errorf("lookup after FastReg: %v", f)
	}
	if err := fastReg(t, tb, fr, key+1, 5, buf, 0x9000, LocalWrite); !errors.Is(err, ErrInvalid) {
		t.Errorf("FastReg of a valid region: %v, want ErrInvalid", err)
	}
	if _, err := tb.Reregister(fr, ReregPD, 1, nil, 0, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Reregister of a fast-reg region: %v, want ErrInvalid", err)
	}

	// Invalidate: key, type and PD checks, then Free until the next FastReg.
	plain := mustRegister(t, tb, 5, buf, 0, allRights)
	for _, c := range []struct {
		name string
		key  uint32
		pd   uint32
		want Fault
	}{
		{"wrong key byte", key ^ 1, 5, FaultInvalidKey},
		{"no such index", 0xFFFF00, 5, FaultInvalidKey},
		{"index 0", 0x42, 5, FaultInvalidKey},
		{"plain region", plain.RKey(), 5, FaultInvalidKey},
		{"other PD", key, 6, FaultPD},
	} {
		if f := tb.Invalidate(c.key, c.pd, Local); f != c.want {
			t.Errorf("Invalidate %s: %v, want %v", c.name, f, c.want)
		}
	}
	if !fr.Valid() || !plain.Valid() {
		t.Fatalf("a failed Invalidate invalidated something")
	}
	if f := tb.Invalidate(key, 5, Local); f != FaultNone {
		t.Fatalf("Invalidate: %v", f)
	}
	if fr.Valid() {
		t.Errorf("Valid() after Invalidate")
	}
	if _, f := tb.Lookup(key, 5, 0x9000, 8, RemoteWrite, testQP); f != FaultInvalidKey {
		t.Errorf("lookup after Invalidate: %v, want invalid key", f)
	}
	if f := tb.Invalidate(key, 5, Local); f != FaultInvalidKey {
		t.Errorf("second Invalidate: %v, want invalid key (a double invalidation is an error)", f)
	}
	key2 := base | uint32(uint8(key)+1)
	if err := fastReg(t, tb, fr, key2, 5, buf[:64], 0, RemoteRead); err != nil {
		t.Fatalf("FastReg after Invalidate: %v", err)
	}
	if _, f := tb.Lookup(key, 5, 0x9000, 8, RemoteRead, testQP); f != FaultInvalidKey {
		t.Errorf("key of the previous fast registration: %v, want invalid key", f)
	}
	if _, f := tb.Lookup(key2, 5, hostAddr(buf), 64, RemoteRead, testQP); f != FaultNone {
		t.Errorf("key of the new fast registration: %v", f)
	}
	if err := fastReg(t, tb, plain, plain.LKey(), 5, buf, 0, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("FastReg of a plain region: %v, want ErrInvalid", err)
	}
	mustDeregister(t, tb, fr)
	if err := fastReg(t, tb, fr, key2, 5, buf, 0, 0); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("FastReg after Deregister: %v, want ErrInvalidKey", err)
	}
	if f := tb.Invalidate(key2, 5, Local); f != FaultInvalidKey {
		t.Errorf("Invalidate after Deregister: %v, want invalid key", f)
	}
	// The next registration at fr's index follows the consumer's key byte.
	mustDeregister(t, tb, plain)
	for tb.Len() < tb.Cap() {
		r := mustRegister(t, tb, 5, buf, 0, 0)
		if r.LKey()&^0xFF == base && uint8(r.LKey()) != uint8(key2)+1 {
			t.Errorf("key after fast registrations %#x, want byte %#x", r.LKey(), uint8(key2)+1)
		}
	}
}

// TestRegions: the walk yields the regions in the table, in index order, across
// chunks, skips deregistered ones, includes fast-reg ones, stops when told and
// allocates nothing.
func TestRegions(t *testing.T) {
	tb := NewTable(3 * chunkSize)
	var live []*Region
	for i := range chunkSize + 10 {
		r := mustRegister(t, tb, uint32(i%3), make([]byte, 8), 0, LocalWrite)
		if i%7 == 3 {
			if err := tb.Deregister(r); err != nil {
				t.Fatal(err)
			}
			continue
		}
		live = append(live, r)
	}
	f, err := tb.AllocFastReg(9, MaxFastRegPages)
	if err != nil {
		t.Fatal(err)
	}
	live = append(live, f)
	var got []*Region
	for r := range tb.Regions {
		got = append(got, r)
	}
	if len(got) != len(live) || len(got) != tb.Len() {
		t.Fatalf("Regions yielded %d regions, want %d (Len %d)", len(got), len(live), tb.Len())
	}
	for i := range got {
		if got[i] != live[i] {
			t.Fatalf("region %d: LKey %#x, want %#x", i, got[i].LKey(), live[i].LKey())
		}
	}
	if !got[len(got)-1].FastReg() || got[len(got)-1].PD() != 9 {
		t.Errorf("the fast-reg region is missing from the walk")
	}
	n := 0
	tb.Regions(func(*Region) bool { n++; return n < 5 })
	if n != 5 {
		t.Errorf("yield returning false: %d calls, want 5", n)
	}
	if a := testing.AllocsPerRun(10, func() { tb.Regions(func(*Region) bool { return true }) }); a != 0 {
		t.Errorf("Regions allocates %v times per walk", a)
	}
	for range NewTable(4).Regions {
		t.Errorf("an empty table yields a region")
	}
}
