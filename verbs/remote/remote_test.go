package remote

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/spin"
	"github.com/xrnic/xrnic/internal/testutil/leakcheck"
	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/testenv"
	"github.com/xrnic/xrnic/verbs"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var (
	gidA = verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.11"))
	gidB = verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.12"))
)

// rig is a device A served by a server on a socket, and an in-process device
// B linked to it: a process attached to A talks to B.
type rig struct {
	a, b       *verbs.Device
	gidA, gidB verbs.GID
	srv        *server.Server
	sock       string
}

// newRig links A and B in memory.
func newRig(t testing.TB, cfg server.Config) *rig {
	t.Helper()
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	a, err := verbs.Open(verbs.Options{Link: la, GIDs: []verbs.GID{gidA}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := verbs.Open(verbs.Options{Link: lb, GIDs: []verbs.GID{gidB}})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, cfg, a, b, gidA, gidB)
}

// newVethRig puts A and B on the two ends of a veth pair, each in its
// namespace, on AF_XDP links with the XDP program, as the daemon runs.
func newVethRig(t testing.TB, cfg server.Config) *rig {
	t.Helper()
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	open := func(e *testenv.Endpoint) *verbs.Device {
		var d *verbs.Device
		if err := e.Do(func() (err error) {
			d, err = verbs.Open(verbs.Options{Interface: e.Name, LinkKind: link.KindAFXDP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := open(&p.A), open(&p.B)
	return serve(t, cfg, a, b, verbs.GIDFromAddr(p.A.IPv4), verbs.GIDFromAddr(p.B.IPv4))
}

func serve(t testing.TB, cfg server.Config, a, b *verbs.Device, ga, gb verbs.GID) *rig {
	t.Helper()
	r := &rig{a: a, b: b, gidA: ga, gidB: gb, sock: filepath.Join(t.TempDir(), "xrnic.sock")}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: r.sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = server.New(a, cfg)
	done := make(chan error, 1)
	go func() { done <- r.srv.Serve(ln) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		r.srv.Close()
		a.Close()
		b.Close()
	})
	return r
}

func (r *rig) dial(t testing.TB) *Device {
	t.Helper()
	d, err := Dial(r.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// remoteEnd is the attached process's side: a PD, a CQ, a buffer and a QP.
type remoteEnd struct {
	pd  *PD
	cq  *CQ
	buf []byte
	mr  *MR
	qp  *QP
}

func newRemoteEnd(t testing.TB, d *Device, typ verbs.QPType) *remoteEnd {
	t.Helper()
	e := &remoteEnd{}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	if e.buf, err = MapBuffer(1 << 16); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { UnmapBuffer(e.buf) })
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if e.mr, err = e.pd.RegMR(e.buf, acc); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// localEnd is the in-process peer on B.
type localEnd struct {
	pd  *verbs.PD
	cq  *verbs.CQ
	buf []byte
	mr  *verbs.MR
	qp  *verbs.QP
}

func newLocalEnd(t testing.TB, d *verbs.Device, typ verbs.QPType) *localEnd {
	t.Helper()
	e := &localEnd{buf: make([]byte, 1<<16)}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(256, verbs.CQOptions{}); err != nil {
		t.Fatal(err)
	}
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if e.mr, err = e.pd.RegMR(e.buf, 0, acc); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 2}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.qp.Destroy().Wait()
		e.mr.Dereg().Wait()
		e.cq.Destroy().Wait()
		e.pd.Dealloc().Wait()
	})
	return e
}

// rcAttrs are the INIT, RTR and RTS steps of RC QP qpn from GID index sgid
// towards dgid/dqpn. Each QP sends from a PSN of its own (psnOf its QPN), so a
// side that mixed up its PSNs would not connect.
func rcAttrs(sgid uint8, dgid verbs.GID, qpn, dqpn uint32) []struct {
	a    verbs.QPAttr
	mask verbs.AttrMask
} {
	acc := uint32(verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic)
	init := verbs.QPAttr{}
	init.State, init.Port, init.AccessFlags = verbs.QPSInit, 1, acc
	rtr := verbs.QPAttr{AV: verbs.AV{DGID: dgid, SGIDIndex: sgid}}
	rtr.State, rtr.PathMTU, rtr.DestQPN, rtr.RQPSN, rtr.MaxDestRdAtomic, rtr.MinRNRTimer = verbs.QPSRTR, 3, dqpn, psnOf(dqpn), 16, 1
	rts := verbs.QPAttr{}
	rts.State, rts.SQPSN, rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = verbs.QPSRTS, psnOf(qpn), 14, 7, 7, 16
	const (
		state   = 1 << 0
		access  = 1 << 3
		pkey    = 1 << 4
		port    = 1 << 5
		av      = 1 << 7
		mtu     = 1 << 8
		timeout = 1 << 9
		retry   = 1 << 10
		rnr     = 1 << 11
		rqpsn   = 1 << 12
		rdAtom  = 1 << 13
		minRNR  = 1 << 15
		sqpsn   = 1 << 16
		dRdAtom = 1 << 17
		dqp     = 1 << 20
	)
	return []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{init, state | pkey | port | access},
		{rtr, state | av | mtu | dqp | rqpsn | dRdAtom | minRNR},
		{rts, state | sqpsn | timeout | retry | rnr | rdAtom},
	}
}

func (rg *rig) connect(t testing.TB, r *remoteEnd, l *localEnd) {
	t.Helper()
	for _, s := range rcAttrs(gidIndex(t, rg.a, rg.gidA), rg.gidB, r.qp.QPN(), l.qp.QPN()) {
		if err := r.qp.Modify(&s.a, s.mask); err != nil {
			t.Fatalf("remote QP to %v: %v", s.a.State, err)
		}
	}
	for _, s := range rcAttrs(gidIndex(t, rg.b, rg.gidB), rg.gidA, l.qp.QPN(), r.qp.QPN()) {
		a := s.a
		if err := l.qp.ModifySync(&a, s.mask); err != nil {
			t.Fatalf("local QP to %v: %v", s.a.State, err)
		}
	}
}

// connectLocal connects two in-process QPs, x on A and y on B.
func (rg *rig) connectLocal(t testing.TB, x, y *localEnd) {
	t.Helper()
	rg.connectVerbs(t, rg.a, rg.gidA, x.qp, y.qp)
}

// connectVerbs connects qp, on d (A's device, in-process or attached) from
// gid, and peer, on B, to each other.
func (rg *rig) connectVerbs(t testing.TB, d *verbs.Device, gid verbs.GID, qp, peer *verbs.QP) {
	t.Helper()
	move := func(q *verbs.QP, sgid uint8, dgid verbs.GID, dqpn uint32) {
		t.Helper()
		for _, s := range rcAttrs(sgid, dgid, q.QPN(), dqpn) {
			a := s.a
			if err := q.ModifySync(&a, s.mask); err != nil {
				t.Fatalf("QP %d to %v: %v", q.QPN(), s.a.State, err)
			}
		}
	}
	move(qp, gidIndex(t, d, gid), rg.gidB, peer.QPN())
	move(peer, gidIndex(t, rg.b, rg.gidB), gid, qp.QPN())
}

// psnOf is the PSN QP qpn sends from in these tests.
func psnOf(qpn uint32) verbs.PSN { return verbs.PSN((qpn*0x9e3779 + 0x100) & 0xffffff) }

// gidIndex is g's index in d's GID table.
func gidIndex(t testing.TB, d *verbs.Device, g verbs.GID) uint8 {
	t.Helper()
	for i, x := range d.GIDs() {
		if x == g {
			return uint8(i)
		}
	}
	t.Fatalf("%v not in %s's GID table %v", g, d.Name(), d.GIDs())
	return 0
}

func pollRemote(t testing.TB, cq *CQ, n int) []verbs.WC {
	t.Helper()
	return pollWith(t, n, cq.Poll)
}

func pollLocal(t testing.TB, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	return pollWith(t, n, func(wcs []verbs.WC) (int, error) { return cq.Poll(wcs), nil })
}

// pollWith polls until n completions came, for at most 10 s.
func pollWith(t testing.TB, n int, poll func([]verbs.WC) (int, error)) []verbs.WC {
	t.Helper()
	var got []verbs.WC
	wcs := make([]verbs.WC, 8)
	for end := time.Now().Add(10 * time.Second); len(got) < n; {
		k, err := poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, wcs[:k]...)
		if time.Now().After(end) {
			t.Fatalf("%d of %d completions", len(got), n)
		}
		if k == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return got
}

// An attached process does SEND, WRITE, READ and an atomic through the
// daemon's device to an in-process peer, receives a SEND, and every byte and
// completion is as in-process: over memory, and over a veth pair with the XDP
// program and AF_XDP sockets.
func TestRemoteRC(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testRemoteRC(t, newRig(t, server.Config{Logf: t.Logf})) })
	t.Run("veth", func(t *testing.T) { testRemoteRC(t, newVethRig(t, server.Config{Logf: t.Logf})) })
}

func testRemoteRC(t *testing.T, r *rig) {
	d := r.dial(t)
	re := newRemoteEnd(t, d, verbs.RC)
	le := newLocalEnd(t, r.b, verbs.RC)
	r.connect(t, re, le)

	copy(re.buf, "hello from an attached process")
	if _, err := le.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{le.mr.SGE(0, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	copy(re.buf[8192:], "written")
	copy(le.buf[16384:], "read me back")
	wrs := []verbs.SendWR{
		{WRID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{re.mr.SGE(0, 30)}},
		{WRID: 11, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, ImmData: 0x01020304,
			SGL: []verbs.SGE{re.mr.SGE(8192, 7)}, RemoteAddr: le.mr.Addr() + 8192, RKey: le.mr.RKey()},
		{WRID: 12, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{re.mr.SGE(16384, 12)}, RemoteAddr: le.mr.Addr() + 16384, RKey: le.mr.RKey()},
		{WRID: 13, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, CompareAdd: 5,
			SGL: []verbs.SGE{re.mr.SGE(24576, 8)}, RemoteAddr: le.mr.Addr() + 24576, RKey: le.mr.RKey()},
		{WRID: 14, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, InlineData: []byte("inline!")},
	}
	// The WRITE with immediate and the inline SEND consume receives too. (The
	// peer's memory is set before this post: the race detector sees the
	// engine's lock, not the rings' ordering across two mappings.)
	le.buf[24576] = 37
	if _, err := le.qp.PostRecv([]verbs.RecvWR{{WRID: 2}, {WRID: 3, SGL: []verbs.SGE{le.mr.SGE(4096, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if n, err := re.qp.PostSend(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostSend: %d %v", n, err)
	}
	for i, wc := range pollRemote(t, re.cq, len(wrs)) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(10+i) {
			t.Errorf("remote completion %d: %+v", i, wc)
		}
	}
	got := pollLocal(t, le.cq, 3)
	for _, wc := range got {
		if wc.Status != verbs.WCSuccess {
			t.Errorf("local completion %+v", wc)
		}
	}
	if got[1].ImmData != 0x01020304 || got[1].Flags&verbs.WCWithImm == 0 {
		t.Errorf("WRITE with immediate: %+v", got[1])
	}
	for _, c := range []struct{ what, got, want string }{
		{"SEND", string(le.buf[:30]), "hello from an attached process"},
		{"WRITE", string(le.buf[8192:8199]), "written"},
		{"READ", string(re.buf[16384:16396]), "read me back"},
		{"inline SEND", string(le.buf[4096:4103]), "inline!"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.what, c.got, c.want)
		}
	}
	if re.buf[24576] != 37 || le.buf[24576] != 42 {
		t.Errorf("FETCH_ADD: fetched %d, left %d", re.buf[24576], le.buf[24576])
	}

	// The other way: the peer SENDs into a receive the attached process posted.
	if _, err := re.qp.PostRecv([]verbs.RecvWR{{WRID: 20, SGL: []verbs.SGE{re.mr.SGE(32768, 100)}}}); err != nil {
		t.Fatal(err)
	}
	copy(le.buf[40000:], "to the attached process")
	if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: 30, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{le.mr.SGE(40000, 23)}}}); err != nil {
		t.Fatal(err)
	}
	wc := pollRemote(t, re.cq, 1)[0]
	if wc.WRID != 20 || wc.Status != verbs.WCSuccess || wc.ByteLen != 23 || wc.Opcode != verbs.WCRecv ||
		!bytes.Equal(re.buf[32768:32768+23], []byte("to the attached process")) {
		t.Fatalf("receive %+v: %q", wc, re.buf[32768:32768+23])
	}
	pollLocal(t, le.cq, 1)
}

// When the attached process goes away, the daemon frees everything it held:
// the device's tables are as before it attached.
func TestRemoteCleanupOnExit(t *testing.T) {
	r := newRig(t, server.Config{})
	before, err := r.a.Resources()
	if err != nil {
		t.Fatal(err)
	}
	d := r.dial(t)
	re := newRemoteEnd(t, d, verbs.RC)
	le := newLocalEnd(t, r.b, verbs.RC)
	r.connect(t, re, le)
	if _, err := d.NewCompChannel(); err != nil {
		t.Fatal(err)
	}
	// Work in flight: receives posted, a SEND the peer has no receive for.
	re.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{re.mr.SGE(0, 64)}}})
	re.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{re.mr.SGE(0, 64)}}})
	d.Close()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err := r.a.Resources()
		if err != nil {
			t.Fatal(err)
		}
		if len(res.QPs) == len(before.QPs) && len(res.CQs) == len(before.CQs) && len(res.MRs) == len(before.MRs) &&
			res.PDs == before.PDs && len(r.srv.Sessions()) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after the process left: %d QPs, %d CQs, %d MRs, %d PDs, %d sessions; before: %d, %d, %d, %d",
				len(res.QPs), len(res.CQs), len(res.MRs), res.PDs, len(r.srv.Sessions()),
				len(before.QPs), len(before.CQs), len(before.MRs), before.PDs)
		}
	}
}

// A process sees only its own objects: another's handles name nothing (a
// create naming one is EINVAL, a destroy ENOENT, as uverbs answers), and an
// lkey of another's region fails the PD check (a local protection error),
// never reaching its memory.
func TestRemoteIsolation(t *testing.T) {
	r := newRig(t, server.Config{})
	d1, d2 := r.dial(t), r.dial(t)
	e1 := newRemoteEnd(t, d1, verbs.RC)
	e2 := newRemoteEnd(t, d2, verbs.RC)
	le := newLocalEnd(t, r.b, verbs.RC)
	r.connect(t, e2, le)
	// Handles are per process: d1's fifth PD has a number d2 has not given.
	var last *PD
	for range 5 {
		pd, err := d1.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		last = pd
	}
	stolen := &PD{d: d2, h: last.h}
	if _, err := stolen.CreateAH(verbs.AV{DGID: gidB}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("another process's PD: %v", err)
	}
	if err := (&MR{pd: &PD{d: d2}, h: last.h}).Dereg(); !errors.Is(err, verbs.ErrNotFound) {
		t.Fatalf("deregistering another process's MR: %v", err)
	}
	copy(e1.buf, "secret")
	if _, err := e2.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{e1.mr.SGE(0, 6)}}}); err != nil {
		t.Fatal(err)
	}
	wc := pollRemote(t, e2.cq, 1)[0]
	if wc.Status != verbs.WCLocProtErr {
		t.Fatalf("a SEND from another process's region: %+v", wc)
	}
}

// A completion channel: an armed CQ's completion signals the channel's
// pipe and GetEvent names the CQ; a CQ not armed again does not signal.
func TestRemoteCompChannel(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	ch, err := d.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	e := newRemoteEnd(t, d, verbs.RC)
	cq, err := d.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := e.pd.CreateQP(QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	e.qp = qp
	le := newLocalEnd(t, r.b, verbs.RC)
	r.connect(t, e, le)
	send := func(id uint64) {
		if _, err := e.qp.PostRecv([]verbs.RecvWR{{WRID: id, SGL: []verbs.SGE{e.mr.SGE(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{le.mr.SGE(0, 8)}}}); err != nil {
			t.Fatal(err)
		}
	}
	readable := func(timeout time.Duration) bool {
		fds := []unix.PollFd{{Fd: int32(ch.FD()), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, int(timeout/time.Millisecond))
		return n > 0
	}
	cq.ReqNotify(false)
	send(1)
	if !readable(5 * time.Second) {
		t.Fatal("the armed CQ's completion did not signal the channel")
	}
	fired, err := ch.GetEvent()
	if err != nil || len(fired) != 1 || fired[0] != cq {
		t.Fatalf("GetEvent: %v %v", fired, err)
	}
	if wc := pollRemote(t, cq, 1)[0]; wc.WRID != 1 || wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	send(2) // not armed again
	pollRemote(t, cq, 1)
	if readable(200 * time.Millisecond) {
		t.Fatal("a CQ not armed again signalled its channel")
	}
	pollLocal(t, le.cq, 2)
	if err := e.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// An SRQ over the protocol: two QPs take their receives from one SRQ ring,
// and the SRQ's limit event reaches the process (IBV_EVENT_SRQ_LIMIT_REACHED).
// QUERY_SRQ gives the limit armed, then 0 once it fired (rxe_query_srq).
func TestRemoteSRQ(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	e := newRemoteEnd(t, d, verbs.RC)
	srq, err := e.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	query := func(want uint32) {
		t.Helper()
		a, err := srq.Query()
		if err != nil || a.MaxWR != 16 || a.MaxSGE != 1 || a.Limit != want {
			t.Fatalf("Query: %+v, %v; want max_wr 16, max_sge 1, limit %d", a, err, want)
		}
	}
	query(0)
	if _, err := (&SRQ{pd: e.pd, h: 999}).Query(); !errors.Is(err, verbs.ErrNotFound) {
		t.Errorf("Query of no SRQ: %v", err)
	}
	var qps [2]*QP
	var peers [2]*localEnd
	for i := range qps {
		if qps[i], err = e.pd.CreateQP(QPInitAttr{Type: verbs.RC, SendCQ: e.cq, RecvCQ: e.cq, SRQ: srq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		peers[i] = newLocalEnd(t, r.b, verbs.RC)
		r.connect(t, &remoteEnd{qp: qps[i]}, peers[i])
	}
	if _, err := qps[0].PostRecv([]verbs.RecvWR{{WRID: 1}}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a receive on a QP of an SRQ: %v", err)
	}
	for i := range 8 {
		if _, err := srq.PostRecv([]verbs.RecvWR{{WRID: uint64(100 + i), SGL: []verbs.SGE{e.mr.SGE(uint64(i)*1024, 1024)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(verbs.SRQAttr{Limit: 7}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	query(7)
	for i, p := range peers {
		copy(p.buf, fmt.Sprintf("from peer %d", i))
		if _, err := p.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{p.mr.SGE(0, 11)}}}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint32]bool{}
	for _, wc := range pollRemote(t, e.cq, 2) {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WRID < 100 || wc.WRID >= 108 {
			t.Errorf("%+v", wc)
		}
		seen[wc.QPN] = true
	}
	if !seen[qps[0].QPN()] || !seen[qps[1].QPN()] {
		t.Errorf("receives completed on QPs %v", seen)
	}
	for end := time.Now().Add(5 * time.Second); !hasEvent(d, verbs.EventSRQLimitReached); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no SRQ limit event: 6 receives left (8 posted, 2 used) under a limit of 7")
		}
	}
	query(0)
	if err := srq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("destroying an SRQ its QPs use: %v", err)
	}
}

// An attached process spinning on its CQ yields its CPU on one in spin.Every
// polls that find nothing: the daemon's engine thread may be waiting for it
// (internal/spin).
func TestRemoteEmptyPollsYield(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	cq, err := d.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 4)
	for range 3 * spin.Every {
		if n, err := cq.Poll(wcs); n != 0 || err != nil {
			t.Fatalf("an empty CQ: %d completions, %v", n, err)
		}
	}
	if got := cq.spin.Yields(); got != 3 {
		t.Fatalf("%d empty polls yielded %d times, want 3", 3*spin.Every, got)
	}
}
