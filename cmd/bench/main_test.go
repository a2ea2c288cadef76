package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/xrnic/xrnic/internal/testutil"
)

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"write_bw"}, {"link", "--nope"}, {"link", "--xdp-mode", "turbo"}} {
		err := run(args, &bytes.Buffer{})
		if !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
	if err := run([]string{"link", "--sizes", "9000"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "9000") {
		t.Errorf("oversized payload: %v", err)
	}
}

// TestLinkRun runs the real thing briefly: namespaces, veth, XDP, both receivers.
func TestLinkRun(t *testing.T) {
	testutil.RequireRoot(t)
	var out bytes.Buffer
	if err := run([]string{"link", "--sizes", "64,4096", "--duration", "200ms"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[1], "payload") {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) != 5 || (f[1] != "af_xdp" && f[1] != "udp") || f[2] == "0" {
			t.Errorf("result line %q", l)
		}
	}
}
