// The soak on the real data path: a veth pair between two namespaces, AF_XDP
// links, and the XDP program dropping and corrupting RoCEv2 frames at seeded
// rates on both ends (bpf.Faults). XDP cannot duplicate frames; duplicates here
// come from the engines' own retransmissions, reordering from nothing: the memory
// link soak covers both.

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

func TestSoakVeth(t *testing.T) {
	seed := soakSeed(t)
	cfg := soakConfig{qps: 8, bytesPerQP: 2 << 20, maxOps: 64, maxSize: 1 << 20, window: 16,
		timeout: 14, stall: 20 * time.Second, deadline: 2 * time.Minute}
	switch {
	case soakLong():
		cfg.qps, cfg.bytesPerQP, cfg.maxOps, cfg.deadline = 16, 16<<20, 1000, 20*time.Minute
	case testing.Short():
		cfg.bytesPerQP /= 4
	}
	s := newSoak(t, seed, cfg)
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
