// Test helpers at the verbs level: two devices over a memory link (one of them
// optionally behind a wrapper), endpoints of PD, CQ, MR and QP, connecting RC and
// UD QPs through the verbs calls, polling with a deadline, a ledger of work
// requests, and goroutine ids.

package verbs

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// deadline bounds waits for another goroutine: a hang detector, not a speed test.
const deadline = 20 * time.Second

var (
	gidA = netdev.GIDFromAddr(netip.MustParseAddr("192.0.2.11"))
	gidB = netdev.GIDFromAddr(netip.MustParseAddr("192.0.2.12"))
)

// memDevicesWrapped is memDevices with a's link wrapped by wrapA before Open.
func memDevicesWrapped(t testing.TB, wrapA func(link.Link) link.Link) (a, b *Device) {
	t.Helper()
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var l link.Link = la
	if wrapA != nil {
		l = wrapA(la)
	}
	a, err = Open(Options{Link: l, GIDs: []netdev.GID{gidA}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	b, err = Open(Options{Link: lb, GIDs: []netdev.GID{gidB}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
		la.Close()
		lb.Close()
	})
	return a, b
}

// endpoint is one side of a connection: a PD, a send and a receive CQ, a
// registered buffer and a QP.
type endpoint struct {
	d    *Device
	pd   *PD
	scq  *CQ
	rcq  *CQ
	mr   *MR
	buf  []byte
	qp   *QP
	srq  *SRQ
	gid  netdev.GID
	name string
}

type epOpts struct {
	typ     QPType
	pd      *PD
	scqOpts CQOptions // the send CQ's options
	rcqOpts CQOptions // the receive CQ's options
	oneCQ   bool      // the receive CQ is the send CQ
	cqe     int
	srq     *SRQ
	buf     []byte // registered instead of a fresh 1 MiB slice
	cap     QPCap
}

// newEndpoint creates an endpoint; its objects are destroyed at cleanup, before
// the devices close, and the cleanup waits for the CQs' handler calls to end (so a
// test whose handler blocks must unblock it before its cleanups run).
func newEndpoint(t testing.TB, d *Device, o epOpts) *endpoint {
	t.Helper()
	if o.typ == 0 {
		o.typ = RC
	}
	if o.cqe == 0 {
		o.cqe = 1024
	}
	if o.cap.MaxSendWR == 0 {
		o.cap = QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}
	}
	e := &endpoint{d: d, pd: o.pd, srq: o.srq, gid: d.GIDs()[0], name: d.Name()}
	var err error
	if e.pd == nil {
		if e.pd, err = d.AllocPD(); err != nil {
			t.Fatalf("AllocPD: %v", err)
		}
	}
	if e.scq, err = d.CreateCQ(o.cqe, o.scqOpts); err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	e.rcq = e.scq
	if !o.oneCQ {
		if e.rcq, err = d.CreateCQ(o.cqe, o.rcqOpts); err != nil {
			t.Fatalf("CreateCQ: %v", err)
		}
	}
	e.buf = o.buf
	if e.buf == nil {
		e.buf = make([]byte, 1<<20)
	}
	if e.mr, err = e.pd.RegMR(e.buf, 0x10000, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic); err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	if e.qp, err = e.pd.CreateQP(QPInitAttr{Type: o.typ, SendCQ: e.scq, RecvCQ: e.rcq, SRQ: o.srq, Cap: o.cap}); err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	t.Cleanup(func() {
		e.qp.Destroy().Wait()
		e.mr.Dereg()
		for _, c := range []*CQ{e.scq, e.rcq} {
			c.Destroy().Wait() // no handler call outlives the test
			if e.rcq == e.scq {
				break
			}
		}
		if o.pd == nil {
			e.pd.Dealloc()
		}
	})
	return e
}

// connectRC takes two RC (or UC) QPs through INIT, RTR and RTS to each other.
func connectRC(t testing.TB, a, b *endpoint) {
	t.Helper()
	up := func(x, y *endpoint, rq uint32) {
		t.Helper()
		rc := x.qp.Type() == RC
		acc := uint32(qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead | qpattr.AccessRemoteAtomic)
		if !rc {
			acc = qpattr.AccessRemoteWrite
		}
		init := QPAttr{Attr: qpattr.Attr{State: QPSInit, Port: 1, AccessFlags: acc}}
		if err := x.qp.ModifySync(&init, qpattr.AttrState|qpattr.AttrPKeyIndex|qpattr.AttrPort|qpattr.AttrAccessFlags); err != nil {
			t.Fatalf("INIT: %v", err)
		}
		rtr := QPAttr{Attr: qpattr.Attr{State: QPSRTR, PathMTU: qpattr.MTU1024, DestQPN: y.qp.QPN(), RQPSN: wire.PSN(rq),
			MaxDestRdAtomic: 16, MinRNRTimer: 1}, AV: AV{DGID: y.gid}}
		mask := qpattr.AttrState | qpattr.AttrAV | qpattr.AttrPathMTU | qpattr.AttrDestQPN | qpattr.AttrRQPSN
		if rc {
			mask |= qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer
		}
		if err := x.qp.ModifySync(&rtr, mask); err != nil {
			t.Fatalf("RTR: %v", err)
		}
	}
	rts := func(x *endpoint, sq uint32) {
		t.Helper()
		a := QPAttr{Attr: qpattr.Attr{State: QPSRTS, SQPSN: wire.PSN(sq), Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}}
		mask := qpattr.AttrState | qpattr.AttrSQPSN
		if x.qp.Type() == RC {
			mask |= qpattr.AttrTimeout | qpattr.AttrRetryCnt | qpattr.AttrRNRRetry | qpattr.AttrMaxQPRdAtomic
		}
		if err := x.qp.ModifySync(&a, mask); err != nil {
			t.Fatalf("RTS: %v", err)
		}
	}
	const psnA, psnB = 0x100, 0xfffff0
	up(a, b, psnB)
	up(b, a, psnA)
	rts(a, psnA)
	rts(b, psnB)
}

// rcPair makes two connected RC endpoints on a and b.
func rcPair(t testing.TB, a, b *Device, oa, ob epOpts) (*endpoint, *endpoint) {
	t.Helper()
	ea, eb := newEndpoint(t, a, oa), newEndpoint(t, b, ob)
	connectRC(t, ea, eb)
	return ea, eb
}

// udUp takes a UD QP to RTS with Q_Key qkey.
func udUp(t testing.TB, e *endpoint, qkey uint32) {
	t.Helper()
	steps := []struct {
		a    qpattr.Attr
		mask AttrMask
	}{
		{qpattr.Attr{State: QPSInit, Port: 1, QKey: qkey}, qpattr.AttrState | qpattr.AttrPKeyIndex | qpattr.AttrPort | qpattr.AttrQKey},
		{qpattr.Attr{State: QPSRTR}, qpattr.AttrState},
		{qpattr.Attr{State: QPSRTS, SQPSN: 0x1234}, qpattr.AttrState | qpattr.AttrSQPSN},
	}
	for _, s := range steps {
		if err := e.qp.ModifySync(&QPAttr{Attr: s.a}, s.mask); err != nil {
			t.Fatalf("UD to %v: %v", s.a.State, err)
		}
	}
}

// pollN polls c until n completions arrived; it fails the test after deadline.
func pollN(t testing.TB, c *CQ, n int) []WC {
	t.Helper()
	got := make([]WC, 0, n)
	buf := make([]WC, 64)
	end := time.Now().Add(deadline)
	for len(got) < n {
		k := c.Poll(buf[:min(len(buf), n-len(got))])
		got = append(got, buf[:k]...)
		if k == 0 {
			if time.Now().After(end) {
				t.Fatalf("got %d completions, want %d: %+v", len(got), n, got)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return got
}

// noMore checks that c stays empty for a moment.
func noMore(t testing.TB, c *CQ) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	var w [4]WC
	if n := c.Poll(w[:]); n != 0 {
		t.Fatalf("unexpected completions: %+v", w[:n])
	}
}

func checkWC(t testing.TB, got, want WC) {
	t.Helper()
	if got != want {
		t.Fatalf("WC:\n got %+v\nwant %+v", got, want)
	}
}

// checkErrWC compares the fields a failed completion defines (ibv_poll_cq(3)).
func checkErrWC(t testing.TB, got WC, wrid uint64, st WCStatus, qpn uint32) {
	t.Helper()
	if got.WRID != wrid || got.Status != st || got.QPN != qpn {
		t.Fatalf("WC: got {WRID:%d Status:%v QPN:%#x}, want {WRID:%d Status:%v QPN:%#x}", got.WRID, got.Status, got.QPN,
			wrid, st, qpn)
	}
}

func checkBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: differs at byte %d of %d/%d", what, i, len(got), len(want))
	}
}

// fill writes a pattern into b.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

func mustPostSend(t testing.TB, qp *QP, wr SendWR) {
	t.Helper()
	if _, err := qp.PostSend([]SendWR{wr}); err != nil {
		t.Fatalf("PostSend %v: %v", wr.Opcode, err)
	}
}

func mustPostRecv(t testing.TB, qp *QP, wr RecvWR) {
	t.Helper()
	if _, err := qp.PostRecv([]RecvWR{wr}); err != nil {
		t.Fatalf("PostRecv: %v", err)
	}
}

// waitFor polls cond until it holds; false after deadline.
func waitFor(cond func() bool) bool {
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// ledger tracks work requests: each posted WRID must complete exactly once.
type ledger struct {
	mu     sync.Mutex
	posted map[uint64]int // WRID -> completions seen
	bad    []string
}

func newLedger() *ledger { return &ledger{posted: map[uint64]int{}} }

func (l *ledger) post(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.posted[id]; ok {
		l.bad = append(l.bad, fmt.Sprintf("WRID %#x posted twice", id))
	}
	l.posted[id] = 0
}

// unpost forgets a WRID whose post failed.
func (l *ledger) unpost(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.posted, id)
}

func (l *ledger) complete(wc *WC) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.posted[wc.WRID]
	switch {
	case !ok:
		l.bad = append(l.bad, fmt.Sprintf("completion of unknown WRID %#x: %+v", wc.WRID, *wc))
	case n > 0:
		l.bad = append(l.bad, fmt.Sprintf("WRID %#x completed twice", wc.WRID))
	case wc.Status != 0:
		l.bad = append(l.bad, fmt.Sprintf("WRID %#x: %v", wc.WRID, wc.Status))
	}
	l.posted[wc.WRID] = n + 1
}

// pending is the number of posted WRIDs not yet completed.
func (l *ledger) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := 0
	for _, n := range l.posted {
		if n == 0 {
			k++
		}
	}
	return k
}

func (l *ledger) check(t testing.TB, wantPosted int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bad {
		t.Error(b)
	}
	if len(l.posted) != wantPosted {
		t.Errorf("%d WRs posted, want %d", len(l.posted), wantPosted)
	}
	missing := 0
	for _, n := range l.posted {
		if n == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d WRs never completed", missing, len(l.posted))
	}
}

// goid returns the current goroutine's id, parsed from runtime.Stack. Tests only:
// it tells whether a callback ran on the caller's goroutine.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	b = b[:bytes.IndexByte(b, ' ')]
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("goid: " + err.Error())
	}
	return id
}

// stacks returns every goroutine's stack, for a watchdog's report.
func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// eventLog records a device's asynchronous events.
type eventLog struct {
	mu  sync.Mutex
	evs []AsyncEvent
}

func (l *eventLog) handler(ev AsyncEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

// filter returns the recorded events keep accepts.
func (l *eventLog) filter(keep func(AsyncEvent) bool) []AsyncEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []AsyncEvent
	for _, ev := range l.evs {
		if keep(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func (l *eventLog) count(keep func(AsyncEvent) bool) int { return len(l.filter(keep)) }

func ofType(ts ...EventType) func(AsyncEvent) bool {
	return func(ev AsyncEvent) bool {
		for _, t := range ts {
			if ev.Type == t {
				return true
			}
		}
		return false
	}
}
