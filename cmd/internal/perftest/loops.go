// The measurement loops, after perftest_resources.c: run_iter_bw,
// run_iter_bw_server, run_iter_bi, run_iter_lat_write, run_iter_lat and
// run_iter_lat_send. Everything they touch is allocated before they start; the
// loops themselves do not allocate. They poll without sleeping, but yield the
// processor when a poll finds nothing, so that the engine goroutines get a CPU
// on a small machine.

package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xrnic/xrnic/internal/spin"
	"github.com/xrnic/xrnic/verbs"
)

// Duration-mode states (perftest's START_STATE ... END_STATE).
const (
	stStart int32 = iota
	stSample
	stStopSample
	stEnd
)

// durClock is the SIGALRM state machine of duration mode: margin seconds of
// warm-up, then the sample, then margin seconds more. Its fields are atomics
// written by its goroutine and read by the loop.
type durClock struct {
	state      atomic.Int32
	start, end atomic.Int64 // ns since the loop's base: the sample's bounds
	done       chan struct{}
	exited     chan struct{}
	cpu        [2]cpuStat // --cpu_util: at the sample's start and stop; read once exited
}

// cpuStat is what perftest's get_cpu_stats takes of /proc/stat's first line:
// the user time and the idle time, in ticks.
type cpuStat struct{ user, idle int64 }

func readCPUStat() cpuStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle ...
	if len(f) < 5 {
		return cpuStat{}
	}
	u, _ := strconv.ParseInt(f[1], 10, 64)
	i, _ := strconv.ParseInt(f[4], 10, 64)
	return cpuStat{u, i}
}

// cpuUtil is calc_cpu_util: user time over user and idle time, in percent, of
// the sample; 0 when there is none. Call it once the clock has stopped.
func (d *durClock) cpuUtil() float64 {
	if d == nil {
		return 0
	}
	u, i := d.cpu[1].user-d.cpu[0].user, d.cpu[1].idle-d.cpu[0].idle
	if u+i <= 0 {
		return 0
	}
	return float64(u) / float64(u+i) * 100
}

// startDuration starts the session's clock for a run; --cpu_util reads the
// processor's times as the sample starts and stops.
func (s *session) startDuration(base time.Time) *durClock {
	d := startDuration(base, s.p.Duration, s.p.Margin, s.p.CPUUtil)
	s.lastClock = d
	return d
}

func startDuration(base time.Time, duration, margin int, cpu bool) *durClock {
	d := &durClock{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(d.exited)
		wait := func(sec int) bool {
			if sec <= 0 {
				return true
			}
			t := time.NewTimer(time.Duration(sec) * time.Second)
			defer t.Stop()
			select {
			case <-t.C:
				return true
			case <-d.done:
				return false
			}
		}
		if !wait(margin) {
			return
		}
		d.start.Store(int64(time.Since(base)))
		if cpu {
			d.cpu[0] = readCPUStat()
		}
		d.state.Store(stSample)
		if !wait(duration - 2*margin) {
			return
		}
		d.end.Store(int64(time.Since(base)))
		if cpu {
			d.cpu[1] = readCPUStat()
		}
		d.state.Store(stStopSample)
		if !wait(margin) {
			return
		}
		d.state.Store(stEnd)
	}()
	return d
}

func (d *durClock) ended() bool { return d != nil && d.state.Load() == stEnd }

func (d *durClock) sampling() bool { return d != nil && d.state.Load() == stSample }

func (d *durClock) stop() {
	if d != nil {
		close(d.done)
		<-d.exited
	}
}

// wrs are the work requests of a run, built by setSendWRs (ctx_set_send_reg_wqes).
type wrs struct {
	send    []verbs.SendWR
	sge     []verbs.SGE
	myAddr  []uint64
	remAddr []uint64
	recv    []verbs.RecvWR
	rsge    []verbs.SGE
	rxAddr  []uint64
	wc      [pollBatch]verbs.WC
	scnt    []uint64
	ccnt    []uint64
	rcnt    []uint64
	rposted []uint64
	unused  []uint64
}

// inc is INC(size, cache_line_size): how far consecutive messages lie apart.
func (s *session) inc(size uint64) uint64 {
	cl := uint64(s.cacheLine)
	if size > cl {
		return uint64(roundUp(int(size), int(cl)))
	}
	return cl
}

// cycles reports whether the addresses walk the cycle buffer (size <= cycle/2).
func (s *session) cycles(size uint64) bool { return size <= uint64(s.cycleBuffer)/2 }

// advance is increase_loc_addr / increase_rem_addr.
func (s *session) advance(addr *uint64, size, cnt, prim uint64) {
	inc := s.inc(size)
	*addr += inc
	if (cnt+1)%(uint64(s.cycleBuffer)/inc) == 0 {
		*addr = prim
	}
}

func (s *session) setSendWRs(size uint64) {
	p := s.p
	n, pl := p.QPs, p.PostList
	w := &s.w
	w.send = make([]verbs.SendWR, n*pl)
	w.sge = make([]verbs.SGE, n*pl)
	w.myAddr = make([]uint64, n)
	w.remAddr = make([]uint64, n)
	w.scnt = make([]uint64, n)
	w.ccnt = make([]uint64, n)
	walk := p.Test.Kind == BW && s.cycles(size)
	for i := range n {
		w.myAddr[i] = s.addr(s.sendOff(i))
		w.remAddr[i] = s.rem[i].VAddr
		for j := range pl {
			k := i*pl + j
			w.sge[k] = s.sge(i, s.sendOff(i), uint32(size))
			wr := &w.send[k]
			wr.WRID = uint64(i)
			wr.SGL = w.sge[k : k+1]
			if p.CQMod == 1 || pl > 1 && (j+1)%p.CQMod == 0 {
				wr.Flags = verbs.SendSignaled
			}
			switch p.Test.Verb {
			case VerbWrite:
				wr.Opcode = verbs.WRRDMAWrite
			case VerbRead:
				wr.Opcode = verbs.WRRDMARead
			case VerbSend:
				wr.Opcode = verbs.WRSend
			case VerbAtomic:
				wr.Opcode = verbs.WRAtomicFetchAdd
				wr.CompareAdd = atomicAdd
				if p.AtomicType == CmpAndSwap {
					wr.Opcode = verbs.WRAtomicCmpSwp
					wr.CompareAdd, wr.Swap = 0, atomicSwap
				}
			}
			if p.Test.Verb != VerbSend {
				wr.RemoteAddr, wr.RKey = s.rem[i].VAddr, s.rem[i].RKey
			}
			if j > 0 && walk {
				// A list's WRs lie one after another (ctx_set_send_reg_wqes).
				w.sge[k].Addr = w.sge[k-1].Addr
				s.advance(&w.sge[k].Addr, size, uint64(j-1), w.myAddr[i])
				if p.Test.Verb != VerbSend {
					wr.RemoteAddr = w.send[k-1].RemoteAddr
					s.advance(&wr.RemoteAddr, size, uint64(j-1), w.remAddr[i])
				}
			}
			if i < len(s.ud) {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ud[i].ah, s.ud[i].qpn, s.ud[i].qkey
			}
			if (p.Test.Verb == VerbSend || p.Test.Verb == VerbWrite) && size <= uint64(s.inline) {
				wr.Flags |= verbs.SendInline
			}
		}
	}
}

// postRecvs is ctx_set_recv_wqes: rx_depth receives of size bytes per QP
// (with an SRQ, rx_depth/QPs for each QP's slot), in lists of
// --recv_post_list.
func (s *session) postRecvs(size uint64) error {
	p := s.p
	n, rpl := p.QPs, p.RecvPostList
	w := &s.w
	w.recv = make([]verbs.RecvWR, n*rpl)
	w.rsge = make([]verbs.SGE, n*rpl)
	w.rxAddr = make([]uint64, n)
	w.rcnt = make([]uint64, n)
	w.rposted = make([]uint64, n)
	w.unused = make([]uint64, n)
	perQP := p.RxDepth / rpl
	if s.srq != nil {
		perQP /= n
	}
	walk := p.Test.Kind == BW && s.cycles(size)
	for i := range n {
		w.rxAddr[i] = s.addr(s.recvOff(i))
		length := uint32(size)
		if p.Conn == ConnUD { // the GRH lands in the cache line before the message
			w.rxAddr[i] += uint64(s.cacheLine - udAddition)
			length += udAddition
		}
		for j := range rpl {
			k := i*rpl + j
			w.rsge[k] = verbs.SGE{Addr: w.rxAddr[i], Length: length, LKey: s.mrOf(i).LKey()}
			if j > 0 && walk {
				w.rsge[k].Addr = w.rsge[k-1].Addr
				s.advance(&w.rsge[k].Addr, size, uint64(j), w.rxAddr[i])
			}
			w.recv[k] = verbs.RecvWR{WRID: uint64(i), SGL: w.rsge[k : k+1]}
		}
		for j := range perQP {
			if err := s.postRecvList(i); err != nil {
				return fmt.Errorf("couldn't post recv QP %d: counter=%d: %w", i, j, err)
			}
			if rpl == 1 && walk {
				s.advance(&w.rsge[i].Addr, size, uint64(j), w.rxAddr[i])
			}
		}
		w.rsge[i*rpl].Addr = w.rxAddr[i]
		w.rposted[i] = uint64(perQP * rpl)
	}
	return nil
}

// postRecvList posts QP slot i's receive list, to the SRQ if there is one.
func (s *session) postRecvList(i int) error {
	rpl := s.p.RecvPostList
	l := s.w.recv[i*rpl : (i+1)*rpl]
	var err error
	if s.srq != nil {
		_, err = s.srq.PostRecv(l)
		counts.srqRecvs.Add(uint64(len(l)))
	} else {
		_, err = s.qps[i].PostRecv(l)
	}
	if len(l) > 1 {
		counts.recvLists.Add(1)
	}
	return err
}

// repost is the receive loops' refill (run_iter_bw_server, run_iter_bi):
// slot q's list goes back once a list's worth of its receives completed.
func (s *session) repost(q int, size uint64, walk bool, more bool) error {
	w, rpl := &s.w, uint64(s.p.RecvPostList)
	w.unused[q]++
	if !more || w.unused[q] < rpl {
		return nil
	}
	if err := s.postRecvList(q); err != nil {
		return fmt.Errorf("couldn't post recv QP %d rcnt=%d: %w", q, w.rcnt[q], err)
	}
	w.unused[q] -= rpl
	if walk && rpl == 1 {
		s.advance(&w.rsge[q].Addr, size, w.rposted[q], w.rxAddr[q])
	}
	w.rposted[q] += rpl
	return nil
}

// wcError describes a completion with an error status.
func wcError(side string, wc *verbs.WC, scnt, ccnt uint64) error {
	return fmt.Errorf("completion with error at %s: %v (status %d, vendor error %#x), wr_id %d, scnt=%d, ccnt=%d",
		side, wc.Status, uint8(wc.Status), wc.VendorErr, wc.WRID, scnt, ccnt)
}

// wcErrorCause is wcError for a completion polled from one of the run's CQs
// that, when it is a flush, adds the error that moved the QP to ERR if the
// other CQ holds it: a loop polling receives first would otherwise report
// only the flush that the send queue's failure caused.
func (s *session) wcErrorCause(wc *verbs.WC, scnt, ccnt uint64) error {
	err := wcError(s.side(), wc, scnt, ccnt)
	if wc.Status != verbs.WCWRFlushErr {
		return err
	}
	var more [pollBatch]verbs.WC
	for _, c := range []*verbs.CQ{s.scq, s.rcq} {
		for n := c.Poll(more[:]); n > 0; n = c.Poll(more[:]) {
			for i := range more[:n] {
				if w := &more[i]; w.Status != verbs.WCSuccess && w.Status != verbs.WCWRFlushErr {
					return fmt.Errorf("%w; the cause, on QP %#x: %v (status %d, vendor error %#x), wr_id %d",
						err, w.QPN, w.Status, uint8(w.Status), w.VendorErr, w.WRID)
				}
			}
		}
	}
	return err
}

func (s *session) side() string {
	if s.p.Server() {
		return "server"
	}
	return "client"
}

// postSend posts one WR, waiting while the send queue is full (unsignaled WRs
// leave it as their ACKs arrive).
func (s *session) postSend(i int) error {
	pl := s.p.PostList
	l := s.w.send[i*pl : (i+1)*pl]
	for {
		n, err := s.qps[i].PostSend(l)
		if err == nil {
			s.spin.Found()
			if pl > 1 {
				counts.sendLists.Add(1)
			}
			return nil
		}
		if !errors.Is(err, verbs.ErrQueueFull) {
			return fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", i, s.w.scnt[i], err)
		}
		l = l[n:] // a list goes in as far as the queue has room
		if s.halted() {
			return s.aborted()
		}
		s.spin.Idle() // the engine that takes the ACKs may want this CPU
		runtime.Gosched()
	}
}

// bwResult is what a bandwidth loop measured.
type bwResult struct {
	samples BWSamples
	n       uint64 // messages the report counts
}

func newSamples(n uint64, noPeak bool) BWSamples {
	if noPeak || n == 0 {
		n = 1
	}
	return BWSamples{Posted: make([]int64, n), Completed: make([]int64, n)}
}

// bwLoop is the state run_iter_bw and run_iter_bi share: the send side's
// counters, the timestamps and the duration clock.
type bwLoop struct {
	s                         *session
	nq                        int
	dur, noPeak, walk, remote bool
	iters, tot, cqMod, tx, pl uint64
	size                      uint64
	res                       bwResult
	base                      time.Time
	dc                        *durClock
	totscnt, totccnt, sampled uint64

	// The software rate limiter (--rate_limit_type SW): bursts of burst WRs,
	// one every gap.
	rate           bool
	gap            time.Duration
	burst, inBurst uint64
	sending        bool
	deadline       time.Time

	rep *infiniteReport // --run_infinitely: no end, a line every period
}

func (s *session) newBWLoop(size uint64) bwLoop {
	p := s.p
	l := bwLoop{s: s, nq: p.QPs, dur: p.DurationMode(), noPeak: p.NoPeak, walk: s.cycles(size),
		remote: p.Test.Verb != VerbSend, iters: p.Iters, cqMod: uint64(p.CQMod), tx: uint64(p.TxDepth), pl: uint64(p.PostList), size: size}
	l.tot = l.iters * uint64(l.nq)
	l.res = bwResult{samples: newSamples(l.tot, p.NoPeak)}
	if p.RateLimitType == "SW" {
		// run_iter_bw's rate_limit_pps, number_of_bursts and gap_time.
		var pps float64
		switch p.RateUnits {
		case "M":
			pps = p.RateLimit / float64(size) * 1048576
		case "g":
			pps = p.RateLimit / float64(size*8) * 1e9
		default:
			pps = p.RateLimit
		}
		l.rate, l.burst = true, uint64(p.BurstSize)
		l.gap = time.Duration(float64(time.Second) * float64(l.burst) / max(pps, 1e-9))
	}
	l.base = time.Now()
	if l.dur {
		l.dc = s.startDuration(l.base)
	} else if l.noPeak {
		l.res.samples.Posted[0] = int64(time.Since(l.base))
	}
	if p.Infinite {
		// run_iter_bw_infinitely: posting as in duration mode, with no clock
		// to end it.
		l.dur, l.rep = true, s.newInfiniteReport()
	}
	return l
}

// postSends keeps every QP at up to tx_depth outstanding WRs, one in cq_mod
// signalled.
func (l *bwLoop) postSends() error {
	s, w := l.s, &l.s.w
	pl := l.pl
	for i := 0; i < l.nq; i++ {
		if l.rate && !l.sending {
			now := time.Now()
			if now.Before(l.deadline) {
				continue // go poll until the gap is over
			}
			l.deadline, l.sending, l.inBurst = now.Add(l.gap), true, 0
		}
		wr := &w.send[i*int(pl)]
		for (w.scnt[i] < l.iters || l.dur) && w.scnt[i]+pl <= l.tx+w.ccnt[i] && (!l.rate || l.sending) {
			// A post list's WRs keep the flags and addresses setSendWRs gave them.
			if pl == 1 && l.cqMod > 1 && w.scnt[i]%l.cqMod == 0 && !(!l.dur && w.scnt[i] == l.iters-1) {
				wr.Flags &^= verbs.SendSignaled
			}
			if !l.noPeak {
				l.res.samples.Posted[l.totscnt] = int64(time.Since(l.base))
			}
			if l.dur && l.dc.ended() {
				break
			}
			if err := s.postSend(i); err != nil {
				return err
			}
			if l.walk && pl == 1 {
				s.advance(&w.sge[i].Addr, l.size, w.scnt[i], w.myAddr[i])
				if l.remote {
					s.advance(&wr.RemoteAddr, l.size, w.scnt[i], w.remAddr[i])
				}
			}
			w.scnt[i] += pl
			l.totscnt += pl
			if l.rate {
				if l.inBurst += pl; l.inBurst >= l.burst {
					l.sending = false
				}
			}
			if pl == 1 && (w.scnt[i]%l.cqMod == l.cqMod-1 || (!l.dur && w.scnt[i] == l.iters-1)) {
				wr.Flags |= verbs.SendSignaled
			}
		}
	}
	return nil
}

// sendsPending says whether send completions are still due.
func (l *bwLoop) sendsPending() bool {
	return l.totccnt < l.tot || (l.dur && l.totccnt < l.totscnt)
}

// reapSends polls the send CQ once; each completion stands for cq_mod WRs.
func (l *bwLoop) reapSends() (int, error) {
	s, w := l.s, &l.s.w
	completed := l.res.samples.Completed
	ne := s.scq.Poll(w.wc[:])
	for k := 0; k < ne; k++ {
		wc := &w.wc[k]
		if wc.Status != verbs.WCStatus(0) {
			return ne, s.wcErrorCause(wc, l.totscnt, l.totccnt)
		}
		q := wc.WRID
		w.ccnt[q] += l.cqMod
		l.totccnt += l.cqMod
		if !l.noPeak {
			if l.totccnt > l.tot {
				completed[l.tot-1] = int64(time.Since(l.base))
			} else {
				completed[l.totccnt-1] = int64(time.Since(l.base))
			}
		}
		if l.dc.sampling() {
			l.sampled += l.cqMod
		}
	}
	s.progress.add(uint64(ne) * l.cqMod)
	return ne, nil
}

// finish returns what was measured (the caller stops the duration clock).
func (l *bwLoop) finish() bwResult {
	l.res.n = l.tot
	if l.dur {
		l.res.samples.Posted[0], l.res.samples.Completed[0] = l.dc.start.Load(), l.dc.end.Load()
		l.res.n = l.sampled
	} else if l.noPeak {
		l.res.samples.Completed[0] = int64(time.Since(l.base))
	}
	return l.res
}

// runBW is run_iter_bw: every QP keeps up to tx_depth WRs outstanding, one in
// cq_mod signalled.
func (s *session) runBW(size uint64) (bwResult, error) {
	l := s.newBWLoop(size)
	defer l.dc.stop()
	for l.totscnt < l.tot || l.totccnt < l.tot || (l.dur && !l.dc.ended()) {
		if err := l.postSends(); err != nil {
			return l.res, err
		}
		if l.sendsPending() {
			ne, err := l.reapSends()
			if err != nil {
				return l.res, err
			}
			if ne == 0 {
				if s.halted() {
					return l.res, s.aborted()
				}
				s.idle(s.scq)
			}
		} else if s.halted() {
			return l.res, s.aborted()
		}
		l.rep.tick(s, size, l.totccnt)
	}
	return l.finish(), nil
}

// infiniteReport prints --run_infinitely's line for the period that ends now:
// the messages completed since the last one (print_bw_infinite_mode).
type infiniteReport struct {
	next, start time.Time
	last        uint64
}

func (s *session) newInfiniteReport() *infiniteReport {
	now := time.Now()
	return &infiniteReport{next: now.Add(time.Duration(s.p.Period) * time.Second), start: now}
}

// tick prints a line once the period is over; count is every message so far.
// A nil report (a run with an end) prints nothing.
func (r *infiniteReport) tick(s *session, size, count uint64) {
	if r == nil {
		return
	}
	now := time.Now()
	if now.Before(r.next) {
		return
	}
	n := count - r.last
	smp := BWSamples{Posted: []int64{0}, Completed: []int64{int64(now.Sub(r.start))}}
	io.WriteString(s.out, BWLine(s.p.ReportGbits, ComputeBW(&smp, size, n, s.p.CQMod, true, s.p.ReportGbits), nil))
	r.last, r.start, r.next = count, now, now.Add(time.Duration(s.p.Period)*time.Second)
}

// serverLate, when set, runs before runBWServer polls: tests make the server
// late with it.
var serverLate func()

// runBWServer is run_iter_bw_server: count receives and post them again; the
// time runs from the first receive.
func (s *session) runBWServer(size uint64) (bwResult, error) {
	p := s.p
	w := &s.w
	nq := p.QPs
	dur := p.DurationMode()
	iters := p.Iters
	tot := iters * uint64(nq)
	res := bwResult{samples: newSamples(1, true)}
	walk := s.cycles(size)
	rpl := uint64(p.RecvPostList)
	base := time.Now()
	alive := s.newAliveCheck(base)
	var dc *durClock
	defer func() { dc.stop() }()
	first := true
	// The time runs from the first receive, as perftest's; but a receiver
	// that polls late (a loaded host deschedules it before its first poll, or
	// between an empty poll and the next) finds messages piled up and would
	// time only their polling: a CI run's UC receiver once reported 133 GB/s.
	// A first poll that fills its batch, or leaves more behind, is late: then
	// the time runs from the last handshake, before which nothing was sent.
	if serverLate != nil {
		serverLate()
	}
	// run_iter_bw_infinitely_server: receive for ever, a line every period.
	var rep *infiniteReport
	if p.Infinite {
		rep = s.newInfiniteReport()
	}
	var rcnt, sampled uint64
	for rep != nil || rcnt < tot || (dur && !dc.ended()) {
		ne := s.rcq.Poll(w.wc[:])
		if ne > 0 && first {
			first = false
			late := ne == len(w.wc) || s.rcq.Len() > 0
			switch {
			case dur:
				dc = s.startDuration(base)
			case late && !s.syncedAt.IsZero():
				res.samples.Posted[0] = int64(s.syncedAt.Sub(base))
			default:
				res.samples.Posted[0] = int64(time.Since(base))
			}
		}
		for k := 0; k < ne; k++ {
			wc := &w.wc[k]
			q := wc.WRID
			if wc.Status != verbs.WCStatus(0) {
				return res, s.wcErrorCause(wc, rcnt, rcnt)
			}
			w.rcnt[q]++
			rcnt++
			if dc.sampling() {
				sampled++
			}
			if err := s.repost(int(q), size, walk, rep != nil || dur || w.rposted[q]+rpl <= iters); err != nil {
				return res, err
			}
		}
		rep.tick(s, size, rcnt)
		if ne == 0 {
			if s.halted() {
				return res, s.aborted()
			}
			if err := alive.check(rcnt, tot); err != nil {
				return res, err
			}
			s.idle(s.rcq)
		} else {
			s.progress.add(uint64(ne))
		}
	}
	res.n = tot
	if dur {
		res.samples.Posted[0], res.samples.Completed[0] = dc.start.Load(), dc.end.Load()
		res.n = sampled
	} else {
		res.samples.Completed[0] = int64(time.Since(base))
	}
	return res, nil
}

// aliveCheck is perftest's check_alive for an unreliable receiver (UD, UC) in
// iterations mode: a lost message is never sent again, so a receiver that got
// nothing new for a whole period (60 s, checked every 60 s) gives up.
type aliveCheck struct {
	on        bool
	next      time.Time
	lastCount uint64
}

// aliveEvery is check_alive's alarm(60).
var aliveEvery = 60 * time.Second

func (s *session) newAliveCheck(now time.Time) aliveCheck {
	on := (s.p.Conn == ConnUD || s.p.Conn == ConnUC) && !s.p.DurationMode() && !s.p.Infinite
	return aliveCheck{on: on, next: now.Add(aliveEvery)}
}

// check is called when a poll found nothing, with the receives so far.
func (a *aliveCheck) check(got, want uint64) error {
	if !a.on || got >= want {
		return nil
	}
	if now := time.Now(); now.After(a.next) {
		if got == a.lastCount {
			return fmt.Errorf("did not get Message for 120 Seconds, exiting.. Total Received=%d, Total Iters Required=%d", got, want)
		}
		a.lastCount, a.next = got, now.Add(aliveEvery)
	}
	return nil
}

// runBi is run_iter_bi for SEND: both sides send as run_iter_bw does and
// receive as run_iter_bw_server does, in one loop; the report counts the sends.
func (s *session) runBi(size uint64) (bwResult, error) {
	w := &s.w
	l := s.newBWLoop(size)
	defer l.dc.stop()
	l.remote = false // as before the loops shared code: only the local address walks here
	rpl := uint64(s.p.RecvPostList)
	alive := s.newAliveCheck(l.base)
	var totrcnt uint64
	for l.totscnt < l.tot || l.totccnt < l.tot || totrcnt < l.tot || (l.dur && !l.dc.ended()) {
		if err := l.postSends(); err != nil {
			return l.res, err
		}
		idle := true
		if totrcnt < l.tot || l.dur {
			ne := s.rcq.Poll(w.wc[:])
			for k := 0; k < ne; k++ {
				wc := &w.wc[k]
				q := wc.WRID
				if wc.Status != verbs.WCStatus(0) {
					return l.res, s.wcErrorCause(wc, l.totscnt, totrcnt)
				}
				w.rcnt[q]++
				totrcnt++
				more := (l.dur || w.rposted[q]+rpl <= l.iters) && !(l.dur && l.dc.ended())
				if err := s.repost(int(q), size, l.walk, more); err != nil {
					return l.res, err
				}
			}
			idle = idle && ne == 0
		}
		if l.sendsPending() {
			ne, err := l.reapSends()
			if err != nil {
				return l.res, err
			}
			idle = idle && ne == 0
		}
		if idle {
			if s.halted() {
				return l.res, s.aborted()
			}
			if err := alive.check(totrcnt, l.tot); err != nil {
				return l.res, err
			}
			s.idle(s.scq, s.rcq)
		}
	}
	return l.finish(), nil
}

// gap is --latency_gap: a spin of that many microseconds before each post,
// outside the measured time, as perftest's.
func (s *session) gap() {
	if s.p.LatencyGap > 0 {
		for end := time.Now().Add(time.Duration(s.p.LatencyGap) * time.Microsecond); time.Now().Before(end); {
		}
	}
}

// warmUp is perform_warm_up: a round of tx_depth WRs on every QP, each
// signalled here, and their completions, before the measurement.
func (s *session) warmUp() error {
	p, w := s.p, &s.w
	pl := p.PostList
	for i := range p.QPs {
		l := w.send[i*pl : (i+1)*pl]
		flags := make([]verbs.SendFlags, pl)
		for j := range l {
			flags[j] = l[j].Flags
			l[j].Flags |= verbs.SendSignaled
		}
		n := 0
		for range max(p.TxDepth/pl, 1) {
			if err := s.postSend(i); err != nil {
				return fmt.Errorf("couldn't post send during warm up: %w", err)
			}
			n += pl
		}
		for n > 0 {
			wc, _, err := s.pollOne(s.scq, nil, nil)
			if err != nil {
				return err
			}
			if wc.Status != verbs.WCStatus(0) {
				return fmt.Errorf("problems with warm up: %w", wcError(s.side(), wc, 0, 0))
			}
			n--
		}
		for j := range l {
			l[j].Flags = flags[j]
		}
	}
	return nil
}

// latResult is what a latency loop measured: post times, or in duration mode the
// exchanges counted in the sample and its length.
type latResult struct {
	posted   []int64
	iters    uint64
	sampleNs int64
}

// nativeLE: the byte order of the word loadByte reads.
var nativeLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// loadByte reads b[i] with an atomic load of its aligned word: the engine
// writes the peer's RDMA WRITE into b while this goroutine watches it, as
// perftest watches the last byte of the message. b must be 4-byte aligned
// (MapAnonymous memory is).
func loadByte(b []byte, i int) byte {
	w := atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[i&^3])))
	sh := uint(i&3) * 8
	if !nativeLE {
		sh = 24 - sh
	}
	return byte(w >> sh)
}

// pollOne polls cq until one completion arrives, the duration ends, or the run
// is halted; ok is false when none arrived. linger, when not nil, gives a peer
// that closed the connection a grace period (see haltedLinger).
func (s *session) pollOne(c *verbs.CQ, dc *durClock, linger *time.Time) (wc *verbs.WC, ok bool, err error) {
	for {
		if c.Poll(s.w.wc[:1]) == 1 {
			return &s.w.wc[0], true, nil
		}
		if dc.ended() {
			return nil, false, nil
		}
		if linger != nil && s.haltedLinger(linger) || linger == nil && s.halted() {
			return nil, false, s.aborted()
		}
		s.idle(c) // -e never comes with -D: a duration run sees its clock end
	}
}

// lingerTime is how long write_lat goes on after the peer closed the
// connection: perftest's write_lat ends without a closing handshake, so a peer
// that finished may close while this side still sees its last message arrive.
const lingerTime = time.Second

// haltedLinger is halted, except that a peer that left is given lingerTime,
// counted from *since (set on the first call that sees it gone).
func (s *session) haltedLinger(since *time.Time) bool {
	if s.stop.Load() {
		return true
	}
	if !s.peerGone.Load() {
		return false
	}
	if since.IsZero() {
		*since = time.Now()
	}
	return time.Since(*since) > lingerTime
}

// runLatWrite is run_iter_lat_write: ping-pong by RDMA WRITE; each side watches
// the last byte of the message the other writes into its buffer.
func (s *session) runLatWrite(size uint64) (latResult, error) {
	p := s.p
	dur := p.DurationMode()
	iters := p.Iters
	res := latResult{posted: make([]int64, max(iters, 1))}
	wr := &s.w.send[0]
	wr.Flags = verbs.SendSignaled
	if size <= uint64(s.inline) {
		wr.Flags |= verbs.SendInline
	}
	postIdx := int(size - 1)
	pollIdx := int(s.recvOff(0) + size - 1)
	server := p.Server()
	base := time.Now()
	var dc *durClock
	if dur {
		dc = s.startDuration(base)
		defer dc.stop()
	}
	var scnt, ccnt, rcnt uint64
	var goneAt time.Time
loop:
	for scnt < iters || ccnt < iters || rcnt < iters || (dur && !dc.ended()) {
		if (rcnt < iters || dur) && !(scnt < 1 && server) {
			rcnt++
			for spins := 0; loadByte(s.buf, pollIdx) != byte(rcnt) && !dc.ended(); spins++ {
				if s.haltedLinger(&goneAt) {
					return res, s.aborted()
				}
				if dur && s.peerGone.Load() {
					break loop // the peer's sample is over: so is ours
				}
				if p.BusyPoll {
					// perftest spins on memory here. Under --busy-poll the
					// spin runs the engine as a CQ poll that finds nothing
					// does; an empty poll takes no completion. On its one
					// P (GOMAXPROCS 1) the other goroutines run when it
					// yields, every spin.Every-th look: a yield at every
					// look lengthened the spin's pass, and with it the wait
					// for the frame (docs/performance.md, "write_lat's
					// spin").
					s.scq.Poll(nil)
					counts.memDrives.Add(1)
					if spins%spin.Every != spin.Every-1 {
						continue
					}
				} else {
					s.spin.Idle() // as a CQ poll that finds nothing does
				}
				runtime.Gosched()
			}
		}
		if scnt < iters || dur {
			s.gap()
			if !dur {
				res.posted[scnt] = int64(time.Since(base))
			}
			scnt++
			s.buf[postIdx] = byte(scnt)
			if err := s.postSend(0); err != nil {
				return res, err
			}
		}
		if dur && dc.ended() {
			break
		}
		if ccnt < iters || dur {
			wc, ok, err := s.pollOne(s.scq, dc, &goneAt)
			if err != nil {
				return res, err
			}
			if ok {
				if wc.Status != verbs.WCStatus(0) {
					return res, wcError(s.side(), wc, scnt, ccnt)
				}
				ccnt++
				s.progress.add(1)
				if dc.sampling() {
					res.iters++
				}
			}
		}
	}
	if dur {
		if dc.state.Load() < stStopSample {
			dc.end.Store(int64(time.Since(base))) // the peer ended the run
		}
		res.sampleNs = dc.end.Load() - dc.start.Load()
	} else {
		res.iters = iters
	}
	return res, nil
}

// runLat is run_iter_lat: READ or atomic, one at a time.
func (s *session) runLat() (latResult, error) {
	p := s.p
	dur := p.DurationMode()
	iters := p.Iters
	res := latResult{posted: make([]int64, max(iters, 1))}
	s.w.send[0].Flags = verbs.SendSignaled
	base := time.Now()
	var dc *durClock
	if dur {
		dc = s.startDuration(base)
		defer dc.stop()
	}
	var scnt uint64
	for scnt < iters || (dur && !dc.ended()) {
		s.gap()
		if !dur {
			res.posted[scnt] = int64(time.Since(base))
		}
		scnt++
		if err := s.postSend(0); err != nil {
			return res, err
		}
		if dur && dc.ended() {
			break
		}
		wc, ok, err := s.pollOne(s.scq, dc, nil)
		if err != nil {
			return res, err
		}
		if ok {
			if wc.Status != verbs.WCStatus(0) {
				return res, wcError(s.side(), wc, scnt, scnt)
			}
			s.progress.add(1)
			if dc.sampling() {
				res.iters++
			}
		}
	}
	if dur {
		res.sampleNs = dc.end.Load() - dc.start.Load()
	} else {
		res.iters = iters
	}
	return res, nil
}

// runLatSend is run_iter_lat_send: ping-pong by SEND; the server receives first.
func (s *session) runLatSend(size uint64) (latResult, error) {
	p := s.p
	dur := p.DurationMode()
	iters := p.Iters
	res := latResult{posted: make([]int64, max(iters, 1))}
	wr := &s.w.send[0]
	wr.Flags = 0
	if size <= uint64(s.inline) {
		wr.Flags |= verbs.SendInline
	}
	client := !p.Server()
	rxDepth := uint64(p.RxDepth)
	base := time.Now()
	var dc *durClock
	defer func() { dc.stop() }()
	var scnt, rcnt uint64
	for scnt < iters || rcnt < iters || (dur && !dc.ended()) {
		if (rcnt < iters || dur) && !(scnt < 1 && client) {
			wc, ok, err := s.pollOne(s.rcq, dc, nil)
			if err != nil {
				return res, err
			}
			if ok {
				if dur && dc == nil {
					dc = s.startDuration(base)
				}
				if wc.Status != verbs.WCStatus(0) {
					return res, wcError(s.side(), wc, scnt, rcnt)
				}
				rcnt++
				s.progress.add(1)
				if dc.sampling() {
					res.iters++
				}
				if dur || rcnt+rxDepth <= iters {
					if err := s.postRecvList(int(wc.WRID)); err != nil {
						return res, fmt.Errorf("couldn't post recv: rcnt=%d: %w", rcnt, err)
					}
				}
			}
		}
		if scnt < iters || (dur && !dc.ended()) {
			s.gap()
			if !dur {
				res.posted[scnt] = int64(time.Since(base))
			}
			scnt++
			poll := false
			if scnt%uint64(p.CQMod) == 0 || (!dur && scnt == iters) {
				poll = true
				wr.Flags |= verbs.SendSignaled
			}
			if err := s.postSend(0); err != nil {
				return res, err
			}
			if poll {
				wc, ok, err := s.pollOne(s.scq, dc, nil)
				if err != nil {
					return res, err
				}
				if ok && wc.Status != verbs.WCStatus(0) {
					return res, wcError(s.side(), wc, scnt, scnt)
				}
				wr.Flags &^= verbs.SendSignaled
			}
		}
		if dur && dc.ended() {
			break
		}
	}
	if dur {
		res.sampleNs = dc.end.Load() - dc.start.Load()
	} else {
		res.iters = iters
	}
	return res, nil
}
