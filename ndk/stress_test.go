package ndk

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/verbs"
)

// The stress test's oracle: every callback and close is stamped from one
// sequence, and the stamps are checked against the rules at the end of each
// round.

type sobj struct {
	id      int
	kind    string
	parents []*sobj
	close   func(func(error)) error

	mu      sync.Mutex
	closing bool
	// The close completed between lo and hi: both the callback's entry for a
	// pending close; the stamps before and after the call for a synchronous one.
	lo, hi     int64
	closeCBEnd int64      // the close callback's return (lo when there is none)
	cbs        [][2]int64 // request and event callbacks: start, end
	kids       []*sobj
}

type oracle struct {
	seq  atomic.Int64
	mu   sync.Mutex
	objs []*sobj
	bad  []string
}

func (o *oracle) add(kind string, close func(func(error)) error, parents ...*sobj) *sobj {
	s := &sobj{kind: kind, close: close, parents: parents}
	o.mu.Lock()
	s.id = len(o.objs)
	o.objs = append(o.objs, s)
	o.mu.Unlock()
	for _, p := range parents {
		p.mu.Lock()
		p.kids = append(p.kids, s)
		p.mu.Unlock()
	}
	return s
}

// wrap stamps a request or event callback of s.
func (o *oracle) wrap(s *sobj, f func()) {
	start := o.seq.Add(1)
	if f != nil {
		f()
	}
	end := o.seq.Add(1)
	s.mu.Lock()
	s.cbs = append(s.cbs, [2]int64{start, end})
	s.mu.Unlock()
}

// closeObj closes s once; the completion is stamped either way.
func (o *oracle) closeObj(s *sobj) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	s.mu.Unlock()
	before := o.seq.Add(1)
	err := s.close(func(error) {
		at := o.seq.Add(1)
		end := o.seq.Add(1)
		s.mu.Lock()
		s.lo, s.hi, s.closeCBEnd = at, at, end
		s.mu.Unlock()
	})
	if !errors.Is(err, ErrPending) {
		after := o.seq.Add(1)
		s.mu.Lock()
		s.lo, s.hi, s.closeCBEnd = before, after, before
		s.mu.Unlock()
	}
}

// check runs the rules over a finished round; adapterClosed is the stamp
// taken when Adapter.Close returned.
func (o *oracle) check(adapterClosed int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.objs {
		if s.hi == 0 {
			o.bad = append(o.bad, fmt.Sprintf("%s %d: close never completed", s.kind, s.id))
			continue
		}
		for _, cb := range s.cbs {
			if cb[0] > s.hi {
				o.bad = append(o.bad, fmt.Sprintf("LT14: %s %d: callback at %d after its close completed at %d", s.kind, s.id, cb[0], s.hi))
			}
			if cb[1] > s.hi {
				o.bad = append(o.bad, fmt.Sprintf("LT13: %s %d: close completed at %d before a callback returned at %d", s.kind, s.id, s.hi, cb[1]))
			}
			if cb[1] > adapterClosed {
				o.bad = append(o.bad, fmt.Sprintf("LT12: %s %d: callback returned at %d after the adapter's close returned at %d", s.kind, s.id, cb[1], adapterClosed))
			}
		}
		if s.closeCBEnd > adapterClosed {
			o.bad = append(o.bad, fmt.Sprintf("LT12: %s %d: close callback returned at %d after the adapter's close at %d", s.kind, s.id, s.closeCBEnd, adapterClosed))
		}
		for _, k := range s.kids {
			if k.lo > s.hi {
				o.bad = append(o.bad, fmt.Sprintf("LT8: %s %d closed at %d before its successor %s %d at %d", s.kind, s.id, s.hi, k.kind, k.id, k.lo))
			}
			if k.closeCBEnd > s.hi {
				o.bad = append(o.bad, fmt.Sprintf("LT10: %s %d closed at %d while %s %d's close callback ran until %d", s.kind, s.id, s.hi, k.kind, k.id, k.closeCBEnd))
			}
		}
	}
}

// objects counts the objects the stress test made.
var objects atomic.Int64

// stressHang bounds a round (a hang guard).
var stressHang = 10 * time.Second

// stressOps is the number of random operations over all rounds; set
// XRNIC_NDK_STRESS_OPS to change it and XRNIC_NDK_SEED to replay a seed's
// operation sequences (the goroutines' interleaving is the scheduler's).
func stressParams(t *testing.T) (ops int, seed uint64) {
	ops = 100_000
	if v, err := strconv.Atoi(os.Getenv("XRNIC_NDK_STRESS_OPS")); err == nil && v > 0 {
		ops = v
	}
	seed = uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("XRNIC_NDK_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("stress: %d operations, seed %d (replay with XRNIC_NDK_SEED=%d)", ops, seed, seed)
	return ops, seed
}

// TestStressLifetimes: random creates, requests and closes (antecedents
// before successors as often as after) from several goroutines on one adapter,
// then the adapter's close from another, round after round; the oracle checks
// LT8, LT10, LT12, LT13 and LT14 on every object of every round.
func TestStressLifetimes(t *testing.T) {
	ops, seed := stressParams(t)
	da, db := memDevices(t)
	peer := openAdapter(t, db) // its CM refuses the connectors' REQs
	_ = peer
	const workers, perRound = 4, 400
	done := 0
	for round := 0; done < ops; round++ {
		done += stressRound(t, da, seed+uint64(round), workers, perRound)
		if t.Failed() {
			t.Fatalf("round %d failed: replay with XRNIC_NDK_SEED=%d", round, seed)
		}
	}
	t.Logf("stress: %d operations done, %d objects created and closed", done, objects.Load())
}

func stressRound(t *testing.T, dev *verbs.Device, seed uint64, workers, perRound int) int {
	a, err := OpenAdapter(dev)
	if err != nil {
		t.Fatal(err)
	}
	o := &oracle{}
	var live struct {
		sync.Mutex
		pds, cqs []*sobj
		pdOf     map[*sobj]*PD
		cqOf     map[*sobj]*CQ
		all      []*sobj
	}
	live.pdOf, live.cqOf = map[*sobj]*PD{}, map[*sobj]*CQ{}
	pick := func(r *rand.Rand, xs []*sobj) *sobj {
		if len(xs) == 0 {
			return nil
		}
		return xs[r.IntN(len(xs))]
	}
	adm := o.add("adapter", func(func(error)) error { return nil })
	var count atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range perRound {
				count.Add(1)
				live.Lock()
				pdS, cqS := pick(r, live.pds), pick(r, live.cqs)
				pd, cq := live.pdOf[pdS], live.cqOf[cqS]
				victim := pick(r, live.all)
				live.Unlock()
				switch op := r.IntN(10); {
				case op == 0:
					p, err := a.CreatePD(nil)
					if err != nil {
						continue
					}
					s := o.add("pd", p.Close, adm)
					live.Lock()
					live.pds, live.all = append(live.pds, s), append(live.all, s)
					live.pdOf[s] = p
					live.Unlock()
				case op == 1:
					var s *sobj
					ready := make(chan struct{})
					c, err := a.CreateCQ(8, func(error) { <-ready; o.wrap(s, nil) }, nil)
					if err != nil {
						continue
					}
					s = o.add("cq", c.Close, adm)
					close(ready)
					c.Arm(NotifyAny)
					live.Lock()
					live.cqs, live.all = append(live.cqs, s), append(live.all, s)
					live.cqOf[s] = c
					live.Unlock()
				case op == 2 && pd != nil:
					m, err := pd.CreateMR(false, nil)
					if err != nil {
						continue
					}
					s := o.add("mr", m.Close, pdS)
					m.Register(make([]byte, 64), AllowLocalWrite, nil)
					live.Lock()
					live.all = append(live.all, s)
					live.Unlock()
				case op == 3 && pd != nil && cq != nil:
					ch := make(chan *QP, 1)
					err := pd.CreateQP(QPOptions{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveDepth: 2, InitiatorDepth: 2},
						func(q *QP, err error) { ch <- q })
					if !errors.Is(err, ErrPending) {
						continue
					}
					q := <-ch
					if q == nil {
						continue
					}
					s := o.add("qp", q.Close, pdS, cqS)
					q.Flush()
					live.Lock()
					live.all = append(live.all, s)
					live.Unlock()
				case op == 4 && pd != nil && cq != nil:
					// A connector whose Connect the peer refuses: a request
					// completing, maybe after the close began.
					ch := make(chan *QP, 1)
					if err := pd.CreateQP(QPOptions{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveDepth: 1, InitiatorDepth: 1},
						func(q *QP, err error) { ch <- q }); !errors.Is(err, ErrPending) {
						continue
					}
					q := <-ch
					if q == nil {
						continue
					}
					qs := o.add("qp", q.Close, pdS, cqS)
					c, err := a.CreateConnector(nil, nil)
					if err != nil {
						o.closeObj(qs)
						continue
					}
					cs := o.add("connector", c.Close, adm)
					var req sync.WaitGroup
					req.Add(1)
					err = c.Connect(q, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 4999), 1, 1, nil,
						func(error) { req.Wait(); o.wrap(cs, nil) })
					req.Done()
					_ = err
					if r.IntN(2) == 0 {
						o.closeObj(cs)
					}
					live.Lock()
					live.all = append(live.all, qs, cs)
					live.Unlock()
				case op == 5:
					l, err := a.CreateListener(func(c *Connector) { c.Close(nil) }, nil)
					if err != nil {
						continue
					}
					s := o.add("listener", l.Close, adm)
					l.Listen(netip.AddrPortFrom(ipA, uint16(5000+r.IntN(50))), nil)
					live.Lock()
					live.all = append(live.all, s)
					live.Unlock()
				case op < 9 && victim != nil:
					o.closeObj(victim) // antecedents as likely as successors
				default:
					if _, err := a.QueryAdapterInfo(); err != nil && !errors.Is(err, ErrClosed) {
						t.Error(err)
					}
				}
			}
		}()
	}
	// The adapter's close, from another goroutine, while the workers may
	// still be at work: it waits for the objects, which are all closed below.
	closed := make(chan int64, 1)
	closer := make(chan struct{})
	go func() {
		defer close(closer)
		wg.Wait()
		live.Lock()
		all := append([]*sobj(nil), live.all...)
		live.Unlock()
		for _, s := range all {
			o.closeObj(s)
		}
	}()
	n := workers * perRound
	closeAfter := int64(n/2 + rand.New(rand.NewPCG(seed, 99)).IntN(n/2))
	go func() {
		for count.Load() < closeAfter {
			time.Sleep(100 * time.Microsecond)
		}
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		closed <- o.seq.Add(1)
	}()
	select {
	case at := <-closed:
		<-closer // its last synchronous close stamps after the adapter's close returned
		adm.lo, adm.hi, adm.closeCBEnd = at, at, at
		o.check(at)
	case <-time.After(stressHang):
		o.mu.Lock()
		for _, s := range o.objs {
			s.mu.Lock()
			if s.hi == 0 && s.kind != "adapter" {
				t.Errorf("seed %d: %s %d (closing %v) never closed", seed, s.kind, s.id, s.closing)
			}
			s.mu.Unlock()
		}
		o.mu.Unlock()
		t.Fatalf("seed %d: the adapter's close never returned", seed)
	}
	objects.Add(int64(len(o.objs)))
	for _, b := range o.bad {
		t.Errorf("seed %d: %s", seed, b)
	}
	return int(count.Load())
}
