package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/testenv"
	"golang.org/x/sys/unix"
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
		{"qpoverlap", attach.OpCreateQP, func(p []byte) { // the receive ring over the send ring
			r := decodeRep[attach.CreateQPRep](t, p)
			r.RQOff = r.SQOff
			encodeRep(p, &r)
		}},
		{"srq", attach.OpCreateSRQ, func(p []byte) { // entries past the mapping
			r := decodeRep[attach.CreateSRQRep](t, p)
			r.Entries *= 4
			encodeRep(p, &r)
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			proxy := &testDaemon{attach: manglingProxy(t, a.attach, func(h attach.Header, p []byte, fds []int) []int {
				if h.Op == c.op && h.Status == 0 {
					c.mangle(p)
				}
				return fds
			})}
			prog := xrnicExec(t, &p.A, proxy, lib, bin, c.what)
			if err := prog.wait(30 * time.Second); err != nil || !strings.Contains(prog.out.String(), "ok") {
				t.Fatalf("badlayout %s: %v\n%s", c.what, err, prog.out.String())
			}
		})
	}
	// A memfd that could shrink under the mapping (no F_SEAL_SHRINK, which the
	// daemon's carry): the QP's rings come in an unsealed copy of its size.
	t.Run("unsealed", func(t *testing.T) {
		proxy := &testDaemon{attach: manglingProxy(t, a.attach, func(h attach.Header, p []byte, fds []int) []int {
			if h.Op != attach.OpCreateQP || h.Status != 0 || len(fds) != 1 {
				return fds
			}
			var st unix.Stat_t
			fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
			if err == nil && unix.Fstat(fds[0], &st) == nil && unix.Ftruncate(fd, st.Size) == nil {
				return []int{fd} // the proxy closes it once sent
			}
			t.Errorf("an unsealed memfd: %v", err)
			return fds
		})}
		prog := xrnicExec(t, &p.A, proxy, lib, bin, "qp")
		if err := prog.wait(30 * time.Second); err != nil || !strings.Contains(prog.out.String(), "ok") {
			t.Fatalf("badlayout with an unsealed memfd: %v\n%s", err, prog.out.String())
		}
	})
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

// mangler may change a reply's payload in place and returns the descriptors
// to pass on with it (fds, or others of its own, which are closed once sent).
type mangler func(h attach.Header, payload []byte, fds []int) []int

// manglingProxy listens on a socket of its own and passes each connection's
// messages, with their descriptors, to and from the daemon at daemon;
// mangle sees each reply first. It stops at the test's end.
func manglingProxy(t *testing.T, daemon string, mangle mangler) string {
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
func passMessages(from, to *net.UnixConn, mangle mangler) {
	defer from.Close()
	defer to.Close()
	buf, oob := make([]byte, attach.MaxMessage), make([]byte, attach.OOBSpace)
	for {
		msg, fds, err := attach.Recv(from, buf, oob)
		if err != nil {
			return
		}
		out := fds
		if h, p, err := attach.DecodeHeader(msg); err == nil && mangle != nil {
			out = mangle(h, p, fds)
		}
		err = attach.Send(to, msg, out...)
		attach.CloseFDs(fds)
		if !slices.Equal(out, fds) {
			attach.CloseFDs(out)
		}
		if err != nil {
			return
		}
	}
}
