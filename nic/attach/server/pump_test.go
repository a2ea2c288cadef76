package server

import (
	"testing"

	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
)

// TestDrainMovesEveryReceive: one pass hands the device every receive on the
// ring, not one batch of them. The engine takes up to 64 frames after each
// pass; a pump that moved 16 receives a pass let a burst of UD messages find
// receives still on the ring, dropped them (rcvd_dropped) and left
// perftest's UD server waiting forever. A full device queue stops the pass
// and leaves the rest on the ring.
func TestDrainMovesEveryReceive(t *testing.T) {
	const n, esize = 256, 64
	mem := make([]byte, shm.RingSize(n, esize))
	prod, err := shm.NewRing(mem, 0, n, esize, true)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := shm.NewRing(mem, 0, n, esize, false)
	if err != nil {
		t.Fatal(err)
	}
	post := func(k int) {
		for i := range k {
			e, err := prod.Reserve(i)
			if err != nil {
				t.Fatal(err)
			}
			if err := shm.PutRecvWQE(e, uint64(i), nil); err != nil {
				t.Fatal(err)
			}
		}
		prod.Commit(k)
	}
	r := newRecvRing(cons, 1)
	var got []uint64
	room := 1 << 30
	device := func(wrs []verbs.RecvWR) (int, error) {
		k := min(len(wrs), room)
		for _, w := range wrs[:k] {
			got = append(got, w.WRID)
		}
		room -= k
		if k < len(wrs) {
			return k, verbs.ErrQueueFull
		}
		return k, nil
	}

	post(200)
	if moved, err := r.drain(device); !moved || err != nil || len(got) != 200 {
		t.Fatalf("one pass moved %d of 200 receives (%v, %v)", len(got), moved, err)
	}
	for i, id := range got {
		if id != uint64(i) {
			t.Fatalf("receive %d has wr_id %d: out of order", i, id)
		}
	}
	if left, _ := cons.Available(); left != 0 {
		t.Fatalf("%d left on the ring", left)
	}

	got, room = nil, 40
	post(100)
	if moved, err := r.drain(device); !moved || err != nil || len(got) != 40 {
		t.Fatalf("a device with room for 40 took %d (%v, %v)", len(got), moved, err)
	}
	if left, _ := cons.Available(); left != 60 {
		t.Fatalf("%d left on the ring, want 60", left)
	}
}

// TestPendingBounded: the completions the pump makes for refused WRs wait in
// at most the CQ's size, and their storage stays within twice that, for a
// client that never polls and for one that polls one completion at a time
// (then pending never empties, and its front must be dropped as it goes).
func TestPendingBounded(t *testing.T) {
	const n = 16
	ring, err := shm.NewRing(make([]byte, shm.RingSize(n, shm.CQEntrySize)), 0, n, shm.CQEntrySize, true)
	if err != nil {
		t.Fatal(err)
	}
	c := &cqObj{ring: ring}
	lost := 0
	for i := range 1000 { // never polled
		if !c.addPending(shm.CQE{WRID: uint64(i)}) {
			lost++
		}
	}
	if lost != 1000-n || len(c.pending)-c.pendHead != n {
		t.Fatalf("never polled: %d lost, %d waiting; want %d and %d", lost, len(c.pending)-c.pendHead, 1000-n, n)
	}
	for i := range 100000 { // polled one at a time, as fast as refused
		c.pendHead++ // complete moved one to the ring
		if !c.addPending(shm.CQE{WRID: uint64(i)}) {
			t.Fatalf("refusal %d lost with room", i)
		}
		if cap(c.pending) > 2*n+1 {
			t.Fatalf("refusal %d: pending's storage %d entries for a CQ of %d", i, cap(c.pending), n)
		}
	}
}

// TestSendWRDecodes: a send entry becomes the WR the process wrote: inline
// data for every opcode that carries it (SEND_WITH_INV's was read as SGEs,
// and the QP went to the error state), SGEs otherwise, the invalidated R_Key
// and immediate data from the same four bytes, and an ATOMIC_WRITE's 8 bytes
// from swap as the process laid them out (ibv_wr_atomic_write).
func TestSendWRDecodes(t *testing.T) {
	ss := &session{}
	q := &qpObj{typ: verbs.RC, inline: 64, wrs: make([]verbs.SendWR, 1), sgls: [][]verbs.SGE{make([]verbs.SGE, 0, 2)},
		scratch: make([]shm.SGE, 2)}
	inv := [4]byte{0x78, 0x56, 0x34, 0x12} // 0x12345678, little-endian
	sge := []shm.SGE{{Addr: 0x1000, Length: 16, LKey: 7}}
	for _, tc := range []struct {
		op     verbs.WROpcode
		inline bool
		swap   uint64
	}{
		{verbs.WRSend, true, 0}, {verbs.WRSendWithImm, true, 0}, {verbs.WRSendWithInv, true, 0},
		{verbs.WRRDMAWrite, true, 0}, {verbs.WRRDMAWriteWithImm, true, 0},
		{verbs.WRSendWithInv, false, 0}, {verbs.WRRDMARead, false, 0},
		{verbs.WRAtomicWrite, false, 0x0807060504030201},
	} {
		e := make([]byte, shm.SendHeadLen+64)
		h := shm.SendWQE{WRID: 9, Opcode: uint32(tc.op), Imm: inv, RKey: 5, RemoteAddr: 0x2000, Swap: tc.swap}
		var err error
		if tc.inline {
			h.Flags = uint32(verbs.SendInline)
			err = shm.PutSendWQE(e, &h, nil, []byte("inline"))
		} else {
			err = shm.PutSendWQE(e, &h, sge, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := ss.sendWR(q, e, 0); err != nil {
			t.Fatalf("%v: %v", tc.op, err)
		}
		w := q.wrs[0]
		switch {
		case w.Opcode != tc.op || w.WRID != 9 || w.RKey != 5 || w.RemoteAddr != 0x2000:
			t.Errorf("%v: %+v", tc.op, w)
		case w.InvalidateRKey != 0x12345678 || w.ImmData != 0x78563412:
			t.Errorf("%v: invalidate %#x, imm %#x", tc.op, w.InvalidateRKey, w.ImmData)
		case tc.inline && (string(w.InlineData) != "inline" || len(w.SGL) != 0):
			t.Errorf("%v inline: data %q, SGL %v", tc.op, w.InlineData, w.SGL)
		case !tc.inline && (w.InlineData != nil || len(w.SGL) != 1 || w.SGL[0] != (verbs.SGE{Addr: 0x1000, Length: 16, LKey: 7})):
			t.Errorf("%v: data %q, SGL %v", tc.op, w.InlineData, w.SGL)
		case tc.op == verbs.WRAtomicWrite && w.AtomicData != [8]byte{1, 2, 3, 4, 5, 6, 7, 8}:
			t.Errorf("atomic write's data %v", w.AtomicData)
		}
	}
}
