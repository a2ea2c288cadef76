// Command xrnic is the xrnic daemon. Attached to an interface, it opens the NIC's link
// (AF_XDP when the XDP program attaches, else the UDP fallback, saying why) and, until
// the engine arrives, watches the RoCEv2 traffic that reaches it: every frame is
// parsed and its ICRC checked, and per-opcode counts are printed.
//
//	xrnic -i veth0 [--link auto|af_xdp|udp] [--xdp-mode generic|native] [--interval 10s]
//
// SIGINT or SIGTERM detaches the program and exits 0; nothing is left attached.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "xrnic: %v\n", err)
		os.Exit(1)
	}
}

type config struct {
	iface    string
	kind     link.Kind
	mode     bpf.AttachMode
	interval time.Duration
}

func parse(args []string) (config, error) {
	fs := flag.NewFlagSet("xrnic", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	iface := fs.StringP("interface", "i", "", "interface to attach to (required)")
	kind := fs.String("link", "auto", "link: auto, af_xdp or udp")
	mode := fs.String("xdp-mode", "generic", "XDP attach mode: generic or native")
	interval := fs.Duration("interval", 10*time.Second, "how often to print counters (0: only at exit)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	c := config{iface: *iface, interval: *interval}
	if c.iface == "" {
		return c, errors.New("missing -i INTERFACE")
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.kind, err = link.ParseKind(*kind); err != nil || c.kind == link.KindMemory {
		return c, fmt.Errorf("unknown --link %q (want auto, af_xdp or udp)", *kind)
	}
	switch *mode {
	case "generic":
		c.mode = bpf.AttachGeneric
	case "native":
		c.mode = bpf.AttachNative
	default:
		return c, fmt.Errorf("unknown --xdp-mode %q (want generic or native)", *mode)
	}
	if c.interval < 0 {
		return c, fmt.Errorf("negative --interval %s", c.interval)
	}
	return c, nil
}

// counts is what the daemon saw.
type counts struct {
	frames, bytes, malformed, badICRC uint64
	opcodes                           map[wire.Opcode]uint64
}

func (c *counts) print(w io.Writer, l link.Link) {
	fmt.Fprintf(w, "%s link on %s: %d frames, %d bytes, %d malformed, %d bad ICRC\n",
		l.Info().Kind, l.Info().Name, c.frames, c.bytes, c.malformed, c.badICRC)
	ops := make([]wire.Opcode, 0, len(c.opcodes))
	for op := range c.opcodes {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i] < ops[j] })
	for _, op := range ops {
		fmt.Fprintf(w, "  %-40s %d\n", op, c.opcodes[op])
	}
}

// run opens the link in the calling thread's network namespace and watches it until
// ctx ends.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	l, err := link.Open(link.Options{Kind: c.kind, Interface: c.iface, Mode: c.mode,
		Logf: func(f string, a ...any) { fmt.Fprintf(errOut, f+"\n", a...) }})
	if err != nil {
		return err
	}
	defer l.Close()
	go func() {
		<-ctx.Done()
		l.Wake()
	}()
	cnt := counts{opcodes: map[wire.Opcode]uint64{}}
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 9216)
	}
	sizes := make([]int, len(bufs))
	var pkt wire.Packet
	next := time.Now().Add(c.interval)
	for ctx.Err() == nil {
		if err := l.Wait(100 * time.Millisecond); err != nil {
			return err
		}
		n, err := l.ReadBatch(bufs, sizes)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			cnt.frames++
			cnt.bytes += uint64(sizes[i])
			switch err := wire.ParseAndVerify(bufs[i][:sizes[i]], &pkt); {
			case errors.Is(err, wire.ErrBadICRC):
				cnt.badICRC++
			case err != nil:
				cnt.malformed++
			default:
				cnt.opcodes[pkt.Opcode]++
			}
		}
		if c.interval > 0 && time.Now().After(next) {
			cnt.print(out, l)
			next = time.Now().Add(c.interval)
		}
	}
	cnt.print(out, l)
	return nil
}
