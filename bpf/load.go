// Package bpf holds xrnic's XDP program (xrnic.c, compiled by bpf2go and
// committed) and the Go side that loads it, attaches it to an interface, steers
// receive queues to AF_XDP sockets and reads its counters.
//
// The program redirects RoCEv2 frames (UDP to port 4791 over IPv4 or IPv6,
// optionally behind one VLAN tag) to the AF_XDP socket registered for the frame's
// receive queue, and passes everything else, or RoCEv2 on a queue without a
// socket, to the kernel.
package bpf

import (
	"errors"
	"fmt"
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
	ErrMTUTooLarge   = errors.New("MTU too large for XDP")
	ErrAttach        = errors.New("kernel refused to attach XDP program")
)

// Counters are the program's counters summed over CPUs. Every frame counts in
// Seen and in exactly one of Redirected and Passed; Malformed counts frames that
// looked like IPv4/IPv6/UDP but were truncated or inconsistent (the kernel drops
// them), and these are passed too. Redirected counts the program's verdict: a
// frame the socket then drops (ring full) shows in the socket's XDP_STATISTICS.
//
// Concurrency: a plain value, safe to copy and share.
type Counters struct {
	Seen       uint64
	Redirected uint64
	Passed     uint64
	Malformed  uint64
}

// Program is the loaded XDP program: its multi-buffer and single-buffer entry
// points, the XSKMAP (receive queue -> AF_XDP socket) and the per-CPU counters.
// Loading does not depend on the network namespace.
//
// Concurrency: all methods are safe for concurrent use. Close waits for map
// operations in progress; after it, they return ErrClosed.
type Program struct {
	mu     sync.RWMutex // guards closed against the objects' file descriptors
	closed bool
	objs   xrnicObjects
}

// Load loads the XDP program and its maps into the kernel. The caller must Close
// the Program.
func Load() (*Program, error) {
	p := &Program{}
	if err := loadXrnicObjects(&p.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			// The verifier's log ends with the reason; %+v prints all of it.
			return nil, fmt.Errorf("bpf: load XDP program: %+v", verr)
		}
		return nil, fmt.Errorf("bpf: load XDP program: %w", err)
	}
	return p, nil
}

// XDP returns the multi-buffer entry point (SEC("xdp.frags")), for attaching
// elsewhere or for Program.Test. It stays valid until Close.
func (p *Program) XDP() *ebpf.Program { return p.objs.XrnicXdp }

// XDPSingleBuffer returns the single-buffer entry point (SEC("xdp")). It stays
// valid until Close.
func (p *Program) XDPSingleBuffer() *ebpf.Program { return p.objs.XrnicXdpSingle }

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
	}
	return c, nil
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
