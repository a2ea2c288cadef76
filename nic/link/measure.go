package link

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ReceiveResult is what MeasureReceive saw at the receiver.
type ReceiveResult struct {
	Frames  int
	Bytes   int
	Elapsed time.Duration
}

// FramesPerSecond is the receive rate.
func (r ReceiveResult) FramesPerSecond() float64 { return float64(r.Frames) / r.Elapsed.Seconds() }

// Gbps is the received frame bytes in Gbit/s.
func (r ReceiveResult) Gbps() float64 { return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e9 }

// MeasureReceive floods rx with copies of frame sent through tx from a goroutine of
// its own, and counts what rx receives until it has want frames or dur passes,
// whichever comes first (want <= 0: dur alone). The clock starts with the first frame
// received, so set-up time is not measured. Used by the data-path benchmark and by
// `bench link`.
func MeasureReceive(tx, rx Link, frame []byte, want int, dur time.Duration) (ReceiveResult, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		Flood(tx, frame, &stop, func() { time.Sleep(10 * time.Microsecond) })
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, len(frame)+64)
	}
	sizes := make([]int, len(bufs))
	// Frames must flow before the clock starts.
	warm := time.Now().Add(5 * time.Second)
	for n := 0; n == 0; {
		if time.Now().After(warm) {
			return ReceiveResult{}, fmt.Errorf("no frame reached the %s link within 5s", rx.Info().Kind)
		}
		_ = rx.Wait(10 * time.Millisecond)
		var err error
		if n, err = rx.ReadBatch(bufs, sizes); err != nil {
			return ReceiveResult{}, err
		}
	}
	var r ReceiveResult
	start := time.Now()
	end := start.Add(dur)
	for want <= 0 || r.Frames < want {
		n, err := rx.ReadBatch(bufs, sizes)
		if err != nil {
			return r, err
		}
		for i := 0; i < n; i++ {
			r.Bytes += sizes[i]
		}
		r.Frames += n
		if n == 0 {
			_ = rx.Wait(time.Millisecond)
		}
		if r.Frames&0xff == 0 && time.Now().After(end) {
			break
		}
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

// Flood sends frame through tx, 64 at a time (Flooder), until stop is set,
// calling idle (when not nil) after a batch the link took none of.
func Flood(tx Link, frame []byte, stop *atomic.Bool, idle func()) {
	f := NewFlooder(tx, frame)
	for !stop.Load() {
		if n, err := f.Send(); (n == 0 || err != nil) && idle != nil {
			idle()
		}
	}
}

// Flooder sends copies of one frame through a link, 64 at a time. A link
// that lends its transmit buffers (TxLender) gets the frame written once into
// every one of them, which Send then only queues, as xdpsock's txonly does:
// the fastest honest sender, with no copy per frame, which xrnic's engine
// does not make either. A Flooder belongs to the goroutine that writes.
type Flooder struct {
	tx    Link
	tl    TxLender // nil: WriteBatch of batch, every entry the frame
	n     int      // the frame's length
	batch [][]byte
	bufs  [][]byte
}

// NewFlooder readies a Flooder of frame on tx.
func NewFlooder(tx Link, frame []byte) *Flooder {
	f := &Flooder{tx: tx, n: len(frame), batch: make([][]byte, 64)}
	if tl, ok := tx.(TxLender); ok && tl.TxBufLen() >= len(frame) {
		f.tl, f.bufs = tl, make([][]byte, len(f.batch))
		// Lend every buffer, write the frame in each, take them back unsent.
		for n := tl.ReserveTx(f.bufs); n > 0; n = tl.ReserveTx(f.bufs) {
			for _, b := range f.bufs[:n] {
				copy(b, frame)
			}
		}
		tl.SendTx(nil)
		return f
	}
	for i := range f.batch {
		f.batch[i] = frame
	}
	return f
}

// Send queues one batch and returns how many frames the link took.
func (f *Flooder) Send() (int, error) {
	if f.tl == nil {
		return f.tx.WriteBatch(f.batch)
	}
	n := f.tl.ReserveTx(f.bufs)
	for i := range n {
		f.batch[i] = f.bufs[i][:f.n]
	}
	return f.tl.SendTx(f.batch[:n])
}
