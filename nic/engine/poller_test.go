package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
)

// postOnArrival is an attached process as the engine sees it: a poller that
// posts a receive from its ring. It posts only while a frame waits on the
// wire, so the receive is on the QP's queue in time only if the engine runs
// its pollers before it takes the frame.
type postOnArrival struct {
	t      *testing.T
	l      *link.Memory
	n      *node
	armed  atomic.Bool
	posted atomic.Int32
}

func (p *postOnArrival) Poll() bool {
	if !p.armed.Load() || p.l.Pending() == 0 {
		return false
	}
	p.armed.Store(false)
	if _, err := p.n.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{p.n.mr.SGE(0, 40+64)}}}); err != nil {
		p.t.Errorf("PostRecv: %v", err)
	}
	p.posted.Add(1)
	return true
}

func (p *postOnArrival) Idle(bool) bool { return false }

// TestPollersBeforeReceive: a receive an attached process posted before a UD
// message arrived finds the message. The engine once took the frames first:
// the message found no receive and was dropped (rcvd_dropped), and
// perftest's UD server waited forever for it.
func TestPollersBeforeReceive(t *testing.T) {
	p := newPair(t, pairOpts{})
	pl := &postOnArrival{t: t, l: p.lb}
	const qkey = 0x11111111
	a, b, ah := udTo(t, p, nodeOpts{}, nodeOpts{}, qkey, pl)
	pl.n = b
	const n = 20
	for i := range n {
		// B's engine asleep, so that the frame is on the wire when it wakes
		// (a frame that came mid-loop, after the pollers, would wait for the
		// next loop either way).
		time.Sleep(5 * time.Millisecond)
		pl.armed.Store(true)
		send(t, a, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("attached"),
			AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
		pollOne(t, a.cq)
		wc := make([]cq.WC, 1)
		for end := time.Now().Add(2 * time.Second); b.cq.Poll(wc) == 0; time.Sleep(50 * time.Microsecond) {
			if time.Now().After(end) {
				t.Fatalf("message %d never completed (rcvd_dropped %d, receives posted %d)", i,
					p.b.Counters()[CntRcvdDropped], pl.posted.Load())
			}
		}
		if wc[0].Status != cq.Success {
			t.Fatalf("message %d: %+v", i, wc[0])
		}
	}
	if d := p.b.Counters()[CntRcvdDropped]; d != 0 {
		t.Fatalf("rcvd_dropped %d", d)
	}
}

// postAfterLook is an attached process whose receive reaches its ring just
// after the engine's pollers looked at it, and whose peer then sends: the
// message is on the wire before the pollers' next look, in the same pass.
type postAfterLook struct {
	t      *testing.T
	l      *link.Memory
	post   func() error
	send   func()
	armed  atomic.Bool
	onRing atomic.Bool
}

func (p *postAfterLook) Poll() bool {
	if p.onRing.Swap(false) {
		if err := p.post(); err != nil {
			p.t.Errorf("PostRecv: %v", err)
		}
		return true
	}
	if !p.armed.Swap(false) {
		return false
	}
	p.onRing.Store(true) // posted as this look ends: the next one moves it
	p.send()
	for end := time.Now().Add(2 * time.Second); p.l.Pending() == 0; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(end) {
			p.t.Error("the peer's message never reached the wire")
			break
		}
	}
	return false
}

func (p *postAfterLook) Idle(bool) bool { return false }

// TestPollersLookAgain: a receive an attached process posted before a UD
// message arrived finds it even when it reached the process's ring after the
// pass's pollers had looked: a message that finds no receive has the pollers
// look again first, as a device's receive queue holds what its doorbell
// announced. The engine once dropped it (rcvd_dropped): TestRemoteMcast lost
// its group's datagram so under -race. The same through an SRQ.
func TestPollersLookAgain(t *testing.T) {
	for _, withSRQ := range []bool{false, true} {
		t.Run(name("srq=%v", withSRQ), func(t *testing.T) {
			p := newPair(t, pairOpts{})
			var bo nodeOpts
			var srq *SRQ
			if withSRQ {
				pd, err := p.b.AllocPD()
				if err != nil {
					t.Fatal(err)
				}
				if srq, err = pd.CreateSRQ(SRQAttr{MaxWR: 4}); err != nil {
					t.Fatal(err)
				}
				bo.pd, bo.srq = pd, srq
			}
			const qkey = 0x11111111
			pl := &postAfterLook{t: t, l: p.lb}
			a, b, ah := udTo(t, p, nodeOpts{}, bo, qkey, pl)
			wr := []RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 40+64)}}}
			pl.post = func() error {
				if srq != nil {
					_, err := srq.PostRecv(wr)
					return err
				}
				_, err := b.qp.PostRecv(wr)
				return err
			}
			const n = 10
			for i := range n {
				pl.send = func() {
					send(t, a, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("late"),
						AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
				}
				pl.armed.Store(true)
				p.b.Wake()
				pollOne(t, a.cq)
				wc := make([]cq.WC, 1)
				for end := time.Now().Add(2 * time.Second); b.cq.Poll(wc) == 0; time.Sleep(50 * time.Microsecond) {
					if time.Now().After(end) {
						t.Fatalf("message %d never completed (rcvd_dropped %d)", i, p.b.Counters()[CntRcvdDropped])
					}
				}
				if wc[0].Status != cq.Success || wc[0].ByteLen != 40+4 {
					t.Fatalf("message %d: %+v", i, wc[0])
				}
			}
			if d := p.b.Counters()[CntRcvdDropped]; d != 0 {
				t.Fatalf("rcvd_dropped %d", d)
			}
		})
	}
}

// countPolls counts the engine's calls of a poller that never has work.
type countPolls struct{ n atomic.Int64 }

func (p *countPolls) Poll() bool     { p.n.Add(1); return false }
func (p *countPolls) Idle(bool) bool { return false }

// TestPollersLookAgainBounded: a flood of UD messages to a QP with no
// receive has the pollers look again once per batch of frames the engine
// takes, not once per message: a peer cannot make the engine run every
// attached process's rings per frame it sends. The same for frames handed
// over by the device's own QPs (loopback here; on a device of several queues
// also the frames that come in on another queue than their QP's).
func TestPollersLookAgainBounded(t *testing.T) {
	big := nodeOpts{cap: qpattr.Cap{MaxSendWR: 256, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
	for _, loop := range []bool{false, true} {
		t.Run(name("loopback=%v", loop), func(t *testing.T) {
			p := newPair(t, pairOpts{})
			pl := &countPolls{}
			const qkey = 0x11111111
			a, b, ah := udTo(t, p, big, nodeOpts{}, qkey, pl)
			if loop { // a second QP on B's device sends
				big.typ = qpattr.UD
				a = newNode(t, p.b, big)
				udUp(t, a, qkey)
				var err error
				if ah, err = a.pd.CreateAH(AV{DGID: b.gid(), DMAC: b.d.info.MAC}); err != nil {
					t.Fatal(err)
				}
				defer ah.Destroy()
			}
			before := p.b.EngineCounters()
			polls := pl.n.Load()
			const n = 256
			wrs := make([]SendWR, n)
			for i := range wrs {
				wrs[i] = SendWR{WRID: uint64(i), Opcode: WRSend, InlineData: []byte("flood"), AH: ah, RemoteQPN: b.qp.QPN(),
					RemoteQKey: qkey}
			}
			wrs[n-1].Flags = SendSignaled
			if _, err := a.qp.PostSend(wrs); err != nil {
				t.Fatal(err)
			}
			pollOne(t, a.cq)
			for end := time.Now().Add(5 * time.Second); p.b.Counters()[CntRcvdDropped] < n; time.Sleep(time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("rcvd_dropped %d of %d", p.b.Counters()[CntRcvdDropped], n)
				}
			}
			got := pl.n.Load() - polls
			after := p.b.EngineCounters()
			loops, batches := after[EngLoops]-before[EngLoops], after[EngRxBatches]-before[EngRxBatches]
			// One poll a loop, and one a batch of frames (from the link, or
			// from the handoff ring, a few passes' worth here); the loops
			// running as the counts are read may each add one that neither
			// snapshot counts.
			if again := got - int64(loops); again > int64(batches)+n/8 {
				t.Fatalf("%d polls beside the loops' own for %d messages in %d loops and %d batches", again, n, loops, batches)
			}
			if batches >= n/2 {
				t.Fatalf("%d batches for %d messages: too few a batch to tell", batches, n)
			}
		})
	}
}

// udTo makes a UD node on each device, both up with qkey, and A's AH to B;
// pl, if not nil, is B's poller until the test ends.
func udTo(t *testing.T, p *pair, ao, bo nodeOpts, qkey uint32, pl Poller) (a, b *node, ah *AH) {
	t.Helper()
	ao.typ, bo.typ = qpattr.UD, qpattr.UD
	a, b = newNode(t, p.a, ao), newNode(t, p.b, bo)
	udUp(t, a, qkey)
	udUp(t, b, qkey)
	ah, err := a.pd.CreateAH(AV{DGID: b.gid(), DMAC: b.d.info.MAC})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ah.Destroy() })
	if pl != nil {
		if err := p.b.AddPoller(pl); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.b.RemovePoller(pl) })
	}
	return a, b, ah
}
