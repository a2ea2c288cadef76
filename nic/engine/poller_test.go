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
	a := newNode(t, p.a, nodeOpts{typ: qpattr.UD})
	b := newNode(t, p.b, nodeOpts{typ: qpattr.UD})
	const qkey = 0x11111111
	udUp(t, a, qkey)
	udUp(t, b, qkey)
	ah, err := a.pd.CreateAH(AV{DGID: b.gid(), DMAC: b.d.info.MAC})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	pl := &postOnArrival{t: t, l: p.lb, n: b}
	if err := p.b.AddPoller(pl); err != nil {
		t.Fatal(err)
	}
	defer p.b.RemovePoller(pl)
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
