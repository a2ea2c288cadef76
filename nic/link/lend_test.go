package link

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/nic/xsk"
	"github.com/xrnic/xrnic/testenv"
)

// lendN lends and reclaims until n frames came, returning copies of them and
// how many were lent where they lay (not in the link's scratch buffers).
func lendN(t testing.TB, l *AFXDP, n int) (got [][]byte, inPlace int) {
	t.Helper()
	frames := make([][]byte, 64)
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		k, err := l.Lend(frames)
		if err != nil {
			t.Fatalf("Lend: %v", err)
		}
		if k == 0 {
			l.Wait(50 * time.Millisecond)
			continue
		}
		for _, f := range frames[:k] {
			got = append(got, bytes.Clone(f))
			if !inScratch(l, f) {
				inPlace++
			}
		}
		l.Reclaim()
	}
	if len(got) != n {
		t.Fatalf("lent %d frames, want %d", len(got), n)
	}
	return got, inPlace
}

// openToClose opens an AF_XDP link on e that the test closes itself.
func openToClose(t testing.TB, e *testenv.Endpoint) *AFXDP {
	return openWith(t, e, xsk.Options{})
}

// openWith opens an AF_XDP link on e with socket options so, which the test
// closes itself.
func openWith(t testing.TB, e *testenv.Endpoint, so xsk.Options) *AFXDP {
	t.Helper()
	var l *AFXDP
	if err := e.Do(func() (err error) {
		l, err = NewAFXDP(AFXDPOptions{Interface: e.Name, Mode: benchMode, Socket: so})
		return err
	}); err != nil {
		t.Fatalf("socket options %+v: %v", so, err)
	}
	return l
}

// smallUMEMPair makes a veth pair of MTU 4224 (RoCE MTU 4096 frames span two
// chunks) with a small-UMEM AF_XDP link on each end: lb on B, la on A.
func smallUMEMPair(t testing.TB) (p *testenv.Pair, lb, la *AFXDP) {
	t.Helper()
	p = testenv.NewTestPair(t, testenv.PairOptions{MTU: 4096 + 128})
	return p, openSmallUMEM(t, &p.B), openSmallUMEM(t, &p.A)
}

// roundFrames makes a round of RoCE frames from p.B to p.A, one of each
// payload size, their payload bytes and PSNs numbered by round.
func roundFrames(t testing.TB, p *testenv.Pair, round int, sizes []int) [][]byte {
	t.Helper()
	var frames [][]byte
	for i, size := range sizes {
		payload := bytes.Repeat([]byte{byte(round*16 + i + 1)}, size)
		frames = append(frames, roceFrame(t, &p.B, &p.A, round%2 == 1, uint32(round*16+i), payload))
	}
	return frames
}

// checkArrived fails t unless each of got is its frame, whole, with a valid
// ICRC.
func checkArrived(t testing.TB, round int, got, frames [][]byte) {
	t.Helper()
	var pk wire.Packet
	for i := range frames {
		if !sameFrame(got[i], frames[i]) {
			t.Fatalf("round %d frame %d (%d bytes) arrived changed:\n got %x\nwant %x", round, i, len(frames[i]), head(got[i]), head(frames[i]))
		}
		if err := wire.ParseAndVerify(got[i], &pk); err != nil {
			t.Fatalf("round %d frame %d: %v", round, i, err)
		}
	}
}

// openSmallUMEM opens an AF_XDP link on e with 48 RX chunks, so that
// two-chunk frames straddle the UMEM's end now and then.
func openSmallUMEM(t testing.TB, e *testenv.Endpoint) *AFXDP {
	t.Helper()
	l := openWith(t, e, xsk.Options{NumFrames: 64, TxFrames: 16})
	t.Cleanup(func() { l.Close() })
	return l
}

func inScratch(l *AFXDP, f []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
	for _, s := range l.scratch {
		if len(s) > 0 && p >= uintptr(unsafe.Pointer(&s[0])) && p < uintptr(unsafe.Pointer(&s[0]))+uintptr(len(s)) {
			return true
		}
	}
	return false
}

// TestAFXDPLend receives RoCE frames of one and two UMEM chunks by Lend on a
// real veth pair, through a UMEM small enough to wrap many times: each frame
// arrives whole and intact, whether lent in place (one chunk, or two that
// xsk.Packet.Join made one) or copied (two chunks where the UMEM wraps).
func TestAFXDPLend(t *testing.T) {
	const mtu = 4096
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: mtu + 128})
	lb := openOn(t, &p.B, KindAFXDP)
	la := openSmallUMEM(t, &p.A)
	// Frames of one chunk (3840 bytes: FrameSize-RxHeadroom) and of two, 7
	// chunks a round: its start goes round every chunk of the 48.
	sizes := []int{mtu, 3900, 0, mtu - 1}
	total, inPlace := 0, 0
	for round := range 40 {
		frames := roundFrames(t, p, round, sizes)
		sendAll(t, lb, frames)
		got, k := lendN(t, la, len(frames))
		checkArrived(t, round, got, frames)
		total += len(frames)
		inPlace += k
	}
	// Every frame but those straddling the UMEM's end is lent in place.
	if inPlace < total*3/4 || inPlace == total {
		t.Errorf("%d of %d frames lent in place: want most, but not those that straddle the UMEM's end", inPlace, total)
	}
	t.Logf("%d of %d frames lent in place", inPlace, total)
}

// TestAFXDPCloseWaitsForReclaim: Close does not unmap the UMEM under frames
// that are lent; it returns once they are reclaimed, and Lend then fails.
func TestAFXDPCloseWaitsForReclaim(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 1500})
	lb := openOn(t, &p.B, KindAFXDP)
	la := openToClose(t, &p.A)
	want := roceFrame(t, &p.B, &p.A, false, 1, bytes.Repeat([]byte{7}, 512))
	sendAll(t, lb, [][]byte{want})
	frames := make([][]byte, 8)
	deadline := time.Now().Add(5 * time.Second)
	n := 0
	for n == 0 && time.Now().Before(deadline) {
		var err error
		if n, err = la.Lend(frames); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			la.Wait(50 * time.Millisecond)
		}
	}
	if n != 1 {
		t.Fatalf("lent %d frames, want 1", n)
	}
	closed := make(chan error)
	go func() { closed <- la.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a frame was lent", err)
	case <-time.After(100 * time.Millisecond):
	}
	// Still mapped, and still writable by its borrower (WriteBatch works too).
	frames[0][len(frames[0])-1] ^= 0xff
	frames[0][len(frames[0])-1] ^= 0xff
	if !bytes.Equal(frames[0], want) {
		t.Errorf("lent frame changed under Close")
	}
	if _, err := la.WriteBatch([][]byte{want}); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("WriteBatch while Close waits: %v", err)
	}
	la.Reclaim()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := la.Lend(frames); !errors.Is(err, ErrClosed) {
		t.Errorf("Lend after Close: %v, want ErrClosed", err)
	}
}

// TestAFXDPLendNoAllocs: lending and reclaiming allocate nothing, once the
// link has met a frame it must copy (its buffers are made once, then).
func TestAFXDPLendNoAllocs(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4096 + 128})
	lb := openOn(t, &p.B, KindAFXDP)
	la := openSmallUMEM(t, &p.A)
	batch := make([][]byte, 1)
	frames := make([][]byte, 64)
	cycle := func() {
		for n, _ := lb.WriteBatch(batch); n == 0; n, _ = lb.WriteBatch(batch) {
		}
		for tries := 0; tries < 1_000_000; tries++ {
			if k, _ := la.Lend(frames); k > 0 {
				la.Reclaim()
				return
			}
		}
	}
	batch[0] = roceFrame(t, &p.B, &p.A, false, 1, nil) // one chunk: the two-chunk frames start at an odd one
	cycle()
	batch[0] = roceFrame(t, &p.B, &p.A, false, 2, bytes.Repeat([]byte{5}, 4096))
	for range 32 { // round the 48 RX chunks: a frame straddles the end
		cycle()
	}
	if la.scratch == nil {
		t.Fatal("no frame straddled the UMEM's end")
	}
	if allocs := testing.AllocsPerRun(100, cycle); allocs != 0 {
		t.Errorf("allocs per send+lend+reclaim = %v, want 0", allocs)
	}
}

// sendLent sends frames by building them in buffers the link lends
// (ReserveTx, SendTx), waiting for buffers as the kernel completes others.
// It reserves in two calls, and more buffers than it fills.
func sendLent(t testing.TB, l *AFXDP, frames [][]byte) {
	t.Helper()
	bufs := make([][]byte, 16)
	deadline := time.Now().Add(5 * time.Second)
	for len(frames) > 0 {
		n := l.ReserveTx(bufs[:4])
		if n > 0 {
			n += l.ReserveTx(bufs[n:])
		}
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatal("ReserveTx lent nothing for 5 s")
			}
			l.Wait(time.Millisecond)
			continue
		}
		k := min(n-1, len(frames)) // one lent buffer goes back unused
		if n == 1 {
			k = 1
		}
		out := make([][]byte, k)
		for i := range k {
			if len(bufs[i]) != l.TxBufLen() {
				t.Fatalf("lent buffer of %d bytes, TxBufLen %d", len(bufs[i]), l.TxBufLen())
			}
			out[i] = bufs[i][:copy(bufs[i], frames[i])]
		}
		if got, err := l.SendTx(out); got != k || err != nil {
			t.Fatalf("SendTx: %d, %v; want %d", got, err, k)
		}
		frames = frames[k:]
	}
}

// TestAFXDPSendTx sends RoCE frames of one and two UMEM chunks built in the
// link's own transmit buffers (TxLender) on a real veth pair: each arrives
// whole and verifies, and every buffer comes back to the TX pool, the unused
// ones unsent.
func TestAFXDPSendTx(t *testing.T) {
	const mtu = 4096
	p, lb, la := smallUMEMPair(t)
	if lb.TxBufLen() != 2*xsk.DefaultFrameSize {
		t.Fatalf("TxBufLen %d: want two chunks for MTU %d", lb.TxBufLen(), mtu+128)
	}
	sizes := []int{mtu, 3900, 0, mtu - 1, 64}
	for round := range 20 {
		frames := roundFrames(t, p, round, sizes)
		sendLent(t, lb, frames)
		got, _ := lendN(t, la, len(frames))
		checkArrived(t, round, got, frames)
	}
	c := lb.sock.Counters()
	if c.FramesTxReserved != 0 || c.TxDropped != 0 || c.TxPackets != uint64(20*len(sizes)) {
		t.Errorf("after SendTx: %d frames reserved, %d dropped, %d packets; want 0, 0, %d", c.FramesTxReserved, c.TxDropped, c.TxPackets, 20*len(sizes))
	}
}

// TestAFXDPTxBufLen: the link lends transmit buffers only when one holds
// its largest frame: by default it asks xsk for buffers of as many chunks
// as that needs; with a TxSpan of the caller's too short for it, it copies.
func TestAFXDPTxBufLen(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4096 + 128})
	for _, tc := range []struct {
		name string
		opts xsk.Options
		want int
	}{
		{"default", xsk.Options{}, 2 * xsk.DefaultFrameSize},
		{"2K chunks", xsk.Options{FrameSize: 2048, MultiBuffer: true}, 3 * 2048},
		{"TxSpan 1", xsk.Options{TxSpan: 1}, 0},
		{"TxFrames not whole buffers", xsk.Options{NumFrames: 64, TxFrames: 15}, 0},
	} {
		l := openWith(t, &p.A, tc.opts)
		got := l.TxBufLen()
		bufs := make([][]byte, 1)
		lent := l.ReserveTx(bufs)
		if lent > 0 {
			l.SendTx(nil) // back unsent
		}
		l.Close()
		if got != tc.want || (lent > 0) != (tc.want > 0) {
			t.Errorf("%s: TxBufLen %d, ReserveTx lent %d; want %d", tc.name, got, lent, tc.want)
		}
	}
}

// TestAFXDPTxBudget: a link's transmit call sends all its TX ring holds
// (xsk.TxBudgetRing), unless the caller set a budget of its own.
func TestAFXDPTxBudget(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4096 + 128})
	for _, tc := range []struct {
		name string
		opts xsk.Options
		want int
	}{
		{"default", xsk.Options{}, 2048},
		{"a smaller ring", xsk.Options{NumFrames: 256}, 128},
		{"a ring of 16: the kernel's", xsk.Options{NumFrames: 64, TxFrames: 16}, 32},
		{"the caller's", xsk.Options{TxBudget: 64}, 64},
	} {
		l := openWith(t, &p.A, tc.opts)
		got := l.sock.Counters().TxBudget
		l.Close()
		if got != tc.want {
			t.Errorf("%s: TxBudget %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestAFXDPCloseWaitsForSendTx: Close does not unmap transmit buffers that are
// lent; it returns once SendTx takes them back, and ReserveTx then lends
// none. An owner holding lent buffers may call BeforeWait, and while Close
// waits may still Lend (it gets ErrClosed), without deadlocking on the lock.
func TestAFXDPCloseWaitsForSendTx(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 1500})
	la := openToClose(t, &p.A)
	bufs := make([][]byte, 4)
	if n := la.ReserveTx(bufs); n != 4 {
		t.Fatalf("ReserveTx lent %d buffers, want 4", n)
	}
	la.BeforeWait() // the owner, holding the lend lock already, must not wait for itself
	closed := make(chan error)
	go func() { closed <- la.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while buffers were lent", err)
	case <-time.After(100 * time.Millisecond):
	}
	clear(bufs[3]) // still mapped, and the owner's to write
	if _, err := la.Lend(make([][]byte, 4)); !errors.Is(err, ErrClosed) {
		t.Errorf("Lend while Close waits: %v, want ErrClosed", err)
	}
	frame := roceFrame(t, &p.A, &p.B, false, 1, []byte("last"))
	if _, err := la.SendTx([][]byte{bufs[0][:copy(bufs[0], frame)]}); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("SendTx while Close waits: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := la.ReserveTx(bufs); n != 0 {
		t.Errorf("ReserveTx after Close lent %d buffers", n)
	}
}

// TestAFXDPSendTxNoAllocs: lending transmit buffers and sending from them
// allocate nothing once the link has lent its first.
func TestAFXDPSendTxNoAllocs(t *testing.T) {
	p, lb, la := smallUMEMPair(t)
	frame := roceFrame(t, &p.B, &p.A, false, 2, bytes.Repeat([]byte{5}, 4096))
	bufs, out, rx := make([][]byte, 8), make([][]byte, 1), make([][]byte, 64)
	cycle := func() {
		for n := lb.ReserveTx(bufs); ; n = lb.ReserveTx(bufs) {
			if n > 0 {
				out[0] = bufs[0][:copy(bufs[0], frame)]
				lb.SendTx(out)
				break
			}
		}
		for tries := 0; tries < 1_000_000; tries++ {
			if k, _ := la.Lend(rx); k > 0 {
				la.Reclaim()
				return
			}
		}
	}
	cycle()
	if allocs := testing.AllocsPerRun(100, cycle); allocs != 0 {
		t.Errorf("allocs per ReserveTx+SendTx+lend+reclaim = %v, want 0", allocs)
	}
}

// TestFloodLends: Flood over a link that lends its transmit buffers writes the
// frame into each once and then only queues them; what arrives is the frame,
// whole, every time, though the buffers go round many times.
func TestFloodLends(t *testing.T) {
	p, lb, la := smallUMEMPair(t)
	frame := roceFrame(t, &p.B, &p.A, false, 9, bytes.Repeat([]byte{0x5a}, 4096))
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		Flood(lb, frame, &stop, func() { time.Sleep(10 * time.Microsecond) })
	}()
	// 25 times round the 8 transmit buffers at least; batches of the flood
	// may bring more.
	var got [][]byte
	frames := make([][]byte, 64)
	for deadline := time.Now().Add(5 * time.Second); len(got) < 200 && time.Now().Before(deadline); {
		k, err := la.Lend(frames)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames[:k] {
			got = append(got, bytes.Clone(f))
		}
		if k > 0 {
			la.Reclaim()
		}
	}
	stop.Store(true)
	<-done
	if len(got) < 200 {
		t.Fatalf("%d frames in 5 s, want 200", len(got))
	}
	want := make([][]byte, len(got))
	for i := range want {
		want[i] = frame
	}
	checkArrived(t, 0, got, want)
	if c := lb.sock.Counters(); c.TxPackets < 200 || c.FramesTxReserved != 0 {
		t.Errorf("%d packets sent, %d frames still reserved; want >= 200, 0", c.TxPackets, c.FramesTxReserved)
	}
}
