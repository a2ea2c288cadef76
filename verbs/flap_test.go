// Link flap and removal on the real data path: devices opened on the two ends of
// a veth pair (AF_XDP links, port events from netlink), an RC stream of RDMA
// WRITEs in progress, and one end set down and up, or deleted, with netlink.
//
// The rules are rxe's and ib_core's (engine.Device.SetPortState cites them): the
// port follows the interface (running with carrier), so both ends of a veth pair
// see PORT_ERR and DOWN when either goes down, and PORT_ACTIVE and ACTIVE when it
// comes back; QPs stay in RTS and are settled by the local ACK timeout alone: a
// flap shorter than the retry budget only costs retransmissions, a longer one
// ends the stream with RETRY_EXC_ERR and flushes the rest. The AF_XDP socket and
// the XDP program survive a flap (only NETDEV_UNREGISTER unbinds a socket), so
// traffic resumes when the link is back.

package verbs

import (
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xrnic/xrnic/internal/testutil/wcstream"
	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
)

const (
	flapTimeout    = 14       // local ACK timeout code: 4.096 us * 2^14 = 67 ms
	flapWRs        = 256      // RDMA WRITEs in the stream, each to its own place
	flapHead       = 160      // posted by the set-up; the rest as the test goes (flapSetup.post)
	flapMsg        = 64 << 10 // bytes per WRITE
	flapBuf        = flapWRs * flapMsg
	flapACKTimeout = 4096 << flapTimeout * time.Nanosecond
)

// vethDevice opens a device on e's interface inside its namespace (AF_XDP, no
// fallback; e's IPv4 address as GID 0) and collects its port events.
func vethDevice(t *testing.T, e *testenv.Endpoint) (*Device, <-chan AsyncEvent) {
	t.Helper()
	var d *Device
	if err := e.Do(func() (err error) {
		d, err = Open(Options{Interface: e.Name, LinkKind: link.KindAFXDP,
			GIDs: []netdev.GID{netdev.GIDFromAddr(e.IPv4)}})
		return err
	}); err != nil {
		t.Fatalf("Open on %s: %v", e.Name, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close %s: %v", d.Name(), err)
		}
	})
	ch, unreg := portEvents(d)
	t.Cleanup(unreg)
	waitPortState(t, d, PortActive)
	return d, ch
}

// connectVeth takes a and b through INIT, RTR and RTS to each other with local
// ACK timeout code flapTimeout and retry_cnt retry. The AVs carry the peers'
// MACs: the test's namespace is not theirs, so the kernel could not resolve them.
func connectVeth(t *testing.T, a, b *endpoint, retry uint8) {
	t.Helper()
	const psnA, psnB = 0x100, 0xfffff0
	acc := uint32(qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead)
	for _, x := range []struct {
		e, peer *endpoint
		rq      uint32
	}{{a, b, psnB}, {b, a, psnA}} {
		init := QPAttr{Attr: qpattr.Attr{State: QPSInit, Port: 1, AccessFlags: acc}}
		if err := x.e.qp.ModifySync(&init, qpattr.AttrState|qpattr.AttrPKeyIndex|qpattr.AttrPort|qpattr.AttrAccessFlags); err != nil {
			t.Fatalf("INIT: %v", err)
		}
		rtr := QPAttr{Attr: qpattr.Attr{State: QPSRTR, PathMTU: qpattr.MTU1024, DestQPN: x.peer.qp.QPN(),
			RQPSN: wire.PSN(x.rq), MaxDestRdAtomic: 16, MinRNRTimer: 1},
			AV: AV{DGID: x.peer.gid, DMAC: x.peer.d.Link().Info().MAC}}
		if err := x.e.qp.ModifySync(&rtr, qpattr.AttrState|qpattr.AttrAV|qpattr.AttrPathMTU|qpattr.AttrDestQPN|
			qpattr.AttrRQPSN|qpattr.AttrMaxDestRdAtomic|qpattr.AttrMinRNRTimer); err != nil {
			t.Fatalf("RTR: %v", err)
		}
	}
	for _, x := range []struct {
		e  *endpoint
		sq uint32
	}{{a, psnA}, {b, psnB}} {
		rts := QPAttr{Attr: qpattr.Attr{State: QPSRTS, SQPSN: wire.PSN(x.sq), Timeout: flapTimeout, RetryCnt: retry,
			RNRRetry: 7, MaxRdAtomic: 16}}
		if err := x.e.qp.ModifySync(&rts, qpattr.AttrState|qpattr.AttrSQPSN|qpattr.AttrTimeout|
			qpattr.AttrRetryCnt|qpattr.AttrRNRRetry|qpattr.AttrMaxQPRdAtomic); err != nil {
			t.Fatalf("RTS: %v", err)
		}
	}
}

// xdpProgram returns the id of the XDP program attached to e's interface, 0 if
// none.
func xdpProgram(t *testing.T, e *testenv.Endpoint) uint32 {
	t.Helper()
	var id uint32
	if err := e.Do(func() error {
		l, err := netlink.LinkByName(e.Name)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			id = x.ProgId
		}
		return nil
	}); err != nil {
		t.Fatalf("XDP program of %s: %v", e.Name, err)
	}
	return id
}

// flapSetup is a pair, a device on each end (A the requester) and a connected
// RC pair whose stream of WRITEs is posted and flowing.
type flapSetup struct {
	p      *testenv.Pair
	da, db *Device
	ea, eb <-chan AsyncEvent // port events of da and db
	a, b   *endpoint
	s      *wcstream.Stream
	posted int // WRs of the stream posted so far
}

// post posts the stream's next n WRs (WRIDs in order).
func (f *flapSetup) post(t *testing.T, n int) {
	t.Helper()
	wrs := make([]SendWR, min(n, flapWRs-f.posted))
	for i := range wrs {
		off := uint64(f.posted+i) * flapMsg
		wrs[i] = SendWR{WRID: uint64(f.posted + i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{f.a.mr.SGE(off, flapMsg)}, RemoteAddr: f.b.mr.Addr() + off, RKey: f.b.mr.RKey()}
	}
	if _, err := f.a.qp.PostSend(wrs); err != nil {
		t.Fatalf("PostSend: %v", err)
	}
	f.posted += len(wrs)
}

// mark is wcstream.MarkProgress on the stream. A loaded host may have let the
// engines finish what was posted before the test got here (they run at a
// raised priority): then 16 more WRs go out, whose completion comes after the
// mark.
func (f *flapSetup) mark(t *testing.T) (Counters, time.Time) {
	t.Helper()
	return wcstream.MarkProgress(t, f.s, f.da.Counters, deadline, "the flap", func(completed int) {
		if completed == f.posted {
			f.post(t, 16)
		}
	})
}

// postRest posts what is left of the stream as the link goes down or away:
// WRs outstanding then, whatever the engines did before.
func (f *flapSetup) postRest(t *testing.T) { f.post(t, flapWRs-f.posted) }

func newFlapSetup(t *testing.T, retry uint8) *flapSetup {
	t.Helper()
	f := &flapSetup{p: testenv.NewTestPair(t, testenv.PairOptions{NoIPv6: true})}
	f.da, f.ea = vethDevice(t, &f.p.A)
	f.db, f.eb = vethDevice(t, &f.p.B)
	c := QPCap{MaxSendWR: flapWRs, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	f.a = newEndpoint(t, f.da, epOpts{oneCQ: true, cap: c, buf: make([]byte, flapBuf)})
	f.b = newEndpoint(t, f.db, epOpts{oneCQ: true, cap: c, buf: make([]byte, flapBuf)})
	connectVeth(t, f.a, f.b, retry)
	fill(f.a.buf, 91)
	f.post(t, flapHead)
	f.s = &wcstream.Stream{CQ: f.a.scq}
	f.s.Until(t, "the stream flowing", deadline, func() bool { return len(f.s.WCs) >= 4 })
	return f
}

// expectPort waits for d's next port event to be want, skipping skip (Open's
// PORT_ACTIVE may reach the handler after it was registered), and for d's port
// state.
func expectPort(t *testing.T, d *Device, ch <-chan AsyncEvent, want EventType, state PortState) {
	t.Helper()
	skip := EventPortActive
	if want == EventPortActive {
		skip = EventPortErr
	}
	if ev := nextEvent(t, ch, skip); ev.Type != want || ev.Port != 1 {
		t.Fatalf("%s: %v on port %d, want %v", d.Name(), ev.Type, ev.Port, want)
	}
	waitPortState(t, d, state)
}

// settledActive waits for d's port to be ACTIVE and returns how many times it
// went down meanwhile, checking that its events alternate, PORT_ERR first. It is
// for the end that was not set down: the kernel reports the loss of carrier
// through linkwatch, which on these veths runs up to a second late, so a flap
// shorter than that may reach this end as two events or as none (the state it
// finally reads has not changed); rxe, on NETDEV_CHANGE from the same linkwatch,
// sees the same.
func settledActive(t *testing.T, d *Device, ch <-chan AsyncEvent) int {
	t.Helper()
	waitPortState(t, d, PortActive)
	var seq []EventType
	for {
		select {
		case ev := <-ch:
			if len(seq) == 0 && ev.Type == EventPortActive {
				continue // Open's, or nothing happened here
			}
			seq = append(seq, ev.Type)
			continue
		default:
		}
		if len(seq)%2 == 0 {
			break
		}
		// ACTIVE is set before its event is queued: it is on its way.
		seq = append(seq, nextEvent(t, ch, EventPortErr).Type)
	}
	for i, ev := range seq {
		if want := []EventType{EventPortErr, EventPortActive}[i%2]; ev != want {
			t.Fatalf("%s: port events %v, want PORT_ERR and PORT_ACTIVE in turn", d.Name(), seq)
		}
	}
	return len(seq) / 2
}

// linkDowned returns how many times d's port went down since c0 (link_downed,
// counted as rxe counts it: once per change to DOWN).
func linkDowned(d *Device, c0 Counters) uint64 {
	return d.Counters()[engine.CntLinkDowned] - c0[engine.CntLinkDowned]
}

func TestVethLinkFlap(t *testing.T) {
	for _, c := range []struct {
		name  string
		peer  bool // flap B, the responder's end, instead of A's
		long  bool // keep the link down past the retry budget
		retry uint8
	}{
		{"short/local", false, false, 7},
		{"short/peer", true, false, 7},
		{"long/local", false, true, 3},
		{"long/peer", true, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) { vethLinkFlap(t, c.peer, c.long, c.retry) })
	}
}

func vethLinkFlap(t *testing.T, peer, long bool, retry uint8) {
	f := newFlapSetup(t, retry)
	// The flapped end is set down and up by netlink; the other loses carrier.
	flapped, fd, fch, od, och := &f.p.A, f.da, f.ea, f.db, f.eb
	if peer {
		flapped, fd, fch, od, och = &f.p.B, f.db, f.eb, f.da, f.ea
	}
	progA, progB := xdpProgram(t, &f.p.A), xdpProgram(t, &f.p.B)
	if progA == 0 || progB == 0 {
		t.Fatalf("XDP programs %d, %d: the devices did not attach", progA, progB)
	}
	ca0, mark := f.mark(t)
	cf0, co0 := fd.Counters(), od.Counters()

	setLink(t, flapped, "down")
	down, retriesAtDown := time.Now(), f.da.Counters()[engine.CntCompRetry]
	f.postRest(t)
	expectPort(t, fd, fch, EventPortErr, PortDown)
	if st := f.a.qp.State(); st != QPSRTS {
		t.Fatalf("QP in %v with the port down, want RTS (a port event is no QP error)", st)
	}
	budget := time.Duration(retry+1) * flapACKTimeout
	limit := 3*budget + 2*time.Second
	if !long {
		// Down until a local ACK timeout fired with its retransmission lost: the
		// flap costs at least one retry, well within the budget.
		if !waitFor(func() bool { return f.da.Counters()[engine.CntCompRetry] > retriesAtDown }) {
			t.Fatalf("no retry while the link was down")
		}
	} else {
		// Down until the requester gave up, longer than the budget by definition,
		// and until the other end saw its carrier go.
		f.s.Until(t, "RETRY_EXC_ERR with the link down", limit+5*time.Second, func() bool { return !f.s.ErrAt.IsZero() })
		expectPort(t, od, och, EventPortErr, PortDown)
	}
	setLink(t, flapped, "up")
	downFor := time.Since(down)
	// The data path does not wait for these: linkwatch may report the carrier a
	// second late, far longer than a short flap's retries take to resume.
	expectPort(t, fd, fch, EventPortActive, PortActive)
	if long {
		expectPort(t, od, och, EventPortActive, PortActive)
	} else if n := settledActive(t, od, och); n > 1 {
		t.Errorf("%s went down %d times in one flap", od.Name(), n)
	}

	f.s.Until(t, "every WR completed", deadline, func() bool { return len(f.s.WCs) == flapWRs })
	noMore(t, f.a.scq)
	ca1 := f.da.Counters()
	retries := ca1[engine.CntCompRetry] - ca0[engine.CntCompRetry]
	resent := ca1[engine.CntRetransmitted] - ca0[engine.CntRetransmitted]
	t.Logf("%s down for %v (budget (%d+1) x %v = %v); requester: %d retries, %d packets retransmitted, %d frames the link refused",
		flapped.Name, downFor.Round(time.Millisecond), retry, flapACKTimeout, budget, retries, resent,
		ca1[engine.CntSendErr]-ca0[engine.CntSendErr])
	if n := linkDowned(fd, cf0); n != 1 {
		t.Errorf("%s: link_downed %d, want 1 for one flap", fd.Name(), n)
	}
	if n := linkDowned(od, co0); n > 1 || long && n != 1 {
		t.Errorf("%s (carrier lost): link_downed %d for one flap", od.Name(), n)
	}
	if a, b := xdpProgram(t, &f.p.A), xdpProgram(t, &f.p.B); a != progA || b != progB {
		t.Errorf("XDP programs %d, %d after the flap, want %d, %d still attached", a, b, progA, progB)
	}

	if !long {
		for i, w := range f.s.WCs {
			if w.WRID != uint64(i) || w.Status != WCSuccess {
				t.Fatalf("completion %d: WRID %d %v, want WRID %d success", i, w.WRID, w.Status, i)
			}
		}
		if retries == 0 || resent == 0 {
			t.Errorf("%d retries, %d packets retransmitted: the flap cost nothing?", retries, resent)
		}
		// The kernel carried the ACKs between the engines, out of the race
		// detector's sight: a pass of B's engine orders its writes before the read.
		f.db.Engine().Sync().Wait()
		checkBytes(t, "written across the flap", f.b.buf, f.a.buf)
		if st := f.a.qp.State(); st != QPSRTS {
			t.Errorf("QP in %v after the flap, want RTS", st)
		}
		return
	}

	ok := checkRetryExceeded(t, f.s.WCs, flapWRs)
	if st := f.a.qp.State(); st != QPSErr {
		t.Errorf("QP in %v after RETRY_EXC_ERR, want ERR", st)
	}
	if retries < uint64(retry) {
		t.Errorf("gave up after %d retries, want %d (retry_cnt)", retries, retry)
	}
	// The last progress came after mark: no RETRY_EXC_ERR before retry_cnt+1
	// timeouts after it, less one of slack for the engine pass that started the
	// timer just before mark.
	if el := f.s.ErrAt.Sub(mark); el < time.Duration(retry)*flapACKTimeout {
		t.Errorf("RETRY_EXC_ERR %v after the last progress, before %d local ACK timeouts", el, retry)
	}
	el := f.s.ErrAt.Sub(down)
	if el > limit {
		t.Errorf("RETRY_EXC_ERR %v after the link went down, over %v (budget %v)", el, limit, budget)
	}
	t.Logf("RETRY_EXC_ERR %v after the link went down; %d WRs succeeded, %d flushed", el.Round(time.Millisecond),
		ok, flapWRs-ok-1)

	// The link is back: a new connection on the same devices moves data.
	a2 := newEndpoint(t, f.da, epOpts{oneCQ: true})
	b2 := newEndpoint(t, f.db, epOpts{oneCQ: true})
	connectVeth(t, a2, b2, retry)
	fill(a2.buf[:flapMsg], 17)
	mustPostSend(t, a2.qp, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a2.mr.SGE(0, flapMsg)},
		RemoteAddr: b2.mr.Addr(), RKey: b2.mr.RKey()})
	if w := pollN(t, a2.scq, 1)[0]; w.Status != WCSuccess {
		t.Fatalf("WRITE after the link came back: %v", w.Status)
	}
	f.db.Engine().Sync().Wait()
	checkBytes(t, "written after the link came back", b2.buf[:flapMsg], a2.buf[:flapMsg])
}

// TestVethLinkRemoved: the veth pair deleted mid-transfer (NETDEV_UNREGISTER on
// both ends). Each device reports PORT_ERR then DEVICE_FATAL, once; the
// requester's QP runs on by its timers, ends with RETRY_EXC_ERR and flushes the
// rest; the devices close cleanly.
func TestVethLinkRemoved(t *testing.T) {
	const retry = 3
	f := newFlapSetup(t, retry)
	ca0, mark := f.mark(t)
	setLink(t, &f.p.A, "delete")
	gone := time.Now()
	f.postRest(t)
	for _, x := range []struct {
		d  *Device
		ch <-chan AsyncEvent
	}{{f.da, f.ea}, {f.db, f.eb}} {
		for _, want := range []EventType{EventPortErr, EventDeviceFatal} {
			if ev := nextEvent(t, x.ch, EventPortActive); ev.Type != want {
				t.Fatalf("%s after the link's removal: %v, want %v", x.d.Name(), ev.Type, want)
			}
		}
		waitPortState(t, x.d, PortDown)
	}
	budget := time.Duration(retry+1) * flapACKTimeout
	limit := 3*budget + 2*time.Second
	f.s.Until(t, "every WR completed", limit+5*time.Second, func() bool { return len(f.s.WCs) == flapWRs })
	noMore(t, f.a.scq)
	ok := checkRetryExceeded(t, f.s.WCs, flapWRs)
	ca1 := f.da.Counters()
	if retries := ca1[engine.CntCompRetry] - ca0[engine.CntCompRetry]; retries < retry {
		t.Errorf("gave up after %d retries, want %d (retry_cnt)", retries, retry)
	}
	if el := f.s.ErrAt.Sub(mark); el < retry*flapACKTimeout {
		t.Errorf("RETRY_EXC_ERR %v after the last progress, before %d local ACK timeouts", el, retry)
	}
	el := f.s.ErrAt.Sub(gone)
	if el > limit {
		t.Errorf("RETRY_EXC_ERR %v after the link's removal, over %v (budget %v)", el, limit, budget)
	}
	t.Logf("RETRY_EXC_ERR %v after the link's removal (budget %v); %d WRs succeeded, %d flushed; %d frames the link refused",
		el.Round(time.Millisecond), budget, ok, flapWRs-ok-1, ca1[engine.CntSendErr]-ca0[engine.CntSendErr])
	for _, ch := range []<-chan AsyncEvent{f.ea, f.eb} {
		select {
		case ev := <-ch:
			t.Errorf("event after DEVICE_FATAL: %v", ev.Type)
		default:
		}
	}
}

// checkRetryExceeded checks that wcs are WRs 0..n-1 in order: successes, then
// one RETRY_EXC_ERR, then WR_FLUSH_ERR; each WR exactly once. It returns how
// many succeeded.
func checkRetryExceeded(t *testing.T, wcs []WC, n int) int {
	t.Helper()
	if len(wcs) != n {
		t.Fatalf("%d completions for %d WRs", len(wcs), n)
	}
	ok := 0
	for ok < n && wcs[ok].Status == WCSuccess {
		ok++
	}
	for i, w := range wcs {
		want := WCSuccess
		switch {
		case i == ok:
			want = WCRetryExcErr
		case i > ok:
			want = WCWRFlushErr
		}
		if w.WRID != uint64(i) || w.Status != want {
			t.Fatalf("completion %d: WRID %d %v, want WRID %d %v (%d succeeded before)", i, w.WRID, w.Status, i, want, ok)
		}
	}
	if ok == n {
		t.Fatalf("all %d WRs succeeded", n)
	}
	return ok
}
