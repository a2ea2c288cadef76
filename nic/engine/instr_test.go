package engine

// Instructions per packet and per work request, counted by valgrind's
// callgrind: figures the shared host's noise does not move, for the next
// change to compare against (the performance issue). The workload runs in a
// child process under valgrind, once per path, on one QP and on 256 (the
// "-256qp" figures: what a QP costs among many); callgrind collects only
// while the path's function runs (--toggle-collect: what it calls included).
//
//	go test -run '^$' -bench Instructions -benchtime 1x ./nic/engine/

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/qpattr"
)

// instrWRs is the workload's number of 64-byte WRITEs, on one QP and on
// instrManyQPs.
const (
	instrWRs     = 20000
	instrManyQPs = 256
)

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
	for _, qps := range []int{1, instrManyQPs} {
		suffix := ""
		if qps > 1 {
			suffix = fmt.Sprintf("-%dqp", qps)
		}
		for _, p := range instrPaths {
			ir, counts := callgrindRun(b, vg, bin, p.fn, qps)
			if counts[p.per] == 0 || counts["qps"] != float64(qps) {
				b.Fatalf("the workload on %d QPs printed no %s: %v", qps, p.per, counts)
			}
			b.ReportMetric(ir/counts[p.per], "instr/"+p.name+suffix)
		}
	}
}

// callgrindRun runs the workload on qps QPs under callgrind, counting in fn,
// and returns the count and the figures the workload printed.
func callgrindRun(b *testing.B, vg, bin, fn string, qps int) (float64, map[string]float64) {
	out := filepath.Join(b.TempDir(), "callgrind.out")
	cmd := exec.Command(vg, "--tool=callgrind", "--callgrind-out-file="+out, "--toggle-collect="+fn,
		bin, "-test.run", "^TestInstructionWorkload$", "-test.v")
	cmd.Env = append(os.Environ(), "XRNIC_INSTR_WORKLOAD=1", fmt.Sprintf("XRNIC_INSTR_QPS=%d", qps),
		"GOMAXPROCS=2", "GODEBUG=asyncpreemptoff=1")
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
		b.Fatalf("callgrind counted nothing in %s:\n%s", fn, log)
	}
	return ir, counts
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
// RC QPs over the memory link, every one signaled, the requesters' CQ polled
// only when it holds completions (an empty poll is no completion's cost). With one QP
// (XRNIC_INSTR_QPS unset or 1) 64 are outstanding; with many, 4 on each QP
// (1,024 in all at 256, where perftest's -q 256 keeps 117 on each): the QPs
// take turns, their ACKs coalesce less and the shard's bound on PSNs in
// flight holds some of them back, which is what the count with many QPs is
// for. Each QP writes its own 64 KiB, as each of perftest's QPs has its own
// buffer. It prints what the counts are divided by.
func TestInstructionWorkload(t *testing.T) {
	if os.Getenv("XRNIC_INSTR_WORKLOAD") == "" {
		t.Skip("BenchmarkInstructions runs it under valgrind")
	}
	qps, depth := 1, 64
	if v := os.Getenv("XRNIC_INSTR_QPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("XRNIC_INSTR_QPS=%q", v)
		}
		qps = n
	}
	if qps > 1 {
		depth = 4
	}
	p := newPair(t, pairOpts{})
	// One CQ a side, as perftest's QPs share theirs.
	cqs := [2]*CQ{}
	for i, d := range []*Device{p.a, p.b} {
		c, err := d.CreateCQ(2048, CQOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cqs[i] = c
	}
	var as, rs []*node
	for range qps {
		a := newNode(t, p.a, nodeOpts{cap: benchCap(), bufLen: 64 << 10, cq: cqs[0]})
		r := newNode(t, p.b, nodeOpts{cap: benchCap(), bufLen: 64 << 10, cq: cqs[1]})
		connect(t, a, r, connOpts{mtu: qpattr.MTU4096, timeout: 20})
		as, rs = append(as, a), append(rs, r)
	}
	wrs := make([]SendWR, 1)
	sgl := make([]SGE, 1)
	wcs := make([]cq.WC, 64)
	// The setup's garbage collected and swept now: an allocation in a
	// counted path (an active list's first growth to 256 QPs) would
	// otherwise pay the sweep it is in debt for (deductSweepCredit), and
	// add millions of instructions to handleFrame in one run and not the next.
	runtime.GC()
	posted, got, done := make([]int, qps), make([]int, qps), 0
	perQP := instrWRs / qps
	deadline := time.Now().Add(10 * time.Minute)
	for done < perQP*qps {
		for i, a := range as {
			for posted[i] < perQP && posted[i]-got[i] < depth {
				off := uint64(posted[i]%1024) * 64
				sgl[0] = SGE{Addr: a.mr.Addr() + off, Length: 64, LKey: a.mr.LKey()}
				wrs[0] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
					SGL: sgl, RemoteAddr: rs[i].mr.Addr() + off, RKey: rs[i].mr.RKey()}
				if _, err := a.qp.PostSend(wrs); err != nil {
					t.Fatal(err)
				}
				posted[i]++
			}
		}
		if cqs[0].Len() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions", done, perQP*qps)
			}
			time.Sleep(20 * time.Microsecond)
			continue
		}
		n := cqs[0].Poll(wcs)
		for _, w := range wcs[:n] {
			if w.Status != cq.Success {
				t.Fatalf("WC %+v", w)
			}
			got[w.WRID]++
		}
		done += n
	}
	ea, eb := p.a.EngineCounters(), p.b.EngineCounters()
	fmt.Printf("instr-workload qps %d wrs %d wcs %d rx_frames %d tx_frames %d\n", qps, perQP*qps, done,
		ea[EngRxFrames]+eb[EngRxFrames], ea[EngTxFrames]+eb[EngTxFrames])
}
