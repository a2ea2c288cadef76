package mr

import (
	"sync/atomic"
	"testing"
)

func benchTable(b *testing.B) (*Table, *Region) {
	tb := NewTable(0)
	for range 1000 { // a populated table, the benchmarked region in the middle
		mustRegister(b, tb, 1, make([]byte, 64), 0, LocalWrite)
	}
	r := mustRegister(b, tb, 1, make([]byte, 1<<20), 0x10000, allRights)
	for range 1000 {
		mustRegister(b, tb, 1, make([]byte, 64), 0, LocalWrite)
	}
	return tb, r
}

func BenchmarkLookup(b *testing.B) {
	tb, r := benchTable(b)
	key := r.RKey()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, f := tb.Lookup(key, 1, 0x10000+uint64(i&1023)*1024, 1024, RemoteWrite, testQP); f != FaultNone {
			b.Fatal(f)
		}
	}
}

func BenchmarkLookupFault(b *testing.B) {
	tb, r := benchTable(b)
	key := r.RKey() ^ 0x55
	b.ReportAllocs()
	for b.Loop() {
		if _, f := tb.Lookup(key, 1, 0x10000, 1024, RemoteWrite, testQP); f != FaultInvalidKey {
			b.Fatal(f)
		}
	}
}

// BenchmarkLookupParallel: lookups from every P while another goroutine keeps
// registering and deregistering in the same table.
func BenchmarkLookupParallel(b *testing.B) {
	tb, r := benchTable(b)
	key := r.RKey()
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for !stop.Load() {
			x, err := tb.Register(1, buf, 0, LocalWrite)
			if err == nil {
				_ = tb.Deregister(x)
			}
		}
	}()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, f := tb.Lookup(key, 1, 0x10000+uint64(i&1023)*1024, 1024, RemoteWrite, testQP); f != FaultNone {
				b.Error(f)
				return
			}
		}
	})
	b.StopTimer()
	stop.Store(true)
	<-done
}

func BenchmarkLookupAtomicFetchAdd(b *testing.B) {
	tb, r := benchTable(b)
	key := r.RKey()
	b.ReportAllocs()
	for b.Loop() {
		w, f := tb.LookupAtomic(key, 1, testQP, 0x10000+64)
		if f != FaultNone {
			b.Fatal(f)
		}
		FetchAdd(w, 1)
	}
}

func BenchmarkFetchAdd(b *testing.B) {
	buf := make([]byte, 32)
	for _, c := range []struct {
		name string
		w    []byte
	}{{"aligned", buf[8:16]}, {"unaligned", buf[9:17]}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				FetchAdd(c.w, 1)
			}
		})
	}
}

func BenchmarkRegisterDeregister(b *testing.B) {
	tb := NewTable(0)
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		r, err := tb.Register(1, buf, 0, allRights)
		if err != nil {
			b.Fatal(err)
		}
		if err := tb.Deregister(r); err != nil {
			b.Fatal(err)
		}
	}
}
