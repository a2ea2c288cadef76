package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// TestPcapVeth: --pcap records what each side's device sends and receives over
// AF_XDP (which tcpdump on the interface cannot see), both directions, in a
// file tshark dissects without an error; the client's frames carry --tclass's
// traffic class in their IPv4 TOS.
func TestPcapVeth(t *testing.T) {
	testutil.RequireRoot(t)
	tshark := testutil.RequireCommand(t, "tshark")
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 1500})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	srvPcap, cliPcap := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "client.pcap")
	args := []string{"write_bw", "-d", "", "--link", "af_xdp", "-s", "4096", "-n", "50", "-p", "18517", "--tclass", "0x68", "--pcap", ""}
	// Each side its own file; runPairOnVethArgs fills in -d.
	sargs := append(append([]string(nil), args[:len(args)-1]...), srvPcap)
	cargs := append(append([]string(nil), args[:len(args)-1]...), cliPcap)
	sout, cout, serr, cerr := runPairOnVethArgs(t, ctx, p, sargs, cargs, "Waiting for client")
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout, serr, sout)
	}
	a, b := p.A.IPv4.String(), p.B.IPv4.String()
	for _, c := range []struct{ file, self, peer string }{{srvPcap, a, b}, {cliPcap, b, a}} {
		out, err := exec.Command(tshark, "-Q", "-r", c.file, "-T", "fields", "-E", "separator=,",
			"-e", "ip.src", "-e", "ip.dst", "-e", "ip.dsfield", "-e", "infiniband.bth.opcode", "-e", "_ws.expert.severity").Output()
		if err != nil {
			t.Fatalf("tshark -r %s: %v", c.file, err)
		}
		var sent, got int
		for l := range strings.Lines(string(out)) {
			f := strings.Split(strings.TrimSpace(l), ",")
			if len(f) != 5 {
				t.Fatalf("%s: tshark line %q", c.file, l)
			}
			if f[4] != "" {
				t.Errorf("%s: tshark reports a problem (expert severity %s) in %q", c.file, f[4], l)
			}
			switch {
			case f[0] == c.self && f[1] == c.peer:
				sent++
				if c.file == cliPcap && f[2] != "0x68" {
					t.Errorf("client frame with TOS %s, want --tclass 0x68: %q", f[2], l)
				}
			case f[0] == c.peer && f[1] == c.self:
				got++
			default:
				t.Errorf("%s: a frame between %s and %s", c.file, f[0], f[1])
			}
		}
		if sent == 0 || got == 0 {
			t.Errorf("%s: %d frames sent and %d received, want both directions", c.file, sent, got)
		}
		t.Logf("%s: %d frames sent, %d received", filepath.Base(c.file), sent, got)
	}
}
