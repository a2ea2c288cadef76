// Two endpoints joined through a middle namespace, where a program (the
// impairment wire, bpf.AttachImpair) carries the frames from one side to the
// other: nsA(A) <-> [Mid: MidA, MidB] <-> nsB(B).

package testenv

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
)

// Wire is a Pair whose ends are not each other's peers: A's veth peers with MidA
// and B's with MidB, both in the middle namespace Mid. A and B are configured as
// NewVethPair configures them (addresses, static neighbours naming each other's
// MAC), so code written for a *Pair runs on Wire.Pair unchanged. Nothing crosses
// the middle until a program forwards frames between MidA and MidB, such as
// bpf.AttachImpair(w.MidA.Name, w.MidB.Name, ...) inside Mid.
//
// MidA and MidB have no addresses and IPv6 is off in Mid, so the middle sends
// no frames of its own. A and B send at most one segment per skb
// (gso_max_segs 1), so every frame that reaches the middle fits the MTU, as on
// a real link. Fields are set by NewVethWire and read-only afterwards; Close
// follows NS.Close.
type Wire struct {
	*Pair
	Mid        *NS
	MidA, MidB Endpoint
}

// NewVethWire creates three namespaces and two veth pairs, A-MidA and MidB-B,
// configured as opts says (the MTU and queue counts apply to all four ends, the
// rest to A and B as in NewVethPair), links up. On error nothing is left behind.
func NewVethWire(opts PairOptions) (_ *Wire, err error) {
	n, err := opts.prepare()
	if err != nil {
		return nil, err
	}
	w := &Wire{Pair: &Pair{}}
	w.MidA.Name, w.MidB.Name = ifName(n, 'x'), ifName(n, 'y')
	defer func() {
		if err != nil {
			err = errors.Join(err, w.Close())
		}
	}()
	sep := ""
	if opts.Label != "" {
		sep = "-"
	}
	for _, x := range []struct {
		ns  **NS
		end string
	}{{&w.A.NS, "a"}, {&w.B.NS, "b"}, {&w.Mid, "w"}} {
		if *x.ns, err = NewNS(opts.Label + sep + x.end); err != nil {
			return nil, err
		}
	}
	w.MidA.NS, w.MidB.NS = w.Mid, w.Mid
	// Before the ports appear: they take Mid's defaults when registered there.
	if err := w.Mid.Do(func() error {
		for _, conf := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/disable_ipv6", []byte("1"), 0); err != nil {
				return fmt.Errorf("testenv: disable IPv6 in %s: %w", w.Mid.Name, err)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}

	handles := map[*NS]*netlink.Handle{}
	for _, ns := range []*NS{w.A.NS, w.B.NS, w.Mid} {
		h, err := ns.NewHandle()
		if err != nil {
			return nil, err
		}
		defer h.Close()
		handles[ns] = h
	}
	// Each pair is created from inside one of its namespaces with the peer placed
	// straight into the other, as in NewVethPair: nothing appears in the caller's.
	for _, v := range []struct {
		ns, peerNS *NS
		name, peer string
		mac        []byte
	}{
		{w.A.NS, w.Mid, opts.NameA, w.MidA.Name, opts.MACA},
		{w.B.NS, w.Mid, opts.NameB, w.MidB.Name, opts.MACB},
	} {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = v.name
		attrs.MTU = opts.MTU
		attrs.NumTxQueues = opts.NumTxQueues
		attrs.NumRxQueues = opts.NumRxQueues
		attrs.HardwareAddr = v.mac
		veth := &netlink.Veth{
			LinkAttrs:       attrs,
			PeerName:        v.peer,
			PeerTxQLen:      -1,
			PeerNumTxQueues: uint32(opts.NumTxQueues),
			PeerNumRxQueues: uint32(opts.NumRxQueues),
			PeerMTU:         uint32(opts.MTU),
		}
		if err := v.peerNS.withHandle(func(fd int) error {
			veth.PeerNamespace = netlink.NsFd(fd)
			return handles[v.ns].LinkAdd(veth)
		}); err != nil {
			return nil, fmt.Errorf("testenv: create veth %s/%s: %w", v.name, v.peer, err)
		}
	}
	hMid := handles[w.Mid]
	for _, e := range []*Endpoint{&w.MidA, &w.MidB} {
		l, err := hMid.LinkByName(e.Name)
		if err == nil {
			e.Index, e.MAC, e.MTU = l.Attrs().Index, l.Attrs().HardwareAddr, l.Attrs().MTU
			err = hMid.LinkSetUp(l)
		}
		if err != nil {
			return nil, fmt.Errorf("testenv: set %s up in %s: %w", e.Name, w.Mid.Name, err)
		}
	}
	// A veth passes a GSO skb (a TCP super-packet, say) on whole, which the
	// middle could only forward as one frame larger than the MTU, and the kernel
	// drops such a redirect. With at most one segment per skb, the ends' stacks
	// segment before their veth, so the middle sees the frames a NIC would send.
	for _, e := range []struct {
		ns   *NS
		name string
	}{{w.A.NS, opts.NameA}, {w.B.NS, opts.NameB}} {
		h := handles[e.ns]
		l, err := h.LinkByName(e.name)
		if err == nil {
			err = h.LinkSetGSOMaxSegs(l, 1)
		}
		if err != nil {
			return nil, fmt.Errorf("testenv: gso_max_segs of %s in %s: %w", e.name, e.ns.Name, err)
		}
	}
	if err := w.configure(opts, handles[w.A.NS], handles[w.B.NS]); err != nil {
		return nil, err
	}
	for _, e := range []*Endpoint{&w.MidA, &w.MidB} {
		if err := e.waitReady(false); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Close removes the three namespaces, which removes the veths with them.
func (w *Wire) Close() error {
	var errs []error
	if w.Pair != nil {
		errs = append(errs, w.Pair.Close())
	}
	if w.Mid != nil {
		errs = append(errs, w.Mid.Close())
	}
	return errors.Join(errs...)
}

// Namespaces returns the wire's namespaces: A's, B's, then the middle.
func (w *Wire) Namespaces() []*NS { return []*NS{w.A.NS, w.B.NS, w.Mid} }

// NewTestWire returns a wire (NewVethWire) removed when tb ends, pass or fail. It
// skips (or, under CI=true, fails) without root.
func NewTestWire(tb TB, opts PairOptions) *Wire {
	tb.Helper()
	requireRoot(tb)
	if opts.Label == "" {
		opts.Label = testLabel(tb)
	}
	w, err := NewVethWire(opts)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() {
		if err := w.Close(); err != nil {
			tb.Errorf("testenv: %v", err)
		}
	})
	return w
}
