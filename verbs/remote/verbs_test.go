package remote

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/verbs"
)

// verbsTraffic runs RC SEND, WRITE, READ and FETCH_ADD from d (a device
// through verbs' API, whichever its backend) to an in-process peer on r.b, and
// a SEND back, checking every byte and completion. It is the same code for an
// in-process and an attached d: the API is one.
func verbsTraffic(t *testing.T, r *rig, d *verbs.Device, gid verbs.GID) {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	buf, err := d.MapBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.UnmapBuffer(buf)
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	mr, err := pd.RegMR(buf, 0, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	cq, err := d.CreateCQ(64, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	le := newLocalEnd(t, r.b, verbs.RC)
	// The peer's memory is set before its QP's modifications, which the
	// engine's goroutine takes in order after it (the race detector's view).
	copy(mr.Bytes(), "one API")
	copy(le.buf[300:], "read back")
	le.buf[600] = 40
	r.connectVerbs(t, d, gid, qp, le.qp)
	if a, _, err := qp.Query(); err != nil || a.State != verbs.QPSRTS || a.DestQPN != le.qp.QPN() {
		t.Fatalf("Query: %+v %v", a.Attr, err)
	}
	if _, err := le.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{le.mr.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	// The SEND goes last: the peer's receive completion then orders the
	// WRITE's bytes before the test reads them (for the race detector too).
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mr.SGE(0, 7)},
			RemoteAddr: le.mr.Addr() + 200, RKey: le.mr.RKey()},
		{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mr.SGE(400, 9)},
			RemoteAddr: le.mr.Addr() + 300, RKey: le.mr.RKey()},
		{WRID: 3, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mr.SGE(600, 8)},
			RemoteAddr: le.mr.Addr() + 600, RKey: le.mr.RKey(), CompareAdd: 2},
		{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mr.SGE(0, 7)}},
	}
	if n, err := qp.PostSend(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostSend: %d %v", n, err)
	}
	got := pollLocal(t, cq, len(wrs))
	for i, wc := range got {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if wc := pollLocal(t, le.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != 7 {
		t.Fatalf("peer's receive: %+v", wc)
	}
	b := mr.Bytes()
	if string(le.buf[:7]) != "one API" || string(le.buf[200:207]) != "one API" || string(b[400:409]) != "read back" ||
		b[600] != 40 || le.buf[600] != 42 {
		t.Fatalf("SEND %q WRITE %q READ %q FETCH_ADD %d/%d", le.buf[:7], le.buf[200:207], b[400:409], b[600], le.buf[600])
	}
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGL: []verbs.SGE{mr.SGE(1000, 64)}}}); err != nil {
		t.Fatal(err)
	}
	copy(le.buf[1000:], "and back")
	if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{le.mr.SGE(1000, 8)}}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollLocal(t, cq, 1)[0]; wc.WRID != 9 || wc.Status != verbs.WCSuccess || !bytes.Equal(b[1000:1008], []byte("and back")) {
		t.Fatalf("receive %+v %q", wc, b[1000:1008])
	}
	pollLocal(t, le.cq, 1)
}

// An application opens the daemon's device with verbs.Open and uses verbs'
// API unchanged: the same traffic as through an in-process device.
func TestVerbsAttached(t *testing.T) {
	r := newRig(t, server.Config{})
	t.Run("in-process", func(t *testing.T) { verbsTraffic(t, r, r.a, r.gidA) })
	t.Run("attached", func(t *testing.T) {
		d, err := verbs.Open(verbs.Options{Attach: r.sock})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if d.NodeGUID() != r.a.NodeGUID() || d.QueryPort().State != verbs.PortActive || d.Engine() != nil {
			t.Fatalf("attached %s: GUID %x port %+v", d.Name(), d.NodeGUID(), d.QueryPort())
		}
		verbsTraffic(t, r, d, r.gidA)
		if _, err := d.CreateCQ(4, verbs.CQOptions{Handler: func(*verbs.CQ) {}}); !errors.Is(err, verbs.ErrUnsupported) {
			t.Errorf("a CQ handler on an attached device: %v", err)
		}
		verbsChannel(t, r, d)
	})
}

// verbs.Open with only an interface attaches to the daemon listening on its
// default socket; InProcess opens an engine here all the same.
func TestVerbsFindsDaemon(t *testing.T) {
	testRigOnVeth := newVethRig(t, server.Config{})
	ifname := testRigOnVeth.a.Link().Info().Name
	sock := SocketFor(ifname)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- testRigOnVeth.srv.Serve(ln) }()
	defer func() { ln.Close(); <-done }()
	d, err := verbs.Open(verbs.Options{Interface: ifname})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Engine() != nil || len(testRigOnVeth.srv.Sessions()) != 1 {
		t.Fatalf("Open(Interface: %s) did not attach to the daemon there", ifname)
	}
	verbsTraffic(t, testRigOnVeth, d, testRigOnVeth.gidA)
	// InProcess opens the interface itself: here, outside the interface's
	// namespace, that fails, and no second session appears.
	if own, err := verbs.Open(verbs.Options{Interface: ifname, InProcess: true}); err == nil {
		own.Close()
		t.Fatal("InProcess attached, or opened an interface of another namespace")
	}
	if n := len(testRigOnVeth.srv.Sessions()); n != 1 {
		t.Fatalf("%d sessions after an InProcess Open", n)
	}
}

// verbsChannel: an attached CQ's completion channel through verbs' API (as
// perftest -e uses it): an armed CQ's completion is the channel's event; a
// channel serves attached or in-process CQs, not both.
func verbsChannel(t *testing.T, r *rig, d *verbs.Device) {
	t.Helper()
	ch := verbs.NewCompChannel()
	defer ch.Close()
	cq, err := d.CreateCQ(16, verbs.CQOptions{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	if _, err := r.b.CreateCQ(4, verbs.CQOptions{Channel: ch}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("an in-process CQ on an attached CQ's channel: %v", err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	le := newLocalEnd(t, r.b, verbs.RC)
	r.connectVerbs(t, d, r.gidA, qp, le.qp)
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 7}}); err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := ch.GetEvent(ctx)
	if err != nil || got != cq {
		t.Fatalf("GetEvent: %v %v", got, err)
	}
	got.AckEvents(1)
	// Len counts what waits on the ring: a consumer that armed looks there
	// before it sleeps, or sleeps through a completion published before the arm.
	for end := time.Now().Add(5 * time.Second); cq.Len() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("Len %d with one completion on the ring", cq.Len())
		}
	}
	if wc := pollLocal(t, cq, 1)[0]; wc.WRID != 7 || wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	if n := cq.Len(); n != 0 {
		t.Fatalf("Len %d after the poll", n)
	}
	pollLocal(t, le.cq, 1)
}

// An attached device's asynchronous events reach verbs' handlers naming
// verbs' objects: a CQ nobody polls overflows, and its CQ_ERR names that CQ
// (its QP's QP_FATAL, for the completions lost, names the QP).
func TestVerbsAttachedEvents(t *testing.T) {
	r := newRig(t, server.Config{})
	d, err := verbs.Open(verbs.Options{Attach: r.sock})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := make(chan verbs.AsyncEvent, 16)
	unreg := d.RegisterEventHandler(func(ev verbs.AsyncEvent) {
		select {
		case got <- ev:
		default:
		}
	})
	defer unreg()
	pd, _ := d.AllocPD()
	defer pd.Dealloc()
	buf, _ := d.MapBuffer(4096)
	defer verbs.UnmapBuffer(buf)
	mr, err := pd.RegMR(buf, 0, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	cq, err := d.CreateCQ(8, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	le := newLocalEnd(t, r.b, verbs.RC)
	r.connectVerbs(t, d, r.gidA, qp, le.qp)
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		select {
		case ev := <-got:
			switch {
			case ev.Type == verbs.EventCQErr && ev.CQ == cq:
				return
			case ev.Type == verbs.EventQPFatal && ev.QP == qp: // its completions were lost
			case ev.Type == verbs.EventPortActive && ev.QP == nil && ev.CQ == nil && ev.SRQ == nil:
				// The port's: the device came up as the process attached.
			default:
				t.Fatalf("event %v on CQ %p QP %p, want CQ_ERR on %p (or QP_FATAL on %p)", ev.Type, ev.CQ, ev.QP, cq, qp)
			}
		case <-deadline:
			t.Fatalf("no CQ_ERR after %d WRITEs into a CQ nobody polls", i)
		default:
		}
		qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 8)}, RemoteAddr: le.mr.Addr(), RKey: le.mr.RKey()}})
		time.Sleep(100 * time.Microsecond)
	}
}

// An attached device's completion channel cannot be closed while its CQs use
// it (ibv_destroy_comp_channel: EBUSY), and a closed one takes no new CQ.
func TestVerbsAttachedChannelInUse(t *testing.T) {
	r := newRig(t, server.Config{})
	d, err := verbs.Open(verbs.Options{Attach: r.sock})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ch := verbs.NewCompChannel()
	cq, err := d.CreateCQ(8, verbs.CQOptions{Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("closing a channel an attached CQ uses: %v, want ErrBusy", err)
	}
	if err := cq.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatalf("closing the channel after its CQ: %v", err)
	}
	if _, err := d.CreateCQ(8, verbs.CQOptions{Channel: ch}); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("a CQ on a closed channel: %v, want ErrClosed", err)
	}
}
