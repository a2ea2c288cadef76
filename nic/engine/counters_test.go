package engine

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/link"
)

// TestEngineCounters: a few WRITEs over the memory link move the engine loop's
// counters (passes, ReadBatch and WriteBatch batches and frames, idle waits),
// which stay apart from the rxe-named ones and agree with them.
func TestEngineCounters(t *testing.T) {
	p, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{})
	const writes, size = 4, 4096 // 4 packets each at MTU 1024
	for i := range writes {
		send(t, a, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{a.mr.SGE(uint64(i)*size, size)}, RemoteAddr: b.mr.Addr() + uint64(i)*size, RKey: b.mr.RKey()})
	}
	pollN(t, a.cq, writes, 5*time.Second)
	p.a.Sync().Wait()
	p.b.Sync().Wait()
	// An idle engine yields through idleSpins empty passes before it sleeps,
	// so its first wait can come after the WRITEs complete.
	waitFor(t, "A to sleep", asleep(p.a.sh[0], 0))

	ea, eb := p.a.EngineCounters(), p.b.EngineCounters()
	ca, cb := p.a.Counters(), p.b.Counters()
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"A loops", ea[EngLoops] > 0},
		{"A WriteBatch calls", ea[EngTxBatches] > 0},
		{"A frames written = sent_pkts", ea[EngTxFrames] == ca[CntSentPkts] && ea[EngTxFrames] >= writes*size/1024},
		{"B link reads", eb[EngRxPolls] >= eb[EngRxBatches] && eb[EngRxBatches] > 0},
		{"B frames read", eb[EngRxFrames] >= eb[EngRxBatches] && eb[EngRxFrames] >= cb[CntRcvdPkts] && cb[CntRcvdPkts] >= writes*size/1024},
		{"B ACKs written", eb[EngTxBatches] > 0 && eb[EngTxFrames] > 0},
		{"no timer fired", ea[EngTimersFired] == 0 && eb[EngTimersFired] == 0},
	} {
		if !c.ok {
			t.Errorf("%s: A %v, B %v", c.name, ea.Map(), eb.Map())
		}
	}
	if m := ea.Map(); len(m) != int(NumEngineCounters) || m["engine_loops"] != ea[EngLoops] {
		t.Errorf("Map: %v", m)
	}
	if s := EngineCounter(NumEngineCounters).String(); s != "engine_counter(?)" {
		t.Errorf("out of range: %q", s)
	}
	for i := range NumEngineCounters {
		if _, rxe := ca.Map()[i.String()]; rxe {
			t.Errorf("engine counter %s clashes with an rxe counter", i)
		}
	}
}

// TestEngineCountersTimers: a lost WRITE fires the retransmit timer, which the
// loop counts.
func TestEngineCountersTimers(t *testing.T) {
	clk := clock.NewManual(time.Unix(6000, 0))
	p, a, b := rcPair(t, pairOpts{clock: clk, mem: link.MemoryOptions{AtoB: link.Faults{Drop: 1}}}, nodeOpts{}, connOpts{timeout: 12})
	send(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitFor(t, "the WRITE to be sent", func() bool { return p.a.EngineCounters()[EngTxFrames] > 0 })
	clk.Advance(ackTimeout(12) + time.Millisecond)
	p.a.Sync().Wait()
	if n := p.a.EngineCounters()[EngTimersFired]; n == 0 {
		t.Errorf("engine_timers_fired %d after the ACK timeout, want > 0 (retransmitted %d)", n, p.a.Counters()[CntRetransmitted])
	}
}
