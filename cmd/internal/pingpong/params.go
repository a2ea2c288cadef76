// Package pingpong is xrnic's ibv_rc_pingpong: rdma-core's
// libibverbs/examples/rc_pingpong.c (v44) over xrnic's verbs, with its flags,
// its TCP exchange on port 18515, its QP attributes, its ping-pong of SENDs,
// its buffer pattern and check (-c) and its output, byte for byte, so that a
// real ibv_rc_pingpong on Linux Soft-RoCE (rdma_rxe) or RoCE hardware can face
// it as server or as client.
//
// On top of rc_pingpong's -c check (the client looks at one byte per page at
// the end), --chk makes both sides check every received message in full: its
// length must be -s and every byte must be what rc_pingpong's client puts on the
// wire, 0x7b but for a 0 at the start of each page. The first mismatch is
// reported as an error once the run has ended (the peer is not left hanging).
//
// rc_pingpong waits for ever for a completion; bench gives up after --timeout
// without one (the peer died, or the network lost it), with an error.
package pingpong

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
)

// ErrUsage marks a bad command line; the message says what is wrong.
var ErrUsage = errors.New("usage")

type usageError struct{ err error }

func (e *usageError) Error() string {
	return fmt.Sprintf("rc_pingpong: %v (bench rc_pingpong -h lists the options)", e.err)
}

func (e *usageError) Is(target error) bool { return target == ErrUsage }

func (e *usageError) Unwrap() error { return e.err }

// rc_pingpong's defaults.
const (
	DefaultPort    = 18515
	defSize        = 4096
	defMTU         = 1024 // IBV_MTU_1024: rc_pingpong does not use the port's active MTU
	defRxDepth     = 500
	defIters       = 1000
	DefaultTimeout = 10 * time.Second
)

// Params are rc_pingpong's options, after parsing. A plain value.
type Params struct {
	Port       int       // -p: TCP port of the exchange
	Device     string    // -d: the interface xrnic runs on (rc_pingpong: the IB device)
	LinkKind   link.Kind // --link
	IBPort     int       // -i: must be 1
	Size       int       // -s
	MTU        verbs.MTU
	RxDepth    int // -r
	Iters      int // -n
	SL         int // -l: accepted; RoCE v2 carries no SL
	Events     bool
	GIDIndex   int  // -g; -1: none, as rc_pingpong (which RoCE cannot connect)
	Check      bool // -c
	NewSend    bool // -N: the same SEND through ibv_wr_*; same wire, accepted
	ServerName string
	Local      bool          // --local: both sides in this process over lo
	Timeout    time.Duration // --timeout: longest wait for a completion; 0: for ever
	Help       bool

	// LocalServerOut, when set, receives the server's output in a --local run
	// (which otherwise shows only the client's). For tests.
	LocalServerOut io.Writer

	portSet bool
	gidSet  bool
}

// Server reports whether the parameters make this side the server.
func (p *Params) Server() bool { return p.ServerName == "" }

// cnum is an integer flag read as rc_pingpong reads them with strtol(optarg,
// NULL, 0): decimal, 0x hex or 0 octal; but garbage is an error, not 0.
type cnum struct{ v *int }

func (c cnum) String() string { return strconv.Itoa(*c.v) }
func (c cnum) Type() string   { return "int" }
func (c cnum) Set(s string) error {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil || v < math.MinInt32 || v > math.MaxUint32 {
		return fmt.Errorf("%q is not a number", s)
	}
	*c.v = int(v)
	return nil
}

func intVarP(fs *flag.FlagSet, v *int, name, short string, def int, usage string) {
	*v = def
	fs.VarP(cnum{v}, name, short, usage)
}

func newFlagSet(p *Params, mtu *int, odp, iodp, prefetch, ts, dm *bool, lk *string) *flag.FlagSet {
	fs := flag.NewFlagSet("bench rc_pingpong", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	intVarP(fs, &p.Port, "port", "p", DefaultPort, "listen on/connect to port <port>")
	fs.StringVarP(&p.Device, "ib-dev", "d", "", "use interface <dev> (rc_pingpong: IB device)")
	intVarP(fs, &p.IBPort, "ib-port", "i", 1, "use port <port> of the device (xrnic has port 1)")
	intVarP(fs, &p.Size, "size", "s", defSize, "size of message to exchange")
	intVarP(fs, mtu, "mtu", "m", defMTU, "path MTU")
	intVarP(fs, &p.RxDepth, "rx-depth", "r", defRxDepth, "number of receives to post at a time")
	intVarP(fs, &p.Iters, "iters", "n", defIters, "number of exchanges")
	intVarP(fs, &p.SL, "sl", "l", 0, "service level value (no effect on RoCE v2)")
	fs.BoolVarP(&p.Events, "events", "e", false, "sleep on CQ events (default poll)")
	intVarP(fs, &p.GIDIndex, "gid-idx", "g", -1, "local port gid index (RoCE needs one: -g 1 is the IPv4 GID)")
	fs.BoolVarP(odp, "odp", "o", false, "use on demand paging (not supported)")
	fs.BoolVarP(iodp, "iodp", "O", false, "use implicit on demand paging (not supported)")
	fs.BoolVarP(prefetch, "prefetch", "P", false, "prefetch an ODP MR (not supported)")
	fs.BoolVarP(ts, "ts", "t", false, "get CQE with timestamp (not supported)")
	fs.BoolVarP(&p.Check, "chk", "c", false, "validate received buffer (bench: every byte, on both sides)")
	fs.BoolVarP(dm, "dm", "j", false, "use device memory (not supported)")
	fs.BoolVarP(&p.NewSend, "new_send", "N", false, "use new post send WR API (same wire)")
	fs.StringVar(lk, "link", "auto", "link kind: auto (AF_XDP, else UDP), af_xdp or udp")
	fs.BoolVar(&p.Local, "local", false, "run server and client in this process over the UDP link on lo")
	fs.DurationVar(&p.Timeout, "timeout", DefaultTimeout, "give up after this long without a completion (0: wait for ever, as rc_pingpong)")
	fs.BoolVarP(&p.Help, "help", "h", false, "show this help")
	return fs
}

// Parse parses rc_pingpong's command line (without the command name).
func Parse(args []string) (*Params, error) {
	p := &Params{}
	var mtu int
	var odp, iodp, prefetch, ts, dm bool
	var lk string
	fs := newFlagSet(p, &mtu, &odp, &iodp, &prefetch, &ts, &dm, &lk)
	if err := fs.Parse(args); err != nil {
		return nil, &usageError{err}
	}
	if p.Help {
		return p, nil
	}
	if err := p.finish(fs, mtu, odp || iodp, prefetch, ts, dm, lk); err != nil {
		return nil, &usageError{err}
	}
	return p, nil
}

// finish checks the options in rc_pingpong's order where it checks them, and
// what xrnic cannot do.
func (p *Params) finish(fs *flag.FlagSet, mtu int, odp, prefetch, ts, dm bool, lk string) error {
	switch fs.NArg() {
	case 0:
	case 1:
		p.ServerName = fs.Arg(0)
	default:
		return fmt.Errorf("too many arguments %q: give at most the server's address", fs.Args())
	}
	if p.Port < 0 || p.Port > 65535 {
		return fmt.Errorf("port %d outside 0..65535", p.Port)
	}
	p.portSet = fs.Changed("port")
	if p.IBPort < 1 {
		return fmt.Errorf("IB port %d: ports are numbered from 1", p.IBPort)
	}
	var ok bool
	if p.MTU, ok = verbs.MTUFromBytes(mtu); !ok {
		return fmt.Errorf("invalid MTU %d: choose from {256,512,1024,2048,4096}", mtu)
	}
	if odp && dm {
		return errors.New("DM memory region can't be on demand")
	}
	if !odp && prefetch {
		return errors.New("prefetch is valid only with on-demand memory region")
	}
	switch {
	case odp:
		return errors.New("the device isn't ODP capable or does not support RC send and receive with ODP (-o/-O)")
	case ts:
		return errors.New("the device isn't completion timestamp capable (-t)")
	case dm:
		return errors.New("device doesn't support dm allocation (-j)")
	}
	if p.Size < 1 {
		return fmt.Errorf("message size %d: should be at least 1", p.Size)
	}
	if p.RxDepth < 1 {
		return fmt.Errorf("rx depth %d: should be at least 1", p.RxDepth)
	}
	if p.Iters < 1 || p.Iters > math.MaxInt32 {
		return fmt.Errorf("iters %d outside 1..%d", p.Iters, math.MaxInt32)
	}
	if p.Timeout < 0 {
		return fmt.Errorf("--timeout %v must not be negative", p.Timeout)
	}
	k, err := link.ParseKind(lk)
	if err != nil || k == link.KindMemory {
		return fmt.Errorf("--link %q: want auto, af_xdp or udp", lk)
	}
	p.LinkKind = k
	p.gidSet = fs.Changed("gid-idx")
	if p.Local && p.ServerName != "" {
		return errors.New("--local runs both sides: give no server address")
	}
	if !p.Local && p.Device == "" {
		return errors.New("no device: give -d <interface> (or --local to run both sides on lo)")
	}
	if !p.Local && p.GIDIndex < 0 {
		// rc_pingpong would send a zero GID, and neither side could then set the
		// GRH that RoCE needs: both would fail to move their QP to RTR.
		return errors.New("no GID index: RoCE needs one, give -g (-g 1 is the interface's first IPv4 address, as on rxe)")
	}
	return nil
}

// forRole returns a copy of p for one side of a --local run.
func (p *Params) forRole(serverName string) *Params {
	q := *p
	q.Local = false
	q.ServerName = serverName
	return &q
}

// Usage writes the help text.
func Usage(w io.Writer) {
	p := &Params{}
	var mtu int
	var b bool
	var s string
	fs := newFlagSet(p, &mtu, &b, &b, &b, &b, &b, &s)
	fmt.Fprintf(w, "Usage:\n  bench rc_pingpong -d <iface> -g 1            start a server and wait for connection\n")
	fmt.Fprintf(w, "  bench rc_pingpong -d <iface> -g 1 <host>     connect to server at <host>\n")
	fmt.Fprintf(w, "  bench rc_pingpong --local                    both sides in this process over lo (no root)\n\nOptions:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}
