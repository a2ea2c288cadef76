package rping

import (
	"errors"
	"strings"
	"testing"
)

// TestData: rping.c's pattern, worked by hand for the first pings and the wrap.
func TestData(t *testing.T) {
	if got := string(Data(0, 30)); got != "rdma-ping-0: ABCDEFGHIJKLMNOP" {
		t.Errorf("ping 0: %q", got)
	}
	if got := string(Data(1, 20)); got != "rdma-ping-1: BCDEFG" {
		t.Errorf("ping 1: %q", got)
	}
	// The letters run 'A'..'z' and wrap; the start moves one per ping, mod 58.
	if got := string(Data(57, 20)); got != "rdma-ping-57: zABCD" {
		t.Errorf("ping 57: %q", got)
	}
	if got := string(Data(58, 20)); got != "rdma-ping-58: ABCDE" {
		t.Errorf("ping 58: %q", got)
	}
}

func TestParse(t *testing.T) {
	p, err := Parse([]string{"-c", "-a", "192.0.2.1", "-vv", "-V", "-C", "5", "-S", "100", "-p", "9000"})
	if err != nil || !p.Client || p.Verbose != 2 || !p.Validate || p.Count != 5 || p.Size != 100 || p.Port != 9000 {
		t.Fatalf("%+v %v", p, err)
	}
	for _, args := range [][]string{{"-s", "-S", "25"}, {"-s", "-S", "65536"}, {"-c"}, {"-s", "-c"}, {"-s", "-P"},
		{"-s", "-C", "-1"}, {"-s", "x"}, {"-s", "--link", "nope"}} {
		if _, err := Parse(args); !errors.Is(err, ErrUsage) {
			t.Errorf("%q: %v", args, err)
		}
	}
	if _, err := Parse([]string{"-s", "-S", "26"}); err != nil {
		t.Errorf("minimum size: %v", err)
	}
	var b strings.Builder
	Usage(&b)
	if !strings.HasPrefix(b.String(), "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n") {
		t.Errorf("usage:\n%s", b.String())
	}
}
