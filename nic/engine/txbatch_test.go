package engine

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/xrnic/xrnic/nic/link"
)

// fakeTxLender lends free of its bufs and records what SendTx sends. It is a
// link.Link by embedding one whose WriteBatch the batch must not call.
type fakeTxLender struct {
	link.Link
	bufs [][]byte
	free int // bufs[:free] are free; the rest lent or sent
	lent [][]byte
	sent []byte // each frame's one byte
}

func (f *fakeTxLender) TxBufLen() int { return len(f.bufs[0]) }

func (f *fakeTxLender) ReserveTx(bufs [][]byte) int {
	n := min(len(bufs), f.free)
	for i := range n {
		f.free--
		bufs[i] = f.bufs[f.free]
		f.lent = append(f.lent, f.bufs[f.free])
	}
	return n
}

func (f *fakeTxLender) SendTx(frames [][]byte) (int, error) {
	for i, fr := range frames {
		if unsafe.SliceData(fr) != unsafe.SliceData(f.lent[i]) {
			panic("frame not built in its lent buffer")
		}
		if len(fr) != 1 {
			panic("frame of more than the byte built")
		}
		f.sent = append(f.sent, fr[0])
	}
	f.free += len(f.lent) - len(frames) // the unused come back; the sent stay the kernel's
	f.lent = f.lent[:0]
	return len(frames), nil
}

func (f *fakeTxLender) WriteBatch([][]byte) (int, error) { panic("WriteBatch on a lending link") }

// TestTxBatchLends: over a link that lends its transmit buffers
// (link.TxLender), the engine builds each frame in one, full says so when the
// link has none left, flush sends what was built and gives the unused back,
// and none of it allocates.
func TestTxBatchLends(t *testing.T) {
	f := &fakeTxLender{bufs: make([][]byte, 6), free: 6}
	for i := range f.bufs {
		f.bufs[i] = make([]byte, 128)
	}
	tb := newTxBatch(f, 4, 100, false)
	if tb.lender == nil {
		t.Fatal("the batch does not use the link's buffers")
	}
	var c counters
	var ec engineCounters
	build := func(b byte) bool {
		if tb.full() {
			return false
		}
		buf := tb.next()
		buf[0] = b
		tb.commit(1)
		return true
	}
	for i := range 3 {
		if !build(byte(i)) {
			t.Fatalf("frame %d: no buffer", i)
		}
	}
	if k := tb.flush(f, &c, &ec); k != 3 || f.free != 3 || tb.n != 0 || tb.lent != 0 {
		t.Fatalf("flush: %d sent, %d free, n %d, lent %d; want 3, 3 (one lent buffer unused), 0, 0", k, f.free, tb.n, tb.lent)
	}
	for i := 3; i < 6; i++ {
		if !build(byte(i)) {
			t.Fatalf("frame %d: no buffer", i)
		}
	}
	if build(6) { // the link has lent its last
		t.Fatal("built a frame with no buffer left")
	}
	if k := tb.flush(f, &c, &ec); k != 3 {
		t.Fatalf("flush: %d sent, want 3", k)
	}
	if tb.full() != true || tb.flush(f, &c, &ec) != 0 {
		t.Fatal("with no buffer to lend, full and a flush of nothing should report it")
	}
	if !bytes.Equal(f.sent, []byte{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("sent %x, want the six frames in order", f.sent)
	}
	if got := c[CntSentPkts].Load(); got != 6 {
		t.Errorf("sent_pkts %d, want 6", got)
	}
	f.free = len(f.bufs) // the kernel completed them
	// A pass that sent one frame (an ACK) borrows one first, not a batch.
	build(7)
	tb.flush(f, &c, &ec)
	if tb.full() || len(f.lent) != 1 {
		t.Fatalf("after a flush of one frame, %d lent for the next", len(f.lent))
	}
	build(8)
	if tb.full() || len(f.lent) != 2 { // then as many again as are lent
		t.Fatalf("%d lent for a second frame, want 2", len(f.lent))
	}
	tb.flush(f, &c, &ec)
	f.free = len(f.bufs)
	f.lent = make([][]byte, 0, len(f.bufs))
	f.sent = make([]byte, 0, 1000)
	allocs := testing.AllocsPerRun(100, func() {
		f.sent = f.sent[:0]
		build(1)
		build(2)
		tb.flush(f, &c, &ec)
		f.free = len(f.bufs)
	})
	if allocs != 0 {
		t.Errorf("%v allocations a batch of 2, want 0", allocs)
	}
}
