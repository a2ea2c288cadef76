package pingpong

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
)

func TestParseDefaults(t *testing.T) {
	p, err := Parse(RC, []string{"-d", "vb0", "-g", "1"})
	if err != nil {
		t.Fatal(err)
	}
	want := Params{Kind: RC, NumQP: 1, Port: 18515, Device: "vb0", LinkKind: link.KindAuto, IBPort: 1, Size: 4096, MTU: qpattr.MTU1024,
		RxDepth: 500, Iters: 1000, GIDIndex: 1, Timeout: DefaultTimeout, portSet: false, gidSet: true}
	if *p != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", *p, want)
	}
	if !p.Server() {
		t.Error("no server name, not a server")
	}
}

// TestParseKinds: each example's own flags and defaults, and its refusals.
func TestParseKinds(t *testing.T) {
	p, err := Parse(UD, []string{"-d", "x", "-g", "1"})
	if err != nil || p.Size != 1024 || p.NumQP != 1 {
		t.Errorf("ud_pingpong defaults: %+v %v", p, err)
	}
	p, err = Parse(SRQ, []string{"-d", "x", "-g", "1"})
	if err != nil || p.Size != 4096 || p.NumQP != 16 || p.RxDepth != 500 {
		t.Errorf("srq_pingpong defaults: %+v %v", p, err)
	}
	p, err = Parse(SRQ, []string{"-d", "x", "-g", "1", "--num-qp", "4"})
	if err != nil || p.NumQP != 4 {
		t.Errorf("srq_pingpong -q 4: %+v %v", p, err)
	}
	for _, c := range []struct {
		k    Kind
		args []string
		want string
	}{
		{UD, []string{"-d", "x", "-g", "1", "-m", "1024"}, "unknown shorthand flag: 'm'"},
		{UC, []string{"-d", "x", "-g", "1", "-o"}, "unknown shorthand flag: 'o'"},
		{UC, []string{"-d", "x", "-g", "1", "-N"}, "unknown shorthand flag: 'N'"},
		{RC, []string{"-d", "x", "-g", "1", "-q", "2"}, "unknown shorthand flag: 'q'"},
		{SRQ, []string{"-d", "x", "-g", "1", "-q", "600"}, "rx_depth 500 is too small for 600 QPs"},
		{SRQ, []string{"-d", "x", "-g", "1", "-q", "256", "-r", "1000"}, "num_qp 256 must be less than 255"},
		{SRQ, []string{"-d", "x", "-g", "1", "-o"}, "RC send, receive and srq with ODP"},
	} {
		_, err := Parse(c.k, c.args)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), string(c.k)+": ") {
			t.Errorf("%s %q = %v, want a usage error with %q", c.k, c.args, err, c.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	// The interop suite's command lines, and each flag in its long and short forms.
	p, err := Parse(RC, []string{"-d", "vb0", "-g", "1", "-s", "1048576", "-n", "20", "-c", "-m", "4096", "192.0.2.11"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Size != 1048576 || p.Iters != 20 || !p.Check || p.MTU != qpattr.MTU4096 || p.ServerName != "192.0.2.11" || p.Server() {
		t.Errorf("%+v", *p)
	}
	p, err = Parse(RC, []string{"--port=0x4853", "--ib-dev", "vb0", "--ib-port", "1", "--size=010", "--mtu", "256",
		"--rx-depth", "7", "--iters", "3", "--sl", "2", "--events", "--gid-idx=0", "--chk", "--new_send",
		"--link", "udp", "--timeout", "1.5s", "host"})
	if err != nil {
		t.Fatal(err)
	}
	want := Params{Kind: RC, NumQP: 1, Port: 0x4853, Device: "vb0", LinkKind: link.KindUDP, IBPort: 1, Size: 8, MTU: qpattr.MTU256, RxDepth: 7,
		Iters: 3, SL: 2, Events: true, GIDIndex: 0, Check: true, NewSend: true, ServerName: "host",
		Timeout: 1500 * time.Millisecond, portSet: true, gidSet: true}
	if *p != want {
		t.Errorf("long forms:\n got %+v\nwant %+v", *p, want)
	}
	// getopt's forms: an attached value, grouped booleans, options after the host.
	p, err = Parse(RC, []string{"-dvb0", "-s1", "host", "-ec", "-g", "1"})
	if err != nil || p.Device != "vb0" || p.Size != 1 || !p.Events || !p.Check || p.ServerName != "host" || p.GIDIndex != 1 {
		t.Errorf("short forms: %+v, %v", p, err)
	}
	p, err = Parse(RC, []string{"--local", "-n", "5"})
	if err != nil || !p.Local || p.Device != "" || p.Iters != 5 {
		t.Errorf("--local: %+v, %v", p, err)
	}
	p, err = Parse(RC, []string{"-h"})
	if err != nil || !p.Help {
		t.Errorf("-h: %+v, %v", p, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-d", "vb0", "--nope"}, "unknown flag: --nope"},
		{[]string{"-d", "vb0", "-x", "1"}, "unknown shorthand flag: 'x'"},
		{[]string{"-d", "vb0", "-U"}, "unknown shorthand flag: 'U'"}, // rdma-core 45+, not 44
		{[]string{"-d", "vb0", "-s"}, "flag needs an argument"},
		{[]string{"-d", "vb0", "-s", "4k"}, `"4k" is not a number`},
		{[]string{"-d", "vb0", "-n", ""}, `"" is not a number`},
		{[]string{"-d", "vb0", "-p", "65536"}, "port 65536 outside 0..65535"},
		{[]string{"-d", "vb0", "-i", "0"}, "IB port 0"},
		{[]string{"-d", "vb0", "-m", "1500"}, "invalid MTU 1500"},
		{[]string{"-d", "vb0", "-m", "0"}, "invalid MTU 0"},
		{[]string{"-d", "vb0", "-o"}, "isn't ODP capable"},
		{[]string{"-d", "vb0", "--iodp"}, "isn't ODP capable"},
		{[]string{"-d", "vb0", "-P"}, "prefetch is valid only with on-demand memory region"},
		{[]string{"-d", "vb0", "-o", "-j"}, "DM memory region can't be on demand"},
		{[]string{"-d", "vb0", "-t"}, "isn't completion timestamp capable"},
		{[]string{"-d", "vb0", "--dm"}, "doesn't support dm allocation"},
		{[]string{"-d", "vb0", "-s", "0"}, "message size 0"},
		{[]string{"-d", "vb0", "-r", "0"}, "rx depth 0"},
		{[]string{"-d", "vb0", "-n", "0"}, "iters 0"},
		{[]string{"-d", "vb0", "-n", "-1"}, "iters -1"},
		{[]string{"-d", "vb0", "--timeout", "-1s"}, "must not be negative"},
		{[]string{"-d", "vb0", "--link", "memory"}, `--link "memory"`},
		{[]string{"-d", "vb0", "a", "b"}, "too many arguments"},
		{[]string{"--local", "host"}, "--local runs both sides"},
		{[]string{"-g", "1"}, "no device"},
		{[]string{"-d", "vb0"}, "no GID index: RoCE needs one, give -g"},
		{[]string{"-d", "vb0", "-g", "-1"}, "no GID index"},
	} {
		_, err := Parse(RC, c.args)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) ||
			!strings.HasPrefix(err.Error(), "rc_pingpong: ") || !strings.HasSuffix(err.Error(), "(bench rc_pingpong -h lists the options)") {
			t.Errorf("Parse(%q) = %v, want a usage error with %q", c.args, err, c.want)
		}
	}
}

func TestUsage(t *testing.T) {
	var b bytes.Buffer
	Usage(&b, RC)
	for _, f := range []string{"-p, --port", "-d, --ib-dev", "-i, --ib-port", "-s, --size", "-m, --mtu", "-r, --rx-depth",
		"-n, --iters", "-l, --sl", "-e, --events", "-g, --gid-idx", "-o, --odp", "-O, --iodp", "-P, --prefetch",
		"-t, --ts", "-c, --chk", "-j, --dm", "-N, --new_send", "--link", "--local", "--timeout", "-h, --help"} {
		if !strings.Contains(b.String(), f) {
			t.Errorf("usage lacks %q:\n%s", f, b.String())
		}
	}
}
