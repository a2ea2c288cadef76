package link

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/testenv"
)

// TestOpenQueuesSteering: the XDP program steers each frame to the socket of
// the queue it came in on, and on a veth in native mode a frame sent on queue
// q comes in on the peer's queue q: what an engine per queue stands on. In
// generic mode veth delivers every queue's frames to queue 0 (logged, not
// required).
func TestOpenQueuesSteering(t *testing.T) {
	for _, mode := range []bpf.AttachMode{bpf.AttachNative, bpf.AttachGeneric} {
		// A pair each: a queue's socket is freed asynchronously (PLATFORM 7).
		p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4200, NumTxQueues: 2, NumRxQueues: 2})
		ends := map[string][]Link{}
		for _, e := range []*testenv.Endpoint{&p.A, &p.B} {
			if err := e.Do(func() (err error) {
				ends[e.Name], err = OpenQueues(Options{Kind: KindAFXDP, Interface: e.Name, Mode: mode}, 2)
				return err
			}); err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
		}
		f := roceFrame(t, &p.A, &p.B, false, 1, []byte("queue"))
		bufs, sizes := [][]byte{make([]byte, 4400)}, make([]int, 1)
		for q := range 2 {
			if n, err := ends[p.A.Name][q].WriteBatch([][]byte{f}); n != 1 || err != nil {
				t.Fatalf("%s: send on queue %d: %d, %v", mode, q, n, err)
			}
			got := -1
			for end := time.Now().Add(2 * time.Second); got < 0 && time.Now().Before(end); time.Sleep(time.Millisecond) {
				for rq, l := range ends[p.B.Name] {
					if n, _ := l.ReadBatch(bufs, sizes); n == 1 {
						got = rq
						if !sameFrame(bufs[0][:sizes[0]], f) {
							t.Fatalf("%s: queue %d received another frame", mode, rq)
						}
					}
				}
			}
			t.Logf("%s: sent on queue %d, received on queue %d", mode, q, got)
			if got < 0 || mode == bpf.AttachNative && got != q {
				t.Errorf("%s: a frame sent on queue %d came in on queue %d", mode, q, got)
			}
		}
		for _, ls := range ends {
			for _, l := range ls {
				l.Close()
			}
		}
	}
}
