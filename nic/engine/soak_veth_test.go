// The soak on the real data path, with AF_XDP links on both ends. TestSoakVeth:
// a veth pair between two namespaces, the steering program dropping and
// corrupting RoCEv2 frames at seeded rates on both ends (bpf.Faults).
// TestSoakVethWire: the ends joined through a middle namespace where the
// impairment wire (bpf.AttachImpair) drops, corrupts and duplicates them.
// Reordering comes from nothing here: the memory link soak covers it.

package engine

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/testenv"
)

// faultyVeth is one end of a veth pair: its XDP attachment (for faults and
// counters), the AF_XDP link on it and a device.
type faultyVeth struct {
	att *bpf.Attachment
	l   *link.AFXDP
	d   *Device
}

// openFaultyVeth attaches the XDP program to e inside its namespace, sets f,
// and opens an AF_XDP link sharing that attachment and a device on the link.
func openFaultyVeth(t testing.TB, e *testenv.Endpoint, f bpf.Faults) *faultyVeth {
	t.Helper()
	v := &faultyVeth{}
	err := e.Do(func() (err error) {
		if v.att, err = bpf.Attach(e.Name, bpf.AttachOptions{}); err != nil {
			return err
		}
		if v.l, err = link.NewAFXDP(link.AFXDPOptions{Interface: e.Name, Attachment: v.att}); err != nil {
			v.att.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("AF_XDP link with XDP faults on %s: %v", e.Name, err)
	}
	if err := v.att.SetFaults(f); err != nil {
		v.l.Close()
		v.att.Close()
		t.Fatalf("SetFaults: %v", err)
	}
	v.d, err = Open(v.l, Config{GIDs: []netdev.GID{netdev.GIDFromAddr(e.IPv4)}})
	if err != nil {
		v.l.Close()
		v.att.Close()
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := v.d.Close(); err != nil {
			t.Errorf("close device: %v", err)
		}
		v.l.Close()
		if err := v.att.Close(); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	return v
}

// vethSoakConfig is the veth soaks' workload.
func vethSoakConfig() soakConfig {
	cfg := soakConfig{qps: 8, bytesPerQP: 2 << 20, maxOps: 64, maxSize: 1 << 20, window: 16,
		timeout: 14, stall: 20 * time.Second, deadline: 2 * time.Minute}
	switch {
	case soakLong():
		cfg.qps, cfg.bytesPerQP, cfg.maxOps, cfg.deadline = 16, 16<<20, 1000, 20*time.Minute
	case testing.Short():
		cfg.bytesPerQP /= 4
	}
	return cfg
}

func TestSoakVeth(t *testing.T) {
	seed := soakSeed(t)
	s := newSoak(t, seed, vethSoakConfig())
	p := testenv.NewTestPair(t, testenv.PairOptions{MTU: 4224})
	sd := subSeed(seed, "veth")
	f := bpf.Faults{Drop: 0.01, Corrupt: 0.001}
	fa, fb := f, f
	fa.Seed, fb.Seed = subSeed(sd, "a"), subSeed(sd, "b")
	va := openFaultyVeth(t, &p.A, fa)
	vb := openFaultyVeth(t, &p.B, fb)
	s.run(va.d, vb.d, sd)
	for _, v := range []struct {
		name string
		*faultyVeth
	}{{"a", va}, {"b", vb}} {
		xc, err := v.att.Counters()
		if err != nil {
			t.Fatal(err)
		}
		c := v.d.Counters()
		st := v.l.Stats()
		t.Logf("%s: XDP seen %d dropped %d corrupted %d; engine rcvd_bad_icrc %d; socket rx_dropped %d",
			v.name, xc.Seen, xc.DroppedInjected, xc.CorruptedInjected, c[CntRcvdBadICRC], st.RxDropped)
		// Every corrupted frame fails the ICRC (the program flips a bit after the
		// BTH) and is counted, unless the socket dropped it first.
		bad := c[CntRcvdBadICRC]
		if bad > xc.CorruptedInjected || bad+st.RxDropped < xc.CorruptedInjected {
			s.fatalf("%s: %d frames corrupted by XDP, %d failed the ICRC, %d dropped by the socket",
				v.name, xc.CorruptedInjected, bad, st.RxDropped)
		}
		if xc.DroppedInjected == 0 {
			s.fatalf("%s: XDP dropped nothing in %d frames at 1%%", v.name, xc.Seen)
		}
	}
}

// TestSoakVethWire runs the soak through the impairment wire: the steering
// program on both ends only steers, the middle drops, corrupts and duplicates
// RoCEv2 frames each way. In "dup=100%" every frame arrives twice and nothing
// is lost, so the responder must count a duplicate_request for each request
// the wire doubled: duplicates reach the transport, and it executes them once
// (the soak's model checks the bytes and completions).
func TestSoakVethWire(t *testing.T) {
	seed := soakSeed(t)
	for _, v := range []struct {
		name string
		f    bpf.ImpairFaults
	}{
		{"drop=1%,dup=1%,corrupt=0.1%", bpf.ImpairFaults{Drop: 0.01, Duplicate: 0.01, Corrupt: 0.001}},
		{"dup=100%", bpf.ImpairFaults{Duplicate: 1}},
	} {
		t.Run(v.name, func(t *testing.T) {
			cfg := vethSoakConfig()
			if v.f.Duplicate == 1 {
				cfg.bytesPerQP /= 4 // every frame twice: a shorter run makes the point
			}
			s := newSoak(t, seed, cfg)
			w := testenv.NewTestWire(t, testenv.PairOptions{MTU: 4224})
			sd := subSeed(seed, "wire "+v.name)
			v.f.Seed = subSeed(sd, "impair")
			var im *bpf.Impair
			if err := w.Mid.Do(func() (err error) {
				im, err = bpf.AttachImpair(w.MidA.Name, w.MidB.Name, bpf.ImpairOptions{})
				return err
			}); err != nil {
				s.fatalf("AttachImpair: %v", err)
			}
			t.Cleanup(func() {
				if err := im.Close(); err != nil {
					t.Errorf("close the wire: %v", err)
				}
			})
			if err := im.SetFaults(v.f); err != nil {
				s.fatalf("SetFaults: %v", err)
			}
			va := openFaultyVeth(t, &w.A, bpf.Faults{})
			vb := openFaultyVeth(t, &w.B, bpf.Faults{})
			s.run(va.d, vb.d, sd)

			ic, err := im.Counters()
			if err != nil {
				s.fatalf("wire counters: %v", err)
			}
			ca, cb := va.d.Counters(), vb.d.Counters()
			sta, stb := va.l.Stats(), vb.l.Stats()
			t.Logf("wire a->b %+v", ic.FromA)
			t.Logf("wire b->a %+v", ic.FromB)
			t.Logf("a: rcvd_bad_icrc %d rx_dropped %d retransmitted %d; b: duplicate_request %d rcvd_bad_icrc %d rx_dropped %d",
				ca[CntRcvdBadICRC], sta.RxDropped, ca[CntRetransmitted], cb[CntDupReq], cb[CntRcvdBadICRC], stb.RxDropped)
			for _, d := range []struct {
				name string
				pc   bpf.ImpairPortCounters
				bad  uint64 // bad ICRCs at the receiving end
				drop uint64 // frames its socket dropped
			}{{"a->b", ic.FromA, cb[CntRcvdBadICRC], stb.RxDropped}, {"b->a", ic.FromB, ca[CntRcvdBadICRC], sta.RxDropped}} {
				pc := d.pc
				if pc.Seen != pc.Forwarded+pc.Dropped+pc.NoEgress || pc.NoEgress != 0 || pc.DupRefused != 0 {
					s.fatalf("%s: wire counters %+v: want every frame forwarded or dropped, duplicates never refused", d.name, pc)
				}
				if v.f.Duplicate > 0 && pc.Duplicated == 0 {
					s.fatalf("%s: the wire duplicated nothing in %d RoCEv2 frames at %v", d.name, pc.RoCE, v.f.Duplicate)
				}
				if v.f.Drop > 0 && pc.Dropped == 0 {
					s.fatalf("%s: the wire dropped nothing in %d RoCEv2 frames at %v", d.name, pc.RoCE, v.f.Drop)
				}
				// A corrupted frame fails the ICRC once, or twice when it was also
				// duplicated, unless the socket dropped it first.
				if d.bad > 2*pc.Corrupted || d.bad+d.drop < pc.Corrupted {
					s.fatalf("%s: %d frames corrupted by the wire, %d failed the ICRC, %d dropped by the socket",
						d.name, pc.Corrupted, d.bad, d.drop)
				}
			}
			if cb[CntDupReq] == 0 {
				s.fatalf("b counted no duplicate_request: the wire's %d duplicates never reached the transport", ic.FromA.Duplicated)
			}
			// a is the requester: every frame a->b is a request. With nothing lost,
			// the second copy of each is a duplicate the responder sees and counts
			// (retransmissions can only add to it); a copy the socket dropped is
			// not seen.
			if v.f.Drop == 0 && v.f.Corrupt == 0 && cb[CntDupReq]+stb.RxDropped < ic.FromA.Duplicated {
				s.fatalf("b counted %d duplicate_request, %d dropped by its socket, for %d requests the wire duplicated",
					cb[CntDupReq], stb.RxDropped, ic.FromA.Duplicated)
			}
		})
	}
}
