package link

import (
	"errors"
	"fmt"
	"log"
	"net/netip"
	"sync/atomic"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/xsk"
)

// Options configures Open.
type Options struct {
	Kind      Kind   // KindAuto (default): AF_XDP when it can attach, else UDP
	Interface string // required
	Queue     int
	Mode      bpf.AttachMode
	UDPAddrs  []netip.Addr // addresses the UDP link binds; default: the interface's
	// Socket tunes the AF_XDP sockets (AFXDPOptions.Socket); zero: xsk's
	// defaults.
	Socket xsk.Options
	// Logf reports the choice Open made and why (default log.Printf); the fallback
	// to UDP is never silent.
	Logf func(format string, args ...any)
}

// Open returns the link opts ask for. With KindAuto it tries AF_XDP first and, when
// that fails (no privilege, another XDP program, a kernel without AF_XDP), logs one
// line saying why and falls back to a UDP socket on port 4791 — unless the program
// in the way is another xrnic's, which would take the UDP socket's frames: then it
// fails with an error saying so.
func Open(opts Options) (Link, error) {
	logf := opts.Logf
	if logf == nil {
		logf = log.Printf
	}
	switch opts.Kind {
	case KindAFXDP:
		return NewAFXDP(AFXDPOptions{Interface: opts.Interface, Queue: opts.Queue, Mode: opts.Mode, Socket: opts.Socket})
	case KindUDP:
		return NewUDP(UDPOptions{Interface: opts.Interface, Addrs: opts.UDPAddrs})
	case KindUDPGSO:
		return NewUDP(UDPOptions{Interface: opts.Interface, Addrs: opts.UDPAddrs, Offload: true})
	case KindAuto:
		x, err := NewAFXDP(AFXDPOptions{Interface: opts.Interface, Queue: opts.Queue, Mode: opts.Mode, Socket: opts.Socket})
		if errors.Is(err, bpf.ErrXDPOurs) {
			// Another xrnic's program steers port 4791 away from any UDP socket here:
			// a fallback would never see a frame.
			return nil, fmt.Errorf("%w: %w; not falling back to UDP, whose frames that program would take", ErrUnavailable, err)
		}
		if err == nil {
			logf("xrnic: %s: AF_XDP link on queue %d (XDP program attached, %s mode)", opts.Interface, opts.Queue, x.att.Mode())
			return x, nil
		}
		u, uerr := NewUDP(UDPOptions{Interface: opts.Interface, Addrs: opts.UDPAddrs})
		if uerr != nil {
			return nil, fmt.Errorf("%w: AF_XDP: %v; UDP fallback: %w", ErrUnavailable, err, uerr)
		}
		logf("xrnic: %s: AF_XDP unavailable (%v); falling back to the UDP link on port %d", opts.Interface, err, RoCEv2Port)
		return u, nil
	}
	return nil, fmt.Errorf("%w: link kind %s cannot be opened on an interface", ErrBadOption, opts.Kind)
}

// OpenQueues opens n links on opts.Interface, one per receive queue 0..n-1, for
// an engine per queue (engine.OpenQueues). n of 1 is Open. More queues need
// AF_XDP (KindAFXDP or KindAuto, which then does not fall back): one XDP
// program steers each queue's frames to its own socket, and the last link to
// close detaches it. On veth only native mode keeps a frame on the queue its
// sender sent it on; generic mode delivers every queue's frames to queue 0.
func OpenQueues(opts Options, n int) ([]Link, error) {
	if n <= 1 {
		l, err := Open(opts)
		if err != nil {
			return nil, err
		}
		return []Link{l}, nil
	}
	if opts.Kind != KindAFXDP && opts.Kind != KindAuto {
		return nil, fmt.Errorf("%w: %d queues need an AF_XDP link, not %s", ErrBadOption, n, opts.Kind)
	}
	if opts.Queue != 0 {
		return nil, fmt.Errorf("%w: queues start at 0", ErrBadOption)
	}
	att, err := bpf.Attach(opts.Interface, bpf.AttachOptions{Mode: opts.Mode})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	ref := new(atomic.Int32)
	ref.Store(int32(n))
	links := make([]Link, 0, n)
	for q := range n {
		x, err := NewAFXDP(AFXDPOptions{Interface: opts.Interface, Queue: q, Mode: opts.Mode, Socket: opts.Socket, Attachment: att})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			_ = att.Close()
			return nil, err
		}
		x.ownAtt, x.attRef = true, ref
		links = append(links, x)
	}
	if opts.Logf != nil {
		opts.Logf("xrnic: %s: AF_XDP links on queues 0-%d (XDP program attached, %s mode)", opts.Interface, n-1, att.Mode())
	}
	return links, nil
}
