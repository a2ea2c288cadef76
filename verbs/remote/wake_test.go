package remote

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
)

// wakeRig serves two devices on UDP links over lo, links whose engine has a
// wake-up pipe HELLO hands out (internal/wakeup), and attaches a victim
// process with an RC end.
func wakeRig(t *testing.T) (*rig, *remoteEnd) {
	pid := os.Getpid()
	addr := func(n byte) netip.Addr {
		return netip.AddrFrom4([4]byte{127, 96 + byte(pid>>16&7), byte(pid >> 8), n + byte(pid)&0xf0})
	}
	open := func(a netip.Addr) *verbs.Device {
		l, err := link.NewUDP(link.UDPOptions{Interface: "lo", Addrs: []netip.Addr{a}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := verbs.Open(verbs.Options{Link: l, GIDs: []verbs.GID{verbs.GIDFromAddr(a)},
			Engine: verbs.EngineConfig{Logf: func(string, ...any) {}}})
		if err != nil {
			l.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close(); l.Close() })
		return d
	}
	a4, b4 := addr(1), addr(2)
	r := serve(t, server.Config{}, open(a4), open(b4), verbs.GIDFromAddr(a4), verbs.GIDFromAddr(b4))
	return r, newRemoteEnd(t, r.dial(t), verbs.RC)
}

// victimServed checks that the victim's control operations, which the
// engine runs, complete while another process does what it is doing.
func victimServed(t *testing.T, ve *remoteEnd, doing string) {
	t.Helper()
	for i := range 3 {
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			q, err := ve.pd.CreateQP(QPInitAttr{Type: verbs.RC, SendCQ: ve.cq, RecvCQ: ve.cq,
				Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err == nil {
				init := verbs.QPAttr{}
				init.State, init.Port = verbs.QPSInit, 1
				err = q.Modify(&init, verbs.AttrState|verbs.AttrPort|verbs.AttrPKeyIndex|verbs.AttrAccessFlags)
			}
			errc <- err
		}()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d: CREATE_QP and MODIFY_QP in %v while another process %s", i, time.Since(start), doing)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: another process that %s stopped this one's control operations", i, doing)
		}
	}
}

// A process's doorbell is a write end of the engine's wake-up pipe, a
// description of its own. Reading it is refused, so it cannot take the
// engine's wake-ups; clearing O_NONBLOCK on it and flooding it blocks only
// itself. With the engine's eventfd as the doorbell (as before), a process
// reading it in a blocking loop took the wake-ups, and the engine's own read
// blocked: another process's CREATE_QP waited for ever.
func TestHostileStolenWakeups(t *testing.T) {
	r, ve := wakeRig(t)
	evil := r.dial(t)
	var b [8]byte
	if _, err := unix.Read(evil.bell, b[:]); !errors.Is(err, unix.EBADF) {
		t.Fatalf("a read of the doorbell: %v, want EBADF", err)
	}
	if err := unix.SetNonblock(evil.bell, false); err != nil {
		t.Fatal(err)
	}
	// Each attack alone: a flood also wakes the engine, which would hide the
	// stolen wake-ups.
	for _, attack := range []struct {
		doing string
		do    func()
	}{
		{"reads its blocking doorbell", func() { var b [8]byte; unix.Read(evil.bell, b[:]) }},
		{"floods its blocking doorbell", func() { one := [8]byte{1}; unix.Write(evil.bell, one[:]) }},
	} {
		var stop atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			for !stop.Load() {
				attack.do()
			}
		}()
		time.Sleep(50 * time.Millisecond)
		victimServed(t, ve, attack.doing)
		stop.Store(true)
		<-done
	}
}

// A completion channel's descriptor is the read end of a pipe whose write end
// the daemon holds alone. With an eventfd shared with the daemon, a process
// could clear its O_NONBLOCK and set its counter to the largest value: the
// engine goroutine's write of the next event then blocked for ever, and with
// it the device, for every process.
func TestHostileChannelCannotBlockEngine(t *testing.T) {
	r, ve := wakeRig(t)
	evil := r.dial(t)
	ee := newRemoteEnd(t, evil, verbs.RC)
	ch, err := evil.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := evil.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := ee.pd.CreateQP(QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []verbs.QPState{verbs.QPSInit, verbs.QPSErr} {
		a := verbs.QPAttr{}
		a.State, a.Port = s, 1
		mask := verbs.AttrState
		if s == verbs.QPSInit {
			mask |= verbs.AttrPort | verbs.AttrPKeyIndex | verbs.AttrAccessFlags
		}
		if err := qp.Modify(&a, mask); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.SetNonblock(ch.FD(), false); err != nil {
		t.Fatal(err)
	}
	var most [8]byte
	binary.LittleEndian.PutUint64(most[:], 1<<64-2) // an eventfd's largest count
	_, werr := unix.Write(ch.FD(), most[:])
	t.Logf("the process's write of its channel descriptor: %v", werr)
	for i := range 3 {
		cq.ReqNotify(false)
		if _, err := qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{ee.mr.SGE(0, 8)}}}); err != nil {
			t.Fatal(err)
		}
		var wc [1]verbs.WC
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			if n, err := cq.Poll(wc[:]); err != nil {
				t.Fatal(err)
			} else if n == 1 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("send %d: no flushed completion", i)
			}
		}
	}
	victimServed(t, ve, "blocks and fills its completion channel")
}
