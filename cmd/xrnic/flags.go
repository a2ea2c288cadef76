// Command lines: the daemon's flags and the introspection commands'.

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/cmd/internal/perftest"
	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/remote"
)

// Defaults of the daemon.
const (
	defaultMetrics   = "127.0.0.1:9479"
	defaultBenchTest = "write_bw"
	controlDir       = "/run/xrnic"
	// The attached processes at once (server.Config.MaxSessions): the
	// default, and the most --attach-max takes.
	defaultAttachMax = 64
	maxAttachMax     = 4096
)

// config is the daemon's command line, checked. A plain value.
type config struct {
	iface     string
	kind      link.Kind
	mode      bpf.AttachMode
	queues    int    // --queues: an engine per receive queue
	metrics   string // listen address; "" = no metrics
	benchPort int    // 0 = no bench server
	bench     *perftest.Params
	servers   []benchCfg // --bench-server: more bench servers, each on its own port
	control   string     // unix socket path; "" = none
	attach    string     // the attach socket's path; "" = none
	attachGrp string     // --attach-group: a group whose processes may attach too
	attachMax int        // --attach-max: processes attached at once
	attachUsr int        // --attach-max-user: of them, one user's; 0 = --attach-max
	interval  time.Duration
	pcap      string // --pcap: record the device's frames here; "" = no

	// The bench servers' exposure (see --bench-listen's help).
	benchListen netip.Addr    // the address they listen on; invalid = the interface's own
	benchLimit  time.Duration // the longest a session runs
	benchAnyGID bool          // clients may announce GIDs other than their address

	// Raw flag values, before checking.
	kindS, modeS, benchTest, benchOpts, benchListenS string
	serverS                                          []string
}

// benchCfg is one more bench server: its port and the server side's options.
type benchCfg struct {
	port   int
	params *perftest.Params
}

// defaultControl is the control socket of the daemon on iface.
func defaultControl(iface string) string { return filepath.Join(controlDir, iface+".sock") }

// DefaultAttach is the attach socket of the daemon on iface (remote.SocketFor).
func defaultAttach(iface string) string { return remote.SocketFor(iface) }

func daemonFlags(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("xrnic", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.StringVarP(&c.iface, "interface", "i", "", "interface to run on (required)")
	fs.StringVar(&c.kindS, "link", "auto", "link: auto (AF_XDP, else UDP), af_xdp, udp, or udp-gso (UDP with GSO and GRO: faster, for peers that receive through sockets; not towards an XDP program on veth, nor from an IPv4 peer that numbers its packets, as rxe does)")
	fs.StringVar(&c.modeS, "xdp-mode", "generic", "XDP attach mode: generic or native")
	fs.IntVar(&c.queues, "queues", 1, "run an engine per receive queue 0..N-1 of the interface, each with its own AF_XDP socket, QPs spread over them by number (af_xdp; on a veth with --xdp-mode native, which alone keeps a frame on its sender's queue)")
	fs.StringVar(&c.metrics, "metrics", defaultMetrics, `Prometheus metrics listen address ("" turns them off)`)
	fs.IntVar(&c.benchPort, "bench-port", perftest.DefaultPort, "TCP port of the bench server (0 turns it off)")
	fs.StringVar(&c.benchTest, "bench-test", defaultBenchTest, "the test the bench server runs for its clients")
	fs.StringVar(&c.benchOpts, "bench-opts", "", `bench options of the server side, as for "bench TEST -d IFACE" (e.g. "-s 1M -q 2")`)
	fs.StringArrayVar(&c.serverS, "bench-server", nil, `one more bench server, TEST:PORT[:OPTIONS] (e.g. "read_bw:18516:-s 1M"); repeatable`)
	fs.StringVar(&c.benchListenS, "bench-listen", "", `address the bench servers listen on (default: the interface's own; "0.0.0.0" or "::" opens them on every interface). They have no authentication: any client that reaches one gets a session with QPs, memory and traffic to its own address, 64 at most, 4 per source address, set up within 5 s and ended after --bench-session-limit`)
	fs.DurationVar(&c.benchLimit, "bench-session-limit", 10*time.Minute, "the longest a bench session runs before the daemon ends it")
	fs.BoolVar(&c.benchAnyGID, "bench-any-gid", false, "let a bench client announce GIDs other than its own address (its test traffic then goes wherever it says)")
	fs.StringVar(&c.control, "control", "", `control socket, mode 0600, for root and the daemon's user only: it shows every session's keys and addresses (default `+controlDir+`/IFACE.sock; "" turns it off)`)
	fs.StringVar(&c.attach, "attach", "", `attach socket, mode 0600, where processes of root and the daemon's user attach to the device (default `+controlDir+`/IFACE.attach; "" turns it off)`)
	fs.StringVar(&c.attachGrp, "attach-group", "", `a group (name or number) whose processes may attach too, as /dev/infiniband's group: the attach socket becomes mode 0660 in that group, and a peer whose groups include it is served (each process still sees only its own objects)`)
	fs.IntVar(&c.attachMax, "attach-max", defaultAttachMax, fmt.Sprintf("processes attached at once, up to %d (each device a process opens is one; more are refused): each holds at most 4096 objects and 256 MiB of rings, all of them together at most half the daemon's descriptors and mappings", maxAttachMax))
	fs.IntVar(&c.attachUsr, "attach-max-user", 0, "of the processes attached at once, the most one user's may be (default: --attach-max); with --attach-group, a smaller one keeps one user from taking every place")
	fs.DurationVar(&c.interval, "interval", 0, "print the counters this often (0: never)")
	fs.StringVar(&c.pcap, "pcap", "", "record every frame the device sends and receives to this pcap file, as ibdump does (tcpdump on the interface misses what XDP redirects)")
	fs.BoolP("help", "h", false, "show this help")
	return fs
}

// parse reads the daemon's command line.
func parse(args []string) (config, error) {
	var c config
	fs := daemonFlags(&c)
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("%v (xrnic -h lists the options)", err)
	}
	if h, _ := fs.GetBool("help"); h {
		return c, errHelp
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (xrnic -h lists the options)", fs.Arg(0))
	}
	if c.iface == "" {
		return c, errors.New("missing -i INTERFACE (xrnic -h lists the options)")
	}
	var err error
	if c.kind, err = link.ParseKind(c.kindS); err != nil || c.kind == link.KindMemory {
		return c, fmt.Errorf("unknown --link %q (want auto, af_xdp, udp or udp-gso)", c.kindS)
	}
	var ok bool
	if c.mode, ok = bpf.ParseAttachMode(c.modeS); !ok {
		return c, fmt.Errorf("unknown --xdp-mode %q (want generic or native)", c.modeS)
	}
	if c.queues < 1 || c.queues > verbs.MaxQueues {
		return c, fmt.Errorf("--queues %d outside 1..%d", c.queues, verbs.MaxQueues)
	}
	if c.queues > 1 && (c.kind != link.KindAFXDP && c.kind != link.KindAuto || c.pcap != "") {
		return c, errors.New("--queues needs an AF_XDP link (--link af_xdp or auto), and no --pcap")
	}
	if c.metrics != "" {
		if _, port, err := net.SplitHostPort(c.metrics); err != nil {
			return c, fmt.Errorf("--metrics %q: want HOST:PORT (%v)", c.metrics, err)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return c, fmt.Errorf("--metrics %q: bad port", c.metrics)
		}
	}
	if c.attachMax < 1 || c.attachMax > maxAttachMax {
		return c, fmt.Errorf("--attach-max %d outside 1..%d", c.attachMax, maxAttachMax)
	}
	if c.attachUsr == 0 {
		c.attachUsr = c.attachMax
	}
	if c.attachUsr < 1 || c.attachUsr > c.attachMax {
		return c, fmt.Errorf("--attach-max-user %d outside 1..%d (--attach-max)", c.attachUsr, c.attachMax)
	}
	if c.benchPort < 0 || c.benchPort > 65535 {
		return c, fmt.Errorf("--bench-port %d outside 0..65535", c.benchPort)
	}
	if c.benchPort > 0 {
		if c.bench, err = benchParams(c.benchTest, c.benchOpts, c.iface); err != nil {
			return c, err
		}
	}
	ports := map[int]string{}
	if c.benchPort > 0 {
		ports[c.benchPort] = "--bench-port"
	}
	for _, v := range c.serverS {
		b, err := parseServer(v, c.iface)
		if err != nil {
			return c, err
		}
		if other, taken := ports[b.port]; taken {
			return c, fmt.Errorf("--bench-server %q: port %d is taken by %s", v, b.port, other)
		}
		ports[b.port] = fmt.Sprintf("--bench-server %q", v)
		c.servers = append(c.servers, b)
	}
	if !fs.Changed("control") {
		c.control = defaultControl(c.iface)
	}
	if !fs.Changed("attach") {
		c.attach = defaultAttach(c.iface)
	}
	if c.benchListenS != "" {
		if c.benchListen, err = netip.ParseAddr(c.benchListenS); err != nil {
			return c, fmt.Errorf("--bench-listen %q: want an IP address", c.benchListenS)
		}
	}
	if c.benchLimit <= 0 {
		return c, fmt.Errorf("--bench-session-limit %s: want a positive duration", c.benchLimit)
	}
	if c.interval < 0 {
		return c, fmt.Errorf("negative --interval %s", c.interval)
	}
	return c, nil
}

// parseServer reads a --bench-server value, TEST:PORT[:OPTIONS].
func parseServer(v, iface string) (benchCfg, error) {
	f := strings.SplitN(v, ":", 3)
	if len(f) < 2 {
		return benchCfg{}, fmt.Errorf("--bench-server %q: want TEST:PORT[:OPTIONS]", v)
	}
	port, err := strconv.Atoi(f[1])
	if err != nil || port < 1 || port > 65535 {
		return benchCfg{}, fmt.Errorf("--bench-server %q: port %q outside 1..65535", v, f[1])
	}
	opts := ""
	if len(f) == 3 {
		opts = f[2]
	}
	p, err := benchParams(f[0], opts, iface)
	if err != nil {
		return benchCfg{}, fmt.Errorf("--bench-server %q: %w", v, err)
	}
	return benchCfg{port: port, params: p}, nil
}

// benchParams parses the server side's test and options as bench would.
func benchParams(test, opts, iface string) (*perftest.Params, error) {
	if _, ok := perftest.LookupTest(test); !ok {
		names := make([]string, len(perftest.Tests))
		for i, t := range perftest.Tests {
			names[i] = t.Name
		}
		return nil, fmt.Errorf("unknown --bench-test %q (want one of %s)", test, strings.Join(names, ", "))
	}
	args := append(strings.Fields(opts), "-d", iface)
	p, err := perftest.Parse(test, args)
	if err != nil {
		return nil, fmt.Errorf("--bench-opts: %w", err)
	}
	switch {
	case p.Help || p.Version:
		return nil, errors.New("--bench-opts: -h and -V are bench's, not the server's")
	case !p.Server():
		return nil, fmt.Errorf("--bench-opts: the daemon is the server: no server address (%q)", p.ServerName)
	case p.Local:
		return nil, errors.New("--bench-opts: --local runs both sides in bench, not in the daemon")
	case p.Port != perftest.DefaultPort:
		return nil, errors.New("--bench-opts: give the port with --bench-port")
	}
	return p, nil
}

// clientConfig is an introspection command. A plain value.
type clientConfig struct {
	cmd     string // "statistic" or "resource"
	object  string // resource: "", "qp", "cq", "mr" or "cm_id"
	socket  string // "" = find the one daemon's
	details bool
}

// parseClient reads `statistic ...` and `resource [show [qp|cq|mr]] ...`.
func parseClient(args []string) (clientConfig, error) {
	var c clientConfig
	switch args[0] {
	case "statistic", "stat", "s":
		c.cmd = "statistic"
	case "resource", "res", "r":
		c.cmd = "resource"
	case "help":
		return c, errHelp
	default:
		return c, fmt.Errorf("unknown command %q (want statistic or resource; xrnic -h lists them)", args[0])
	}
	fs := flag.NewFlagSet("xrnic "+c.cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	iface := fs.StringP("interface", "i", "", "the daemon's interface (its socket is "+controlDir+"/IFACE.sock)")
	fs.StringVarP(&c.socket, "socket", "s", "", "the daemon's control socket")
	if c.cmd == "statistic" {
		fs.BoolVarP(&c.details, "details", "d", false, "add the link's and the XDP program's counters")
	}
	help := fs.BoolP("help", "h", false, "show this help")
	if err := fs.Parse(args[1:]); err != nil {
		return c, fmt.Errorf("%s: %v", c.cmd, err)
	}
	if *help {
		return c, errHelp
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "show" {
		rest = rest[1:]
	}
	if c.cmd == "resource" && len(rest) > 0 {
		switch rest[0] {
		case "qp", "cq", "mr", "cm_id":
			c.object, rest = rest[0], rest[1:]
		default:
			return c, fmt.Errorf("resource: unknown object %q (want qp, cq, mr or cm_id)", rest[0])
		}
	}
	if len(rest) > 0 {
		return c, fmt.Errorf("%s: unexpected argument %q", c.cmd, rest[0])
	}
	switch {
	case *iface != "" && c.socket != "":
		return c, fmt.Errorf("%s: give -i or -s, not both", c.cmd)
	case *iface != "":
		c.socket = defaultControl(*iface)
	}
	return c, nil
}

// attachConfig is the attach server's bounds as the flags set them.
func (c config) attachConfig(logf func(string, ...any)) server.Config {
	return server.Config{MaxSessions: c.attachMax, MaxUserSessions: c.attachUsr, Logf: logf}
}
