package ndk

import (
	"bytes"
	"errors"
	"testing"
)

// TestConnectTransferDisconnect: a connection made with a listener, Connect,
// CompleteConnect and Accept carries a Send, a Write and a Read; the peer's
// Disconnect flushes the other side's receive and raises its disconnect event.
func TestConnectTransferDisconnect(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	x := connect(t, cli, srv, 4000)

	if la, _ := x.cc.GetLocalAddress(); la.Addr() != ipA || la.Port() < ephemeralLo {
		t.Fatalf("client local address %v", la)
	}
	if pa, _ := x.sc.GetPeerAddress(); pa.Addr() != ipA {
		t.Fatalf("server's peer address %v", pa)
	}

	// Send.
	if err := srv.qp.Receive(1, []SGE{srv.mr.SGE(0, 4096)}); err != nil {
		t.Fatal(err)
	}
	copy(cli.buf[100:], "ping")
	if err := cli.qp.Send(2, []SGE{cli.mr.SGE(100, 4)}, 0); err != nil {
		t.Fatal(err)
	}
	if r := poll(t, cli.cq); r.Err() != nil || r.RequestContext != 2 || r.Type != OpSend || r.QP != cli.qp {
		t.Fatalf("send result %+v", r)
	}
	if r := poll(t, srv.cq); r.Err() != nil || r.RequestContext != 1 || r.Type != OpReceive || r.BytesTransferred != 4 ||
		string(srv.buf[:4]) != "ping" {
		t.Fatalf("receive result %+v %q", r, srv.buf[:4])
	}
	// Write and Read.
	copy(cli.buf[200:], "written")
	if err := cli.qp.Write(3, []SGE{cli.mr.SGE(200, 7)}, srv.mr.Addr()+1000, srv.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := poll(t, cli.cq); r.Err() != nil || r.Type != OpWrite {
		t.Fatalf("write result %+v", r)
	}
	if string(srv.buf[1000:1007]) != "written" {
		t.Fatalf("written %q", srv.buf[1000:1007])
	}
	copy(srv.buf[2000:], "read me")
	if err := cli.qp.Read(4, []SGE{cli.mr.SGE(300, 7)}, srv.mr.Addr()+2000, srv.mr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	if r := poll(t, cli.cq); r.Err() != nil || r.Type != OpRead || !bytes.Equal(cli.buf[300:307], []byte("read me")) {
		t.Fatalf("read result %+v %q", r, cli.buf[300:307])
	}

	// The server disconnects: its posted receive is flushed; the client hears.
	if err := srv.qp.Receive(5, []SGE{srv.mr.SGE(0, 4096)}); err != nil {
		t.Fatal(err)
	}
	if err := cli.qp.Receive(6, []SGE{cli.mr.SGE(0, 4096)}); err != nil {
		t.Fatal(err)
	}
	done, ch := cb()
	if err := x.sc.Disconnect(done); !errors.Is(err, ErrPending) {
		t.Fatalf("Disconnect: %v", err)
	}
	if r := poll(t, srv.cq); !errors.Is(r.Err(), ErrCanceled) || r.RequestContext != 5 {
		t.Fatalf("server's receive after Disconnect: %+v", r)
	}
	wait(t, "client disconnect event", x.cliDiscon)
	if r := poll(t, cli.cq); !errors.Is(r.Err(), ErrCanceled) || r.RequestContext != 6 {
		t.Fatalf("client's receive after the peer's Disconnect: %+v", r)
	}
	if err := x.cc.Disconnect(nil); err != nil {
		t.Fatalf("client's answering Disconnect: %v", err)
	}
	if err := wait(t, "server Disconnect", ch); err != nil {
		t.Fatal(err)
	}
}
