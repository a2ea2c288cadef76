package mr

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// published is what a registrar tells the lookup goroutines: a key and the
// registration it belongs to. stale is set before the key dies (Deregister,
// Reregister): a looker may still hold it then.
type published struct {
	key   uint32
	gen   uint64
	stale atomic.Bool
}

const (
	concBufLen = 512
	concSpan   = 1 << 20 // IOVA distance between generations: ranges never overlap
)

func concIOVA(gen uint64) uint64 { return (gen + 1) * concSpan }

// TestConcurrentRegisterLookup races Register, Reregister, Deregister and
// Invalidate against lock-free lookups. Every lookup must either succeed on
// exactly the memory of the registration its key came from (checked by content:
// each generation's buffer holds its own pattern, at an IOVA range no other
// generation uses) or fail with FaultInvalidKey; never another fault, never other
// memory. After Deregister returns, the old key must fail at once. A dead
// key may come back: the table gives every registration at an index a random
// key byte (1 in 255 that a stale key matches the index's next registration),
// and then the new registration's bounds (another IOVA range) must refuse it.
func TestConcurrentRegisterLookup(t *testing.T) {
	const (
		registrars = 2
		lookers    = 3
		rounds     = 2000 // per registrar
		pd         = 9
	)
	tb := NewTable(64)
	var slots [registrars * 4]atomic.Pointer[published]
	var gens atomic.Uint64
	var stop atomic.Bool
	var hits, misses, revived atomic.Int64

	var lookWG sync.WaitGroup
	for l := range lookers {
		lookWG.Go(func() {
			i := l
			for !stop.Load() {
				i++
				if i%32 == 0 {
					runtime.Gosched() // two cores: let the registrars run
				}
				p := slots[i%len(slots)].Load()
				if p == nil {
					continue
				}
				off := uint64(i*7) % (concBufLen - 16)
				n := 1 + i%16
				b, f := tb.Lookup(p.key, pd, concIOVA(p.gen)+off, n, RemoteRead, testQP)
				switch f {
				case FaultNone:
					if len(b) != n || cap(b) != n {
						t.Errorf("len %d cap %d, want %d", len(b), cap(b), n)
						return
					}
					for j, c := range b {
						if want := byte(p.gen) ^ byte(off+uint64(j)); c != want {
							t.Errorf("gen %d key %#x: byte %d is %#x, want %#x: memory of another registration",
								p.gen, p.key, off+uint64(j), c, want)
							return
						}
					}
					hits.Add(1)
				case FaultInvalidKey:
					misses.Add(1)
				case FaultBounds:
					if !p.stale.Load() {
						t.Errorf("gen %d key %#x: out of bounds on a live key", p.gen, p.key)
						return
					}
					revived.Add(1)
				default:
					t.Errorf("gen %d key %#x: %v, want success or invalid key", p.gen, p.key, f)
					return
				}
				if w, f := tb.LookupAtomic(p.key, pd, testQP, concIOVA(p.gen)+off&^7); f == FaultNone {
					Load(w) // read-only: the registrar never writes the buffer after publishing
				} else if f != FaultInvalidKey && (f != FaultBounds || !p.stale.Load()) {
					t.Errorf("LookupAtomic: %v", f)
					return
				}
			}
		})
	}

	var regWG sync.WaitGroup
	for g := range registrars {
		regWG.Go(func() {
			var live [4]*Region // each registrar keeps four regions alive, replacing the oldest
			var liveGen [4]uint64
			var pub [4]*published // what the lookers were told of live[i]
			retire := func(i int) bool {
				r := live[i]
				if r == nil {
					return true
				}
				key := r.RKey()
				pub[i].stale.Store(true)
				if err := tb.Deregister(r); err != nil {
					t.Errorf("Deregister: %v", err)
					return false
				}
				if _, f := tb.Lookup(key, pd, concIOVA(liveGen[i]), 1, RemoteRead, testQP); f != FaultInvalidKey {
					t.Errorf("key %#x after Deregister: %v, want invalid key", key, f)
				}
				live[i] = nil
				return true
			}
			defer func() {
				for i := range live {
					retire(i)
				}
			}()
			for round := range rounds {
				i := round % len(live)
				my := &slots[g*len(live)+i]
				if !retire(i) {
					return
				}
				gen := gens.Add(1)
				buf := pattern(concBufLen, byte(gen))
				acc := LocalWrite | RemoteRead | RemoteAtomic
				var r *Region
				var err error
				if round%3 == 0 {
					if r, err = tb.AllocFastReg(pd, MaxFastRegPages); err == nil {
						err = fastReg(t, tb, r, r.LKey(), pd, buf, concIOVA(gen), acc)
					}
				} else {
					r, err = tb.Register(pd, buf, concIOVA(gen), acc)
				}
				if err != nil {
					t.Errorf("register: %v", err)
					return
				}
				live[i], liveGen[i], pub[i] = r, gen, &published{key: r.RKey(), gen: gen}
				my.Store(pub[i])
				runtime.Gosched() // let the lookers use it
				switch round % 6 {
				case 1, 4: // rights change: the old key dies at once, the new one works
					old := r.RKey()
					pub[i].stale.Store(true)
					if _, err := tb.Reregister(r, ReregAccess, 0, nil, 0, acc|RemoteWrite); err != nil {
						t.Errorf("Reregister: %v", err)
						return
					}
					if _, f := tb.Lookup(old, pd, concIOVA(gen), 1, RemoteRead, testQP); f != FaultInvalidKey {
						t.Errorf("old key after Reregister: %v", f)
					}
					pub[i] = &published{key: r.RKey(), gen: gen}
					my.Store(pub[i])
				case 3: // fast-reg: invalidate, then the key fails at once
					if f := tb.Invalidate(r.RKey(), pd, Local); f != FaultNone {
						t.Errorf("Invalidate: %v", f)
					}
					if _, f := tb.Lookup(r.RKey(), pd, concIOVA(gen), 1, RemoteRead, testQP); f != FaultInvalidKey {
						t.Errorf("key after Invalidate: %v", f)
					}
				}
			}
		})
	}
	regWG.Wait()
	stop.Store(true)
	lookWG.Wait()
	if tb.Len() != 0 {
		t.Errorf("Len() = %d after every region was deregistered", tb.Len())
	}
	t.Logf("%d lookups hit, %d found the key gone, %d found it at a later registration", hits.Load(), misses.Load(), revived.Load())
	if hits.Load() == 0 {
		t.Errorf("no lookup ever succeeded: the test exercised nothing")
	}
}
