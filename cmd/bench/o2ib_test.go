package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/internal/testutil/memdev"
	"github.com/xrnic/xrnic/ndk/o2ib"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/testenv"
	"github.com/xrnic/xrnic/verbs"
)

// o2ibMsg is a workload message: the connection's id and the message's
// sequence number, then bytes that follow from both, n in all.
func o2ibMsg(conn, seq uint64, n int) []byte {
	b := make([]byte, max(n, 16))
	binary.BigEndian.PutUint64(b, conn)
	binary.BigEndian.PutUint64(b[8:], seq)
	r := rand.New(rand.NewPCG(conn, seq))
	for i := 16; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
	return b
}

// o2ibSize is message seq's size: mostly small (inline), some mid-sized and
// some up to 1 MiB (PUT by RDMA WRITE).
func o2ibSize(r *rand.Rand) int {
	switch x := r.IntN(10); {
	case x < 5:
		return 16 + r.IntN(4000)
	case x < 8:
		return 4096 + r.IntN(60<<10)
	default:
		return 64<<10 + r.IntN(1<<20-64<<10+1)
	}
}

// o2ibLoad is a workload over NIs: every client NI connects to every server
// NI, and each connection carries msgs messages (and a GET every tenth),
// each checked on arrival: its bytes, and that no (connection, sequence)
// arrives twice.
type o2ibLoad struct {
	t        *testing.T
	servers  []*o2ib.NI
	clients  []*o2ib.NI
	mu       sync.Mutex
	seen     map[[2]uint64]bool
	bad      []string
	bytes    int64
	received int
	base     uint64 // the next connection id run gives
}

func (l *o2ibLoad) check(m o2ib.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(m.Data) < 16 {
		l.bad = append(l.bad, fmt.Sprintf("a message of %d bytes", len(m.Data)))
		return
	}
	k := [2]uint64{binary.BigEndian.Uint64(m.Data), binary.BigEndian.Uint64(m.Data[8:])}
	if l.seen[k] {
		l.bad = append(l.bad, fmt.Sprintf("connection %d message %d delivered twice", k[0], k[1]))
	}
	l.seen[k] = true
	if !bytes.Equal(m.Data, o2ibMsg(k[0], k[1], len(m.Data))) {
		l.bad = append(l.bad, fmt.Sprintf("connection %d message %d corrupted", k[0], k[1]))
	}
	l.bytes += int64(len(m.Data))
	l.received++
}

// serve reads ni's messages until stop.
func (l *o2ibLoad) serve(ni *o2ib.NI, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case m := <-ni.Recv():
			l.check(m)
		case <-stop:
			return
		}
	}
}

// getObject is what every server NI serves for a GET: key's bytes.
func getObject(key uint64, n int) []byte { return o2ibMsg(1<<32|key, key, n) }

// run sends msgs messages on each connection, inflight at a time, and
// returns the connections' send results: nil for every message when
// nothing closes them.
func (l *o2ibLoad) run(ctx context.Context, conns []*o2ib.Conn, msgs, inflight int) (sent int64, errs []error) {
	l.mu.Lock()
	base := l.base
	l.base += uint64(len(conns))
	l.mu.Unlock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for ci, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := base + uint64(ci) // the connection's id in its messages
			r := rand.New(rand.NewPCG(id, 7))
			sem := make(chan struct{}, inflight)
			var inner sync.WaitGroup
			for seq := range msgs {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				inner.Add(1)
				var err error
				if seq%10 == 9 {
					n := o2ibSize(r)
					into := make([]byte, max(n, 16))
					key := id*uint64(msgs) + uint64(seq)
					err = c.Get(key, into, func(d []byte, err error) {
						if err == nil && !bytes.Equal(d, getObject(key, len(into))) {
							err = errors.New("a GET's bytes differ")
						}
						mu.Lock()
						errs = append(errs, err)
						if err == nil {
							sent += int64(len(d))
						}
						mu.Unlock()
						<-sem
						inner.Done()
					})
				} else {
					data := o2ibMsg(id, uint64(seq), o2ibSize(r))
					err = c.Put(data, func(err error) {
						mu.Lock()
						errs = append(errs, err)
						if err == nil {
							sent += int64(len(data))
						}
						mu.Unlock()
						<-sem
						inner.Done()
					})
				}
				if err != nil { // the connection closed: the rest would fail alike
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					<-sem
					inner.Done()
					break
				}
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	return sent, errs
}

// vethDevices opens an AF_XDP device on each end of p.
func vethDevices(t *testing.T, p *testenv.Pair) (da, db *verbs.Device) {
	t.Helper()
	for _, e := range []struct {
		ep  *testenv.Endpoint
		dev **verbs.Device
	}{{&p.A, &da}, {&p.B, &db}} {
		if err := e.ep.Do(func() (err error) {
			*e.dev, err = verbs.Open(verbs.Options{Interface: e.ep.Name, LinkKind: link.KindAFXDP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { (*e.dev).Close() })
	}
	return da, db
}

// openNIs opens n NIs on dev at addr, ports from port on.
func openNIs(t *testing.T, dev *verbs.Device, addr netip.Addr, port uint16, n int) []*o2ib.NI {
	t.Helper()
	var nis []*o2ib.NI
	for i := range n {
		ni, err := o2ib.New(dev, netip.AddrPortFrom(addr, port+uint16(i)), o2ib.Config{OnGet: getObject})
		if err != nil {
			t.Fatal(err)
		}
		nis = append(nis, ni)
	}
	return nis
}

// TestO2ibVethWorkload runs the o2iblnd-style layer between two namespaces
// over a veth pair and AF_XDP: 2 server NIs x 2 client NIs, one connection
// per pair, mixed messages up to 1 MiB (inline, PUT by WRITE, GET by READ),
// every one checked. Its throughput is logged as a ratio to bench write_bw
// on the same pair, measured first in the same run.
func TestO2ibVethWorkload(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{NoIPv6: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	args := []string{"write_bw", "-d", "", "--link", "af_xdp", "-s", "65536", "-n", "2000", "-p", "18515"}
	sout, cout, serr, cerr := runPairOnVeth(t, ctx, p, args, "Waiting for client")
	if serr != nil || cerr != nil {
		t.Fatalf("write_bw: %v %v\n%s\n%s", serr, cerr, sout, cout)
	}
	lines := strings.Split(strings.TrimSpace(cout), "\n")
	f := strings.Fields(lines[len(lines)-2])
	wbw, err := strconv.ParseFloat(f[3], 64)
	if len(f) != 5 || err != nil {
		t.Fatalf("write_bw result line %q", lines[len(lines)-2])
	}

	da, db := vethDevices(t, p)
	l := &o2ibLoad{t: t, seen: map[[2]uint64]bool{}}
	l.servers = openNIs(t, da, p.A.IPv4, 5100, 2)
	l.clients = openNIs(t, db, p.B.IPv4, 5200, 2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, ni := range l.servers {
		wg.Add(1)
		go l.serve(ni, stop, &wg)
	}
	var conns []*o2ib.Conn
	for _, c := range l.clients {
		for i := range l.servers {
			conn, err := c.Connect(ctx, netip.AddrPortFrom(p.A.IPv4, 5100+uint16(i)))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, conn)
		}
	}
	const msgs = 200
	start := time.Now()
	moved, errs := l.run(ctx, conns, msgs, 8)
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			t.Fatalf("a send failed: %v", err)
		}
	}
	// Every PUT's done came after its receiver had it: all are in.
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		n := l.received
		l.mu.Unlock()
		if n == len(conns)*(msgs-msgs/10) || time.Now().After(end) {
			break
		}
	}
	close(stop)
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bad) > 0 || l.received != len(conns)*(msgs-msgs/10) {
		t.Fatalf("%d of %d messages received; %d bad: %v", l.received, len(conns)*(msgs-msgs/10), len(l.bad), l.bad[:min(len(l.bad), 5)])
	}
	mbs := float64(moved) / took.Seconds() / 1e6
	t.Logf("o2ib: %d connections, %d messages and GETs, %.1f MB in %v: %.1f MB/s; write_bw 64 KiB on the same pair: %.1f MB/s; ratio %.2f",
		len(conns), len(conns)*msgs, float64(moved)/1e6, took.Round(time.Millisecond), mbs, wbw, mbs/wbw)
	for _, ni := range append(l.clients, l.servers...) {
		if err := ni.Close(); err != nil {
			t.Error(err)
		}
		if s := ni.Stats(); s.BadMsg+s.Overrun+s.RDMA != 0 {
			t.Errorf("connections closed for bad input: %+v", s)
		}
	}
}

// serverConn waits until ni has established n connections in all.
func serverConn(t *testing.T, ni *o2ib.NI, n int) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); ni.Stats().Established < uint64(n); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d of %d connections established on the server side", ni.Stats().Established, n)
		}
	}
}

// runGuarded runs the workload and fails the test if a send never completes.
func (l *o2ibLoad) runGuarded(ctx context.Context, conns []*o2ib.Conn, msgs, inflight int) (int64, []error) {
	type res struct {
		n    int64
		errs []error
	}
	ch := make(chan res, 1)
	go func() {
		n, errs := l.run(ctx, conns, msgs, inflight)
		ch <- res{n, errs}
	}()
	select {
	case r := <-ch:
		return r.n, r.errs
	case <-time.After(60 * time.Second):
		l.t.Fatal("a send never completed (its connection was closed under it)")
	}
	return 0, nil
}

func waitNoConns(t *testing.T, nis ...*o2ib.NI) {
	t.Helper()
	for _, ni := range nis {
		for end := time.Now().Add(30 * time.Second); ni.Conns() > 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%d connections never reached zero and were never freed", ni.Conns())
			}
		}
	}
}

// TestO2ibTeardownUnderLoad closes connections while traffic flows on them,
// from either side at a random moment, round after round (seed logged): every
// send completes once (with ErrClosed or a flush where its connection went),
// nothing arrives twice or corrupted, and every connection's count reaches
// zero and connd frees it.
func TestO2ibTeardownUnderLoad(t *testing.T) {
	da, db := memdev.Pair(t, netip.MustParseAddr("192.0.2.51"), netip.MustParseAddr("192.0.2.52"))
	l := &o2ibLoad{t: t, seen: map[[2]uint64]bool{}}
	l.servers = openNIs(t, da, netip.MustParseAddr("192.0.2.51"), 5300, 1)
	l.clients = openNIs(t, db, netip.MustParseAddr("192.0.2.52"), 5400, 1)
	srv, cli := l.servers[0], l.clients[0]
	defer func() {
		cli.Close()
		srv.Close()
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go l.serve(srv, stop, &wg)
	defer func() { close(stop); wg.Wait() }()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const rounds, perRound = 8, 3
	var failed, ok int
	for round := range rounds {
		var conns []*o2ib.Conn
		for range perRound {
			c, err := cli.Connect(ctx, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.51"), 5300))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		serverConn(t, srv, (round+1)*perRound)
		// The closer: a random connection, from a random side, after a
		// random delay; then the others at the round's end.
		victim := r.IntN(perRound)
		delay := time.Duration(r.IntN(20)) * time.Millisecond
		fromServer := r.IntN(2) == 1
		go func() {
			time.Sleep(delay)
			if fromServer {
				local, _ := conns[victim].Addrs()
				for _, sc := range srv.Connections() {
					if _, peer := sc.Addrs(); peer == local {
						sc.Close()
					}
				}
			} else {
				conns[victim].Close()
			}
		}()
		_, errs := l.runGuarded(ctx, conns, 60, 4)
		for _, err := range errs {
			if err == nil {
				ok++
			} else {
				failed++
			}
		}
		for _, c := range conns {
			c.Close()
		}
		waitNoConns(t, cli, srv)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bad) > 0 {
		t.Fatalf("%d bad deliveries: %v", len(l.bad), l.bad[:min(5, len(l.bad))])
	}
	t.Logf("%d rounds: %d sends and GETs done, %d ended by their connection's close; %d messages checked",
		rounds, ok, failed, l.received)
	if failed == 0 {
		t.Error("no send was cut by a close: the test did not close under load")
	}
}

// TestO2ibPeerDeath deletes the peer's link while traffic flows both ways
// over AF_XDP: the sends in flight fail once the QPs' retries run out, the
// connections close, every count reaches zero and connd frees them all, on
// both sides, with every send completed once.
func TestO2ibPeerDeath(t *testing.T) {
	testutil.RequireRoot(t)
	p := testenv.NewTestPair(t, testenv.PairOptions{NoIPv6: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	da, db := vethDevices(t, p)
	l := &o2ibLoad{t: t, seen: map[[2]uint64]bool{}}
	l.servers = openNIs(t, da, p.A.IPv4, 5500, 1)
	l.clients = openNIs(t, db, p.B.IPv4, 5600, 1)
	srv, cli := l.servers[0], l.clients[0]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go l.serve(srv, stop, &wg)
	go l.serve(cli, stop, &wg)
	var conns []*o2ib.Conn
	for range 2 {
		c, err := cli.Connect(ctx, netip.AddrPortFrom(p.A.IPv4, 5500))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	serverConn(t, srv, 2)
	back := srv.Connections() // the server's side sends too
	start := time.Now()
	go func() {
		time.Sleep(100 * time.Millisecond)
		h, err := p.B.NS.NewHandle()
		if err != nil {
			t.Error(err)
			return
		}
		defer h.Close()
		if lk, err := h.LinkByName(p.B.Name); err == nil {
			h.LinkDel(lk)
		}
	}()
	res := make(chan []error, 2)
	for _, cs := range [][]*o2ib.Conn{conns, back} {
		go func() {
			_, errs := l.run(ctx, cs, 100_000, 4) // until the link goes
			res <- errs
		}()
	}
	failed := 0
	for range 2 {
		select {
		case errs := <-res:
			for _, err := range errs {
				if err != nil {
					failed++
				}
			}
		case <-time.After(90 * time.Second):
			t.Fatal("sends still pending 90 s after the peer's link went")
		}
	}
	for _, c := range append(conns, back...) {
		c.Close()
	}
	waitNoConns(t, cli, srv)
	t.Logf("the link went after 100 ms; all connections freed %v later, %d sends failed", time.Since(start).Round(time.Millisecond), failed)
	close(stop)
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bad) > 0 {
		t.Fatalf("bad deliveries: %v", l.bad[:min(5, len(l.bad))])
	}
	if failed == 0 {
		t.Fatal("no send failed: the link's deletion did not cut the traffic")
	}
	for _, ni := range []*o2ib.NI{cli, srv} {
		if err := ni.Close(); err != nil {
			t.Error(err)
		}
	}
}
