// Package spin is what a thread that spins waiting on xrnic does when a look
// finds nothing: every Every-th such look, it yields its CPU to the kernel.
//
// rxe's work runs in softirq, ahead of every thread; xrnic's engine is a
// thread. On a CPU where an application spins on its CQ (perftest's loops,
// ibv_rc_pingpong without -e), the fair scheduler (EEVDF) runs a woken
// engine thread at once only if it is eligible, whatever its nice value;
// otherwise it waits for the next tick, 4 ms at HZ 250. That wait was the 1-2
// ms 99th percentile of send_lat and write_lat on two cores (issue 20). A
// yield (sched_yield(2)) lets the scheduler pick again, and the engine runs.
// With nothing else runnable it returns at once. The same holds for a thread
// that spins on a full send queue, whose room the engine makes: send_bw 64
// KiB moved 520-800 MB/s without the yield and 1050-1080 with it.
//
// Only a run of empty looks counts: a look that finds something starts it
// again (Found), so a bandwidth loop that finds completions often yields
// rarely. Yielding those loops' CPU lets a sender go as fast as its engine
// can: that took 256 QPs past what their receiver's ring holds, and write_bw
// -q 256 -t 31 -D 14 ended in "transport retry counter exceeded" in 2 runs of
// 3, until the engine bounded what its QPs to one destination have in flight
// together (nic/engine/cwnd.go).
package spin

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Every is how many empty looks a spinning thread makes between yields: a
// few microseconds of bench's loops, so a woken engine waits that long rather
// than a tick. Measured on two cores (2026-11-27): 4, 8 and 32 gave send_lat
// and write_lat the same 99th percentile within the host's noise, about 3
// times typical, and the same bandwidth.
const Every = 8

// Counter counts a spinning thread's run of empty looks. Its zero value is
// ready; safe for concurrent use.
type Counter struct {
	n      atomic.Uint32 // empty looks since the last Found
	yields atomic.Uint64
}

// Idle notes one look that found nothing, and yields the CPU on every
// Every-th of a run.
func (c *Counter) Idle() {
	if c.n.Add(1)%Every == 0 {
		c.yields.Add(1)
		yield()
	}
}

// yield is sched_yield(2); a variable for the test that counts its calls.
//
// It is a raw system call, which Go's scheduler does not see: a goroutine
// in a system call leaves its P marked as such, and sysmon, finding every P
// busy or in a system call, takes the P back and stays at its shortest
// period, 20 us (70 with the timer slack), for 50 of its passes after each
// time it did. On two cores each of its wake-ups took a spinning thread's
// CPU for about 9 us (perf sched timehist): the spins of engines and
// applications kept it there, 2,500-6,500 wake-ups a second per process.
// Raw, the non-blocking calls of the spins and the engine (this, its
// setpriority, the AF_XDP kick) left 80-140 (perf trace), and write_lat's
// and send_lat's 99 % fell from 37-57 to 26-37 us (docs/performance.md).
// sched_yield does not block: at worst the thread waits for a CPU, P and
// all.
var yield = func() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// Yield yields the CPU once (sched_yield(2)): for a thread that spins by its
// own count, as the engine's does before it sleeps.
func Yield() { yield() }

// Found notes a look that found something: the count of empty looks starts
// again, so that a thread finding work often (a bandwidth loop) yields
// rarely.
func (c *Counter) Found() {
	if c.n.Load() != 0 {
		c.n.Store(0)
	}
}

// Yields is how many times Idle has yielded: the tests of the loops that
// must yield look at it.
func (c *Counter) Yields() uint64 { return c.yields.Load() }
