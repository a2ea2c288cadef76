// Memory management extensions end to end between two engines: memory windows,
// fast registration with page lists, local and remote invalidation, FLUSH and
// ATOMIC WRITE, and the sequences storage protocols run with them.

package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/testenv"
)

// mmAccess is a region that allows everything this file binds and flushes.
const mmAccess = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic | mr.MWBind | mr.FlushGlobal

// mmPair is a connected RC pair whose regions allow windows and FLUSH and whose
// QPs accept FLUSH, at RoCE MTU 1024 so that pages hold several packets.
func mmPair(t *testing.T, po pairOpts) (*pair, *node, *node) {
	t.Helper()
	return rcPair(t, po, nodeOpts{access: mmAccess}, connOpts{mtu: qpattr.MTU1024,
		access: qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead | qpattr.AccessRemoteAtomic | qpattr.AccessFlushGlobal})
}

// write sends an RDMA WRITE of data from a to rkey at va and returns its WC.
func writeVia(t *testing.T, a *node, wrid uint64, data []byte, va uint64, rkey uint32) cq.WC {
	t.Helper()
	copy(a.buf[:len(data)], data)
	send(t, a, SendWR{WRID: wrid, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, uint32(len(data)))},
		RemoteAddr: va, RKey: rkey})
	return pollOne(t, a.cq)
}

// readVia sends an RDMA READ of n bytes from rkey at va into a.buf[off:] and
// returns its WC.
func readVia(t *testing.T, a *node, wrid uint64, off uint64, n uint32, va uint64, rkey uint32) cq.WC {
	t.Helper()
	send(t, a, SendWR{WRID: wrid, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(off, n)},
		RemoteAddr: va, RKey: rkey})
	return pollOne(t, a.cq)
}

func wantStatus(t *testing.T, what string, wc cq.WC, st cq.Status) {
	t.Helper()
	if wc.Status != st {
		t.Fatalf("%s: status %v, want %v (wc %+v)", what, wc.Status, st, wc)
	}
}

// TestMWType1: the bind verb gives a window its own R_Key, rights and bounds;
// rebinding kills the old key; the region's own R_Key is not needed.
func TestMWType1(t *testing.T) {
	_, a, b := mmPair(t, pairOpts{})
	// A region with no remote rights of its own: only the window opens it.
	local, err := b.pd.RegMR(make([]byte, 64<<10), 0x400000, mr.LocalWrite|mr.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Dereg()
	mw, err := b.pd.AllocMW(mr.Type1)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	old := mw.RKey()
	key, err := b.qp.BindMW(mw, 7, SendSignaled, BindInfo{MR: local, Addr: 0x401000, Length: 8192, Access: mr.RemoteWrite | mr.RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 7, Opcode: cq.BindMW, QPN: b.qp.QPN()})
	if key != mw.RKey() || key>>8 != old>>8 || uint8(key) != uint8(old)+1 {
		t.Fatalf("R_Key after bind %#x (window says %#x), before %#x: want the next key byte", key, mw.RKey(), old)
	}
	w := mw.Window()
	if !w.Valid() || w.Addr() != 0x401000 || w.Len() != 8192 || w.Region() != local.Region() || local.Region().Windows() != 1 {
		t.Fatalf("window after bind: valid %v addr %#x len %d region %v windows %d", w.Valid(), w.Addr(), w.Len(), w.Region() == local.Region(), local.Region().Windows())
	}
	data := bytes.Repeat([]byte("window"), 1000) // 6000 bytes: several packets
	wantStatus(t, "write through the window", writeVia(t, a, 1, data, 0x401000+100, key), cq.Success)
	checkBytes(t, "window write", local.Bytes()[0x1000+100:0x1000+100+len(data)], data)
	wantStatus(t, "read through the window", readVia(t, a, 2, 64<<10, 6000, 0x401000+100, key), cq.Success)
	checkBytes(t, "window read", a.buf[64<<10:64<<10+6000], data)

	if err := local.Dereg().Wait(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Dereg of a region with a bound window: %v, want ErrBusy (IBTA 10.6.7.2.6)", err)
	}

	// Rebind elsewhere: the old R_Key dies, the new one works.
	key2, err := b.qp.BindMW(mw, 8, SendSignaled, BindInfo{MR: local, Addr: 0x408000, Length: 4096, Access: mr.RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 8, Opcode: cq.BindMW, QPN: b.qp.QPN()})
	if key2 == key {
		t.Fatalf("rebind kept the R_Key %#x", key)
	}
	wantStatus(t, "read through the rebound window", readVia(t, a, 3, 0, 4096, 0x408000, key2), cq.Success)
	// Unbind (length 0): the window is Valid and matches nothing; the region is free.
	key3, err := b.qp.BindMW(mw, 9, SendSignaled, BindInfo{})
	if err != nil {
		t.Fatal(err)
	}
	pollOne(t, b.cq)
	if local.Region().Windows() != 0 || mw.RKey() != key3 {
		t.Fatalf("after unbind: %d windows on the region, key %#x want %#x", local.Region().Windows(), mw.RKey(), key3)
	}
	// The old key is dead: a remote access error, and the requester's QP fails.
	wantStatus(t, "read through the old key", readVia(t, a, 4, 0, 8, 0x408000, key2), cq.RemAccessErr)
}

// TestMWType1NotInvalidatable: a type 1 window cannot be invalidated, locally or
// by the peer (o10-37.2.26).
func TestMWType1NotInvalidatable(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(name("remote=%v", remote), func(t *testing.T) {
			_, a, b := mmPair(t, pairOpts{})
			mw, _ := b.pd.AllocMW(mr.Type1)
			defer mw.Dealloc()
			key, err := b.qp.BindMW(mw, 1, SendSignaled, BindInfo{MR: b.mr, Addr: 0x10000, Length: 64, Access: mr.RemoteRead})
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, "bind", pollOne(t, b.cq), cq.Success)
			if remote {
				recv(t, b, 9, 0, 64)
				send(t, a, SendWR{WRID: 1, Opcode: WRSendWithInv, Flags: SendSignaled, InvalidateRKey: key, InlineData: []byte("x")})
				wantStatus(t, "sender", pollOne(t, a.cq), cq.RemInvReqErr)
				wantStatus(t, "receiver", pollOne(t, b.cq), cq.RemInvReqErr)
			} else {
				send(t, b, SendWR{WRID: 10, Opcode: WRLocalInv, Flags: SendSignaled, InvalidateRKey: key})
				wantStatus(t, "LOCAL_INV of a type 1 window", pollOne(t, b.cq), cq.LocQPOpErr)
			}
			if w := mw.Window(); !w.Valid() || w.RKey() != key || w.Len() != 64 {
				t.Fatalf("a refused invalidation changed the window")
			}
		})
	}
}

// TestMWType1Bounds: a window's bounds are its own, not its region's (rxe checks
// only the region's), and its rights are the bind's.
func TestMWType1Bounds(t *testing.T) {
	for _, c := range []struct {
		name string
		va   uint64
		n    int
		read bool
	}{
		{"write past the window's end", 0x10000 + 4096 + 8192 - 4, 8, false},
		{"write before the window", 0x10000 + 4096 - 1, 2, false},
		{"write to a read-only window", 0x10000 + 4096, 8, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, a, b := mmPair(t, pairOpts{})
			mw, err := b.pd.AllocMW(mr.Type1)
			if err != nil {
				t.Fatal(err)
			}
			acc := mr.RemoteWrite | mr.RemoteRead
			if c.name == "write to a read-only window" {
				acc = mr.RemoteRead
			}
			key, err := b.qp.BindMW(mw, 1, SendSignaled, BindInfo{MR: b.mr, Addr: 0x10000 + 4096, Length: 8192, Access: acc})
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, "bind", pollOne(t, b.cq), cq.Success)
			wantStatus(t, c.name, writeVia(t, a, 1, make([]byte, c.n), c.va, key), cq.RemAccessErr)
			b.qp.Destroy().Wait()
			mw.Dealloc()
		})
	}
}

// TestMWType2: BIND_MW work requests, zero-based windows, the QP association,
// remote and local invalidation, and what QP destruction does.
func TestMWType2(t *testing.T) {
	_, a, b := mmPair(t, pairOpts{})
	mw, err := b.pd.AllocMW(mr.Type2)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	if mw.Window().Valid() {
		t.Fatalf("a new type 2 window is Valid")
	}
	bind := func(wrid uint64, key uint32, bi BindInfo) cq.WC {
		t.Helper()
		send(t, b, SendWR{WRID: wrid, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: key, Bind: bi})
		return pollOne(t, b.cq)
	}
	key := mw.RKey()&^0xff | uint32(uint8(mw.RKey())+0x11)
	checkWC(t, bind(1, key, BindInfo{MR: b.mr, Addr: 0x10000 + 0x3000, Length: 0x2000,
		Access: mr.RemoteWrite | mr.RemoteRead | mr.ZeroBased}), cq.WC{WRID: 1, Opcode: cq.BindMW, QPN: b.qp.QPN()})
	if mw.RKey() != key || mw.Window().QPN() != b.qp.QPN() || mw.Window().Addr() != 0 {
		t.Fatalf("after bind: key %#x (want %#x), QPN %#x, addr %#x", mw.RKey(), key, mw.Window().QPN(), mw.Window().Addr())
	}
	// Zero-based: IOVA 0 is the window's first byte.
	data := bytes.Repeat([]byte{0xa5, 0x5a, 1}, 1500)
	wantStatus(t, "write at IOVA 0", writeVia(t, a, 1, data, 0, key), cq.Success)
	checkBytes(t, "zero-based write", b.buf[0x3000:0x3000+len(data)], data)

	// A second bind of a bound type 2 window fails (o10-37.2.30): MW_BIND_ERR.
	// (Checked on a pair of its own below, since it fails the QP.)

	// The peer invalidates it with a SEND with Invalidate.
	recv(t, b, 50, 0x8000, 64)
	send(t, a, SendWR{WRID: 2, Opcode: WRSendWithInv, Flags: SendSignaled, InvalidateRKey: key, InlineData: []byte("done")})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 2, Opcode: cq.Send, ByteLen: 4, QPN: a.qp.QPN()})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 50, Opcode: cq.Recv, ByteLen: 4, QPN: b.qp.QPN(), Flags: cq.WithInv, InvalidatedRKey: key})
	if mw.Window().Valid() || b.mr.Region().Windows() != 0 {
		t.Fatalf("window still bound after remote invalidation (valid %v, region windows %d)", mw.Window().Valid(), b.mr.Region().Windows())
	}
	// Bound again with a new key byte, then invalidated locally.
	key2 := key&^0xff | uint32(uint8(key)+1)
	wantStatus(t, "rebind", bind(3, key2, BindInfo{MR: b.mr, Addr: 0x10000, Length: 4096, Access: mr.RemoteRead}), cq.Success)
	wantStatus(t, "read through the new key", readVia(t, a, 4, 0, 4096, 0x10000, key2), cq.Success)
	send(t, b, SendWR{WRID: 5, Opcode: WRLocalInv, Flags: SendSignaled, InvalidateRKey: key2})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 5, Opcode: cq.LocalInv, QPN: b.qp.QPN()})
	if mw.Window().Valid() {
		t.Fatalf("window still bound after LOCAL_INV")
	}
	// Bound a third time; destroying the QP ends the binding, and the region may go.
	key3 := key2&^0xff | uint32(uint8(key2)+1)
	wantStatus(t, "third bind", bind(6, key3, BindInfo{MR: b.mr, Addr: 0x10000, Length: 64, Access: mr.RemoteRead}), cq.Success)
	if err := b.mr.Dereg().Wait(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Dereg with a bound window: %v, want ErrBusy", err)
	}
	qpn := b.qp.QPN()
	if err := b.qp.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
	if mw.Window().Valid() || b.mr.Region().Windows() != 0 {
		t.Fatalf("a destroyed QP's window is still bound")
	}
	// None of its keys resolves any more, even from a QP with the old number.
	for _, k := range []uint32{key, key2, key3} {
		if _, f := b.d.mrs.Lookup(k, b.pd.handle, 0x10000, 1, mr.RemoteRead, qpn); f != mr.FaultInvalidKey {
			t.Errorf("key %#x after invalidation: %v, want invalid key", k, f)
		}
	}
	if err := b.mr.Dereg().Wait(); err != nil {
		t.Fatalf("Dereg once the window is gone: %v", err)
	}
	b.mr, _ = b.pd.RegMR(b.buf, 0x10000, mmAccess) // for the cleanup
	_ = a
}

// TestMWType2OnlyItsQP: a type 2 window works from the QP it is bound to only
// incRKey is ibv_inc_rkey: the key's low byte, the consumer's, moved on by
// one, the index untouched. A plain +1 carried into the index when the random
// byte was 0xff: TestMWType2OnlyItsQP's READ then named another window (a
// CI failure, 1 run in 256).
func incRKey(k uint32) uint32 { return k&^0xff | (k+1)&0xff }

// (rxe_lookup_mw: mw->qp != qp), for RDMA and for remote invalidation.
func TestMWType2OnlyItsQP(t *testing.T) {
	p, a, b := mmPair(t, pairOpts{})
	// A second connection between the same devices, in the same PDs.
	a2 := newNode(t, p.a, nodeOpts{pd: a.pd, access: mmAccess})
	b2 := newNode(t, p.b, nodeOpts{pd: b.pd, access: mmAccess})
	connect(t, a2, b2, connOpts{mtu: qpattr.MTU1024})
	mw, err := b.pd.AllocMW(mr.Type2)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	key := incRKey(mw.RKey())
	send(t, b, SendWR{WRID: 1, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: key,
		Bind: BindInfo{MR: b.mr, Addr: 0x10000, Length: 4096, Access: mr.RemoteRead | mr.RemoteWrite}})
	wantStatus(t, "bind", pollOne(t, b.cq), cq.Success)
	wantStatus(t, "read on the window's QP", readVia(t, a, 1, 0, 64, 0x10000, key), cq.Success)
	wantStatus(t, "read on another QP", readVia(t, a2, 2, 0, 64, 0x10000, key), cq.RemAccessErr)
}

// otherPDBind binds to a region of another PD of b's device.
func otherPDBind(t *testing.T, b *node) BindInfo {
	pd2, _ := b.d.AllocPD()
	other, err := pd2.RegMR(make([]byte, 4096), 0x900000, mmAccess)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Dereg(); pd2.Dealloc() })
	return BindInfo{MR: other, Addr: 0x900000, Length: 64, Access: mr.RemoteRead}
}

// TestMWBindErrors: every bind rule broken gives MW_BIND_ERR and moves the QP to
// ERR, and the window stays as it was.
func TestMWBindErrors(t *testing.T) {
	cases := []struct {
		name  string
		typ   mr.WindowType
		setup func(t *testing.T, b *node) BindInfo
	}{
		{"type 2 across PDs", mr.Type2, otherPDBind},
		{"type 1 across PDs", mr.Type1, otherPDBind},
		{"beyond the region", mr.Type2, func(t *testing.T, b *node) BindInfo {
			return BindInfo{MR: b.mr, Addr: 0x10000 + uint64(len(b.buf)) - 32, Length: 64, Access: mr.RemoteRead}
		}},
		{"before the region", mr.Type2, func(t *testing.T, b *node) BindInfo {
			return BindInfo{MR: b.mr, Addr: 0x10000 - 1, Length: 64, Access: mr.RemoteRead}
		}},
		{"region without MW_BIND", mr.Type2, func(t *testing.T, b *node) BindInfo {
			r, err := b.pd.RegMR(make([]byte, 4096), 0x900000, mr.LocalWrite|mr.RemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Dereg() })
			return BindInfo{MR: r, Addr: 0x900000, Length: 64, Access: mr.RemoteRead}
		}},
		{"writable window on a region without local write", mr.Type1, func(t *testing.T, b *node) BindInfo {
			r, err := b.pd.RegMR(make([]byte, 4096), 0x900000, mr.MWBind|mr.RemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Dereg() })
			return BindInfo{MR: r, Addr: 0x900000, Length: 64, Access: mr.RemoteWrite}
		}},
		{"zero-based type 1", mr.Type1, func(t *testing.T, b *node) BindInfo {
			return BindInfo{MR: b.mr, Addr: 0x10000, Length: 64, Access: mr.RemoteRead | mr.ZeroBased}
		}},
		{"type 2 to nothing", mr.Type2, func(t *testing.T, b *node) BindInfo {
			return BindInfo{MR: b.mr, Addr: 0x10000, Length: 0, Access: mr.RemoteRead}
		}},
		{"local rights in a bind", mr.Type2, func(t *testing.T, b *node) BindInfo {
			return BindInfo{MR: b.mr, Addr: 0x10000, Length: 64, Access: mr.LocalWrite}
		}},
		{"deregistered region", mr.Type2, func(t *testing.T, b *node) BindInfo {
			r, err := b.pd.RegMR(make([]byte, 4096), 0x900000, mmAccess)
			if err != nil {
				t.Fatal(err)
			}
			r.Dereg()
			return BindInfo{MR: r, Addr: 0x900000, Length: 64, Access: mr.RemoteRead}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, b := mmPair(t, pairOpts{})
			mw, err := b.pd.AllocMW(c.typ)
			if err != nil {
				t.Fatal(err)
			}
			defer mw.Dealloc()
			bi := c.setup(t, b)
			before := mw.RKey()
			if c.typ == mr.Type1 {
				if _, err := b.qp.BindMW(mw, 1, SendSignaled, bi); err != nil {
					t.Fatal(err)
				}
			} else {
				send(t, b, SendWR{WRID: 1, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: before + 1, Bind: bi})
			}
			wc := pollOne(t, b.cq)
			checkWC(t, wc, cq.WC{WRID: 1, Status: cq.MWBindErr, Opcode: cq.BindMW, QPN: b.qp.QPN()})
			if st, ok := errState(b.qp); !ok {
				t.Errorf("QP state after a failed bind: %v, want ERR", st)
			}
			if mw.RKey() != before || (c.typ == mr.Type2 && mw.Window().Valid()) {
				t.Errorf("a failed bind changed the window: key %#x -> %#x, valid %v", before, mw.RKey(), mw.Window().Valid())
			}
		})
	}
	t.Run("type 2 bound twice", func(t *testing.T) {
		_, _, b := mmPair(t, pairOpts{})
		mw, _ := b.pd.AllocMW(mr.Type2)
		defer mw.Dealloc()
		bi := BindInfo{MR: b.mr, Addr: 0x10000, Length: 64, Access: mr.RemoteRead}
		send(t, b, SendWR{WRID: 1, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: incRKey(mw.RKey()), Bind: bi})
		wantStatus(t, "first bind", pollOne(t, b.cq), cq.Success)
		send(t, b, SendWR{WRID: 2, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: incRKey(mw.RKey()), Bind: bi})
		wantStatus(t, "second bind (o10-37.2.30)", pollOne(t, b.cq), cq.MWBindErr)
	})
	t.Run("type 1 by work request", func(t *testing.T) {
		_, _, b := mmPair(t, pairOpts{})
		mw, _ := b.pd.AllocMW(mr.Type1)
		defer mw.Dealloc()
		if _, err := b.qp.PostSend([]SendWR{{Opcode: WRBindMW, MW: mw}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("BIND_MW WR with a type 1 window: %v, want ErrInvalid", err)
		}
		mw2, _ := b.pd.AllocMW(mr.Type2)
		defer mw2.Dealloc()
		if _, err := b.qp.BindMW(mw2, 1, 0, BindInfo{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("BindMW with a type 2 window: %v, want ErrInvalid", err)
		}
	})
}

// pages returns n page-aligned pages of a fresh MapAnonymous mapping, in the
// order given by order (so the list is not adjacent in host memory).
func pages(t *testing.T, n int, order []int) [][]byte {
	t.Helper()
	m, err := mr.MapAnonymous(n * 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mr.Unmap(m) })
	out := make([][]byte, len(order))
	for i, k := range order {
		out[i] = m[k*4096 : (k+1)*4096 : (k+1)*4096]
	}
	return out
}

// regMR posts a REG_MR of fr under key with access on n's QP and returns its WC.
func regMR(t *testing.T, n *node, wrid uint64, fr *MR, key uint32, access mr.Access) cq.WC {
	t.Helper()
	send(t, n, SendWR{WRID: wrid, Opcode: WRRegMR, Flags: SendSignaled, MR: fr, Key: key, Access: access})
	return pollOne(t, n.cq)
}

// TestFastRegPageList: a REG_MR of a page list whose pages are scattered in host
// memory, the first entered at an offset; the peer's WRITE, READ and atomic cross
// page boundaries and land on the right host bytes.
func TestFastRegPageList(t *testing.T) {
	_, a, b := mmPair(t, pairOpts{})
	fr, err := b.pd.AllocFastRegMR(8)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Dereg()
	pg := pages(t, 6, []int{4, 1, 5, 0})
	sgl := [][]byte{pg[0][1000:], pg[1], pg[2], pg[3][:2000]} // 3096 + 4096 + 4096 + 2000 bytes
	n, err := fr.MapSG(sgl, 4096, 0x7000_0000_0000+1000)
	if err != nil || n != 4 {
		t.Fatalf("MapSG: %d, %v", n, err)
	}
	key := fr.LKey()&^0xff | 0x33
	checkWC(t, regMR(t, b, 1, fr, key, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic),
		cq.WC{WRID: 1, Opcode: cq.RegMR, QPN: b.qp.QPN()})
	if !fr.Region().Valid() || fr.RKey() != key || fr.Len() != 3096+4096+4096+2000 || fr.Bytes() != nil {
		t.Fatalf("after REG_MR: valid %v key %#x len %d", fr.Region().Valid(), fr.RKey(), fr.Len())
	}
	base := uint64(0x7000_0000_0000 + 1000)
	total := fr.Len()
	data := make([]byte, total)
	fill(data, 77)
	wantStatus(t, "write across the page list", writeVia(t, a, 2, data, base, key), cq.Success)
	want := append(append(append(append([]byte(nil), pg[0][1000:]...), pg[1]...), pg[2]...), pg[3][:2000]...)
	checkBytes(t, "pages after the write", want, data)
	clear(a.buf[128<<10 : 128<<10+total])
	wantStatus(t, "read across the page list", readVia(t, a, 3, 128<<10, uint32(total), base, key), cq.Success)
	checkBytes(t, "read back", a.buf[128<<10:128<<10+total], data)
	// An atomic on the last word of the first page and one on the first of the second.
	for i, va := range []uint64{base + 3096 - 8, base + 3096} {
		send(t, a, SendWR{WRID: uint64(10 + i), Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(8, 8)},
			RemoteAddr: va, RKey: key, CompareAdd: 5})
		wantStatus(t, "fetch-add on a page edge", pollOne(t, a.cq), cq.Success)
	}
	if got := binary.NativeEndian.Uint64(pg[0][4088:]); got != binary.NativeEndian.Uint64(data[3088:])+5 {
		t.Errorf("atomic at the end of page 0: %#x", got)
	}
	if got := binary.NativeEndian.Uint64(pg[1][:8]); got != binary.NativeEndian.Uint64(data[3096:])+5 {
		t.Errorf("atomic at the start of page 1: %#x", got)
	}
}

// TestMapSGRules: ib_map_mr_sg's rules and the region's page budget.
func TestMapSGRules(t *testing.T) {
	_, _, b := mmPair(t, pairOpts{})
	fr, err := b.pd.AllocFastRegMR(3)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Dereg()
	pg := pages(t, 4, []int{0, 1, 2, 3})
	if n, err := fr.MapSG([][]byte{pg[0], pg[1], pg[2], pg[3]}, 4096, 0); n != 3 || !errors.Is(err, ErrLimit) {
		t.Errorf("four pages into a region of three: %d, %v, want 3 and ErrLimit", n, err)
	}
	if _, err := fr.MapSG([][]byte{pg[0][:100], pg[1]}, 4096, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("a first buffer that ends inside a page: %v, want ErrInvalid", err)
	}
	if _, err := fr.MapSG([][]byte{pg[0], pg[1][8:]}, 4096, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("a later buffer that starts inside a page: %v, want ErrInvalid", err)
	}
	if _, err := fr.MapSG([][]byte{pg[0]}, 3000, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("page size 3000: %v, want ErrInvalid", err)
	}
	if _, err := b.mr.MapSG([][]byte{pg[0]}, 4096, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("MapSG of a plain region: %v, want ErrInvalid", err)
	}
	if _, err := b.pd.AllocFastRegMR(mr.MaxFastRegPages + 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("AllocFastRegMR beyond the device's page list length: %v, want ErrInvalid", err)
	}
}

// TestFastRegErrors: REG_MR and LOCAL_INV refusals complete with
// LOC_QP_OP_ERR (rxe_do_local_ops) and fail the QP; a bad SEND with Invalidate
// completes the receive with REM_INV_REQ_ERR (class J) and NAKs the sender.
func TestFastRegErrors(t *testing.T) {
	type env struct {
		a, b *node
		fr   *MR
	}
	mk := func(t *testing.T) env {
		_, a, b := mmPair(t, pairOpts{})
		fr, err := b.pd.AllocFastRegMR(4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fr.Dereg() })
		if _, err := fr.MapSG([][]byte{make([]byte, 4096)}, 4096, 0x900000); err != nil {
			t.Fatal(err)
		}
		return env{a, b, fr}
	}
	local := []struct {
		name string
		run  func(t *testing.T, x env) cq.WC
	}{
		{"REG_MR of a valid region (busy)", func(t *testing.T, x env) cq.WC {
			wantStatus(t, "first REG_MR", regMR(t, x.b, 1, x.fr, incRKey(x.fr.LKey()), mr.LocalWrite), cq.Success)
			return regMR(t, x.b, 2, x.fr, incRKey(x.fr.LKey()), mr.LocalWrite)
		}},
		{"REG_MR with another index", func(t *testing.T, x env) cq.WC {
			return regMR(t, x.b, 2, x.fr, x.fr.LKey()+1<<8, mr.LocalWrite)
		}},
		{"REG_MR from a QP of another PD", func(t *testing.T, x env) cq.WC {
			fr2, err := x.a.pd.AllocFastRegMR(1) // a's PD, posted on b's QP
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fr2.Dereg() })
			// Another device: refused at post. Same device, other PD:
			pd2, _ := x.b.d.AllocPD()
			fr3, _ := pd2.AllocFastRegMR(1)
			t.Cleanup(func() { fr3.Dereg(); pd2.Dealloc() })
			fr3.MapSG([][]byte{make([]byte, 64)}, 4096, 0)
			if _, err := x.b.qp.PostSend([]SendWR{{Opcode: WRRegMR, MR: fr2}}); !errors.Is(err, ErrInvalid) {
				t.Fatalf("REG_MR of another device's region: %v", err)
			}
			return regMR(t, x.b, 2, fr3, incRKey(fr3.LKey()), mr.LocalWrite)
		}},
		{"REG_MR without a page list", func(t *testing.T, x env) cq.WC {
			fr2, _ := x.b.pd.AllocFastRegMR(1)
			t.Cleanup(func() { fr2.Dereg() })
			return regMR(t, x.b, 2, fr2, incRKey(fr2.LKey()), mr.LocalWrite)
		}},
		{"REG_MR with remote write but no local write", func(t *testing.T, x env) cq.WC {
			return regMR(t, x.b, 2, x.fr, incRKey(x.fr.LKey()), mr.RemoteWrite)
		}},
		{"LOCAL_INV of a plain region", func(t *testing.T, x env) cq.WC {
			send(t, x.b, SendWR{WRID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvalidateRKey: x.b.mr.LKey()})
			return pollOne(t, x.b.cq)
		}},
		{"LOCAL_INV twice", func(t *testing.T, x env) cq.WC {
			k := incRKey(x.fr.LKey())
			wantStatus(t, "REG_MR", regMR(t, x.b, 1, x.fr, k, mr.LocalWrite), cq.Success)
			send(t, x.b, SendWR{WRID: 3, Opcode: WRLocalInv, Flags: SendSignaled, InvalidateRKey: k})
			wantStatus(t, "first LOCAL_INV", pollOne(t, x.b.cq), cq.Success)
			send(t, x.b, SendWR{WRID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvalidateRKey: k})
			return pollOne(t, x.b.cq)
		}},
		{"LOCAL_INV of a stale key", func(t *testing.T, x env) cq.WC {
			k := incRKey(x.fr.LKey())
			wantStatus(t, "REG_MR", regMR(t, x.b, 1, x.fr, k, mr.LocalWrite), cq.Success)
			send(t, x.b, SendWR{WRID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvalidateRKey: k - 1})
			return pollOne(t, x.b.cq)
		}},
		{"LOCAL_INV of a region windows are bound to", func(t *testing.T, x env) cq.WC {
			k := incRKey(x.fr.LKey())
			wantStatus(t, "REG_MR", regMR(t, x.b, 1, x.fr, k, mr.LocalWrite|mr.MWBind), cq.Success)
			mw, _ := x.b.pd.AllocMW(mr.Type2)
			t.Cleanup(func() { mw.Dealloc() })
			send(t, x.b, SendWR{WRID: 3, Opcode: WRBindMW, Flags: SendSignaled, MW: mw, Key: incRKey(mw.RKey()),
				Bind: BindInfo{MR: x.fr, Addr: 0x900000, Length: 64, Access: mr.RemoteRead}})
			wantStatus(t, "bind", pollOne(t, x.b.cq), cq.Success)
			send(t, x.b, SendWR{WRID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvalidateRKey: k})
			return pollOne(t, x.b.cq)
		}},
	}
	for _, c := range local {
		t.Run(c.name, func(t *testing.T) {
			x := mk(t)
			wc := c.run(t, x)
			if wc.WRID != 2 || wc.Status != cq.LocQPOpErr {
				t.Fatalf("got %+v, want WR 2 with LOC_QP_OP_ERR", wc)
			}
			if st, ok := errState(x.b.qp); !ok {
				t.Fatalf("QP state %v, want ERR", st)
			}
		})
	}
	remote := []struct {
		name string
		key  func(x env) uint32
	}{
		{"SEND with Invalidate of a plain region", func(x env) uint32 { return x.b.mr.RKey() }},
		{"SEND with Invalidate of a free region", func(x env) uint32 { return x.fr.RKey() }},
		{"SEND with Invalidate of no region", func(x env) uint32 { return 0xdead00 }},
	}
	for _, c := range remote {
		t.Run(c.name, func(t *testing.T) {
			x := mk(t)
			recv(t, x.b, 9, 0, 64)
			send(t, x.a, SendWR{WRID: 1, Opcode: WRSendWithInv, Flags: SendSignaled, InvalidateRKey: c.key(x), InlineData: []byte("x")})
			wantStatus(t, "sender", pollOne(t, x.a.cq), cq.RemInvReqErr)
			wantStatus(t, "receiver", pollOne(t, x.b.cq), cq.RemInvReqErr)
		})
	}
}

// TestStorageSequence runs what NVMe-oF and iSER targets do per I/O, many times:
// map the I/O's pages, REG_MR under the next key byte, let the peer WRITE or
// READ, invalidate (locally, or by the peer's SEND with Invalidate), and check the
// old R_Key is dead before the next I/O. At the end the dead key is tried on the
// wire: NAK remote access error, and the requester's QP fails as the spec says.
func TestStorageSequence(t *testing.T) {
	_, a, b := mmPair(t, pairOpts{})
	storageSequence(t, a, b, 40)
}

// TestVethMemMgt runs the storage sequence, a FLUSH and an ATOMIC WRITE on the
// real data path: two namespaces, a veth pair, the XDP program and AF_XDP.
func TestVethMemMgt(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{NoIPv6: true})
	da := openVeth(t, &p.A, link.KindAFXDP, false)
	db := openVeth(t, &p.B, link.KindAFXDP, false)
	a := newNode(t, da, nodeOpts{access: mmAccess})
	b := newNode(t, db, nodeOpts{access: mmAccess})
	connect(t, a, b, connOpts{mtu: qpattr.MTU1024,
		access: qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead | qpattr.AccessFlushGlobal})
	storageSequence(t, a, b, 10)
}

func storageSequence(t *testing.T, a, b *node, ios int) {
	fr, err := b.pd.AllocFastRegMR(4)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Dereg()
	pg := pages(t, 8, []int{0, 1, 2, 3, 4, 5, 6, 7})
	var keys []uint32
	key := fr.LKey()
	for i := range ios {
		// This I/O's buffer: two pages from the pool, not adjacent, entered at an offset.
		sgl := [][]byte{pg[(i*3)%8][512:], pg[(i*3+5)%8][:1024]}
		if _, err := fr.MapSG(sgl, 4096, 0); err != nil {
			t.Fatalf("I/O %d: MapSG: %v", i, err)
		}
		last := key
		key = key&^0xff | (key+1)&0xff // ib_inc_rkey
		wantStatus(t, name("I/O %d: REG_MR", i), regMR(t, b, uint64(i), fr, key, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead), cq.Success)
		if uint8(key) == uint8(last) || fr.RKey() != key {
			t.Fatalf("I/O %d: key %#x after %#x", i, key, last)
		}
		keys = append(keys, key)
		va := fr.Region().Addr()
		n := len(sgl[0]) + len(sgl[1])
		data := make([]byte, n)
		fill(data, byte(i))
		if i%2 == 0 { // a host write: the target READs the data in
			copy(sgl[0], data)
			copy(sgl[1], data[len(sgl[0]):])
			wantStatus(t, name("I/O %d: READ", i), readVia(t, a, 1, 256<<10, uint32(n), va, key), cq.Success)
			checkBytes(t, "READ", a.buf[256<<10:256<<10+n], data)
		} else { // a host read: the target WRITEs the data out
			wantStatus(t, name("I/O %d: WRITE", i), writeVia(t, a, 2, data, va, key), cq.Success)
			checkBytes(t, "WRITE", append(append([]byte(nil), sgl[0]...), sgl[1]...), data)
		}
		if i%3 == 0 {
			recv(t, b, 100, 0, 64)
			send(t, a, SendWR{WRID: 3, Opcode: WRSendWithInv, Flags: SendSignaled, InvalidateRKey: key, InlineData: []byte("rsp")})
			wantStatus(t, "SEND with Invalidate", pollOne(t, a.cq), cq.Success)
			checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 100, Opcode: cq.Recv, ByteLen: 3, QPN: b.qp.QPN(), Flags: cq.WithInv, InvalidatedRKey: key})
		} else {
			send(t, b, SendWR{WRID: 4, Opcode: WRLocalInv, Flags: SendSignaled, InvalidateRKey: key})
			checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 4, Opcode: cq.LocalInv, QPN: b.qp.QPN()})
		}
		if fr.Region().Valid() {
			t.Fatalf("I/O %d: region valid after invalidation", i)
		}
		if _, f := b.d.mrs.Lookup(key, b.pd.handle, va, 1, mr.RemoteRead, b.qp.QPN()); f != mr.FaultInvalidKey {
			t.Fatalf("I/O %d: the invalidated key still resolves (%v)", i, f)
		}
	}
	// Every registration's key differs from the one before it.
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			t.Fatalf("registration %d reused key %#x", i, keys[i])
		}
	}
	// FLUSH and ATOMIC WRITE go the same way.
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], 0x1122334455667788)
	send(t, a, SendWR{WRID: 6, Opcode: WRAtomicWrite, Flags: SendSignaled, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + 8, AtomicData: v})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 6, Opcode: cq.AtomicWrite, ByteLen: 8, QPN: a.qp.QPN()})
	send(t, a, SendWR{WRID: 7, Opcode: WRFlush, Flags: SendSignaled, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr(), FlushLen: 16, FlushType: FlushGlobal})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 7, Opcode: cq.Flush, QPN: a.qp.QPN()})
	// Read as the application must: with an atomic load (on the real data path no
	// Go synchronisation orders the engine's store before this read).
	if got, want := mr.Load(b.buf[8:16]), binary.NativeEndian.Uint64(v[:]); got != want {
		t.Fatalf("ATOMIC WRITE: remote word %#x, want %#x", got, want)
	}
	wantStatus(t, "WRITE with the dead key", writeVia(t, a, 5, []byte("late"), fr.Region().Addr(), keys[len(keys)-1]), cq.RemAccessErr)
	if st, ok := errState(a.qp); !ok {
		t.Fatalf("requester QP after a remote access error: %v, want ERR", st)
	}
}

// TestFlush: FLUSH of a range and of a whole region completes; the combinations
// a responder refuses give the NAKs rxe gives (check_qp_attr_access, check_rkey).
func TestFlush(t *testing.T) {
	flush := func(a *node, wrid uint64, rkey uint32, va uint64, n uint32, typ FlushType, lvl FlushLevel) cq.WC {
		t.Helper()
		send(t, a, SendWR{WRID: wrid, Opcode: WRFlush, Flags: SendSignaled, RKey: rkey, RemoteAddr: va, FlushLen: n,
			FlushType: typ, FlushLevel: lvl})
		return pollOne(t, a.cq)
	}
	t.Run("range and region", func(t *testing.T) {
		p, a, b := mmPair(t, pairOpts{})
		wantStatus(t, "WRITE", writeVia(t, a, 1, []byte("durable"), b.mr.Addr(), b.mr.RKey()), cq.Success)
		checkWC(t, flush(a, 2, b.mr.RKey(), b.mr.Addr(), 7, FlushGlobal, FlushRange),
			cq.WC{WRID: 2, Opcode: cq.Flush, QPN: a.qp.QPN()})
		checkWC(t, flush(a, 3, b.mr.RKey(), 0, 0, FlushGlobal, FlushMR), cq.WC{WRID: 3, Opcode: cq.Flush, QPN: a.qp.QPN()})
		if string(b.buf[:7]) != "durable" {
			t.Fatalf("data before the FLUSH: %q", b.buf[:7])
		}
		// On the wire: FLUSH requests, each answered by an empty READ response.
		_ = p
	})
	for _, c := range []struct {
		name   string
		qpAcc  uint32
		mrAcc  mr.Access
		typ    FlushType
		lvl    FlushLevel
		off, n uint32
		want   cq.Status
	}{
		{"persistence (no such memory)", 0, 0, FlushPersistent, FlushRange, 0, 8, cq.RemInvReqErr},
		{"global and persistence", 0, 0, FlushGlobal | FlushPersistent, FlushRange, 0, 8, cq.RemInvReqErr},
		{"QP without FLUSH access", qpattr.AccessRemoteWrite, 0, FlushGlobal, FlushRange, 0, 8, cq.RemInvReqErr},
		{"region without FLUSH_GLOBAL", 0, mr.LocalWrite | mr.RemoteWrite, FlushGlobal, FlushRange, 0, 8, cq.RemAccessErr},
		{"region without FLUSH_GLOBAL, whole region", 0, mr.LocalWrite | mr.RemoteWrite, FlushGlobal, FlushMR, 0, 0, cq.RemAccessErr},
		{"range beyond the region", 0, 0, FlushGlobal, FlushRange, 1<<20 - 4, 8, cq.RemAccessErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			qpAcc := c.qpAcc
			if qpAcc == 0 {
				qpAcc = qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead | qpattr.AccessFlushGlobal
			}
			mrAcc := c.mrAcc
			if mrAcc == 0 {
				mrAcc = mmAccess
			}
			_, a, b := rcPair(t, pairOpts{}, nodeOpts{access: mrAcc}, connOpts{access: qpAcc})
			wantStatus(t, c.name, flush(a, 1, b.mr.RKey(), b.mr.Addr()+uint64(c.off), c.n, c.typ, c.lvl), c.want)
		})
	}
	t.Run("QP access FLUSH_PERSISTENT refused", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		n := newNode(t, p.a, nodeOpts{})
		init := QPAttr{Attr: qpattr.Attr{State: qpattr.Init, Port: 1, AccessFlags: 1 << 9}} // IBV_ACCESS_FLUSH_PERSISTENT
		if err := n.qp.ModifySync(&init, qpattr.AttrState|qpattr.AttrPKeyIndex|qpattr.AttrPort|qpattr.AttrAccessFlags); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a QP took IBV_ACCESS_FLUSH_PERSISTENT: %v", err)
		}
	})
}

// TestAtomicWrite: ATOMIC WRITE stores its eight bytes at once and completes on
// the empty READ response; the responder's refusals are rxe's NAKs.
func TestAtomicWrite(t *testing.T) {
	_, a, b := mmPair(t, pairOpts{})
	v := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	send(t, a, SendWR{WRID: 1, Opcode: WRAtomicWrite, Flags: SendSignaled, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + 64, AtomicData: v})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.AtomicWrite, ByteLen: 8, QPN: a.qp.QPN()})
	if !bytes.Equal(b.buf[64:72], v[:]) {
		t.Fatalf("remote word %x, want %x", b.buf[64:72], v)
	}
	for _, c := range []struct {
		name  string
		qpAcc uint32
		mrAcc mr.Access
		want  cq.Status
	}{
		{"read-only region", 0, mr.LocalWrite | mr.RemoteRead, cq.RemAccessErr},
		{"QP without remote write", qpattr.AccessRemoteRead, 0, cq.RemInvReqErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			qpAcc, mrAcc := c.qpAcc, c.mrAcc
			if qpAcc == 0 {
				qpAcc = qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead
			}
			if mrAcc == 0 {
				mrAcc = mmAccess
			}
			_, a, b := rcPair(t, pairOpts{}, nodeOpts{access: mrAcc}, connOpts{access: qpAcc})
			send(t, a, SendWR{WRID: 1, Opcode: WRAtomicWrite, Flags: SendSignaled, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr(), AtomicData: v})
			wantStatus(t, c.name, pollOne(t, a.cq), c.want)
		})
	}
}

// TestFlushAtomicWriteUnderLoss: FLUSH, ATOMIC WRITE and WRITE interleaved over a
// link that drops, duplicates and reorders both ways: every WR completes, the
// data is right, and the responder answered duplicates from its resources.
func TestFlushAtomicWriteUnderLoss(t *testing.T) {
	f := link.Faults{Seed: 7, Drop: 0.1, Duplicate: 0.1, Reorder: 0.1}
	g := f
	g.Seed = 8
	p, a, b := mmPair(t, pairOpts{mem: link.MemoryOptions{AtoB: f, BtoA: g}})
	const n = 300
	for i := range n {
		word := b.mr.Addr() + uint64(8*(i%64))
		var v [8]byte
		binary.NativeEndian.PutUint64(v[:], uint64(i))
		wrs := []SendWR{
			{WRID: uint64(3 * i), Opcode: WRAtomicWrite, RKey: b.mr.RKey(), RemoteAddr: word, AtomicData: v},
			{WRID: uint64(3*i + 1), Opcode: WRFlush, RKey: b.mr.RKey(), RemoteAddr: word, FlushLen: 8, FlushType: FlushGlobal},
			{WRID: uint64(3*i + 2), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 16)},
				RemoteAddr: b.mr.Addr() + 4096 + uint64(16*i), RKey: b.mr.RKey()},
		}
		binary.NativeEndian.PutUint64(a.buf[:8], uint64(i))
		send(t, a, wrs[0])
		send(t, a, wrs[1])
		send(t, a, wrs[2])
		wantStatus(t, name("round %d", i), pollOne(t, a.cq), cq.Success)
	}
	for i := n - 64; i < n; i++ {
		if got := binary.NativeEndian.Uint64(b.buf[8*(i%64):]); got != uint64(i) {
			t.Fatalf("word %d: %d, want %d", i%64, got, i)
		}
	}
	if c := p.b.Counters(); c[CntDupReq] == 0 {
		t.Fatalf("no duplicate requests under 10%% loss: the test did not exercise replays")
	}
}

// TestDeviceAttrMemMgt: the device says what it does, as rxe's attributes do.
func TestDeviceAttrMemMgt(t *testing.T) {
	p := newPair(t, pairOpts{})
	a := p.a.Query()
	want := CapMemWindow | CapMemMgtExtensions | CapMemWindowType2B | CapFlushGlobal | CapAtomicWrite
	if a.CapFlags&want != want || a.MaxMW == 0 || a.MaxFastRegPageListLen != mr.MaxFastRegPages {
		t.Fatalf("device attributes: caps %#x, max_mw %d, max_fast_reg_page_list_len %d", a.CapFlags, a.MaxMW, a.MaxFastRegPageListLen)
	}
}
