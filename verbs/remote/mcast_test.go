package remote

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"

	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// udSteps are a UD QP's INIT, RTR and RTS with Q_Key qkey.
func udSteps(qkey uint32) []struct {
	a    verbs.QPAttr
	mask verbs.AttrMask
} {
	return []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSInit, Port: 1, QKey: qkey}},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSRTR}}, verbs.AttrState},
		{verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSRTS}}, verbs.AttrState | verbs.AttrSQPSN},
	}
}

// TestRemoteMcast: ATTACH_MCAST and DETACH_MCAST. An attached QP gets a group's
// UD send from the in-process peer; the daemon answers as uverbs does
// (ib_uverbs_attach_mcast, ib_attach_mcast): EINVAL for a handle naming no QP
// of the session's (another session's QP too), a QP not UD, a GID not
// multicast and a detach of a group not attached; EBUSY for a destroy of an
// attached QP (uverbs_free_qp). The session gone, its QP has left the group
// (ib_uverbs_detach_umcast): the group's next packet finds no member.
func TestRemoteMcast(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	re := newRemoteEnd(t, d, verbs.UD)
	rc := newRemoteEnd(t, d, verbs.RC)
	le := newLocalEnd(t, r.b, verbs.UD)
	for _, s := range udSteps(0x11) {
		if err := re.qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
		if err := le.qp.ModifySync(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	mgid := verbs.GIDFromAddr(netip.MustParseAddr("239.1.2.3"))
	if err := re.qp.AttachMcast(mgid, 0); err != nil {
		t.Fatal(err)
	}
	if err := re.qp.AttachMcast(mgid, 0); err != nil {
		t.Fatalf("attach again: %v, want none (ib_uverbs_attach_mcast)", err)
	}
	for _, c := range []struct {
		what string
		err  error
	}{
		{"an RC QP", rc.qp.AttachMcast(mgid, 0)},
		{"a unicast GID", re.qp.AttachMcast(gidA, 0)},
		{"a handle naming no QP", (&QP{pd: re.pd, h: 999}).AttachMcast(mgid, 0)},
		{"a PD's handle", (&QP{pd: re.pd, h: re.pd.h}).AttachMcast(mgid, 0)},
		{"detach of a group not attached", re.qp.DetachMcast(verbs.GIDFromAddr(netip.MustParseAddr("239.9.9.9")), 0)},
		{"detach by a handle naming no QP", (&QP{pd: re.pd, h: 999}).DetachMcast(mgid, 0)},
	} {
		if !errors.Is(c.err, syscall.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", c.what, c.err)
		}
	}
	// Another session names the QP by its handle: not its own.
	d2 := r.dial(t)
	pd2, err := d2.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if err := (&QP{pd: pd2, h: re.qp.h}).AttachMcast(mgid, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("another session's QP: %v, want EINVAL", err)
	}
	if err := (&QP{pd: pd2, h: re.qp.h}).DetachMcast(mgid, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("detach of another session's QP: %v, want EINVAL", err)
	}
	if err := re.qp.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroy of an attached QP: %v, want EBUSY (uverbs_free_qp)", err)
	}

	ah, err := le.pd.CreateAH(verbs.AV{DGID: mgid})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	send := func(wrid uint64) {
		t.Helper()
		copy(le.buf, "to the group")
		if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{le.mr.SGE(0, 12)}, AH: ah, RemoteQPN: engine.McastQPN, RemoteQKey: 0x11}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollLocal(t, le.cq, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("send: %+v", wc)
		}
	}
	if _, err := re.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: []verbs.SGE{re.mr.SGE(0, 256)}}}); err != nil {
		t.Fatal(err)
	}
	send(1)
	wc := pollRemote(t, re.cq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.ByteLen != 40+12 || wc.SrcQP != le.qp.QPN() {
		t.Fatalf("receive: %+v", wc)
	}
	if got := string(re.buf[40:52]); got != "to the group" {
		t.Fatalf("received %q", got)
	}

	// The session ends with the QP attached: the daemon's teardown detaches it.
	d.Close()
	waitSessions(t, r.srv, 1)
	unknown := r.a.Counters()[engine.CntRcvdUnknownQP]
	send(2)
	for end := time.Now().Add(10 * time.Second); r.a.Counters()[engine.CntRcvdUnknownQP] != unknown+1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the group's packet after the session's end found a member (rcvd_unknown_qp unchanged)")
		}
	}
}

// TestRemoteMcastVerbs: verbs' (*QP).AttachMcast on an attached device goes to
// the daemon (BackendMcastQP).
func TestRemoteMcastVerbs(t *testing.T) {
	r := newRig(t, server.Config{})
	d, err := verbs.Open(verbs.Options{Attach: r.sock})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(8, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mgid := verbs.GIDFromAddr(netip.MustParseAddr("ff0e::1:2"))
	if err := qp.AttachMcast(mgid, 0); err != nil {
		t.Fatal(err)
	}
	if err := qp.Destroy().Wait(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("destroy of an attached QP: %v, want ErrBusy", err)
	}
	if err := qp.DetachMcast(mgid, 0); err != nil {
		t.Fatal(err)
	}
	if err := qp.DetachMcast(mgid, 0); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("detach again: %v, want ErrInvalid", err)
	}
	if err := qp.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteCMJoin: CM_JOIN_MCAST and CM_LEAVE_MCAST. The daemon's ID joins
// and MULTICAST_JOIN comes back naming the join by its uid, with the group's
// UD parameters (cma_make_mc_event); the process attaches its QP itself, as
// librdmacm's ucma_process_join does, and gets the group's datagram. The
// errors: an ID not UD (EINVAL), not bound (EINVAL), an ID handle naming
// nothing (ENOENT), a leave of a group not joined (EADDRNOTAVAIL).
func TestRemoteCMJoin(t *testing.T) {
	r := newRig(t, server.Config{Logf: t.Logf})
	d := r.dial(t)
	re := newRemoteEnd(t, d, verbs.UD)
	le := newLocalEnd(t, r.b, verbs.UD)
	id, err := d.CreateCMID(rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	group := netip.MustParseAddr("239.1.2.3")
	if err := id.JoinMulticast(group, 5); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("join before bind: %v, want EINVAL", err)
	}
	if _, err := id.BindAddr(netip.AddrPortFrom(addrA, 0)); err != nil {
		t.Fatal(err)
	}
	tcp, err := d.CreateCMID(rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Destroy()
	if _, err := tcp.BindAddr(netip.AddrPortFrom(addrA, 0)); err != nil {
		t.Fatal(err)
	}
	if err := tcp.JoinMulticast(group, 1); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("TCP ID: %v, want EINVAL", err)
	}
	if err := (&CMID{d: d, h: 999}).JoinMulticast(group, 1); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("no ID: %v, want ENOENT", err)
	}
	if err := id.JoinMulticast(group, 5); err != nil {
		t.Fatal(err)
	}
	ev := cmEvent(t, d, rdmacm.EventMulticastJoin)
	mgid := verbs.GIDFromAddr(group)
	if ev.ID != id || ev.MC != 5 || ev.Listen != nil || ev.UD.QPN != 0xFFFFFF || ev.UD.QKey != rdmacm.UDPQKey ||
		ev.UD.AV.DGID != mgid {
		t.Fatalf("MULTICAST_JOIN %+v", ev)
	}
	for _, s := range udSteps(rdmacm.UDPQKey) {
		if err := re.qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
		if err := le.qp.ModifySync(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	if err := re.qp.AttachMcast(ev.UD.AV.DGID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := re.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: []verbs.SGE{re.mr.SGE(0, 256)}}}); err != nil {
		t.Fatal(err)
	}
	ah, err := le.pd.CreateAH(verbs.AV{DGID: mgid})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	copy(le.buf, "joined")
	if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{le.mr.SGE(0, 6)}, AH: ah, RemoteQPN: ev.UD.QPN, RemoteQKey: ev.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollRemote(t, re.cq, 1)[0]; wc.Status != verbs.WCSuccess || string(re.buf[40:46]) != "joined" {
		t.Fatalf("receive %+v", wc)
	}
	if err := re.qp.DetachMcast(mgid, 0); err != nil {
		t.Fatal(err)
	}
	// The daemon leaves the join the client names (its uid), as librdmacm
	// leaves by the join: a join it never made is EADDRNOTAVAIL.
	if err := id.LeaveMulticast(group, 7); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("leave of a join never made: %v, want EADDRNOTAVAIL", err)
	}
	if err := id.LeaveMulticast(group, 5); err != nil {
		t.Fatal(err)
	}
	if err := id.LeaveMulticast(group, 5); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("leave again: %v, want EADDRNOTAVAIL", err)
	}
}

// TestRemoteRdmacmJoin: verbs/rdmacm's JoinMulticast on an attached device,
// in a child process (its only device the attached one): the daemon's ID
// joins, MULTICAST_JOIN comes back to the child's ID with its context, and
// the child's QP, attached as GetEvent returns the event, gets the parent's
// datagram to the group; leave detaches it (rdmacm's DestroyQP succeeds).
func TestRemoteRdmacmJoin(t *testing.T) {
	r := newRig(t, server.Config{Logf: t.Logf})
	le := newLocalEnd(t, r.b, verbs.UD)
	for _, s := range udSteps(rdmacm.UDPQKey) {
		if err := le.qp.ModifySync(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMcastChild$", "-test.v")
	cmd.Env = append(os.Environ(), "XRNIC_MCAST_CHILD="+r.sock)
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	if _, ok := out.WaitFor("child joined", 20*time.Second); !ok {
		t.Fatalf("the child did not join:\n%s", out.String())
	}
	ah, err := le.pd.CreateAH(verbs.AV{DGID: verbs.GIDFromAddr(netip.MustParseAddr("239.1.2.5"))})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	copy(le.buf, "to the child")
	if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{le.mr.SGE(0, 12)}, AH: ah, RemoteQPN: rdmacm.McastQPN, RemoteQKey: rdmacm.UDPQKey}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil || !strings.Contains(out.String(), "child ok") {
			t.Fatalf("the child: %v\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the child did not end:\n%s", out.String())
	}
}

// TestMcastChild is TestRemoteRdmacmJoin's child.
func TestMcastChild(t *testing.T) {
	sock := os.Getenv("XRNIC_MCAST_CHILD")
	if sock == "" {
		t.Skip("run by TestRemoteRdmacmJoin")
	}
	d, err := verbs.Open(verbs.Options{Attach: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(8, verbs.CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.MapBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.UnmapBuffer(buf)
	mr, err := pd.RegMR(buf, 0, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ch := rdmacm.NewEventChannel()
	id, err := ch.CreateID(nil, rdmacm.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.BindAddr(netip.AddrPortFrom(addrA, 0)); err != nil {
		t.Fatal(err)
	}
	qp, err := id.CreateQP(pd, verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGL: []verbs.SGE{mr.SGE(0, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	group := netip.MustParseAddr("239.1.2.5")
	if err := id.JoinMulticast(group, "ctx"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil || ev.Type != rdmacm.EventMulticastJoin || ev.Context != "ctx" || ev.UD.QPN != rdmacm.McastQPN ||
		ev.UD.QKey != rdmacm.UDPQKey || ev.UD.AV.DGID != verbs.GIDFromAddr(group) {
		t.Fatalf("MULTICAST_JOIN: %+v %v", ev, err)
	}
	fmt.Println("child joined")
	wcs := make([]verbs.WC, 1)
	for end := time.Now().Add(20 * time.Second); cq.Poll(wcs) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("nothing from the group")
		}
	}
	if wcs[0].Status != verbs.WCSuccess || string(buf[40:52]) != "to the child" {
		t.Fatalf("receive %+v %q", wcs[0], buf[40:52])
	}
	if err := id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if err := id.LeaveMulticast(group); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("leave again: %v", err)
	}
	if err := id.DestroyQP(); err != nil {
		t.Fatalf("DestroyQP after leaving: %v", err)
	}
	mr.Dereg()
	cq.Destroy()
	pd.Dealloc()
	ch.Close()
	fmt.Println("child ok")
}
