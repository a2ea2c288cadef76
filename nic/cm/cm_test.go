package cm

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/mad"
)

func TestIBTime(t *testing.T) {
	if got := IBTime(0); got != 4096*time.Nanosecond {
		t.Fatal(got)
	}
	if got := IBTime(20); got != 4294967296*time.Nanosecond {
		t.Fatal(got) // rdma_cm's CM response timeout: 4.29 s
	}
	if IBTime(40) != IBTime(31) {
		t.Fatal("exponent not clamped")
	}
	// cm_ack_timeout(rxe's 15, packet life 18) is the captures' 0x13.
	if got := ackTimeout(15, 18); got != 0x13 {
		t.Fatal(got)
	}
	if got := ackTimeout(15, 10); got != 15 {
		t.Fatal(got)
	}
	if got := ackTimeout(15, 13); got != 16 {
		t.Fatal(got)
	}
}

func TestTransitionREQSentREPRcvdEstablished(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	wantState(t, p.active, StateREQSent)
	p.f.deliver()
	ev := p.rb.expect(EventREQReceived)
	p.passive = ev.ID
	if ev.Listener != p.listen || ev.Src != gidA || ev.Dst != gidB {
		t.Fatalf("REQ event %+v", ev)
	}
	req := ev.Msg.(*mad.REQ)
	if req.LocalCommID != p.active.LocalCommID() || req.LocalCAGUID != 0xA || req.StartingPSN != 0x123456 {
		t.Fatalf("REQ %+v", req)
	}
	wantState(t, p.passive, StateREQRcvd)
	if err := p.passive.SendREP(&mad.REP{LocalQPN: 0x22, StartingPSN: 0x654321}); err != nil {
		t.Fatal(err)
	}
	wantState(t, p.passive, StateREPSent)
	p.f.deliver()
	rep := p.ra.expect(EventREPReceived).Msg.(*mad.REP)
	if rep.RemoteCommID != p.active.LocalCommID() || rep.LocalCommID != p.passive.LocalCommID() ||
		rep.LocalCAGUID != 0xB || rep.TargetACKDelay != 15 || rep.StartingPSN != 0x654321 {
		t.Fatalf("REP %+v", rep)
	}
	wantState(t, p.active, StateREPRcvd)
	if err := p.active.SendRTU([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	wantState(t, p.active, StateEstablished)
	p.f.deliver()
	rtu := p.rb.expect(EventRTUReceived).Msg.(*mad.RTU)
	if string(rtu.PrivateData[:2]) != "hi" {
		t.Fatal("RTU private data lost")
	}
	wantState(t, p.passive, StateEstablished)
	// One TID for the whole exchange, as the captures show.
	fr := p.f.frames()
	for _, f := range fr {
		if f.tid != fr[0].tid {
			t.Fatalf("TIDs differ: %#x %#x", f.tid, fr[0].tid)
		}
	}
	// No timer is left running: nothing is retransmitted later.
	p.f.advance(time.Hour)
	wantSent(t, p.f)
}

func TestTransitionREQSentRetransmitREQError(t *testing.T) {
	p := newPair(t, nil)
	p.f.drop = func(frame) bool { return true }
	p.sendREQ(t)
	// 2 × packet life (2^18) + Remote CM Response Timeout (2^20), × 4.096 µs.
	T := 2*IBTime(18) + IBTime(20)
	p.f.advance(T - time.Microsecond)
	wantSent(t, p.f, mad.AttrREQ)
	for i := 0; i < 15; i++ {
		p.f.advance(time.Microsecond)
		wantSent(t, p.f, mad.AttrREQ)
		p.f.advance(T - time.Microsecond)
	}
	p.ra.none(p.a)
	p.f.advance(time.Microsecond)
	wantSent(t, p.f) // retries exhausted: no REJ on the wire (cm_process_send_error)
	p.ra.expect(EventREQError)
	wantState(t, p.active, StateIdle)
	if c := p.a.Counters(); c[CntRetransmits] != 15 || c[CntTimeouts] != 1 {
		t.Fatalf("counters %v", c)
	}
}

func TestTransitionREQRetransmitBackoff(t *testing.T) {
	p := newPair(t, func(c *Config) { c.Backoff = true; c.MaxRetryTimeout = 20 * time.Second })
	p.f.drop = func(frame) bool { return true }
	req := testREQ(svc)
	req.MaxCMRetries = 4
	if err := p.active.SendREQ(req, REQParam{Src: gidA, Dst: gidB}); err != nil {
		t.Fatal(err)
	}
	wantSent(t, p.f, mad.AttrREQ)
	T := 2*IBTime(18) + IBTime(20) // 6.44 s, then 12.9 s, then the 20 s cap
	for _, d := range []time.Duration{T, 2 * T, 20 * time.Second, 20 * time.Second} {
		p.f.advance(d - time.Millisecond)
		wantSent(t, p.f)
		p.f.advance(time.Millisecond)
		wantSent(t, p.f, mad.AttrREQ)
	}
	p.f.advance(20 * time.Second)
	p.ra.expect(EventREQError)
}

func TestTransitionMRAExtendsREQTimer(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	if err := p.passive.SendMRA(24, nil); err != nil {
		t.Fatal(err)
	}
	wantState(t, p.passive, StateMRAREQSent)
	p.f.deliver()
	p.ra.expect(EventMRAReceived)
	wantState(t, p.active, StateMRAREQRcvd)
	wantSent(t, p.f, mad.AttrREQ, mad.AttrMRA)
	// The REQ now waits service timeout (2^24) + twice the packet life (2^18),
	// as ib_cm's cm_mra_handler, not 6.4 s.
	ext := IBTime(24) + 2*IBTime(18)
	p.f.advance(ext - time.Millisecond)
	wantSent(t, p.f)
	p.f.advance(time.Millisecond)
	// The REQ goes again; its duplicate draws the same MRA (cm_dup_req_handler).
	wantSent(t, p.f, mad.AttrREQ, mad.AttrMRA)
	p.ra.none(p.a)
	if err := p.passive.SendREP(&mad.REP{LocalQPN: 0x22}); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.ra.expect(EventREPReceived)
	if c := p.b.Counters(); c[CntDuplicates] != 1 {
		t.Fatalf("duplicates %d", c[CntDuplicates])
	}
	// The second MRA did not extend the timer again (cm_mra_handler).
	if c := p.a.Counters(); c[CntDuplicates] != 1 {
		t.Fatalf("active duplicates %d", c[CntDuplicates])
	}
}

func TestTransitionDuplicateREQInREQRcvdDropped(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	p.f.sent()
	p.f.advance(2*IBTime(18) + IBTime(20))
	wantSent(t, p.f, mad.AttrREQ) // the retry, answered with nothing
	p.rb.none(p.b)
	if n := p.b.NumIDs(); n != 2 {
		t.Fatalf("%d IDs: the duplicate made a new one", n)
	}
}

func TestTransitionRTULostREPRetransmitRTUAgain(t *testing.T) {
	p := newPair(t, nil)
	rtus := 0
	p.f.drop = func(f frame) bool {
		if f.attr == mad.AttrRTU {
			rtus++
			return rtus == 1
		}
		return false
	}
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	p.passive.SendREP(&mad.REP{LocalQPN: 0x22})
	p.f.deliver()
	p.ra.expect(EventREPReceived)
	p.active.SendRTU(nil)
	p.f.deliver()
	wantState(t, p.passive, StateREPSent)
	p.f.sent()
	p.f.advance(2*IBTime(18) + IBTime(20))
	// The REP again; the active side, Established, answers with its RTU.
	wantSent(t, p.f, mad.AttrREP, mad.AttrRTU)
	p.rb.expect(EventRTUReceived)
	wantState(t, p.passive, StateEstablished)
	p.ra.none(p.a)
}

func TestTransitionREPSentRetransmitREPError(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	p.f.drop = func(f frame) bool { return f.attr == mad.AttrREP }
	p.passive.SendREP(&mad.REP{LocalQPN: 0x22})
	p.f.sent()
	// The REQ's Local CM Response Timeout alone (cm_req_handler), not the
	// REQ sender's 2 x packet life time + that timeout.
	T := IBTime(20)
	for i := 0; i < 15; i++ {
		p.f.advance(T)
		// The active side's REQ retries too; in REP_SENT they draw nothing.
		if n := count(p.f.sent(), mad.AttrREP); n != 1 {
			t.Fatalf("retry %d: %d REPs", i, n)
		}
	}
	p.f.advance(T)
	p.rb.expect(EventREPError)
	wantState(t, p.passive, StateIdle)
}

func TestTransitionREJInvalidServiceID(t *testing.T) {
	p := newPair(t, nil)
	req := testREQ(svc + 1)
	if err := p.active.SendREQ(req, REQParam{Src: gidA, Dst: gidB}); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	rej := p.ra.expect(EventREJReceived).Msg.(*mad.REJ)
	if rej.Reason != RejInvalidServiceID || rej.MessageRejected != MsgREQ || rej.RemoteCommID != p.active.LocalCommID() {
		t.Fatalf("REJ %+v", rej)
	}
	wantState(t, p.active, StateIdle)
	if n := p.b.NumIDs(); n != 1 {
		t.Fatalf("the passive side kept %d IDs", n)
	}
	if n := p.b.Counters()[CntNoListener]; n != 1 {
		t.Fatalf("no_listener %d, want 1", n)
	}
	p.f.advance(time.Hour)
	wantSent(t, p.f, mad.AttrREQ, mad.AttrREJ)
}

func TestTransitionREJConsumerWithPrivateData(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	if err := p.passive.SendREJ(RejConsumerDefined, nil, []byte("go away")); err != nil {
		t.Fatal(err)
	}
	wantState(t, p.passive, StateIdle)
	p.f.deliver()
	rej := p.ra.expect(EventREJReceived).Msg.(*mad.REJ)
	// cm_format_rej from REQ_RCVD: the REQ rejected, no Local Comm ID.
	if rej.Reason != RejConsumerDefined || string(rej.PrivateData[:7]) != "go away" ||
		rej.LocalCommID != 0 || rej.MessageRejected != MsgREQ {
		t.Fatalf("REJ %+v", rej)
	}
	wantState(t, p.active, StateIdle)
	p.f.advance(time.Hour)
	wantSent(t, p.f, mad.AttrREQ, mad.AttrREJ)
}

func TestTransitionActiveRejectsREP(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	p.passive.SendREP(&mad.REP{LocalQPN: 0x22})
	p.f.deliver()
	p.ra.expect(EventREPReceived)
	if err := p.active.SendREJ(RejConsumerDefined, nil, nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	rej := p.rb.expect(EventREJReceived).Msg.(*mad.REJ)
	if rej.MessageRejected != MsgREP {
		t.Fatalf("REJ %+v", rej)
	}
	wantState(t, p.passive, StateIdle)
	wantState(t, p.active, StateIdle)
}

// A REJ after our REP names "other" and our comm ID, as cm_format_rej: a
// Linux peer looks a REJ that names its REQ up by its comm ID alone
// (cm_acquire_rejected_id), which misses a connection that has our REP's comm
// ID, and the peer stayed connected. Our ID waits in TimeWait
// (ib_send_cm_rej from REP_SENT), as does the peer's (cm_rej_handler).
func TestTransitionREJAfterREPNamesOther(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	if err := p.passive.SendREP(&mad.REP{LocalQPN: 0x22}); err != nil {
		t.Fatal(err)
	}
	p.f.drop = func(fr frame) bool { return fr.src == gidA } // the RTU is lost
	p.f.deliver()
	p.ra.expect(EventREPReceived)
	p.f.sent()
	p.f.drop = nil
	if err := p.passive.SendREJ(RejConsumerDefined, nil, nil); err != nil {
		t.Fatal(err)
	}
	wantState(t, p.passive, StateTimeWait)
	got := p.f.frames()
	if len(got) != 1 || got[0].attr != mad.AttrREJ {
		t.Fatalf("sent %v, want a REJ", got)
	}
	if rej := got[0].msg.(*mad.REJ); rej.MessageRejected != MsgOther || rej.LocalCommID != p.passive.LocalCommID() ||
		rej.RemoteCommID != p.active.LocalCommID() {
		t.Fatalf("REJ %+v, want MessageRejected other (2) and our comm ID", rej)
	}
}

func TestTransitionDREQDREPTimeWait(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	if err := p.active.SendDREQ(nil); err != nil {
		t.Fatal(err)
	}
	wantState(t, p.active, StateDREQSent)
	p.f.deliver()
	dreq := p.rb.expect(EventDREQReceived).Msg.(*mad.DREQ)
	if dreq.RemoteQPN != 0x22 {
		t.Fatalf("DREQ names QPN %#x", dreq.RemoteQPN)
	}
	wantState(t, p.passive, StateDREQRcvd)
	if err := p.passive.SendDREP(nil); err != nil {
		t.Fatal(err)
	}
	wantState(t, p.passive, StateTimeWait)
	p.f.deliver()
	p.ra.expect(EventDREPReceived)
	wantState(t, p.active, StateTimeWait)
	tw := IBTime(0x13) // cm_ack_timeout(15, 18)
	p.f.advance(tw - time.Microsecond)
	p.ra.none(p.a)
	p.f.advance(time.Microsecond)
	p.ra.expect(EventTimeWaitExit)
	p.rb.expect(EventTimeWaitExit)
	wantState(t, p.active, StateIdle)
	wantState(t, p.passive, StateIdle)
	wantSent(t, p.f, mad.AttrDREQ, mad.AttrDREP)
}

func TestTransitionSimultaneousDisconnect(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	p.active.SendDREQ(nil)
	p.passive.SendDREQ(nil)
	p.f.deliver()
	p.ra.expect(EventDREQReceived)
	p.rb.expect(EventDREQReceived)
	wantState(t, p.active, StateDREQRcvd)
	wantState(t, p.passive, StateDREQRcvd)
	p.active.SendDREP(nil)
	p.passive.SendDREP(nil)
	p.f.deliver()
	// The DREPs find the other side already in TimeWait: no event, no reply.
	wantState(t, p.active, StateTimeWait)
	wantState(t, p.passive, StateTimeWait)
	p.f.advance(time.Hour)
	p.ra.expect(EventTimeWaitExit)
	p.rb.expect(EventTimeWaitExit)
	wantSent(t, p.f, mad.AttrDREQ, mad.AttrDREQ, mad.AttrDREP, mad.AttrDREP)
}

func TestTransitionDREQLostRetransmitDREPDuplicate(t *testing.T) {
	// A short path (packet life 2^14): the DREQ's retry (138 ms) comes during
	// the passive side's TimeWait (268 ms).
	p := newPair(t, func(c *Config) { c.PacketLifeTime = 14 })
	p.req = testREQ(svc)
	p.req.RemoteCMResponseTimeout = 10
	p.connect(t)
	dreps := 0
	p.f.drop = func(f frame) bool {
		if f.attr == mad.AttrDREP {
			dreps++
			return dreps == 1
		}
		return false
	}
	p.active.SendDREQ(nil)
	p.f.deliver()
	p.rb.expect(EventDREQReceived)
	p.passive.SendDREP(nil)
	p.f.deliver()
	wantState(t, p.active, StateDREQSent)
	p.f.sent()
	wantState(t, p.passive, StateTimeWait)
	p.f.advance(2*IBTime(14) + IBTime(10))
	// The DREQ again, answered from TimeWait with the kept DREP.
	wantState(t, p.passive, StateTimeWait)
	wantSent(t, p.f, mad.AttrDREQ, mad.AttrDREP)
	p.ra.expect(EventDREPReceived)
	if c := p.b.Counters(); c[CntDuplicates] != 1 {
		t.Fatal(c)
	}
}

// TimeWait lasts ib_cm's av.timeout (cm_enter_timewait): on the passive side
// the REQ's Local ACK Timeout, on the active side the ACK timeout of the
// REP's Target ACK Delay; not this CM's own packet life time and ACK delay.
func TestTransitionTimeWaitLastsThePeersACKTimeout(t *testing.T) {
	p := newPair(t, nil)
	p.a.cfg.TargetACKDelay = 22 // the active side's own: 2^22 without the REP's
	p.b.cfg.TargetACKDelay = 21 // in the REP: the active side's, cm_ack_timeout(21, 18) = 21
	p.req = testREQ(svc)
	p.req.Primary.LocalACKTimeout = 23 // the passive side's TimeWait, 34 s
	p.connect(t)
	p.disconnect(t)
	p.f.advance(IBTime(21) - time.Millisecond)
	wantState(t, p.active, StateTimeWait)
	p.f.advance(time.Millisecond)
	p.ra.expect(EventTimeWaitExit)
	p.f.advance(IBTime(23) - IBTime(21) - time.Millisecond)
	wantState(t, p.passive, StateTimeWait)
	p.f.advance(time.Millisecond)
	p.rb.expect(EventTimeWaitExit)
}

func TestTransitionDREQAfterTimeWaitAnsweredWithDREP(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	p.f.drop = func(f frame) bool { return f.attr == mad.AttrDREP }
	p.active.SendDREQ(nil)
	p.f.deliver()
	p.rb.expect(EventDREQReceived)
	p.passive.SendDREP(nil)
	p.f.advance(IBTime(0x13))
	p.rb.expect(EventTimeWaitExit)
	p.f.drop = nil
	p.f.sent()
	// The retry finds the passive side Idle: answered as for a connection gone
	// (cm_issue_drep).
	p.f.advance(2*IBTime(18) + IBTime(20))
	wantSent(t, p.f, mad.AttrDREQ, mad.AttrDREP)
	p.ra.expect(EventDREPReceived)
}

func TestTransitionDREQErrorToTimeWait(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	p.f.drop = func(frame) bool { return true }
	p.active.SendDREQ(nil)
	T := 2*IBTime(18) + IBTime(20)
	for i := 0; i < 16; i++ {
		p.f.advance(T)
	}
	p.ra.expect(EventDREQError)
	wantState(t, p.active, StateTimeWait)
	p.f.advance(IBTime(0x13))
	p.ra.expect(EventTimeWaitExit)
}

func TestTransitionDREQWrongQPNDropped(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	var buf [mad.Size]byte
	mad.Marshal(buf[:], 1, &mad.DREQ{LocalCommID: p.active.LocalCommID(), RemoteCommID: p.passive.LocalCommID(),
		RemoteQPN: 0x99})
	p.b.Receive(gidA, gidB, buf[:])
	p.rb.none(p.b)
	wantState(t, p.passive, StateEstablished)
	if c := p.b.Counters(); c[CntBadQPN] != 1 {
		t.Fatal(c)
	}
	wantSent(t, p.f)
}

func TestTransitionDREQForUnknownConnectionAnsweredWithDREP(t *testing.T) {
	p := newPair(t, nil)
	var buf [mad.Size]byte
	mad.Marshal(buf[:], 77, &mad.DREQ{LocalCommID: 5, RemoteCommID: 6, RemoteQPN: 0x22})
	p.b.Receive(gidA, gidB, buf[:])
	fr := p.f.frames()
	if len(fr) != 1 || fr[0].attr != mad.AttrDREP || fr[0].tid != 77 {
		t.Fatalf("sent %+v", fr)
	}
	if d := fr[0].msg.(*mad.DREP); d.LocalCommID != 6 || d.RemoteCommID != 5 {
		t.Fatalf("DREP %+v", d)
	}
}

func TestTransitionStaleREQInTimeWaitRejected(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	p.active.SendDREQ(nil)
	p.f.deliver()
	p.rb.expect(EventDREQReceived)
	p.passive.SendDREP(nil)
	p.f.deliver()
	p.ra.expect(EventDREPReceived)
	p.f.sent()
	// The old REQ (same comm ID and CA GUID) arrives again during TimeWait.
	req := testREQ(svc)
	req.LocalCommID, req.LocalCAGUID = p.active.LocalCommID(), 0xA
	var buf [mad.Size]byte
	mad.Marshal(buf[:], 1, req)
	p.b.Receive(gidA, gidB, buf[:])
	got := p.f.frames()
	if len(got) != 1 || got[0].attr != mad.AttrREJ || got[0].msg.(*mad.REJ).Reason != RejStaleConn {
		t.Fatalf("sent %+v", got)
	}
	p.rb.none(p.b)
}

func TestTransitionStaleREQSameQPRejected(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	// A new REQ from the peer's same QP while the connection stands.
	id2, _ := p.a.NewID(p.ra.handle)
	id2.SendREQ(testREQ(svc), REQParam{Src: gidA, Dst: gidB})
	p.f.deliver()
	rej := p.ra.expect(EventREJReceived).Msg.(*mad.REJ)
	if rej.Reason != RejStaleConn {
		t.Fatalf("REJ %+v", rej)
	}
	wantState(t, id2, StateTimeWait)
	// ib_cm's cm_match_req also ends the old connection (TestStaleREQEndsOldConnection).
	wantState(t, p.passive, StateDREQSent)
}

func TestTransitionUnknownCommIDsDropped(t *testing.T) {
	p := newPair(t, nil)
	var buf [mad.Size]byte
	for _, m := range []mad.Message{&mad.REP{LocalCommID: 1, RemoteCommID: 2}, &mad.RTU{LocalCommID: 1, RemoteCommID: 2},
		&mad.MRA{LocalCommID: 1, RemoteCommID: 2}, &mad.REJ{LocalCommID: 1, RemoteCommID: 2, Reason: RejNoQP},
		&mad.DREP{LocalCommID: 1, RemoteCommID: 2}, &mad.SIDRREP{RequestID: 2}} {
		mad.Marshal(buf[:], 1, m)
		p.a.Receive(gidB, gidA, buf[:])
	}
	if c := p.a.Counters(); c[CntUnknownCommID] != 6 {
		t.Fatal(c)
	}
	wantSent(t, p.f)
	p.ra.none(p.a)
}

func TestTransitionDestroyREQSentSendsREJTimeout(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	p.active.Destroy()
	p.f.deliver()
	rej := p.rb.expect(EventREJReceived).Msg.(*mad.REJ)
	if rej.Reason != RejTimeout || rej.RejectedInfoLength != 8 || rej.ARI[7] != 0xA {
		t.Fatalf("REJ %+v", rej)
	}
	wantState(t, p.passive, StateIdle)
	if n := p.a.NumIDs(); n != 0 {
		t.Fatalf("%d IDs after destroy", n)
	}
	p.ra.none(p.a)
}

func TestTransitionDestroyEstablishedSendsDREQ(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	p.active.Destroy()
	p.f.deliver()
	p.rb.expect(EventDREQReceived)
	p.passive.SendDREP(nil)
	p.f.deliver()
	p.ra.none(p.a) // destroyed: no DREP_RECEIVED
	if n := p.a.NumIDs(); n != 1 {
		t.Fatalf("%d IDs: the destroyed one should wait out TimeWait", n)
	}
	p.f.advance(time.Hour)
	if n := p.a.NumIDs(); n != 0 {
		t.Fatalf("%d IDs after TimeWait", n)
	}
	p.ra.none(p.a)
}

func TestTransitionHalfOpenExpires(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	p.f.drop = func(frame) bool { return true }
	// The active side gives up after 16 tries; then so does the passive one.
	p.f.advance(16 * (2*IBTime(18) + IBTime(20)))
	p.rb.expect(EventREQError)
	wantState(t, p.passive, StateIdle)
	p.passive.Destroy()
	if n := p.b.NumIDs(); n != 1 {
		t.Fatalf("%d IDs", n)
	}
}

func TestREQFloodBounded(t *testing.T) {
	p := newPair(t, func(c *Config) { c.MaxIDs = 10 })
	var buf [mad.Size]byte
	for i := range 1000 {
		req := testREQ(svc)
		req.LocalCommID, req.LocalCAGUID, req.LocalQPN = uint32(i+1), 0xA, uint32(i+1)
		mad.Marshal(buf[:], uint64(i), req)
		p.b.Receive(gidA, gidB, buf[:])
	}
	// The wire's share is three quarters of MaxIDs (7), the listener holds one.
	if n := p.b.NumIDs(); n != 8 {
		t.Fatalf("%d IDs", n)
	}
	if c := p.b.Counters(); c[CntRejectedLimit] != 993 {
		t.Fatal(c)
	}
	for range 7 {
		p.rb.expect(EventREQReceived)
	}
	// Half-open connections expire (REJ timeout to the peer); their consumer
	// hears REQ_ERROR and destroys them, and the slots come back.
	p.f.sent()
	p.f.advance(16 * (2*IBTime(18) + IBTime(20)))
	for range 7 {
		p.rb.expect(EventREQError).ID.Destroy()
	}
	if n := p.b.NumIDs(); n != 1 {
		t.Fatalf("%d IDs after expiry", n)
	}
	for _, a := range p.f.sent() {
		if a != mad.AttrREJ {
			t.Fatalf("sent %v", a)
		}
	}
	mad.Marshal(buf[:], 1, testREQ(svc))
	p.b.Receive(gidA, gidB, buf[:])
	p.rb.expect(EventREQReceived)
}

func TestSIDR(t *testing.T) {
	p := newPair(t, nil)
	if err := p.active.SendSIDRREQ(SIDRParam{Src: gidA, Dst: gidB, ServiceID: svc, PKey: 0xffff,
		Private: []byte("hdr"), Retries: 3}); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	ev := p.rb.expect(EventSIDRREQReceived)
	if string(ev.Msg.(*mad.SIDRREQ).PrivateData[:3]) != "hdr" {
		t.Fatal("private data")
	}
	if err := ev.ID.SendSIDRREP(SIDRSuccess, 0x33, 0x1234, nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	rep := p.ra.expect(EventSIDRREPReceived).Msg.(*mad.SIDRREP)
	if rep.QPN != 0x33 || rep.QKey != 0x1234 || rep.Status != SIDRSuccess || rep.ServiceID != svc {
		t.Fatalf("SIDR_REP %+v", rep)
	}
	wantState(t, p.active, StateIdle)
}

func TestSIDRNoListenerAndTimeout(t *testing.T) {
	p := newPair(t, nil)
	p.active.SendSIDRREQ(SIDRParam{Src: gidA, Dst: gidB, ServiceID: svc + 9})
	p.f.deliver()
	if rep := p.ra.expect(EventSIDRREPReceived).Msg.(*mad.SIDRREP); rep.Status != SIDRUnsupported {
		t.Fatalf("status %d", rep.Status)
	}
	if n := p.b.Counters()[CntNoListener]; n != 1 {
		t.Fatalf("no_listener %d, want 1", n)
	}
	id, _ := p.a.NewID(p.ra.handle)
	p.f.drop = func(frame) bool { return true }
	id.SendSIDRREQ(SIDRParam{Src: gidA, Dst: gidB, ServiceID: svc, Timeout: time.Second, Retries: 2})
	p.f.advance(3 * time.Second)
	p.ra.expect(EventSIDRREQError)
	if c := p.a.Counters(); c[CntRetransmits] != 2 {
		t.Fatal(c)
	}
}

func TestLAPAPRAndOtherMADsDropped(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	var buf [mad.Size]byte
	for _, a := range []mad.AttrID{mad.AttrLAP, mad.AttrAPR, mad.AttrClassPortInfo, 0x7777} {
		clear(buf[:])
		h := mad.CMHeader(a, 1)
		h.Encode(buf[:])
		p.b.Receive(gidA, gidB, buf[:])
	}
	p.b.Receive(gidA, gidB, buf[:100])
	buf[1] = 0x04 // another class
	p.b.Receive(gidA, gidB, buf[:])
	c := p.b.Counters()
	if c[CntUnknownAttr] != 4 || c[CntMalformed] != 2 {
		t.Fatal(c)
	}
	wantState(t, p.passive, StateEstablished)
	wantSent(t, p.f)
}

// TestHandshakeUnderLoss: with 10 % of MADs lost, retries carry every
// connection and disconnection through.
func TestHandshakeUnderLoss(t *testing.T) {
	for seed := range uint64(40) {
		p := newPair(t, nil)
		r := rand.New(rand.NewPCG(seed, 1))
		p.f.drop = func(frame) bool { return r.IntN(10) == 0 }
		p.sendREQ(t)
		for p.active.State() == StateREQSent || p.passive == nil {
			p.f.advance(time.Second)
			select {
			case ev := <-p.rb.ch:
				if ev.Type != EventREQReceived {
					t.Fatalf("seed %d: %v (ID %p, passive %p, state %v, %v) a %v b %v", seed, ev.Type, ev.ID, p.passive, ev.ID.State(), p.f.clk.Now(), p.a.Counters(), p.b.Counters())
				}
				p.passive = ev.ID
				p.passive.SendREP(&mad.REP{LocalQPN: 0x22})
			default:
			}
		}
		for i := 0; p.passive.State() != StateEstablished; i++ {
			if i > 1000 {
				t.Fatalf("seed %d: passive %v active %v; a %v b %v", seed, p.passive.State(), p.active.State(), p.a.Counters(), p.b.Counters())
			}
			select {
			case ev := <-p.ra.ch:
				if ev.Type != EventREPReceived {
					t.Fatalf("seed %d: %v", seed, ev.Type)
				}
				p.active.SendRTU(nil)
			default:
			}
			p.f.advance(time.Second)
		}
		p.active.SendDREQ(nil)
		for i := 0; p.active.State() != StateIdle; i++ {
			if i > 1000 {
				t.Fatalf("seed %d: passive %v active %v; a %v b %v", seed, p.passive.State(), p.active.State(), p.a.Counters(), p.b.Counters())
			}
			p.f.advance(time.Second)
			select {
			case ev := <-p.rb.ch:
				if ev.Type == EventDREQReceived {
					p.passive.SendDREP(nil)
				}
			default:
			}
		}
	}
}

// TestCloseCancelsTimers: Close leaves no timer armed, TimeWait's included.
func TestCloseCancelsTimers(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	p.active.SendDREQ(nil)
	p.f.deliver()
	p.rb.expect(EventDREQReceived)
	p.passive.SendDREP(nil)
	p.f.deliver()
	wantState(t, p.active, StateTimeWait)
	if n := p.f.clk.Pending(); n != 2 {
		t.Fatalf("%d timers before Close, want the two TimeWaits", n)
	}
	p.a.Close()
	p.b.Close()
	if n := p.f.clk.Pending(); n != 0 {
		t.Fatalf("%d timers armed after Close", n)
	}
}

// TestSendMRATooLongLeavesState: a refused MRA changes nothing.
func TestSendMRATooLongLeavesState(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	if err := p.passive.SendMRA(20, make([]byte, mad.MRAPrivateLen+1)); err == nil {
		t.Fatal("MRA with too much private data sent")
	}
	wantState(t, p.passive, StateREQRcvd)
}
