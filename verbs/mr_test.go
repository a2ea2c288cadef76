// Memory regions through the verbs: re-registration changes the keys (a peer's
// stale R_Key fails), mmap'd memory as an RDMA target, and the GID table.

package verbs

import (
	"errors"
	"slices"
	"testing"

	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
)

// write posts an RDMA WRITE of n bytes from a's buffer at off to raddr/rkey and
// returns its completion.
func write(t *testing.T, a *endpoint, id uint64, off uint64, n uint32, raddr uint64, rkey uint32) WC {
	t.Helper()
	mustPostSend(t, a.qp, SendWR{WRID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(off, n)},
		RemoteAddr: raddr, RKey: rkey})
	return pollN(t, a.scq, 1)[0]
}

func TestMRReregChangesKeys(t *testing.T) {
	da, db := memDevices(t)
	var evs eventLog
	defer db.RegisterEventHandler(evs.handler)()
	a, b := rcPair(t, da, db, epOpts{}, epOpts{})
	fill(a.buf[:8192], 3)
	wantWC := func(id uint64, n uint32) WC {
		return WC{WRID: id, Opcode: WCRDMAWrite, ByteLen: n, QPN: a.qp.QPN()}
	}

	key0 := b.mr.RKey()
	checkWC(t, write(t, a, 1, 0, 4096, b.mr.Addr(), key0), wantWC(1, 4096))
	checkBytes(t, "write with the first key", b.buf[:4096], a.buf[:4096])

	// Access change: same memory, new key byte, same index.
	if err := b.mr.Rereg(ReregAccess, nil, nil, 0, AccessLocalWrite|AccessRemoteWrite); err != nil {
		t.Fatalf("Rereg access: %v", err)
	}
	key1 := b.mr.RKey()
	if key1 == key0 || key1>>mr.KeyIndexShift != key0>>mr.KeyIndexShift || b.mr.LKey() != key1 {
		t.Fatalf("keys after rereg: R_Key %#x L_Key %#x, first %#x: want a new key byte at the same index", key1, b.mr.LKey(), key0)
	}
	if got := b.mr.Region().Access(); got != AccessLocalWrite|AccessRemoteWrite {
		t.Fatalf("access after rereg: %v", got)
	}
	fill(a.buf[:8192], 9)
	checkWC(t, write(t, a, 2, 100, 3000, b.mr.Addr()+8192, key1), wantWC(2, 3000))
	checkBytes(t, "write with the new key", b.buf[8192:8192+3000], a.buf[100:3100])

	// Translation change: another buffer at another IOVA.
	nbuf := make([]byte, 64<<10)
	if err := b.mr.Rereg(ReregTranslation, nil, nbuf, 0x900000, 0); err != nil {
		t.Fatalf("Rereg translation: %v", err)
	}
	key2 := b.mr.RKey()
	if key2 == key1 || b.mr.Addr() != 0x900000 || b.mr.Len() != len(nbuf) {
		t.Fatalf("after rereg: key %#x (was %#x), addr %#x, len %d", key2, key1, b.mr.Addr(), b.mr.Len())
	}
	checkWC(t, write(t, a, 3, 0, 2048, 0x900000+512, key2), wantWC(3, 2048))
	checkBytes(t, "write into the new translation", nbuf[512:512+2048], a.buf[:2048])

	// The previous key no longer works: REM_ACCESS_ERR, and the responder
	// raises QP_ACCESS_ERR. (Not the first: a new key byte differs only from
	// the last one, as rxe_get_next_key's, so two rereg's may bring key0 back.)
	checkErrWC(t, write(t, a, 4, 0, 64, 0x900000, key1), 4, WCRemAccessErr, a.qp.QPN())
	if !waitFor(func() bool { return evs.count(ofType(EventQPAccessErr)) == 1 }) {
		t.Fatalf("no QP_ACCESS_ERR on the responder: %+v", evs.filter(ofType(EventQPAccessErr)))
	}
	if ev := evs.filter(ofType(EventQPAccessErr))[0]; ev.QP != b.qp {
		t.Fatalf("QP_ACCESS_ERR for QP %p, want %p", ev.QP, b.qp)
	}
	checkBytes(t, "untouched by the failed write", nbuf[:512], make([]byte, 512))
}

func TestMRReregPDAndErrors(t *testing.T) {
	da, db := memDevices(t)
	pd1, _ := da.AllocPD()
	pd2, _ := da.AllocPD()
	pdB, _ := db.AllocPD()
	m, err := pd1.RegMR(make([]byte, 4096), 0, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	key := m.LKey()
	if err := m.Rereg(ReregPD, pd2, nil, 0, 0); err != nil {
		t.Fatalf("Rereg PD: %v", err)
	}
	if m.PD() != pd2 || m.Region().PD() != pd2.Handle() || m.LKey() == key {
		t.Fatalf("after Rereg PD: PD %p (want %p), table PD %d, key %#x (was %#x)", m.PD(), pd2, m.Region().PD(), m.LKey(), key)
	}
	if err := pd1.Dealloc().Wait(); err != nil {
		t.Fatalf("the old PD keeps a reference: %v", err)
	}
	if err := pd2.Dealloc().Wait(); !errors.Is(err, engine.ErrBusy) {
		t.Fatalf("Dealloc of the MR's new PD: %v, want ErrBusy", err)
	}
	key = m.LKey()
	for _, c := range []struct {
		name  string
		flags ReregFlags
		pd    *PD
		acc   Access
		want  []error
	}{
		{"no flags", 0, nil, 0, []error{engine.ErrInvalid, mr.ErrInvalid}},
		{"access without the flag", ReregPD, pd2, AccessRemoteRead, []error{engine.ErrInvalid, mr.ErrInvalid}},
		{"remote write without local write", ReregAccess, nil, AccessRemoteWrite, []error{engine.ErrInvalid, mr.ErrBadAccess}},
		{"nil PD", ReregPD, nil, 0, []error{engine.ErrInvalid}},
		{"PD of another device", ReregPD, pdB, 0, []error{engine.ErrWrongPD}},
	} {
		err := m.Rereg(c.flags, c.pd, nil, 0, c.acc)
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v, want %v", c.name, err, w)
			}
		}
		if m.LKey() != key {
			t.Errorf("%s: the failed Rereg changed the key", c.name)
		}
	}
	if err := m.Dereg().Wait(); err != nil {
		t.Fatal(err)
	}
	if err := m.Rereg(ReregAccess, nil, nil, 0, AccessLocalWrite); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Rereg after Dereg: %v, want ErrClosed", err)
	}
	if err := pd2.Dealloc().Wait(); err != nil {
		t.Fatal(err)
	}
	pdB.Dealloc()
}

// TestMRMmap registers mr.MapAnonymous memory on both sides and moves data into
// and out of it with RDMA WRITE and READ.
func TestMRMmap(t *testing.T) {
	const size = 1 << 20
	bufs := make([][]byte, 2)
	for i := range bufs {
		b, err := mr.MapAnonymous(size)
		if err != nil {
			t.Fatalf("MapAnonymous: %v", err)
		}
		bufs[i] = b
		t.Cleanup(func() { // after the devices close (registered first, runs last)
			if err := mr.Unmap(b); err != nil {
				t.Error(err)
			}
		})
	}
	da, db := memDevices(t)
	a, b := rcPair(t, da, db, epOpts{buf: bufs[0]}, epOpts{buf: bufs[1]})

	fill(a.buf[:256<<10], 5)
	checkWC(t, write(t, a, 1, 0, 256<<10, b.mr.Addr()+4096, b.mr.RKey()),
		WC{WRID: 1, Opcode: WCRDMAWrite, ByteLen: 256 << 10, QPN: a.qp.QPN()})
	checkBytes(t, "RDMA WRITE into mmap'd memory", bufs[1][4096:4096+256<<10], bufs[0][:256<<10])

	fill(b.buf[512<<10:], 77)
	mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(300<<10, 200<<10)},
		RemoteAddr: b.mr.Addr() + 512<<10 + 7, RKey: b.mr.RKey()})
	checkWC(t, pollN(t, a.scq, 1)[0], WC{WRID: 2, Opcode: WCRDMARead, ByteLen: 200 << 10, QPN: a.qp.QPN()})
	checkBytes(t, "RDMA READ from mmap'd memory", bufs[0][300<<10:500<<10], bufs[1][512<<10+7:512<<10+7+200<<10])
}

func TestQueryGID(t *testing.T) {
	da, _ := memDevices(t)
	g, err := da.QueryGID(0)
	if err != nil || g != gidA {
		t.Fatalf("QueryGID(0) = %v, %v; want %v", g, err, gidA)
	}
	for _, i := range []int{-1, 1, 1024} {
		if _, err := da.QueryGID(i); !errors.Is(err, ErrInvalid) {
			t.Errorf("QueryGID(%d): %v, want ErrInvalid", i, err)
		}
	}
	gids := da.GIDs()
	if !slices.Equal(gids, []netdev.GID{gidA}) || !slices.Equal(da.QueryPort().GIDs, gids) {
		t.Fatalf("GIDs %v, port GIDs %v", gids, da.QueryPort().GIDs)
	}
	gids[0] = netdev.GID{} // a copy
	if g, _ := da.QueryGID(0); g != gidA {
		t.Fatalf("GIDs returned the table itself")
	}
}
