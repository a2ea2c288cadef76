// Package pingpong is xrnic's ibv_rc_pingpong, ibv_uc_pingpong,
// ibv_ud_pingpong and ibv_srq_pingpong: rdma-core's
// libibverbs/examples/*_pingpong.c (v44) over xrnic's verbs, each with its flags,
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

type usageError struct {
	kind Kind
	err  error
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%s: %v (bench %s -h lists the options)", e.kind, e.err, e.kind)
}

// Kind is which of rdma-core's examples runs: rc_pingpong, uc_pingpong,
// ud_pingpong or srq_pingpong.
type Kind string

// The examples.
const (
	RC  Kind = "rc_pingpong"
	UC  Kind = "uc_pingpong"
	UD  Kind = "ud_pingpong"
	SRQ Kind = "srq_pingpong"
)

// Kinds are the examples, in the order bench's help lists them.
var Kinds = []Kind{RC, UC, UD, SRQ}

// udGRH is the 40 bytes ud_pingpong keeps before its message for the GRH a UD
// receive gets.
const udGRH = 40

// maxQP is srq_pingpong's MAX_QP: the number of addresses each side sends,
// used or not, and the bound on -q.
const maxQP = 256

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

// Params are the options of one of the examples, after parsing. A plain value.
type Params struct {
	Kind       Kind
	Port       int       // -p: TCP port of the exchange
	Device     string    // -d: the interface xrnic runs on (rc_pingpong: the IB device)
	LinkKind   link.Kind // --link
	IBPort     int       // -i: must be 1
	Size       int       // -s
	MTU        verbs.MTU
	RxDepth    int // -r
	Iters      int // -n
	NumQP      int // srq_pingpong's -q; 1 for the others
	SL         int // -l: accepted; RoCE v2 carries no SL
	Events     bool
	GIDIndex   int  // -g; -1: none, as rc_pingpong (which RoCE cannot connect)
	Check      bool // -c
	NewSend    bool // -N: the same SEND through ibv_wr_*; same wire, accepted
	ServerName string
	Local      bool          // --local: both sides in this process over lo
	Pcap       string        // --pcap: every frame of the device to a pcap file
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

// The examples' own defaults where they differ from rc_pingpong's.
const (
	defSizeUD = 1024 // ud_pingpong's size (its usage says 2048)
	defNumQP  = 16   // srq_pingpong's num_qp
)

// extra are the flags only some examples have, and what xrnic refuses.
type extra struct {
	mtu                         int
	odp, iodp, prefetch, ts, dm bool
	lk                          string
}

func newFlagSet(p *Params, x *extra) *flag.FlagSet {
	k := p.Kind
	fs := flag.NewFlagSet("bench "+string(k), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	intVarP(fs, &p.Port, "port", "p", DefaultPort, "listen on/connect to port <port>")
	fs.StringVarP(&p.Device, "ib-dev", "d", "", "use interface <dev> (the examples: IB device)")
	intVarP(fs, &p.IBPort, "ib-port", "i", 1, "use port <port> of the device (xrnic has port 1)")
	size := defSize
	if k == UD {
		size = defSizeUD
	}
	intVarP(fs, &p.Size, "size", "s", size, "size of message to exchange")
	if k != UD {
		intVarP(fs, &x.mtu, "mtu", "m", defMTU, "path MTU")
	}
	if k == SRQ {
		intVarP(fs, &p.NumQP, "num-qp", "q", defNumQP, "number of QPs to use")
	}
	intVarP(fs, &p.RxDepth, "rx-depth", "r", defRxDepth, "number of receives to post at a time")
	intVarP(fs, &p.Iters, "iters", "n", defIters, "number of exchanges")
	intVarP(fs, &p.SL, "sl", "l", 0, "service level value (no effect on RoCE v2)")
	fs.BoolVarP(&p.Events, "events", "e", false, "sleep on CQ events (default poll)")
	intVarP(fs, &p.GIDIndex, "gid-idx", "g", -1, "local port gid index (RoCE needs one: -g 1 is the IPv4 GID)")
	if k == RC || k == SRQ {
		fs.BoolVarP(&x.odp, "odp", "o", false, "use on demand paging (not supported)")
	}
	if k == RC {
		fs.BoolVarP(&x.iodp, "iodp", "O", false, "use implicit on demand paging (not supported)")
		fs.BoolVarP(&x.prefetch, "prefetch", "P", false, "prefetch an ODP MR (not supported)")
		fs.BoolVarP(&x.ts, "ts", "t", false, "get CQE with timestamp (not supported)")
	}
	fs.BoolVarP(&p.Check, "chk", "c", false, "validate received buffer (bench: every byte, on both sides)")
	if k == RC {
		fs.BoolVarP(&x.dm, "dm", "j", false, "use device memory (not supported)")
		fs.BoolVarP(&p.NewSend, "new_send", "N", false, "use new post send WR API (same wire)")
	}
	fs.StringVar(&x.lk, "link", "auto", "link kind: auto (AF_XDP, else UDP), af_xdp, udp, or udp-gso (UDP with GSO and GRO: faster, for peers that receive through sockets; not towards an XDP program on veth, nor from an IPv4 peer that numbers its packets, as rxe does)")
	fs.BoolVar(&p.Local, "local", false, "run server and client in this process over the UDP link on lo")
	fs.StringVar(&p.Pcap, "pcap", "", "record every frame this side sends and receives to a pcap file, as ibdump does (not with --local)")
	fs.DurationVar(&p.Timeout, "timeout", DefaultTimeout, "give up after this long without a completion (0: wait for ever, as the examples)")
	fs.BoolVarP(&p.Help, "help", "h", false, "show this help")
	return fs
}

// Parse parses the command line of example k (without the command name).
func Parse(k Kind, args []string) (*Params, error) {
	p := &Params{Kind: k, NumQP: 1}
	var x extra
	x.mtu = defMTU
	fs := newFlagSet(p, &x)
	if err := fs.Parse(args); err != nil {
		return nil, &usageError{k, err}
	}
	if p.Help {
		return p, nil
	}
	if err := p.finish(fs, &x); err != nil {
		return nil, &usageError{k, err}
	}
	return p, nil
}

// finish checks the options in the example's order where it checks them, and
// what xrnic cannot do.
func (p *Params) finish(fs *flag.FlagSet, x *extra) error {
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
	if p.MTU, ok = verbs.MTUFromBytes(x.mtu); !ok {
		return fmt.Errorf("invalid MTU %d: choose from {256,512,1024,2048,4096}", x.mtu)
	}
	odp := x.odp || x.iodp
	if odp && x.dm {
		return errors.New("DM memory region can't be on demand")
	}
	if !odp && x.prefetch {
		return errors.New("prefetch is valid only with on-demand memory region")
	}
	switch {
	case odp && p.Kind == SRQ:
		return errors.New("the device isn't ODP capable or does not support RC send, receive and srq with ODP (-o)")
	case odp:
		return errors.New("the device isn't ODP capable or does not support RC send and receive with ODP (-o/-O)")
	case x.ts:
		return errors.New("the device isn't completion timestamp capable (-t)")
	case x.dm:
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
	if p.Kind == SRQ {
		if p.NumQP < 1 {
			return fmt.Errorf("num_qp %d: should be at least 1", p.NumQP)
		}
		if p.NumQP > p.RxDepth {
			return fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", p.RxDepth, p.NumQP)
		}
		if p.NumQP >= maxQP {
			return fmt.Errorf("num_qp %d must be less than %d", p.NumQP, maxQP-1)
		}
	}
	if p.Timeout < 0 {
		return fmt.Errorf("--timeout %v must not be negative", p.Timeout)
	}
	k, err := link.ParseKind(x.lk)
	if err != nil || k == link.KindMemory {
		return fmt.Errorf("--link %q: want auto, af_xdp, udp or udp-gso", x.lk)
	}
	p.LinkKind = k
	p.gidSet = fs.Changed("gid-idx")
	if p.Local && p.ServerName != "" {
		return errors.New("--local runs both sides: give no server address")
	}
	if p.Local && p.Pcap != "" {
		return errors.New("--pcap records one device: give -d <interface>, not --local")
	}
	if !p.Local && p.Device == "" {
		return errors.New("no device: give -d <interface> (or --local to run both sides on lo)")
	}
	if !p.Local && p.GIDIndex < 0 {
		// The example would send a zero GID, and neither side could then set
		// the GRH that RoCE needs: both would fail to move their QP to RTR.
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

// Usage writes the help text of example k.
func Usage(w io.Writer, k Kind) {
	p := &Params{Kind: k}
	fs := newFlagSet(p, &extra{})
	fmt.Fprintf(w, "Usage:\n  bench %s -d <iface> -g 1            start a server and wait for connection\n", k)
	fmt.Fprintf(w, "  bench %s -d <iface> -g 1 <host>     connect to server at <host>\n", k)
	fmt.Fprintf(w, "  bench %s --local                    both sides in this process over lo (no root)\n\nOptions:\n", k)
	fs.SetOutput(w)
	fs.PrintDefaults()
}
