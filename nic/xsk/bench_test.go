package xsk

// Receive throughput through AF_XDP on veth, fed by an AF_XDP sender in the peer
// namespace. veth's receive work (including the XDP redirect) runs on the
// sender's CPU (PLATFORM 11), so sender and receiver each take one core.

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func BenchmarkReceive(b *testing.B) {
	for _, c := range []struct {
		name    string
		payload int
	}{{"64B", 64}, {"1KiB", 1024}, {"2KiB", 2048}, {"4KiB", 4096}} {
		for _, budget := range []int{0, 256} {
			b.Run(fmt.Sprintf("%s/txbudget=%d", c.name, budget), func(b *testing.B) {
				benchReceive(b, c.payload, budget)
			})
		}
	}
}

func benchReceive(b *testing.B, payload, budget int) {
	e := newVethEnv(b, 4200)
	e.attachSteering(b)
	ro := DefaultOptions()
	ro.MultiBuffer = true
	ro.NumFrames, ro.TxFrames = 16384+64, 64 // 16K RX frames, fill and RX rings (PLATFORM 9)
	rx := e.newXSK(b, true, 0, ro)
	e.register(b, 0, rx)
	to := DefaultOptions()
	to.MultiBuffer = true
	to.NumFrames, to.TxFrames = 4096+64, 4096
	to.TxBudget = budget
	tx := e.newXSK(b, false, 0, to)

	u := udpFrame{dstMAC: e.A.MAC, srcMAC: e.B.MAC, srcIP: e.B.IPv4, dstIP: e.A.IPv4, srcPort: 5000, dstPort: roceUDPPort}
	frame := u.build(pattern(payload, 1))
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = frame
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var sendErr error
	wg.Add(1)
	go func() { // the sender owns tx until wg.Wait returns
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for !stop.Load() {
			if _, err := tx.Transmit(batch); err != nil {
				sendErr = err
				return
			}
		}
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
		if sendErr != nil {
			b.Errorf("sender: %v", sendErr)
		}
	}()

	pkts := make([]Packet, 64)
	recv := func(n int) {
		got := 0
		last := time.Now()
		for got < n {
			k, _ := rx.Receive(pkts)
			if k == 0 {
				if time.Since(last) > 5*time.Second {
					b.Fatalf("no packet for 5s after %d of %d (stats %+v)", got, n, mustStats(b, rx))
				}
				continue
			}
			rx.Release(pkts[:k])
			got += k
			last = time.Now()
		}
	}
	recv(20000) // warm up: rings, caches, thread placement
	st0 := mustStats(b, rx)
	b.ResetTimer()
	start := time.Now()
	recv(b.N)
	elapsed := time.Since(start)
	b.StopTimer()
	st1 := mustStats(b, rx)
	pps := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(pps/1e6, "Mpps")
	b.ReportMetric(pps*float64(len(frame))*8/1e9, "Gbit/s")
	b.ReportMetric(float64(st1.RxDropped-st0.RxDropped)/float64(b.N), "drops/pkt")
}
