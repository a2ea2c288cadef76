package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/testenv"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

func TestUdaddyUsage(t *testing.T) {
	for _, args := range [][]string{{"udaddy", "-c", "0"}, {"udaddy", "-P", "ipoib"}, {"udaddy", "-f", "gid"},
		{"udaddy", "-t", "4"}, {"udaddy", "extra"}} {
		out, err := runBench(args...)
		if err == nil || !strings.Contains(out, "[-C message_count]") {
			t.Errorf("%q: %v\n%s", args, err, out)
		}
	}
}

// listeningOn reports whether a listener on port of port space ps is up on
// any of the process's devices.
func listeningOn(ps rdmacm.PortSpace, port uint16) bool {
	for _, d := range verbs.Devices() {
		for _, id := range rdmacm.Resources(d) {
			if id.State == "LISTEN" && id.PS == ps && id.Src.Port() == port {
				return true
			}
		}
	}
	return false
}

// TestUdaddyVeth: bench udaddy as server and client on a veth pair (AF_XDP):
// two UD connections resolved through SIDR, ten messages each way on each
// (the server replies through an address handle made from the GRH), and
// udaddy's output, line for line.
func TestUdaddyVeth(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 1500})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var so, se, co, ce testutil.SyncBuffer
	sres, cres := make(chan error, 1), make(chan error, 1)
	srv := []string{"udaddy", "-b", p.A.IPv4.String(), "-c", "2", "-C", "10", "-S", "1000"}
	if err := p.A.NS.Go(func() { sres <- run(ctx, srv, &so, &se) }); err != nil {
		t.Fatal(err)
	}
	for !listeningOn(rdmacm.PSUDP, 7174) {
		select {
		case err := <-sres:
			t.Fatalf("server: %v\n%s", err, so.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cli := []string{"udaddy", "-s", p.A.IPv4.String(), "-c", "2", "-C", "10", "-S", "1000"}
	if err := p.B.NS.Go(func() { cres <- run(ctx, cli, &co, &ce) }); err != nil {
		t.Fatal(err)
	}
	if err := <-cres; err != nil {
		t.Fatalf("client: %v\n%s%s", err, co.String(), ce.String())
	}
	if err := <-sres; err != nil {
		t.Fatalf("server: %v\n%s%s", err, so.String(), se.String())
	}
	want := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	if co.String() != want {
		t.Errorf("client output:\n%s\nwant:\n%s", co.String(), want)
	}
	want = "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\n" +
		"test complete\nreturn status 0\n"
	if so.String() != want {
		t.Errorf("server output:\n%s\nwant:\n%s", so.String(), want)
	}
}

// TestUdaddyNoUDPListener: the server's device listens on port 7174 of the TCP
// port space only (an rping server), so the client's SIDR_REQ for the UDP
// port space's service finds no listener: as ib_cm, the server answers
// SIDR_REP with status 1 (unsupported service), and udaddy reports
// UNREACHABLE with that status.
func TestUdaddyNoUDPListener(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 1500})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	var so, se testutil.SyncBuffer
	sres := make(chan error, 1)
	if err := p.A.NS.Go(func() { sres <- run(sctx, []string{"rping", "-s", "-a", p.A.IPv4.String()}, &so, &se) }); err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); <-sres }()
	for !listeningOn(rdmacm.PSTCP, 7174) {
		select {
		case err := <-sres:
			t.Fatalf("rping server: %v\n%s%s", err, so.String(), se.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	var co, ce testutil.SyncBuffer
	cres := make(chan error, 1)
	if err := p.B.NS.Go(func() { cres <- run(ctx, []string{"udaddy", "-s", p.A.IPv4.String()}, &co, &ce) }); err != nil {
		t.Fatal(err)
	}
	err := <-cres
	want := "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\n" +
		"test complete\nreturn status 1\n"
	if err == nil || co.String() != want {
		t.Fatalf("client against no UDP listener: %v\n%s%s\nwant:\n%s", err, co.String(), ce.String(), want)
	}
}
