// The daemon: its listeners, the device, its goroutines, and the orderly shutdown.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/verbs"
)

// daemon is one running xrnic daemon. Its fields are set before its goroutines
// start and read-only afterwards, but for the session table, guarded by mu.
type daemon struct {
	cfg  config
	pid  int
	comm string
	lg   *logger
	out  *lockedWriter
	l    link.Link   // the first queue's
	ls   []link.Link // every queue's (--queues)
	dev  *verbs.Device

	attach *server.Server // nil without --attach

	mu       sync.Mutex
	sessions map[int]*benchSession // running bench sessions by ID
	nextID   int
	ended    [2]uint64 // sessions that ended: ok, failed
}

// logger writes the daemon's log lines, "xrnic: ...", one whole line at a time.
type logger struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *logger) printf(format string, a ...any) {
	m := fmt.Sprintf(format, a...)
	if !strings.HasPrefix(m, "xrnic: ") {
		m = "xrnic: " + m
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, m)
}

// lockedWriter serialises whole writes to the daemon's standard output.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// closers runs cleanups in reverse order of registration.
type closers []func()

func (c *closers) add(f func()) { *c = append(*c, f) }

func (c *closers) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
	*c = nil
}

// runDaemon runs the daemon until ctx ends (nil) or its interface goes away (an
// error). Everything it opens is opened on the calling goroutine, so in the
// calling thread's network namespace; when it returns, nothing it started is
// running or attached.
func runDaemon(ctx context.Context, c config, out, errOut io.Writer) (err error) {
	d := &daemon{cfg: c, pid: os.Getpid(), comm: filepath.Base(os.Args[0]), lg: &logger{w: errOut},
		out: &lockedWriter{w: out}, sessions: map[int]*benchSession{}}
	if d.comm == "" || strings.HasSuffix(d.comm, ".test") {
		d.comm = "xrnic"
	}
	if _, err := netdev.Lookup(c.iface); err != nil {
		if errors.Is(err, netdev.ErrNoInterface) {
			return fmt.Errorf("interface %s: no such interface in this network namespace", c.iface)
		}
		return fmt.Errorf("interface %s: %w", c.iface, err)
	}
	var cl closers
	defer cl.run()

	// The listeners come first, so that a port in use fails before anything is
	// attached to the interface.
	var metricsLn net.Listener
	var ctl *net.UnixListener
	servers := c.servers
	if c.benchPort > 0 {
		servers = append([]benchCfg{{port: c.benchPort, params: c.bench}}, servers...)
	}
	benchLns := make([]net.Listener, len(servers))
	var benchAddr netip.Addr
	if len(servers) > 0 {
		if benchAddr, err = benchListenAddr(c); err != nil {
			return err
		}
	}
	for i, b := range servers {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(benchAddr, uint16(b.port)).String())
		if err != nil {
			return fmt.Errorf("bench server: couldn't listen on %v port %d: %w", benchAddr, b.port, unwrapOp(err))
		}
		cl.add(func() { ln.Close() })
		benchLns[i] = ln
	}
	if c.metrics != "" {
		if metricsLn, err = net.Listen("tcp", c.metrics); err != nil {
			return fmt.Errorf("metrics: couldn't listen on %s: %w", c.metrics, unwrapOp(err))
		}
		cl.add(func() { metricsLn.Close() })
	}
	if c.control != "" {
		if ctl, err = listenControl(c.control); err != nil {
			return err
		}
		cl.add(func() { ctl.Close() })
	}
	var attachLn *net.UnixListener
	attachCfg := c.attachConfig(d.lg.printf)
	if c.attach != "" {
		if attachLn, err = listenUnix("unixpacket", c.attach); err != nil {
			return fmt.Errorf("attach socket: %w", err)
		}
		cl.add(func() { attachLn.Close() })
		if c.attachGrp != "" {
			if attachCfg.Allow, err = openToGroup(c.attach, c.attachGrp); err != nil {
				return fmt.Errorf("--attach-group: %w", err)
			}
		}
	}

	// The link and the device.
	ls, err := link.OpenQueues(link.Options{Kind: c.kind, Interface: c.iface, Mode: c.mode, Logf: d.lg.printf}, c.queues)
	if err != nil {
		return fmt.Errorf("%s: %w", c.iface, err)
	}
	d.l, d.ls = ls[0], ls
	cl.add(func() {
		var err error
		for _, l := range ls { // the last to close detaches the program
			err = errors.Join(err, l.Close())
		}
		switch {
		case err != nil:
			d.lg.printf("%s: closing the link: %v", c.iface, err)
		case d.l.Info().Kind == link.KindAFXDP:
			d.lg.printf("%s: XDP program detached", c.iface)
		}
	})
	// The engine resolves neighbours in this thread's namespace (a test runs the
	// daemon on a thread that entered one), off the verbs' goroutines.
	o := verbs.Options{Links: ls, Logf: d.lg.printf}
	if c.pcap != "" {
		f, err := os.Create(c.pcap)
		if err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
		cl.add(func() {
			if err := f.Close(); err != nil {
				d.lg.printf("--pcap: %v", err)
			}
		})
		o.Pcap = f
	}
	dev, err := verbs.Open(o)
	if err != nil {
		return fmt.Errorf("device on %s: %w", c.iface, err)
	}
	d.dev = dev
	cl.add(func() {
		if err := dev.Close(); err != nil {
			d.lg.printf("closing %s: %v", dev.Name(), err)
		}
	})

	// QP1 and the IB CM run from the start, as ib_cm's port does with a
	// device: a REQ for a port nobody listens on is refused (REJ, invalid
	// service ID) whether or not a process here has used the CM yet.
	if _, err := dev.CM(cm.Config{}); err != nil {
		return fmt.Errorf("the connection manager on %s: %w", dev.Name(), err)
	}
	if attachLn != nil { // before the control socket's goroutine reads it
		d.attach = server.New(dev, attachCfg)
	}

	// The goroutines. A fatal condition (the interface removed) ends the daemon
	// with an error, as a signal ends it without one.
	ctx, fatal := context.WithCancelCause(ctx)
	defer fatal(nil)
	var wg sync.WaitGroup
	cl.add(wg.Wait)
	if err := d.watchPort(ctx, &wg, fatal); err != nil {
		return err
	}
	var srv *metricsServer
	if metricsLn != nil {
		srv = d.serveMetrics(metricsLn, &wg)
		cl.add(srv.stop)
	}
	if ctl != nil {
		stop := d.serveControl(ctl, &wg)
		cl.add(stop)
	}
	if attachLn != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.attach.Serve(attachLn); err != nil {
				d.lg.printf("attach socket: %v", err)
			}
		}()
		// Closing the listener ends Serve; the sessions end with the server,
		// their objects freed before the device closes.
		cl.add(func() { attachLn.Close(); d.attach.Close() })
	}
	benches := make([]*benchServer, len(servers))
	for i, b := range servers {
		benches[i] = d.serveBench(benchLns[i], b.params)
	}
	if c.interval > 0 {
		wg.Add(1)
		go d.routineInterval(ctx, &wg)
	}
	d.lg.printf("%s", d.readyLine(benches, metricsLn))

	<-ctx.Done()
	cause := context.Cause(ctx)
	if errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		cause = nil
	}
	d.lg.printf("stopping")
	for _, b := range benches {
		b.stop() // no new clients; the sessions' QPs flush and close
	}
	cl.run() // metrics, control, goroutines, device, link, listeners
	return cause
}

// readyLine says what the daemon serves where.
func (d *daemon) readyLine(benches []*benchServer, metricsLn net.Listener) string {
	var b strings.Builder
	info := d.l.Info()
	fmt.Fprintf(&b, "ready: %s on %s (%s link", d.dev.Name(), info.Name, info.Kind)
	if info.Kind == link.KindAFXDP {
		fmt.Fprintf(&b, ", XDP %s mode", d.cfg.mode)
	}
	b.WriteString(")")
	for i, s := range benches {
		if i == 0 {
			b.WriteString("; bench ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s server on TCP port %d", s.p.Test.Name, s.ln.Addr().(*net.TCPAddr).Port)
	}
	if metricsLn != nil {
		fmt.Fprintf(&b, "; metrics on http://%s/metrics", metricsLn.Addr())
	}
	if d.cfg.control != "" {
		fmt.Fprintf(&b, "; control socket %s", d.cfg.control)
	}
	if d.cfg.attach != "" {
		fmt.Fprintf(&b, "; attach socket %s", d.cfg.attach)
	}
	return b.String()
}

// watchPort follows the interface's operational state into the port's
// (QueryPort, EventPortErr/EventPortActive); the interface's removal is fatal.
// The subscription is made here, in the daemon's namespace.
func (d *daemon) watchPort(ctx context.Context, wg *sync.WaitGroup, fatal context.CancelCauseFunc) error {
	info := d.l.Info()
	evs, err := netdev.SubscribeLinkEvents(ctx, info.Index)
	if err != nil {
		return fmt.Errorf("port events of %s: %w", info.Name, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.lg.printf("RoutinePortEvents started on %s", info.Name)
		defer d.lg.printf("RoutinePortEvents stopped")
		up := true
		for ev := range evs {
			switch {
			case ev.Err != nil:
				d.lg.printf("%s: port events end: %v", info.Name, ev.Err)
			case ev.Removed:
				d.dev.SetPortState(false)
				fatal(fmt.Errorf("interface %s was removed", info.Name))
			case ev.Up != up:
				up = ev.Up
				d.dev.SetPortState(up)
				d.lg.printf("%s: port 1 %s", info.Name, d.dev.QueryPort().State)
			}
		}
	}()
	return nil
}

// routineInterval prints the counters every interval.
func (d *daemon) routineInterval(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTicker(d.cfg.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s, err := d.snapshot(); err == nil {
				var b strings.Builder
				formatStatistic(&b, &s, false)
				io.WriteString(d.out, b.String())
			}
		}
	}
}

// unwrapOp drops net.OpError's repetition of the addresses.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}
