//go:build interop

package interop

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// budgetMargin is what the suite keeps of go test's -timeout for itself:
// when only this much is left, every run still going is ended, every later
// one fails at once, and the guests are torn down, so that the suite fails
// with its own account (runMain prints it last) instead of go test's
// goroutine dump, which says neither where the time went nor what was
// running.
const budgetMargin = 3 * time.Minute

// quietLimit is how long the wire may stay silent while both sides of a run
// are still up before the run is ended: far beyond any retransmission or CM
// timer of the runs (0.5 s and about 4 s). A guest that stops under TCG
// (guestStalled) would otherwise hold the run for all of runTimeout.
const quietLimit = 30 * time.Second

// budget records the suite's runs against its time. Safe for concurrent use.
var budget struct {
	ctx    context.Context // ends budgetMargin before go test's deadline; nil outside TestInterop
	cancel context.CancelFunc

	mu      sync.Mutex
	start   time.Time
	runs    []runRecord
	running map[string]time.Time // runs under way, by name
}

// runRecord is one run of a pair: its name, how long it took and how it
// ended ("ok", "failed", or why it was run again).
type runRecord struct {
	name    string
	took    time.Duration
	outcome string
}

// startBudget ties the suite's runs to t's deadline; its cleanup lifts it. The
// account's clock starts with the first test that calls it.
func startBudget(t *testing.T) {
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(24 * time.Hour)
	}
	budget.mu.Lock()
	if budget.start.IsZero() { // the account covers every test of the suite
		budget.start, budget.running = time.Now(), map[string]time.Time{}
	}
	budget.ctx, budget.cancel = context.WithDeadline(context.Background(), deadline.Add(-budgetMargin))
	budget.mu.Unlock()
	t.Cleanup(func() { budget.cancel() })
}

// runCtx bounds one step of a run by timeout and by the suite's budget.
func runCtx(timeout time.Duration) (context.Context, context.CancelFunc) {
	parent := budget.ctx
	if parent == nil {
		parent = context.Background()
	}
	return context.WithTimeout(parent, timeout)
}

// checkBudget fails t at once when the suite's time is up.
func checkBudget(t *testing.T) {
	t.Helper()
	if budget.ctx != nil && budget.ctx.Err() != nil {
		t.Fatalf("interop: out of time (%v before go test's -timeout); the account is at the end of the output", budgetMargin)
	}
}

// began notes that a run started; the func it returns records how it ended.
func began(name string) func(outcome string) {
	start := time.Now()
	budget.mu.Lock()
	if budget.running != nil {
		budget.running[name] = start
	}
	budget.mu.Unlock()
	return func(outcome string) {
		budget.mu.Lock()
		defer budget.mu.Unlock()
		delete(budget.running, name)
		budget.runs = append(budget.runs, runRecord{name, time.Since(start), outcome})
	}
}

// checkedAfter turns name's run, recorded "ok", into "failed: checks" if t
// fails in the checks that follow it (results, shapes, captures), so that
// the account names every failure.
func checkedAfter(t *testing.T, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		budget.mu.Lock()
		defer budget.mu.Unlock()
		for i := len(budget.runs) - 1; i >= 0; i-- {
			if r := &budget.runs[i]; r.name == name {
				if r.outcome == "ok" {
					r.outcome = "failed: checks"
				}
				return
			}
		}
	})
}

// account writes where the suite's time went: runs and reruns by cause, the
// slowest runs, and what was still running if the time ran out. It is short:
// CI keeps the tail of the output.
func account(w io.Writer) {
	budget.mu.Lock()
	defer budget.mu.Unlock()
	if budget.start.IsZero() {
		return
	}
	var total time.Duration
	outcomes := map[string]int{}
	for _, r := range budget.runs {
		total += r.took
		outcomes[r.outcome]++
	}
	keys := make([]string, 0, len(outcomes))
	for k := range outcomes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(w, "interop: %.0f s in all, %d runs of pairs taking %.0f s:", time.Since(budget.start).Seconds(), len(budget.runs), total.Seconds())
	for _, k := range keys {
		fmt.Fprintf(w, " %s %d;", k, outcomes[k])
	}
	fmt.Fprintln(w)
	slow := slices.Clone(budget.runs)
	slices.SortFunc(slow, func(a, b runRecord) int { return int(b.took - a.took) })
	for _, r := range slow[:min(6, len(slow))] {
		fmt.Fprintf(w, "interop: slowest: %6.1f s %s (%s)\n", r.took.Seconds(), r.name, r.outcome)
	}
	for _, r := range budget.runs {
		if strings.HasPrefix(r.outcome, "failed") {
			fmt.Fprintf(w, "interop: %s: %s after %.1f s\n", r.outcome, r.name, r.took.Seconds())
		}
	}
	if budget.ctx != nil && budget.ctx.Err() == context.DeadlineExceeded {
		fmt.Fprintf(w, "interop: OUT OF TIME: the suite stopped %v before go test's -timeout\n", budgetMargin)
		for name, since := range budget.running {
			fmt.Fprintf(w, "interop: was running for %.0f s: %s\n", time.Since(since).Seconds(), name)
		}
	}
}

// watchQuiet ends a run (stop) once the capture at path has not grown for
// limit; it returns a func that ends the watch and tells whether it fired.
func watchQuiet(path string, limit time.Duration, stop func()) func() bool {
	done := make(chan struct{})
	fired := make(chan bool, 1)
	go func() {
		var size int64 = -1
		last := time.Now()
		tick := time.NewTicker(limit / 30)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fired <- false
				return
			case <-tick.C:
			}
			if fi, err := os.Stat(path); err == nil && fi.Size() != size {
				size, last = fi.Size(), time.Now()
			}
			if time.Since(last) >= limit {
				stop()
				<-done
				fired <- true
				return
			}
		}
	}()
	return func() bool {
		close(done)
		return <-fired
	}
}

// TestWatchQuiet: a growing capture keeps the run going; one that stops
// growing for the limit ends it, once.
func TestWatchQuiet(t *testing.T) {
	path := t.TempDir() + "/c.pcap"
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const limit = 300 * time.Millisecond
	var stops atomic.Int32
	quiet := watchQuiet(path, limit, func() { stops.Add(1) })
	for range 10 { // a second of frames, none further apart than a third of the limit
		f.Write([]byte("frame"))
		time.Sleep(limit / 3)
	}
	if stops.Load() != 0 {
		t.Fatalf("the run was ended while the capture grew")
	}
	time.Sleep(3 * limit)
	if !quiet() || stops.Load() != 1 {
		t.Fatalf("after %v of silence: fired %d times, want once", 3*limit, stops.Load())
	}
	if quiet := watchQuiet(path, time.Hour, func() { t.Error("stopped") }); quiet() {
		t.Errorf("a watch ended before its limit says it fired")
	}
}
