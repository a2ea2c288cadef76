package mr

import (
	"cmp"
	"errors"
	"math"
	"slices"
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
	if idx := r.LKey() >> KeyIndexShift; idx < MinIndex || idx >= MinIndex+4 {
		t.Errorf("first index = %d, want one of %d-%d", idx, MinIndex, MinIndex+3)
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
	// c and d take the two never-used indices, in whatever order.
	got := []uint32{idx(c), idx(d), idx(e), idx(f)}
	unused := map[uint32]bool{1: true, 2: true, 3: true, 4: true}
	delete(unused, idx(a))
	delete(unused, idx(b))
	if !unused[got[0]] || !unused[got[1]] || got[0] == got[1] || got[2] != idx(b) || got[3] != idx(a) {
		t.Fatalf("indices %v: want the never-used two, then %d (freed first), then %d", got, idx(b), idx(a))
	}
}

// TestKeyByteUnpredictableOnReuse: each registration at an index takes a random
// key byte other than the last (rxe_get_next_key), so a peer that held the old
// key cannot name the new registration: it never matches the very last key,
// and the old key + 1 is right only as often as chance makes it (issue:
// re-registration gave key+1 10,000 times of 10,000).
func TestKeyByteUnpredictableOnReuse(t *testing.T) {
	tb := NewTable(1)
	buf := make([]byte, 64)
	r := mustRegister(t, tb, 1, buf, 0x1000, LocalWrite|RemoteWrite)
	const n = 10000
	var seen [256]int
	plusOne := 0
	for i := range n {
		old := r.RKey()
		if i%2 == 0 {
			mustDeregister(t, tb, r)
			r = mustRegister(t, tb, 1, buf, 0x1000, LocalWrite|RemoteWrite)
		} else if _, err := tb.Reregister(r, ReregAccess, 1, nil, 0, LocalWrite|RemoteWrite); err != nil {
			t.Fatal(err)
		}
		if r.RKey()>>KeyIndexShift != old>>KeyIndexShift {
			t.Fatalf("index changed: %#x -> %#x", old, r.RKey())
		}
		if uint8(r.RKey()) == uint8(old) {
			t.Fatalf("round %d: key byte %#x again", i, uint8(old))
		}
		if _, f := tb.Lookup(old, 1, 0x1000, 8, RemoteWrite, testQP); f != FaultInvalidKey {
			t.Fatalf("the previous key %#x: %v, want invalid key", old, f)
		}
		if uint8(r.RKey()) == uint8(old)+1 {
			plusOne++
		}
		seen[uint8(r.RKey())]++
	}
	// Chance gives old+1 with p = 1/255: 39 expected, 200 is 25 standard
	// deviations away; each byte appears about 39 times, none ever missing.
	if plusOne > 200 {
		t.Errorf("the next key byte was the old one + 1 in %d of %d registrations", plusOne, n)
	}
	for b, c := range seen {
		if c == 0 {
			t.Errorf("key byte %#x never handed out in %d registrations", b, n)
		}
	}
}

// TestIndicesUnwalkable: never-used indices come in a random order over the
// table's range, so the key of one region says nothing of the next region's
// index (issue: indices 1, 2, 3, ... opened a region to 256 guesses).
func TestIndicesUnwalkable(t *testing.T) {
	tb := NewTable(0)
	buf := make([]byte, 64)
	const n = 1000
	seen := map[uint32]bool{}
	near := 0
	var prev uint32
	lo, hi := uint32(MaxIndex), uint32(0)
	for i := range n {
		idx := mustRegister(t, tb, 1, buf, 0, LocalWrite).LKey() >> KeyIndexShift
		if seen[idx] || idx < MinIndex || idx > uint32(MinIndex+DefaultMaxRegions-1) {
			t.Fatalf("registration %d: index %#x repeated or out of range", i, idx)
		}
		seen[idx] = true
		if i > 0 && idx-prev <= 256 {
			near++ // within 256 indices above the previous one
		}
		prev, lo, hi = idx, min(lo, idx), max(hi, idx)
	}
	// By chance about n*256/2^18 = 1 of them is near its predecessor.
	if near > 20 {
		t.Errorf("%d of %d indices within 256 above the previous one: walkable", near, n)
	}
	if hi-lo < DefaultMaxRegions/2 {
		t.Errorf("%d indices span only %#x-%#x of a range of %d", n, lo, hi, DefaultMaxRegions)
	}
}

// TestPermutation: the index order is a bijection of [0, n) for sizes around
// the powers of two the Feistel network rounds up to.
func TestPermutation(t *testing.T) {
	for _, n := range []uint32{1, 2, 3, 4, 5, 63, 64, 65, 1000, 4096, 4097} {
		p := newPermutation(n)
		hit := make([]bool, n)
		for x := range n {
			y := p.at(x)
			if y >= n || hit[y] {
				t.Fatalf("n %d: %d -> %d, out of range or repeated", n, x, y)
			}
			hit[y] = true
		}
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
			if r.RKey()>>KeyIndexShift != old>>KeyIndexShift || uint8(r.RKey()) == uint8(old) {
				t.Errorf("key %#x -> %#x, want same index and another key byte", old, r.RKey())
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
	// The next registration at fr's index takes a key byte other than the
	// consumer's last one.
	mustDeregister(t, tb, plain)
	for tb.Len() < tb.Cap() {
		r := mustRegister(t, tb, 5, buf, 0, 0)
		if r.LKey()&^0xFF == base && uint8(r.LKey()) == uint8(key2) {
			t.Errorf("key after fast registrations %#x: the consumer's key byte again", r.LKey())
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
	slices.SortFunc(live, func(a, b *Region) int { return cmp.Compare(a.LKey()>>KeyIndexShift, b.LKey()>>KeyIndexShift) })
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
	if !slices.ContainsFunc(got, func(r *Region) bool { return r == f && r.FastReg() && r.PD() == 9 }) {
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
