package engine

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xrnic/xrnic/internal/spin"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
)

// threadsAt counts this process's threads whose nice value is nice
// (/proc/self/task/*/stat, field 19).
func threadsAt(t *testing.T, nice int) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // from field 3, the state
		if v, err := strconv.Atoi(f[16]); err == nil && v == nice {
			n++
		}
	}
	return n
}

// TestEngineThreadPriority: the engine goroutine runs on a thread of its own
// at engineNice, as rxe's work runs in softirq, unless PlainThread or BusyPoll
// says otherwise; the thread gets its priority back when the device closes
// (a locked thread that ended on the main thread would stay at engineNice).
func TestEngineThreadPriority(t *testing.T) {
	testutil.RequireRoot(t) // CAP_SYS_NICE
	for _, c := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"default", Config{}, 1},
		{"PlainThread", Config{PlainThread: true}, 0},
		{"BusyPoll", Config{BusyPoll: true}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := threadsAt(t, engineNice)
			la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer la.Close()
			defer lb.Close()
			cfg := c.cfg
			cfg.GIDs = gids(addrA)
			d, err := Open(la, cfg)
			if err != nil {
				t.Fatal(err)
			}
			// A pass of the engine's loop: its goroutine has set its thread up.
			if err := d.Sync().Wait(); err != nil {
				t.Fatal(err)
			}
			if got := threadsAt(t, engineNice) - before; got != c.want {
				t.Errorf("%d threads at nice %d with the device open, want %d", got, engineNice, c.want)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if n := threadsAt(t, engineNice) - before; n != 0 { // restored before Close returns
				t.Fatalf("%d threads stay at nice %d after the device closed", n, engineNice)
			}
		})
	}
}

// TestEmptyPollsYield: a thread spinning on a CQ yields its CPU on one in
// spin.Every polls that find nothing, for an engine thread woken on that CPU
// (internal/spin); under BusyPoll, where the poller runs the engine, it does
// not.
func TestEmptyPollsYield(t *testing.T) {
	for _, busy := range []bool{false, true} {
		p := newPair(t, pairOpts{busy: busy})
		c, err := p.a.CreateCQ(16, CQOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wcs := make([]cq.WC, 4)
		for range 2 * spin.Every {
			if n := c.Poll(wcs); n != 0 {
				t.Fatalf("an empty CQ polled %d completions", n)
			}
		}
		want := uint64(2)
		if busy {
			want = 0
		}
		if got := c.spin.Yields(); got != want {
			t.Errorf("BusyPoll %v: %d empty polls yielded %d times, want %d", busy, 2*spin.Every, got, want)
		}
		if err := c.Destroy().Wait(); err != nil {
			t.Fatal(err)
		}
	}
}
