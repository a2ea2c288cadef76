package pingpong

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestLinger: an example that finished stays up while the peer still sends
// (its last ACKs may have been lost, and rxe resends forever), and leaves
// once the wire is quiet.
func TestLinger(t *testing.T) {
	var n atomic.Uint64
	stop := make(chan struct{})
	go func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				n.Add(1)
			case <-stop:
				return
			}
		}
	}()
	time.AfterFunc(700*time.Millisecond, func() { close(stop) })
	start := time.Now()
	lingerOn(n.Load)
	if d := time.Since(start); d < 700*time.Millisecond {
		t.Fatalf("left after %v while the peer still sent", d)
	}
	if d := time.Since(start); d >= lingerMax {
		t.Fatalf("left only at the bound (%v) though the wire went quiet", d)
	}
}
