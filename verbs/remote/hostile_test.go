package remote

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/verbs"
)

// rawConn is a hostile client: it writes what it likes on the socket.
func rawConn(t *testing.T, sock string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func hello(t *testing.T, c *net.UnixConn) {
	t.Helper()
	msg, _ := attach.Encode(nil, attach.OpHello, 1, 0, &attach.HelloReq{Version: attach.Version})
	if err := attach.Send(c, msg); err != nil {
		t.Fatal(err)
	}
	_, fds, err := attach.Recv(c, make([]byte, attach.MaxMessage), make([]byte, attach.OOBSpace))
	if err != nil {
		t.Fatal(err)
	}
	attach.CloseFDs(fds)
}

// closed reports whether the daemon closed c (a read sees EOF).
func closedByDaemon(c *net.UnixConn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err := attach.Recv(c, make([]byte, attach.MaxMessage), make([]byte, attach.OOBSpace))
	return errors.Is(err, net.ErrClosed)
}

// Malformed control messages end the sender's session and nothing else: the
// daemon neither panics nor stalls another process, and frees what the
// hostile one made.
func TestHostileControl(t *testing.T) {
	r := newRig(t, server.Config{})
	good := r.dial(t)
	hdr := func(op attach.Op, seq, n uint32) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(op))
		b = binary.LittleEndian.AppendUint32(b, seq)
		b = binary.LittleEndian.AppendUint32(b, 0)
		return binary.LittleEndian.AppendUint32(b, n)
	}
	memfd := func() int {
		fd, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	cases := []struct {
		name  string
		hello bool
		msg   []byte
		fds   int
	}{
		{"empty", false, []byte{}, 0},
		{"short header", false, []byte{1, 0, 0}, 0},
		{"before HELLO", false, hdr(attach.OpAllocPD, 1, 0), 0},
		{"bad version", false, append(hdr(attach.OpHello, 1, 8), 9, 0, 0, 0, 0, 0, 0, 0), 0},
		{"version before the oldest", false, append(hdr(attach.OpHello, 1, 8), attach.MinVersion-1, 0, 0, 0, 0, 0, 0, 0), 0},
		{"version after the newest", false, append(hdr(attach.OpHello, 1, 8), attach.Version+1, 0, 0, 0, 0, 0, 0, 0), 0},
		{"a second HELLO", true, append(hdr(attach.OpHello, 2, 8), attach.Version, 0, 0, 0, 0, 0, 0, 0), 0},
		{"length lies", true, append(hdr(attach.OpQueryGID, 2, 100), 0, 0, 0, 0, 0, 0, 0, 0), 0},
		{"payload too short", true, append(hdr(attach.OpQueryGID, 2, 4), 0, 0, 0, 0), 0},
		{"payload where none belongs", true, append(hdr(attach.OpAllocPD, 2, 4), 0, 0, 0, 0), 0},
		{"unknown op", true, hdr(99, 2, 0), 0},
		{"descriptor where none belongs", true, hdr(attach.OpAllocPD, 2, 0), 1},
		{"REG_MR without its memfd", true, append(hdr(attach.OpRegMR, 2, 32), make([]byte, 32)...), 0},
		{"too many descriptors", true, hdr(attach.OpAllocPD, 2, 0), 5},
		{"oversized", true, append(hdr(attach.OpAllocPD, 2, 4000), make([]byte, 4000)...), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := rawConn(t, r.sock)
			if c.hello {
				hello(t, conn)
				// Something for the daemon to free.
				msg, _ := attach.Encode(nil, attach.OpAllocPD, 9, 0, nil)
				attach.Send(conn, msg)
				attach.Recv(conn, make([]byte, attach.MaxMessage), make([]byte, attach.OOBSpace))
			}
			var fds []int
			for range c.fds {
				fds = append(fds, memfd())
			}
			err := attach.Send(conn, c.msg, fds...)
			attach.CloseFDs(fds)
			if err != nil && c.name != "oversized" {
				t.Fatal(err)
			}
			if !closedByDaemon(conn) {
				t.Fatal("the daemon kept the session")
			}
			if _, err := good.AllocPD(); err != nil {
				t.Fatalf("another process after it: %v", err)
			}
		})
	}
	waitSessions(t, r.srv, 1)
}

func waitSessions(t *testing.T, s *server.Server, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); len(s.Sessions()) != n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d sessions, want %d", len(s.Sessions()), n)
		}
	}
}

// Requests that are well formed but wrong get their errno and the session
// goes on: handles that name nothing, an unsealed or short memfd, limits.
func TestHostileRequests(t *testing.T) {
	r := newRig(t, server.Config{MaxObjects: 8})
	d := r.dial(t)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	call := func(op attach.Op, req any, fds ...int) error {
		_, err := d.call(op, req, nil, fds...)
		return err
	}
	if err := call(attach.OpDestroy, &attach.DestroyReq{Kind: attach.KindQP, Handle: pd.h}); !errors.Is(err, verbs.ErrNotFound) {
		t.Errorf("a PD's handle destroyed as a QP: %v", err)
	}
	if err := call(attach.OpDestroy, &attach.DestroyReq{Kind: 77, Handle: 12345}); !errors.Is(err, verbs.ErrNotFound) {
		t.Errorf("an unknown kind: %v", err)
	}
	unsealed, _ := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	unix.Ftruncate(unsealed, 1<<16)
	defer unix.Close(unsealed)
	if err := call(attach.OpRegMR, &attach.RegMRReq{Addr: 4096, Length: 4096, PD: pd.h, Access: 1}, unsealed); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("an unsealed memfd: %v", err)
	}
	buf, _ := MapBuffer(4096)
	defer UnmapBuffer(buf)
	rg, off, _ := bufferOf(buf)
	if err := call(attach.OpRegMR, &attach.RegMRReq{Addr: 4096, Length: 8192, FileOff: off, PD: pd.h, Access: 1}, rg.FD()); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a region past its memfd's end: %v", err)
	}
	if _, err := d.CreateCQ(1<<30, nil); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a CQ of 2^30 entries: %v", err)
	}
	if _, err := pd.CreateQP(QPInitAttr{Type: verbs.RC, SendCQ: &CQ{h: 999}, RecvCQ: &CQ{h: 999}}); !errors.Is(err, verbs.ErrInvalid) { // EINVAL, as uverbs
		t.Errorf("a QP on CQs that do not exist: %v", err)
	}
	var made int
	for ; made < 20; made++ {
		if _, err := d.AllocPD(); err != nil {
			if !errors.Is(err, verbs.ErrLimit) {
				t.Errorf("past the object limit: %v", err)
			}
			break
		}
	}
	if made != 7 {
		t.Errorf("%d more PDs under a limit of 8 objects, want 7", made)
	}
	if _, err := d.Query(); err != nil {
		t.Errorf("the session after its errors: %v", err)
	}
}

// A ring whose index the process corrupted puts that QP in the error state;
// the daemon reads nothing outside the ring, and the process's other QPs and
// other processes go on.
func TestHostileRing(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	bad := newRemoteEnd(t, d, verbs.RC)
	ok := newRemoteEnd(t, d, verbs.RC)
	le := newLocalEnd(t, r.b, verbs.RC)
	le2 := newLocalEnd(t, r.b, verbs.RC)
	r.connect(t, bad, le)
	r.connect(t, ok, le2)
	// prod at 1000 in a ring of 32: the daemon would read 1000 entries.
	binary.LittleEndian.PutUint32(bad.mem()[0:], 1000)
	d.ring()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a, err := bad.qp.Query()
		if err != nil {
			t.Fatal(err)
		}
		if a.State == verbs.QPSErr {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the QP whose ring is corrupted is %v", a.State)
		}
	}
	if _, err := ok.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{ok.mr.SGE(0, 64)}, RemoteAddr: le2.mr.Addr(), RKey: le2.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollRemote(t, ok.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("the other QP: %+v", wc)
	}
}

func (e *remoteEnd) mem() []byte { return e.qp.mem.Bytes() }

// A process that never polls its CQ overflows only its own CQ (an
// IBV_EVENT_CQ_ERR to it); another process's traffic goes on.
func TestHostileNeverPolls(t *testing.T) {
	r := newRig(t, server.Config{})
	lazy, busy := r.dial(t), r.dial(t)
	le := newLocalEnd(t, r.b, verbs.RC)
	e := newRemoteEnd(t, lazy, verbs.RC)
	r.connect(t, e, le)
	// 256-entry ring, device CQ of 256: 1000 signaled WRITEs overflow both.
	overflowed := false
	for i := 0; i < 1000 && !overflowed; {
		n, err := e.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite,
			Flags: verbs.SendSignaled, SGL: []verbs.SGE{e.mr.SGE(0, 8)}, RemoteAddr: le.mr.Addr(), RKey: le.mr.RKey()}})
		if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
			t.Fatal(err)
		}
		i += n
		if n == 0 {
			overflowed = hasEvent(lazy, verbs.EventCQErr)
			time.Sleep(time.Millisecond)
		}
	}
	for end := time.Now().Add(10 * time.Second); !overflowed && !hasEvent(lazy, verbs.EventCQErr); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no CQ error event for the CQ nobody polls")
		}
	}
	if hasEvent(busy, verbs.EventCQErr) {
		t.Error("the CQ error event reached another process")
	}
	le2 := newLocalEnd(t, r.b, verbs.RC)
	e2 := newRemoteEnd(t, busy, verbs.RC)
	r.connect(t, e2, le2)
	for i := range 100 {
		if _, err := e2.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite,
			Flags: verbs.SendSignaled, SGL: []verbs.SGE{e2.mr.SGE(0, 8)}, RemoteAddr: le2.mr.Addr(), RKey: le2.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollRemote(t, e2.cq, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("the other process: %+v", wc)
		}
	}
}

// hasEvent looks for typ among the events waiting, as a C program does with
// async_fd: poll it, then read what waits. It makes no call.
func hasEvent(d *Device, typ verbs.EventType) bool {
	fds := []unix.PollFd{{Fd: int32(d.AsyncFD()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); n != 1 || err != nil {
		return false
	}
	for _, ev := range d.Events() {
		if ev.Type == uint32(typ) {
			return true
		}
	}
	return false
}

// A process that registers memory and unmaps it: the daemon's mapping is its
// own, so the peer's WRITE into the region lands there and nothing faults.
func TestHostileUnmapRegistered(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	e := newRemoteEnd(t, d, verbs.RC)
	le := newLocalEnd(t, r.b, verbs.RC)
	r.connect(t, e, le)
	if err := UnmapBuffer(e.buf); err != nil {
		t.Fatal(err)
	}
	if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{le.mr.SGE(0, 4096)}, RemoteAddr: e.mr.Addr(), RKey: e.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollLocal(t, le.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE into a region its process unmapped: %+v", wc)
	}
	if err := e.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
}

// When an attached process is killed mid-transfer, the daemon frees
// everything it held, and its peer's QP sees the error the spec names: its
// next request goes unanswered and completes with IBV_WC_RETRY_EXC_ERR.
func TestKilledMidTransfer(t *testing.T) {
	r := newRig(t, server.Config{})
	before, err := r.a.Resources()
	if err != nil {
		t.Fatal(err)
	}
	le := newLocalEnd(t, r.b, verbs.RC)
	cmd := startChild(t, r, le, 0, 0)
	// Mid-transfer: the child's WRITEs with immediate are landing (each
	// consumes a receive).
	for i := range 32 {
		if _, err := le.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(1000 + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	pollLocal(t, le.cq, 3)
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.wait()
	waitSessions(t, r.srv, 0)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, _ := r.a.Resources()
		if len(res.QPs) == len(before.QPs) && len(res.CQs) == len(before.CQs) && len(res.MRs) == len(before.MRs) && res.PDs == before.PDs {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after the kill: %d QPs, %d CQs, %d MRs, %d PDs", len(res.QPs), len(res.CQs), len(res.MRs), res.PDs)
		}
	}
	if _, err := le.qp.PostSend([]verbs.SendWR{{WRID: 99, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{le.mr.SGE(0, 8)}, RemoteAddr: 4096, RKey: 1}}); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; {
		wc := pollLocal(t, le.cq, 1)[0]
		if wc.WRID == 99 {
			if wc.Status != verbs.WCRetryExcErr {
				t.Fatalf("the peer's WRITE to the dead QP: %v, want %v", wc.Status, verbs.WCRetryExcErr)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatal("no completion for the WRITE to the dead QP")
		}
	}
}

// child is an attached process of the test binary's: TestChild.
type child struct {
	*exec.Cmd
	out    *bytes.Buffer // what it printed after its QPN
	copied chan struct{} // closed when out has all of it
}

// wait waits for the child to exit, and for its output (exec.Cmd.Wait must
// come after the pipe's reads).
func (c *child) wait() error {
	<-c.copied
	return c.Wait()
}

// startChild runs TestChild as another process attached to r's server, with
// an RC QP towards le's, which it connects; it WRITEs with immediate count
// times (0: until killed), tagging its data with id. le's QP is connected
// back to the child's when startChild returns.
func startChild(t *testing.T, r *rig, le *localEnd, id, count int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
	cmd.Env = append(os.Environ(), "XRNIC_REMOTE_CHILD="+r.sock,
		"XRNIC_CHILD_PEER="+strconv.Itoa(int(le.qp.QPN()))+","+strconv.Itoa(int(gidIndex(t, r.a, r.gidA)))+","+
			strconv.FormatUint(le.mr.Addr(), 10)+","+strconv.Itoa(int(le.mr.RKey()))+","+strconv.Itoa(id)+","+
			strconv.Itoa(count),
		"XRNIC_CHILD_GID="+r.gidB.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed { // a failure before startChild returned
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	var qpn uint32
	buf := make([]byte, 4096)
	var got []byte
	for qpn == 0 {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("the child: %v (%q)", err, got)
		}
		got = append(got, buf[:n]...)
		for _, line := range splitLines(string(got)) {
			if v, ok := cutPrefix(line, "child qpn "); ok {
				x, _ := strconv.Atoi(v)
				qpn = uint32(x)
			}
		}
	}
	for _, s := range rcAttrs(gidIndex(t, r.b, r.gidB), r.gidA, le.qp.QPN(), qpn) {
		a := s.a
		if err := le.qp.ModifySync(&a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	c := &child{Cmd: cmd, out: new(bytes.Buffer), copied: make(chan struct{})}
	go func() {
		defer close(c.copied)
		io.Copy(c.out, out)
	}()
	killed = true
	t.Cleanup(func() {
		cmd.Process.Kill()
		c.wait() // "already called" once the test waited
	})
	return c
}

// childSlot is where in the peer's buffer the child's i-th WRITE lands, and
// childByte what it holds there.
func childSlot(i int) uint64   { return uint64(i%8) * 4096 }
func childByte(id, i int) byte { return byte(id*31 + i) }

// TestChild is the child of startChild: it attaches, connects to the peer in
// its environment and WRITEs with immediate (4 KiB of its tag, the immediate
// its sequence number), a few at a time, until its count or until killed.
func TestChild(t *testing.T) {
	sock := os.Getenv("XRNIC_REMOTE_CHILD")
	if sock == "" {
		t.Skip("run by startChild")
	}
	var peer [6]uint64
	for i, f := range splitFields(os.Getenv("XRNIC_CHILD_PEER"), ',') {
		peer[i], _ = strconv.ParseUint(f, 10, 64)
	}
	id, count := int(peer[4]), int(peer[5])
	gid, err := verbs.ParseGID(os.Getenv("XRNIC_CHILD_GID"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	e := newRemoteEnd(t, d, verbs.RC)
	for _, s := range rcAttrs(uint8(peer[1]), gid, e.qp.QPN(), uint32(peer[0])) {
		if err := e.qp.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	os.Stdout.WriteString("child qpn " + strconv.Itoa(int(e.qp.QPN())) + "\n")
	wcs := make([]verbs.WC, 16)
	const window = 8 // each WRITE reads its own slot of the child's buffer
	posted, done := 0, 0
	for count == 0 || done < count {
		if posted-done < window && (count == 0 || posted < count) {
			i := posted + 1
			slot := e.buf[childSlot(i) : childSlot(i)+4096]
			for k := range slot {
				slot[k] = childByte(id, i)
			}
			n, err := e.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm,
				Flags: verbs.SendSignaled, ImmData: uint32(i), SGL: []verbs.SGE{e.mr.SGE(childSlot(i), 4096)},
				RemoteAddr: peer[2] + childSlot(i), RKey: uint32(peer[3])}})
			if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
				t.Fatal(err)
			}
			posted += n
		}
		n, err := e.cq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("WRITE %d: %v", wc.WRID, wc.Status)
			}
		}
		done += n
		if n == 0 && count == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	os.Stdout.WriteString("child done\n")
}

// Two processes attached to one device at once, each moving data to a peer
// of its own on the veth pair: every WRITE lands, in order, with its data, and
// the two interleave on the one engine.
func TestTwoProcesses(t *testing.T) {
	r := newVethRig(t, server.Config{})
	const count = 600
	var peers [2]*localEnd
	var kids [2]*child
	for id := range peers {
		peers[id] = newLocalEnd(t, r.b, verbs.RC)
		kids[id] = startChild(t, r, peers[id], id, count)
		// Until these are posted the child's WRITEs meet RNR NAKs and retry.
		for k := range 64 {
			if _, err := peers[id].qp.PostRecv([]verbs.RecvWR{{WRID: uint64(k)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(r.srv.Sessions()); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	next := [2]int{1, 1}
	wcs := make([]verbs.WC, 16)
	for end := time.Now().Add(60 * time.Second); next[0] <= count || next[1] <= count; {
		if time.Now().After(end) {
			t.Fatalf("received %d and %d of %d", next[0]-1, next[1]-1, count)
		}
		idle := true
		for id, p := range peers {
			n := p.cq.Poll(wcs)
			for _, wc := range wcs[:n] {
				idle = false
				if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm || int(wc.ImmData) != next[id] {
					t.Fatalf("process %d: %+v, want immediate %d", id, wc, next[id])
				}
				next[id]++
				if _, err := p.qp.PostRecv([]verbs.RecvWR{{WRID: wc.WRID}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if idle {
			time.Sleep(100 * time.Microsecond)
		}
	}
	for id, k := range kids {
		if err := k.wait(); err != nil || !strings.Contains(k.out.String(), "child done") {
			t.Fatalf("process %d: %v\n%s", id, err, k.out)
		}
		// The last WRITE into each slot is the one the buffer holds.
		for i := count - 7; i <= count; i++ {
			got := peers[id].buf[childSlot(i) : childSlot(i)+4096]
			if bytes.Count(got, []byte{childByte(id, i)}) != 4096 {
				t.Errorf("process %d, WRITE %d: slot holds %x...", id, i, got[:8])
			}
		}
	}
	waitSessions(t, r.srv, 0)
}

func splitLines(s string) []string { return splitFields(s, '\n') }

func splitFields(s string, sep byte) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != sep {
			i++
		}
		out = append(out, s[:i])
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

// Past MaxSessions the daemon closes a new connection at once; a place frees
// when a process detaches.
func TestHostileTooManySessions(t *testing.T) {
	r := newRig(t, server.Config{MaxSessions: 2})
	a := r.dial(t)
	r.dial(t)
	if d, err := Dial(r.sock); err == nil {
		d.Close()
		t.Fatal("a third session under a limit of 2")
	}
	a.Close()
	waitSessions(t, r.srv, 1)
	r.dial(t)
}

// A completion channel a CQ uses cannot be destroyed (EBUSY, as
// ibv_destroy_comp_channel): closed, its descriptor number would go to the next
// thing the daemon opens, maybe another process's CQ ring, and the CQ's next
// notification would write 8 bytes there.
func TestHostileDestroyChannelInUse(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	ch, err := d.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("destroying a channel with a CQ on it: %v, want ErrBusy", err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Destroy(); err != nil {
		t.Fatalf("destroying the channel after its CQ: %v", err)
	}
}

// A connection that never sends HELLO loses its session slot after
// HelloTimeout: silent connections cannot keep every process from attaching.
func TestHostileSilentConnections(t *testing.T) {
	r := newRig(t, server.Config{MaxSessions: 4, HelloTimeout: 200 * time.Millisecond})
	var conns []*net.UnixConn
	for range 4 {
		conns = append(conns, rawConn(t, r.sock)) // connects, sends nothing
	}
	for _, c := range conns {
		if !closedByDaemon(c) {
			t.Fatal("the daemon kept a connection that sent nothing")
		}
	}
	waitSessions(t, r.srv, 0)
	r.dial(t)
}

// A client that posts malformed WRs and never polls: each refusal's completion
// waits in the daemon only while the CQ could hold it; past that the CQ has
// overrun and the rest are lost, so the daemon's memory stays bounded.
func TestHostileRefusedNeverPolled(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	e := newRemoteEnd(t, d, verbs.RC)
	const total = 2000 // the CQ holds 256
	for posted := 0; posted < total; {
		free, err := e.qp.sq.Free()
		if err != nil {
			t.Fatal(err)
		}
		free = min(free, total-posted)
		for k := range free {
			w, _ := e.qp.sq.Reserve(k)
			clear(w[:64])
			binary.LittleEndian.PutUint64(w[0:], uint64(posted+k))
			binary.LittleEndian.PutUint32(w[20:], 1000) // num_sge past the QP's cap
		}
		e.qp.sq.Commit(free)
		posted += free
		d.ring()
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	wcs := make([]verbs.WC, 64)
	got := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		n, err := e.cq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		got += n
		if n == 0 {
			d.ring() // the pump moves what waits as the ring empties
			time.Sleep(5 * time.Millisecond)
		}
	}
	if got == 0 || got > 2*256 {
		t.Fatalf("%d completions of %d refused WRs on a CQ of 256 never polled: want some, at most the CQ's ring and what waited for it", got, total)
	}
}

// The objects all sessions together hold are bounded (MaxAllObjects): each may
// hold a mapping and a descriptor of the daemon's, and 64 sessions of 4,096
// objects were past vm.max_map_count and the open-file limit, where a failed
// mmap of the Go runtime's ends the daemon. One process filling the bound
// holds the others off until it gives objects back; it cannot go past it.
func TestHostileAllObjectsBound(t *testing.T) {
	r := newRig(t, server.Config{MaxAllObjects: 12})
	hog, other := r.dial(t), r.dial(t)
	var pds []*PD
	for range 20 {
		pd, err := hog.AllocPD()
		if err != nil {
			if !errors.Is(err, verbs.ErrLimit) {
				t.Fatalf("past the bound: %v, want ErrLimit", err)
			}
			break
		}
		pds = append(pds, pd)
	}
	if len(pds) == 0 || len(pds) > 12 {
		t.Fatalf("one process made %d PDs under a bound of 12 for all", len(pds))
	}
	if _, err := other.AllocPD(); !errors.Is(err, verbs.ErrLimit) {
		t.Fatalf("another process's PD with the bound held: %v, want ErrLimit", err)
	}
	if err := pds[0].Dealloc(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.AllocPD(); err != nil {
		t.Fatalf("after the first gave one back: %v", err)
	}
	if _, err := hog.AllocPD(); !errors.Is(err, verbs.ErrLimit) {
		t.Fatalf("the bound held again: %v, want ErrLimit", err)
	}
	hog.Close() // its session's teardown gives all back
	for i := range len(pds) - 1 {
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			_, err := other.AllocPD()
			if err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("PD %d after the first process left: %v", i, err)
			}
		}
	}
}

// The memory one session may register is bounded (MaxMapped): the daemon maps
// each region, and a process that registered terabytes of sparse memory took
// the daemon's address space from everyone else.
func TestHostileRegisteredMemoryBound(t *testing.T) {
	r := newRig(t, server.Config{MaxMapped: 1 << 20})
	d := r.dial(t)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	var mrs []*MR
	for range 2 {
		buf, err := MapBuffer(512 << 10)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { UnmapBuffer(buf) })
		m, err := pd.RegMR(buf, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatalf("region %d of 512 KiB under a bound of 1 MiB: %v", len(mrs)+1, err)
		}
		mrs = append(mrs, m)
	}
	buf, err := MapBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { UnmapBuffer(buf) })
	if _, err := pd.RegMR(buf, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrLimit) {
		t.Fatalf("a page past the bound: %v, want ErrLimit", err)
	}
	if err := mrs[0].Dereg(); err != nil {
		t.Fatal(err)
	}
	m, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatalf("after a deregistration gave room back: %v", err)
	}
	m.Dereg()
}

// A version 5 client is served: its HELLO's reply says 5, and QUERY_PORT's
// reply, whose active_width and active_speed were pad in 5, is version 6's.
// The rig's memory links report no speed: 1X SDR, as rxe's default.
func TestHelloVersion5(t *testing.T) {
	r := newRig(t, server.Config{})
	c := rawConn(t, r.sock)
	call := func(op attach.Op, seq uint32, req, rep any) []int {
		t.Helper()
		msg, err := attach.Encode(nil, op, seq, 0, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := attach.Send(c, msg); err != nil {
			t.Fatal(err)
		}
		b, fds, err := attach.Recv(c, make([]byte, attach.MaxMessage), make([]byte, attach.OOBSpace))
		if err != nil {
			t.Fatal(err)
		}
		h, p, err := attach.DecodeHeader(b)
		if err == nil && h.Status != 0 {
			err = fmt.Errorf("status %d", h.Status)
		}
		if err == nil {
			err = attach.DecodePayload(p, rep)
		}
		if err != nil {
			attach.CloseFDs(fds)
			t.Fatalf("%v: %v", op, err)
		}
		return fds
	}
	var hr attach.HelloRep
	attach.CloseFDs(call(attach.OpHello, 1, &attach.HelloReq{Version: 5}, &hr))
	if hr.Version != 5 {
		t.Errorf("HELLO of version 5 answered version %d", hr.Version)
	}
	var pr attach.PortRep
	call(attach.OpQueryPort, 2, nil, &pr)
	if pr.State != uint32(verbs.PortActive) || pr.ActiveWidth != 1 || pr.ActiveSpeed != 1 {
		t.Errorf("QUERY_PORT: %+v, want active, 1X SDR", pr)
	}
}
