// Package bpf holds xrnic's XDP program (xrnic.c, compiled by bpf2go and
// committed) and the Go side that loads it, attaches it to an interface, steers
// receive queues to AF_XDP sockets and reads its counters.
//
// The program redirects RoCEv2 frames (UDP to port 4791 over IPv4 or IPv6,
// optionally behind one VLAN tag) to the AF_XDP socket registered for the frame's
// receive queue, and passes everything else, or RoCEv2 on a queue without a
// socket, to the kernel. For tests it can drop or corrupt RoCEv2 frames at seeded
// rates (SetFaults). A second program, the impairment wire (AttachImpair),
// forwards frames between two interfaces of a middle namespace and drops,
// corrupts or duplicates RoCEv2 frames on the way.
package bpf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"

	"github.com/cilium/ebpf"
)

// Errors of this package. Returned errors wrap them: test with errors.Is.
var (
	ErrClosed        = errors.New("closed")
	ErrQueueRange    = errors.New("receive queue out of range")
	ErrNoInterface   = errors.New("no such interface")
	ErrInterfaceDown = errors.New("interface is down")
	ErrXDPBusy       = errors.New("interface already has an XDP program")
	// ErrXDPOurs comes with ErrXDPBusy when the program there is xrnic's own:
	// another xrnic process runs on the interface.
	ErrXDPOurs     = errors.New("the program is xrnic's: another xrnic runs on this interface")
	ErrMTUTooLarge = errors.New("MTU too large for XDP")
	ErrAttach      = errors.New("kernel refused to attach XDP program")
	ErrFaultRate   = errors.New("fault rate outside [0, 1]")
)

// Counters are the program's counters summed over CPUs. Every frame counts in
// Seen and in exactly one of Redirected, Passed and DroppedInjected; Malformed
// counts frames that looked like IPv4/IPv6/UDP but were truncated or inconsistent
// (the kernel drops them), and these are passed too. Redirected counts the
// program's verdict: a frame the socket then drops (ring full) shows in the
// socket's XDP_STATISTICS. DroppedInjected and CorruptedInjected count the faults
// SetFaults asked for; a corrupted frame is also redirected or passed.
// Unsteered counts RoCEv2 frames passed because no socket is registered at their
// receive queue: the kernel drops them (no listener on port 4791), so they are
// lost to xrnic.
//
// Concurrency: a plain value, safe to copy and share.
type Counters struct {
	Seen              uint64
	Redirected        uint64
	Passed            uint64
	Malformed         uint64
	DroppedInjected   uint64
	CorruptedInjected uint64
	Unsteered         uint64
}

// Faults are the program's injected faults, for testing recovery on the real
// data path. Only RoCEv2 frames (those the program steers) are hit. Each rate is
// a probability per frame in [0, 1]: Drop makes the verdict XDP_DROP; Corrupt
// flips one bit in one byte after the BTH (extension headers, payload or ICRC), so
// the receiver's ICRC check fails, and the frame is then steered as usual. A
// frame is considered for corruption only if it was not dropped.
//
// There is no duplication here: the steering verdict delivers a frame once.
// The impairment wire (AttachImpair, ImpairFaults) duplicates frames on a real
// link; the memory link's fault model (nic/link.Faults) does on its own.
//
// Seed makes the faults reproducible per CPU: each CPU draws from its own PRNG,
// seeded with Seed and its CPU id whenever SetFaults runs (even with the same
// Seed), so the n-th RoCEv2 frame a CPU sees after SetFaults always gets the same
// fault. Which CPU sees which frame is up to the kernel and the traffic, so a
// multi-CPU run is reproducible only in its rates.
//
// Concurrency: a plain value, safe to copy and share.
type Faults struct {
	Drop    float64
	Corrupt float64
	Seed    uint64
}

// threshold turns a probability into the program's per-2^32 threshold: a draw's
// top 32 bits below it hit, so 1 always hits and 0 never does.
func threshold(rate float64) uint64 {
	return uint64(math.Round(rate * (1 << 32)))
}

func (f Faults) validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"drop", f.Drop}, {"corrupt", f.Corrupt}} {
		if !(r.v >= 0 && r.v <= 1) { // NaN too
			return fmt.Errorf("bpf: set faults: %s rate %v: %w", r.name, r.v, ErrFaultRate)
		}
	}
	return nil
}

// Program is the loaded XDP program: its multi-buffer and single-buffer entry
// points, the XSKMAP (receive queue -> AF_XDP socket) and the per-CPU counters.
// Loading does not depend on the network namespace.
//
// Concurrency: all methods are safe for concurrent use. Close waits for map
// operations in progress; after it, they return ErrClosed.
type Program struct {
	mu        sync.RWMutex // guards closed against the objects' file descriptors
	closed    bool
	objs      steeringObjects
	faultsMu  sync.Mutex // orders SetFaults calls: each writes a newer generation
	faultsGen uint64     // generation of the last SetFaults, under faultsMu
}

// steeringObjects are the steering program's objects in xrnic.c. Loading
// through this struct leaves the impairment wire's programs and maps
// (impair.go) out of the kernel; xrnicObjects, which holds both of its entry
// points, cannot be loaded at all.
type steeringObjects struct {
	XrnicXdp       *ebpf.Program `ebpf:"xrnic_xdp"`
	XrnicXdpSingle *ebpf.Program `ebpf:"xrnic_xdp_single"`
	Counters       *ebpf.Map     `ebpf:"counters"`
	Faults         *ebpf.Map     `ebpf:"faults"`
	Xsks           *ebpf.Map     `ebpf:"xsks"`
	SelfMac        *ebpf.Map     `ebpf:"self_mac"`
}

func (o *steeringObjects) Close() error {
	return closeAll(o.XrnicXdp, o.XrnicXdpSingle, o.Counters, o.Faults, o.Xsks, o.SelfMac)
}

// closeAll closes every object, nil ones included, and joins the errors.
func closeAll(cs ...io.Closer) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// loadObjects loads the objects of xrnic.c that objs (a struct like
// steeringObjects) names, and only those.
func loadObjects(what string, objs any) error {
	if err := loadXrnicObjects(objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			// The verifier's log ends with the reason; %+v prints all of it.
			return fmt.Errorf("bpf: load %s: %+v", what, verr)
		}
		return fmt.Errorf("bpf: load %s: %w", what, err)
	}
	return nil
}

// Load loads the XDP program and its maps into the kernel. The caller must Close
// the Program.
func Load() (*Program, error) {
	p := &Program{}
	if err := loadObjects("XDP program", &p.objs); err != nil {
		return nil, err
	}
	return p, nil
}

// XDP returns the multi-buffer entry point (SEC("xdp.frags")), for attaching
// elsewhere or for Program.Test. It stays valid until Close.
func (p *Program) XDP() *ebpf.Program { return p.objs.XrnicXdp }

// XDPSingleBuffer returns the single-buffer entry point (SEC("xdp")). It stays
// valid until Close.
func (p *Program) XDPSingleBuffer() *ebpf.Program { return p.objs.XrnicXdpSingle }

// SetMAC makes the program steer only RoCEv2 frames addressed to mac, the
// interface's own (Attach sets it): the kernel drops a unicast frame to another
// MAC, or gives it to the device that owns it (a macvlan). Until it is set,
// every destination is steered.
func (p *Program) SetMAC(mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("bpf: set MAC %v: not a 6-byte Ethernet address", mac)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("bpf: set MAC: %w", ErrClosed)
	}
	v := xrnicSelfMac{Addr: [6]uint8(mac)}
	if err := p.objs.SelfMac.Update(uint32(0), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: set MAC: %w", err)
	}
	return nil
}

// Queues returns how many receive queues the XSKMAP can steer: queues 0 to
// Queues()-1. Frames from higher queues go to the kernel.
func (p *Program) Queues() int { return int(p.objs.Xsks.MaxEntries()) }

// RegisterSocket steers RoCEv2 frames received on queue to the AF_XDP socket fd,
// replacing any socket registered there. Bind the socket to this interface and
// queue first: the kernel accepts any AF_XDP socket here, yet drops the frames
// it steers to one unbound or bound elsewhere (xsk_rcv checks both), where
// without a socket they would have reached the kernel's stack. Closing the
// socket unregisters it.
func (p *Program) RegisterSocket(queue, fd int) error {
	if queue < 0 || queue >= p.Queues() {
		return fmt.Errorf("bpf: register socket at queue %d (0..%d): %w", queue, p.Queues()-1, ErrQueueRange)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("bpf: register socket: %w", ErrClosed)
	}
	if err := p.objs.Xsks.Update(uint32(queue), uint32(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: register socket fd %d at queue %d: %w", fd, queue, err)
	}
	return nil
}

// UnregisterSocket stops steering queue to a socket: its RoCEv2 frames go to
// the kernel again. Unregistering a queue without a socket is not an error.
func (p *Program) UnregisterSocket(queue int) error {
	if queue < 0 || queue >= p.Queues() {
		return fmt.Errorf("bpf: unregister socket at queue %d (0..%d): %w", queue, p.Queues()-1, ErrQueueRange)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("bpf: unregister socket: %w", ErrClosed)
	}
	err := p.objs.Xsks.Delete(uint32(queue))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("bpf: unregister socket at queue %d: %w", queue, err)
	}
	return nil
}

// Counters returns the program's counters summed over all CPUs. The sum is not
// a snapshot: CPUs keep counting while it is read.
func (p *Program) Counters() (Counters, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return Counters{}, fmt.Errorf("bpf: read counters: %w", ErrClosed)
	}
	var perCPU []xrnicCounters
	if err := p.objs.Counters.Lookup(uint32(0), &perCPU); err != nil {
		return Counters{}, fmt.Errorf("bpf: read counters: %w", err)
	}
	var c Counters
	for _, v := range perCPU {
		c.Seen += v.Seen
		c.Redirected += v.Redirected
		c.Passed += v.Passed
		c.Malformed += v.Malformed
		c.DroppedInjected += v.DroppedInjected
		c.CorruptedInjected += v.CorruptedInjected
		c.Unsteered += v.Unsteered
	}
	return c, nil
}

// SetFaults sets the faults the program injects from its next frame on, and
// restarts every CPU's PRNG from f.Seed; the zero Faults turns injection off. A
// rate outside [0, 1] is refused with ErrFaultRate. A frame that races the update
// may see the old settings.
func (p *Program) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("bpf: set faults: %w", ErrClosed)
	}
	p.faultsMu.Lock()
	defer p.faultsMu.Unlock()
	v := xrnicFaults{Drop: threshold(f.Drop), Corrupt: threshold(f.Corrupt), Seed: f.Seed, Gen: p.faultsGen + 1}
	if err := p.objs.Faults.Update(uint32(0), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: set faults: %w", err)
	}
	p.faultsGen = v.Gen
	return nil
}

// Close unloads the program and its maps (an attached program stays in the
// kernel until its link is closed too). Close is idempotent.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if err := p.objs.Close(); err != nil {
		return fmt.Errorf("bpf: close program: %w", err)
	}
	return nil
}
