package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/rping"
	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
)

// rpingLines is what rping -v prints for count pings of size bytes, with
// prefix ("ping data: " for the client, "server ping data: " for the server).
func rpingLines(prefix string, count, size int) string {
	var b strings.Builder
	for ping := range count {
		fmt.Fprintf(&b, "%s%s\n", prefix, rping.Data(ping, size))
	}
	return b.String()
}

func TestRpingUsage(t *testing.T) {
	for _, args := range [][]string{{"rping"}, {"rping", "-s", "-c"}, {"rping", "-c"}, {"rping", "-s", "-S", "4"},
		{"rping", "-s", "-P"}, {"rping", "-s", "--nope"}} {
		out, err := runBench(args...)
		if err == nil || !strings.Contains(out, "rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]") {
			t.Errorf("%q: %v\n%s", args, err, out)
		}
	}
}

// TestRpingVeth: bench rping as server and client on a veth pair (AF_XDP), the
// CM over QP1, data checked both ways (-V) and printed (-v) as rping does;
// with --ndk on either side or both, the same over the ndk layer.
func TestRpingVeth(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		name           string
		srvNDK, cliNDK bool
	}{{"verbs", false, false}, {"ndk_server", true, false}, {"ndk_client", false, true}, {"ndk", true, true}} {
		t.Run(c.name, func(t *testing.T) { rpingVeth(t, c.srvNDK, c.cliNDK) })
	}
}

func rpingVeth(t *testing.T, srvNDK, cliNDK bool) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 1500})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const count, size = 10, 100
	ready := make(chan struct{})
	var so bytes.Buffer
	var se, co, ce testutil.SyncBuffer
	sres, cres := make(chan error, 1), make(chan error, 1)
	srv := []string{"rping", "-s", "-d", "-v", "-a", p.A.IPv4.String(), "-S", fmt.Sprint(size)}
	needle, srvErr := "rdma_listen", "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n"
	if srvNDK {
		srv = append(srv, "--ndk")
		needle, srvErr = "NdkListen", "server DISCONNECT EVENT...\n"
	}
	if err := p.A.NS.Go(func() {
		sres <- run(ctx, srv, &signalWriter{w: &so, needle: needle, ch: ready}, &se)
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
	case err := <-sres:
		t.Fatalf("server: %v\n%s", err, so.String())
	}
	cli := []string{"rping", "-c", "-v", "-V", "-C", fmt.Sprint(count), "-S", fmt.Sprint(size), "-a", p.A.IPv4.String()}
	if cliNDK {
		cli = append(cli, "--ndk")
	}
	if err := p.B.NS.Go(func() { cres <- run(ctx, cli, &co, &ce) }); err != nil {
		t.Fatal(err)
	}
	if err := <-cres; err != nil {
		t.Fatalf("client: %v\n%s%s", err, co.String(), ce.String())
	}
	if err := <-sres; err != nil {
		t.Fatalf("server: %v\n%s%s", err, so.String(), se.String())
	}
	if want := rpingLines("ping data: ", count, size); co.String() != want {
		t.Errorf("client output:\n%s\nwant:\n%s", co.String(), want)
	}
	var got strings.Builder // the server ran with -d: its data lines among the debug ones
	for _, l := range strings.SplitAfter(so.String(), "\n") {
		if strings.HasPrefix(l, "server ping data: ") {
			got.WriteString(l)
		}
	}
	if want := rpingLines("server ping data: ", count, size); got.String() != want {
		t.Errorf("server output:\n%s", so.String())
	}
	// rping's server ends on the client's disconnect as rping does.
	if se.String() != srvErr {
		t.Errorf("server stderr:\n%s", se.String())
	}
}
