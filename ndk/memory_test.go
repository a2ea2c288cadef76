package ndk

import (
	"bytes"
	"errors"
	"testing"
)

// TestBindFastRegisterInvalidate: a window bound with QP.Bind opens part of a
// region to the peer until Invalidate; a fast-registration region gets two
// pages with FastRegister, takes the peer's Write at its IOVA, and a
// SendAndInvalidate from the peer ends it.
func TestBindFastRegisterInvalidate(t *testing.T) {
	da, db := memDevices(t)
	cli, srv := newSide(t, da), newSide(t, db)
	connect(t, cli, srv, 4700)
	okResult := func(what string, c *CQ, typ ResultType) {
		t.Helper()
		if r := poll(t, c); r.Err() != nil || r.Type != typ {
			t.Fatalf("%s: %+v", what, r)
		}
	}
	failResult := func(what string, c *CQ) {
		t.Helper()
		if r := poll(t, c); r.Err() == nil {
			t.Fatalf("%s succeeded", what)
		}
	}

	// Bind a window to 256 bytes of a region that allows binds.
	buf := make([]byte, 4096)
	mr, err := srv.pd.CreateMR(false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close(nil)
	if err := mr.Register(buf, AllowLocalWrite|AllowBind, nil); err != nil {
		t.Fatal(err)
	}
	mw, err := srv.pd.CreateMW(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close(nil)
	before := mw.RemoteToken()
	if err := srv.qp.Bind(1, mr, mw, mr.Addr()+512, 256, AllowRemoteWrite, 0); err != nil {
		t.Fatal(err)
	}
	okResult("bind", srv.cq, OpBind)
	if mw.RemoteToken() == before {
		t.Fatal("the window's token did not change with the bind")
	}
	copy(cli.buf, "through the window")
	if err := cli.qp.Write(2, []SGE{cli.mr.SGE(0, 18)}, mr.Addr()+512, mw.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	okResult("write through the window", cli.cq, OpWrite)
	if err := srv.qp.Receive(9, []SGE{srv.mr.SGE(0, 64)}); err != nil { // orders the check after the WRITE
		t.Fatal(err)
	}
	cli.qp.Send(3, []SGE{cli.mr.SGE(0, 1)}, 0)
	okResult("send", cli.cq, OpSend)
	okResult("receive", srv.cq, OpReceive)
	if string(buf[512:530]) != "through the window" {
		t.Fatalf("window bytes %q", buf[512:530])
	}
	if err := srv.qp.Invalidate(4, nil, mw, 0); err != nil {
		t.Fatal(err)
	}
	okResult("invalidate", srv.cq, OpInvalidate)
	if err := srv.qp.Invalidate(4, mr, mw, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Invalidate of two objects: %v", err)
	}

	// Fast registration: two pages, the first entered 100 bytes in.
	fr, err := srv.pd.CreateMR(true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close(nil)
	if err := fr.InitializeFastRegister(4, nil); err != nil {
		t.Fatal(err)
	}
	pages := [][]byte{make([]byte, 4096), make([]byte, 4096)}
	const base = 0x7000_0000
	if err := srv.qp.FastRegister(5, fr, pages, 100, 5000, base, AllowLocalWrite|AllowRemoteWrite, 0); err != nil {
		t.Fatal(err)
	}
	okResult("fast register", srv.cq, OpFastRegister)
	data := bytes.Repeat([]byte{0xab}, 5000)
	copy(cli.buf[4096:], data)
	if err := cli.qp.Write(6, []SGE{cli.mr.SGE(4096, 5000)}, base, fr.RemoteToken(), 0); err != nil {
		t.Fatal(err)
	}
	okResult("write to the fast-registered region", cli.cq, OpWrite)
	if err := srv.qp.Receive(10, []SGE{srv.mr.SGE(0, 64)}); err != nil {
		t.Fatal(err)
	}
	token := fr.RemoteToken()
	if err := cli.qp.SendAndInvalidate(7, []SGE{cli.mr.SGE(0, 1)}, 0, token); err != nil {
		t.Fatal(err)
	}
	okResult("send and invalidate", cli.cq, OpSend)
	if r := poll(t, srv.cq); r.Err() != nil || !r.Invalidated || r.InvalidatedToken != token {
		t.Fatalf("receive of the SendAndInvalidate: %+v", r)
	}
	if !bytes.Equal(pages[0][100:], data[:3996]) || !bytes.Equal(pages[1][:1004], data[3996:]) {
		t.Fatal("the WRITE did not land on the pages")
	}
	// The token is dead now: the peer's WRITE fails.
	if err := cli.qp.Write(8, []SGE{cli.mr.SGE(4096, 16)}, base, token, 0); err != nil {
		t.Fatal(err)
	}
	failResult("write with the invalidated token", cli.cq)
}
