package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/verbs"
)

var group = netip.MustParseAddr("239.1.2.3")

// noEvent checks that ch holds no event for a moment.
func noEvent(t *testing.T, ch *EventChannel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if ev, err := ch.GetEvent(ctx); err == nil {
		t.Fatalf("event %v (status %d), want none", ev.Type, ev.Status)
	}
}

// TestJoinMulticast: rdma_join_multicast as Linux on RoCE. The receiver binds
// (ADDR_BOUND), the sender resolves the group (ADDR_RESOLVED), as mckey does;
// MULTICAST_JOIN carries the group's UD parameters (cma_make_mc_event: the
// IPv4-mapped MGID, QPN 0xFFFFFF, RDMA_UDP_QKEY) and the join's context, and
// the ID's QP is attached as GetEvent returns it (ucma_process_join), so the
// sender's datagram reaches the receiver. The errors: an ID not bound
// (EINVAL), not UD (EINVAL), an IPv6 group (cma_iboe_join_multicast's
// ENOTSUPP on RoCEv2), a leave of a group not joined (EADDRNOTAVAIL); a
// join whose attach fails is MULTICAST_ERROR, status -1; a join left before
// its event is taken has none (ucma_leave_multicast).
func TestJoinMulticast(t *testing.T) {
	a, b := memDevices(t, cm.Config{})
	rx := newSide(t, b)
	var err error
	if rx.id, err = rx.ch.CreateID("rx", PSUDP); err != nil {
		t.Fatal(err)
	}
	defer rx.id.Destroy()
	if err := rx.id.JoinMulticast(group, nil); !errors.Is(err, ErrState) {
		t.Fatalf("join before bind: %v, want ErrState", err)
	}
	if err := rx.id.BindAddr(netip.AddrPortFrom(addrB, 0)); err != nil {
		t.Fatal(err)
	}
	if err := rx.id.JoinMulticast(netip.MustParseAddr("ff0e::1"), nil); !errors.Is(err, errs.ErrUnsupported) {
		t.Fatalf("IPv6 group: %v, want ErrUnsupported", err)
	}
	// The unspecified address: cma_iboe_join_multicast's cma_zero_addr,
	// -EINVAL, before any event (IPv6's too, ahead of its -ENOTSUPP).
	for _, z := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		if err := rx.id.JoinMulticast(z, nil); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("join of %v: %v, want ErrInvalid", z, err)
		}
	}
	noEvent(t, rx.ch)
	tcp, err := rx.ch.CreateID(nil, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := tcp.BindAddr(netip.AddrPortFrom(addrB, 0)); err != nil {
		t.Fatal(err)
	}
	if err := tcp.JoinMulticast(group, nil); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("TCP ID: %v, want ErrInvalid", err)
	}
	tcp.Destroy()
	rqp := rx.createQP(t, rx.id)
	if _, err := rqp.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{rx.mr.SGE(0, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	if err := rx.id.JoinMulticast(group, "rx join"); err != nil {
		t.Fatal(err)
	}
	mgid := verbs.GIDFromAddr(group)
	ev := getEvent(t, rx.ch, EventMulticastJoin)
	if ev.Context != "rx join" || ev.ID != rx.id || ev.UD.QPN != 0xFFFFFF || ev.UD.QKey != UDPQKey ||
		ev.UD.AV.DGID != mgid || ev.UD.AV.HopLimit != 64 || ev.Status != 0 {
		t.Fatalf("MULTICAST_JOIN %+v", ev)
	}
	if err := rqp.Destroy().Wait(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("the receiver's QP is not attached: destroy %v", err)
	}

	tx := newSide(t, a)
	if tx.id, err = tx.ch.CreateID("tx", PSUDP); err != nil {
		t.Fatal(err)
	}
	defer tx.id.Destroy()
	if err := tx.id.ResolveAddr(addrA, netip.AddrPortFrom(group, 0)); err != nil {
		t.Fatal(err)
	}
	getEvent(t, tx.ch, EventAddrResolved)
	tqp := tx.createQP(t, tx.id)
	if err := tx.id.JoinMulticast(group, 7); err != nil {
		t.Fatal(err)
	}
	tev := getEvent(t, tx.ch, EventMulticastJoin)
	if tev.Context != 7 || tev.UD.AV.DGID != mgid {
		t.Fatalf("sender's MULTICAST_JOIN %+v", tev)
	}
	ah, err := tx.pd.CreateAH(tev.UD.AV)
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	copy(tx.buf, "to the group")
	if _, err := tqp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{tx.mr.SGE(0, 12)}, AH: ah, RemoteQPN: tev.UD.QPN, RemoteQKey: tev.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := tx.poll(t); wc.Status != verbs.WCSuccess {
		t.Fatalf("send %+v", wc)
	}
	if wc := rx.poll(t); wc.Status != verbs.WCSuccess || wc.ByteLen != 52 || string(rx.buf[40:52]) != "to the group" {
		t.Fatalf("receive %+v %q", wc, rx.buf[40:52])
	}

	// Leave: the QP is detached (it can be destroyed); again is EADDRNOTAVAIL.
	for _, s := range []*side{rx, tx} {
		if err := s.id.LeaveMulticast(group); err != nil {
			t.Fatal(err)
		}
		if err := s.id.LeaveMulticast(group); !errors.Is(err, syscall.EADDRNOTAVAIL) {
			t.Fatalf("leave again: %v, want EADDRNOTAVAIL", err)
		}
	}
	// A join left before its event is taken: no event.
	if err := rx.id.JoinMulticast(group, nil); err != nil {
		t.Fatal(err)
	}
	if err := rx.id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	noEvent(t, rx.ch)
	// A unicast address: the join succeeds, its QP's attach fails.
	if err := rx.id.JoinMulticast(addrA, "bad"); err != nil {
		t.Fatal(err)
	}
	if ev := getEvent(t, rx.ch, EventMulticastError); ev.Status != -1 || ev.Context != "bad" {
		t.Fatalf("MULTICAST_ERROR %+v", ev)
	}
	if err := rx.id.LeaveMulticast(addrA); err != nil {
		t.Fatal(err)
	}
	if err := rx.id.DestroyQP(); err != nil {
		t.Fatalf("destroy of the QP after leaving: %v", err)
	}
	// Joins are bounded (MaxJoins: a daemon's process cannot grow them).
	for range MaxJoins {
		if err := rx.id.JoinMulticast(group, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := rx.id.JoinMulticast(group, nil); !errors.Is(err, errs.ErrLimit) {
		t.Fatalf("join %d: %v, want ErrLimit", MaxJoins+1, err)
	}
}
