package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/testenv"
)

// TestCLibraryBadLayout: the C library checks the ring layouts of the daemon's
// replies before it writes into them (clib/test/badlayout.c). A proxy between
// the program and its daemon passes every message and descriptor through and
// changes one kind of reply; the create must fail with EPROTO, and the object
// the daemon made must go again. Before, the library laid its rings over
// whatever the reply said.
func TestCLibraryBadLayout(t *testing.T) {
	lib := buildCLib(t)
	bin := buildCProg(t, "badlayout")
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	a := startDaemonProc(t, &p.A)
	for _, c := range []struct {
		what   string
		op     attach.Op
		mangle func(p []byte)
	}{
		{"cq", attach.OpCreateCQ, func(p []byte) { // 15 entries: not a power of two
			r := decodeRep[attach.CreateCQRep](t, p)
			r.Entries--
			encodeRep(p, &r)
		}},
		{"qp", attach.OpCreateQP, func(p []byte) { // send entries too small for two SGEs
			r := decodeRep[attach.CreateQPRep](t, p)
			r.SQEntrySize = 64
			encodeRep(p, &r)
		}},
		{"qplen", attach.OpCreateQP, func(p []byte) { // past the memfd's end
			r := decodeRep[attach.CreateQPRep](t, p)
			r.MemLen += 1 << 20
			encodeRep(p, &r)
		}},
		{"srq", attach.OpCreateSRQ, func(p []byte) { // entries past the mapping
			r := decodeRep[attach.CreateSRQRep](t, p)
			r.Entries *= 4
			encodeRep(p, &r)
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			proxy := &testDaemon{attach: manglingProxy(t, a.attach, func(h attach.Header, p []byte) {
				if h.Op == c.op && h.Status == 0 {
					c.mangle(p)
				}
			})}
			prog := xrnicExec(t, &p.A, proxy, lib, bin, c.what)
			if err := prog.wait(30 * time.Second); err != nil || !strings.Contains(prog.out.String(), "ok") {
				t.Fatalf("badlayout %s: %v\n%s", c.what, err, prog.out.String())
			}
		})
	}
}

func decodeRep[T any](t *testing.T, p []byte) T {
	var r T
	if err := attach.DecodePayload(p, &r); err != nil {
		t.Error(err)
	}
	return r
}

func encodeRep(p []byte, r any) {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, r)
	copy(p, b.Bytes())
}

// manglingProxy listens on a socket of its own and passes each connection's
// messages, with their descriptors, to and from the daemon at daemon;
// mangle may change the payload of a reply in place. It stops at the test's
// end.
func manglingProxy(t *testing.T, daemon string, mangle func(attach.Header, []byte)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "proxy.attach")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []*net.UnixConn
	)
	keep := func(c *net.UnixConn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			keep(c)
			d, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: daemon, Net: "unixpacket"})
			if err != nil {
				c.Close()
				continue
			}
			keep(d)
			wg.Add(2)
			go func() { defer wg.Done(); passMessages(c, d, nil) }()
			go func() { defer wg.Done(); passMessages(d, c, mangle) }()
		}
	}()
	return path
}

// passMessages copies messages and their descriptors from one side to the
// other until either closes, then closes both.
func passMessages(from, to *net.UnixConn, mangle func(attach.Header, []byte)) {
	defer from.Close()
	defer to.Close()
	buf, oob := make([]byte, attach.MaxMessage), make([]byte, attach.OOBSpace)
	for {
		msg, fds, err := attach.Recv(from, buf, oob)
		if err != nil {
			return
		}
		if h, p, err := attach.DecodeHeader(msg); err == nil && mangle != nil {
			mangle(h, p)
		}
		err = attach.Send(to, msg, fds...)
		attach.CloseFDs(fds)
		if err != nil {
			return
		}
	}
}
