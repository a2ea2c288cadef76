package engine

import (
	"runtime"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
)

// TestDoorbellWhileAwake: ring writes no wake-up while the engine goroutine
// is awake, so the engine must find a doorbell rung during its pass before
// it sleeps (routineEngine looks at dbHead after it sets sleeping). Each WR
// here is posted the moment the previous one completes, as the engine ends
// the pass that completed it: a doorbell lost there leaves the WR unsent and
// the engine asleep with no timer (nothing is in flight), and the deadline
// fails the test.
func TestDoorbellWhileAwake(t *testing.T) {
	_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	n := 20000
	if testing.Short() {
		n = 2000
	}
	wc := make([]cq.WC, 1)
	for i := range n {
		send(t, a, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled | SendInline,
			SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		deadline := time.Now().Add(2 * time.Second)
		for a.cq.Poll(wc) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("WR %d of %d: no completion in 2 s (a doorbell lost while the engine was awake)", i, n)
			}
			runtime.Gosched()
		}
		if wc[0].Status != cq.Success || wc[0].WRID != uint64(i) {
			t.Fatalf("WR %d: %+v", i, wc[0])
		}
	}
}

// TestEngineSpinsBeforeSleeping: after a busy pass the engine goroutine
// yields through idleSpins empty passes before it sleeps, so that work coming
// meanwhile needs no wake-up; and it does sleep once they are done, burning
// no CPU while nothing comes.
func TestEngineSpinsBeforeSleeping(t *testing.T) {
	p, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	sh := p.a.sh[0]
	waitFor(t, "A's engine asleep", asleep(sh, 0)) // not amid the spin that follows rcPair's setup
	before := p.a.EngineCounters()
	for i := range 10 {
		send(t, a, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled | SendInline,
			SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		pollN(t, a.cq, 1, 10*time.Second)
	}
	waitFor(t, "A's engine asleep", asleep(sh, before[EngIdleWaits]))
	after := p.a.EngineCounters()
	spins, sleeps := after[EngIdleSpins]-before[EngIdleSpins], after[EngIdleWaits]-before[EngIdleWaits]
	t.Logf("%d empty passes spun, %d sleeps", spins, sleeps)
	if sleeps == 0 || spins == 0 || spins < idleSpins*sleeps {
		t.Fatalf("%d spins before %d sleeps; want at least %d before each", spins, sleeps, idleSpins)
	}
	// Asleep, it runs no pass until something comes. The memory link's
	// wake-up channel may still hold a token from a frame the spin read
	// (Link.Wait allows spurious returns): that is one more spin at most.
	c0 := p.a.EngineCounters()
	time.Sleep(20 * time.Millisecond)
	c1 := p.a.EngineCounters()
	if n := c1[EngLoops] - c0[EngLoops]; n > idleSpins+1 || c1[EngIdleWaits]-c0[EngIdleWaits] > 1 || !sh.sleeping.Load() {
		t.Fatalf("an idle engine ran %d passes in 20 ms (asleep: %v): before %v, after %v", n, sh.sleeping.Load(), c0.Map(), c1.Map())
	}
}

// asleep reports whether sh's goroutine sleeps in a wait counted after the
// first waits ones (the loop counts a wait before it sets sleeping).
func asleep(sh *shard, waits uint64) func() bool {
	return func() bool { return sh.sleeping.Load() && sh.ecnt[EngIdleWaits].Load() > waits }
}
