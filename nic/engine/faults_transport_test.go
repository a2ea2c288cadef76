// Regression tests for the transport bugs the soak tests found: each scripts the
// faults that trigger one bug, frame by frame, through a link that drops,
// duplicates, holds or blocks chosen frames.

package engine

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/wire"
)

// rxAction is what ctlLink does with a received frame.
type rxAction int

const (
	rxDeliver rxAction = iota
	rxDrop
	rxHold // until release
)

// ctlLink wraps a device's link so that a test decides the fate of each frame
// the device sends (onSend returns the frames to write instead: none drops, two
// duplicate) or receives (onRecv). block makes WriteBatch take nothing, as a full
// transmit ring would. The hooks run on the engine goroutine under mu.
type ctlLink struct {
	link.Link
	mu      sync.Mutex
	onSend  func(p *wire.Packet, frame []byte) [][]byte
	onRecv  func(p *wire.Packet) rxAction
	block   bool
	refused int      // WriteBatch calls refused while blocked
	held    [][]byte // frames onRecv held
	ready   [][]byte // released frames, delivered first
	pkt     wire.Packet
	out     [][]byte
}

func (l *ctlLink) WriteBatch(frames [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.block {
		l.refused++
		return 0, nil
	}
	l.out = l.out[:0]
	for _, f := range frames {
		if l.onSend != nil && wire.Parse(f, &l.pkt) == nil {
			l.out = append(l.out, l.onSend(&l.pkt, f)...)
		} else {
			l.out = append(l.out, f)
		}
	}
	// One write: the peer reads all of it or none, so a test knows what it
	// handles in one pass.
	if n, err := l.Link.WriteBatch(l.out); n < len(l.out) || err != nil {
		return 0, err // the tests keep the memory link far from full
	}
	return len(frames), nil
}

func (l *ctlLink) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for n < len(bufs) && len(l.ready) > 0 {
		sizes[n] = copy(bufs[n], l.ready[0])
		l.ready = l.ready[1:]
		n++
	}
	if n > 0 {
		l.Link.Wake() // more may wait below
		return n, nil
	}
	got, err := l.Link.ReadBatch(bufs, sizes)
	for i := 0; i < got; i++ {
		f := bufs[i][:sizes[i]]
		act := rxDeliver
		if l.onRecv != nil && wire.Parse(f, &l.pkt) == nil {
			act = l.onRecv(&l.pkt)
		}
		switch act {
		case rxDeliver:
			bufs[n], bufs[i] = bufs[i], bufs[n]
			sizes[n] = sizes[i]
			n++
		case rxHold:
			l.held = append(l.held, append([]byte(nil), f...))
		}
	}
	return n, err
}

// release delivers the held frames that match, in order, before anything else.
func (l *ctlLink) release(match func(p *wire.Packet) bool) {
	l.mu.Lock()
	keep := l.held[:0]
	var p wire.Packet
	for _, f := range l.held {
		if wire.Parse(f, &p) == nil && match(&p) {
			l.ready = append(l.ready, f)
		} else {
			keep = append(keep, f)
		}
	}
	l.held = keep
	l.mu.Unlock()
	l.Link.Wake()
}

func (l *ctlLink) set(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn()
}

// ctlPair is rcPair with A's link wrapped in a ctlLink.
func ctlPair(t *testing.T, po pairOpts, no nodeOpts, co connOpts) (*pair, *ctlLink, *node, *node) {
	t.Helper()
	ctl := &ctlLink{}
	po.wrapA = func(l link.Link) link.Link { ctl.Link = l; return ctl }
	p, a, b := rcPair(t, po, no, co)
	return p, ctl, a, b
}

// waitFor polls cond until it holds or 5 s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// A plain ACK at the PSN of a READ or atomic (a responder that acknowledges a
// duplicate SEND with its latest PSN, C9-105; xrnic's and rxe's do not) means the READ response or atomic
// ACK was lost: the requester must retry, not complete the WR without its data
// or result, nor fail it when the ACK comes between READ response packets.
func TestRetryACKAtReadOrAtomicPSN(t *testing.T) {
	for _, c := range []struct {
		name string
		op   WROpcode
		size uint32
		lost wire.Opcode // dropped once on the way back
	}{
		{"READ of one packet", WRRDMARead, 1000, wire.RCRDMAReadResponseOnly},
		{"READ of three packets, last lost", WRRDMARead, 3000, wire.RCRDMAReadResponseLast},
		{"FETCH_ADD", WRAtomicFetchAdd, 8, wire.RCAtomicAcknowledge},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, ctl, a, b := ctlPair(t, pairOpts{}, nodeOpts{}, connOpts{mtu: qpattr.MTU1024})
			fill(b.buf[4096:8192], 5)
			binary.NativeEndian.PutUint64(b.buf[8192:], 1000)
			recv(t, b, 1, 0, 64)
			var sendFrame []byte
			lost := false
			ctl.set(func() {
				ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
					switch {
					case p.Opcode == wire.RCSendOnly:
						sendFrame = append([]byte(nil), f...)
					case p.Opcode == wire.RCRDMAReadRequest || p.Opcode == wire.RCFetchAdd:
						// The SEND again right behind: B acknowledges the duplicate
						// with the PSN of this request.
						return [][]byte{f, sendFrame}
					}
					return [][]byte{f}
				}
				ctl.onRecv = func(p *wire.Packet) rxAction {
					if p.Opcode == c.lost && !lost {
						lost = true
						return rxDrop
					}
					return rxDeliver
				}
			})
			wrs := []SendWR{
				{WRID: 1, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("first")},
				{WRID: 2, Opcode: c.op, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, c.size)},
					RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey(), CompareAdd: 5},
			}
			if c.op == WRAtomicFetchAdd {
				wrs[1].RemoteAddr = b.mr.Addr() + 8192
			}
			if _, err := a.qp.PostSend(wrs); err != nil {
				t.Fatal(err)
			}
			got := pollN(t, a.cq, 2, 5*time.Second)
			checkWC(t, got[1], cq.WC{WRID: 2, Opcode: wcOpcode(c.op), ByteLen: c.size, QPN: a.qp.QPN()})
			if !lost {
				t.Fatalf("no %v to lose", c.lost)
			}
			if c.op == WRRDMARead {
				checkBytes(t, "READ data", a.buf[:c.size], b.buf[4096:4096+c.size])
				return
			}
			if v := binary.NativeEndian.Uint64(a.buf); v != 1000 {
				t.Errorf("FETCH_ADD result: got %d, want 1000", v)
			}
			b.d.Sync().Wait()
			if v := binary.NativeEndian.Uint64(b.buf[8192:]); v != 1005 {
				t.Errorf("counter: got %d, want 1005 (added once)", v)
			}
		})
	}
}

// A go-back-N retry that rewinds past a fenced WQE must not let the fence wait
// for READs posted after it: those complete only after the fenced WQE, so the
// QP would hang (IBV_SEND_FENCE orders a WR after the READs and atomics posted
// before it).
func TestRetryFencedWQEAfterRewind(t *testing.T) {
	_, ctl, a, b := ctlPair(t, pairOpts{}, nodeOpts{}, connOpts{mtu: qpattr.MTU1024})
	fill(a.buf[:2048], 7)
	fill(b.buf[4096:5096], 8)
	var writeFirst wire.PSN
	dropped := false
	ctl.set(func() {
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			switch {
			case p.Opcode == wire.RCRDMAWriteFirst:
				writeFirst = p.BTH.PSN()
			case p.Opcode == wire.RCRDMAWriteLast && !dropped:
				// Lost: the READ behind it draws a NAK sequence error for this PSN.
				dropped = true
				return nil
			}
			return [][]byte{f}
		}
	})
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled | SendFence, SGL: []SGE{a.mr.SGE(0, 2048)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(4096, 1000)},
			RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()},
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	got := pollN(t, a.cq, 2, 5*time.Second)
	checkWC(t, got[0], cq.WC{WRID: 1, Opcode: cq.RDMAWrite, ByteLen: 2048, QPN: a.qp.QPN()})
	checkWC(t, got[1], cq.WC{WRID: 2, Opcode: cq.RDMARead, ByteLen: 1000, QPN: a.qp.QPN()})
	b.d.Sync().Wait()
	checkBytes(t, "WRITE", b.buf[:2048], a.buf[:2048])
	checkBytes(t, "READ", a.buf[4096:5096], b.buf[4096:5096])
	if !dropped || writeFirst == 0 {
		t.Fatalf("the WRITE's last packet was not dropped")
	}
}

// A READ takes its initiator slot (max_rd_atomic) only when it is sent: one that
// found the transmit ring full and then was rewound by a retry must not hold a
// slot that makes a fenced WQE before it wait forever.
func TestRetryReadSlotTakenOnlyWhenSent(t *testing.T) {
	clk := clock.NewManual(time.Unix(3000, 0))
	_, ctl, a, b := ctlPair(t, pairOpts{clock: clk, batch: 1}, nodeOpts{}, connOpts{mtu: qpattr.MTU1024, timeout: 12})
	fill(a.buf[:2048], 9)
	fill(b.buf[4096:5096], 10)
	written := 0
	ctl.set(func() {
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			// With a batch of one frame, the READ's turn comes when the WRITE's last
			// packet waits in the batch: the ring is full from here on.
			if written++; written == 1 {
				ctl.block = true
			}
			return [][]byte{f}
		}
	})
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled | SendFence, SGL: []SGE{a.mr.SGE(0, 2048)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(4096, 1000)},
			RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()},
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ring to fill", func() bool {
		ctl.mu.Lock()
		defer ctl.mu.Unlock()
		return ctl.refused > 0
	})
	// The local ACK timeout rewinds to the WRITE while the ring is full.
	clk.Advance(ackTimeout(12) + time.Millisecond)
	a.d.Sync().Wait()
	a.d.Sync().Wait()
	ctl.set(func() { ctl.block = false; ctl.onSend = nil })
	a.d.Sync().Wait()
	deadline := time.Now().Add(5 * time.Second)
	var got []cq.WC
	var buf [2]cq.WC
	for len(got) < 2 {
		n := a.cq.Poll(buf[:2-len(got)])
		got = append(got, buf[:n]...)
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d completions, want 2: the QP hangs (%s)", len(got), transportState(a.qp))
			}
			clk.Advance(ackTimeout(12)) // whatever timers the recovery needs
			time.Sleep(time.Millisecond)
		}
	}
	checkWC(t, got[0], cq.WC{WRID: 1, Opcode: cq.RDMAWrite, ByteLen: 2048, QPN: a.qp.QPN()})
	checkWC(t, got[1], cq.WC{WRID: 2, Opcode: cq.RDMARead, ByteLen: 1000, QPN: a.qp.QPN()})
	checkBytes(t, "READ", a.buf[4096:5096], b.buf[4096:5096])
}

// The ACK of a WQE's last packet, delayed past the local ACK timeout, reaches the
// requester while the retry resends that WQE: the WQE is complete (an ACK covers
// every earlier PSN) and the requester must go on after it. Before, the WQE was
// left in progress while comp.psn moved past it, and the next retry resent it
// one packet too long, shifting the FETCH_ADD behind it onto a PSN the responder
// took as new: the add ran twice.
func TestRetryLateACKDuringResend(t *testing.T) {
	clk := clock.NewManual(time.Unix(4000, 0))
	_, ctl, a, b := ctlPair(t, pairOpts{clock: clk, txBudget: 1}, nodeOpts{}, connOpts{mtu: qpattr.MTU1024, timeout: 12})
	fill(a.buf[:2048], 11)
	binary.NativeEndian.PutUint64(b.buf[8192:], 70)
	var writeLast wire.PSN
	sends := map[wire.PSN]int{}
	hold := true
	ctl.set(func() {
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			psn := p.BTH.PSN()
			sends[psn]++
			switch {
			case p.Opcode == wire.RCRDMAWriteLast:
				writeLast = psn
			case p.Opcode == wire.RCRDMAWriteFirst && sends[psn] == 2:
				// The retry resent the WRITE's first packet and not yet its last
				// (one packet per turn): now the old ACK of the last arrives.
				l := writeLast
				keep := ctl.held[:0]
				for _, h := range ctl.held {
					var q wire.Packet
					if wire.Parse(h, &q) == nil && q.Opcode == wire.RCAcknowledge && q.BTH.PSN() == l {
						ctl.ready = append(ctl.ready, h)
					} else {
						keep = append(keep, h)
					}
				}
				ctl.held = keep
			}
			return [][]byte{f}
		}
		ctl.onRecv = func(p *wire.Packet) rxAction {
			if hold {
				return rxHold
			}
			return rxDeliver
		}
	})
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 2048)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(4096, 8)},
			RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), CompareAdd: 3},
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	// fetchAddSent: the FETCH_ADD, right after the WRITE, went out n times.
	fetchAddSent := func(n int) func() bool {
		return func() bool {
			ctl.mu.Lock()
			defer ctl.mu.Unlock()
			return writeLast != 0 && sends[writeLast.Next()] >= n
		}
	}
	waitFor(t, "the FETCH_ADD", fetchAddSent(1))
	waitFor(t, "B's answers", func() bool {
		ctl.mu.Lock()
		defer ctl.mu.Unlock()
		return len(ctl.held) == 2 // the WRITE's ACK and the atomic ACK
	})
	// First timeout: the WRITE is resent, its old ACK delivered in the middle.
	clk.Advance(ackTimeout(12) + time.Millisecond)
	waitFor(t, "the FETCH_ADD resent", fetchAddSent(2))
	// Second timeout, answers still held: the retry starts from comp.psn.
	clk.Advance(ackTimeout(12) + time.Millisecond)
	a.d.Sync().Wait()
	a.d.Sync().Wait()
	ctl.set(func() { hold = false })
	ctl.release(func(*wire.Packet) bool { return true })
	var got []cq.WC
	deadline := time.Now().Add(5 * time.Second)
	var buf [2]cq.WC
	for len(got) < 2 {
		n := a.cq.Poll(buf[:2-len(got)])
		got = append(got, buf[:n]...)
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d completions, want 2 (%s)", len(got), transportState(a.qp))
			}
			clk.Advance(ackTimeout(12))
			time.Sleep(time.Millisecond)
		}
	}
	checkWC(t, got[0], cq.WC{WRID: 1, Opcode: cq.RDMAWrite, ByteLen: 2048, QPN: a.qp.QPN()})
	checkWC(t, got[1], cq.WC{WRID: 2, Opcode: cq.FetchAdd, ByteLen: 8, QPN: a.qp.QPN()})
	if v := binary.NativeEndian.Uint64(a.buf[4096:]); v != 70 {
		t.Errorf("FETCH_ADD result: got %d, want 70", v)
	}
	b.d.Sync().Wait()
	if v := binary.NativeEndian.Uint64(b.buf[8192:]); v != 73 {
		t.Errorf("counter: got %d, want 73 (added once)", v)
	}
}

// A NAK sequence error past comp.psn while a retry is under way is a new gap
// behind the one the retry filled: it is forward progress and starts the next
// retry at once, with retry_cnt restored. Before, it waited for the local ACK
// timeout (here a clock that never moves) and spent a retry.
func TestRetryNewNAKDuringRetry(t *testing.T) {
	clk := clock.NewManual(time.Unix(5000, 0))
	_, ctl, a, b := ctlPair(t, pairOpts{clock: clk}, nodeOpts{}, connOpts{mtu: qpattr.MTU1024, timeout: 12, retry: 1})
	fill(a.buf[:8192], 12)
	var first wire.PSN
	sends := map[wire.PSN]int{}
	ctl.set(func() {
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			psn := p.BTH.PSN()
			if p.Opcode == wire.RCRDMAWriteFirst && sends[psn] == 0 {
				first = psn
			}
			sends[psn]++
			switch {
			case psn == first.Add(1) && sends[psn] == 1, // lost: NAK for first+1
				psn == first.Add(4) && sends[psn] == 2: // its retry loses another: NAK for first+4
				return nil
			}
			return [][]byte{f}
		}
	})
	send(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8192)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Opcode: cq.RDMAWrite, ByteLen: 8192, QPN: a.qp.QPN()})
	b.d.Sync().Wait()
	checkBytes(t, "WRITE", b.buf[:8192], a.buf[:8192])
	if c := a.d.Counters(); c[CntRcvSeqErr] != 2 || c[CntCompRetry] != 2 {
		t.Errorf("rcvd_seq_err %d completer_retry_err %d, want 2 and 2", c[CntRcvSeqErr], c[CntCompRetry])
	}
}

// Answers to duplicate requests (a duplicated READ here) must not fill the
// responder's queue so far that a new READ within max_dest_rd_atomic is refused
// with a NAK invalid request, which fails the QP: duplicates hold no responder
// resource.
func TestResponderDuplicatesLeaveRoomForNewReads(t *testing.T) {
	_, ctl, a, b := ctlPair(t, pairOpts{}, nodeOpts{}, connOpts{mtu: qpattr.MTU1024, rdAtomic: 2})
	fill(b.buf[4096:6096], 13)
	dups := 0
	ctl.set(func() {
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			if p.Opcode == wire.RCRDMAReadRequest && dups == 0 {
				// The first READ 30 times: B answers the copies as duplicates.
				dups = 30
				out := make([][]byte, dups)
				for i := range out {
					out[i] = f
				}
				return out
			}
			return [][]byte{f}
		}
	})
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1000)},
			RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(1000, 1000)},
			RemoteAddr: b.mr.Addr() + 5096, RKey: b.mr.RKey()},
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	got := pollN(t, a.cq, 2, 5*time.Second)
	checkWC(t, got[0], cq.WC{WRID: 1, Opcode: cq.RDMARead, ByteLen: 1000, QPN: a.qp.QPN()})
	checkWC(t, got[1], cq.WC{WRID: 2, Opcode: cq.RDMARead, ByteLen: 1000, QPN: a.qp.QPN()})
	checkBytes(t, "READs", a.buf[:2000], b.buf[4096:6096])
	if c := b.d.Counters(); c[CntDupReq] != 29 {
		t.Errorf("duplicate_request: got %d, want 29", c[CntDupReq])
	}
}

// A long READ response shares the link with other QPs' answers: the responder
// sends at most a turn's budget of it before another QP's ACK, so that ACK does
// not wait behind the whole response (and its requester time out).
func TestResponderReadResponseTakesTurns(t *testing.T) {
	p, ctl, a1, b1 := ctlPair(t, pairOpts{}, nodeOpts{bufLen: 1 << 20}, connOpts{mtu: qpattr.MTU1024})
	a2 := newNode(t, p.a, nodeOpts{})
	b2 := newNode(t, p.b, nodeOpts{})
	connect(t, a2, b2, connOpts{mtu: qpattr.MTU1024})
	var order []uint32 // the QPs of what A receives: QP 1's READ responses, QP 2's ACK
	var write []byte
	readSent := false
	ctl.set(func() {
		ctl.block = true // both requests leave in one batch, the READ first
		ctl.onSend = func(p *wire.Packet, f []byte) [][]byte {
			switch {
			case p.Opcode == wire.RCRDMAWriteOnly && !readSent:
				write = append([]byte(nil), f...)
				return nil
			case p.Opcode == wire.RCRDMAReadRequest && write != nil:
				readSent = true
				return [][]byte{f, write}
			case p.Opcode == wire.RCRDMAReadRequest:
				readSent = true
			}
			return [][]byte{f}
		}
		ctl.onRecv = func(p *wire.Packet) rxAction {
			order = append(order, p.BTH.DestQPN())
			return rxDeliver
		}
	})
	const size = 256 << 10
	send(t, a1, SendWR{WRID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a1.mr.SGE(0, size)},
		RemoteAddr: b1.mr.Addr() + size, RKey: b1.mr.RKey()})
	send(t, a2, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, InlineData: []byte("quick"),
		RemoteAddr: b2.mr.Addr(), RKey: b2.mr.RKey()})
	a1.d.Sync().Wait()
	ctl.set(func() { ctl.block = false })
	pollOne(t, a1.cq)
	pollOne(t, a2.cq)
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	responses := 0
	for _, qpn := range order {
		if qpn == a2.qp.QPN() {
			break
		}
		responses++
	}
	if budget := DefaultTxBudget; responses > budget {
		t.Errorf("QP 2's ACK came after %d READ response packets of QP 1, want at most %d (of %d)",
			responses, budget, size/1024)
	}
}
