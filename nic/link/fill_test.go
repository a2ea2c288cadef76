package link

import (
	"testing"

	"github.com/xrnic/xrnic/nic/xsk"
	"github.com/xrnic/xrnic/testenv"
)

// TestAFXDPFillReserve: once an AF_XDP link's reader has kept up a while, its
// fill ring keeps chunks for FillReserveFrames frames of the interface's MTU,
// two chunks each at RoCE MTU 4096, so that a reader kept off its CPU while
// one sender's bound arrives (the engine's maxDestInflight frames) drops
// none. With xsk's default of 512 chunks, the 256 frames past them dropped.
func TestAFXDPFillReserve(t *testing.T) {
	const mtu = 4096
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: mtu + 128})
	lb := openOn(t, &p.B, KindAFXDP)
	var la *AFXDP
	if err := p.A.Do(func() (err error) {
		so := xsk.DefaultOptions()
		so.FillCalmRefills = 4
		la, err = NewAFXDP(AFXDPOptions{Interface: p.A.Name, Mode: benchMode, Socket: so})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close() })

	// Keep up: small frames, 64 a read, until the target came down and the
	// kernel took what was on the ring above it.
	small := make([][]byte, 64)
	for i := range small {
		small[i] = roceFrame(t, &p.B, &p.A, false, uint32(i), make([]byte, 64))
	}
	all := la.sock.Counters().FillTarget // every RX chunk, while new
	for round := 0; ; round++ {
		c := la.sock.Counters()
		if c.FillTarget < all && c.FramesFill <= c.FillTarget {
			if want := 2 * FillReserveFrames; c.FillTarget != want {
				t.Errorf("fill target %d chunks, want %d", c.FillTarget, want)
			}
			break
		}
		if round == 100 {
			t.Fatalf("after %d rounds: fill target %d chunks of %d, %d on the ring", round, c.FillTarget, all, c.FramesFill)
		}
		sendAll(t, lb, small)
		lendN(t, la, len(small))
	}

	// The reader reads nothing while one sender's bound of largest frames
	// comes, then reads them all.
	burst := make([][]byte, FillReserveFrames)
	for i := range burst {
		burst[i] = roceFrame(t, &p.B, &p.A, false, uint32(i), make([]byte, mtu))
	}
	sendAll(t, lb, burst)
	got, _ := lendN(t, la, len(burst))
	checkArrived(t, 0, got, burst)
	if st, err := la.sock.Stats(); err != nil || st.RxDropped+st.RxFillRingEmptyDescs != 0 {
		t.Errorf("stats %+v (%v): want no drop", st, err)
	}
}
