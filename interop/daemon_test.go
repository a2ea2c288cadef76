//go:build interop

package interop

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// daemon runs the xrnic daemon on vb0 and two ib_write_bw clients in the guest
// at once against its bench server; then scrapes its metrics, stops it with
// SIGTERM and checks that nothing is left attached to vb0.
func daemon(t *testing.T, g *guest) {
	name := artifactName(t)
	xrnic := filepath.Join(filepath.Dir(suite.bench), "xrnic")
	h := startHost(t, runTimeout, "ready:", xrnic, "-i", ifXrnic, "--metrics", "127.0.0.1:9479", "--control", "",
		"--bench-test", "write_bw", "--bench-opts", "-x 1 -s 65536 -n 100")
	cmd := "ib_write_bw -d " + guestDev + " -x 1 -s 65536 -n 100 " + ipXrnic
	var c *capture
	var out1, out2 string
	var err1, err2 error
	for attempt := 1; ; attempt++ {
		c = startCapture(t, name)
		j1, j2 := g.start(t, cmd), g.start(t, cmd)
		out1, err1 = j1.wait(runTimeout)
		out2, err2 = j2.wait(runTimeout)
		c.stop(t)
		save(t, name+".guest1.txt", []byte(out1))
		save(t, name+".guest2.txt", []byte(out2))
		// A client whose clock calibration failed under emulation: both again
		// (the daemon serves any number of clients).
		if (clockMisread(out1) || clockMisread(out2)) && attempt < 3 {
			t.Logf("attempt %d: an ib_write_bw client misread its clock under emulation: again", attempt)
			continue
		}
		break
	}
	if err1 != nil || err2 != nil {
		t.Fatalf("ib_write_bw: %v, %v\n--- 1:\n%s\n--- 2:\n%s\n--- xrnic:\n%s", err1, err2, out1, out2, h.out)
	}
	r1, r2 := parseBW(t, "client 1", out1), parseBW(t, "client 2", out2)
	// The clients measure, with a clock that can misread under emulation: only
	// the counts are checked here (writeBW checks bandwidth).
	if r1.iters != 100 || r2.iters != 100 || r1.size != 65536 || r2.size != 65536 {
		t.Errorf("results: %q, %q", r1.text, r2.text)
	}
	checkICRC(t, c, name, frames(t, c.path))

	// The metrics, scraped from inside the namespace.
	ctx, cancel := context.WithTimeout(context.Background(), shortTimeout)
	defer cancel()
	body, err := exec.CommandContext(ctx, "ip", "netns", "exec", nsXrnic, "curl", "-sf", "http://127.0.0.1:9479/metrics").Output()
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	save(t, name+".metrics.txt", body)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse the metrics: %v", err)
	}
	sum := func(name string) float64 {
		var v float64
		for _, m := range mfs[name].GetMetric() {
			v += m.GetCounter().GetValue()
		}
		return v
	}
	// Two clients, 100 messages of 64 packets each at MTU 1024.
	want := float64(2 * 100 * ((65536 + g.mtu - 1) / g.mtu))
	if got := sum("xrnic_rcvd_pkts_total"); got < want {
		t.Errorf("xrnic_rcvd_pkts_total = %v, want at least %v", got, want)
	}

	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	out, err := h.wait()
	save(t, name+".xrnic.txt", []byte(out))
	if err != nil {
		t.Errorf("xrnic after SIGTERM: %v\n%s", err, out)
	}
	link, err := exec.CommandContext(ctx, "ip", "-n", nsXrnic, "-d", "link", "show", ifXrnic).CombinedOutput()
	if err != nil || strings.Contains(string(link), "xdp") {
		t.Errorf("vb0 after the daemon stopped (%v):\n%s", err, link)
	}
}
