// Command xrnic is the xrnic daemon and its introspection commands.
//
//	xrnic -i veth0 [--link auto|af_xdp|udp] [--xdp-mode generic|native]
//	      [--metrics 127.0.0.1:9479] [--bench-port 18515] [--bench-test write_bw]
//	      [--bench-opts "-s 65536"] [--control /run/xrnic/veth0.sock] [--interval 0]
//
// runs an xrnic device on the interface: AF_XDP when the XDP program attaches, else
// the UDP link, saying why. It serves bench's server side (perftest's protocol, TCP
// port 18515) to any number of clients at once, each session with its own PD, MR,
// CQs and QPs. perftest's exchange does not say which test a client runs, so, like
// an ib_write_bw server, the daemon runs one test with one set of options
// (--bench-test, --bench-opts) and its clients must match them: the same test, and
// a message size no larger than the server's (-s, 64 KiB by default).
//
// It exposes Prometheus metrics on --metrics (rxe-named counters per device and
// port; link, XDP program, QP ring and CQ statistics; bench sessions) and answers
// the introspection commands on a unix control socket:
//
//	xrnic statistic [-i IFACE | -s SOCK] [-d]              like `rdma statistic`
//	xrnic resource [show [qp|cq|mr]] [-i IFACE | -s SOCK]  like `rdma resource show`
//
// SIGINT or SIGTERM stops accepting clients, closes the sessions (their QPs flush),
// closes the device, detaches the XDP program and exits 0; nothing stays attached.
// Every failure is one line on stderr, "xrnic: ...", and a non-zero exit.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// A second signal while shutting down ends the process at once; the
		// kernel still detaches the XDP program (a bpf_link dies with its owner).
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "xrnic: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}

// errHelp is returned by the parsers for -h: run prints the usage and succeeds.
var errHelp = errors.New("help requested")

const usage = `usage:
  xrnic -i IFACE [options]                      run the daemon on IFACE
  xrnic statistic [-i IFACE | -s SOCK] [-d]     counters, like rdma statistic
  xrnic resource [show [qp|cq|mr]] [-i IFACE | -s SOCK]
                                                objects, like rdma resource show
  xrnic exec [-i IFACE | --attach SOCK] [--lib DIR] -- PROGRAM [ARGS]
                                                run a libibverbs program on the daemon's device
daemon options:
`

// run runs the daemon, or one introspection command, as the arguments say. The
// daemon runs in the calling thread's network namespace until ctx ends.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) > 0 && args[0] == "exec" {
		return runExec(args[1:], out)
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c, err := parseClient(args)
		if errors.Is(err, errHelp) {
			io.WriteString(out, usage[:strings.Index(usage, "daemon options:")])
			return nil
		}
		if err != nil {
			return err
		}
		return runClient(c, out, errOut)
	}
	c, err := parse(args)
	if errors.Is(err, errHelp) {
		io.WriteString(out, usage)
		io.WriteString(out, daemonFlags(&config{}).FlagUsages())
		return nil
	}
	if err != nil {
		return err
	}
	return runDaemon(ctx, c, out, errOut)
}
