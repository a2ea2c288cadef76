// Test helpers: two devices back to back over a memory link, connected QPs,
// registered buffers, and polling with a deadline.

package engine

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

var (
	addrA = netip.MustParseAddr("192.0.2.11")
	addrB = netip.MustParseAddr("192.0.2.12")
)

// pairOpts configure newPair.
type pairOpts struct {
	mem      link.MemoryOptions
	clock    clock.Clock
	v6       bool
	mtu      int
	events   func(AsyncEvent)
	eventsB  func(AsyncEvent)
	batch    int
	txBudget int
	wrapA    func(link.Link) link.Link // wraps A's link before Open
	resolveA func(context.Context, netip.Addr) (net.HardwareAddr, error)
	busy     bool // Config.BusyPoll on both
}

// pair is two devices joined by a memory link.
type pair struct {
	a, b   *Device
	la, lb *link.Memory
}

func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	la, lb, err := link.NewMemoryPair(o.mem)
	if err != nil {
		t.Fatalf("NewMemoryPair: %v", err)
	}
	ga, gb := netdev.GIDFromAddr(addrA), netdev.GIDFromAddr(addrB)
	if o.v6 {
		ga = netdev.GIDFromAddr(netip.MustParseAddr("2001:db8::11"))
		gb = netdev.GIDFromAddr(netip.MustParseAddr("2001:db8::12"))
	}
	open := func(l link.Link, g netdev.GID, ev func(AsyncEvent),
		resolve func(context.Context, netip.Addr) (net.HardwareAddr, error)) *Device {
		d, err := Open(l, Config{Clock: o.clock, GIDs: []netdev.GID{g}, MTU: o.mtu, EventHandler: ev,
			Batch: o.batch, TxBudget: o.txBudget, ResolveMAC: resolve, BusyPoll: o.busy})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return d
	}
	p := &pair{la: la, lb: lb}
	var l link.Link = la
	if o.wrapA != nil {
		l = o.wrapA(la)
	}
	p.a = open(l, ga, o.events, o.resolveA)
	p.b = open(lb, gb, o.eventsB, nil)
	t.Cleanup(func() {
		if err := p.a.Close(); err != nil {
			t.Errorf("close a: %v", err)
		}
		if err := p.b.Close(); err != nil {
			t.Errorf("close b: %v", err)
		}
		la.Close()
		lb.Close()
	})
	return p
}

// node is one side of a connection: a PD, a CQ, a QP and a registered buffer.
type node struct {
	d   *Device
	pd  *PD
	cq  *CQ
	rcq *CQ
	qp  *QP
	mr  *MR
	buf []byte
}

type nodeOpts struct {
	typ    qpattr.Type
	cap    qpattr.Cap
	bufLen int
	access mr.Access
	sigAll bool
	srq    *SRQ
	pd     *PD
	cqe    int
	cq     *CQ // the send and receive CQ, shared with other nodes; else a CQ of its own
}

func newNode(t testing.TB, d *Device, o nodeOpts) *node {
	t.Helper()
	if o.typ == 0 {
		o.typ = qpattr.RC
	}
	if o.bufLen == 0 {
		o.bufLen = 1 << 20
	}
	if o.access == 0 {
		o.access = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	}
	if o.cap.MaxSendWR == 0 {
		o.cap = qpattr.Cap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}
	}
	if o.cqe == 0 {
		o.cqe = 1024
	}
	n := &node{d: d, pd: o.pd}
	var err error
	if n.pd == nil {
		if n.pd, err = d.AllocPD(); err != nil {
			t.Fatalf("AllocPD: %v", err)
		}
	}
	n.cq = o.cq
	if n.cq == nil {
		if n.cq, err = d.CreateCQ(o.cqe, CQOptions{}); err != nil {
			t.Fatalf("CreateCQ: %v", err)
		}
	}
	n.rcq = n.cq
	n.buf = make([]byte, o.bufLen)
	if n.mr, err = n.pd.RegMR(n.buf, 0x10000, o.access); err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	if n.qp, err = n.pd.CreateQP(QPInitAttr{Type: o.typ, SendCQ: n.cq, RecvCQ: n.cq, Cap: o.cap, SigAll: o.sigAll,
		SRQ: o.srq}); err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	t.Cleanup(func() {
		if n.qp.pubState.Load() != stateDestroyed {
			n.qp.Destroy().Wait()
		}
		n.mr.Dereg()
		if o.cq == nil {
			n.cq.Close()
		}
	})
	return n
}

// gid returns the device's first GID.
func (n *node) gid() netdev.GID { return n.d.cfg.GIDs[0] }

// connOpts are the connection attributes of connect.
type connOpts struct {
	mtu        qpattr.MTU
	timeout    uint8
	retry      uint8
	rnrRetry   uint8
	minRNR     uint8
	rdAtomic   uint8
	access     uint32
	psnA, psnB wire.PSN
	dgidA      netdev.GID // A's destination instead of B's GID (one that does not answer)
	destQPNA   uint32     // A's destination QPN instead of B's QP's (one B does not have)
	resolve    bool       // the AVs carry no MAC: the devices find it (Config.ResolveMAC)
}

// connect takes two RC or UC QPs through INIT, RTR and RTS to each other.
func connect(t testing.TB, a, b *node, o connOpts) {
	t.Helper()
	if o.mtu == 0 {
		o.mtu = qpattr.MTU1024
	}
	if o.access == 0 {
		o.access = qpattr.AccessRemoteWrite | qpattr.AccessRemoteRead | qpattr.AccessRemoteAtomic
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 16
	}
	if o.timeout == 0 {
		o.timeout = 14 // 67 ms
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1 // 10 us
	}
	if o.psnA == 0 {
		o.psnA = 0x100
	}
	if o.psnB == 0 {
		o.psnB = 0xfffff0 // wraps during the tests
	}
	up := func(x, y *node, dgid netdev.GID, destQPN uint32, rq wire.PSN) {
		t.Helper()
		rc := x.qp.typ == qpattr.RC
		acc := o.access
		if !rc {
			acc &= qpattr.AccessRemoteWrite
		}
		init := QPAttr{Attr: qpattr.Attr{State: qpattr.Init, PKeyIndex: 0, Port: 1, AccessFlags: acc}}
		if err := x.qp.ModifySync(&init, qpattr.AttrState|qpattr.AttrPKeyIndex|qpattr.AttrPort|qpattr.AttrAccessFlags); err != nil {
			t.Fatalf("INIT: %v", err)
		}
		rtr := QPAttr{Attr: qpattr.Attr{State: qpattr.RTR, PathMTU: o.mtu, DestQPN: destQPN, RQPSN: rq,
			MaxDestRdAtomic: o.rdAtomic, MinRNRTimer: o.minRNR},
			AV: AV{DGID: dgid, DMAC: y.d.info.MAC}}
		if o.resolve {
			rtr.AV.DMAC = nil
		}
		mask := qpattr.AttrState | qpattr.AttrAV | qpattr.AttrPathMTU | qpattr.AttrDestQPN | qpattr.AttrRQPSN
		if rc {
			mask |= qpattr.AttrMaxDestRdAtomic | qpattr.AttrMinRNRTimer
		}
		if err := x.qp.ModifySync(&rtr, mask); err != nil {
			t.Fatalf("RTR: %v", err)
		}
	}
	rts := func(x *node, sq wire.PSN) {
		t.Helper()
		a := QPAttr{Attr: qpattr.Attr{State: qpattr.RTS, SQPSN: sq, Timeout: o.timeout, RetryCnt: o.retry,
			RNRRetry: o.rnrRetry, MaxRdAtomic: o.rdAtomic}}
		mask := qpattr.AttrState | qpattr.AttrSQPSN
		if x.qp.typ == qpattr.RC {
			mask |= qpattr.AttrTimeout | qpattr.AttrRetryCnt | qpattr.AttrRNRRetry | qpattr.AttrMaxQPRdAtomic
		}
		if err := x.qp.ModifySync(&a, mask); err != nil {
			t.Fatalf("RTS: %v", err)
		}
	}
	toB := b.gid()
	if o.dgidA != (netdev.GID{}) {
		toB = o.dgidA
	}
	toQPN := b.qp.QPN()
	if o.destQPNA != 0 {
		toQPN = o.destQPNA
	}
	up(a, b, toB, toQPN, o.psnB)
	up(b, a, a.gid(), a.qp.QPN(), o.psnA)

	rts(a, o.psnA)
	rts(b, o.psnB)
}

// rcPair makes a connected RC pair over a fresh memory link.
func rcPair(t testing.TB, po pairOpts, no nodeOpts, co connOpts) (*pair, *node, *node) {
	t.Helper()
	p := newPair(t, po)
	a := newNode(t, p.a, no)
	b := newNode(t, p.b, no)
	connect(t, a, b, co)
	return p, a, b
}

// pollN polls c until n completions arrived or the deadline passed.
func pollN(t testing.TB, c *CQ, n int, d time.Duration) []cq.WC {
	t.Helper()
	got := make([]cq.WC, 0, n)
	buf := make([]cq.WC, 64)
	deadline := time.Now().Add(d)
	for len(got) < n {
		k := c.Poll(buf[:min(len(buf), n-len(got))])
		got = append(got, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d completions, want %d: %+v", len(got), n, got)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return got
}

// errState reports whether qp reaches ERR within a second. The engine moves a
// QP to ERR at the end of the step that failed it, after the error completion
// is out (as rxe's completer calls rxe_qp_error after do_complete), so a poller
// can see the completion first.
func errState(qp *QP) (qpattr.State, bool) {
	deadline := time.Now().Add(time.Second)
	for qp.State() != qpattr.Err && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := qp.State()
	return st, st == qpattr.Err
}

// mallocsOf returns the process's allocations while fn runs, after a GC:
// the whole process counts, the engine's goroutines included.
func mallocsOf(fn func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	fn()
	runtime.ReadMemStats(&m1)
	return m1.Mallocs - m0.Mallocs
}

// spinPoll polls c until it returns a completion, as a busy poller does
// (under Config.BusyPoll each empty poll drives the engine), failing the test
// after 10 s.
func spinPoll(t testing.TB, c *CQ) cq.WC {
	t.Helper()
	var w [1]cq.WC
	for end := time.Now().Add(10 * time.Second); c.Poll(w[:]) == 0; {
		if time.Now().After(end) {
			t.Fatal("no completion within 10 s")
		}
	}
	return w[0]
}

// pollOne polls exactly one completion.
func pollOne(t testing.TB, c *CQ) cq.WC {
	t.Helper()
	return pollN(t, c, 1, 5*time.Second)[0]
}

// noMore checks that c stays empty for a moment.
func noMore(t testing.TB, c *CQ) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	var w [4]cq.WC
	if n := c.Poll(w[:]); n != 0 {
		t.Fatalf("unexpected completions: %+v", w[:n])
	}
}

// fill writes a pattern into b.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

func checkWC(t testing.TB, got, want cq.WC) {
	t.Helper()
	if got != want {
		t.Fatalf("WC:\n got %+v\nwant %+v", got, want)
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

func recv(t testing.TB, n *node, id uint64, off uint64, length uint32) {
	t.Helper()
	if _, err := n.qp.PostRecv([]RecvWR{{WRID: id, SGL: []SGE{n.mr.SGE(off, length)}}}); err != nil {
		t.Fatalf("PostRecv: %v", err)
	}
}

func send(t testing.TB, n *node, wr SendWR) {
	t.Helper()
	if _, err := n.qp.PostSend([]SendWR{wr}); err != nil {
		t.Fatalf("PostSend %v: %v", wr.Opcode, err)
	}
}

func name(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func gids(a netip.Addr) []netdev.GID { return []netdev.GID{netdev.GIDFromAddr(a)} }

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

// tapLink records what its engine sends and can drop chosen frames.
type tapLink struct {
	link.Link
	mu   sync.Mutex
	n    int
	sent [][]byte
	drop func(i int, p *wire.Packet) bool
	pkt  wire.Packet
}

func (l *tapLink) WriteBatch(frames [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, f := range frames {
		idx := l.n
		l.n++
		l.sent = append(l.sent, append([]byte(nil), f...))
		if l.drop != nil && wire.Parse(f, &l.pkt) == nil && l.drop(idx, &l.pkt) {
			continue
		}
		if k, err := l.Link.WriteBatch(frames[i : i+1]); k == 0 || err != nil {
			l.n--
			l.sent = l.sent[:len(l.sent)-1]
			return i, err
		}
	}
	return len(frames), nil
}

// opcodes returns the opcodes of the frames sent so far.
func (l *tapLink) opcodes() []wire.Opcode {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ops []wire.Opcode
	var p wire.Packet
	for _, f := range l.sent {
		if wire.Parse(f, &p) == nil {
			ops = append(ops, p.Opcode)
		}
	}
	return ops
}

// frames returns copies of the frames sent so far.
func (l *tapLink) frames() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.sent...)
}
