package bpf

// The impairment wire: xrnic_impair (xrnic.c) on the two ports of a middle
// namespace, forwarding every frame that enters one port out of the other, and
// dropping, corrupting or duplicating RoCEv2 frames at seeded rates on the way.
// Like attach.go, everything here resolves interface names and indexes in the
// network namespace of the calling OS thread.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// ErrSamePort: AttachImpair was given one interface for both ports.
var ErrSamePort = errors.New("the wire's two ports are the same interface")

// impairMaps are the impairment wire's maps in xrnic.c.
type impairMaps struct {
	ImpairPorts    *ebpf.Map `ebpf:"impair_ports"`
	ImpairFwd      *ebpf.Map `ebpf:"impair_fwd"`
	ImpairDup      *ebpf.Map `ebpf:"impair_dup"`
	ImpairFaults   *ebpf.Map `ebpf:"impair_faults"`
	ImpairCounters *ebpf.Map `ebpf:"impair_counters"`
}

// The two entry points with the maps, one of which AttachImpair loads: the
// kernel refuses to load a single-buffer and a multi-buffer program that
// redirect into the same devmap (the map's owner records xdp_has_frags), so
// neither these nor xrnicObjects can hold both.
type (
	impairSingleObjects struct {
		Prog *ebpf.Program `ebpf:"xrnic_impair"`
		impairMaps
	}
	impairFragsObjects struct {
		Prog *ebpf.Program `ebpf:"xrnic_impair_frags"`
		impairMaps
	}
)

// impairObjects are the loaded entry point and maps.
type impairObjects struct {
	prog *ebpf.Program
	impairMaps
}

// loadImpair loads the single-buffer or the multi-buffer entry point and the
// maps.
func loadImpair(multiBuffer bool) (impairObjects, error) {
	if multiBuffer {
		var o impairFragsObjects
		err := loadObjects("multi-buffer impairment program", &o)
		return impairObjects{o.Prog, o.impairMaps}, err
	}
	var o impairSingleObjects
	err := loadObjects("single-buffer impairment program", &o)
	return impairObjects{o.Prog, o.impairMaps}, err
}

func (o *impairObjects) Close() error {
	return closeAll(o.prog, o.ImpairPorts, o.ImpairFwd, o.ImpairDup, o.ImpairFaults, o.ImpairCounters)
}

// Slots of the impair_counters map: one per port, and one for frames from any
// other interface (IMPAIR_OTHER).
const (
	impairPorts = 2
	impairOther = 2
)

// ImpairFaults are the faults the wire injects into RoCEv2 frames (UDP to port
// 4791 over IPv4 or IPv6, parsed as the steering program does); every other
// frame (ARP, ND, ICMP, TCP, other UDP) crosses untouched. Each rate is a
// probability per frame in [0, 1]. Drop and Corrupt act as in Faults: a dropped
// frame is gone, a corrupted one has one bit flipped after its BTH, so the
// receiver's ICRC check fails. Duplicate sends a frame that was not dropped
// twice, back to back (both copies corrupted alike when it was corrupted),
// except a frame the program sees in fragments (see ImpairOptions.MultiBuffer).
//
// Seed makes the faults reproducible per CPU and direction, as in Faults: each
// CPU draws from its own PRNG per ingress port, seeded whenever SetFaults runs
// from Seed (port A) or Seed+2^32 (port B) and the CPU's id. Per RoCEv2 frame it
// draws for the drop, then, when Corrupt is not 0, for the corruption, then,
// when not dropped and Duplicate is not 0, for the duplicate; no draws at all
// while every rate is 0.
//
// Concurrency: a plain value, safe to copy and share.
type ImpairFaults struct {
	Drop      float64
	Corrupt   float64
	Duplicate float64
	Seed      uint64
}

func (f ImpairFaults) validate() error {
	if err := (Faults{Drop: f.Drop, Corrupt: f.Corrupt}).validate(); err != nil {
		return err
	}
	if !(f.Duplicate >= 0 && f.Duplicate <= 1) { // NaN too
		return fmt.Errorf("bpf: set faults: duplicate rate %v: %w", f.Duplicate, ErrFaultRate)
	}
	return nil
}

// ImpairPortCounters count the frames that entered the wire at one port, as the
// program decided them. Every frame counts in Seen and in exactly one of
// Forwarded, Dropped and NoEgress. Forwarded frames left by the other port,
// Duplicated of them twice: that port sent Forwarded + Duplicated frames, unless
// the kernel dropped some after the program (a frame larger than the egress MTU,
// a full backlog). DupRefused counts forwarded frames drawn for duplication but
// sent once because they came in fragments. Corrupted counts forwarded frames
// with a flipped bit. RoCE counts the frames faults could hit; Dropped,
// Duplicated, DupRefused and Corrupted are only ever RoCEv2 frames. NoEgress
// counts frames whose egress port had gone (its interface was removed).
//
// Concurrency: a plain value, safe to copy and share.
type ImpairPortCounters struct {
	Seen       uint64
	RoCE       uint64
	Forwarded  uint64
	Duplicated uint64
	DupRefused uint64
	Dropped    uint64
	Corrupted  uint64
	NoEgress   uint64
}

// ImpairCounters are the wire's counters summed over CPUs: FromA counts the
// frames that entered at port A (and left by B), FromB the reverse. Other
// counts frames the program saw on an interface that is not a port (only a
// BPF_PROG_TEST_RUN can make such); it passed them to the kernel.
//
// Concurrency: a plain value, safe to copy and share.
type ImpairCounters struct {
	FromA, FromB ImpairPortCounters
	Other        uint64
}

// ImpairOptions configure AttachImpair.
//
// Concurrency: a plain value; AttachImpair reads it once and keeps no reference.
type ImpairOptions struct {
	// Mode selects the hook on both ports; the zero value is AttachGeneric, which
	// needs nothing else. In native mode on veth, the frames the program sends
	// into a port reach that port's peer only if the peer has a native XDP
	// program or GRO on (PLATFORM pitfall 3; a generic-mode program does not
	// count): otherwise veth drops them.
	Mode AttachMode
	// MultiBuffer attaches the multi-buffer entry point instead of the
	// single-buffer one. The kernel refuses to broadcast a frame in fragments, so
	// such frames are forwarded once, never duplicated (DupRefused). In generic
	// mode the single-buffer program gets every frame linear, so it duplicates
	// any frame: the default. Native mode on veth needs MultiBuffer when a port's
	// peer has an MTU above 3506 (ErrMTUTooLarge otherwise), as for Attach.
	MultiBuffer bool
}

// Impair is the impairment wire attached to two interfaces through bpf_links:
// frames entering one leave by the other until Close, and the kernel detaches
// the program if the process dies. Both ports share one loaded program and its
// maps.
//
// Concurrency: all methods are safe for concurrent use; Close waits for map
// operations in progress, and after it they return ErrClosed.
type Impair struct {
	mu       sync.RWMutex // guards closed against the objects' descriptors
	closed   bool
	objs     impairObjects
	progName string // of the entry point in objs
	links    [impairPorts]link.Link
	ifnames  [impairPorts]string
	ifindex  [impairPorts]int
	mode     AttachMode

	faultsMu  sync.Mutex // orders SetFaults calls: each writes a newer generation
	faultsGen uint64
}

// AttachImpair loads the impairment program and attaches it to ifA and ifB (port
// A and port B), two interfaces of the calling OS thread's network namespace:
// from then on every frame entering one leaves by the other, RoCEv2 frames meet
// the faults SetFaults sets (none at first). Both interfaces must exist, be up
// and have no XDP program yet, and their MTUs should be equal: the kernel drops
// a frame larger than the egress port takes. On failure nothing stays attached
// or loaded, and the error wraps ErrSamePort, ErrNoInterface, ErrInterfaceDown,
// ErrXDPBusy, ErrMTUTooLarge or ErrAttach, with the kernel's reason when it
// gives one. A caller working inside a namespace holds runtime.LockOSThread
// around this call.
func AttachImpair(ifA, ifB string, opts ImpairOptions) (_ *Impair, err error) {
	flags, err := opts.Mode.flags()
	if err != nil {
		return nil, err
	}
	if ifA == ifB {
		return nil, fmt.Errorf("bpf: attach impairment to %q and %q: %w", ifA, ifB, ErrSamePort)
	}
	w := &Impair{ifnames: [impairPorts]string{ifA, ifB}, mode: opts.Mode}
	for i, name := range w.ifnames {
		l, err := checkInterface(name, AttachOptions{Mode: opts.Mode, SingleBuffer: !opts.MultiBuffer})
		if err != nil {
			return nil, err
		}
		w.ifindex[i] = l.Attrs().Index
	}
	if w.objs, err = loadImpair(opts.MultiBuffer); err != nil {
		return nil, err
	}
	w.progName = "single-buffer"
	if opts.MultiBuffer {
		w.progName = "multi-buffer"
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.detach())
		}
	}()

	// The maps first, so the first frame finds its way. Devmap updates resolve
	// the ifindex in this thread's namespace, as the lookups above did.
	a, b := uint32(w.ifindex[0]), uint32(w.ifindex[1])
	ports, fwd, dup := w.objs.ImpairPorts, w.objs.ImpairFwd, w.objs.ImpairDup
	for _, u := range []struct {
		m        *ebpf.Map
		name     string
		key, val uint32
	}{
		{ports, "ports", a, 0}, {ports, "ports", b, 1},
		{fwd, "fwd", 0, b}, {fwd, "fwd", 1, a},
		{dup, "dup", 0, a}, {dup, "dup", 1, b}, {dup, "dup", 2, a}, {dup, "dup", 3, b},
	} {
		if err := u.m.Update(u.key, u.val, ebpf.UpdateAny); err != nil {
			return nil, fmt.Errorf("bpf: attach impairment: set impair_%s[%d] = %d: %w", u.name, u.key, u.val, err)
		}
	}
	for i, name := range w.ifnames {
		l, err := link.AttachXDP(link.XDPOptions{Program: w.objs.prog, Interface: w.ifindex[i], Flags: flags})
		if err != nil {
			reason := kernelReason(w.ifindex[i], w.objs.prog, uint32(flags))
			return nil, fmt.Errorf("bpf: attach %s impairment program to %q in %s mode: %w: %w%s",
				w.progName, name, opts.Mode, classifyAttachError(err, reason), err, reason)
		}
		w.links[i] = l
	}
	if opts.Mode == AttachAuto {
		w.mode = attachedMode(w.ifindex[0], opts.Mode)
	}
	return w, nil
}

// Interfaces returns the names of port A and port B.
func (w *Impair) Interfaces() (a, b string) { return w.ifnames[0], w.ifnames[1] }

// Mode returns the hook the program runs in; for AttachAuto, the one the kernel
// chose on port A.
func (w *Impair) Mode() AttachMode { return w.mode }

// Program returns the attached entry point, for Program.Run (a test run takes
// the wire's path only with the ingress ifindex of a port). It stays valid until
// Close.
func (w *Impair) Program() *ebpf.Program { return w.objs.prog }

// SetFaults sets the faults of both directions from their next RoCEv2 frame on,
// and restarts every PRNG from f.Seed; the zero ImpairFaults makes the wire
// perfect. A rate outside [0, 1] is refused with ErrFaultRate. A frame that
// races the update may see the old settings, and one direction may change a
// moment before the other.
func (w *Impair) SetFaults(f ImpairFaults) error {
	if err := f.validate(); err != nil {
		return err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return fmt.Errorf("bpf: set faults: %w", ErrClosed)
	}
	w.faultsMu.Lock()
	defer w.faultsMu.Unlock()
	gen := w.faultsGen + 1
	for port := range uint32(impairPorts) {
		v := xrnicImpairFaults{
			F: xrnicFaults{Drop: threshold(f.Drop), Corrupt: threshold(f.Corrupt),
				Seed: impairSeed(f.Seed, int(port)), Gen: gen},
			Duplicate: threshold(f.Duplicate),
		}
		if err := w.objs.ImpairFaults.Update(port, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("bpf: set faults: %w", err)
		}
	}
	w.faultsGen = gen
	return nil
}

// impairSeed is the seed of the PRNGs for frames from port: the two directions
// draw different sequences from one ImpairFaults.Seed.
func impairSeed(seed uint64, port int) uint64 { return seed + uint64(port)<<32 }

// Counters returns the wire's counters summed over all CPUs. The sum is not a
// snapshot: CPUs keep counting while it is read.
func (w *Impair) Counters() (ImpairCounters, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ImpairCounters{}, fmt.Errorf("bpf: read counters: %w", ErrClosed)
	}
	var c ImpairCounters
	for slot, dst := range []*ImpairPortCounters{&c.FromA, &c.FromB, nil} {
		var perCPU []xrnicImpairCounters
		if err := w.objs.ImpairCounters.Lookup(uint32(slot), &perCPU); err != nil {
			return ImpairCounters{}, fmt.Errorf("bpf: read counters: %w", err)
		}
		for _, v := range perCPU {
			if slot == impairOther {
				c.Other += v.Seen
				continue
			}
			dst.Seen += v.Seen
			dst.RoCE += v.Roce
			dst.Forwarded += v.Forwarded
			dst.Duplicated += v.Duplicated
			dst.DupRefused += v.DupRefused
			dst.Dropped += v.Dropped
			dst.Corrupted += v.Corrupted
			dst.NoEgress += v.NoEgress
		}
	}
	return c, nil
}

// Close detaches the program from both ports and unloads it: the wire carries
// nothing any more. Close is idempotent.
func (w *Impair) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.detach()
}

// detach closes the links that exist, then the objects.
func (w *Impair) detach() error {
	var errs []error
	for i, l := range w.links {
		if l == nil {
			continue
		}
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("bpf: detach impairment from %q: %w", w.ifnames[i], err))
		}
		w.links[i] = nil
	}
	if err := w.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("bpf: close impairment program: %w", err))
	}
	return errors.Join(errs...)
}
