// Command-line parameters of the perftest tests, parsed as perftest's parser() does
// (perftest_parameters.c): the same flag names, defaults, ranges and the
// dependencies force_dependecies() applies.

package perftest

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
)

// ErrUsage marks a bad command line; the message says what is wrong.
var ErrUsage = errors.New("usage")

// usageError is a bad command line of one test: errors.Is finds ErrUsage.
type usageError struct {
	test string
	err  error
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%s: %v (bench %s -h lists the options)", e.test, e.err, e.test)
}

func (e *usageError) Is(target error) bool { return target == ErrUsage }

func (e *usageError) Unwrap() error { return e.err }

// Verb is perftest's VerbType, numbered as perftest numbers it (the index of
// testsStr).
type Verb int

// The verbs.
const (
	VerbSend Verb = iota
	VerbSendImm
	VerbWrite
	VerbWriteImm
	VerbRead
	VerbAtomic
)

var verbNames = [...]string{"Send", "Send_imm", "RDMA_Write", "RDMA_Write_imm", "RDMA_Read", "Atomic"}

func (v Verb) String() string { return verbNames[v] }

// hasRecvComp reports whether the responder consumes receive WQEs (perftest's
// has_recv_comp).
func (v Verb) hasRecvComp() bool { return v == VerbSend || v == VerbSendImm || v == VerbWriteImm }

// ConnType is perftest's connection type (-c), named as connStr names it.
type ConnType int

// The connection types bench runs (perftest's RC, UC, UD).
const (
	ConnRC ConnType = iota
	ConnUC
	ConnUD
)

var connNames = [...]string{"RC", "UC", "UD"}

func (c ConnType) String() string { return connNames[c] }

// qpType is the verbs QP type of the connection type.
func (c ConnType) qpType() verbs.QPType {
	return [...]verbs.QPType{verbs.RC, verbs.UC, verbs.UD}[c]
}

// Kind is perftest's TestType: latency or bandwidth.
type Kind int

// The test kinds.
const (
	Lat Kind = iota
	BW
)

// Atomic operations, numbered as atomicTypesStr.
const (
	CmpAndSwap  = 0
	FetchAndAdd = 1
)

var atomicNames = [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}

// Test names a perftest binary: ib_write_bw is "write_bw".
type Test struct {
	Name string
	Verb Verb
	Kind Kind
}

// Tests are the tests bench runs, in the order usage lists them.
var Tests = []Test{
	{"write_bw", VerbWrite, BW}, {"read_bw", VerbRead, BW}, {"send_bw", VerbSend, BW}, {"atomic_bw", VerbAtomic, BW},
	{"write_lat", VerbWrite, Lat}, {"read_lat", VerbRead, Lat}, {"send_lat", VerbSend, Lat}, {"atomic_lat", VerbAtomic, Lat},
}

// LookupTest finds a test by name.
func LookupTest(name string) (Test, bool) {
	for _, t := range Tests {
		if t.Name == name {
			return t, true
		}
	}
	return Test{}, false
}

// perftest's limits and defaults (perftest_parameters.h).
const (
	DefaultPort    = 18515
	defSizeBW      = 65536
	defSizeLat     = 2
	defItersBW     = 5000 // DEF_ITERS_WB: WRITE bandwidth
	defIters       = 1000
	defTxBW        = 128
	defTxLat       = 1
	defQPTimeout   = 14
	defRxRDMA      = 1
	defRxSend      = 512
	defCQMod       = 100
	defSizeAtomic  = 8
	defDuration    = 5
	defInlineWrite = 220 // DEF_INLINE_WRITE: latency tests
	defInlineSend  = 236 // DEF_INLINE_SEND_RC_UC
	defInlineUD    = 188 // DEF_INLINE_SEND_UD
	maxInlineUD    = 884 // MAX_INLINE_UD
	udAddition     = 40  // UD_ADDITION: the GRH before a UD message
	defQKey        = 0x11111111
	ucMaxRx        = 16000 // UC_MAX_RX
	maxSize        = 8388608
	minIter        = 5
	maxIter        = 4294967296
	maxTx          = 15000
	maxRx          = 16384
	maxQPNum       = 16384
	maxCQMod       = 1024
	maxInline      = 1024
	maxGIDIndex    = 64
	msgSizeCQMod   = 8192 // MSG_SIZE_CQ_MOD_LIMIT
	noPeakIters    = 20000
	defJSONFile    = "perftest_out.json"
	defCycleBuffer = 4096
	maxCycleBuffer = 2 << 20 // the largest a peer may announce: a 2 MiB huge page
	defCacheLine   = 64
)

// Params are a test's parameters after parsing and perftest's dependency rules.
// A plain value.
type Params struct {
	Test Test

	Device     string    // -d: the interface xrnic runs on
	LinkKind   link.Kind // --link
	Local      bool      // --local: server and client in this process over lo
	ServerName string    // the positional argument: run as client
	Port       int       // -p: port of the exchange (TCP, or rdma_cm's with -z)
	CommRDMACM bool      // -z: the exchange over an rdma_cm connection (implied by -R)
	RDMACM     bool      // -R: the test's QPs connected through rdma_cm
	Conn       ConnType  // -c
	portSet    bool
	IBPort     int // -i: always 1

	Size        uint64 // -s
	reqSize     bool
	Iters       uint64 // -n
	All         bool   // -a: sizes 2..2^23
	QPs         int    // -q
	TxDepth     int    // -t
	RxDepth     int    // -r
	CQMod       int    // -Q
	reqCQMod    bool
	MTU         int    // -m: bytes, 0 = the port's active MTU
	Duration    int    // -D: seconds, 0 = iterations mode
	Margin      int    // -f
	Inline      int    // -I, -1 = default
	Duplex      bool   // -b
	GIDIndex    int    // -x, -1 = best GID (perftest's get_best_gid_index)
	IPv6        bool   // --ipv6: prefer IPv6 GIDs
	ReportGbits bool   // --report_gbits
	OutJSON     bool   // --out_json
	OutJSONFile string // --out_json_file
	DumpBuffer  string // --dump_buffer: xrnic's own, the buffer written to a file at the end
	Pcap        string // --pcap: xrnic's own, every frame of the device to a pcap file
	Daemon      string // --daemon: xrnic's own, attach to the daemon on this socket
	BusyPoll    bool   // --busy-poll: xrnic's own, the polling thread runs the engine
	Queues      int    // --queues: xrnic's own, an engine per receive queue
	XDPMode     bpf.AttachMode
	NoPeak      bool   // -N
	AtomicType  int    // -A
	OutReads    int    // -o, 0 = device maximum
	QPTimeout   int    // -u
	CPUFreqF    bool   // -F: accepted, nothing to check here
	Unsorted    bool   // -U
	Histogram   bool   // -H
	Cycles      bool   // -C
	Progress    string // --progress auto|on|off
	Reversed    bool   // --reversed: the side that connects plays the server

	RateLimit     float64 // --rate_limit, in RateUnits; 0: none
	RateUnits     string  // --rate_units: M (MB/s), g (Gb/s) or p (packets/s)
	RateLimitType string  // --rate_limit_type: SW (bench paces), HW or PP (refused)
	BurstSize     int     // --burst_size: WRs per burst (default the tx depth)
	Help          bool    // -h
	Version       bool    // -V

	UseEvent     bool    // -e: sleep on a completion channel instead of spinning
	PostList     int     // -l: WRs per ibv_post_send
	RecvPostList int     // --recv_post_list: receive WRs per post
	UseSRQ       bool    // --use-srq: the receivers share an SRQ (SEND tests)
	ReportBoth   bool    // --report-both: -b prints both sides' results apart
	SL           int     // -S: service level (no field of a RoCEv2 frame carries it)
	TClass       int     // --tclass: the GRH's traffic class (IPv4 TOS / IPv6 class)
	TOS          int     // -T: rdma_cm's type of service for -R's QPs; -1: not set
	RetryCount   int     // --retry_count
	LimitBW      float64 // -w: fail when the bandwidth ends below this (Gb/s)
	LimitMsgRate float64 // -y: fail when the message rate ends below this (Mpps)
	NoXchgVer    bool    // --dont_xchg_versions
	CPUUtil      bool    // --cpu_util: a CPU utilization column (duration mode)
	HugePages    bool    // --use_hugepages
	MRPerQP      bool    // --mr_per_qp
	Infinite     bool    // --run_infinitely: a report every Period until interrupted
	Period       int     // --run_infinitely's period: -D, or 5 s
	Mmap         string  // --mmap: a file as the buffer
	MmapOffset   uint64  // --mmap-offset
	OutputOnly   string  // --output: bandwidth, message_rate or latency: print that figure alone
	WarmUp       bool    // --perform_warm_up
	WaitDestroy  int     // --wait_destroy: seconds before the resources go
	LatencyGap   int     // --latency_gap: microseconds between latency iterations

	// Warnings are the lines perftest prints while it parses, on stdout;
	// Notes the ones on stderr.
	Warnings, Notes []string

	// Bounds for a peer that is not trusted, set by the daemon's bench server
	// (no flags): ExchangeTimeout bounds each prompt exchange (0: 30 s, as for
	// a client), and with PeerGIDIsConnPeer the GIDs the peer announces must
	// be its connection's own address, so a client cannot aim the test's
	// traffic at a third host.
	ExchangeTimeout   time.Duration
	PeerGIDIsConnPeer bool
}

// Server reports whether this side plays the test's server: the side that
// listens, unless --reversed swaps the roles (perftest's machine).
func (p *Params) Server() bool { return p.Listens() != p.Reversed }

// Listens reports whether this side waits for the other to connect (no server
// name given): the exchange's roles, which --reversed leaves alone.
func (p *Params) Listens() bool { return p.ServerName == "" }

// DurationMode reports whether the test runs for -D seconds.
func (p *Params) DurationMode() bool { return p.Duration > 0 }

// Parse parses a test's command line (without the test name).
func Parse(test string, args []string) (*Params, error) {
	t, ok := LookupTest(test)
	if !ok {
		return nil, fmt.Errorf("%w: unknown test %q", ErrUsage, test)
	}
	p := &Params{Test: t}
	fs := newFlagSet(p)
	if err := fs.Parse(args); err != nil {
		return nil, &usageError{test, err}
	}
	if p.Help || p.Version {
		return p, nil
	}
	if err := p.finish(fs); err != nil {
		return nil, &usageError{test, err}
	}
	return p, nil
}

func newFlagSet(p *Params) *flag.FlagSet {
	t := p.Test
	fs := flag.NewFlagSet("bench "+t.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.StringVarP(&p.Device, "ib-dev", "d", "", "network interface to run on (perftest: IB device)")
	fs.String("link", "auto", "link kind: auto (AF_XDP, else UDP), af_xdp, udp, or udp-gso (UDP with GSO and GRO: faster, for peers that receive through sockets; not towards an XDP program on veth, nor from an IPv4 peer that numbers its packets, as rxe does)")
	fs.BoolVar(&p.Local, "local", false, "run server and client in this process over the UDP link on lo")
	fs.IntVarP(&p.Port, "port", "p", DefaultPort, "TCP port of the exchange")
	fs.IntVarP(&p.IBPort, "ib-port", "i", 1, "port of the device (xrnic has port 1)")
	fs.BoolVarP(&p.CommRDMACM, "comm_rdma_cm", "z", false, "exchange the test's data over an rdma_cm connection")
	fs.BoolVarP(&p.RDMACM, "rdma_cm", "R", false, "connect the QPs with rdma_cm and run the test on them (implies -z)")
	fs.StringP("connection", "c", "RC", connHelp(t.Verb))
	fs.StringP("size", "s", "", "message size (K and M suffixes)")
	fs.Uint64P("iters", "n", 0, "number of exchanges (at least 5)")
	if t.Verb != VerbAtomic {
		fs.BoolVarP(&p.All, "all", "a", false, "run sizes from 2 till 2^23")
	}
	if t.Kind == BW {
		fs.IntVarP(&p.QPs, "qp", "q", 1, "number of QPs")
		fs.IntVarP(&p.CQMod, "cq-mod", "Q", defCQMod, "generate a CQE every this many WRs")
		fs.BoolVarP(&p.Duplex, "bidirectional", "b", false, "measure bidirectional bandwidth")
		fs.BoolVarP(&p.NoPeak, "noPeak", "N", false, "do not compute the peak bandwidth")
		fs.BoolVar(&p.ReportGbits, "report_gbits", false, "report Gb/sec instead of MB/sec (2^20 bytes, as perftest)")
	} else {
		fs.BoolVarP(&p.Unsorted, "report-unsorted", "U", false, "print every latency, unsorted")
		fs.BoolVarP(&p.Histogram, "report-histogrm", "H", false, "print every latency, sorted")
		fs.BoolVarP(&p.Cycles, "report-cycles", "C", false, "report times in CPU cycles (at /proc/cpuinfo's clock)")
	}
	fs.IntVarP(&p.TxDepth, "tx-depth", "t", 0, "size of the send queue")
	fs.IntVarP(&p.RxDepth, "rx-depth", "r", 0, "receive queue depth")
	fs.IntP("mtu", "m", 0, "path MTU (256..4096; default the port's active MTU)")
	fs.IntVarP(&p.Duration, "duration", "D", 0, "run for this many seconds")
	fs.IntVarP(&p.Margin, "margin", "f", -1, "measure within margins, seconds (default duration/4)")
	if t.Verb != VerbRead && t.Verb != VerbAtomic {
		fs.IntVarP(&p.Inline, "inline_size", "I", -1, "max inline message size")
	}
	if t.Verb == VerbRead || t.Verb == VerbAtomic {
		fs.IntVarP(&p.OutReads, "outs", "o", 0, "outstanding reads/atomics (default device max)")
	}
	if t.Verb == VerbAtomic {
		fs.StringP("atomic_type", "A", atomicNames[FetchAndAdd], "CMP_AND_SWAP or FETCH_AND_ADD")
	}
	fs.IntVarP(&p.GIDIndex, "gid-index", "x", -1, "source GID index (default: the best, as perftest picks)")
	fs.BoolVar(&p.IPv6, "ipv6", false, "prefer an IPv6 GID")
	fs.IntVarP(&p.QPTimeout, "qp-timeout", "u", defQPTimeout, "QP timeout exponent (4.096us * 2^u)")
	fs.BoolVarP(&p.CPUFreqF, "CPU-freq", "F", false, "do not fail on CPU frequency (accepted, ignored)")
	fs.BoolVar(&p.OutJSON, "out_json", false, "also write the results to a JSON file")
	fs.StringVar(&p.OutJSONFile, "out_json_file", defJSONFile, "name of the JSON report")
	fs.StringVar(&p.DumpBuffer, "dump_buffer", "", "write the local buffer to this file when the test ends (xrnic's own, to check data against a capture; --local: the server's to FILE.server)")
	fs.BoolVar(&p.BusyPoll, "busy-poll", false, "a CQ poll that finds nothing runs the engine in the polling thread: run to completion, one core doing the work of two (xrnic's own; not with --daemon)")
	fs.IntVar(&p.Queues, "queues", 1, "run an engine per receive queue 0..N-1 of -d, each with its own AF_XDP socket, QPs spread over them by number (xrnic's own; on a veth, with --xdp-mode native)")
	fs.String("xdp-mode", "generic", "XDP attach mode of the AF_XDP link: generic or native (xrnic's own)")
	fs.StringVar(&p.Daemon, "daemon", "", "attach to the xrnic daemon serving this socket (its --attach; -d's daemon is found by itself, and -d is then not needed) instead of running an engine in this process (xrnic's own; not with --local or --pcap)")
	fs.StringVar(&p.Pcap, "pcap", "", "record every frame this side sends and receives to a pcap file, as ibdump does (xrnic's own; not with --local)")
	fs.StringVar(&p.Progress, "progress", "auto", "progress line on stderr during long runs: auto, on or off")
	fs.BoolVarP(&p.Help, "help", "h", false, "show this help")
	fs.BoolVarP(&p.Version, "version", "V", false, "print the perftest version bench speaks")
	fs.BoolVarP(&p.UseEvent, "events", "e", false, "sleep on CQ events instead of polling")
	fs.IntP("vector", "X", 0, "completion vector (xrnic has one: 0)")
	if t.Kind == BW {
		fs.IntVarP(&p.PostList, "post_list", "l", 1, "post lists of this many WRs")
		fs.IntVar(&p.RecvPostList, "recv_post_list", 1, "post lists of this many receive WRs")
		fs.BoolVar(&p.ReportBoth, "report-both", false, "with -b, print each side's results apart")
		fs.Float64VarP(&p.LimitBW, "limit_bw", "w", 0, "fail if the average bandwidth is below this")
		fs.Float64VarP(&p.LimitMsgRate, "limit_msgrate", "y", 0, "fail if the message rate (Mpps) is below this")
		fs.BoolVar(&p.Infinite, "run_infinitely", false, "run until interrupted, printing the bandwidth of every -D seconds (default 5)")
		fs.Float64Var(&p.RateLimit, "rate_limit", 0, "send at most this rate (--rate_units)")
		fs.StringVar(&p.RateUnits, "rate_units", "g", "units of --rate_limit: M (MB/s), g (Gb/s) or p (packets/s)")
		fs.StringVar(&p.RateLimitType, "rate_limit_type", "", "SW (bench paces its bursts); HW and PP need a device that paces")
		fs.IntVar(&p.BurstSize, "burst_size", 0, "WRs per burst of the rate limiter (default the tx depth)")
		fs.Int("typical_pkt_size", 0, "packet size for the PP rate limiter")
	} else {
		fs.IntVar(&p.LatencyGap, "latency_gap", 0, "microseconds to wait between latency iterations")
	}
	fs.BoolVar(&p.UseSRQ, "use-srq", false, "the receive side uses an SRQ (SEND tests)")
	fs.IntVarP(&p.SL, "sl", "S", 0, "service level (RoCEv2 frames carry none: accepted, 0..15)")
	fs.IntVar(&p.TClass, "tclass", 0, "traffic class of the GRH (IPv4 TOS)")
	fs.IntVarP(&p.TOS, "tos", "T", -1, "type of service of the rdma_cm QPs (-R), 0..255")
	fs.IntVar(&p.RetryCount, "retry_count", retryCount, "retry count of rdma_cm's connection (-R)")
	fs.StringVar(&p.Mmap, "mmap", "", "use this file, mapped shared, as the buffer")
	fs.Uint64Var(&p.MmapOffset, "mmap-offset", 0, "offset of the buffer in the --mmap file (a multiple of the page size)")
	fs.BoolVar(&p.MRPerQP, "mr_per_qp", false, "one MR for each QP's buffer")
	fs.BoolVar(&p.HugePages, "use_hugepages", false, "allocate the buffers from huge pages (vm.nr_hugepages)")
	fs.BoolVar(&p.CPUUtil, "cpu_util", false, "with -D, show the CPU's utilization during the sample (/proc/stat's user over user and idle)")
	fs.BoolVar(&p.NoXchgVer, "dont_xchg_versions", false, "do not exchange versions with the peer")
	fs.StringVar(&p.OutputOnly, "output", "", "print only this figure: bandwidth, message_rate (BW) or latency (LAT)")
	if t.Verb != VerbSend {
		fs.BoolVar(&p.WarmUp, "perform_warm_up", false, "post a round of WRs before the measurement")
	}
	fs.BoolVar(&p.Reversed, "reversed", false, "reverse the traffic: the side that connects is the test's server (both sides give it)")
	fs.IntVar(&p.WaitDestroy, "wait_destroy", 0, "seconds to wait before destroying the resources")
	fs.Int("pkey_index", 0, "P_Key index (xrnic has one: 0)")
	fs.String("force-link", "Ethernet", "link layer (xrnic is Ethernet)")
	fs.Bool("use_old_post_send", false, "post with ibv_post_send (bench always does)")
	fs.Bool("disable_pcie_relaxed", false, "no PCIe relaxed ordering (xrnic has no PCIe)")
	for i := range refused {
		r := &refused[i]
		if r.arg {
			fs.StringP(r.name, r.short, "", "refused: "+r.why)
		} else {
			fs.BoolP(r.name, r.short, false, "refused: "+r.why)
		}
	}
	return fs
}

// A refusedOption is a perftest option bench recognizes and refuses, saying why
// (perftest's own message where it has one). README's option table is
// checked against this list and the accepted flags.
type refusedOption struct {
	name, short string
	arg         bool
	why         string
}

const rawEth = "a raw Ethernet option: bench has no raw_ethernet tests"

var refused = []refusedOption{
	{"mcg", "g", false, "bench has no multicast tests yet"},
	{"MGID", "M", true, "bench has no multicast tests yet"},
	{"dualport", "O", false, "xrnic devices have one port"},
	{"report-per-port", "", false, "xrnic devices have one port"},
	{"report-counters", "W", true, "no hardware counters files (the daemon's metrics have xrnic's)"},
	{"hop_limit", "L", true, "Hop limit only valid for RawEth QP"},
	{"flow_label", "", true, rawEth},
	{"dlid", "", true, "an InfiniBand LID: xrnic is RoCE"},
	{"inline_recv", "", true, "xrnic has no inline receive"},
	{"odp", "", false, "xrnic has no on-demand paging (ODP is not supported)"},
	{"use_ooo", "", false, "xrnic does not place out-of-order data"},
	{"use_cuda", "", true, "CUDA not supported (no GPU memory)"},
	{"use_cuda_bus_id", "", true, "CUDA not supported (no GPU memory)"},
	{"use_cuda_dmabuf", "", false, "CUDA not supported (no GPU memory)"},
	{"use_rocm", "", true, "ROCm not supported (no GPU memory)"},
	{"log_dci_streams", "", true, "a DC option: xrnic has no DC transport"},
	{"log_active_dci_streams", "", true, "a DC option: xrnic has no DC transport"},
	{"aes_xts", "", false, "aes_xts not supported"},
	{"encrypt_on_tx", "", false, "aes_xts not supported"},
	{"sig_before", "", false, "aes_xts not supported"},
	{"aes_block_size", "", true, "aes_xts not supported"},
	{"kek_path", "", true, "aes_xts not supported"},
	{"credentials_path", "", true, "aes_xts not supported"},
	{"data_enc_keys_number", "", true, "aes_xts not supported"},
	{"data_enc_key_app_path", "", true, "aes_xts not supported"},
	{"source_mac", "B", true, rawEth},
	{"dest_mac", "E", true, rawEth},
	{"dest_ip", "J", true, rawEth},
	{"source_ip", "j", true, rawEth}, // getopt_long takes this one, not rdma_cm's --source_ip
	{"dest_port", "K", true, rawEth},
	{"source_port", "k", true, rawEth},
	{"ethertype", "Y", true, rawEth},
	{"server", "Z", false, rawEth},
	{"client", "P", false, rawEth},
	{"mac_fwd", "v", false, rawEth},
	{"use_rss", "G", false, rawEth},
	{"remote_mac", "", true, rawEth},
	{"local_mac", "", true, rawEth},
	{"remote_ip", "", true, rawEth},
	{"local_ip", "", true, rawEth},
	{"remote_port", "", true, rawEth},
	{"local_port", "", true, rawEth},
	{"tcp", "", false, rawEth},
	{"raw_ipv6", "", false, rawEth},
	{"promiscuous", "", false, rawEth},
	{"sniffer", "", false, rawEth},
	{"raw_mcast", "", false, rawEth},
	{"flows", "", true, rawEth},
	{"flows_burst", "", true, rawEth},
	{"reply_every", "", true, rawEth},
	{"vlan_en", "", false, rawEth},
	{"vlan_pcp", "", true, rawEth},
}

// finish applies defaults and perftest's checks and dependencies.
func (p *Params) finish(fs *flag.FlagSet) error {
	t := p.Test
	switch fs.NArg() {
	case 0:
	case 1:
		p.ServerName = fs.Arg(0)
	default:
		return fmt.Errorf("too many arguments %q: give at most the server's address", fs.Args())
	}
	if p.Local && p.ServerName != "" {
		return errors.New("--local runs both sides: give no server address")
	}
	if p.Local && p.Pcap != "" {
		return errors.New("--pcap records one device: give -d <interface>, not --local")
	}
	if p.Daemon != "" && p.BusyPoll {
		return errors.New("--busy-poll runs the engine in this process: not with --daemon")
	}
	if p.Queues < 1 || p.Queues > verbs.MaxQueues {
		return fmt.Errorf("--queues %d outside 1..%d", p.Queues, verbs.MaxQueues)
	}
	if p.Queues > 1 && (p.Daemon != "" || p.Local || p.Pcap != "") {
		return errors.New("--queues runs engines in this process on -d: not with --daemon, --local or --pcap")
	}
	m, _ := fs.GetString("xdp-mode")
	var ok bool
	if p.XDPMode, ok = bpf.ParseAttachMode(m); !ok {
		return fmt.Errorf("--xdp-mode %q: want generic or native", m)
	}
	if p.Daemon != "" && (p.Local || p.Pcap != "") {
		return errors.New("--daemon uses the daemon's device: not with --local or --pcap (the daemon's own --pcap records it)")
	}
	lk, _ := fs.GetString("link")
	k, err := link.ParseKind(lk)
	if err != nil || k == link.KindMemory {
		return fmt.Errorf("--link %q: want auto, af_xdp, udp or udp-gso", lk)
	}
	p.LinkKind = k
	p.portSet = fs.Changed("port")
	if p.Port < 1 || p.Port > 65535 {
		return fmt.Errorf("port %d outside 1..65535", p.Port)
	}
	if p.IBPort != 1 {
		return fmt.Errorf("IB port %d: xrnic devices have port 1", p.IBPort)
	}
	if p.RDMACM {
		p.CommRDMACM = true // as perftest's parser: -R exchanges over rdma_cm too
	}
	c, _ := fs.GetString("connection")
	if p.Conn, err = parseConn(c, t.Verb); err != nil {
		return err
	}
	if p.RDMACM && p.Conn == ConnUC {
		return errors.New("rdma_cm does not support UC: use RC or UD with -R")
	}
	if p.Progress != "auto" && p.Progress != "on" && p.Progress != "off" {
		return fmt.Errorf("--progress %q: want auto, on or off", p.Progress)
	}

	// Defaults that depend on the test (init_perftest_params).
	p.Size = defSizeLat
	if t.Kind == BW {
		p.Size = defSizeBW
	}
	if t.Verb == VerbAtomic {
		p.Size = defSizeAtomic
	}
	p.Iters = defIters
	if t.Kind == BW && t.Verb == VerbWrite {
		p.Iters = defItersBW
	}
	if t.Kind == Lat {
		p.QPs = 1
		p.CQMod = defCQMod
	}
	if !fs.Changed("tx-depth") {
		p.TxDepth = defTxLat
		if t.Kind == BW {
			p.TxDepth = defTxBW
		}
	} else if p.TxDepth < 1 || p.TxDepth > maxTx {
		return fmt.Errorf("tx depth %d outside 1..%d", p.TxDepth, maxTx)
	}
	if !fs.Changed("rx-depth") {
		p.RxDepth = defRxRDMA
		if t.Verb == VerbSend || t.Verb == VerbWrite {
			p.RxDepth = defRxSend
		}
	} else if p.RxDepth < 1 || p.RxDepth > maxRx {
		return fmt.Errorf("rx depth %d outside 1..%d", p.RxDepth, maxRx)
	} else if t.Verb != VerbSend && t.Verb != VerbWrite && p.RxDepth > defRxRDMA {
		return errors.New("on RDMA verbs rx depth can be only 1")
	}
	if s, _ := fs.GetString("size"); fs.Changed("size") {
		n, err := parseSize(s)
		if err != nil {
			return err
		}
		p.Size, p.reqSize = n, true
	}
	if fs.Changed("iters") {
		n, _ := fs.GetUint64("iters")
		if n < minIter || n > maxIter {
			return fmt.Errorf("iteration num %d outside %d..%d", n, minIter, uint64(maxIter))
		}
		p.Iters = n
	}
	if fs.Changed("qp") && (p.QPs < 1 || p.QPs > maxQPNum) {
		return fmt.Errorf("num of QPs %d outside 1..%d", p.QPs, maxQPNum)
	}
	if fs.Changed("cq-mod") {
		if p.CQMod < 1 || p.CQMod > maxCQMod {
			return fmt.Errorf("CQ moderation %d outside 1..%d", p.CQMod, maxCQMod)
		}
		p.reqCQMod = true
	}
	p.MTU, _ = fs.GetInt("mtu")
	switch p.MTU {
	case 0, 256, 512, 1024, 2048, 4096:
	default:
		return fmt.Errorf("invalid MTU %d: choose from {256,512,1024,2048,4096}", p.MTU)
	}
	if fs.Changed("duration") && p.Duration <= 0 {
		return fmt.Errorf("duration %d must be positive", p.Duration)
	}
	if fs.Changed("margin") && p.Margin < 0 {
		return fmt.Errorf("margin %d must not be negative", p.Margin)
	}
	if !fs.Changed("inline_size") {
		p.Inline = -1
	} else if p.Inline < 0 || p.Inline > maxInline {
		return fmt.Errorf("max inline %d outside 0..%d", p.Inline, maxInline)
	}
	if fs.Changed("gid-index") && (p.GIDIndex < 0 || p.GIDIndex > maxGIDIndex) {
		return fmt.Errorf("GID index %d outside 0..%d", p.GIDIndex, maxGIDIndex)
	}
	if p.QPTimeout < 0 || p.QPTimeout > 31 {
		return fmt.Errorf("QP timeout %d outside 0..31", p.QPTimeout)
	}
	if fs.Changed("outs") && p.OutReads < 0 {
		return fmt.Errorf("outstanding reads %d must not be negative", p.OutReads)
	}
	p.AtomicType = FetchAndAdd
	if t.Verb == VerbAtomic {
		switch a, _ := fs.GetString("atomic_type"); a {
		case atomicNames[CmpAndSwap]:
			p.AtomicType = CmpAndSwap
		case atomicNames[FetchAndAdd]:
		default:
			return fmt.Errorf("invalid atomic type %q: choose from {CMP_AND_SWAP,FETCH_AND_ADD}", a)
		}
	}
	if err := p.finishExtra(fs); err != nil {
		return err
	}
	if p.OutJSONFile == "" {
		return errors.New("--out_json_file needs a file name")
	}
	if !p.Local && p.Device == "" && p.Daemon == "" { // the daemon names its device
		return errors.New("no device: give -d <interface> (or --local to run both sides on lo)")
	}
	return p.forceDependencies()
}

// finishExtra checks the options beyond the basic ones, with perftest's messages.
func (p *Params) finishExtra(fs *flag.FlagSet) error {
	for i := range refused {
		if r := &refused[i]; fs.Lookup(r.name) != nil && fs.Changed(r.name) {
			return fmt.Errorf("--%s: %s", r.name, r.why)
		}
	}
	if l, _ := fs.GetString("force-link"); l != "Ethernet" {
		if l == "IB" {
			return errors.New("--force-link IB: xrnic is an Ethernet (RoCE) device")
		}
		return fmt.Errorf("invalid link type %q: choose from {IB,Ethernet}", l)
	}
	if p.Test.Verb == VerbWrite && (p.UseEvent || fs.Changed("vector")) {
		return errors.New("events feature not available on WRITE verb")
	}
	if v, _ := fs.GetInt("vector"); v != 0 {
		return fmt.Errorf("completion vector %d: xrnic devices have one (0)", v)
	}
	if k, _ := fs.GetInt("pkey_index"); k != 0 {
		return fmt.Errorf("P_Key index %d: xrnic devices have one P_Key (index 0)", k)
	}
	if p.Mmap != "" && (p.HugePages || p.Local) {
		return errors.New("--mmap maps one side's buffer from a file: not with --use_hugepages or --local")
	}
	if fs.Lookup("post_list") == nil {
		p.PostList, p.RecvPostList = 1, 1 // latency tests have no lists
	}
	switch {
	case p.PostList < 1:
		return fmt.Errorf("send post list size %d must be positive", p.PostList)
	case p.RecvPostList < 1:
		return fmt.Errorf("receive post list size %d must be positive", p.RecvPostList)
	case p.SL < 0 || p.SL > 15:
		return fmt.Errorf("service level %d outside 0..15", p.SL)
	case p.TOS != -1 && !p.RDMACM:
		return errors.New("TOS only valid for rdma_cm based QP and RawEth QP")
	case p.TOS < -1 || p.TOS > 255:
		return fmt.Errorf("TOS %d outside 0..255", p.TOS)
	case p.TClass < 0 || p.TClass > 255:
		return fmt.Errorf("traffic class %d outside 0..255", p.TClass)
	case p.RetryCount < 0 || p.RetryCount > 7:
		return fmt.Errorf("retry count %d outside 0..7", p.RetryCount)
	case p.LimitBW < 0:
		return errors.New("invalid Minimum BW Limit")
	case p.LimitMsgRate < 0:
		return errors.New("invalid Minimum msgRate Limit")
	case p.LatencyGap < 0:
		return fmt.Errorf("latency gap time %d must not be negative", p.LatencyGap)
	case p.WaitDestroy < 0:
		return fmt.Errorf("wait_destroy %d must not be negative", p.WaitDestroy)
	}
	if err := p.finishRate(fs); err != nil {
		return err
	}
	switch p.OutputOnly {
	case "":
	case "bandwidth", "message_rate":
		if p.Test.Kind != BW {
			return errors.New("output verbosity level for LAT can be: latency")
		}
	case "latency":
		if p.Test.Kind != Lat {
			return errors.New("output verbosity level for BW can be: bandwidth, message_rate")
		}
	default:
		return errors.New("invalid verbosity level output flag. Please use bandwidth, latency, message_rate")
	}
	return nil
}

// finishRate checks the rate limiter's options as perftest does. Only the
// software limiter (SW) is bench's: HW and PP would need a device that paces.
func (p *Params) finishRate(fs *flag.FlagSet) error {
	if fs.Lookup("rate_limit") == nil {
		return nil
	}
	if fs.Changed("rate_limit") {
		if p.RateLimit <= 0 {
			return errors.New("rate limit must be non-negative")
		}
		if p.RateLimitType == "" {
			p.RateLimitType = "HW" // perftest's default limiter
		}
	}
	switch p.RateUnits {
	case "M", "g", "p":
	default:
		return errors.New("invalid rate limit units. Please use M,g or p")
	}
	switch p.RateLimitType {
	case "", "SW":
	case "HW", "PP":
		return fmt.Errorf("--rate_limit_type %s: xrnic has no hardware rate limiter (use SW)", p.RateLimitType)
	default:
		return errors.New("invalid rate limit type flag. Please use HW, SW or PP")
	}
	if p.BurstSize < 0 {
		return fmt.Errorf("burst size %d must not be negative", p.BurstSize)
	}
	if p.BurstSize > 0 && p.RateLimitType == "" {
		return errors.New("can't enable burst mode when rate limiter is off")
	}
	if t, _ := fs.GetInt("typical_pkt_size"); t != 0 {
		return errors.New("typical packet size only supports PP rate limiter")
	}
	if p.RateLimitType == "SW" {
		if p.Test.Verb == VerbAtomic || p.Test.Verb == VerbSend && p.Duplex {
			return errors.New("SW Rate limiter cann't be executed on non-BW, ATOMIC or bidirectional SEND tests")
		}
		if p.RateLimit <= 0 {
			return errors.New("--rate_limit_type SW needs --rate_limit")
		}
	}
	return nil
}

// connHelp is perftest's usage line for -c, per verb.
func connHelp(v Verb) string {
	switch v {
	case VerbSend:
		return "connection type RC/UC/UD"
	case VerbWrite:
		return "connection type RC/UC"
	}
	return "connection type RC"
}

// parseConn is change_conn_type: perftest's checks of a connection type against
// the verb, and its messages. XRC, DC and SRD need hardware xrnic is not.
func parseConn(c string, v Verb) (ConnType, error) {
	switch c {
	case "RC":
		return ConnRC, nil
	case "UC":
		if v == VerbRead || v == VerbAtomic {
			return 0, errors.New("UC connection not possible in READ/ATOMIC verbs")
		}
		return ConnUC, nil
	case "UD":
		if v != VerbSend {
			return 0, errors.New("UD connection only possible in SEND verb")
		}
		return ConnUD, nil
	case "XRC":
		// What perftest says when ibv_open_xrcd fails, as on rxe.
		return 0, errors.New("error opening XRC domain: xrnic has no XRC (couldn't create XRC resources)")
	case "DC", "SRD", "RawEth":
		return 0, fmt.Errorf("connection type %s: not supported by xrnic (RC, UC and UD are)", c)
	}
	return 0, fmt.Errorf("invalid connection type %q: please choose from {RC,UC,UD,XRC,DC,SRD}", c)
}

// parseSize reads -s as perftest does: a number with an optional K or M suffix,
// 1..UINT_MAX/2 bytes.
func parseSize(s string) (uint64, error) {
	f := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		s, f = s[:len(s)-1], 1024
	case strings.HasSuffix(s, "M"):
		s, f = s[:len(s)-1], 1024*1024
	}
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil || n*f < 1 || n*f > math.MaxUint32/2 {
		return 0, fmt.Errorf("message size %q: should be between 1 and %d", s, uint32(math.MaxUint32/2))
	}
	return n * f, nil
}

// forceDependencies is perftest's force_dependecies for the options bench has.
func (p *Params) forceDependencies() error {
	t := p.Test
	if t.Verb == VerbWrite {
		p.RxDepth = defRxRDMA
	}
	if !p.DurationMode() {
		p.TxDepth = int(min(uint64(p.TxDepth), p.Iters))
		if t.Verb.hasRecvComp() && uint64(p.RxDepth) > p.Iters {
			p.RxDepth = int(p.Iters)
		}
		if (p.Conn == ConnUD || p.Conn == ConnUC) && p.RxDepth == defRxSend {
			p.RxDepth = int(min(p.Iters, ucMaxRx))
		}
	}
	// UD keeps its CQ moderation: its messages are never large; so do events
	// (perftest: many processes with events lose some otherwise).
	if p.Size > msgSizeCQMod && !p.All && p.Conn != ConnUD && !p.UseEvent {
		if !p.reqCQMod {
			p.CQMod = 1
		} else if p.CQMod > 1 {
			p.Warnings = append(p.Warnings, resultLine+"Warning: Large message requested and CQ moderation enabled\nWarning: It can lead to inaccurate results\n")
		}
	}
	p.CQMod = min(p.CQMod, p.TxDepth)
	if t.Verb == VerbRead || t.Verb == VerbAtomic {
		p.Inline = 0
	}
	if p.Conn == ConnUD && p.Inline > maxInlineUD {
		p.Warnings = append(p.Warnings, resultLine+fmt.Sprintf("Setting inline size to %d (Max inline size in UD)\n", maxInlineUD))
		p.Inline = maxInlineUD
	}
	if p.All {
		if p.DurationMode() {
			return errors.New("duration mode currently doesn't support running on all sizes")
		}
		p.Size = maxSize
	}
	if t.Verb == VerbAtomic && p.Size != defSizeAtomic {
		return errors.New("message size cannot be changed for Atomic tests")
	}
	if t.Kind == Lat && (p.Duplex || p.QPs > 1) {
		return errors.New("bidirectional and multiple QPs are only available in BW tests")
	}
	if p.UseSRQ && t.Verb != VerbSend {
		return errors.New("using SRQ only available in SEND tests")
	}
	if p.UseSRQ && p.QPs > p.RxDepth {
		return errors.New("using SRQ depth should be greater than number of QPs")
	}
	if p.PostList > 1 {
		if !p.DurationMode() && p.Iters%uint64(p.PostList) != 0 {
			return errors.New("number of iterations must be a multiple of post list size")
		}
		if !p.reqCQMod {
			p.CQMod = p.PostList
			p.Warnings = append(p.Warnings, resultLine+"Post List requested - CQ moderation will be the size of the post list\n")
		} else if p.PostList%p.CQMod != 0 {
			return errors.New("post list size must be a multiple of CQ moderation")
		}
		if p.PostList > p.TxDepth {
			return fmt.Errorf("post list size %d is larger than the tx depth %d", p.PostList, p.TxDepth)
		}
	}
	if p.RecvPostList > 1 && !p.DurationMode() && p.Iters%uint64(p.RecvPostList) != 0 {
		return errors.New("number of iterations must be a multiple of receive post list size")
	}
	if p.CPUUtil && !p.DurationMode() {
		p.Warnings = append(p.Warnings, resultLine)
		p.Notes = append(p.Notes, " CPU Utilization works only with Duration mode.\n")
		p.CPUUtil = false
	}
	if p.Infinite {
		// perftest's RUN_INFINITELY dependencies; -D is the report period.
		switch {
		case p.UseEvent:
			return errors.New("run_infinitely does not support events feature yet")
		case p.Duplex && t.Verb == VerbSend:
			return errors.New("run_infinitely mode is not supported in SEND Bidirectional BW test")
		case p.RateLimitType != "":
			return errors.New("run_infinitely does not support rate limit feature yet")
		case p.All:
			return errors.New("run_infinitely runs one size: not with -a")
		}
		p.Period, p.Duration, p.NoPeak = p.Duration, 0, true
		if p.Period == 0 {
			p.Period = defDuration
		}
	}
	if p.DurationMode() && p.UseEvent {
		return errors.New("duration mode doesn't work with events")
	}
	if p.DurationMode() {
		// perftest 6.06 turns the peak off silently here and below; later
		// versions warn.
		p.Iters = 0
		p.NoPeak = true
		if p.Margin < 0 {
			p.Margin = p.Duration / 4
		}
		if p.Duration <= 2*p.Margin {
			return fmt.Errorf("duration %d must be longer than twice the margin %d", p.Duration, p.Margin)
		}
	}
	if t.Verb.hasRecvComp() && t.Kind == BW && p.Server() && !p.Local && !p.Duplex {
		p.NoPeak = true
	}
	// WA for a bug when rx_depth is odd in SEND.
	if t.Verb.hasRecvComp() && p.RxDepth%2 == 1 && !p.All {
		p.RxDepth++
	}
	if !p.DurationMode() && p.Iters > noPeakIters && !p.NoPeak && t.Kind == BW {
		p.NoPeak = true
	}
	if p.BurstSize <= 0 {
		p.BurstSize = p.TxDepth
	}
	return nil
}

// fitUD is perftest's rule that a UD message fits in one packet of mtu bytes
// (check_link_and_mtu with the port's MTU, check_mtu with the one both sides
// settled on): a size the user did not ask for, or -a's largest, comes down to
// the MTU with perftest's message; a size asked for is refused.
func (p *Params) fitUD(mtu int, errw io.Writer) error {
	if p.Conn != ConnUD || p.Size <= uint64(mtu) {
		return nil
	}
	if p.All || !p.reqSize {
		fmt.Fprintf(errw, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu)
		p.Size = uint64(mtu)
		return nil
	}
	return fmt.Errorf("max message size in UD cannot be greater than MTU (%d)", mtu)
}

// forRole returns a copy of p for one side of a --local run, with the
// server-only dependencies applied to the server.
func (p *Params) forRole(server bool, serverName string) *Params {
	q := *p
	q.Warnings, q.Notes = nil, nil
	q.Local = false
	q.ServerName = serverName
	if server {
		q.ServerName = ""
		if q.DumpBuffer != "" {
			q.DumpBuffer += ".server" // each side its own file
		}
	}
	// The receiver of send_bw reports no peak (force_dependecies), which side
	// that is with --reversed too.
	if q.Server() && q.Test.Verb.hasRecvComp() && q.Test.Kind == BW && !q.Duplex {
		q.NoPeak = true
	}
	return &q
}

// Usage writes the help text of a test.
func Usage(w io.Writer, test string) {
	t, ok := LookupTest(test)
	if !ok {
		return
	}
	p := &Params{Test: t}
	fs := newFlagSet(p)
	fmt.Fprintf(w, "Usage:\n  bench %s -d <iface>            start a server and wait for connection\n", t.Name)
	fmt.Fprintf(w, "  bench %s -d <iface> <host>     connect to server at <host>\n", t.Name)
	fmt.Fprintf(w, "  bench %s --local               both sides in this process over lo (no root)\n\nOptions:\n", t.Name)
	fs.SetOutput(w)
	fs.PrintDefaults()
}
