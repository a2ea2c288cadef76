package engine

// Instructions per packet and per work request, counted by valgrind's
// callgrind: figures the shared host's noise does not move, for the next
// change to compare against (the performance issue). The workload runs in a
// child process under valgrind, once per path; callgrind collects only while
// the path's function runs (--toggle-collect: what it calls included).
//
//	go test -run '^$' -bench Instructions -benchtime 1x ./nic/engine/

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/qpattr"
)

// instrWRs is the workload's number of 64-byte WRITEs.
const instrWRs = 20000

// instrPaths are the engine's paths: the function callgrind counts in, and
// what its count is divided by (a line the workload prints).
var instrPaths = []struct{ name, fn, per string }{
	{"rx", "github.com/xrnic/xrnic/nic/engine.(*engine).handleFrame", "rx_frames"},
	{"tx", "github.com/xrnic/xrnic/nic/engine.(*engine).transmit", "tx_frames"},
	{"post", "github.com/xrnic/xrnic/nic/engine.(*QP).postSend", "wrs"},
	{"poll", "github.com/xrnic/xrnic/nic/engine.(*CQ).Poll", "wcs"},
}

func BenchmarkInstructions(b *testing.B) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		b.Skip("valgrind not installed")
	}
	// A test binary of its own: go test's own has no symbol table (it links
	// with -s -w), and callgrind finds functions by name.
	bin := filepath.Join(b.TempDir(), "engine.test")
	if out, err := exec.Command("go", "test", "-c", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go test -c: %v\n%s", err, out)
	}
	for _, p := range instrPaths {
		out := filepath.Join(b.TempDir(), "callgrind.out")
		cmd := exec.Command(vg, "--tool=callgrind", "--callgrind-out-file="+out, "--toggle-collect="+p.fn,
			bin, "-test.run", "^TestInstructionWorkload$", "-test.v")
		cmd.Env = append(os.Environ(), "XRNIC_INSTR_WORKLOAD=1", "GOMAXPROCS=2", "GODEBUG=asyncpreemptoff=1")
		log, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("valgrind: %v\n%s", err, log)
		}
		counts := map[string]float64{}
		for _, l := range strings.Split(string(log), "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), "instr-workload "); ok && k == "" {
				f := strings.Fields(v)
				for i := 0; i+1 < len(f); i += 2 {
					counts[f[i]], _ = strconv.ParseFloat(f[i+1], 64)
				}
			}
		}
		ir, err := callgrindTotal(out)
		if err != nil {
			b.Fatal(err)
		}
		if ir == 0 {
			b.Fatalf("callgrind counted nothing in %s:\n%s", p.fn, log)
		}
		if counts[p.per] == 0 {
			b.Fatalf("the workload printed no %s:\n%s", p.per, log)
		}
		b.ReportMetric(ir/counts[p.per], "instr/"+p.name)
	}
}

// callgrindTotal is the instruction count of a callgrind output file.
func callgrindTotal(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			return strconv.ParseFloat(strings.Fields(v)[0], 64)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "totals: "); ok {
			return strconv.ParseFloat(strings.Fields(v)[0], 64)
		}
	}
	return 0, fmt.Errorf("%s: no summary line", path)
}

// TestInstructionWorkload is BenchmarkInstructions' child: 64-byte WRITEs on
// one RC QP over the memory link, every one signaled, 64 outstanding, the
// CQ polled only when it holds completions (an empty poll is no
// completion's cost). It prints what the counts are divided by.
func TestInstructionWorkload(t *testing.T) {
	if os.Getenv("XRNIC_INSTR_WORKLOAD") == "" {
		t.Skip("BenchmarkInstructions runs it under valgrind")
	}
	p, a, r := rcPair(t, pairOpts{}, nodeOpts{cap: benchCap(), bufLen: 1 << 20}, connOpts{mtu: qpattr.MTU4096, timeout: 20})
	wrs := make([]SendWR, 1)
	sgl := make([]SGE, 1)
	wcs := make([]cq.WC, 64)
	posted, done := 0, 0
	deadline := time.Now().Add(10 * time.Minute)
	for done < instrWRs {
		for posted < instrWRs && posted-done < 64 {
			off := uint64(posted%1024) * 64
			sgl[0] = SGE{Addr: a.mr.Addr() + off, Length: 64, LKey: a.mr.LKey()}
			wrs[0] = SendWR{WRID: uint64(posted), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: sgl, RemoteAddr: r.mr.Addr() + off, RKey: r.mr.RKey()}
			if _, err := a.qp.PostSend(wrs); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		if a.cq.Len() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions", done, instrWRs)
			}
			time.Sleep(20 * time.Microsecond)
			continue
		}
		n := a.cq.Poll(wcs)
		for _, w := range wcs[:n] {
			if w.Status != cq.Success {
				t.Fatalf("WC %+v", w)
			}
		}
		done += n
	}
	ea, eb := p.a.EngineCounters(), p.b.EngineCounters()
	fmt.Printf("instr-workload wrs %d wcs %d rx_frames %d tx_frames %d\n", instrWRs, done,
		ea[EngRxFrames]+eb[EngRxFrames], ea[EngTxFrames]+eb[EngTxFrames])
}
