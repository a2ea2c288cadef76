// Shards: one engine goroutine per receive queue (DESIGN.md, "Ownership on the
// hot path"). Each owns its queue's link, the QPs whose numbers hash to it, their
// timers and its own control queue and doorbells; engines share no lock on the
// data path. A frame that arrives on another queue than its QP's is handed over
// through the ring of its QP's engine, which the other engines share (a CAS,
// no lock): the sender of a frame picks the queue, not the receiver (on a veth
// the peer's transmit queue; on a NIC its RSS hash of the UDP source port), so
// a receiver cannot steer by QP in XDP, which redirects only to the socket of
// the queue a frame came in on.

package engine

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/spin"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
)

// MaxQueues bounds OpenQueues' links.
const MaxQueues = 64

// handoffDepth is the number of frames an engine can have waiting from the
// engines, itself included (frames to the device's own QPs, loopBack), in the
// one ring they share: a pass's worth (passBatches of DefaultBatch) for each
// engine and one more, as a pass's last turn may go past its bound, up to 4,
// rounded up to a power of two. With n queues that is n rings of up to 1024
// frames of the link's MTU (4.1 MiB at 4200), not n*(n-1) of 256: 64 queues
// take 264 MiB where rings per ordered pair took 4.1 GiB. The price is at
// many queues: 63 engines share 1024 slots, so a burst from many at once may
// fill a ring that rings per pair would have taken. A full ring drops a frame
// from the link, as a NIC's full receive queue does, counts it
// (EngHandoffDrops), and RC resends it; one looped back waits (hold).
func handoffDepth(queues int) int {
	return 256 << min(bits.Len(uint(max(queues, 1))), 2)
}

// shard is one engine goroutine, its link and its loop's state. The Device's
// methods reach it through QPs (qp.sh) or all shards at once (execAll).
type shard struct {
	d    *Device
	idx  int
	link link.Link

	// Control operations for the engine.
	ctlMu   sync.Mutex
	ctlQ    []ctlReq
	stopped bool          // guarded by ctlMu: no new control operation is taken
	kick    chan struct{} // wakes an engine that waits on it: its link gone, or busy pollers driving (idle)
	done    chan struct{} // closed when routineEngine returns

	// drive is held by whoever runs a pass of the engine's loop: the engine
	// goroutine, or a busy poller (Drive). The engine's state is theirs.
	drive    sync.Mutex
	ended    bool        // guarded by drive: the engine goroutine returned
	sleeping atomic.Bool // the engine goroutine waits in idle
	// Busy polling (Config.BusyPoll): CQ pollers' passes, counted, and
	// whether they ran while the goroutine last slept (its polled, for ring).
	pollDrives atomic.Uint64
	polled     atomic.Bool

	// Doorbells: a lock-free stack of QPs with newly posted work.
	dbHead  atomic.Pointer[QP]
	polling atomic.Bool // the engine goroutine is running its pollers (poller.go)

	// in carries the frames other shards received for this shard's QPs.
	in *handoff

	ecnt engineCounters // the engine loop's own, not rxe's: one writer, the loop's

	e engine
}

func newShard(d *Device, idx int, l link.Link) *shard {
	sh := &shard{d: d, idx: idx, link: l, kick: make(chan struct{}, 1), done: make(chan struct{})}
	sh.e.init(d, sh)
	return sh
}

// connectShards makes the handoff rings once every shard exists; one shard
// has one too, for the frames it loops back.
func (d *Device) connectShards() {
	frameCap := d.info.MTU + maxEthernetLen
	for _, sh := range d.sh {
		sh.in = newHandoff(handoffDepth(len(d.sh)), frameCap)
	}
}

// shardOf returns the shard that owns QP number qpn.
func (d *Device) shardOf(qpn uint32) *shard { return d.sh[qpn%uint32(len(d.sh))] }

// linkDead reports whether any queue's link failed: the port is down.
func (d *Device) linkDead() bool {
	for _, sh := range d.sh {
		if sh.e.linkDead.Load() {
			return true
		}
	}
	return false
}

// wake makes the shard's engine run its loop soon: the doorbell. The kick
// goes first, so that an engine the link's Wake wakes finds it there to
// drain (idle); sent after, it could outlive that wait and cut the next one
// short.
func (sh *shard) wake() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
	sh.link.Wake()
}

// exec queues fn for the shard's engine goroutine and returns its Op.
func (sh *shard) exec(fn func(e *engine) error) *Op {
	op := sh.d.newOp()
	sh.enqueueOp(op, fn, nil)
	return op
}

// execClose is exec for the close of n: the Op completes when fn has run and no
// event of n is being delivered.
func (sh *shard) execClose(n *lifetime, fn func(e *engine) error) *Op {
	op := sh.d.newOp()
	op.guard = func() bool { return sh.d.evq.delivering(n) }
	sh.enqueueOp(op, fn, n)
	return op
}

// enqueueOp queues fn for the engine goroutine to complete op.
func (sh *shard) enqueueOp(op *Op, fn func(e *engine) error, n *lifetime) {
	sh.enqueueReq(ctlReq{fn: fn, op: op, close: n})
}

func (sh *shard) enqueueReq(r ctlReq) {
	sh.ctlMu.Lock()
	if sh.stopped {
		sh.ctlMu.Unlock()
		r.finish(errDevClosed)
		return
	}
	sh.ctlQ = append(sh.ctlQ, r)
	sh.ctlMu.Unlock()
	sh.wake()
}

// fan is one Op run on every shard (execAll): the last to finish completes it.
type fan struct {
	op        *Op
	left      atomic.Int32
	stoppedOK bool // a stopped shard's errDevClosed is no error
	mu        sync.Mutex
	err       error
}

func (f *fan) finish(err error) {
	if err == errDevClosed && f.stoppedOK {
		err = nil
	}
	if err != nil {
		f.mu.Lock()
		if f.err == nil {
			f.err = err
		}
		f.mu.Unlock()
	}
	if f.left.Add(-1) == 0 {
		f.mu.Lock()
		err = f.err
		f.mu.Unlock()
		f.op.finish(err)
	}
}

// routineEngine is a shard's engine goroutine: it runs the loop (step) holding
// sh.drive, which a busy poller may hold instead while the goroutine sleeps
// (Drive).
func (sh *shard) routineEngine() {
	d := sh.d
	defer close(sh.done)
	var th engThread
	if !d.cfg.PlainThread && !d.cfg.BusyPoll {
		th = raiseThread(d.cfg.Logf)
		defer th.restore()
	}
	d.cfg.Logf("engine: RoutineEngine started on %s link %s queue %d", d.info.Kind, d.info.Name, sh.idx)
	defer d.cfg.Logf("engine: RoutineEngine stopped")
	e := &sh.e
	spins := 0 // empty passes since the last busy one
	for {
		sh.drive.Lock()
		stop, more, blocked := e.step()
		if stop {
			for _, r := range e.syncs {
				r.finish(nil)
			}
			sh.ended = true
			sh.drive.Unlock()
			return
		}
		if more {
			spins = 0
			th.spinning(false)
		} else if spins < idleSpins && !blocked && !e.polled {
			// Spin a little before sleeping, yielding the CPU at each empty
			// pass: work that comes meanwhile (the peer's reply, the next
			// posts) finds the engine awake, with no wake-up through the
			// sender's kernel, which costs an IPI here and waits for the
			// scheduler. The NAPI busy-poll idea (PLATFORM 9). Measured on
			// the veth pair, 2 cores: write_bw 64 KiB 960-1024 -> 1250-1440
			// MB/s, write_lat typical 15-32 -> 7.8-8.9 us. Longer spins
			// took the posting thread's CPU (docs/performance.md, "The
			// engine spins"). Not while busy pollers drive (e.polled): they
			// take the work. A side whose application does not poll
			// (read_lat's responder, write_bw's server) has only this
			// goroutine, and spins.
			th.spinning(true)
			spins++
			sh.ecnt.inc(EngIdleSpins)
			sh.drive.Unlock()
			spin.Yield()
			continue
		}
		if !more && len(e.pollers) > 0 && e.pollersIdle(true) {
			e.pollersIdle(false) // work came as the pollers armed their wake-ups
			more = true
		}
		if more {
			sh.drive.Unlock()
			continue
		}
		spins = 0
		th.spinning(false) // a frame wakes it at engineNice
		timeout := e.sleepFor(blocked)
		if w, ok := sh.link.(link.PreWaiter); ok && timeout != 0 && !e.polled {
			// Asleep, it refills none of the link's receive buffers (an
			// AF_XDP fill ring): the kernel gets them all first, before
			// sleeping says it sleeps. Pollers that drive meanwhile
			// (e.polled) refill as they go.
			w.BeforeWait()
		}
		if timeout != 0 {
			// Counted before sleeping is set, so that whoever sees it set
			// sees the wait counted (a wait the check below cuts short
			// counts as one that returned at once).
			sh.ecnt.inc(EngIdleWaits)
		}
		if testBeforeSleep != nil {
			testBeforeSleep()
		}
		sh.sleeping.Store(true)
		// A frame handed over, or a doorbell rung, after the last look would
		// wait for the next wake-up: ring does not wake an engine that is
		// not sleeping.
		if e.handoffPending() || sh.dbHead.Load() != nil {
			sh.sleeping.Store(false)
			sh.drive.Unlock()
			continue
		}
		// Pollers drive (drive1) only while this goroutine sleeps, so
		// whether they did during this sleep says whether they still do;
		// a quiet sleep that a wake-up cut short says nothing (a poster
		// whose drive found the goroutine awake rang for it). Taken for a
		// poller's absence, it had the goroutine spin on sched_yield(2) and
		// sleep in poll(2) while the pollers drove, holding a P in a system
		// call (idle).
		driven, polls := sh.ecnt[EngDriven].Load(), sh.pollDrives.Load()
		quiet := e.polled && len(e.pollers) == 0
		sh.drive.Unlock()
		woken := e.idle(timeout, quiet)
		sh.sleeping.Store(false)
		e.polled = d.cfg.BusyPoll && (sh.ecnt[EngDriven].Load() != driven || quiet && woken)
		// The same for CQ pollers alone, which posts leave their WRs to (ring).
		sh.polled.Store(d.cfg.BusyPoll && (sh.pollDrives.Load() != polls || quiet && woken && sh.polled.Load()))
		if len(e.pollers) > 0 {
			sh.drive.Lock()
			e.pollersIdle(false)
			sh.drive.Unlock()
		}
	}
}

// testBeforeSleep, when set (by a test, before any device opens), runs
// between an engine's last look for work and its saying it sleeps: it widens
// the window that the look after sleeping is set closes (TestHandoffWakeRace).
var testBeforeSleep func()

// raiseThread locks the calling goroutine to its thread and raises the thread
// to engineNice. Its restore puts the thread's priority back and unlocks it,
// so that the priority goes to no other goroutine. A thread that ended locked
// would be kept parked for good if it were the main thread, at engineNice.
func raiseThread(logf func(string, ...any)) engThread {
	runtime.LockOSThread()
	tid := unix.Gettid()
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid) // the kernel's 20 - nice
	if err == nil {
		err = unix.Setpriority(unix.PRIO_PROCESS, tid, engineNice)
	}
	if err != nil {
		logf("engine: the engine thread keeps its priority (nice %d: %v)", engineNice, err)
		runtime.UnlockOSThread()
		return engThread{}
	}
	return engThread{tid: tid, plain: 20 - prio}
}

// engThread is the engine goroutine's raised thread; the zero value is a
// thread that was not raised, which spinning and restore leave alone.
// Goroutine-owned.
type engThread struct {
	tid   int
	plain int  // the nice value the thread had before raiseThread
	low   bool // at plain: the engine spins
}

// restore puts the thread back at its plain nice value and unlocks it.
func (t *engThread) restore() {
	if t.tid == 0 {
		return
	}
	if unix.Setpriority(unix.PRIO_PROCESS, t.tid, t.plain) == nil {
		runtime.UnlockOSThread()
	} // else the thread stays locked, and ends with the goroutine
}

// spinning puts the thread at its plain nice value while the engine spins
// before it sleeps, and back at engineNice when it works or sleeps. A spin is
// speculative, and at engineNice its sched_yield hardly lets a nice 0 thread
// in: EEVDF moves a yielding thread's deadline on by a slice scaled by its
// weight, 1/87 of a nice 0 thread's. The application on the engine's CPU
// starved: send_bw's receiver fell 512 receives behind (RNR NAKs), and the
// 64-byte WRITE poster waited (docs/performance.md, "The engine spins").
func (t *engThread) spinning(on bool) {
	if t.tid == 0 || t.low == on {
		return
	}
	n := engineNice
	if on {
		n = t.plain
	}
	// A raw call, as spin's sched_yield: Go's sysmon takes no P from it.
	if _, _, e := unix.RawSyscall(unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, uintptr(t.tid), uintptr(n)); e == 0 {
		t.low = on
		if f := spinHook.Load(); f != nil {
			(*f)(on)
		}
	}
}

// spinHook, when a test sets it, is called on the engine's thread after
// spinning changed its priority.
var spinHook atomic.Pointer[func(low bool)]

// Drive runs one pass of each engine's loop on the caller's goroutine when
// no other goroutine runs one (run to completion: a thread busy-polling its
// CQ moves its own frames, with no wake-up of the engine goroutine and no
// second core in the way). It reports whether it ran one. Config.BusyPoll
// makes CQ polls that find nothing call it.
func (d *Device) Drive() bool { return d.driveFor(nil) }

// driveFor is Drive for a poller of c.
func (d *Device) driveFor(c *cq.CQ) bool {
	ran := false
	for _, sh := range d.sh {
		if sh.drive1(c) {
			ran = true
		}
	}
	return ran
}

func (sh *shard) drive1(c *cq.CQ) bool {
	// Only while the engine goroutine sleeps: an awake one runs the loop
	// anyway, and a lock it had to wait for would cost it a wake-up.
	if !sh.sleeping.Load() || !sh.drive.TryLock() {
		return false
	}
	if sh.ended { // the engine goroutine ended: nothing runs any more
		sh.drive.Unlock()
		return false
	}
	e := &sh.e
	sh.ecnt.inc(EngDriven)
	if c != nil {
		sh.pollDrives.Add(1)
	}
	e.wants = c
	stop, _, _ := e.step()
	e.wants = nil
	if stop {
		sh.wake() // the engine goroutine ends the device
	}
	sh.drive.Unlock()
	return true
}

// handoff is a bounded ring of frames from the shards to one, with its buffers
// preallocated (no allocation per frame): many producers, the other shards'
// receive passes and any shard's transmit (loopBack), and one consumer,
// whoever drives the shard. A slot's seq says whose turn it is (D. Vyukov's
// bounded queue): pos while it is free for the producer that claims position
// pos, pos+1 once that producer has filled it, pos+depth once the consumer has
// taken it. A producer claims a position with one CAS on tail and fills its
// slot outside of any lock; the consumer reads a slot only once its seq says
// it is filled.
type handoff struct {
	tail atomic.Uint64 // the producers' next position
	_    [56]byte
	head uint64 // the consumer's next position; the driver's (sh.drive)
	_    [56]byte
	// Read by both, written by neither once made. 64 bytes apart, whatever
	// the struct's alignment, tail, head and these are on three lines.
	mask  uint64
	slots []handoffSlot
}

// handoffSlot is 64 bytes, so that the seq a producer writes (and its size)
// and the seq of the slot before, which the consumer writes as it frees it,
// are on different cache lines.
type handoffSlot struct {
	seq  atomic.Uint64
	size int
	buf  []byte
	_    [24]byte
}

func newHandoff(depth, frameCap int) *handoff {
	h := &handoff{slots: make([]handoffSlot, depth), mask: uint64(depth - 1)}
	bufs := make([]byte, depth*frameCap) // one allocation, not one per slot
	for i := range h.slots {
		h.slots[i].seq.Store(uint64(i))
		h.slots[i].buf = bufs[i*frameCap : (i+1)*frameCap : (i+1)*frameCap]
	}
	return h
}

// put copies f into the ring; false when it is full or f longer than a slot.
func (h *handoff) put(f []byte) bool {
	if len(f) > len(h.slots[0].buf) {
		return false
	}
	pos := h.tail.Load()
	for {
		s := &h.slots[pos&h.mask]
		switch seq := s.seq.Load(); {
		case seq == pos:
			if h.tail.CompareAndSwap(pos, pos+1) {
				s.size = copy(s.buf, f)
				s.seq.Store(pos + 1)
				return true
			}
			pos = h.tail.Load()
		case int64(seq-pos) < 0:
			// The slot still holds the frame of a lap ago: full.
			return false
		default:
			pos = h.tail.Load() // another producer claimed pos
		}
	}
}

// next returns the oldest frame, filled, or false; done gives its slot back.
func (h *handoff) next() ([]byte, bool) {
	s := &h.slots[h.head&h.mask]
	if s.seq.Load() != h.head+1 {
		return nil, false
	}
	return s.buf[:s.size], true
}

// ready counts the filled frames from the oldest on (at most a ring's worth):
// the ones next returns before it first fails.
func (h *handoff) ready() int {
	n := 0
	for ; n < len(h.slots); n++ {
		pos := h.head + uint64(n)
		if h.slots[pos&h.mask].seq.Load() != pos+1 {
			break
		}
	}
	return n
}

func (h *handoff) done() {
	h.slots[h.head&h.mask].seq.Store(h.head + h.mask + 1)
	h.head++
}

// handOver gives a frame that came in on this shard's queue to the shard that
// owns its QP, and marks that shard for wakeHanded, which wakes it once per
// pass of the engine.
func (e *engine) handOver(to *shard, f []byte) {
	if e.give(to, f) {
		e.sh.ecnt.inc(EngHandoffs)
	}
}

// give copies f into to's ring; a full ring drops f, as a NIC's full receive
// queue does (RC resends it), and counts it.
func (e *engine) give(to *shard, f []byte) bool {
	if !e.put(to, f) {
		e.sh.ecnt.inc(EngHandoffDrops)
		return false
	}
	return true
}

// put copies f into to's ring if it has room, and marks to for wakeHanded.
func (e *engine) put(to *shard, f []byte) bool {
	if !to.in.put(f) {
		return false
	}
	e.handed |= 1 << to.idx
	return true
}

// sendOwn commits the requester's n-byte frame on a route whose frames the
// device's own QPs take: all of them (loopBack), or a copy for a group's
// members here beside the link's (loopMcast). Out of line, so that the
// requester's frames to the link pay one test.
func (e *engine) sendOwn(rt *route, dqpn uint32, n int) {
	if rt.loop {
		e.loopBack(dqpn, n)
		return
	}
	e.loopMcast(rt, n)
	e.tx.commit(n)
}

// loopBack takes the n-byte frame built in the batch's next buffer, on a
// route to the device itself, to the engine of its destination QP dqpn
// instead of the link, as rxe_loopback gives the skb to rxe_rcv: the receive
// path checks it (its ICRC too) as any frame, and the buffer builds the next.
// Counted as sent and, there, as received, as rxe counts both; a full ring
// holds it (hold). Out of line: the senders test the route and commit to
// the batch inline.
func (e *engine) loopBack(dqpn uint32, n int) {
	e.tx.built++
	e.d.cnt.inc(CntSentPkts)
	e.giveOwn(e.d.shardOf(dqpn), e.tx.next()[:n])
}

// giveOwn puts a frame to the device itself on its engine's ring, or holds
// it while frames are held already (they go first, in order) or the ring is
// full.
func (e *engine) giveOwn(to *shard, f []byte) {
	if len(e.held) == 0 && e.put(to, f) {
		e.sh.ecnt.inc(EngLoopback)
		return
	}
	e.hold(to, f)
}

// heldFrame is a looped-back frame that found its engine's ring full.
type heldFrame struct {
	to  *shard
	buf []byte
	n   int
}

// hold keeps f, and the frames built after it, until its engine's ring has
// room (giveHeld), as a link's full transmit ring keeps a batch's frames: rxe
// loses no frame to itself (rxe_rcv queues the skb on its QP, unbounded),
// where a drop would cost RC a go-back-N and lose UC and UD messages, which
// engines busier than the receiving one outrun (UC needs no ACK to go on).
// The pass ends after the QP's turn (transmit), so at most two budgets of
// frames wait; their buffers are made at the first overflow and kept.
func (e *engine) hold(to *shard, f []byte) {
	if len(e.held) == cap(e.held) {
		e.held = append(e.held, heldFrame{})
	} else {
		e.held = e.held[:len(e.held)+1]
	}
	h := &e.held[len(e.held)-1]
	if h.buf == nil {
		h.buf = make([]byte, len(to.in.slots[0].buf)) // a ring slot's size
	}
	h.to, h.n = to, copy(h.buf, f)
}

// giveHeld hands the held frames on in order, as their rings have room; it
// reports whether all went.
func (e *engine) giveHeld() bool {
	k := 0
	for ; k < len(e.held); k++ {
		if h := &e.held[k]; !e.put(h.to, h.buf[:h.n]) {
			break
		}
		e.sh.ecnt.inc(EngLoopback)
	}
	// The rest to the front, swapped: every buffer stays, for the next hold.
	n := 0
	for i := k; i < len(e.held); i++ {
		e.held[n], e.held[i] = e.held[i], e.held[n]
		n++
	}
	e.held = e.held[:n]
	return n == 0
}

// wakeHanded wakes the shards this pass handed frames to.
func (e *engine) wakeHanded() {
	for m := e.handed; m != 0; m &= m - 1 {
		to := e.d.sh[bits.TrailingZeros64(m)]
		if to.sleeping.Load() {
			to.wake()
		}
	}
	e.handed = 0
}

// takeHanded handles the frames handed to this shard (by others, or looped
// back by itself) that are in its ring as it starts: those that come
// meanwhile are the next pass's, so that producers that keep handing over do
// not keep the pass from the rest of its work, and one lookAgain serves the
// frames it takes, as one serves a batch from the link. It reports whether
// there were any.
func (e *engine) takeHanded() bool {
	h := e.sh.in
	n := h.ready()
	e.lookedAgain = false
	for range n {
		f, _ := h.next()
		e.handleFrame(f, true) // this engine's QP (or group members): handled here
		h.done()
	}
	return n > 0
}

// handoffPending reports whether a frame waits in the shard's ring (one a
// producer has claimed but not yet filled does not: that producer wakes the
// shard after it, wakeHanded).
func (e *engine) handoffPending() bool {
	_, ok := e.sh.in.next()
	return ok
}
