package perftest

import (
	"errors"
	"strings"
	"testing"

	"github.com/xrnic/xrnic/nic/link"
)

func TestParse(t *testing.T) {
	type want struct {
		server                   string
		size, iters              uint64
		tx, rx, cqMod, qps, port int
		noPeak, all, duplex      bool
		inline, gid, mtu         int
		dur, margin              int
		kind                     link.Kind
	}
	cases := []struct {
		test string
		args []string
		w    want
	}{
		{"write_bw", []string{"-d", "veth0"},
			want{size: 65536, iters: 5000, tx: 128, rx: 1, cqMod: 1, qps: 1, port: 18515, inline: -1, gid: -1, margin: -1}},
		{"write_bw", []string{"-d", "veth0", "192.0.2.1", "-s", "4096", "-n", "100", "-q", "2", "-Q", "10", "-p", "9999", "--link", "udp"},
			want{server: "192.0.2.1", size: 4096, iters: 100, tx: 100, rx: 1, cqMod: 10, qps: 2, port: 9999, inline: -1, gid: -1, margin: -1, kind: link.KindUDP}},
		{"write_bw", []string{"--ib-dev=veth0", "-a", "-x", "1", "-m", "1024", "-F", "--report_gbits", "--out_json", "--out_json_file", "r.json"},
			want{size: 8388608, iters: 5000, tx: 128, rx: 1, cqMod: 100, qps: 1, port: 18515, all: true, inline: -1, gid: 1, mtu: 1024, margin: -1}},
		{"read_bw", []string{"-d", "veth0", "-D", "8", "-b", "-t", "64"},
			want{size: 65536, tx: 64, rx: 1, cqMod: 1, qps: 1, port: 18515, noPeak: true, duplex: true, inline: 0, gid: -1, dur: 8, margin: 2}},
		{"send_bw", []string{"-d", "veth0", "-r", "33", "-s", "64K"},
			want{size: 65536, iters: 1000, tx: 128, rx: 34, cqMod: 1, qps: 1, port: 18515, noPeak: true, inline: -1, gid: -1, margin: -1}},
		{"send_bw", []string{"-d", "veth0", "10.0.0.1", "-s", "64"},
			want{server: "10.0.0.1", size: 64, iters: 1000, tx: 128, rx: 512, cqMod: 100, qps: 1, port: 18515, inline: -1, gid: -1, margin: -1}},
		{"atomic_bw", []string{"-d", "veth0", "-n", "30000"},
			want{size: 8, iters: 30000, tx: 128, rx: 1, cqMod: 100, qps: 1, port: 18515, noPeak: true, inline: 0, gid: -1, margin: -1}},
		{"write_lat", []string{"--local", "-I", "64"},
			want{size: 2, iters: 1000, tx: 1, rx: 1, cqMod: 1, qps: 1, port: 18515, inline: 64, gid: -1, margin: -1}},
		{"send_lat", []string{"-d", "lo", "-n", "5"},
			want{size: 2, iters: 5, tx: 1, rx: 6, cqMod: 1, qps: 1, port: 18515, inline: -1, gid: -1, margin: -1}},
	}
	for _, c := range cases {
		p, err := Parse(c.test, c.args)
		if err != nil {
			t.Errorf("Parse(%s %q): %v", c.test, c.args, err)
			continue
		}
		got := want{p.ServerName, p.Size, p.Iters, p.TxDepth, p.RxDepth, p.CQMod, p.QPs, p.Port, p.NoPeak, p.All,
			p.Duplex, p.Inline, p.GIDIndex, p.MTU, p.Duration, p.Margin, p.LinkKind}
		if got != c.w {
			t.Errorf("Parse(%s %q):\n got %+v\nwant %+v", c.test, c.args, got, c.w)
		}
	}
	// UD: perftest's receive depth (UC_MAX_RX), CQ moderation kept for any
	// size, inline capped at MAX_INLINE_UD with its message.
	p, err := Parse("send_bw", []string{"-d", "x", "-c", "UD", "-n", "20000", "-I", "900"})
	if err != nil || p.Conn != ConnUD || p.RxDepth != 16000 || p.CQMod != 100 || p.Inline != 884 ||
		len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "Setting inline size to 884 (Max inline size in UD)") {
		t.Errorf("send_bw -c UD: %+v, %v", p, err)
	}
	if p, err := Parse("write_bw", []string{"-d", "x", "-c", "UC"}); err != nil || p.Conn != ConnUC || p.CQMod != 1 {
		t.Errorf("write_bw -c UC: %+v, %v", p, err)
	}
	p, _ = Parse("write_bw", []string{"-d", "x", "--out_json", "--out_json_file", "r.json", "-A", "CMP_AND_SWAP"})
	if p != nil {
		t.Errorf("-A accepted on write_bw")
	}
	p, err = Parse("atomic_bw", []string{"-d", "x", "-A", "CMP_AND_SWAP", "--out_json"})
	if err != nil || p.AtomicType != CmpAndSwap || !p.OutJSON || p.OutJSONFile != "perftest_out.json" {
		t.Errorf("atomic_bw -A: %+v, %v", p, err)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		test string
		args []string
		want string
	}{
		{"write_bw", []string{"-d", "x", "--nope"}, "unknown flag: --nope"},
		{"write_bw", []string{"-d", "x", "-c", "UD"}, "UD connection only possible in SEND verb"},
		{"read_bw", []string{"-d", "x", "-c", "UC"}, "UC connection not possible in READ/ATOMIC verbs"},
		{"send_bw", []string{"-d", "x", "-c", "XRC"}, "error opening XRC domain"},
		{"send_bw", []string{"-d", "x", "-c", "TCP"}, "invalid connection type \"TCP\""},
		{"send_bw", []string{"-d", "x", "-c", "UC", "-R"}, "rdma_cm does not support UC"},
		{"write_bw", []string{"-d", "x", "-9"}, "unknown shorthand flag: '9'"},
		{"write_bw", nil, "no device"},
		{"write_bw", []string{"-d", "x", "a", "b"}, "too many arguments"},
		{"write_bw", []string{"--local", "192.0.2.1"}, "--local runs both sides"},
		{"write_bw", []string{"-d", "x", "-n", "4"}, "iteration num 4"},
		{"write_bw", []string{"-d", "x", "-s", "0"}, "message size"},
		{"write_bw", []string{"-d", "x", "-s", "3G"}, "message size"},
		{"write_bw", []string{"-d", "x", "-m", "1000"}, "invalid MTU 1000"},
		{"write_bw", []string{"-d", "x", "-Q", "0"}, "CQ moderation 0"},
		{"write_bw", []string{"-d", "x", "-t", "20000"}, "tx depth 20000"},
		{"write_bw", []string{"-d", "x", "-x", "65"}, "GID index 65"},
		{"write_bw", []string{"-d", "x", "-p", "0"}, "port 0"},
		{"write_bw", []string{"-d", "x", "--link", "memory"}, "--link"},
		{"write_bw", []string{"-d", "x", "-a", "-D", "4"}, "all sizes"},
		{"write_bw", []string{"-d", "x", "-D", "2", "-f", "1"}, "twice the margin"},
		{"read_bw", []string{"-d", "x", "-I", "64"}, "unknown shorthand flag: 'I'"},
		{"read_bw", []string{"-d", "x", "-r", "8"}, "rx depth can be only 1"},
		{"atomic_bw", []string{"-d", "x", "-s", "16"}, "cannot be changed for Atomic"},
		{"atomic_bw", []string{"-d", "x", "-A", "SWAP"}, "invalid atomic type"},
		{"write_lat", []string{"-d", "x", "-b"}, "unknown shorthand flag: 'b'"},
		{"write_lat", []string{"-d", "x", "-q", "2"}, "unknown shorthand flag: 'q'"},
		{"nope_bw", nil, "unknown test"},
		// The options beyond the basic ones, with perftest's checks.
		{"write_bw", []string{"-d", "x", "-e"}, "events feature not available on WRITE verb"},
		{"write_lat", []string{"-d", "x", "-X", "0"}, "events feature not available on WRITE verb"},
		{"send_bw", []string{"-d", "x", "-e", "-X", "1"}, "completion vector 1"},
		{"send_bw", []string{"-d", "x", "-e", "-D", "4"}, "duration mode doesn't work with events"},
		{"write_bw", []string{"-d", "x", "-l", "3", "-n", "100"}, "multiple of post list size"},
		{"write_bw", []string{"-d", "x", "-l", "4", "-Q", "3", "-n", "100"}, "multiple of CQ moderation"},
		{"write_bw", []string{"-d", "x", "-l", "0"}, "post list size 0"},
		{"send_bw", []string{"-d", "x", "--recv_post_list", "3", "-n", "100"}, "multiple of receive post list size"},
		{"write_lat", []string{"-d", "x", "-l", "2"}, "unknown shorthand flag: 'l'"},
		{"write_bw", []string{"-d", "x", "--use-srq"}, "SRQ only available in SEND tests"},
		{"send_bw", []string{"-d", "x", "--use-srq", "-q", "8", "-r", "4"}, "SRQ depth should be greater than number of QPs"},
		{"write_bw", []string{"-d", "x", "--output", "latency"}, "for BW can be: bandwidth, message_rate"},
		{"send_lat", []string{"-d", "x", "--output", "bandwidth"}, "for LAT can be: latency"},
		{"send_lat", []string{"-d", "x", "--output", "speed"}, "invalid verbosity level output flag"},
		{"write_bw", []string{"-d", "x", "-w", "-1"}, "invalid Minimum BW Limit"},
		{"write_bw", []string{"-d", "x", "-S", "16"}, "service level 16"},
		{"write_bw", []string{"-d", "x", "--tclass", "256"}, "traffic class 256"},
		{"write_bw", []string{"-d", "x", "--pkey_index", "1"}, "P_Key index 1"},
		{"write_bw", []string{"-d", "x", "--force-link", "IB"}, "Ethernet (RoCE) device"},
		{"write_bw", []string{"-d", "x", "-L", "5"}, "Hop limit only valid for RawEth QP"},
		{"write_bw", []string{"-d", "x", "-T", "5"}, "TOS only valid for rdma_cm based QP"},
		{"write_bw", []string{"-d", "x", "-R", "-T", "256"}, "TOS 256"},
		{"write_bw", []string{"-d", "x", "--odp"}, "ODP is not supported"},
		{"write_bw", []string{"-d", "x", "-O"}, "one port"},
		{"send_bw", []string{"-d", "x", "-g"}, "multicast"},
		{"write_bw", []string{"-d", "x", "--source_ip", "10.0.0.1"}, "raw_ethernet"},
		{"write_bw", []string{"-d", "x", "--use_cuda", "0"}, "CUDA not supported"},
		{"write_bw", []string{"-d", "x", "-C"}, "unknown shorthand flag: 'C'"},
		{"write_lat", []string{"-d", "x", "--latency_gap", "-1"}, "latency gap time -1"},
		{"write_bw", []string{"-d", "x", "--latency_gap", "1"}, "unknown flag: --latency_gap"},
	}
	for _, c := range cases {
		_, err := Parse(c.test, c.args)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s %q) = %v, want a usage error with %q", c.test, c.args, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%s %q): error of more than one line: %q", c.test, c.args, err)
		}
	}
}

func TestUsageListsPerftestFlags(t *testing.T) {
	var b strings.Builder
	Usage(&b, "write_bw")
	for _, f := range []string{"-d, --ib-dev", "-s, --size", "-n, --iters", "-a, --all", "-q, --qp", "-t, --tx-depth",
		"-r, --rx-depth", "-Q, --cq-mod", "-m, --mtu", "-D, --duration", "-p, --port", "-I, --inline_size",
		"-b, --bidirectional", "-x, --gid-index", "-F, --CPU-freq", "--report_gbits", "--out_json", "--out_json_file", "--local", "--link"} {
		if !strings.Contains(b.String(), f) {
			t.Errorf("usage lacks %q:\n%s", f, b.String())
		}
	}
}
