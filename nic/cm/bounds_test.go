package cm

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/nic/netdev"
)

// A REQ's own fields cannot hold its ID past MaxPassiveWait: response
// timeouts of 31 and 15 retries ask for about 39 hours.
func TestHalfOpenBoundedWhateverTheREQSays(t *testing.T) {
	p := newPair(t, nil)
	p.req = testREQ(svc)
	p.req.RemoteCMResponseTimeout, p.req.LocalCMResponseTimeout = 31, 31
	p.sendREQ(t)
	p.f.deliver()
	ev := p.rb.expect(EventREQReceived)
	p.f.sent()
	p.f.advance(p.b.cfg.MaxPassiveWait + time.Second)
	p.rb.expect(EventREQError)
	wantState(t, ev.ID, StateIdle)
	if got := p.f.sent(); count(got, mad.AttrREJ) != 1 {
		t.Fatalf("sent %v after MaxPassiveWait, want the REJ (timeout)", got)
	}
}

// A SIDR_REQ the consumer never answers expires too (SIDR_REQ_ERROR): before,
// it held its ID for ever.
func TestSIDRReqRcvdExpires(t *testing.T) {
	p := newPair(t, nil)
	var buf [mad.Size]byte
	mad.Marshal(buf[:], 1, &mad.SIDRREQ{RequestID: 77, ServiceID: svc})
	p.b.Receive(gidA, gidB, buf[:])
	ev := p.rb.expect(EventSIDRREQReceived)
	p.f.advance(p.b.cfg.MaxPassiveWait + time.Second)
	p.rb.expect(EventSIDRREQError)
	wantState(t, ev.ID, StateIdle)
	if err := ev.ID.SendSIDRREP(SIDRSuccess, 0x33, 0x11111111, nil); !errors.Is(err, ErrState) {
		t.Fatalf("answering an expired SIDR_REQ: %v, want ErrState", err)
	}
	ev.ID.Destroy()
	// The same request again is a new one, not a duplicate of the expired.
	p.b.Receive(gidA, gidB, buf[:])
	p.rb.expect(EventSIDRREQReceived)
}

// REQs and SIDR_REQs from the wire hold at most three quarters of MaxIDs:
// peers cannot take every ID from local connects (rdma_connect).
func TestWireIDsLeaveRoomForLocal(t *testing.T) {
	p := newPair(t, func(c *Config) { c.MaxIDs = 12 }) // the listener and the active ID hold 2
	var buf [mad.Size]byte
	for i := range 12 {
		req := testREQ(svc)
		req.LocalCommID, req.LocalCAGUID, req.LocalQPN = uint32(i+1), 0xEE, uint32(i+100)
		mad.Marshal(buf[:], uint64(i), req)
		p.b.Receive(gidA, gidB, buf[:])
	}
	for range 9 {
		p.rb.expect(EventREQReceived)
	}
	p.rb.none(p.b)
	if n := p.b.Counters()[CntRejectedLimit]; n != 3 {
		t.Fatalf("%d REQs refused for the limit, want 3 (9 of 12 IDs to the wire)", n)
	}
	if _, err := p.b.NewID(p.rb.handle); err != nil {
		t.Fatalf("a local ID while peers hold their share: %v", err)
	}
}

// A REQ from a peer QP that still has an established connection here is
// refused STALE_CONN, and the old connection is ended with a DREQ
// (cm_match_req): a rebooted peer that reuses its QPN gets in once it is gone.
func TestStaleREQEndsOldConnection(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	req := testREQ(svc) // the peer starts over: its QP 0x11 again, a new comm ID
	req.LocalCommID, req.LocalCAGUID = 0x1000, 0xA
	var buf [mad.Size]byte
	mad.Marshal(buf[:], 100, req)
	p.b.Receive(gidA, gidB, buf[:])
	got := p.f.sent()
	if count(got, mad.AttrREJ) != 1 || count(got, mad.AttrDREQ) != 1 {
		t.Fatalf("a stale REQ: sent %v, want the REJ and a DREQ of the old connection", got)
	}
	wantState(t, p.passive, StateDREQSent)
	p.f.deliver()
	p.ra.expect(EventDREQReceived)
	if err := p.active.SendDREP(nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.rb.expect(EventDREPReceived)
	p.f.advance(time.Hour)
	p.rb.expect(EventTimeWaitExit)
	p.ra.expect(EventTimeWaitExit)
	mad.Marshal(buf[:], 101, req)
	p.b.Receive(gidA, gidB, buf[:])
	p.rb.expect(EventREQReceived)
}

// The stale check keys on the peer's QPN and CA GUID, as ib_cm's remote QP
// table does (cm_insert_remote_qpn), not on the GID a REQ comes from: the same
// QP from another of the peer's addresses is stale, and a QP of that number on
// another CA is not. Before, it matched the source GID.
func TestStaleREQKeyedOnCAGUID(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	var buf [mad.Size]byte
	req := testREQ(svc) // the connected QP 0x11 of CA 0xA, a new comm ID
	req.LocalCommID, req.LocalCAGUID = 0x1000, 0xA
	mad.Marshal(buf[:], 100, req)
	p.b.Receive(netdev.GIDFromAddr(netip.MustParseAddr("2001:db8::1")), gidB, buf[:])
	if got := p.f.sent(); count(got, mad.AttrREJ) != 1 {
		t.Fatalf("the connected QP from another address: sent %v, want a stale REJ", got)
	}
	p.rb.none(p.b)
	req.LocalCommID, req.LocalCAGUID = 0x2000, 0xC // QP 0x11 of another CA
	mad.Marshal(buf[:], 101, req)
	p.b.Receive(gidA, gidB, buf[:])
	if got := p.f.sent(); count(got, mad.AttrREJ) != 0 {
		t.Fatalf("QP 0x11 of another CA: sent %v, want no REJ", got)
	}
	p.rb.expect(EventREQReceived)
}

// A DREQ reaching an ID in TimeWait is answered with a DREP even when this side
// sent the DREQ and never a DREP (cm_dreq_handler): the peer stops asking.
func TestDREQInTimeWaitAnswered(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	p.f.drop = func(fr frame) bool { return fr.src == gidA } // A's DREQ is lost
	p.active.Destroy()                                       // DREQ once, then TimeWait
	p.f.deliver()
	p.f.drop = nil
	wantState(t, p.active, StateTimeWait)
	if err := p.passive.SendDREQ(nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	if got := p.f.sent(); count(got, mad.AttrDREP) != 1 {
		t.Fatalf("a DREQ to an ID in TimeWait: sent %v, want a DREP", got)
	}
}

// An MRA extends the next wait of our REQ only; the retries after it wait the
// REQ's own timeout (IBTA 12.6.6; Linux applies the MRA once). Before, every
// retry waited the MRA's time: an MRA of 31 held the REQ 16 times 2.4 hours.
func TestMRAExtendsOneWait(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	if err := p.passive.SendMRA(24, nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.ra.expect(EventMRAReceived)
	p.f.sent()
	p.f.drop = func(frame) bool { return true } // the peer goes silent
	p.f.advance(IBTime(24) + 2*IBTime(18))
	if n := count(p.f.sent(), mad.AttrREQ); n != 1 {
		t.Fatalf("%d REQs after the MRA's time, want 1", n)
	}
	p.f.advance(2*IBTime(18) + IBTime(20))
	if n := count(p.f.sent(), mad.AttrREQ); n != 1 {
		t.Fatalf("%d REQs one plain timeout after that, want 1: the MRA's time held for every retry", n)
	}
}

// An MRA of our REP extends its wait by the service timeout and the REQ's
// Local ACK Timeout: the passive side's av.timeout comes from the REQ's path
// (cm_format_paths_from_req), not from this CM's packet life time.
func TestMRAOfREPWaitsREQsACKTimeout(t *testing.T) {
	p := newPair(t, nil)
	p.req = testREQ(svc)
	p.req.Primary.LocalACKTimeout = 22 // 17 s; twice the packet life is 2 s
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	if err := p.passive.SendREP(&mad.REP{LocalQPN: 0x22}); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.ra.expect(EventREPReceived)
	if err := p.active.SendMRA(24, nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.rb.expect(EventMRAReceived)
	p.f.sent()
	p.f.drop = func(frame) bool { return true } // the peer goes silent
	p.f.advance(IBTime(24) + IBTime(22) - time.Millisecond)
	if n := count(p.f.sent(), mad.AttrREP); n != 0 {
		t.Fatalf("%d REPs before the MRA's time and the REQ's ACK timeout", n)
	}
	p.f.advance(time.Millisecond)
	if n := count(p.f.sent(), mad.AttrREP); n != 1 {
		t.Fatalf("%d REPs at the MRA's time and the REQ's ACK timeout, want 1", n)
	}
}

// A delayed MRA (IB_CM_MRA_FLAG_DELAY, which rdma_cm asks for every RC
// request it hands over) sends nothing; the peer's retried REQ draws it, and
// the peer then waits the MRA's time (cm_dup_req_handler in MRA_REQ_SENT).
// Before, the flag was taken as part of the time and the MRA went at once.
func TestDelayedMRAAnswersTheRetry(t *testing.T) {
	p := newPair(t, nil)
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	p.f.sent()
	if err := p.passive.SendMRA(MRAFlagDelay|24, nil); err != nil {
		t.Fatal(err)
	}
	wantState(t, p.passive, StateMRAREQSent)
	wantSent(t, p.f)                  // nothing yet
	p.f.advance(responseWait(18, 20)) // the REQ's timeout: it goes again
	p.ra.expect(EventMRAReceived)
	got := p.f.frames()
	if len(got) != 2 || got[0].attr != mad.AttrREQ || got[1].attr != mad.AttrMRA {
		t.Fatalf("after the REQ's timeout: %v, want the REQ again and the MRA", got)
	}
	if m := got[1].msg.(*mad.MRA); m.ServiceTimeout != 24 || m.MessageMRAed != MsgREQ {
		t.Fatalf("MRA %+v, want service timeout 24 of the REQ", m)
	}
	wantState(t, p.active, StateMRAREQRcvd)
}

// TimeWait lasts the peer's ACK timeout, but an ID in TimeWait holds its place
// under MaxIDs: a peer's Local ACK Timeout of 31 (2.4 hours) holds it no longer
// than MaxPassiveWait, or a few connections would keep every later REQ out.
func TestTimeWaitBoundedWhateverThePeerSays(t *testing.T) {
	p := newPair(t, nil)
	p.req = testREQ(svc)
	p.req.Primary.LocalACKTimeout = 31
	p.connect(t)
	p.disconnect(t)
	p.f.advance(p.b.cfg.MaxPassiveWait)
	p.ra.expect(EventTimeWaitExit)
	p.rb.expect(EventTimeWaitExit)
}

// A delayed MRA grows the half-open expiry only once a duplicate REQ has drawn
// it: until then the peer was asked nothing, and an unanswered REQ held its ID
// 69 s longer for nothing.
func TestDelayedMRAHalfOpen(t *testing.T) {
	for _, dup := range []bool{false, true} {
		p := newPair(t, nil)
		p.req = testREQ(svc)
		p.req.MaxCMRetries = 1 // the REQ alone says 13 s
		p.sendREQ(t)
		p.f.deliver()
		p.passive = p.rb.expect(EventREQReceived).ID
		if err := p.passive.SendMRA(MRAFlagDelay|24, nil); err != nil {
			t.Fatal(err)
		}
		if !dup {
			p.f.drop = func(fr frame) bool { return fr.src == gidA } // no retry arrives
		}
		p.f.advance(responseWait(18, 20)) // the REQ goes again
		if dup {
			p.ra.expect(EventMRAReceived)
		}
		p.f.advance(15 * time.Second) // past the REQ's own 13 s
		if dup {
			wantState(t, p.passive, StateMRAREQSent) // the MRA's 69 s hold it
		} else {
			p.rb.expect(EventREQError)
		}
	}
}

// The passive side's half-open expiry waits as long as the MRA its consumer
// sent asked the peer to: it does not reject the REQ it asked to be waited for.
func TestHalfOpenWaitsForOwnMRA(t *testing.T) {
	p := newPair(t, nil)
	p.req = testREQ(svc)
	p.req.MaxCMRetries = 1 // the REQ alone says 13 s
	p.sendREQ(t)
	p.f.deliver()
	p.passive = p.rb.expect(EventREQReceived).ID
	if err := p.passive.SendMRA(24, nil); err != nil { // about 69 s more
		t.Fatal(err)
	}
	p.f.deliver()
	p.ra.expect(EventMRAReceived)
	p.f.advance(30 * time.Second)
	wantState(t, p.passive, StateMRAREQSent)
	p.f.advance(IBTime(24))
	p.rb.expect(EventREQError) // and then it does expire
}

// A REP naming a QP that already has a connection here (the peer reused it)
// is refused STALE_CONN and the old connection ends with a DREQ
// (cm_rep_handler). Before, the REP was taken.
func TestStaleREPQPNRefused(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t) // the passive side's QP 0x22
	_, pas2 := p.secondREQ(t)
	if err := pas2.SendREP(&mad.REP{LocalQPN: 0x22}); err != nil { // 0x22 again
		t.Fatal(err)
	}
	p.f.deliver()
	if ev := p.ra.next(); ev.Type != EventREJReceived || ev.Msg.(*mad.REJ).Reason != RejStaleConn {
		t.Fatalf("a REP naming a connected QP: %v, want a stale REJ", ev.Type)
	}
	wantState(t, p.active, StateDREQSent)
}

// A REP whose comm ID and CA GUID another connection here already holds is
// refused STALE_CONN and our attempt ends, as for a stale QPN; the connection
// that holds the comm ID stays. (Linux's cm_rep_handler drops such a REP, and
// its REQ is retried until it times out: a REJ ends both sides' attempts at
// once, and a Linux peer takes a stale REJ of its REP.)
func TestStaleREPCommIDRefused(t *testing.T) {
	p := newPair(t, nil)
	p.connect(t)
	id2, pas2 := p.secondREQ(t)
	p.f.drop = func(frame) bool { return true }
	if err := pas2.SendREP(&mad.REP{LocalQPN: 0x44}); err != nil {
		t.Fatal(err)
	}
	p.f.drop = nil
	var rep mad.REP
	for _, fr := range p.f.frames() {
		if r, ok := fr.msg.(*mad.REP); ok {
			rep = *r
		}
	}
	rep.LocalCommID = p.passive.LocalCommID() // the first connection's
	var buf [mad.Size]byte
	mad.Marshal(buf[:], 7, &rep)
	p.a.Receive(gidB, gidA, buf[:])
	if ev := p.ra.next(); ev.Type != EventREJReceived || ev.Msg.(*mad.REJ).Reason != RejStaleConn {
		t.Fatalf("a REP naming another connection's comm ID: %v, want a stale REJ", ev.Type)
	}
	if got := p.f.frames(); len(got) != 1 || got[0].attr != mad.AttrREJ || got[0].msg.(*mad.REJ).Reason != RejStaleConn {
		t.Fatalf("sent %v, want one stale REJ", got)
	}
	wantState(t, id2, StateTimeWait)
	wantState(t, p.active, StateEstablished)
}

// secondREQ starts a second connection beside the pair's, from A's QP 0x33:
// the active ID, and the passive one its REQ made at B.
func (p *pair) secondREQ(t *testing.T) (active, passive *ID) {
	t.Helper()
	id, err := p.a.NewID(p.ra.handle)
	if err != nil {
		t.Fatal(err)
	}
	req := testREQ(svc)
	req.LocalQPN = 0x33
	if err := id.SendREQ(req, REQParam{Src: gidA, Dst: gidB}); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	return id, p.rb.expect(EventREQReceived).ID
}
