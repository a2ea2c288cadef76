package bpf

// Attaching the program to an interface. Everything here resolves interface
// names and indexes in the network namespace of the calling OS thread: a caller
// working inside a namespace holds runtime.LockOSThread around these calls.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

func init() {
	// Kernel refusals come with a reason in netlink's extack (PLATFORM pitfall 12).
	nl.EnableErrorMessageReporting = true
}

// Limits of the single-buffer program on veth: veth_xdp_set refuses a peer MTU
// above PAGE_SIZE - XDP_PACKET_HEADROOM - skb_shared_info - ETH_HLEN, 3506 with
// 4 KiB pages (PLATFORM, "What works").
const (
	xdpPacketHeadroom = 256
	skbSharedInfoSize = 320 // SKB_DATA_ALIGN(sizeof(struct skb_shared_info)), 64-bit
	ethHeaderLen      = 14
)

// vethMaxSingleBufferMTU is the largest peer MTU a veth accepts for a
// single-buffer program attached in native mode.
var vethMaxSingleBufferMTU = os.Getpagesize() - xdpPacketHeadroom - skbSharedInfoSize - ethHeaderLen

// AttachMode selects the XDP hook. The zero value is AttachGeneric.
//
// Concurrency: a plain value, safe to copy and share.
type AttachMode int

const (
	// AttachGeneric runs the program on the skb path (XDP_FLAGS_SKB_MODE). The
	// default: on veth it costs the kernel's own traffic far less than native and
	// is as fast for AF_XDP (PLATFORM pitfall 10).
	AttachGeneric AttachMode = iota
	// AttachNative runs the program in the driver (XDP_FLAGS_DRV_MODE). On veth,
	// frames the program redirects need a program on the peer too (pitfall 3), and
	// the veth needs as many RX queues as its peer has TX queues (pitfall 2).
	AttachNative
	// AttachAuto lets the kernel choose: native when the driver supports it.
	AttachAuto
)

func (m AttachMode) String() string {
	switch m {
	case AttachGeneric:
		return "generic"
	case AttachNative:
		return "native"
	case AttachAuto:
		return "auto"
	}
	return fmt.Sprintf("AttachMode(%d)", int(m))
}

// ParseAttachMode is String's inverse for the modes a command line names
// (--xdp-mode): "generic" or "native"; false for anything else.
func ParseAttachMode(s string) (AttachMode, bool) {
	switch s {
	case "generic":
		return AttachGeneric, true
	case "native":
		return AttachNative, true
	}
	return 0, false
}

func (m AttachMode) flags() (link.XDPAttachFlags, error) {
	switch m {
	case AttachGeneric:
		return link.XDPGenericMode, nil
	case AttachNative:
		return link.XDPDriverMode, nil
	case AttachAuto:
		return 0, nil
	}
	return 0, fmt.Errorf("bpf: invalid attach mode %d", int(m))
}

// AttachOptions configure Attach.
//
// Concurrency: a plain value; Attach reads it once and keeps no reference.
type AttachOptions struct {
	// Mode selects the hook; the zero value is AttachGeneric.
	Mode AttachMode
	// SingleBuffer attaches the single-buffer entry point instead of the
	// multi-buffer one. Frames larger than a page then cannot reach it: on veth,
	// native mode refuses a peer MTU above 3506 (ErrMTUTooLarge). The default,
	// multi-buffer, needs sockets bound with XDP_USE_SG for such frames.
	SingleBuffer bool
}

// Attachment is the program attached to one interface through a bpf_link: it
// stays attached until Close, and the kernel detaches it if the process dies
// (PLATFORM pitfall 12). It owns its Program, so each interface has its own
// XSKMAP, indexed by that interface's receive queues.
//
// Concurrency: all methods are safe for concurrent use; Close waits for map
// operations in progress, and after it they return ErrClosed.
type Attachment struct {
	prog    *Program
	ifname  string
	ifindex int
	mode    AttachMode

	mu   sync.Mutex // guards lnk
	lnk  link.Link
	done bool
}

// Attach loads the program and attaches it to the interface ifname, in the
// network namespace of the calling OS thread. The interface must exist, be up
// and have no XDP program yet. On failure nothing stays attached or loaded, and
// the error wraps ErrNoInterface, ErrInterfaceDown, ErrXDPBusy, ErrMTUTooLarge
// or ErrAttach, with the kernel's reason when it gives one.
func Attach(ifname string, opts AttachOptions) (*Attachment, error) {
	flags, err := opts.Mode.flags()
	if err != nil {
		return nil, err
	}
	l, err := checkInterface(ifname, opts)
	if err != nil {
		return nil, err
	}
	ifindex := l.Attrs().Index

	p, err := Load()
	if err != nil {
		return nil, err
	}
	// Steer only frames to the interface's MAC (xrnic.c, self_mac); a device
	// without an Ethernet address has no other MACs to tell apart.
	if mac := l.Attrs().HardwareAddr; len(mac) == 6 {
		if err := p.SetMAC(mac); err != nil {
			p.Close()
			return nil, fmt.Errorf("%w: %w", ErrAttach, err)
		}
	}
	prog, progName := p.XDP(), "multi-buffer"
	if opts.SingleBuffer {
		prog, progName = p.XDPSingleBuffer(), "single-buffer"
	}
	lnk, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	if err != nil {
		reason := kernelReason(ifindex, prog, uint32(flags))
		p.Close()
		return nil, fmt.Errorf("bpf: attach %s program to %q in %s mode: %w: %w%s",
			progName, ifname, opts.Mode, classifyAttachError(err, reason), err, reason)
	}

	a := &Attachment{prog: p, ifname: ifname, ifindex: ifindex, mode: opts.Mode, lnk: lnk}
	if opts.Mode == AttachAuto {
		a.mode = attachedMode(ifindex, opts.Mode)
	}
	return a, nil
}

// checkInterface looks ifname up and refuses what would fail or misbehave,
// naming the problem, before anything is loaded.
func checkInterface(ifname string, opts AttachOptions) (netlink.Link, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("bpf: attach to %q: %w in this network namespace", ifname, ErrNoInterface)
		}
		return nil, fmt.Errorf("bpf: attach to %q: look up interface: %w", ifname, err)
	}
	attrs := l.Attrs()
	if attrs.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("bpf: attach to %q: %w (set it up first)", ifname, ErrInterfaceDown)
	}
	if x := attrs.Xdp; x != nil && x.Attached {
		if isOurs(x.ProgId) {
			return nil, fmt.Errorf("bpf: attach to %q: %w: %w (%s)", ifname, ErrXDPBusy, ErrXDPOurs, describeXDP(x))
		}
		return nil, fmt.Errorf("bpf: attach to %q: %w: %s", ifname, ErrXDPBusy, describeXDP(x))
	}
	if opts.SingleBuffer && opts.Mode != AttachGeneric && l.Type() == "veth" {
		// The kernel checks the peer's MTU; we can see it when it shares our
		// namespace, otherwise the kernel's refusal says the same.
		if attrs.NetNsID < 0 && attrs.ParentIndex > 0 {
			if peer, err := netlink.LinkByIndex(attrs.ParentIndex); err == nil && peer.Attrs().MTU > vethMaxSingleBufferMTU {
				return nil, fmt.Errorf("bpf: attach to %q: %w: veth peer %q has MTU %d, the single-buffer program allows %d (use the multi-buffer program or generic mode)",
					ifname, ErrMTUTooLarge, peer.Attrs().Name, peer.Attrs().MTU, vethMaxSingleBufferMTU)
			}
		}
	}
	return l, nil
}

// isOurs reports whether the XDP program with this id is one of xrnic's entry
// points (names are cut to 15 bytes by the kernel: xrnic_xdp, xrnic_xdp_singl).
func isOurs(id uint32) bool {
	if id == 0 {
		return false
	}
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return false
	}
	defer p.Close()
	info, err := p.Info()
	return err == nil && strings.HasPrefix(info.Name, "xrnic_xdp")
}

// XDP_ATTACHED_MULTI of if_link.h: programs in more than one mode.
const xdpAttachedMulti = 4

func describeXDP(x *netlink.LinkXdp) string {
	mode := map[uint32]string{
		nl.XDP_ATTACHED_DRV: "native",
		nl.XDP_ATTACHED_SKB: "generic",
		nl.XDP_ATTACHED_HW:  "offloaded",
		xdpAttachedMulti:    "several",
	}[x.AttachMode]
	if x.ProgId == 0 {
		return fmt.Sprintf("programs attached in %s", mode)
	}
	return fmt.Sprintf("program id %d attached in %s mode", x.ProgId, mode)
}

// classifyAttachError maps the kernel's refusal to this package's sentinels.
func classifyAttachError(err error, reason string) error {
	switch {
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		// A program arrived after checkInterface, or one in the other mode:
		// "Native and generic XDP can't be active at the same time".
		return ErrXDPBusy
	case errors.Is(err, unix.ERANGE), strings.Contains(strings.ToUpper(reason), "MTU"):
		// veth: "Peer MTU is too large to set XDP"; other drivers say "MTU" too.
		return ErrMTUTooLarge
	}
	return ErrAttach
}

// kernelReason asks the kernel why it refused to attach prog. A bpf_link attach
// returns only an errno (the kernel sends its extack text to a tracepoint), so
// repeat the attach through netlink, which returns the text. It fails for the
// same reason; XDP_FLAGS_UPDATE_IF_NOEXIST keeps it from replacing anything, and
// should it succeed after all, it is undone at once, matched by our program's fd
// so nothing else is removed. The result is "" or " (kernel: ...)".
func kernelReason(ifindex int, prog *ebpf.Program, modeFlags uint32) string {
	err := setXDP(ifindex, prog.FD(), -1, modeFlags|unix.XDP_FLAGS_UPDATE_IF_NOEXIST)
	if err == nil {
		_ = setXDP(ifindex, -1, prog.FD(), modeFlags|unix.XDP_FLAGS_REPLACE)
		return ""
	}
	return " (kernel: " + err.Error() + ")"
}

// setXDP is a legacy netlink XDP attach (fd >= 0) or detach (fd == -1);
// expectedFD >= 0 only replaces that program (XDP_FLAGS_REPLACE). netlink's
// LinkSetXdpFdWithFlags has no IFLA_XDP_EXPECTED_FD, hence the raw request.
func setXDP(ifindex, fd, expectedFD int, flags uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(ifindex)
	req.AddData(msg)
	xdp := nl.NewRtAttr(unix.IFLA_XDP|unix.NLA_F_NESTED, nil)
	xdp.AddRtAttr(unix.IFLA_XDP_FD, nl.Uint32Attr(uint32(int32(fd))))
	xdp.AddRtAttr(unix.IFLA_XDP_FLAGS, nl.Uint32Attr(flags))
	if expectedFD >= 0 {
		xdp.AddRtAttr(unix.IFLA_XDP_EXPECTED_FD, nl.Uint32Attr(uint32(expectedFD)))
	}
	req.AddData(xdp)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// attachedMode reports the mode the kernel chose, or fallback if it cannot tell.
func attachedMode(ifindex int, fallback AttachMode) AttachMode {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil {
		return fallback
	}
	switch l.Attrs().Xdp.AttachMode {
	case nl.XDP_ATTACHED_DRV:
		return AttachNative
	case nl.XDP_ATTACHED_SKB:
		return AttachGeneric
	}
	return fallback
}

// Program returns the attached program, for its XSKMAP and counters. It belongs
// to the Attachment: do not Close it.
func (a *Attachment) Program() *Program { return a.prog }

// Interface returns the name of the interface the program is attached to.
func (a *Attachment) Interface() string { return a.ifname }

// Ifindex returns the index of that interface in the attaching namespace.
func (a *Attachment) Ifindex() int { return a.ifindex }

// Mode returns the hook the program runs in; for AttachAuto, the one the kernel
// chose.
func (a *Attachment) Mode() AttachMode { return a.mode }

// RegisterSocket steers RoCEv2 frames of receive queue to the AF_XDP socket fd;
// see Program.RegisterSocket.
func (a *Attachment) RegisterSocket(queue, fd int) error {
	return a.prog.RegisterSocket(queue, fd)
}

// UnregisterSocket returns queue's RoCEv2 frames to the kernel; see
// Program.UnregisterSocket.
func (a *Attachment) UnregisterSocket(queue int) error {
	return a.prog.UnregisterSocket(queue)
}

// Counters returns the program's counters summed over CPUs.
func (a *Attachment) Counters() (Counters, error) { return a.prog.Counters() }

// SetFaults sets the faults the program injects into the interface's RoCEv2
// frames; see Program.SetFaults.
func (a *Attachment) SetFaults(f Faults) error { return a.prog.SetFaults(f) }

// Close detaches the program and unloads it. Close is idempotent.
func (a *Attachment) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return nil
	}
	a.done = true
	var errs []error
	if err := a.lnk.Close(); err != nil {
		errs = append(errs, fmt.Errorf("bpf: detach from %q: %w", a.ifname, err))
	}
	errs = append(errs, a.prog.Close())
	return errors.Join(errs...)
}
