package shm

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func pairOf(t *testing.T, n, esize int) (prod, cons *Ring, mem []byte) {
	t.Helper()
	r, err := Create("ring", RingSize(n, esize))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	// The consumer maps the memfd a second time, as another process would.
	fd, err := unix.Dup(r.FD())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Map(fd, 0, RingSize(n, esize))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r2.Close() })
	if prod, err = NewRing(r.Bytes(), 0, n, esize, true); err != nil {
		t.Fatal(err)
	}
	if cons, err = NewRing(r2.Bytes(), 0, n, esize, false); err != nil {
		t.Fatal(err)
	}
	return prod, cons, r.Bytes()
}

// Entries cross between two mappings in order, none lost or repeated, while
// the ring wraps many times; the indices' release and acquire order the
// entries' bytes (run with -race).
func TestRingTransfer(t *testing.T) {
	prod, cons, _ := pairOf(t, 8, 16)
	const total = 100000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); i < total; {
			e, err := prod.Reserve(0)
			if err != nil {
				t.Error(err)
				return
			}
			if e == nil {
				continue
			}
			binary.LittleEndian.PutUint64(e, i)
			binary.LittleEndian.PutUint64(e[8:], ^i)
			prod.Commit(1)
			i++
		}
	}()
	for want := uint64(0); want < total; {
		e, err := cons.Peek(0)
		if err != nil {
			t.Fatal(err)
		}
		if e == nil {
			continue
		}
		a, b := binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint64(e[8:])
		if a != want || b != ^want {
			t.Fatalf("entry %d: got %d/%x", want, a, b)
		}
		cons.Release(1)
		want++
	}
	wg.Wait()
}

func TestRingFull(t *testing.T) {
	prod, cons, _ := pairOf(t, 4, 8)
	for k := range 4 {
		if e, err := prod.Reserve(k); e == nil || err != nil {
			t.Fatalf("reserve %d: %v %v", k, e, err)
		}
	}
	if e, err := prod.Reserve(4); e != nil || err != nil {
		t.Fatalf("a fifth entry in a ring of 4: %v %v", e, err)
	}
	prod.Commit(4)
	if n, _ := prod.Free(); n != 0 {
		t.Fatalf("free %d after 4 of 4", n)
	}
	if n, _ := cons.Available(); n != 4 {
		t.Fatalf("available %d, want 4", n)
	}
	cons.Release(3)
	if n, _ := prod.Free(); n != 3 {
		t.Fatalf("free %d after 3 released", n)
	}
}

// The other side's index set to an impossible value is ErrCorrupt, not a read
// past the entries.
func TestRingCorruptIndex(t *testing.T) {
	prod, cons, mem := pairOf(t, 4, 8)
	binary.LittleEndian.PutUint32(mem[offProd:], 1000)
	if _, err := cons.Peek(0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("consumer with prod 1000 in a ring of 4: %v", err)
	}
	binary.LittleEndian.PutUint32(mem[offProd:], 0)
	binary.LittleEndian.PutUint32(mem[offCons:], 7) // consumed more than produced
	if _, err := prod.Reserve(0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("producer with cons 7 ahead of prod 0: %v", err)
	}
	// The producer's own index is private: a write to prod does not move it.
	binary.LittleEndian.PutUint32(mem[offCons:], 0)
	binary.LittleEndian.PutUint32(mem[offProd:], 3)
	if n, err := prod.Free(); n != 4 || err != nil {
		t.Fatalf("free %d %v after the shared prod was overwritten", n, err)
	}
}

func TestRingLayout(t *testing.T) {
	mem := make([]byte, RingSize(4, 8))
	for _, c := range []struct{ off, n, esize int }{
		{0, 3, 8}, {0, 4, 12}, {0, 8, 8}, {64, 4, 8}, {1, 4, 8}, {-64, 4, 8}, {0, 0, 8},
	} {
		if _, err := NewRing(mem, c.off, c.n, c.esize, true); !errors.Is(err, ErrLayout) {
			t.Errorf("%+v: %v, want ErrLayout", c, err)
		}
	}
	if _, err := NewRing(mem, 0, 4, 8, true); err != nil {
		t.Fatal(err)
	}
}

// A memfd another process could shrink is refused, so is one too small.
func TestMapRefuses(t *testing.T) {
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := Map(fd, 0, 4096); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("unsealed memfd: %v", err)
	}
	// On hugetlbfs, sealed: refused before it is mapped, whatever the pool.
	fd, err = unix.MemfdCreate("huge", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_HUGETLB)
	if err != nil {
		t.Fatalf("memfd_create(MFD_HUGETLB): %v", err)
	}
	if err := unix.Ftruncate(fd, 2<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	if _, err := Map(fd, 0, 2<<20); !errors.Is(err, ErrHugeTLB) {
		t.Fatalf("hugetlb memfd: %v", err)
	}
	r, err := Create("small", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct {
		off  int64
		size int
	}{{0, 8192}, {4096, 1}, {1, 1}, {0, 0}} {
		fd, _ := unix.Dup(r.FD())
		if _, err := Map(fd, c.off, c.size); !errors.Is(err, ErrLayout) {
			t.Errorf("%+v of a 4096-byte memfd: %v", c, err)
		}
	}
}

func TestEntries(t *testing.T) {
	e := make([]byte, SendEntrySize(2, 32))
	w := SendWQE{WRID: 7, Opcode: 2, Flags: 3, Imm: [4]byte{1, 2, 3, 4}, RemoteAddr: 1 << 40, RKey: 9,
		AH: 5, RemoteQPN: 0x11, RemoteQKey: 0x22, CompareAdd: 33, Swap: 44}
	sges := []SGE{{1, 2, 3}, {4, 5, 6}}
	if err := PutSendWQE(e, &w, sges, nil); err != nil {
		t.Fatal(err)
	}
	var g SendWQE
	GetSendWQE(e, &g)
	w.NumSGE = 2
	if g != w {
		t.Fatalf("got %+v, want %+v", g, w)
	}
	got := make([]SGE, 2)
	if err := GetSGEs(SendTail(e), int(g.NumSGE), got); err != nil || got[0] != sges[0] || got[1] != sges[1] {
		t.Fatalf("SGEs %v %v", got, err)
	}
	if err := GetSGEs(SendTail(e), 3, make([]SGE, 3)); !errors.Is(err, ErrLayout) {
		t.Fatalf("3 SGEs from a 2-SGE tail: %v", err)
	}
	if err := PutSendWQE(e, &w, nil, make([]byte, 33)); !errors.Is(err, ErrLayout) {
		t.Fatalf("33 inline bytes in a 32-byte tail: %v", err)
	}
	c := CQE{WRID: 1, Status: 5, Opcode: 128, VendorErr: 3, ByteLen: 4, Imm: [4]byte{9, 8, 7, 6}, QPN: 17,
		SrcQP: 18, Flags: 3, PKeyIndex: 1, SLID: 2, SL: 3, DLIDPathBits: 4}
	ce := make([]byte, CQEntrySize)
	PutCQE(ce, &c)
	var gc CQE
	GetCQE(ce, &gc)
	if gc != c {
		t.Fatalf("CQE %+v, want %+v", gc, c)
	}
	re := make([]byte, RecvEntrySize(1))
	if err := PutRecvWQE(re, 42, []SGE{{7, 8, 9}}); err != nil {
		t.Fatal(err)
	}
	if id, n := GetRecvWQE(re); id != 42 || n != 1 {
		t.Fatalf("recv %d %d", id, n)
	}
}

// A Buffer of less than a page is a whole page of its file: the daemon maps
// the pages an MR spans (perftest's rdma_cm exchange registers 112 bytes).
func TestBufferWholePages(t *testing.T) {
	b, err := Buffer(112)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeBuffer(b)
	if len(b) != 112 || cap(b) != 112 {
		t.Fatalf("len %d cap %d", len(b), cap(b))
	}
	r, off, err := BufferOf(b)
	if err != nil || off != 0 {
		t.Fatalf("BufferOf: %v at %d", err, off)
	}
	fd, _ := unix.Dup(r.FD())
	m, err := Map(fd, 0, os.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	copy(b, "seen by the daemon")
	if string(m.Bytes()[:18]) != "seen by the daemon" {
		t.Fatalf("%q", m.Bytes()[:18])
	}
}
