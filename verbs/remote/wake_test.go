package remote

import (
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

// On a link with a wake-up eventfd (UDP, AF_XDP), HELLO hands each process a
// duplicate of the engine's own as its doorbell. A process that reads it takes
// wake-ups meant for the engine; the engine then still looks at the attached
// processes every pollerTick, so another process's control operations are
// slowed, not stopped. Before, they waited for ever.
func TestHostileStolenWakeups(t *testing.T) {
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
	victim := r.dial(t)
	ve := newRemoteEnd(t, victim, verbs.RC)
	evil := r.dial(t)
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [8]byte
		for !stop.Load() {
			unix.Read(evil.bell, b[:]) // the doorbell is the engine's eventfd: read it too
		}
	}()
	defer func() { stop.Store(true); <-done }()
	time.Sleep(50 * time.Millisecond)
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
			t.Logf("round %d: CREATE_QP and MODIFY_QP in %v while another process reads its doorbell", i, time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: another process's reads of its doorbell stopped this one's control operations", i)
		}
	}
}
