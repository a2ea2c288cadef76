// Package oob holds what bench's tools share around the RDMA traffic itself:
// the out-of-band TCP connection (perftest and rdma-core's pingpong exchange
// addresses over it) and the pair of devices on lo that --local runs over.
// The functions are safe for concurrent use.
package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
	_ "github.com/xrnic/xrnic/verbs/remote" // verbs.Open attaches to a daemon
)

// Dial connects to addr; timeout bounds the connect (0: none but ctx).
func Dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("couldn't connect to %s: %w", addr, UnwrapOp(err))
	}
	return c, nil
}

// Accept waits for one connection on ln; cancelling ctx closes ln.
func Accept(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("accept on %v: %w", ln.Addr(), UnwrapOp(err))
	}
	return c, nil
}

// UnwrapOp drops net.OpError's repetition of the addresses, for one-line errors.
func UnwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// OpenLoopbackPair opens two UDP links on lo, server first, on the first pair of
// addresses whose RoCEv2 port is free on both.
func OpenLoopbackPair(pairs [][2]string) (srv, cli link.Link, addrs [2]netip.Addr, err error) {
	for _, pr := range pairs {
		a, b := netip.MustParseAddr(pr[0]), netip.MustParseAddr(pr[1])
		srv, err = link.NewUDP(link.UDPOptions{Interface: "lo", Addrs: []netip.Addr{a}})
		if err != nil {
			if inUse(err) {
				continue
			}
			return nil, nil, addrs, err
		}
		cli, err = link.NewUDP(link.UDPOptions{Interface: "lo", Addrs: []netip.Addr{b}})
		if err != nil {
			srv.Close()
			if inUse(err) {
				continue
			}
			return nil, nil, addrs, err
		}
		return srv, cli, [2]netip.Addr{a, b}, nil
	}
	return nil, nil, addrs, fmt.Errorf("UDP port %d is in use on every loopback address tried: %w", link.RoCEv2Port, err)
}

// inUse reports an EADDRINUSE from the UDP link (which keeps only its text).
func inUse(err error) bool {
	return errors.Is(err, unix.EADDRINUSE) || strings.Contains(err.Error(), unix.EADDRINUSE.Error())
}

// Side is one device of --local: a verbs device over its own UDP link on lo,
// with a one-entry GID table made of its address. Close closes both.
type Side struct {
	Dev  *verbs.Device
	Addr netip.Addr
	l    link.Link
}

// Close closes the device, then its link.
func (s *Side) Close() {
	s.Dev.Close()
	s.l.Close()
}

// OpenLoopbackDevices opens the two devices of --local, server first, on the
// first free pair of addresses (OpenLoopbackPair). The engines log nothing.
func OpenLoopbackDevices(pairs [][2]string) (srv, cli *Side, err error) {
	ls, lc, addrs, err := OpenLoopbackPair(pairs)
	if err != nil {
		return nil, nil, err
	}
	open := func(l link.Link, a netip.Addr) (*Side, error) {
		d, err := verbs.Open(verbs.Options{Link: l, GIDs: []verbs.GID{verbs.GIDFromAddr(a)},
			Engine: verbs.EngineConfig{Logf: func(string, ...any) {}}})
		if err != nil {
			l.Close()
			return nil, err
		}
		return &Side{Dev: d, Addr: a, l: l}, nil
	}
	if srv, err = open(ls, addrs[0]); err != nil {
		lc.Close()
		return nil, nil, err
	}
	if cli, err = open(lc, addrs[1]); err != nil {
		srv.Close()
		return nil, nil, err
	}
	return srv, cli, nil
}

// Device is what a command's flags ask of its device.
type Device struct {
	Interface string    // -d
	Kind      link.Kind // --link
	Pcap      string    // --pcap
	Daemon    string    // --daemon
	BusyPoll  bool      // --busy-poll
	XDPMode   bpf.AttachMode
	Queues    int // --queues
}

// OpenDevice opens the device of a command's -d on c.Interface: the link its
// --link asks for, the link's report of its choice on errw (AF_XDP, or why the
// UDP fallback), and with Pcap (--pcap) every frame recorded to that file. The
// file is closed after the device, when the device's Close is done: callers
// close the device with closeDev. With Daemon (--daemon), or when a daemon
// serves the interface (verbs.Open finds it), the device is the daemon's,
// attached. BusyPoll (--busy-poll) runs the engine in the thread that polls a
// CQ (verbs.EngineConfig.BusyPoll), and Queues above 1 an engine per queue
// (--queues): both want an engine in this process.
func OpenDevice(c Device, errw io.Writer) (dev *verbs.Device, closeDev func(), err error) {
	pcap := c.Pcap
	o := verbs.Options{Interface: c.Interface, LinkKind: c.Kind, Logf: linkLog(errw), Attach: c.Daemon,
		XDPMode: c.XDPMode, Queues: c.Queues, InProcess: pcap != "" || c.BusyPoll || c.Queues > 1,
		Engine: verbs.EngineConfig{Logf: func(string, ...any) {}, BusyPoll: c.BusyPoll}}
	var f *os.File
	if pcap != "" {
		if f, err = os.Create(pcap); err != nil {
			return nil, nil, fmt.Errorf("--pcap: %w", err)
		}
		o.Pcap = f
	}
	if dev, err = verbs.Open(o); err != nil {
		if f != nil {
			f.Close()
		}
		return nil, nil, fmt.Errorf("device %s: %w", c.Interface, err)
	}
	return dev, func() {
		dev.Close() // flushes the capture
		if f != nil {
			f.Close()
		}
	}, nil
}

// linkLog passes on the link's report of its choice and drops the goroutine
// start and stop lines.
func linkLog(w io.Writer) func(string, ...any) {
	return func(f string, a ...any) {
		if m := fmt.Sprintf(f, a...); strings.HasPrefix(m, "xrnic: ") {
			fmt.Fprintln(w, m)
		}
	}
}
