package cm

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/nic/netdev"
)

// fabric is an in-memory QP1 network between CMs: MADs queue until deliver
// hands them over, so that tests decide the order and what is lost.
type fabric struct {
	t   testing.TB
	clk *clock.Manual

	mu   sync.Mutex
	q    []frame
	log  []frame
	cms  map[GID]*CM
	drop func(f frame) bool
}

type frame struct {
	src, dst GID
	b        []byte
	attr     mad.AttrID
	tid      uint64
	msg      mad.Message
}

var (
	gidA = netdev.GIDFromAddr(netip.MustParseAddr("192.0.2.1"))
	gidB = netdev.GIDFromAddr(netip.MustParseAddr("192.0.2.2"))
)

func newFabric(t testing.TB) *fabric {
	return &fabric{t: t, clk: clock.NewManual(time.Unix(1e9, 0)), cms: map[GID]*CM{}}
}

type port struct {
	f *fabric
}

func (p port) SendMAD(src, dst GID, b []byte) error {
	fr := frame{src: src, dst: dst, b: append([]byte(nil), b...)}
	h, m, err := mad.Parse(fr.b)
	if err == nil {
		fr.attr, fr.tid, fr.msg = h.AttrID, h.TID, m
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.log = append(p.f.log, fr)
	if p.f.drop != nil && p.f.drop(fr) {
		return nil
	}
	p.f.q = append(p.f.q, fr)
	return nil
}

// newCM adds a CM at gid.
func (f *fabric) newCM(gid GID, guid uint64, mod func(*Config)) *CM {
	cfg := Config{Transport: port{f}, Clock: f.clk, CAGUID: guid}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	f.mu.Lock()
	f.cms[gid] = c
	f.mu.Unlock()
	return c
}

// deliver hands over every queued MAD, and those they cause, in order.
func (f *fabric) deliver() {
	for {
		f.mu.Lock()
		if len(f.q) == 0 {
			f.mu.Unlock()
			return
		}
		fr := f.q[0]
		f.q = f.q[1:]
		c := f.cms[fr.dst]
		f.mu.Unlock()
		if c != nil {
			c.Receive(fr.src, fr.dst, fr.b)
		}
	}
}

// sent returns the attributes sent so far, in order, and forgets them.
func (f *fabric) sent() []mad.AttrID {
	f.mu.Lock()
	defer f.mu.Unlock()
	var a []mad.AttrID
	for _, fr := range f.log {
		a = append(a, fr.attr)
	}
	f.log = nil
	return a
}

func (f *fabric) frames() []frame {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.log
	f.log = nil
	return l
}

// advance moves the clock, delivers what the timers sent, and waits until
// every CM's handlers have run: the manual clock must not outrun the events.
func (f *fabric) advance(d time.Duration) {
	f.clk.Advance(d)
	f.deliver()
	f.settle()
}

// settle waits until no CM has an event queued or a handler running.
func (f *fabric) settle() {
	f.mu.Lock()
	cms := make([]*CM, 0, len(f.cms))
	for _, c := range f.cms {
		cms = append(cms, c)
	}
	f.mu.Unlock()
	for _, c := range cms {
		e := &c.events
		e.mu.Lock()
		for (len(e.q) > 0 || e.running != nil) && !e.stopped {
			e.cond.Wait()
		}
		e.mu.Unlock()
	}
}

// recorder collects a handler's events.
type recorder struct {
	t  testing.TB
	ch chan Event
}

func newRecorder(t testing.TB) *recorder { return &recorder{t: t, ch: make(chan Event, 1024)} }

func (r *recorder) handle(ev Event) { r.ch <- ev }

// next waits for the next event (the deadline only guards against a hang).
func (r *recorder) next() Event {
	r.t.Helper()
	select {
	case ev := <-r.ch:
		return ev
	case <-time.After(10 * time.Second):
		r.t.Fatal("no CM event")
		return Event{}
	}
}

func (r *recorder) expect(typ EventType) Event {
	r.t.Helper()
	ev := r.next()
	if ev.Type != typ {
		r.t.Fatalf("event %v, want %v", ev.Type, typ)
	}
	return ev
}

// none checks that no event is queued once the CM's goroutine has caught up.
func (r *recorder) none(c *CM) {
	r.t.Helper()
	c.events.post(Event{ID: &ID{cm: c}, Type: -1})
	// The marker has no handler: wait for the queue to pass it.
	for {
		c.events.mu.Lock()
		n := len(c.events.q)
		c.events.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case ev := <-r.ch:
		r.t.Fatalf("unexpected event %v", ev.Type)
	default:
	}
}

func testREQ(service uint64) *mad.REQ {
	return &mad.REQ{ServiceID: service, LocalQPN: 0x11, StartingPSN: 0x123456,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, RetryCount: 7, RNRRetryCount: 7,
		MaxCMRetries: 15, PKey: 0xffff, PathMTU: 3, ResponderResources: 1, InitiatorDepth: 1,
		Primary: mad.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: gidA, RemoteGID: gidB,
			HopLimit: 64, LocalACKTimeout: 19}}
}

// pair is an active CM at gidA and a passive one listening at gidB.
type pair struct {
	f              *fabric
	a, b           *CM
	ra, rb         *recorder
	active, listen *ID
	passive        *ID
	req            *mad.REQ // default testREQ(svc)
}

const svc = 0x0000000001060000 | 7174

func newPair(t *testing.T, mod func(*Config)) *pair {
	f := newFabric(t)
	p := &pair{f: f, a: f.newCM(gidA, 0xA, mod), b: f.newCM(gidB, 0xB, mod), ra: newRecorder(t), rb: newRecorder(t)}
	var err error
	if p.listen, err = p.b.NewID(p.rb.handle); err != nil {
		t.Fatal(err)
	}
	if err := p.listen.Listen(svc); err != nil {
		t.Fatal(err)
	}
	if p.active, err = p.a.NewID(p.ra.handle); err != nil {
		t.Fatal(err)
	}
	return p
}

// connect runs REQ, REP, RTU and checks both sides end Established.
func (p *pair) connect(t *testing.T) {
	t.Helper()
	p.sendREQ(t)
	p.f.deliver()
	ev := p.rb.expect(EventREQReceived)
	p.passive = ev.ID
	if err := p.passive.SendREP(&mad.REP{LocalQPN: 0x22, StartingPSN: 0x654321}); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.ra.expect(EventREPReceived)
	if err := p.active.SendRTU(nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.rb.expect(EventRTUReceived)
	wantState(t, p.active, StateEstablished)
	wantState(t, p.passive, StateEstablished)
	p.f.sent()
}

// disconnect ends a connected pair: the active side's DREQ, the passive
// side's DREP; both are in TimeWait after.
func (p *pair) disconnect(t *testing.T) {
	t.Helper()
	if err := p.active.SendDREQ(nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.rb.expect(EventDREQReceived)
	if err := p.passive.SendDREP(nil); err != nil {
		t.Fatal(err)
	}
	p.f.deliver()
	p.ra.expect(EventDREPReceived)
}

func (p *pair) sendREQ(t *testing.T) {
	t.Helper()
	req := p.req
	if req == nil {
		req = testREQ(svc)
	}
	if err := p.active.SendREQ(req, REQParam{Src: gidA, Dst: gidB}); err != nil {
		t.Fatal(err)
	}
}

func wantState(t *testing.T, id *ID, s State) {
	t.Helper()
	if got := id.State(); got != s {
		t.Fatalf("state %v, want %v", got, s)
	}
}

// count returns how many of attrs are a.
func count(attrs []mad.AttrID, a mad.AttrID) int {
	n := 0
	for _, x := range attrs {
		if x == a {
			n++
		}
	}
	return n
}

func wantSent(t *testing.T, f *fabric, want ...mad.AttrID) {
	t.Helper()
	got := f.sent()
	if len(got) != len(want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("sent %v, want %v", got, want)
		}
	}
}
