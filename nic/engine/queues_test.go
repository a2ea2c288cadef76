// One engine per queue (shard.go): QPs hashed to queues, each transmitting on
// its own, and frames that come in on another queue handed to their QP's engine.

package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/internal/goid"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/testenv"
)

// openQueuesOn opens a device on links and closes both at cleanup.
func openQueuesOn(t testing.TB, links []link.Link, g netdev.GID, cfg Config) *Device {
	t.Helper()
	cfg.GIDs = []netdev.GID{g}
	d, err := OpenQueues(links, cfg)
	if err != nil {
		t.Fatalf("OpenQueues: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		for _, l := range links {
			l.Close()
		}
	})
	return d
}

// queuePairs connects n RC QP pairs between a and b. B makes one QP more half
// way, so that the first half of the pairs have QPNs on the same queue on both
// sides and the second half do not: their frames come in on the queue of the
// sender's QP and must be handed to the receiver's. With more than two queues B
// makes another at three quarters, so that each engine takes frames from two
// others.
func queuePairs(t *testing.T, da, db *Device, n int, mtu qpattr.MTU) (as, bs []*node) {
	t.Helper()
	cap := qpattr.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	for i := range n {
		if i == n/2 || i == n*3/4 && len(da.sh) > 2 {
			newNode(t, db, nodeOpts{cap: cap, bufLen: 4096})
		}
		as = append(as, newNode(t, da, nodeOpts{cap: cap, bufLen: 1 << 20}))
		bs = append(bs, newNode(t, db, nodeOpts{cap: cap, bufLen: 1 << 20}))
		connect(t, as[i], bs[i], connOpts{mtu: mtu})
	}
	nq := uint32(len(da.sh))
	for i := range n {
		same := as[i].qp.QPN()%nq == bs[i].qp.QPN()%nq
		if same != (i < n/2) {
			t.Fatalf("pair %d: QPNs %#x and %#x, same queue %v", i, as[i].qp.QPN(), bs[i].qp.QPN(), same)
		}
	}
	return as, bs
}

// queueTraffic runs a SEND, a WRITE, a READ and a FetchAdd on every pair at
// once and checks every completion and byte.
func queueTraffic(t *testing.T, as, bs []*node) {
	t.Helper()
	const size = 128 << 10
	for i := range as {
		a, b := as[i], bs[i]
		fill(a.buf[:size], byte(i))
		fill(b.buf[512<<10:512<<10+size], byte(100+i))
		binary.NativeEndian.PutUint64(b.buf[768<<10:], uint64(i))
		recv(t, b, 1, 0, 64<<10)
		wrs := []SendWR{
			{WRID: 1, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 64<<10)}},
			{WRID: 2, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr() + 256<<10, RKey: b.mr.RKey()},
			{WRID: 3, Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(256<<10, size)}, RemoteAddr: b.mr.Addr() + 512<<10, RKey: b.mr.RKey()},
			{WRID: 4, Opcode: WRAtomicFetchAdd, SGL: []SGE{a.mr.SGE(768<<10, 8)}, RemoteAddr: b.mr.Addr() + 768<<10, RKey: b.mr.RKey(), CompareAdd: 1000},
		}
		for w := range wrs {
			wrs[w].Flags = SendSignaled
		}
		if _, err := a.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
	}
	for i := range as {
		a := as[i]
		for w, wc := range pollN(t, a.cq, 4, 20*time.Second) {
			if wc.WRID != uint64(w+1) || wc.Status != cq.Success {
				t.Fatalf("pair %d WC %d: %+v", i, w, wc)
			}
		}
	}
	// B's memory is written by its engines: Sync orders it before the reads
	// (and waits for a pass of every engine).
	if err := bs[0].d.Sync().Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range as {
		a, b := as[i], bs[i]
		if wc := pollN(t, b.cq, 1, 5*time.Second)[0]; wc.Status != cq.Success || wc.ByteLen != 64<<10 {
			t.Fatalf("pair %d receive: %+v", i, wc)
		}
		checkBytes(t, name("pair %d SEND", i), b.buf[:64<<10], a.buf[:64<<10])
		checkBytes(t, name("pair %d WRITE", i), b.buf[256<<10:256<<10+size], a.buf[:size])
		checkBytes(t, name("pair %d READ", i), a.buf[256<<10:256<<10+size], b.buf[512<<10:512<<10+size])
		if got := binary.NativeEndian.Uint64(a.buf[768<<10:]); got != uint64(i) {
			t.Fatalf("pair %d FetchAdd returned %d", i, got)
		}
		if got := binary.NativeEndian.Uint64(b.buf[768<<10:]); got != uint64(i)+1000 {
			t.Fatalf("pair %d FetchAdd left %d", i, got)
		}
	}
}

// checkQueues wants every queue of d to have received and sent frames and
// some of them handed over, none dropped.
func checkQueues(t *testing.T, side string, d *Device) {
	t.Helper()
	for q, c := range d.QueueCounters() {
		t.Logf("%s queue %d: rx %d tx %d handed over %d (dropped %d)", side, q,
			c[EngRxFrames], c[EngTxFrames], c[EngHandoffs], c[EngHandoffDrops])
		if c[EngRxFrames] == 0 || c[EngTxFrames] == 0 || c[EngHandoffs] == 0 {
			t.Errorf("%s queue %d: an engine that did not take part: %v", side, q, c)
		}
	}
	if c := d.Counters(); c[CntRcvdUnknownQP] != 0 {
		t.Errorf("%s: %d frames for an unknown QP: a frame reached an engine not its QP's", side, c[CntRcvdUnknownQP])
	}
}

// memoryQueues opens two devices of n queues each over n memory link pairs,
// a wire whose queue i reaches the peer's queue i, as veth's do.
func memoryQueues(t testing.TB, n int, cfg Config) (da, db *Device) {
	t.Helper()
	var la, lb []link.Link
	for range n {
		a, b, err := link.NewMemoryPair(link.MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		la, lb = append(la, a), append(lb, b)
	}
	return openQueuesOn(t, la, netdev.GIDFromAddr(addrA), cfg), openQueuesOn(t, lb, netdev.GIDFromAddr(addrB), cfg)
}

// TestQueuesMemory runs two engines per device over two memory link pairs, and
// four over four, where two engines hand frames to each at once.
func TestQueuesMemory(t *testing.T) {
	for _, c := range []struct{ queues, pairs int }{{2, 6}, {4, 16}} {
		t.Run(fmt.Sprint("queues=", c.queues), func(t *testing.T) {
			da, db := memoryQueues(t, c.queues, Config{})
			as, bs := queuePairs(t, da, db, c.pairs, qpattr.MTU4096)
			queueTraffic(t, as, bs)
			checkQueues(t, "A", da)
			checkQueues(t, "B", db)
			// Every pass of every engine: Sync waits for all.
			if err := da.Sync().Wait(); err != nil {
				t.Fatal(err)
			}
			res, err := da.Resources()
			if err != nil || len(res.QPs) != c.pairs {
				t.Fatalf("Resources: %d QPs, %v", len(res.QPs), err)
			}
		})
	}
}

// TestQueuesVeth is the same over a veth pair of two queues, each end with
// the XDP program and an AF_XDP socket per queue, in native mode: veth keeps
// a frame on its sender's queue only there (generic XDP sees every frame on
// queue 0, link.OpenQueues).
func TestQueuesVeth(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4200, NumTxQueues: 2, NumRxQueues: 2})
	open := func(e *testenv.Endpoint) *Device {
		var links []link.Link
		if err := e.Do(func() (err error) {
			links, err = link.OpenQueues(link.Options{Kind: link.KindAFXDP, Interface: e.Name, Mode: bpf.AttachNative}, 2)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return openQueuesOn(t, links, netdev.GIDFromAddr(e.IPv4), Config{})
	}
	da, db := open(&p.A), open(&p.B)
	as, bs := queuePairs(t, da, db, 6, qpattr.MTU4096)
	queueTraffic(t, as, bs)
	checkQueues(t, "A", da)
	checkQueues(t, "B", db)
}

// TestOpenQueuesChecks: the links must be one interface's.
func TestOpenQueuesChecks(t *testing.T) {
	a, _, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, c, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := []netdev.GID{netdev.GIDFromAddr(addrA)}
	for _, links := range [][]link.Link{nil, {a, nil}, {a, c}, make([]link.Link, MaxQueues+1)} {
		if d, err := OpenQueues(links, Config{GIDs: g}); err == nil {
			d.Close()
			t.Errorf("%d links: no error", len(links))
		} else if !errors.Is(err, ErrInvalid) {
			t.Errorf("%d links: %v, want ErrInvalid", len(links), err)
		}
	}
}

// TestHandoffRing: a full ring refuses the frame rather than overwrite one,
// gives its frames back in order, and takes frames again once they are taken,
// lap after lap.
func TestHandoffRing(t *testing.T) {
	h := newHandoff(4, 16)
	if h.put(make([]byte, 17)) {
		t.Fatal("a frame longer than the ring's buffers was taken")
	}
	for lap := range 3 {
		for i := range 4 {
			if !h.put([]byte{byte(lap), byte(i)}) {
				t.Fatalf("lap %d: put %d refused", lap, i)
			}
		}
		if h.put([]byte{9}) {
			t.Fatalf("lap %d: a full ring took a fifth frame", lap)
		}
		for i := range 4 {
			f, ok := h.next()
			if !ok || len(f) != 2 || f[0] != byte(lap) || f[1] != byte(i) {
				t.Fatalf("lap %d: frame %d is %v (%v)", lap, i, f, ok)
			}
			h.done()
		}
		if f, ok := h.next(); ok {
			t.Fatalf("lap %d: an empty ring gave %v", lap, f)
		}
	}
	f := []byte{1, 2, 3}
	if a := testing.AllocsPerRun(100, func() {
		for range 5 { // into a ring of 4: the fifth refused
			h.put(f)
		}
		for _, ok := h.next(); ok; _, ok = h.next() {
			h.done()
		}
	}); a != 0 {
		t.Fatalf("%v allocations handing over 5 frames and taking 4", a)
	}
}

// TestHandoffPending: what an engine about to sleep asks of its ring (a frame
// handed over before the producer could see it asleep), filled frames only.
func TestHandoffPending(t *testing.T) {
	h := newHandoff(4, 16)
	e := &engine{sh: &shard{in: h}}
	for i, c := range []struct {
		do   func()
		want bool
	}{
		{func() {}, false},
		{func() { h.put([]byte{1}) }, true},
		{func() { h.next(); h.done() }, false},
		{func() { h.tail.Add(1) }, false}, // claimed by a producer that has not filled it yet
	} {
		c.do()
		if got := e.handoffPending(); got != c.want {
			t.Fatalf("step %d: pending %v, want %v", i, got, c.want)
		}
	}
}

// TestHandoffProducers: shards hand frames to one at once; each frame arrives
// once, whole, and each producer's in the order it put them (under -race, the
// ring's slots are handed between goroutines by their seq alone).
func TestHandoffProducers(t *testing.T) {
	const producers, each = 4, 20000
	h := newHandoff(64, 64)
	var wg sync.WaitGroup
	var refused [producers]int
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := make([]byte, 9+p) // each producer's own length
			f[0] = byte(p)
			for i := range each {
				binary.LittleEndian.PutUint64(f[1:], uint64(i))
				for !h.put(f) {
					refused[p]++
					runtime.Gosched()
				}
			}
		}()
	}
	var next [producers]uint64
	deadline := time.Now().Add(time.Minute)
	for got := 0; got < producers*each; {
		f, ok := h.next()
		if !ok {
			if time.Now().After(deadline) {
				t.Fatalf("%d frames of %d after a minute, next by producer %v", got, producers*each, next)
			}
			runtime.Gosched()
			continue
		}
		p := int(f[0])
		if p >= producers || len(f) != 9+p || binary.LittleEndian.Uint64(f[1:]) != next[p] {
			t.Fatalf("frame %d: %v, want producer %d's %d", got, f, p, next[p])
		}
		next[p]++
		h.done()
		got++
	}
	wg.Wait()
	if f, ok := h.next(); ok {
		t.Fatalf("a frame more: %v", f)
	}
	t.Logf("puts refused on a full ring, by producer: %v", refused)
}

// TestHandoffMemory: the handoff rings' memory grows with the number of
// queues, not with its square (rings per ordered pair of engines took 4.1
// GiB at 64 queues). Twice the queues take twice the memory, give or take
// what the rest of a shard takes.
func TestHandoffMemory(t *testing.T) {
	opened := func(n int) uint64 {
		var links []link.Link
		for range n {
			a, _, err := link.NewMemoryPair(link.MemoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			links = append(links, a)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d, err := OpenQueues(links, Config{GIDs: []netdev.GID{netdev.GIDFromAddr(addrA)}})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			l.Close()
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	four, eight := opened(4), opened(8)
	t.Logf("OpenQueues allocated %d MiB for 4 queues, %d MiB for 8", four>>20, eight>>20)
	if eight > four*5/2 {
		t.Fatalf("8 queues took %.1f times what 4 did: more than linear", float64(eight)/float64(four))
	}
	if depth := handoffDepth(MaxQueues); depth > 1024 {
		t.Fatalf("%d queues: rings of %d frames each", MaxQueues, depth)
	}
}

// BenchmarkMemoryQueues: 64 KiB WRITEs on 16 QPs over memory links, with one
// engine per device and with two; "crossed" numbers B's QPs so that every
// frame comes in on the other engine's queue and is handed over. The memory
// link has no kernel in the way, so CPU per GB here is the engines' own cost
// (the per-core figure of the README's estimate for a NIC in zero-copy mode).
// "plain" keeps the engines' threads unraised and unlocked (PlainThread): four
// locked engine threads and the poster on two cores pay a thread switch for
// each wake-up through a channel, which the memory link's Wait is.
func BenchmarkMemoryQueues(b *testing.B) {
	for _, c := range []struct {
		name    string
		queues  int
		crossed bool
		plain   bool
	}{
		{"queues=1", 1, false, false}, {"queues=2", 2, false, false}, {"queues=2/crossed", 2, true, false},
		{"queues=1/plain", 1, false, true}, {"queues=2/plain", 2, false, true}, {"queues=2/crossed/plain", 2, true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			da, db := memoryQueues(b, c.queues, Config{PlainThread: c.plain})
			if c.crossed {
				newNode(b, db, nodeOpts{cap: benchCap(), bufLen: 4096})
			}
			const nQP = 16
			var as, rs []*node
			for range nQP {
				a := newNode(b, da, nodeOpts{cap: benchCap(), bufLen: 1 << 20})
				r := newNode(b, db, nodeOpts{cap: benchCap(), bufLen: 1 << 20})
				connect(b, a, r, connOpts{mtu: qpattr.MTU4096, timeout: 16})
				as, rs = append(as, a), append(rs, r)
			}
			benchWriteMany(b, as, rs, 64<<10, 8)
		})
	}
}

// benchWriteMany is benchWrite over several QPs, round robin, each with up to
// depth WRITEs outstanding; b.N counts all of them.
func benchWriteMany(b *testing.B, as, rs []*node, size uint32, depth int) {
	b.Helper()
	wrs := make([]SendWR, 1)
	sgl := make([]SGE, 1)
	wcs := make([]cq.WC, 64)
	posted, done := make([]int, len(as)), 0
	slots := uint64(len(as[0].buf)) / uint64(size)
	var cpu0 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &cpu0)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	total, idle := 0, 0
	deadline := time.Now().Add(5 * time.Minute)
	for done < b.N {
		for i, a := range as {
			for total < b.N && posted[i] < depth {
				off := uint64(total) % slots * uint64(size)
				sgl[0] = SGE{Addr: a.mr.Addr() + off, Length: size, LKey: a.mr.LKey()}
				wrs[0] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
					SGL: sgl, RemoteAddr: rs[i].mr.Addr() + off, RKey: rs[i].mr.RKey()}
				if _, err := a.qp.PostSend(wrs); err != nil {
					b.Fatal(err)
				}
				posted[i]++
				total++
			}
			n := a.cq.Poll(wcs)
			for _, w := range wcs[:n] {
				if w.Status != cq.Success {
					b.Fatalf("WC %+v", w)
				}
			}
			posted[i] -= n
			done += n
		}
		if idle++; idle%4096 == 0 && time.Now().After(deadline) {
			b.Fatalf("%d of %d completions", done, b.N)
		}
		runtime.Gosched()
	}
	b.StopTimer()
	var cpu1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &cpu1)
	cpu := time.Duration(cpu1.Utime.Nano() + cpu1.Stime.Nano() - cpu0.Utime.Nano() - cpu0.Stime.Nano())
	gb := float64(b.N) * float64(size) / 1e9
	b.ReportMetric(cpu.Seconds()/gb, "cpu-s/GB")
}

// goPoller notes which goroutines call it.
type goPoller struct {
	mu         sync.Mutex
	polls, idl map[uint64]int
}

func (p *goPoller) Poll() bool {
	p.mu.Lock()
	p.polls[goid.ID()]++
	p.mu.Unlock()
	return false
}

func (p *goPoller) Idle(bool) bool {
	p.mu.Lock()
	p.idl[goid.ID()]++
	p.mu.Unlock()
	return false
}

// TestQueuesPollers: every engine runs a poller before it takes its frames
// (so an attached process's receive is posted before the frames after it),
// and only the first queue's tells it when it sleeps.
func TestQueuesPollers(t *testing.T) {
	da, _ := memoryQueues(t, 2, Config{})
	p := &goPoller{polls: map[uint64]int{}, idl: map[uint64]int{}}
	if err := da.AddPoller(p); err != nil {
		t.Fatal(err)
	}
	// Wake both engines a few times.
	for range 20 {
		da.wake()
		if err := da.Sync().Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := da.RemovePoller(p); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.polls) != 2 || len(p.idl) != 1 {
		t.Fatalf("Poll from %d goroutines, Idle from %d: want 2 and 1", len(p.polls), len(p.idl))
	}
	for id := range p.idl {
		if p.polls[id] == 0 {
			t.Fatalf("Idle from goroutine %d, which never polled", id)
		}
	}
}

// TestHandoffWakeRace: a frame handed to an engine as it goes to sleep still
// wakes it (the look after sleeping is set, in routineEngine, against
// wakeHanded's look at it). A UC ping-pong, which arms no timer that would
// wake a sleeping engine, runs between QPs on different queues, so that each
// message is handed over on its way in. Before each message the receiving
// device's engines are woken (Sync), and the message follows after a pause of
// up to 32 us: its frame comes as its QP's engine spins, or as it goes back
// to sleep. A lost wake-up leaves the message unanswered, and the test fails
// at its deadline. Without that look it failed within 7,500 rounds in each
// of 3 runs, and within 2,000 with the engines dawdling before they sleep
// (testBeforeSleep), as they do here.
func TestHandoffWakeRace(t *testing.T) {
	// Each engine dawdles up to 4 us between its last look and sleeping, so
	// that a frame is handed over, and the sleeping flag read, in between
	// more often.
	testBeforeSleep = func() {
		for end := time.Now().Add(time.Duration(rand.IntN(4000))); time.Now().Before(end); {
		}
	}
	t.Cleanup(func() { testBeforeSleep = nil })
	da, db := memoryQueues(t, 2, Config{})
	cap := qpattr.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	a := newNode(t, da, nodeOpts{typ: qpattr.UC, cap: cap, bufLen: 4096})
	newNode(t, db, nodeOpts{typ: qpattr.UC, cap: cap, bufLen: 4096}) // B's next QPN on the other queue
	b := newNode(t, db, nodeOpts{typ: qpattr.UC, cap: cap, bufLen: 4096})
	connect(t, a, b, connOpts{mtu: qpattr.MTU1024})
	if a.qp.QPN()%2 == b.qp.QPN()%2 {
		t.Fatalf("QPNs %#x and %#x on one queue", a.qp.QPN(), b.qp.QPN())
	}
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]cq.WC, 1)
	// hop posts a receive on r, wakes r's engines, and after a pause of up
	// to 32 us sends a SEND from s to r, whose frame r's other engine hands
	// over to r's QP's. Then it waits for the receive.
	hop := func(s, r *node, i int) {
		recv(t, r, uint64(i), 0, 64)
		woke := r.d.Sync() // every engine of r's device wakes for it
		for end := time.Now().Add(time.Duration(rng.IntN(32)) * time.Microsecond); time.Now().Before(end); {
		}
		send(t, s, SendWR{WRID: uint64(i), Opcode: WRSend, SGL: []SGE{s.mr.SGE(0, 8)}})
		for deadline := time.Now().Add(10 * time.Second); ; {
			if r.cq.Poll(buf) == 1 {
				if buf[0].Status != cq.Success || buf[0].WRID != uint64(i) {
					t.Fatalf("round %d: %+v", i, buf[0])
				}
				if err := woke.Wait(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no receive in 10 s: a handed-over frame woke no engine (A %v, B %v)",
					i, da.QueueCounters(), db.QueueCounters())
			}
			runtime.Gosched()
		}
	}
	for i := range rounds {
		hop(a, b, i)
		hop(b, a, i)
	}
	// Both directions were handed over, and the engines slept between them.
	for side, d := range map[string]*Device{"A": da, "B": db} {
		var handed, waits uint64
		for _, c := range d.QueueCounters() {
			handed += c[EngHandoffs]
			waits += c[EngIdleWaits]
		}
		t.Logf("%s: %d frames handed over, %d idle waits", side, handed, waits)
		if handed < uint64(rounds) || waits < uint64(rounds)/10 {
			t.Errorf("%s: %d frames handed over and %d idle waits in %d rounds", side, handed, waits, rounds)
		}
	}
}
