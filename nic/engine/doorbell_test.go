package engine

import (
	"runtime"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
)

// TestDoorbellWhileAwake: ring writes no eventfd while the engine goroutine
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
