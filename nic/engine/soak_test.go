// Soak tests: many RC QPs with concurrent posters run a random mix of SEND, WRITE,
// READ and atomics (sizes up to 1 MiB, several SGEs, inline data, fences) over a
// link that drops, reorders, duplicates and corrupts frames, and a model checks
// every byte of both sides' buffers, every completion (exactly once, in posting
// order, with the right status, opcode and length) and that the atomics are
// linearizable. A run that stops making progress fails with its seed.
//
// The seed (logged at the start, and part of every failure) fixes the workload,
// the buffers' contents and the memory link's fault streams (the n-th frame each
// way meets the same fault); replay a run with
//
//	XRNIC_SOAK_SEED=<seed> go test -race -run 'TestSoak/<variant>' ./nic/engine/
//
// Thread scheduling and the engines' real-time timers are not replayed, so a
// replay is another interleaving of the same workload and fault streams: run it
// a few times. XRNIC_SOAK=long runs the variants with 16 times the data, -short
// with a quarter; XRNIC_SOAK_TIMEOUT=<code> sets the local ACK timeout (default
// 14, 67 ms): lower codes add spurious retransmissions, and below 12 congestion
// alone can exhaust retry_cnt.

package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// soakConfig is one soak variant.
type soakConfig struct {
	qps        int           // RC connections, one poster goroutine each
	bytesPerQP int           // data budget of each QP's workload (each side)
	maxOps     int           // at most this many WRs per QP
	maxSize    int           // largest message
	window     int           // send WRs a poster keeps outstanding
	timeout    uint8         // local ACK timeout code
	stall      time.Duration // no completion anywhere for this long is a hang
	deadline   time.Duration // the whole run
}

// soakSeed returns the run's seed: XRNIC_SOAK_SEED, or a fresh one.
func soakSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("XRNIC_SOAK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("XRNIC_SOAK_SEED=%q: %v", s, err)
		}
		return v
	}
	return rand.Uint64()
}

// soakLong reports whether the long variants were asked for.
func soakLong() bool { return os.Getenv("XRNIC_SOAK") == "long" }

// subSeed derives a stream's seed from the run's seed and a name.
func subSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return seed ^ h.Sum64()
}

func TestSoak(t *testing.T) {
	seed := soakSeed(t)
	long := soakLong()
	variants := []struct {
		name  string
		f     link.Faults
		bytes int // per QP
	}{
		// No loss, but a full link and spurious retransmissions.
		{"loss=0", link.Faults{}, 4 << 20},
		{"loss=0.1%", link.Faults{Drop: 0.001, Reorder: 0.001, Duplicate: 0.001, Corrupt: 0.0005}, 4 << 20},
		{"loss=1%", link.Faults{Drop: 0.01, Reorder: 0.01, Duplicate: 0.01, Corrupt: 0.002}, 2 << 20},
		{"loss=10%", link.Faults{Drop: 0.1, Reorder: 0.05, Duplicate: 0.05, Corrupt: 0.01}, 512 << 10},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg := soakConfig{qps: 16, bytesPerQP: v.bytes, maxOps: 96, maxSize: 1 << 20, window: 16,
				timeout: 14, stall: 20 * time.Second, deadline: 2 * time.Minute}
			if env := os.Getenv("XRNIC_SOAK_TIMEOUT"); env != "" {
				// A shorter local ACK timeout makes spurious retransmissions: more
				// duplicates, and a retry_cnt that congestion can exhaust.
				code, err := strconv.ParseUint(env, 0, 5)
				if err != nil {
					t.Fatalf("XRNIC_SOAK_TIMEOUT=%q: %v", env, err)
				}
				cfg.timeout = uint8(code)
			}
			switch {
			case long:
				cfg.bytesPerQP *= 16
				cfg.maxOps *= 16
				cfg.deadline = 20 * time.Minute
			case testing.Short():
				cfg.bytesPerQP /= 4
			}
			sd := subSeed(seed, v.name)
			fab, fba := v.f, v.f
			fab.Seed, fba.Seed = subSeed(sd, "a->b"), subSeed(sd, "b->a")
			s := newSoak(t, seed, cfg)
			// A switch buffer of 256 frames each way: a deeper queue only adds
			// delay that the local ACK timeout (67 ms) has to cover under -race.
			p := newPair(t, pairOpts{mem: link.MemoryOptions{AtoB: fab, BtoA: fba, Depth: 256}})
			s.run(p.a, p.b, sd)
			ca, cb := p.a.Counters(), p.b.Counters()
			if v.f.Corrupt > 0 && float64(s.frames) > 20/v.f.Corrupt {
				// A flipped bit fails the ICRC, or the IPv4 checksum and other header
				// checks first (or lands in a field the ICRC masks): dropped and counted.
				bad := ca[CntRcvdBadICRC] + cb[CntRcvdBadICRC] + ca[CntRcvdMalformed] + cb[CntRcvdMalformed]
				if bad == 0 {
					s.fatalf("%d frames with %v corrupted: none dropped as bad", s.frames, v.f.Corrupt)
				}
			}
		})
	}
}

// soakOp is one work request of the workload and what it should do.
type soakOp struct {
	op      WROpcode
	size    uint32
	aOff    uint64 // A: source (SEND, WRITE), destination (READ), result (atomics)
	bOff    uint64 // B: destination (SEND, WRITE), source (READ)
	aCuts   []uint32
	bCuts   []uint32 // the receive's SGL (SEND)
	inline  bool
	fence   bool
	imm     uint32
	add     uint64 // FETCH_ADD
	compare uint64 // CMP_SWAP: set when posted
	recv    int    // index of the receive WR it consumes, -1 none
	result  uint64 // atomics: the original value, read at completion
}

// soakQP is one connection, its workload and the poster's progress.
type soakQP struct {
	idx      int
	a, b     *node
	seedA    uint64 // the buffers' initial contents
	seedB    uint64
	ops      []soakOp
	recvs    []int // op of each receive WR
	posted   int
	done     int
	recvDone int
	lastCAS  uint64 // the CAS word's value as this poster last saw it

	// Progress for the watchdog's report, written by the poster.
	pDone, pRecv atomic.Int64
}

// soak is a run: the QPs, the shared atomic words on B and the checks.
type soak struct {
	t        *testing.T
	seed     uint64
	cfg      soakConfig
	qps      []*soakQP
	atomMR   *MR
	atomBuf  []byte // word 0: FETCH_ADD counter, word 1: CMP_SWAP ticket
	add0     uint64
	cas0     uint64
	progress atomic.Int64
	stop     chan struct{}
	errMu    sync.Mutex
	errs     []string
	frames   uint64 // frames the devices sent, at the end
}

func newSoak(t *testing.T, seed uint64, cfg soakConfig) *soak {
	t.Helper()
	// Registered first, so it runs last: after the devices closed.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	t.Logf("soak seed %d (replay: XRNIC_SOAK_SEED=%d go test -run '%s')", seed, seed, t.Name())
	return &soak{t: t, seed: seed, cfg: cfg, stop: make(chan struct{})}
}

// fatalf fails the test with the seed in the message.
func (s *soak) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("[XRNIC_SOAK_SEED=%d %s] %s", s.seed, s.t.Name(), fmt.Sprintf(format, args...))
}

// fail records a poster's failure and stops the run.
func (s *soak) fail(format string, args ...any) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	if len(s.errs) == 1 {
		close(s.stop)
	}
}

// randBytes fills b from seed.
func randBytes(b []byte, seed uint64) {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], seed*0x9e3779b97f4a7c15)
	r := rand.NewChaCha8(key)
	_, _ = r.Read(b)
}

// soakGuard bytes separate the regions, so an overrun shows.
const soakGuard = 64

// genOps makes a QP's workload within the byte budget, laying each message out
// in its own region of both buffers; it returns the buffer length needed.
func (s *soak) genOps(q *soakQP, r *rand.Rand, mtu int) int {
	cfg := s.cfg
	off := uint64(soakGuard)
	budget := cfg.bytesPerQP
	for len(q.ops) < cfg.maxOps && budget > 0 {
		o := soakOp{recv: -1}
		switch x := r.IntN(100); {
		case x < 18:
			o.op = WRSend
		case x < 24:
			o.op = WRSendWithImm
		case x < 44:
			o.op = WRRDMAWrite
		case x < 50:
			o.op = WRRDMAWriteWithImm
		case x < 72:
			o.op = WRRDMARead
		case x < 86:
			o.op = WRAtomicCmpSwp
		default:
			o.op = WRAtomicFetchAdd
		}
		atomic := o.op == WRAtomicCmpSwp || o.op == WRAtomicFetchAdd
		switch x := r.IntN(100); {
		case atomic:
			o.size = 8
		case x < 4:
			o.size = 0
		case x < 16:
			// Packet boundaries.
			k := r.IntN(4) + 1
			o.size = uint32(max(k*mtu+r.IntN(3)-1, 1))
		default:
			// Log-uniform: as many small messages as large ones.
			o.size = uint32(math.Exp2(r.Float64() * math.Log2(float64(cfg.maxSize))))
		}
		o.size = min(o.size, uint32(cfg.maxSize), uint32(max(budget, 8)))
		budget -= int(o.size) + 1024 // a message costs something even when small
		o.aOff, o.bOff = off, off
		off += (uint64(o.size) + soakGuard + 7) &^ 7
		if !atomic {
			o.aCuts = cuts(r, o.size)
			o.bCuts = cuts(r, o.size)
		}
		if (o.op == WRSend || o.op == WRSendWithImm || o.op == WRRDMAWrite || o.op == WRRDMAWriteWithImm) &&
			o.size <= 256 && r.IntN(3) == 0 {
			o.inline = true
		}
		o.fence = r.IntN(20) == 0
		o.imm = r.Uint32()
		o.add = uint64(r.IntN(1<<16)) + 1
		if o.op == WRSend || o.op == WRSendWithImm || o.op == WRRDMAWriteWithImm {
			o.recv = len(q.recvs)
			q.recvs = append(q.recvs, len(q.ops))
		}
		q.ops = append(q.ops, o)
	}
	return int(off)
}

// cuts splits size bytes into up to three SGEs at random points: the lengths.
func cuts(r *rand.Rand, size uint32) []uint32 {
	n := r.IntN(3) + 1
	if size < 3 || n == 1 {
		return []uint32{size}
	}
	p := []uint32{r.Uint32N(size), r.Uint32N(size)}[:n-1]
	slices.Sort(p)
	out := make([]uint32, 0, n)
	prev := uint32(0)
	for _, c := range p {
		out = append(out, c-prev)
		prev = c
	}
	return append(out, size-prev)
}

// sgl returns the SGEs of lengths cuts starting at off in m.
func sgl(m *MR, off uint64, cuts []uint32) []SGE {
	out := make([]SGE, 0, len(cuts))
	for _, c := range cuts {
		out = append(out, m.SGE(off, c))
		off += uint64(c)
	}
	return out
}

// run builds the QPs on devices da and db, runs the posters and checks the end
// state.
func (s *soak) run(da, db *Device, seed uint64) {
	t := s.t
	t.Helper()
	cfg := s.cfg
	pda, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	pdb, err := db.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pda.Dealloc(); pdb.Dealloc() })
	s.atomBuf = make([]byte, 16)
	ar := rand.New(rand.NewPCG(seed, 1))
	s.add0, s.cas0 = ar.Uint64N(1<<40), ar.Uint64N(1<<40)
	binary.NativeEndian.PutUint64(s.atomBuf, s.add0)
	binary.NativeEndian.PutUint64(s.atomBuf[8:], s.cas0)
	if s.atomMR, err = pdb.RegMR(s.atomBuf, 0x7000_0000, mr.LocalWrite|mr.RemoteAtomic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.atomMR.Dereg() })

	mtus := []qpattr.MTU{qpattr.MTU1024, qpattr.MTU2048, qpattr.MTU4096}
	cap := qpattr.Cap{MaxSendWR: uint32(cfg.window), MaxRecvWR: uint32(cfg.window), MaxSendSGE: 3, MaxRecvSGE: 3,
		MaxInlineData: 256}
	totalOps, totalBytes := 0, 0
	for i := range cfg.qps {
		r := rand.New(rand.NewPCG(seed, uint64(i)+100))
		mtu := mtus[r.IntN(len(mtus))]
		q := &soakQP{idx: i, seedA: r.Uint64(), seedB: r.Uint64()}
		n := s.genOps(q, r, mtu.Bytes())
		q.a = newNode(t, da, nodeOpts{pd: pda, cap: cap, bufLen: n, cqe: 4 * cfg.window})
		q.b = newNode(t, db, nodeOpts{pd: pdb, cap: cap, bufLen: n, cqe: 4 * cfg.window})
		randBytes(q.a.buf, q.seedA)
		randBytes(q.b.buf, q.seedB)
		connect(t, q.a, q.b, connOpts{mtu: mtu, timeout: cfg.timeout, retry: 7, rnrRetry: 7,
			psnA: wire.PSN(r.Uint32() & wire.PSNMask), psnB: wire.PSN(r.Uint32() & wire.PSNMask)})
		q.lastCAS = s.cas0
		s.qps = append(s.qps, q)
		totalOps += len(q.ops)
		for _, o := range q.ops {
			totalBytes += int(o.size)
		}
	}
	t.Logf("%d QPs, %d WRs, %d bytes", cfg.qps, totalOps, totalBytes)

	start := time.Now()
	var wg sync.WaitGroup
	for _, q := range s.qps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.poster(q)
		}()
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	s.watch(finished, da, db, start)
	s.errMu.Lock()
	errs := s.errs
	s.errMu.Unlock()
	if len(errs) > 0 {
		s.fatalf("%s", strings.Join(errs, "\n"))
	}
	elapsed := time.Since(start)

	// Exactly once: nothing more completes.
	time.Sleep(30 * time.Millisecond)
	var extra [4]cq.WC
	for _, q := range s.qps {
		for _, c := range []*CQ{q.a.cq, q.b.cq} {
			if n := c.Poll(extra[:]); n != 0 {
				s.fatalf("QP %d: completions after the last one: %+v", q.idx, extra[:n])
			}
		}
		for _, n := range []*node{q.a, q.b} {
			if st := n.qp.State(); st != qpattr.RTS {
				s.fatalf("QP %d: %v in %v, want RTS", q.idx, n.qp.QPN(), st)
			}
		}
	}
	// The engines' passes order their last writes before the reads below (on veth
	// the kernel carries the ACKs, out of the race detector's sight).
	da.Sync().Wait()
	db.Sync().Wait()
	for _, q := range s.qps {
		s.checkBuffers(q)
	}
	s.checkAtomics()
	ca, cb := da.Counters(), db.Counters()
	s.frames = ca[CntSentPkts] + cb[CntSentPkts]
	t.Logf("%v for %d bytes (%.1f MB/s); a: sent %d retransmitted %d completer_retry %d rcvd_seq_err %d rnr %d bad_icrc %d malformed %d bad_ack %d; b: sent %d duplicate_request %d out_of_seq %d bad_icrc %d malformed %d",
		elapsed.Round(time.Millisecond), totalBytes, float64(totalBytes)/elapsed.Seconds()/1e6,
		ca[CntSentPkts], ca[CntRetransmitted], ca[CntCompRetry], ca[CntRcvSeqErr], ca[CntRcvRNR], ca[CntRcvdBadICRC],
		ca[CntRcvdMalformed], ca[CntRcvdBadAck],
		cb[CntSentPkts], cb[CntDupReq], cb[CntOutOfSeqReq], cb[CntRcvdBadICRC], cb[CntRcvdMalformed])
	if ca[CntRetryExceeded] != 0 || ca[CntRNRRetryExceeded] != 0 || ca[CntCQOverflow]+cb[CntCQOverflow] != 0 {
		s.fatalf("counters: a %v, b %v", ca.Map(), cb.Map())
	}
}

// watch waits for the posters, failing the run when nothing completes for
// cfg.stall or the whole run exceeds cfg.deadline.
func (s *soak) watch(finished <-chan struct{}, da, db *Device, start time.Time) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last, lastAt := s.progress.Load(), time.Now()
	for {
		select {
		case <-finished:
			return
		case <-tick.C:
		}
		now := time.Now()
		if p := s.progress.Load(); p != last {
			last, lastAt = p, now
		}
		var why string
		switch {
		case now.Sub(lastAt) > s.cfg.stall:
			why = fmt.Sprintf("no completion for %v", s.cfg.stall)
		case now.Sub(start) > s.cfg.deadline:
			why = fmt.Sprintf("not done after %v", s.cfg.deadline)
		default:
			continue
		}
		var b strings.Builder
		for _, q := range s.qps {
			if d, r := int(q.pDone.Load()), int(q.pRecv.Load()); d < len(q.ops) || r < len(q.recvs) {
				next := "-"
				if d < len(q.ops) {
					o := q.ops[d]
					next = fmt.Sprintf("%v of %d bytes", o.op, o.size)
				}
				fmt.Fprintf(&b, "\n  QP %d (%#x->%#x, %v/%v): %d/%d sends done (next %s), %d/%d receives\n    a: %s\n    b: %s",
					q.idx, q.a.qp.QPN(), q.b.qp.QPN(), q.a.qp.State(), q.b.qp.State(),
					d, len(q.ops), next, r, len(q.recvs), transportState(q.a.qp), transportState(q.b.qp))
			}
		}
		ca, cb := da.Counters(), db.Counters()
		s.fail("hang: %s:%s\n  counters a %v\n  counters b %v", why, b.String(), nonZero(ca), nonZero(cb))
		<-finished
		return
	}
}

// report describes q's transport state and the devices' counters for a failure.
func (s *soak) report(q *soakQP) string {
	return fmt.Sprintf("\n  a: %s\n  b: %s\n  counters a %v\n  counters b %v", transportState(q.a.qp), transportState(q.b.qp),
		nonZero(q.a.d.Counters()), nonZero(q.b.d.Counters()))
}

// transportState describes qp's requester, completer and responder, read on its
// engine goroutine, for a hang report.
func transportState(qp *QP) string {
	var out string
	op := qp.sh.exec(func(e *engine) error {
		req, c, r := &qp.req, &qp.comp, &qp.resp
		var w string
		if cons := qp.sendQ.cons.Load(); cons != qp.sendQ.prod.Load() {
			x := &qp.sendSlots[cons&qp.sendQ.mask]
			w = fmt.Sprintf("oldest WQE %v state %d PSNs %#x-%#x resid %d", x.opcode, x.state, x.firstPSN, x.lastPSN, x.dma.resid)
		}
		out = fmt.Sprintf("req psn %#x hi %#x wqe %d opcode %d retry %v waitPSN %v fence %v rdatom %v/%d rnr %v; "+
			"comp psn %#x opcode %d retries %d started %v; timer armed %v in %v; %s; "+
			"resp psn %#x ack %#x opcode %d nak %v out %d rdatom %d",
			req.psn, req.hiPSN, req.wqeIndex, req.opcode, req.needRetry, req.waitPSN, req.waitFence, req.needRdAtom, req.rdInflight,
			req.waitRNRTime, c.psn, c.opcode, c.retryCnt, c.startedRetry, qp.retrans.armed(), qp.retrans.when-e.now, w,
			r.psn, r.ackPSN, r.opcode, r.sentPSNNak, r.outLen, r.rdAtomic)
		return nil
	})
	select {
	case <-op.Done():
	case <-time.After(time.Second):
		return "(engine not answering)"
	}
	return out
}

func nonZero(c Counters) map[string]uint64 {
	m := c.Map()
	for k, v := range m {
		if v == 0 {
			delete(m, k)
		}
	}
	return m
}

// poster runs one QP's workload: it posts the receives and the WRs, keeps
// cfg.window outstanding, and checks each completion as it arrives.
func (s *soak) poster(q *soakQP) {
	a, b := q.a, q.b
	wcs := make([]cq.WC, 16)
	wr := make([]SendWR, 1)
	for q.done < len(q.ops) || q.recvDone < len(q.recvs) {
		select {
		case <-s.stop:
			return
		default:
		}
		busy := false
		for q.posted < len(q.ops) && q.posted-q.done < s.cfg.window {
			o := &q.ops[q.posted]
			if o.recv >= 0 {
				rw := RecvWR{WRID: uint64(o.recv)}
				if o.op != WRRDMAWriteWithImm && o.size > 0 {
					rw.SGL = sgl(b.mr, o.bOff, o.bCuts)
				}
				if _, err := b.qp.PostRecv([]RecvWR{rw}); err != nil {
					s.fail("QP %d: PostRecv %d: %v", q.idx, o.recv, err)
					return
				}
			}
			w := SendWR{WRID: uint64(q.posted), Opcode: o.op, Flags: SendSignaled}
			if o.fence {
				w.Flags |= SendFence
			}
			switch o.op {
			case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
				w.SGL = sgl(a.mr, o.aOff, o.aCuts)
				if o.inline {
					w.Flags |= SendInline
				}
				w.ImmData = o.imm
				w.RemoteAddr, w.RKey = b.mr.Addr()+o.bOff, b.mr.RKey()
			case WRRDMARead:
				w.SGL = sgl(a.mr, o.aOff, o.aCuts)
				w.RemoteAddr, w.RKey = b.mr.Addr()+o.bOff, b.mr.RKey()
			case WRAtomicFetchAdd:
				w.SGL = []SGE{a.mr.SGE(o.aOff, 8)}
				w.RemoteAddr, w.RKey, w.CompareAdd = s.atomMR.Addr(), s.atomMR.RKey(), o.add
			case WRAtomicCmpSwp:
				// A ticket lock's increment: succeeds if nobody moved the word since
				// this poster last saw it.
				o.compare = q.lastCAS
				w.SGL = []SGE{a.mr.SGE(o.aOff, 8)}
				w.RemoteAddr, w.RKey = s.atomMR.Addr()+8, s.atomMR.RKey()
				w.CompareAdd, w.Swap = o.compare, o.compare+1
			}
			wr[0] = w
			if _, err := a.qp.PostSend(wr); err != nil {
				s.fail("QP %d: PostSend %d (%v): %v", q.idx, q.posted, o.op, err)
				return
			}
			q.posted++
			busy = true
		}
		n := a.cq.Poll(wcs)
		for _, got := range wcs[:n] {
			if !s.sendDone(q, got) {
				return
			}
		}
		m := b.cq.Poll(wcs)
		for _, got := range wcs[:m] {
			if !s.recvDoneWC(q, got) {
				return
			}
		}
		if n+m > 0 {
			s.progress.Add(int64(n + m))
			q.pDone.Store(int64(q.done))
			q.pRecv.Store(int64(q.recvDone))
			busy = true
		}
		if !busy {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// sendDone checks a send completion against the next WR in posting order.
func (s *soak) sendDone(q *soakQP, got cq.WC) bool {
	if q.done >= q.posted {
		s.fail("QP %d: send completion %+v with none outstanding", q.idx, got)
		return false
	}
	o := &q.ops[q.done]
	want := cq.WC{WRID: uint64(q.done), Status: cq.Success, Opcode: wcOpcode(o.op), ByteLen: o.size, QPN: q.a.qp.QPN()}
	if o.op == WRSendWithImm || o.op == WRRDMAWriteWithImm {
		want.Flags = cq.WithImm
	}
	if got != want {
		s.fail("QP %d: send completion %d (%v of %d bytes):\n got %+v\nwant %+v%s", q.idx, q.done, o.op, o.size, got, want,
			s.report(q))
		return false
	}
	switch o.op {
	case WRAtomicFetchAdd:
		o.result = binary.NativeEndian.Uint64(q.a.buf[o.aOff:])
	case WRAtomicCmpSwp:
		o.result = binary.NativeEndian.Uint64(q.a.buf[o.aOff:])
		q.lastCAS = o.result
		if o.result == o.compare {
			q.lastCAS = o.compare + 1
		}
	}
	q.done++
	return true
}

// recvDoneWC checks a receive completion against the next receive WR.
func (s *soak) recvDoneWC(q *soakQP, got cq.WC) bool {
	if q.recvDone >= len(q.recvs) {
		s.fail("QP %d: receive completion %+v beyond the last receive", q.idx, got)
		return false
	}
	o := &q.ops[q.recvs[q.recvDone]]
	want := cq.WC{WRID: uint64(q.recvDone), Status: cq.Success, Opcode: cq.Recv, ByteLen: o.size, QPN: q.b.qp.QPN()}
	switch o.op {
	case WRSendWithImm:
		want.Flags, want.ImmData = cq.WithImm, o.imm
	case WRRDMAWriteWithImm:
		want.Opcode, want.Flags, want.ImmData = cq.RecvRDMAWithImm, cq.WithImm, o.imm
	}
	if got != want {
		s.fail("QP %d: receive completion %d (%v of %d bytes):\n got %+v\nwant %+v%s", q.idx, q.recvDone, o.op, o.size, got,
			want, s.report(q))
		return false
	}
	q.recvDone++
	return true
}

// checkBuffers compares both of q's buffers with the model: the initial
// contents with every message applied, and the atomics' results where they
// landed.
func (s *soak) checkBuffers(q *soakQP) {
	wantA := make([]byte, len(q.a.buf))
	wantB := make([]byte, len(q.b.buf))
	randBytes(wantA, q.seedA)
	randBytes(wantB, q.seedB)
	initB := slices.Clone(wantB)
	initA := slices.Clone(wantA)
	for _, o := range q.ops {
		a := wantA[o.aOff : o.aOff+uint64(o.size)]
		b := wantB[o.bOff : o.bOff+uint64(o.size)]
		switch o.op {
		case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
			copy(b, initA[o.aOff:o.aOff+uint64(o.size)])
		case WRRDMARead:
			copy(a, initB[o.bOff:o.bOff+uint64(o.size)])
		case WRAtomicFetchAdd, WRAtomicCmpSwp:
			binary.NativeEndian.PutUint64(a, o.result)
		}
	}
	for _, c := range []struct {
		side      string
		got, want []byte
	}{{"A", q.a.buf, wantA}, {"B", q.b.buf, wantB}} {
		if i := firstDiff(c.got, c.want); i >= 0 {
			what := "a guard"
			for k, o := range q.ops {
				off := o.bOff
				if c.side == "A" {
					off = o.aOff
				}
				if uint64(i) >= off && uint64(i) < off+uint64(o.size) {
					what = fmt.Sprintf("WR %d (%v of %d bytes, SGEs %v/%v, inline %v), byte %d", k, o.op, o.size,
						o.aCuts, o.bCuts, o.inline, uint64(i)-off)
					break
				}
			}
			s.fatalf("QP %d side %s: byte %d is %#02x, want %#02x: in %s; %s", q.idx, c.side, i, c.got[i], c.want[i], what,
				whence(c.got[i:min(i+8, len(c.got))], c.want[i:min(i+8, len(c.want))], initA, initB))
		}
	}
}

// whence says where wrong bytes came from, when they are a copy of initial
// data elsewhere: a message placed at the wrong offset.
func whence(got, want, initA, initB []byte) string {
	msg := fmt.Sprintf("got % x, want % x", got, want)
	if len(got) < 8 {
		return msg
	}
	for _, c := range []struct {
		side string
		b    []byte
	}{{"A", initA}, {"B", initB}} {
		if k := bytes.Index(c.b, got); k >= 0 {
			msg += fmt.Sprintf("; got is side %s's initial data at %d", c.side, k)
		}
	}
	return msg
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// checkAtomics checks that the atomics are linearizable. FETCH_ADDs: the
// returned values, sorted, are the prefix sums of the adds in some order that
// keeps each QP's posting order, and the counter ends at the total. CMP_SWAPs
// (increments of a ticket): the successful ones returned exactly the values
// from the start up to the final one, each once; the failed ones returned a
// value the word held and not their compare value; each QP saw the word in
// nondecreasing order.
func (s *soak) checkAtomics() {
	type res struct {
		qp, wr int
		orig   uint64
		add    uint64
	}
	var adds []res
	var okCAS []res
	var failCAS []res
	for _, q := range s.qps {
		prevAdd, prevCAS := uint64(0), uint64(0)
		for k, o := range q.ops {
			r := res{qp: q.idx, wr: k, orig: o.result, add: o.add}
			switch o.op {
			case WRAtomicFetchAdd:
				if o.result < prevAdd {
					s.fatalf("QP %d WR %d: FETCH_ADD returned %d after %d: not in posting order", q.idx, k, o.result, prevAdd)
				}
				prevAdd = o.result
				adds = append(adds, r)
			case WRAtomicCmpSwp:
				if o.result < prevCAS {
					s.fatalf("QP %d WR %d: CMP_SWAP returned %d after %d: not in posting order", q.idx, k, o.result, prevCAS)
				}
				prevCAS = o.result
				if o.result == o.compare {
					okCAS = append(okCAS, r)
				} else {
					failCAS = append(failCAS, r)
				}
			}
		}
	}
	slices.SortFunc(adds, func(x, y res) int { return cmpU64(x.orig, y.orig) })
	cur := s.add0
	for _, r := range adds {
		if r.orig != cur {
			s.fatalf("FETCH_ADD QP %d WR %d returned %d, want %d (the sum of the adds executed before it): executed twice or lost",
				r.qp, r.wr, r.orig, cur)
		}
		cur += r.add
	}
	if got := binary.NativeEndian.Uint64(s.atomBuf); got != cur {
		s.fatalf("FETCH_ADD counter: got %d, want %d after %d adds", got, cur, len(adds))
	}
	slices.SortFunc(okCAS, func(x, y res) int { return cmpU64(x.orig, y.orig) })
	for i, r := range okCAS {
		if r.orig != s.cas0+uint64(i) {
			s.fatalf("CMP_SWAP QP %d WR %d succeeded on %d, want %d", r.qp, r.wr, r.orig, s.cas0+uint64(i))
		}
	}
	end := s.cas0 + uint64(len(okCAS))
	if got := binary.NativeEndian.Uint64(s.atomBuf[8:]); got != end {
		s.fatalf("CMP_SWAP word: got %d, want %d after %d successful swaps", got, end, len(okCAS))
	}
	for _, r := range failCAS {
		if r.orig < s.cas0 || r.orig > end {
			s.fatalf("failed CMP_SWAP QP %d WR %d returned %d, never the word's value (%d..%d)", r.qp, r.wr, r.orig, s.cas0, end)
		}
	}
	s.t.Logf("atomics: %d FETCH_ADDs, %d of %d CMP_SWAPs succeeded", len(adds), len(okCAS), len(okCAS)+len(failCAS))
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
