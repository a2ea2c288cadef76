package cm

import (
	"errors"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/mad"
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
