// RC operations beyond SEND and WRITE: READ, atomics, immediate data, invalidate,
// inline data, scatter/gather lists, unsignaled WRs and fences.

package engine

import (
	"encoding/binary"
	"testing"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
)

func TestRCRead(t *testing.T) {
	for _, mtu := range []qpattr.MTU{qpattr.MTU256, qpattr.MTU1024, qpattr.MTU4096} {
		for _, size := range []int{0, 1, 1024, 3000, 65536, 200000} {
			t.Run(name("mtu%d/%d", mtu.Bytes(), size), func(t *testing.T) {
				_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{mtu: mtu})
				fill(b.buf[1000:1000+size], 9)
				send(t, a, SendWR{WRID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(64, uint32(size))},
					RemoteAddr: b.mr.Addr() + 1000, RKey: b.mr.RKey()})
				checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 3, Status: cq.Success, Opcode: cq.RDMARead, ByteLen: uint32(size), QPN: a.qp.QPN()})
				checkBytes(t, "read", a.buf[64:64+size], b.buf[1000:1000+size])
				noMore(t, b.cq)
			})
		}
	}
}

func TestRCAtomics(t *testing.T) {
	_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	word := b.buf[4096:4104]
	binary.NativeEndian.PutUint64(word, 100)
	steps := []struct {
		op         WROpcode
		cmpAdd     uint64
		swap       uint64
		wantOrig   uint64
		wantRemote uint64
		wcOp       cq.Opcode
	}{
		{WRAtomicFetchAdd, 5, 0, 100, 105, cq.FetchAdd},
		{WRAtomicCmpSwp, 105, 7, 105, 7, cq.CompSwap},
		{WRAtomicCmpSwp, 1, 9, 7, 7, cq.CompSwap}, // compare fails: no swap
		{WRAtomicFetchAdd, ^uint64(0), 0, 7, 6, cq.FetchAdd},
	}
	for i, s := range steps {
		send(t, a, SendWR{WRID: uint64(i), Opcode: s.op, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(8, 8)},
			RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey(), CompareAdd: s.cmpAdd, Swap: s.swap})
		checkWC(t, pollOne(t, a.cq), cq.WC{WRID: uint64(i), Status: cq.Success, Opcode: s.wcOp, ByteLen: 8, QPN: a.qp.QPN()})
		if got := binary.NativeEndian.Uint64(a.buf[8:16]); got != s.wantOrig {
			t.Fatalf("step %d: original value got %d, want %d", i, got, s.wantOrig)
		}
		if got := binary.NativeEndian.Uint64(word); got != s.wantRemote {
			t.Fatalf("step %d: remote value got %d, want %d", i, got, s.wantRemote)
		}
	}
}

func TestRCImmediate(t *testing.T) {
	_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	fill(a.buf[:5000], 1)
	recv(t, b, 10, 0, 8192)
	recv(t, b, 11, 0, 16)
	send(t, a, SendWR{WRID: 1, Opcode: WRSendWithImm, Flags: SendSignaled | SendSolicited, ImmData: 0xdeadbeef,
		SGL: []SGE{a.mr.SGE(0, 5000)}})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.Send, ByteLen: 5000, QPN: a.qp.QPN(), Flags: cq.WithImm})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 10, Opcode: cq.Recv, ByteLen: 5000, QPN: b.qp.QPN(), Flags: cq.WithImm, ImmData: 0xdeadbeef})
	checkBytes(t, "send with imm", b.buf[:5000], a.buf[:5000])

	send(t, a, SendWR{WRID: 2, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, ImmData: 42,
		SGL: []SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr() + 65536, RKey: b.mr.RKey()})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 2, Opcode: cq.RDMAWrite, ByteLen: 3000, QPN: a.qp.QPN(), Flags: cq.WithImm})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 11, Opcode: cq.RecvRDMAWithImm, ByteLen: 3000, QPN: b.qp.QPN(), Flags: cq.WithImm, ImmData: 42})
	checkBytes(t, "write with imm", b.buf[65536:65536+3000], a.buf[:3000])
}

func TestRCSendWithInvalidate(t *testing.T) {
	_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	fr, err := b.pd.AllocFastRegMR(4)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Dereg()
	mem := make([]byte, 4096)
	key := fr.LKey()&^0xff | 0x5a
	if _, err := fr.MapSG([][]byte{mem}, 4096, 0x900000); err != nil {
		t.Fatal(err)
	}
	send(t, b, SendWR{WRID: 9, Opcode: WRRegMR, Flags: SendSignaled, MR: fr, Key: key, Access: mr.LocalWrite | mr.RemoteWrite})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 9, Opcode: cq.RegMR, QPN: b.qp.QPN()})
	// The region works before the invalidation...
	send(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, InlineData: []byte("hello"),
		RemoteAddr: 0x900000, RKey: key})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.RDMAWrite, ByteLen: 5, QPN: a.qp.QPN()})
	if string(mem[:5]) != "hello" {
		t.Fatalf("write before invalidate: got %q", mem[:5])
	}
	recv(t, b, 20, 0, 64)
	send(t, a, SendWR{WRID: 2, Opcode: WRSendWithInv, Flags: SendSignaled, InvalidateRKey: key, InlineData: []byte("bye")})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 2, Opcode: cq.Send, ByteLen: 3, QPN: a.qp.QPN()})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 20, Opcode: cq.Recv, ByteLen: 3, QPN: b.qp.QPN(), Flags: cq.WithInv, InvalidatedRKey: key})
	if fr.Region().Valid() {
		t.Fatalf("region still valid after SEND with invalidate")
	}
	// ...and is refused after it: a remote access error.
	send(t, a, SendWR{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, InlineData: []byte("again"),
		RemoteAddr: 0x900000, RKey: key})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 3, Status: cq.RemAccessErr, Opcode: cq.RDMAWrite, ByteLen: 5, QPN: a.qp.QPN()})
}

func TestRCInlineAndSGL(t *testing.T) {
	_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{mtu: qpattr.MTU256})
	fill(a.buf[:4096], 11)
	// Inline from registered memory, copied at post time: overwriting the source
	// right after the post must not change what arrives.
	recv(t, b, 1, 0, 1024)
	send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled | SendInline, SGL: []SGE{a.mr.SGE(0, 100), a.mr.SGE(1000, 150)}})
	want := append(append([]byte(nil), a.buf[:100]...), a.buf[1000:1150]...)
	clear(a.buf[:2000])
	pollOne(t, a.cq)
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Opcode: cq.Recv, ByteLen: 250, QPN: b.qp.QPN()})
	checkBytes(t, "inline", b.buf[:250], want)

	// A gather list of three pieces into a scatter list of four, across packets.
	fill(a.buf[:4096], 13)
	want = append(append(append([]byte(nil), a.buf[10:310]...), a.buf[2000:2001]...), a.buf[3000:3699]...)
	if _, err := b.qp.PostRecv([]RecvWR{{WRID: 2, SGL: []SGE{b.mr.SGE(5000, 7), b.mr.SGE(6000, 0), b.mr.SGE(7000, 500), b.mr.SGE(9000, 1000)}}}); err != nil {
		t.Fatal(err)
	}
	send(t, a, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(10, 300), a.mr.SGE(2000, 1), a.mr.SGE(3000, 699)}})
	pollOne(t, a.cq)
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 2, Opcode: cq.Recv, ByteLen: 1000, QPN: b.qp.QPN()})
	got := append(append(append([]byte(nil), b.buf[5000:5007]...), b.buf[7000:7500]...), b.buf[9000:9493]...)
	checkBytes(t, "scatter/gather", got, want)
}

func TestRCUnsignaled(t *testing.T) {
	_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	var wrs []SendWR
	for i := range 10 {
		f := SendFlags(0)
		if i%5 == 4 {
			f = SendSignaled
		}
		wrs = append(wrs, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: f, InlineData: []byte{byte(i)},
			RemoteAddr: b.mr.Addr() + uint64(i), RKey: b.mr.RKey()})
	}
	if n, err := a.qp.PostSend(wrs); n != 10 || err != nil {
		t.Fatalf("PostSend: %d, %v", n, err)
	}
	got := pollN(t, a.cq, 2, 5e9)
	if got[0].WRID != 4 || got[1].WRID != 9 {
		t.Fatalf("signaled completions: got WRIDs %d, %d, want 4, 9", got[0].WRID, got[1].WRID)
	}
	noMore(t, a.cq)
	for i := range 10 {
		if b.buf[i] != byte(i) {
			t.Fatalf("byte %d: got %d, want %d", i, b.buf[i], i)
		}
	}
	// The send queue slots of unsignaled WRs are free again.
	if c := a.qp.sendQ.count(); c != 0 {
		t.Fatalf("send queue holds %d WRs after completion, want 0", c)
	}
}

// TestRCFence: a fenced WRITE waits for an earlier READ of the same memory, so
// the READ sees the old bytes.
func TestRCFence(t *testing.T) {
	_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	fill(b.buf[:256], 1)
	old := append([]byte(nil), b.buf[:256]...)
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 256)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled | SendFence, InlineData: make([]byte, 200), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	got := pollN(t, a.cq, 2, 5e9)
	if got[0].WRID != 1 || got[1].WRID != 2 || got[0].Status != cq.Success || got[1].Status != cq.Success {
		t.Fatalf("completions: %+v", got)
	}
	checkBytes(t, "read before fenced write", a.buf[:256], old)
}
