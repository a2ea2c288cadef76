package rdmacm

import (
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil/memdev"
	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/verbs"
)

// rtuHold is a link that keeps back the RTUs sent through it, until release
// sends them late.
type rtuHold struct {
	link.Link
	mu   sync.Mutex
	held [][]byte
}

func (h *rtuHold) WriteBatch(frames [][]byte) (int, error) {
	for i, f := range frames {
		var p wire.Packet
		if wire.Parse(f, &p) == nil && p.DETH != nil && p.DETH.SrcQPN() == 1 {
			if m, err := mad.ParseHeader(p.Payload); err == nil && m.AttrID == mad.AttrRTU {
				h.mu.Lock()
				h.held = append(h.held, append([]byte(nil), f...))
				h.mu.Unlock()
				continue
			}
		}
		if n, err := h.Link.WriteBatch(frames[i : i+1]); n == 0 || err != nil {
			return i, err
		}
	}
	return len(frames), nil
}

func (h *rtuHold) release(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	if len(held) != 1 {
		t.Fatalf("%d RTUs held, want 1", len(held))
	}
	if n, err := h.Link.WriteBatch(held); n != 1 || err != nil {
		t.Fatalf("sending the late RTU: %d, %v", n, err)
	}
}

// TestNotifyEstablishesWithoutRTU: the active side's RTU is held back, and
// its first SEND reaches the passive QP, in RTR, first. The QP reports
// COMM_EST; Notify with it establishes the passive ID (rdma_notify,
// cm_establish): ESTABLISHED comes on its channel and the REP is no longer
// retransmitted. A second Notify is EISCONN; other events, and IDs without a
// connection to establish, EINVAL. The RTU, sent late, is a duplicate to the
// CM and makes no second ESTABLISHED.
func TestNotifyEstablishesWithoutRTU(t *testing.T) {
	hold := &rtuHold{}
	a, b := memdev.PairWrapped(t, addrA, addrB, func(l link.Link) link.Link { hold.Link = l; return hold })
	for _, d := range []*verbs.Device{a, b} {
		if _, err := d.CM(cm.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	commEst := make(chan *verbs.QP, 4)
	t.Cleanup(b.RegisterEventHandler(func(ev verbs.AsyncEvent) {
		if ev.Type == verbs.EventCommEst {
			commEst <- ev.QP
		}
	}))
	srv := listener(t, b, PSTCP, 7210)
	cli := resolved(t, a, PSTCP, 7210)
	cqp := cli.createQP(t, cli.id)
	if err := cli.id.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := getEvent(t, srv.ch, EventConnectRequest)
	conn := ev.ID
	t.Cleanup(func() { conn.Destroy() })
	if err := conn.Notify(verbs.EventCommEst); !errors.Is(err, ErrState) || errors.Is(err, syscall.EISCONN) {
		t.Fatalf("Notify before Accept: %v, want ErrState", err)
	}
	// The passive QP stays in RTR until ESTABLISHED, as a consumer with its
	// own QP may keep it: data in RTR is what raises COMM_EST.
	sqp := srv.plainQP(t, conn)
	srv.moveQP(t, conn, sqp, verbs.QPSRTR)
	recv := [1]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{srv.mr.SGE(0, 4096)}}}
	if _, err := sqp.PostRecv(recv[:]); err != nil {
		t.Fatal(err)
	}
	if err := conn.Accept(ConnParam{QPN: sqp.QPN(), RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	getEvent(t, cli.ch, EventEstablished) // its RTU held
	if st := conn.cmid.State(); st != cm.StateREPSent {
		t.Fatalf("passive CM state %v, want REP_SENT", st)
	}

	copy(cli.buf[8192:], "data first")
	send := [1]verbs.SendWR{{WRID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{cli.mr.SGE(8192, 10)}}}
	if _, err := cqp.PostSend(send[:]); err != nil {
		t.Fatal(err)
	}
	if wc := srv.poll(t); wc.Status != verbs.WCSuccess || string(srv.buf[:wc.ByteLen]) != "data first" {
		t.Fatalf("recv %+v %q", wc, srv.buf[:wc.ByteLen])
	}
	select {
	case qp := <-commEst:
		if qp != sqp {
			t.Fatalf("COMM_EST on QP %p, want the passive QP %p", qp, sqp)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no COMM_EST on the passive QP")
	}
	if err := conn.Notify(verbs.EventCommEst); err != nil {
		t.Fatalf("Notify(COMM_EST): %v", err)
	}
	getEvent(t, srv.ch, EventEstablished)
	if st := conn.cmid.State(); st != cm.StateEstablished {
		t.Fatalf("passive CM state %v after Notify, want ESTABLISHED", st)
	}
	srv.moveQP(t, conn, sqp, verbs.QPSRTS)
	if wc := cli.poll(t); wc.Status != verbs.WCSuccess || wc.WRID != 9 {
		t.Fatalf("send %+v", wc)
	}

	// The errors, as cm_establish and ib_cm_notify have them.
	for _, c := range []struct {
		what string
		id   *ID
		ev   verbs.EventType
		want error
	}{
		{"passive, established", conn, verbs.EventCommEst, ErrIsConn},
		{"active, established", cli.id, verbs.EventCommEst, ErrIsConn},
		{"PATH_MIG (no alternate path)", conn, verbs.EventType(6), errs.ErrInvalid},
		{"a QP's error", conn, verbs.EventQPFatal, errs.ErrInvalid},
		{"a listener", srv.id, verbs.EventCommEst, ErrState},
	} {
		err := c.id.Notify(c.ev)
		if !errors.Is(err, c.want) {
			t.Errorf("Notify(%v) on %s: %v, want %v", c.ev, c.what, err, c.want)
		}
		if wantIsConn := c.want == ErrIsConn; errors.Is(err, syscall.EISCONN) != wantIsConn {
			t.Errorf("Notify(%v) on %s: %v: EISCONN %v", c.ev, c.what, err, !wantIsConn)
		}
	}
	idle, err := srv.ch.CreateID(nil, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Destroy()
	if err := idle.Notify(verbs.EventCommEst); !errors.Is(err, ErrState) {
		t.Fatalf("Notify on an idle ID: %v, want ErrState", err)
	}
	if err := idle.BindAddr(netip.AddrPortFrom(addrB, 0)); err != nil {
		t.Fatal(err)
	}
	if err := idle.Notify(verbs.EventCommEst); !errors.Is(err, ErrState) {
		t.Fatalf("Notify on a bound ID: %v, want ErrState", err)
	}

	// The RTU, late: the CM counts a duplicate, and no event follows.
	before, _ := b.CMCounters()
	hold.release(t)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		c, _ := b.CMCounters()
		if c[cm.CntDuplicates] == before[cm.CntDuplicates]+1 {
			if c[cm.CntWrongState] != before[cm.CntWrongState] {
				t.Fatalf("the late RTU counted in the wrong state too: %v", c)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the late RTU never reached the CM: %v", c)
		}
	}
	time.Sleep(50 * time.Millisecond) // for an event the CM would have queued with the count
	if ev, err := srv.ch.TryGetEvent(); ev != nil || err != nil {
		t.Fatalf("after the late RTU: %+v, %v", ev, err)
	}
	if st := conn.cmid.State(); st != cm.StateEstablished {
		t.Fatalf("passive CM state %v after the late RTU", st)
	}
}
