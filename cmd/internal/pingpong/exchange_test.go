package pingpong

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/verbs"
)

func gid(t *testing.T, s string) verbs.GID {
	t.Helper()
	g, err := verbs.ParseGID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// cWireGID is gid_to_wire_gid as a little-endian host runs it: memcpy the GID
// into uint32_t[4], then sprintf("%08x", htobe32(w)) for each word.
func cWireGID(g verbs.GID) string {
	var b strings.Builder
	for i := 0; i < 16; i += 4 {
		w := binary.LittleEndian.Uint32(g[i:]) // the word as the host reads it
		fmt.Fprintf(&b, "%08x", bits.ReverseBytes32(w))
	}
	return b.String()
}

func TestMsgSize(t *testing.T) {
	// sizeof "0000:000000:000000:00000000000000000000000000000000": 4+1+6+1+6+1+32 characters and the NUL.
	if MsgSize != 52 {
		t.Fatalf("MsgSize = %d, want 52", MsgSize)
	}
}

// TestMessageGolden: the bytes rc_pingpong's sprintf("%04x:%06x:%06x:%s") and
// write(fd, msg, sizeof msg) put on the wire, spelled out by hand.
func TestMessageGolden(t *testing.T) {
	for _, c := range []struct {
		d    Dest
		want string
	}{
		{Dest{LID: 0, QPN: 0x11, PSN: 0xc5239b, GID: gid(t, "::ffff:192.0.2.2")},
			"0000:000011:c5239b:00000000000000000000ffffc0000202\x00"},
		{Dest{LID: 0, QPN: 0x11, PSN: 0x1, GID: gid(t, "::ffff:192.0.2.11")},
			"0000:000011:000001:00000000000000000000ffffc000020b\x00"},
		{Dest{LID: 0xabcd, QPN: 0xffffff, PSN: 0, GID: gid(t, "fe80::5054:ff:fe12:3456")},
			"abcd:ffffff:000000:fe80000000000000505400fffe123456\x00"},
		{Dest{LID: 1, QPN: 0x2a, PSN: 0xabcdef},
			"0001:00002a:abcdef:00000000000000000000000000000000\x00"},
	} {
		m, err := c.d.Message()
		if err != nil {
			t.Fatal(err)
		}
		if string(m) != c.want || len(m) != MsgSize {
			t.Errorf("Message(%+v) = %q, want %q", c.d, m, c.want)
		}
		if w := cWireGID(c.d.GID); WireGID(c.d.GID) != w {
			t.Errorf("WireGID(%v) = %s, gid_to_wire_gid %s", c.d.GID, WireGID(c.d.GID), w)
		}
		back, err := ParseMessage(m)
		if err != nil || back != c.d {
			t.Errorf("ParseMessage(%q) = %+v, %v; want %+v", m, back, err, c.d)
		}
	}
	if _, err := (&Dest{QPN: 1 << 24}).Message(); err == nil {
		t.Error("a 25-bit QPN made a message")
	}
	if _, err := (&Dest{PSN: 1 << 24}).Message(); err == nil {
		t.Error("a 25-bit PSN made a message")
	}
}

func TestParseMessage(t *testing.T) {
	pad := func(s string) []byte { // NUL-padded to MsgSize, as the C buffer is
		b := make([]byte, MsgSize)
		copy(b, s)
		return b
	}
	d, err := ParseMessage(pad("00AB:0000Ff:00000a:FE80000000000000505400FFFE123456"))
	if err != nil || d.LID != 0xab || d.QPN != 0xff || d.PSN != 0xa || d.GID != gid(t, "fe80::5054:ff:fe12:3456") {
		t.Errorf("upper case: %+v, %v", d, err)
	}
	// Shorter fields still fit rc_pingpong's sscanf("%x:%x:%x:%s").
	if d, err := ParseMessage(pad("0:11:1:00000000000000000000ffffc0000202")); err != nil || d.QPN != 0x11 || d.PSN != 1 {
		t.Errorf("short fields: %+v, %v", d, err)
	}
	good := "0000:000011:c5239b:00000000000000000000ffffc0000202"
	for _, c := range []struct {
		msg  []byte
		want string
	}{
		{[]byte(good + "\x00\x00"), "53 bytes"},
		{[]byte(good), "51 bytes"},
		{[]byte(good + "0"), "not NUL-terminated"},
		{pad("0000:000011:c5239b"), "3 fields"},
		{pad("0000:000011:c5239b:00:0000000000000000ffffc00002"), "5 fields"},
		{pad(""), "1 fields"},
		{pad("000g:000011:c5239b:00000000000000000000ffffc0000202"), "LID \"000g\""},
		{pad("00000:000011:c5239b:0000000000000000000ffffc0000202"), "LID \"00000\""},
		{pad("0000:1000000:c5239b:0000000000000000000ffffc0000202"), "QPN \"1000000\""},
		{pad("0000::c5239b:00000000000000000000ffffc0000202"), "QPN \"\""},
		{pad("0000:0x0011:c5239b:00000000000000000000ffffc0000202"), "QPN \"0x0011\""},
		{pad("0000:000011:-1:00000000000000000000ffffc0000202"), "PSN \"-1\""},
		{pad("0000:000011: c5239:00000000000000000000ffffc0000202"), "PSN \" c5239\""},
		{pad("0000:000011:c5239b:0000000000000000000ffffc0000202"), "31 characters"},
		{pad("0:11:1:00000000000000000000ffffc00002020"), "33 characters"},
		{pad("0000:000011:c5239b:00000000000000000000ffffc000020z"), "want 32 hex digits"},
		{pad("done"), "1 fields"},
	} {
		if _, err := ParseMessage(c.msg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseMessage(%q) = %v, want an error with %q", c.msg, err, c.want)
		}
	}
}

func TestNtop(t *testing.T) {
	raw := func(ws ...uint16) verbs.GID {
		var g verbs.GID
		for i, w := range ws {
			binary.BigEndian.PutUint16(g[2*i:], w)
		}
		return g
	}
	for _, c := range []struct {
		g    verbs.GID
		want string
		ok   bool
	}{
		{verbs.GID{}, "::", true},
		{gid(t, "::ffff:192.0.2.2"), "::ffff:192.0.2.2", true},
		{gid(t, "::ffff:192.0.2.11"), "::ffff:192.0.2.11", true},
		{raw(0, 0, 0, 0, 0, 0xffff, 0, 0), "::ffff:0.0.0.0", true},
		{raw(0, 0, 0, 0, 0, 0, 0x0102, 0x0304), "::1.2.3.4", true}, // IPv4-compatible: dotted too
		{raw(0, 0, 0, 0, 0, 0, 0, 1), "::1", true},
		{raw(0, 0, 0, 0, 0, 0xfffe, 0x0102, 0x0304), "::fffe:102:304", true},
		{raw(0xfe80, 0, 0, 0, 0x5054, 0xff, 0xfe12, 0x3456), "fe80::5054:ff:fe12:3456", true},
		{raw(1, 0, 0, 1, 0, 0, 1, 1), "1::1:0:0:1:1", true}, // the first of equal runs
		{raw(1, 0, 0, 1, 0, 0, 0, 1), "1:0:0:1::1", true},   // the longest run
		{raw(1, 0, 1, 1, 1, 1, 1, 1), "1:0:1:1:1:1:1:1", true},
		{raw(1, 0, 0, 0, 0, 0, 0, 0), "1::", true},
		{raw(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), "2001:db8::1", true},
		{raw(0x2001, 0xdb8, 0x1234, 0x5678, 0x9abc, 0xdef0, 1, 2), "2001:db8:1234:5678:9abc:def0:1:2", true},
		// 38 characters do not fit rc_pingpong's char gid[33].
		{raw(0x2001, 0xdb8, 0x1234, 0x5678, 0x9abc, 0xdef0, 0x1234, 0x5678), "2001:db8:1234:5678:9abc:def0:1234:5678", false},
	} {
		got, ok := Ntop(c.g)
		if got != c.want || ok != c.ok {
			t.Errorf("Ntop(% x) = %q, %v; want %q, %v", c.g[:], got, ok, c.want, c.ok)
		}
	}
	// main's gid[] keeps the local text when the remote one does not fit.
	s := &side{out: io.Discard}
	if s.ntop(gid(t, "::ffff:192.0.2.2")) != "::ffff:192.0.2.2" || s.ntop(raw(1, 2, 3, 4, 5, 6, 7, 8)) != "1:2:3:4:5:6:7:8" ||
		s.ntop(raw(0x2001, 0xdb8, 0x1234, 0x5678, 0x9abc, 0xdef0, 0x1234, 0x5678)) != "1:2:3:4:5:6:7:8" {
		t.Error("a GID text that does not fit did not leave the previous one")
	}
}

// pipe returns a connected pair of TCP connections on lo.
func pipe(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestClientExchange plays rc_pingpong's server (pp_server_exch_dest) by hand
// against ClientExchange.
func TestClientExchange(t *testing.T) {
	c, srv := pipe(t)
	my := Dest{QPN: 0x12, PSN: 0x345678, GID: gid(t, "::ffff:192.0.2.2")}
	type result struct {
		d   []Dest
		err error
	}
	res := make(chan result, 1)
	go func() {
		d, err := ClientExchange(c, []Dest{my})
		res <- result{d, err}
	}()
	var msg [MsgSize]byte
	if _, err := io.ReadFull(srv, msg[:]); err != nil {
		t.Fatal(err)
	}
	if string(msg[:]) != "0000:000012:345678:00000000000000000000ffffc0000202\x00" {
		t.Fatalf("client sent %q", msg)
	}
	if _, err := srv.Write([]byte("0000:0000a1:00abcd:00000000000000000000ffffc000020b\x00")); err != nil {
		t.Fatal(err)
	}
	// read(connfd, msg, sizeof msg) != sizeof "done": then EOF.
	rest, err := io.ReadAll(srv)
	if err != nil || string(rest) != "done\x00" {
		t.Fatalf("after the address the client sent %q, %v; want \"done\\x00\" and EOF", rest, err)
	}
	r := <-res
	if r.err != nil || len(r.d) != 1 || r.d[0] != (Dest{QPN: 0xa1, PSN: 0xabcd, GID: gid(t, "::ffff:192.0.2.11")}) {
		t.Fatalf("ClientExchange = %+v, %v", r.d, r.err)
	}
}

// TestServerExchange plays rc_pingpong's client (pp_client_exch_dest) by hand
// against ServerExchange, and checks that the QP is connected before the
// server answers.
func TestServerExchange(t *testing.T) {
	c, cli := pipe(t)
	my := Dest{QPN: 0xa1, PSN: 0xabcd, GID: gid(t, "::ffff:192.0.2.2")}
	connected := make(chan Dest, 1)
	res := make(chan error, 1)
	go func() {
		_, err := ServerExchange(c, []Dest{my}, func(rem []Dest) error { connected <- rem[0]; return nil })
		res <- err
	}()
	if _, err := cli.Write([]byte("0000:000012:345678:00000000000000000000ffffc000020b\x00")); err != nil {
		t.Fatal(err)
	}
	var msg [MsgSize]byte
	if _, err := io.ReadFull(cli, msg[:]); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-connected:
		if d != (Dest{QPN: 0x12, PSN: 0x345678, GID: gid(t, "::ffff:192.0.2.11")}) {
			t.Errorf("connected to %+v", d)
		}
	default:
		t.Fatal("the server answered before it connected its QP")
	}
	if string(msg[:]) != "0000:0000a1:00abcd:00000000000000000000ffffc0000202\x00" {
		t.Fatalf("server sent %q", msg)
	}
	if _, err := cli.Write([]byte("done\x00")); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if n, err := cli.Read(msg[:]); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("server did not close: %d, %v", n, err)
	}
}

func TestExchangeErrors(t *testing.T) {
	my := Dest{QPN: 0x12, PSN: 0x345678, GID: gid(t, "::ffff:192.0.2.2")}
	good := []byte("0000:000012:345678:00000000000000000000ffffc000020b\x00")
	noConnect := func([]Dest) error { return nil }
	for _, c := range []struct {
		name   string
		server bool
		peer   func(net.Conn) // what the fake peer does before it closes
		want   string
	}{
		{"server closes at once", false, func(net.Conn) {}, "couldn't read remote address: the other side (127.0.0.1:"},
		{"server sends half", false, func(c net.Conn) { io.ReadFull(c, make([]byte, MsgSize)); c.Write(good[:20]) },
			"closed the connection after 20 of 52 bytes"},
		{"server sends garbage", false, func(c net.Conn) { io.ReadFull(c, make([]byte, MsgSize)); c.Write(bytes.Repeat([]byte("x"), MsgSize)) },
			"sent a bad address"},
		{"client closes at once", true, func(net.Conn) {}, "couldn't read remote address: the other side"},
		{"client sends a bad GID", true, func(c net.Conn) {
			c.Write([]byte("0000:000012:345678:00000000000000000000ffffc00002zz\x00"))
		}, "sent a bad address"},
		{"client sends no done", true, func(c net.Conn) { c.Write(good); io.ReadFull(c, make([]byte, MsgSize)) },
			"couldn't read \"done\": the other side"},
		{"client sends a bad done", true, func(c net.Conn) { c.Write(good); io.ReadFull(c, make([]byte, MsgSize)); c.Write([]byte("DONE\x00")) },
			"sent \"DONE\\x00\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := pipe(t)
			go func() { c.peer(b); b.Close() }()
			var err error
			if c.server {
				_, err = ServerExchange(a, []Dest{my}, noConnect)
			} else {
				_, err = ClientExchange(a, []Dest{my})
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	t.Run("connect fails", func(t *testing.T) {
		a, b := pipe(t)
		go func() { b.Write(good) }()
		_, err := ServerExchange(a, []Dest{my}, func([]Dest) error { return errors.New("failed to modify QP to RTR: nope") })
		if err == nil || err.Error() != "couldn't connect to remote QP: failed to modify QP to RTR: nope" {
			t.Errorf("got %v", err)
		}
		// rc_pingpong closes without answering.
		if n, _ := b.Read(make([]byte, MsgSize)); n != 0 {
			t.Errorf("the server answered %d bytes", n)
		}
	})
	t.Run("silent peer", func(t *testing.T) {
		old := ExchangeTimeout
		ExchangeTimeout = 100 * time.Millisecond
		defer func() { ExchangeTimeout = old }()
		a, _ := pipe(t)
		_, err := ServerExchange(a, []Dest{my}, noConnect)
		if err == nil || !strings.Contains(err.Error(), "did not answer within 100ms") {
			t.Errorf("got %v", err)
		}
	})
}
