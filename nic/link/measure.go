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
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = frame
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if n, err := tx.WriteBatch(batch); n == 0 || err != nil {
				time.Sleep(10 * time.Microsecond)
			}
		}
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
