// Command bench is xrnic's perftest: the eight tests of linux-rdma/perftest over
// xrnic's verbs, with perftest's flags, output and out-of-band exchange, so that
// bench can face a real ib_write_bw on another host; and the data-path baseline.
//
//	bench write_bw -d veth0              server: waits for a client on TCP 18515
//	bench write_bw -d veth0 192.0.2.1    client: connects and measures
//	bench write_bw --local               both sides in this process over lo (no root)
//
// The tests are write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat,
// send_lat and atomic_lat (internal/perftest); `bench TEST -h` lists the flags.
//
//	bench rc_pingpong -d veth0 -g 1 [-s SIZE] [-n ITERS] [-c] [server]
//
// is rdma-core's ibv_rc_pingpong (internal/pingpong): its flags, TCP exchange,
// ping-pong of SENDs and output, to face a real ibv_rc_pingpong on rxe; and
// uc_pingpong, ud_pingpong and srq_pingpong likewise. --pcap FILE records
// every frame of the device, both directions, as ibdump does.
//
//	bench link [--sizes 64,1024,4096] [--duration 2s] [--xdp-mode generic|native]
//
// builds two network namespaces joined by a veth pair and floods RoCEv2 frames from
// one to the other, first with the AF_XDP link on both ends, then with the UDP link on
// both ends (the two ways xrnic can be deployed), and reports what the receiver got,
// in the same run. It needs root (namespaces, veth, XDP).
//
//	bench compare [--duration 2s] [--scale 1] [--best-of 1] [--qps 16,256] [--queues 2]
//
// measures, in one run on one veth pair, the baselines (raw AF_XDP with a
// pinned, busy-polling receiver in native and generic XDP, UDP sockets, kernel
// TCP with iperf3, ping-pong round trips) and xrnic's perftest figures, and
// prints each figure as a ratio to its baseline (make bench-compare). Raw
// AF_XDP and the ping-pongs are measured again after xrnic's runs, and the
// better of the two rounds is the bar.
//
// Every failure is one line on stderr, "bench: ...", and a non-zero exit.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/cmd/internal/perftest"
	"github.com/xrnic/xrnic/cmd/internal/pingpong"
	"github.com/xrnic/xrnic/cmd/internal/rping"
	"github.com/xrnic/xrnic/cmd/internal/udaddy"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/testenv"
)

func main() {
	ownProcess = true
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	interrupted := ctx.Err() != nil
	stop()
	if err != nil {
		if interrupted && errors.Is(err, context.Canceled) {
			err = errors.New("interrupted")
		}
		fmt.Fprintf(os.Stderr, "bench: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		if interrupted {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage: bench TEST [options] [server]  (TEST: write_bw, read_bw, send_bw, atomic_bw, " +
	"write_lat, read_lat, send_lat, atomic_lat; bench TEST -h lists the options), bench rc_pingpong|uc_pingpong|ud_pingpong|srq_pingpong [options] [server], bench rping -s|-c [options], bench udaddy [-s server] [options], " +
	"bench link [--sizes 64,1024,4096] [--duration 2s] [--xdp-mode generic|native], or bench compare [--duration 2s] [--scale 1] [--best-of 1] [--qps 16,256] [--queues 2]")

// helpText is what bench, bench -h and bench --help print: the tests.
const helpText = `Usage: bench TEST [options] [server]

perftest's tests, flag for flag (bench TEST -h lists a test's options):
  write_bw, read_bw, send_bw, atomic_bw        bandwidth
  write_lat, read_lat, send_lat, atomic_lat    latency
rdma-core's examples:
  rc_pingpong [options] [server]               ibv_rc_pingpong
  uc_pingpong [options] [server]               ibv_uc_pingpong
  ud_pingpong [options] [server]               ibv_ud_pingpong
  srq_pingpong [options] [server]              ibv_srq_pingpong
  rping -s|-c [options]                        rping (--ndk: over the ndk layer)
  udaddy [-s server] [options]                 udaddy
xrnic's own:
  link [--sizes 64,1024,4096] [--duration 2s] [--xdp-mode generic|native]
                                               the raw data path's baseline
  compare [--duration 2s] [--scale 1]          xrnic against its baselines, one run
`

// run runs one command: a perftest test, an rdma-core example or the link
// baseline.
// No command, -h, --help or help prints the list of them.
func run(ctx context.Context, args []string, out, errw io.Writer) error {
	if len(args) == 0 {
		_, err := io.WriteString(out, helpText)
		return err
	}
	switch args[0] {
	case "-h", "--help", "help":
		_, err := io.WriteString(out, helpText)
		return err
	case "link":
		return runLink(args, out)
	case "compare":
		return runCompare(ctx, args, out, errw)
	case "rc_pingpong", "uc_pingpong", "ud_pingpong", "srq_pingpong":
		return runPingpong(ctx, pingpong.Kind(args[0]), args[1:], out, errw)
	case "rping":
		return runRping(ctx, args[1:], out, errw)
	case "udaddy":
		return runUdaddy(ctx, args[1:], out, errw)
	}
	if _, ok := perftest.LookupTest(args[0]); !ok {
		return fmt.Errorf("unknown test %q (%w)", args[0], errUsage)
	}
	p, err := perftest.Parse(args[0], args[1:])
	if err != nil {
		return err
	}
	switch {
	case p.Help:
		perftest.Usage(out, args[0])
		return nil
	case p.Version:
		fmt.Fprintf(out, "Version: %s\n", perftest.Version)
		return nil
	}
	if ownProcess && p.BusyPoll && !p.Local && os.Getenv("GOMAXPROCS") == "" {
		// Run to completion on one core: the polling goroutine runs the
		// engine, and the engine goroutine, parked, runs when the poller
		// yields. With a second P, Go's scheduler woke threads to look for
		// work and moved the poller between them, each move a context
		// switch: on two cores write_lat --busy-poll's 99 % went from
		// 14-20 us to 6-12 (typical 4.3), bandwidth unhurt.
		runtime.GOMAXPROCS(1)
		fmt.Fprintf(errw, "bench: --busy-poll: GOMAXPROCS %d (one core for the poller and its engine; the GOMAXPROCS variable overrides)\n",
			runtime.GOMAXPROCS(0))
	}
	return perftest.Run(ctx, p, out, errw)
}

// ownProcess: run runs in bench's own process (main), where it may set
// process-wide things such as GOMAXPROCS; tests call run in theirs.
var ownProcess bool

// runPingpong is ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong or
// ibv_srq_pingpong.
func runPingpong(ctx context.Context, k pingpong.Kind, args []string, out, errw io.Writer) error {
	p, err := pingpong.Parse(k, args)
	if err != nil {
		return err
	}
	if p.Help {
		pingpong.Usage(out, k)
		return nil
	}
	return pingpong.Run(ctx, p, out, errw)
}

// runLink is the data-path baseline.
func runRping(ctx context.Context, args []string, out, errw io.Writer) error {
	p, err := rping.Parse(args)
	if err != nil {
		rping.Usage(out)
		return err
	}
	if p.Help {
		rping.Usage(out)
		return nil
	}
	return rping.Run(ctx, p, out, errw)
}

// runUdaddy is udaddy.
func runUdaddy(ctx context.Context, args []string, out, errw io.Writer) error {
	p, err := udaddy.Parse(args)
	if err != nil {
		udaddy.Usage(out)
		return err
	}
	if p.Help {
		udaddy.Usage(out)
		return nil
	}
	return udaddy.Run(ctx, p, out, errw)
}

func runLink(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench link", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sizes := fs.IntSlice("sizes", []int{64, 1024, 4096}, "RoCEv2 payload sizes in bytes")
	dur := fs.Duration("duration", 2*time.Second, "time per measurement")
	mode := fs.String("xdp-mode", "generic", "XDP attach mode: generic or native")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%v (%w)", err, errUsage)
	}
	am, ok := bpf.ParseAttachMode(*mode)
	if !ok {
		return fmt.Errorf("unknown --xdp-mode %q (%w)", *mode, errUsage)
	}
	for _, s := range *sizes {
		if s < 0 || s > 4096 {
			return fmt.Errorf("payload size %d outside 0..4096 (%w)", s, errUsage)
		}
	}
	if *dur <= 0 {
		return fmt.Errorf("--duration %v: not a time (%w)", *dur, errUsage)
	}
	if os.Geteuid() != 0 {
		return errors.New("bench link needs root: it creates namespaces, a veth pair and attaches XDP")
	}
	p, err := testenv.NewVethPair(testenv.PairOptions{Label: "bench", MTU: 4200})
	if err != nil {
		return err
	}
	defer p.Close()
	// Ctrl-C still removes the namespaces.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sig:
			p.Close()
			os.Exit(130)
		case <-done:
		}
	}()

	fmt.Fprintf(out, "veth pair %s (%s) -> %s (%s), MTU 4200, XDP %s mode\n",
		p.B.Name, p.B.NS.Name, p.A.Name, p.A.NS.Name, am)
	fmt.Fprintf(out, "%-9s %-8s %12s %10s %10s\n", "payload", "link", "frames/s", "Gbit/s", "vs udp")
	for _, size := range *sizes {
		var res [2]link.ReceiveResult
		for i, k := range []link.Kind{link.KindAFXDP, link.KindUDP} {
			r, err := measure(p, am, k, size, *dur)
			if err != nil {
				return fmt.Errorf("%d-byte payload, %s link: %w", size, k, err)
			}
			res[i] = r
		}
		for i, k := range []link.Kind{link.KindAFXDP, link.KindUDP} {
			fmt.Fprintf(out, "%-9d %-8s %12.0f %10.3f %9.2fx\n", size, k, res[i].FramesPerSecond(), res[i].Gbps(),
				res[i].FramesPerSecond()/res[1].FramesPerSecond())
		}
	}
	return nil
}

// measure floods B -> A with links of kind k on both ends.
func measure(p *testenv.Pair, am bpf.AttachMode, k link.Kind, size int, dur time.Duration) (link.ReceiveResult, error) {
	tx, err := open(&p.B, am, k)
	if err != nil {
		return link.ReceiveResult{}, err
	}
	defer tx.Close()
	rx, err := open(&p.A, am, k)
	if err != nil {
		return link.ReceiveResult{}, err
	}
	defer rx.Close()
	frame, err := testenv.RoCESendOnly(&p.B, &p.A, false, 0, []byte(strings.Repeat("x", size)))
	if err != nil {
		return link.ReceiveResult{}, err
	}
	return link.MeasureReceive(tx, rx, frame, 0, dur)
}

func open(e *testenv.Endpoint, am bpf.AttachMode, k link.Kind) (l link.Link, err error) {
	err = e.Do(func() (err error) {
		l, err = link.Open(link.Options{Kind: k, Interface: e.Name, Mode: am})
		return err
	})
	return l, err
}
