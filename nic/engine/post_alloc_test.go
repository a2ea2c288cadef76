package engine

import (
	"errors"
	"testing"

	"github.com/xrnic/xrnic/nic/qpattr"
)

// TestFailedPostDoesNotAllocate: a post that fails (a full queue, a destroyed
// QP, a bad L_Key, a full SRQ) allocates nothing: perftest's loops spin on
// ErrQueueFull under back-pressure. The errors used to be built with
// fmt.Errorf, 4 allocations each.
func TestFailedPostDoesNotAllocate(t *testing.T) {
	p := newPair(t, pairOpts{})
	n := newNode(t, p.a, nodeOpts{cap: qpattr.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	gone := newNode(t, p.a, nodeOpts{})
	// Fill the receive queue (posting receives is allowed from INIT on). m goes on
	// to ERR, where posts are taken (and flushed) after their checks.
	m := newNode(t, p.a, nodeOpts{})
	for _, s := range []qpattr.State{qpattr.Init, qpattr.Err} {
		a := QPAttr{Attr: qpattr.Attr{State: s, Port: 1}}
		mask := qpattr.AttrState
		if s == qpattr.Init {
			mask |= qpattr.AttrPort | qpattr.AttrPKeyIndex | qpattr.AttrAccessFlags
			if err := n.qp.ModifySync(&a, mask); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.qp.ModifySync(&a, mask); err != nil {
			t.Fatal(err)
		}
	}
	recv := []RecvWR{{WRID: 1, SGL: []SGE{n.mr.SGE(0, 8)}}}
	if _, err := n.qp.PostRecv(recv); err != nil {
		t.Fatal(err)
	}
	if err := gone.qp.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
	srq, err := n.pd.CreateSRQ(SRQAttr{MaxWR: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Destroy()
	if _, err := srq.PostRecv(recv); err != nil {
		t.Fatal(err)
	}
	send := []SendWR{{WRID: 2, Opcode: WRSend, SGL: []SGE{n.mr.SGE(0, 8)}}}
	badKey := []SendWR{{WRID: 3, Opcode: WRSend, SGL: []SGE{{Addr: 0, Length: 8, LKey: 0xdead00}}}}
	for _, tc := range []struct {
		name string
		post func() error
		want error
	}{
		{"PostRecv on a full receive queue", func() error { _, err := n.qp.PostRecv(recv); return err }, ErrQueueFull},
		{"PostSend in INIT", func() error { _, err := n.qp.PostSend(send); return err }, ErrWrongState},
		{"PostSend on a destroyed QP", func() error { _, err := gone.qp.PostSend(send); return err }, ErrClosed},
		{"PostRecv on a destroyed QP", func() error { _, err := gone.qp.PostRecv(recv); return err }, ErrClosed},
		{"PostRecv on a full SRQ", func() error { _, err := srq.PostRecv(recv); return err }, ErrQueueFull},
		{"PostSend with a bad L_Key", func() error { _, err := m.qp.PostSend(badKey); return err }, ErrBadLKey},
	} {
		if err := tc.post(); !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if a := testing.AllocsPerRun(100, func() { _ = tc.post() }); a != 0 {
			t.Errorf("%s: %.0f allocations per failed post, want 0", tc.name, a)
		}
	}
	// A full send queue and a bad L_Key need the QP in RTS.
	connectTo := newNode(t, p.b, nodeOpts{})
	if err := n.qp.ModifySync(&QPAttr{Attr: qpattr.Attr{State: qpattr.Reset}}, qpattr.AttrState); err != nil {
		t.Fatal(err)
	}
	connect(t, n, connectTo, connOpts{})
	if err := p.b.Close(); err != nil { // the peer never answers: the one WR stays outstanding
		t.Fatal(err)
	}
	if _, err := n.qp.PostSend(send); err != nil {
		t.Fatal(err)
	}
	post := func() error { _, err := n.qp.PostSend(send); return err }
	if err := post(); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("PostSend on a full send queue: %v, want ErrQueueFull", err)
	}
	if a := testing.AllocsPerRun(100, func() { _ = post() }); a != 0 {
		t.Errorf("PostSend on a full send queue: %.0f allocations per failed post, want 0", a)
	}
}
