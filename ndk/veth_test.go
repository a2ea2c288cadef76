package ndk

import (
	"bytes"
	"errors"
	"testing"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/testenv"
	"github.com/xrnic/xrnic/verbs"
)

// openVeth opens a device on one end of a veth pair, with the real XDP program
// and AF_XDP sockets (no fallback: a missing capability fails the test).
func openVeth(t *testing.T, e *testenv.Endpoint) *verbs.Device {
	t.Helper()
	var d *verbs.Device
	if err := e.Do(func() (err error) {
		d, err = verbs.Open(verbs.Options{Interface: e.Name, LinkKind: link.KindAFXDP})
		return err
	}); err != nil {
		t.Fatalf("AF_XDP device on %s: %v", e.Name, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestVethConnectTransfer: two adapters in two namespaces over a real veth
// pair and AF_XDP: a listener accepts a connector (a normal rdma_cm
// REQ/REP/RTU on the wire), Send, Write and Read carry checked data, and
// Disconnect flushes the peer's receive.
func TestVethConnectTransfer(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{NoIPv6: true})
	da, db := openVeth(t, &p.A), openVeth(t, &p.B)
	cli, srv := newSide(t, da), newSide(t, db)
	x := connect(t, cli, srv, 4600)
	if pa, _ := x.sc.GetPeerAddress(); pa.Addr() != p.A.IPv4 {
		t.Fatalf("server's peer %v, want %v", pa, p.A.IPv4)
	}
	msg := bytes.Repeat([]byte("ndk over veth "), 200)
	// Written before a post of the server's: its engine reads it for the
	// READ below, and only the post orders the two for the race detector
	// (the veth between them is invisible to it).
	copy(srv.buf[16384:], msg)
	for i := range 20 {
		if err := srv.qp.Receive(uint64(i), []SGE{srv.mr.SGE(0, 4096)}); err != nil {
			t.Fatal(err)
		}
		copy(cli.buf[8192:], msg)
		cli.buf[8192] = byte(i)
		if err := cli.qp.Send(uint64(100+i), []SGE{cli.mr.SGE(8192, uint32(len(msg)))}, 0); err != nil {
			t.Fatal(err)
		}
		if r := poll(t, cli.cq); r.Err() != nil {
			t.Fatalf("send %d: %+v", i, r)
		}
		if r := poll(t, srv.cq); r.Err() != nil || r.BytesTransferred != uint32(len(msg)) || srv.buf[0] != byte(i) ||
			!bytes.Equal(srv.buf[1:len(msg)], msg[1:]) {
			t.Fatalf("receive %d: %+v", i, r)
		}
	}
	if err := cli.qp.Read(1, []SGE{cli.mr.SGE(32768, uint32(len(msg)))}, srv.mr.Addr()+16384, srv.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := poll(t, cli.cq); r.Err() != nil || !bytes.Equal(cli.buf[32768:32768+len(msg)], msg) {
		t.Fatalf("read %+v", r)
	}
	if err := cli.qp.Write(2, []SGE{cli.mr.SGE(8192, uint32(len(msg)))}, srv.mr.Addr()+40000, srv.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := poll(t, cli.cq); r.Err() != nil {
		t.Fatalf("write %+v", r)
	}
	// A SEND after the WRITE: its receive completion on the server orders
	// the WRITE's bytes before the check (IBTA's ordering, and the CQ's
	// synchronisation for the race detector).
	if err := srv.qp.Receive(6, []SGE{srv.mr.SGE(0, 4096)}); err != nil {
		t.Fatal(err)
	}
	if err := cli.qp.Send(3, []SGE{cli.mr.SGE(8192, 1)}, 0); err != nil {
		t.Fatal(err)
	}
	poll(t, cli.cq)
	if r := poll(t, srv.cq); r.Err() != nil || !bytes.Equal(srv.buf[40001:40000+len(msg)], msg[1:]) {
		t.Fatalf("write %+v", r)
	}
	if err := srv.qp.Receive(7, []SGE{srv.mr.SGE(0, 4096)}); err != nil {
		t.Fatal(err)
	}
	go func() {
		wait(t, "server disconnect event", x.srvDiscon)
		x.sc.Disconnect(nil)
	}()
	done, ch := cb()
	if err := x.cc.Disconnect(done); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if err := wait(t, "Disconnect", ch); err != nil {
		t.Fatal(err)
	}
	if r := poll(t, srv.cq); !errors.Is(r.Err(), ErrCanceled) || r.RequestContext != 7 {
		t.Fatalf("server receive after the disconnect: %+v", r)
	}
}
