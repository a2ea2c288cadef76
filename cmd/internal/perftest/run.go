// Running a test: one side over a device and a TCP connection (the order of
// exchanges, prints and measurements of each perftest main), both sides in one
// process over lo (--local), and the progress line.

package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/oob"
	"github.com/xrnic/xrnic/verbs"
)

// Run runs one side of a test as perftest's binary of the same name would, or
// with p.Local both sides, writing perftest's report to out. errw receives the
// link choice and the progress line. Cancelling ctx ends the test: everything
// it opened is closed before Run returns.
func Run(ctx context.Context, p *Params, out, errw io.Writer) error {
	if p.Local {
		return runLocal(ctx, p, out, errw)
	}
	for _, w := range p.Warnings {
		io.WriteString(out, w)
	}
	for _, n := range p.Notes {
		io.WriteString(errw, n)
	}
	dev, closeDev, err := oob.OpenDevice(oob.Device{Interface: p.Device, Kind: p.LinkKind, Pcap: p.Pcap,
		Daemon: p.Daemon, BusyPoll: p.BusyPoll, XDPMode: p.XDPMode, Queues: p.Queues}, errw)
	if err != nil {
		return err
	}
	if err := p.fitUD(localMTU(p, dev).Bytes(), errw); err != nil {
		closeDev()
		return err
	}
	if p.CommRDMACM {
		conn, err := openCM(ctx, p, dev, out)
		if err != nil {
			closeDev()
			return err
		}
		return runConn(ctx, p, out, errw, dev, closeDev, p.Device, conn)
	}
	var c net.Conn
	if p.Listens() {
		var ln net.Listener
		ln, err = net.Listen("tcp", ":"+strconv.Itoa(p.Port))
		if err != nil {
			closeDev()
			return fmt.Errorf("couldn't listen to port %d: %w", p.Port, oob.UnwrapOp(err))
		}
		io.WriteString(out, waitingBanner)
		c, err = oob.Accept(ctx, ln)
		ln.Close()
	} else {
		c, err = oob.Dial(ctx, net.JoinHostPort(p.ServerName, strconv.Itoa(p.Port)), 0)
	}
	if err != nil {
		closeDev()
		return err
	}
	return runConn(ctx, p, out, errw, dev, closeDev, p.Device, NewConn(c, !p.Listens()))
}

// localMTU is this side's MTU before the exchange: the port's, or -m's if smaller.
func localMTU(p *Params, dev *verbs.Device) verbs.MTU {
	cur := dev.QueryPort().ActiveMTU
	if m, ok := verbs.MTUFromBytes(p.MTU); ok && p.MTU != 0 && m < cur {
		cur = m
	}
	return cur
}

// openCM opens the exchange's rdma_cm connection on dev: the server listens on
// the port and waits for the client, the client connects to the server's
// address (an IPv4 one for a host name, as perftest's getaddrinfo asks).
func openCM(ctx context.Context, p *Params, dev *verbs.Device, out io.Writer) (*Conn, error) {
	if p.Listens() {
		l, err := listenCM(dev, uint16(p.Port))
		if err != nil {
			return nil, err
		}
		io.WriteString(out, waitingBanner)
		if err := l.accept(ctx); err != nil {
			return nil, err
		}
		return newCMConn(l, false), nil
	}
	a, err := netip.ParseAddr(p.ServerName)
	if err != nil {
		addrs, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip4", p.ServerName)
		if lerr != nil || len(addrs) == 0 {
			return nil, fmt.Errorf("couldn't resolve %s: %w", p.ServerName, lerr)
		}
		a = addrs[0]
	}
	l, err := dialCM(ctx, dev, netip.AddrPortFrom(a.Unmap(), uint16(p.Port)), 30*time.Second)
	if err != nil {
		return nil, err
	}
	return newCMConn(l, true), nil
}

// runConn runs a side over an open device and connection, and closes both.
func runConn(ctx context.Context, p *Params, out, errw io.Writer, dev *verbs.Device, closeDev func(), name string, c *Conn) (err error) {
	s := &session{ctx: ctx, p: p, out: out, figOut: out, errw: errw, dev: dev, name: name, conn: c, ctxErr: ctx.Err}
	if p.OutputOnly != "" {
		s.out = io.Discard // --output: the figure alone
	}
	stop := context.AfterFunc(ctx, func() {
		s.stop.Store(true)
		c.Close()
	})
	defer func() {
		stop()
		c.Close()
		if p.WaitDestroy > 0 && err == nil {
			select { // --wait_destroy: the resources stay a while
			case <-time.After(time.Duration(p.WaitDestroy) * time.Second):
			case <-ctx.Done():
			}
		}
		s.close()
		c.release()
		closeDev()
		s.unmap()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
	}()
	if progressOn(p, errw) {
		s.progress = startProgress(errw, p.Test.Name)
		defer s.progress.stop()
	}
	if err := s.setup(); err != nil {
		return err
	}
	if err := s.flow(); err != nil {
		return s.mismatchHint(err)
	}
	if err := s.limits(); err != nil {
		return err
	}
	if p.DumpBuffer != "" {
		// Both halves of every QP's buffer, from the MR's first byte: what a
		// capture of the run can be checked against (the interop suite does).
		if err := os.WriteFile(p.DumpBuffer, s.buf, 0o644); err != nil {
			return fmt.Errorf("--dump_buffer: %w", err)
		}
	}
	return nil
}

// mismatchHint names the likely cause when a run breaks off after the
// exchange of versions: perftest's exchange carries neither the test nor its
// options, so a peer running another test (or -c, -b, -q) shows only as a
// handshake that never comes or a first completion in error.
func (s *session) mismatchHint(err error) error {
	if s.ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return err
	}
	p := s.p
	opts := "-c " + p.Conn.String()
	if p.Duplex {
		opts += " -b"
	}
	if p.QPs > 1 {
		opts += fmt.Sprintf(" -q %d", p.QPs)
	}
	return fmt.Errorf("%w (is the other side running %s with %s too? perftest's exchange does not say)", err, p.Test.Name, opts)
}

// flow runs the test's exchange and measurement.
func (s *session) flow() error {
	p := s.p
	switch {
	case p.Test.Kind == BW && p.Test.Verb == VerbSend:
		return s.flowSendBW()
	case p.Test.Kind == BW:
		return s.flowRDMABW()
	case p.Test.Verb == VerbWrite:
		return s.flowWriteLat()
	case p.Test.Verb == VerbSend:
		return s.flowSendLat()
	}
	return s.flowReadLat()
}

// sizes are the message sizes of the run: -s, or with -a 2..2^23 (UD: up to
// the MTU, perftest's size_max_pow; setup lowered Size to it).
func (s *session) sizes() []uint64 {
	if !s.p.All {
		return []uint64{s.p.Size}
	}
	var v []uint64
	for i := 1; i < 24 && uint64(1)<<i <= s.p.Size; i++ {
		v = append(v, 1<<i)
	}
	return v
}

// prelude is the common part from the test information to the last handshake
// before the measurement. extraFirst adds the latency tests' leading handshake;
// syncAfterConnect puts SEND tests' handshake between connect and the address
// lines instead of after them.
func (s *session) prelude(extraFirst, sendStyle bool) error {
	PrintTestInfo(s.out, s.p, s.info())
	if extraFirst {
		d, err := s.conn.HandShake(&s.my[0], false)
		if err != nil {
			return err
		}
		s.rem[0] = d
	}
	if err := s.shakeAll(); err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return err
	}
	if sendStyle {
		if err := s.sync(false); err != nil {
			return err
		}
	}
	s.printLocal()
	if err := s.shakeAndPrintRemote(); err != nil {
		return err
	}
	if !sendStyle {
		return s.sync(false) // after the QPs reached RTR
	}
	return nil
}

// writeJSON writes the --out_json file, as perftest rewrites it for each size.
func (s *session) writeJSON(text string) error {
	if !s.p.OutJSON {
		return nil
	}
	if err := os.WriteFile(s.p.OutJSONFile, []byte(text), 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", s.p.OutJSONFile, err)
	}
	return nil
}

func (s *session) printBW(my BWReport, rem *BWReport) error {
	io.WriteString(s.out, s.withCPU(BWLine(s.p.ReportGbits, my, rem)))
	avg, rate := my.Avg, my.MsgRate
	if rem != nil {
		avg, rate = avg+rem.Avg, rate+rem.MsgRate
	}
	switch s.p.OutputOnly {
	case "bandwidth":
		fmt.Fprintf(s.figOut, "%f\n", avg)
	case "message_rate":
		fmt.Fprintf(s.figOut, "%f\n", rate)
	}
	// -w and -y: print_full_bw_report checks the run's total (both sides with -b).
	if s.p.Duplex == (rem != nil) {
		s.belowBW = s.belowBW || s.p.LimitBW > 0 && avg < s.p.LimitBW
		s.belowRate = s.belowRate || s.p.LimitMsgRate > 0 && rate < s.p.LimitMsgRate
	}
	return s.writeJSON(JSONBW(s.p, s.info(), my, rem))
}

// header writes a table's header, with --cpu_util's column in duration mode
// (RESULT_EXT_CPU_UTIL).
func (s *session) header(print func(io.Writer)) {
	if !s.cpuColumn() {
		print(s.out)
		return
	}
	var b strings.Builder
	print(&b)
	io.WriteString(s.out, strings.TrimSuffix(b.String(), "\n")+"    CPU_Util[%]\n")
}

// withCPU adds --cpu_util's figure to a result line (REPORT_EXT_CPU_UTIL).
func (s *session) withCPU(line string) string {
	if !s.cpuColumn() {
		return line
	}
	return strings.TrimSuffix(line, "\n") + fmt.Sprintf("\t    %-3.2f\n", s.lastClock.cpuUtil())
}

func (s *session) cpuColumn() bool { return s.p.CPUUtil && s.p.DurationMode() }

// printBoth is --report-both: after a bidirectional run, each side's results
// apart.
func (s *session) printBoth(my, rem BWReport) {
	if !s.p.ReportBoth || !s.p.Duplex {
		return
	}
	for _, r := range []struct {
		title string
		rep   BWReport
	}{{"Local", my}, {"Remote", rem}} {
		io.WriteString(s.out, resultLine+"\n "+r.title+" results: \n")
		s.header(func(w io.Writer) { PrintBWHeader(w, s.p.ReportGbits) })
		io.WriteString(s.out, BWLine(s.p.ReportGbits, r.rep, nil))
	}
}

// limits is the end of perftest's main: a bandwidth or message rate below -w
// or -y fails the run.
func (s *session) limits() error {
	switch {
	case s.belowBW:
		return errors.New("BW result is below bw limit")
	case s.belowRate:
		return errors.New("msg rate is below msg_rate limit")
	}
	return nil
}

func (s *session) bwReport(r bwResult, size uint64) BWReport {
	return ComputeBW(&r.samples, size, r.n, s.p.CQMod, s.p.NoPeak, s.p.ReportGbits)
}

// flowRDMABW is write_bw, read_bw and atomic_bw.
func (s *session) flowRDMABW() error {
	p := s.p
	if err := s.prelude(false, false); err != nil {
		return err
	}
	s.header(func(w io.Writer) { PrintBWHeader(w, p.ReportGbits) })
	if p.Server() && !p.Duplex {
		// The server waits for the client's run and prints the client's report.
		if err := s.sync(true); err != nil {
			return err
		}
		rem, err := s.conn.XchgBWReports(BWReport{})
		if err != nil {
			return err
		}
		if err := s.printBW(rem, nil); err != nil {
			return err
		}
		if err := s.closeConnection(); err != nil {
			return err
		}
		PrintResultLine(s.out)
		return nil
	}
	var last BWReport
	for _, size := range s.sizes() {
		s.setSendWRs(size)
		if p.Duplex {
			if err := s.sync(false); err != nil {
				return err
			}
		}
		var r bwResult
		err := s.watch(func() (err error) {
			if p.WarmUp {
				if err := s.warmUp(); err != nil {
					return err
				}
			}
			r, err = s.runBW(size)
			return err
		})
		if err != nil {
			return err
		}
		if p.Duplex && p.All {
			// Only -a runs handshake after each size (perftest's RUN_ALL,
			// version >= 4.6); a single size goes straight to the reports.
			if err := s.sync(true); err != nil {
				return err
			}
		}
		last = s.bwReport(r, size)
		if !p.Duplex {
			if err := s.printBW(last, nil); err != nil {
				return err
			}
			continue
		}
		rem, err := s.conn.XchgBWReports(last)
		if err != nil {
			return err
		}
		if err := s.printBW(last, &rem); err != nil {
			return err
		}
		if !p.All {
			s.printBoth(last, rem)
		}
	}
	PrintResultLine(s.out)
	if !p.Server() && !p.Duplex {
		if err := s.sync(false); err != nil {
			return err
		}
		if _, err := s.conn.XchgBWReports(last); err != nil {
			return err
		}
	}
	return s.closeConnection()
}

// flowSendBW is send_bw.
func (s *session) flowSendBW() error {
	p := s.p
	if err := s.prelude(false, true); err != nil {
		return err
	}
	s.header(func(w io.Writer) { PrintBWHeader(w, p.ReportGbits) })
	for _, size := range s.sizes() {
		if !p.Server() || p.Duplex {
			s.setSendWRs(size)
		}
		if p.Server() || p.Duplex {
			if err := s.postRecvs(size); err != nil {
				return err
			}
		}
		if err := s.sync(false); err != nil {
			return err
		}
		var r bwResult
		err := s.watch(func() (err error) {
			switch {
			case p.Duplex:
				r, err = s.runBi(size)
			case p.Server():
				r, err = s.runBWServer(size)
			default:
				r, err = s.runBW(size)
			}
			return err
		})
		if err != nil {
			return err
		}
		my := s.bwReport(r, size)
		if !p.Duplex || p.DurationMode() {
			if err := s.printBW(my, nil); err != nil {
				return err
			}
		} else {
			rem, err := s.conn.XchgBWReports(my)
			if err != nil {
				return err
			}
			if err := s.printBW(my, &rem); err != nil {
				return err
			}
			if !p.All {
				s.printBoth(my, rem)
			}
		}
		if p.All {
			if err := s.sync(true); err != nil {
				return err
			}
		}
	}
	PrintResultLine(s.out)
	return s.closeConnection()
}

// printLat prints one latency result (print_report_lat or its duration form).
func (s *session) printLat(r latResult, size uint64) error {
	p := s.p
	rtt := p.Test.Verb != VerbRead && p.Test.Verb != VerbAtomic
	if p.DurationMode() {
		io.WriteString(s.out, s.withCPU(LatDurLine(size, r.iters, r.sampleNs, rtt)))
		return s.writeJSON(JSONLatDur(p, s.info(), size, r.iters, r.sampleNs, rtt))
	}
	rep, unsorted, sorted := ComputeLat(r.posted, size, r.iters, rtt)
	if p.Cycles {
		// -C: the same figures in CPU cycles, under the same header, as
		// perftest prints them.
		rep = rep.scaled(s.mhz)
		for i := range unsorted {
			unsorted[i] *= s.mhz
		}
		for i := range sorted {
			sorted[i] *= s.mhz
		}
	}
	if p.Unsorted {
		PrintSamples(s.out, unsorted)
	}
	if p.Histogram {
		PrintSamples(s.out, sorted)
	}
	if p.Unsorted || p.Histogram {
		PrintLatHeader(s.out, false)
	}
	io.WriteString(s.out, LatLine(rep))
	if p.OutputOnly == "latency" {
		fmt.Fprintf(s.figOut, "%f\n", rep.Avg)
	}
	return s.writeJSON(JSONLat(p, s.info(), rep))
}

// flowWriteLat is write_lat: both sides measure and print.
func (s *session) flowWriteLat() error {
	if err := s.prelude(true, false); err != nil {
		return err
	}
	s.setSendWRs(s.p.Size)
	s.header(func(w io.Writer) { PrintLatHeader(w, s.p.DurationMode()) })
	for _, size := range s.sizes() {
		s.w.sge[0].Length = uint32(size)
		var r latResult
		err := s.watch(func() (err error) { r, err = s.runLatWrite(size); return err })
		if err != nil {
			return err
		}
		if err := s.printLat(r, size); err != nil {
			return err
		}
	}
	PrintResultLine(s.out)
	return s.conn.Close()
}

// flowReadLat is read_lat and atomic_lat: only the client measures.
func (s *session) flowReadLat() error {
	if err := s.prelude(true, false); err != nil {
		return err
	}
	if s.p.Server() {
		if err := s.closeConnection(); err != nil {
			return err
		}
		PrintResultLine(s.out)
		return nil
	}
	s.header(func(w io.Writer) { PrintLatHeader(w, s.p.DurationMode()) })
	s.setSendWRs(s.p.Size)
	for _, size := range s.sizes() {
		s.w.sge[0].Length = uint32(size)
		var r latResult
		err := s.watch(func() (err error) { r, err = s.runLat(); return err })
		if err != nil {
			return err
		}
		if err := s.printLat(r, size); err != nil {
			return err
		}
	}
	if err := s.closeConnection(); err != nil {
		return err
	}
	PrintResultLine(s.out)
	return nil
}

// flowSendLat is send_lat.
func (s *session) flowSendLat() error {
	if err := s.prelude(false, true); err != nil {
		return err
	}
	s.header(func(w io.Writer) { PrintLatHeader(w, s.p.DurationMode()) })
	s.setSendWRs(s.p.Size)
	for _, size := range s.sizes() {
		s.w.sge[0].Length = uint32(size)
		if err := s.postRecvs(size); err != nil {
			return err
		}
		if err := s.sync(false); err != nil {
			return err
		}
		var r latResult
		err := s.watch(func() (err error) { r, err = s.runLatSend(size); return err })
		if err != nil {
			return err
		}
		if err := s.printLat(r, size); err != nil {
			return err
		}
	}
	PrintResultLine(s.out)
	return s.closeConnection()
}

// Loopback addresses --local tries, server first: 127.0.0.1/127.0.0.2, then
// other pairs in 127/8 when port 4791 is taken there.
var localPairs = [][2]string{
	{"127.0.0.1", "127.0.0.2"}, {"127.0.0.3", "127.0.0.4"}, {"127.0.0.5", "127.0.0.6"},
	{"127.0.1.1", "127.0.1.2"}, {"127.0.2.1", "127.0.2.2"}, {"127.0.3.1", "127.0.3.2"},
}

// runLocal runs the server in a goroutine and the client here, each on a UDP
// link on lo, exchanging over TCP on 127.0.0.1 (an ephemeral port unless -p
// was given). The client's report goes to out; the server's is dropped.
func runLocal(ctx context.Context, p *Params, out, errw io.Writer) error {
	for _, w := range p.Warnings {
		io.WriteString(out, w)
	}
	for _, n := range p.Notes {
		io.WriteString(errw, n)
	}
	srvSide, cliSide, err := oob.OpenLoopbackDevices(localPairs)
	if err != nil {
		return fmt.Errorf("--local: %w", err)
	}
	ds, dc, addrs := srvSide.Dev, cliSide.Dev, [2]netip.Addr{srvSide.Addr, cliSide.Addr}
	closeS, closeC := srvSide.Close, cliSide.Close
	port := 0
	if p.portSet {
		port = p.Port
	}
	sp := p.forRole(true, "")
	cp := p.forRole(false, addrs[0].String())
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var serr error
	var accept func() (*Conn, error)
	var dial func() (*Conn, error)
	if p.CommRDMACM {
		l, err := listenCM(ds, uint16(port))
		if err != nil {
			closeS()
			closeC()
			return err
		}
		cp.Port = int(l.Port())
		accept = func() (*Conn, error) {
			if err := l.accept(sctx); err != nil {
				return nil, err
			}
			return newCMConn(l, false), nil
		}
		dial = func() (*Conn, error) { return openCM(ctx, cp, dc, io.Discard) }
	} else {
		ln, err := net.Listen("tcp", net.JoinHostPort(addrs[0].String(), strconv.Itoa(port)))
		if err != nil {
			closeS()
			closeC()
			return fmt.Errorf("couldn't listen to port %d: %w", port, oob.UnwrapOp(err))
		}
		cp.Port = ln.Addr().(*net.TCPAddr).Port
		accept = func() (*Conn, error) {
			c, err := oob.Accept(sctx, ln)
			ln.Close()
			if err != nil {
				return nil, err
			}
			return NewConn(c, false), nil
		}
		dial = func() (*Conn, error) {
			c, err := oob.Dial(ctx, ln.Addr().String(), 0)
			if err != nil {
				return nil, err
			}
			return NewConn(c, true), nil
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := accept()
		if err != nil {
			closeS()
			serr = err
			return
		}
		serr = runConn(sctx, sp, io.Discard, io.Discard, ds, closeS, "lo", c)
	}()
	c, err := dial()
	if err != nil {
		closeC()
	} else {
		err = runConn(ctx, cp, out, errw, dc, closeC, "lo", c)
	}
	if err != nil {
		cancel()
	}
	wg.Wait()
	switch {
	case err == nil && serr != nil && !errors.Is(serr, context.Canceled):
		return fmt.Errorf("server: %w", serr)
	case err != nil && errors.Is(err, ErrPeer) && serr != nil && !errors.Is(serr, ErrPeer) && !errors.Is(serr, context.Canceled):
		return fmt.Errorf("server: %w", serr)
	}
	return err
}

// progress prints a line on stderr every second while a test runs.
type progress struct {
	n    atomic.Uint64
	done chan struct{}
	wg   sync.WaitGroup
}

func (pr *progress) add(n uint64) {
	if pr != nil {
		pr.n.Add(n)
	}
}

func startProgress(w io.Writer, name string) *progress {
	pr := &progress{done: make(chan struct{})}
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		start := time.Now()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last uint64
		for {
			select {
			case <-pr.done:
				return
			case <-t.C:
				n := pr.n.Load()
				if n != last {
					fmt.Fprintf(w, "bench: %s: %.0f s, %d completions (%d/s)\n", name, time.Since(start).Seconds(), n, n-last)
					last = n
				}
			}
		}
	}()
	return pr
}

func (pr *progress) stop() {
	if pr != nil {
		close(pr.done)
		pr.wg.Wait()
	}
}

// progressOn decides --progress auto: on when stderr is a terminal.
func progressOn(p *Params, errw io.Writer) bool {
	switch p.Progress {
	case "on":
		return true
	case "off":
		return false
	}
	f, ok := errw.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
