// End to end through the verbs: UD with an address handle into an SRQ (and its
// limit event), a receive CQ resized while it holds completions and notified
// through a completion channel for solicited completions only; UC.

package verbs

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/nic/wire"
)

// getEvent returns the channel's next event without waiting; nil if there is none.
func getEvent(t *testing.T, ch *CompChannel) *CQ {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := ch.GetEvent(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("GetEvent: %v", err)
	}
	return c
}

func TestUDThroughAHIntoSRQWithSolicitedChannel(t *testing.T) {
	da, db := memDevices(t)
	var evs eventLog
	defer db.RegisterEventHandler(evs.handler)()

	pdB, err := db.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pdB.CreateSRQ(engine.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	ch := NewCompChannel()
	t.Cleanup(func() { // after the endpoints' cleanups
		if err := srq.Destroy().Wait(); err != nil {
			t.Error(err)
		}
		if err := pdB.Dealloc().Wait(); err != nil {
			t.Error(err)
		}
		if err := ch.Close(); err != nil {
			t.Error(err)
		}
	})
	a := newEndpoint(t, da, epOpts{typ: UD})
	b := newEndpoint(t, db, epOpts{typ: UD, pd: pdB, srq: srq, cqe: 4, rcqOpts: CQOptions{Channel: ch},
		cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if got := b.rcq.Cqe(); got != 7 {
		t.Fatalf("CQ of 4 has %d entries, want 7 (a power of two less one)", got)
	}
	const qkey = 0x11111111
	udUp(t, a, 0x2222)
	udUp(t, b, qkey)
	ah, err := a.pd.CreateAH(AV{DGID: gidB})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()

	// Eight receives of 40 (GRH) + 1024 bytes, one per 2 KiB slot; the limit
	// event fires when fewer than four are left.
	const slot, grh = 2048, 40
	for i := range 8 {
		if _, err := srq.PostRecv([]RecvWR{{WRID: uint64(100 + i), SGL: []SGE{b.mr.SGE(uint64(i*slot), grh+1024)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(engine.SRQAttr{Limit: 4}, SRQLimit); err != nil {
		t.Fatal(err)
	}
	if got := srq.Query(); got != (engine.SRQAttr{MaxWR: 16, MaxSGE: 1, Limit: 4}) {
		t.Fatalf("SRQ attributes %+v", got)
	}
	if err := b.rcq.ReqNotify(true); err != nil { // solicited completions only
		t.Fatal(err)
	}

	msgs := []struct {
		off, n uint32
		imm    uint32 // 0: none
		flags  SendFlags
	}{
		{0, 100, 0, 0}, {4096, 1024, 0xabcdef01, 0}, {9000, 7, 0, 0},
		{20000, 1, 0, 0}, {30000, 999, 5, 0}, {40000, 512, 0, SendSolicited},
	}
	fill(a.buf, 11)
	send := func(i int) {
		t.Helper()
		m := msgs[i]
		wr := SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled | m.flags, SGL: []SGE{a.mr.SGE(uint64(m.off), m.n)},
			AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey}
		want := WC{WRID: uint64(i), Opcode: WCSend, ByteLen: m.n, QPN: a.qp.QPN()}
		if m.imm != 0 {
			wr.Opcode, wr.ImmData, want.Flags = WRSendWithImm, m.imm, WCWithImm
		}
		mustPostSend(t, a.qp, wr)
		checkWC(t, pollN(t, a.scq, 1)[0], want)
		if !waitFor(func() bool { return b.rcq.Len() == i+1 }) {
			t.Fatalf("message %d: %d completions queued at the receiver", i, b.rcq.Len())
		}
	}

	// Three unsolicited messages: queued, no event.
	for i := range 3 {
		send(i)
	}
	if c := getEvent(t, ch); c != nil {
		t.Fatalf("an event for unsolicited completions")
	}
	// Resize while three completions are queued: too small fails, larger keeps them
	// in order and keeps the arming.
	if err := b.rcq.Resize(2); !errors.Is(err, cq.ErrTooSmall) {
		t.Fatalf("Resize below the queued completions: %v", err)
	}
	if err := b.rcq.Resize(32); err != nil || b.rcq.Cqe() != 63 || b.rcq.Len() != 3 {
		t.Fatalf("Resize(32): %v; %d entries, %d queued", err, b.rcq.Cqe(), b.rcq.Len())
	}
	for i := 3; i < 5; i++ {
		send(i)
	}
	if c := getEvent(t, ch); c != nil {
		t.Fatalf("an event for unsolicited completions after the resize")
	}
	if !waitFor(func() bool { return evs.count(ofType(EventSRQLimitReached)) == 1 }) {
		t.Fatalf("no SRQ limit event after 5 of 8 receives were used")
	}
	if ev := evs.filter(ofType(EventSRQLimitReached))[0]; ev.SRQ != srq || srq.Query().Limit != 0 || srq.Len() != 3 {
		t.Fatalf("SRQ limit event %+v for %p (want %p); limit now %d, %d posted", ev, ev.SRQ, srq, srq.Query().Limit, srq.Len())
	}
	send(5) // solicited
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	c, err := ch.GetEvent(ctx)
	if err != nil || c != b.rcq {
		t.Fatalf("GetEvent after a solicited completion: %p, %v; want %p", c, err, b.rcq)
	}
	c.AckEvents(1)
	if c := getEvent(t, ch); c != nil {
		t.Fatalf("a second event for one arming")
	}

	// Every completion, field by field, and every byte.
	got := pollN(t, b.rcq, len(msgs))
	for i, m := range msgs {
		want := WC{WRID: uint64(100 + i), Opcode: WCRecv, ByteLen: grh + m.n, QPN: b.qp.QPN(), SrcQP: a.qp.QPN(), Flags: WCGRH}
		if m.imm != 0 {
			want.Flags |= WCWithImm
			want.ImmData = m.imm
		}
		checkWC(t, got[i], want)
		base := i * slot
		checkBytes(t, "payload", b.buf[base+grh:base+grh+int(m.n)], a.buf[m.off:m.off+m.n])
		checkBytes(t, "the GRH's unused first 20 bytes", b.buf[base:base+20], make([]byte, 20))
		ip := wire.IPv4(b.buf[base+20 : base+grh])
		if ip.Version() != 4 || ip.Src() != netip.MustParseAddr("192.0.2.11") || ip.Dst() != netip.MustParseAddr("192.0.2.12") ||
			int(ip.TotalLength()) != 20+8+12+8+immLen(m.imm)+int(m.n+3)&^3+4 {
			t.Fatalf("message %d: GRH %x", i, b.buf[base:base+grh])
		}
	}
	noMore(t, b.rcq)
	if n := evs.count(ofType(EventSRQLimitReached)); n != 1 {
		t.Fatalf("%d SRQ limit events, want 1", n)
	}
}

// immLen is the length of the ImmDt header a message carries. (The IPv4 length
// above: IPv4, UDP, BTH, DETH, ImmDt, the payload padded to 4 bytes, ICRC.)
func immLen(imm uint32) int {
	if imm != 0 {
		return 4
	}
	return 0
}

func TestUCSendAndWriteWithImm(t *testing.T) {
	da, db := memDevices(t)
	a, b := rcPair(t, da, db, epOpts{typ: UC}, epOpts{typ: UC})
	fill(a.buf[:8192], 23)
	mustPostRecv(t, b.qp, RecvWR{WRID: 1, SGL: []SGE{b.mr.SGE(0, 8192)}})
	mustPostRecv(t, b.qp, RecvWR{WRID: 2, SGL: []SGE{b.mr.SGE(0, 8192)}})
	mustPostSend(t, a.qp, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 5000)}})
	mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, ImmData: 7,
		SGL: []SGE{a.mr.SGE(100, 3000)}, RemoteAddr: b.mr.Addr() + 100000, RKey: b.mr.RKey()})
	sw := pollN(t, a.scq, 2)
	checkWC(t, sw[0], WC{WRID: 1, Opcode: WCSend, ByteLen: 5000, QPN: a.qp.QPN()})
	checkWC(t, sw[1], WC{WRID: 2, Opcode: WCRDMAWrite, ByteLen: 3000, QPN: a.qp.QPN(), Flags: WCWithImm})
	rw := pollN(t, b.rcq, 2)
	checkWC(t, rw[0], WC{WRID: 1, Opcode: WCRecv, ByteLen: 5000, QPN: b.qp.QPN()})
	checkWC(t, rw[1], WC{WRID: 2, Opcode: WCRecvRDMAWithImm, ByteLen: 3000, QPN: b.qp.QPN(), Flags: WCWithImm, ImmData: 7})
	checkBytes(t, "SEND", b.buf[:5000], a.buf[:5000])
	checkBytes(t, "WRITE", b.buf[100000:103000], a.buf[100:3100])
}

// TestAVFromWCRepliesToTheSender: the AV AVFromWC builds from a UD receive's
// GRH reaches the sender (its GID, our GID index), as ibv_init_ah_from_wc's;
// a completion without a GRH, or a GRH with no IP header, is refused.
func TestAVFromWCRepliesToTheSender(t *testing.T) {
	da, db := memDevices(t)
	a := newEndpoint(t, da, epOpts{typ: UD})
	b := newEndpoint(t, db, epOpts{typ: UD})
	const qkey = 0x01234567
	udUp(t, a, qkey)
	udUp(t, b, qkey)
	ah, err := a.pd.CreateAH(AV{DGID: gidB})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	mustPostRecv(t, b.qp, RecvWR{WRID: 1, SGL: []SGE{b.mr.SGE(0, 40+64)}})
	mustPostRecv(t, a.qp, RecvWR{WRID: 2, SGL: []SGE{a.mr.SGE(0, 40+64)}})
	mustPostSend(t, a.qp, SendWR{WRID: 3, Opcode: WRSend, SGL: []SGE{a.mr.SGE(4096, 8)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
	wc := pollN(t, b.rcq, 1)[0]
	av, err := db.AVFromWC(&wc, b.buf[:40])
	if err != nil {
		t.Fatal(err)
	}
	if av.DGID != da.GIDs()[0] || db.GIDs()[av.SGIDIndex] != gidB {
		t.Fatalf("AV %+v: want DGID %v from GID index of %v", av, da.GIDs()[0], gidB)
	}
	reply, err := b.pd.CreateAH(av)
	if err != nil {
		t.Fatal(err)
	}
	defer reply.Destroy()
	mustPostSend(t, b.qp, SendWR{WRID: 4, Opcode: WRSend, SGL: []SGE{b.mr.SGE(4096, 8)}, AH: reply, RemoteQPN: wc.SrcQP, RemoteQKey: qkey})
	if got := pollN(t, a.rcq, 1)[0]; got.Status != WCSuccess || got.SrcQP != b.qp.QPN() {
		t.Fatalf("the reply: %+v", got)
	}

	noGRH := wc
	noGRH.Flags = 0
	if _, err := db.AVFromWC(&noGRH, b.buf[:40]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no GRH flag: %v", err)
	}
	if _, err := db.AVFromWC(&wc, make([]byte, 40)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero GRH: %v", err)
	}
}
