package bpf

// The impairment wire: AttachImpair's checks and cleanup, each fault's verdict,
// counters and frame changes through BPF_PROG_TEST_RUN, the seeded sequences
// against a model of the program, and RoCEv2 frames sent through a live wire
// (testenv.Wire) and captured at the far end.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
)

// newWire returns a wire (testenv.NewTestWire) at MTU 4200.
func newWire(t *testing.T) *testenv.Wire {
	t.Helper()
	return testenv.NewTestWire(t, testenv.PairOptions{MTU: mtu4096})
}

// newQuietWire is newWire without addresses and with IPv6 off on the ends, so
// that no frame crosses but the test's own (for counters of test runs).
func newQuietWire(t *testing.T) *testenv.Wire {
	t.Helper()
	w := testenv.NewTestWire(t, testenv.PairOptions{MTU: mtu4096, NoIPv4: true, NoIPv6: true})
	for _, e := range []*testenv.Endpoint{&w.A, &w.B} {
		in(t, e.NS, func() error {
			return os.WriteFile("/proc/sys/net/ipv6/conf/"+e.Name+"/disable_ipv6", []byte("1"), 0)
		})
	}
	return w
}

// attachImpair attaches the wire's program to w's middle ports; t.Cleanup
// detaches it.
func attachImpair(t *testing.T, w *testenv.Wire, opts ImpairOptions) *Impair {
	t.Helper()
	var im *Impair
	in(t, w.Mid, func() (err error) {
		im, err = AttachImpair(w.MidA.Name, w.MidB.Name, opts)
		return err
	})
	t.Cleanup(func() {
		if err := im.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return im
}

func impairCounters(t *testing.T, im *Impair) ImpairCounters {
	t.Helper()
	c, err := im.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func portDelta(a, b ImpairPortCounters) ImpairPortCounters {
	return ImpairPortCounters{
		Seen: a.Seen - b.Seen, RoCE: a.RoCE - b.RoCE, Forwarded: a.Forwarded - b.Forwarded,
		Duplicated: a.Duplicated - b.Duplicated, DupRefused: a.DupRefused - b.DupRefused, Dropped: a.Dropped - b.Dropped,
		Corrupted: a.Corrupted - b.Corrupted, NoEgress: a.NoEgress - b.NoEgress,
	}
}

func impairDelta(after, before ImpairCounters) ImpairCounters {
	return ImpairCounters{FromA: portDelta(after.FromA, before.FromA), FromB: portDelta(after.FromB, before.FromB),
		Other: after.Other - before.Other}
}

func TestImpairAttachErrors(t *testing.T) {
	w := newWire(t)
	try := func(a, b string, opts ImpairOptions) error {
		t.Helper()
		var err error
		in(t, w.Mid, func() error {
			var im *Impair
			if im, err = AttachImpair(a, b, opts); err == nil {
				im.Close()
			}
			return nil
		})
		return err
	}
	for _, c := range []struct {
		a, b string
		opts ImpairOptions
		want error
	}{
		{w.MidA.Name, w.MidA.Name, ImpairOptions{}, ErrSamePort},
		{w.MidA.Name, "xrnope0", ImpairOptions{}, ErrNoInterface},
		{"xrnope0", w.MidB.Name, ImpairOptions{}, ErrNoInterface},
		{"", w.MidB.Name, ImpairOptions{}, ErrNoInterface},
		{w.MidA.Name, "a-name-longer-than-15", ImpairOptions{}, ErrNoInterface},
		// Native on lo: the first port attaches, the second fails, and the first
		// must be detached again.
		{w.MidA.Name, "lo", ImpairOptions{Mode: AttachNative, MultiBuffer: true}, ErrAttach},
		// The single-buffer program in native mode refuses the peer's MTU 4200.
		{w.MidA.Name, w.MidB.Name, ImpairOptions{Mode: AttachNative}, ErrMTUTooLarge},
	} {
		err := try(c.a, c.b, c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("AttachImpair(%q, %q, %+v): got %v, want %v", c.a, c.b, c.opts, err, c.want)
		}
		t.Logf("AttachImpair(%q, %q, %v): %v", c.a, c.b, c.opts.Mode, err)
	}
	if err := try(w.MidA.Name, w.MidB.Name, ImpairOptions{Mode: 7}); err == nil {
		t.Errorf("invalid mode: got nil error")
	}
	requireDetached(t, &w.MidA)
	requireDetached(t, &w.MidB)

	// A port that is busy (the steering program) or down.
	att, err := attach(t, &w.MidB, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := try(w.MidA.Name, w.MidB.Name, ImpairOptions{}); !errors.Is(err, ErrXDPBusy) || !errors.Is(err, ErrXDPOurs) {
		t.Errorf("port B busy: got %v, want ErrXDPBusy and ErrXDPOurs", err)
	}
	att.Close()
	requireDetached(t, &w.MidA)
	in(t, w.Mid, func() error {
		return netlink.LinkSetDown(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: w.MidA.Index}})
	})
	if err := try(w.MidA.Name, w.MidB.Name, ImpairOptions{}); !errors.Is(err, ErrInterfaceDown) {
		t.Errorf("port A down: got %v, want ErrInterfaceDown", err)
	}
	requireDetached(t, &w.MidB)
}

func TestImpairSetFaultsAndClose(t *testing.T) {
	w := newWire(t)
	im := attachImpair(t, w, ImpairOptions{})
	if a, b := im.Interfaces(); a != w.MidA.Name || b != w.MidB.Name || im.Mode() != AttachGeneric {
		t.Errorf("Interfaces %q %q, Mode %v", a, b, im.Mode())
	}
	for _, e := range []*testenv.Endpoint{&w.MidA, &w.MidB} {
		if x := xdpState(t, e); !x.Attached {
			t.Errorf("%s: not attached: %+v", e.Name, x)
		}
	}
	for _, f := range []ImpairFaults{
		{Drop: -0.01}, {Corrupt: 1.01}, {Duplicate: -1}, {Duplicate: 1.5}, {Duplicate: math.NaN()}, {Duplicate: math.Inf(1)},
	} {
		if err := im.SetFaults(f); !errors.Is(err, ErrFaultRate) {
			t.Errorf("SetFaults(%+v): got %v, want ErrFaultRate", f, err)
		}
	}
	for _, f := range []ImpairFaults{{}, {Drop: 1, Corrupt: 1, Duplicate: 1, Seed: math.MaxUint64}, {Duplicate: 1e-9}} {
		if err := im.SetFaults(f); err != nil {
			t.Errorf("SetFaults(%+v): %v", f, err)
		}
	}
	if err := im.Close(); err != nil {
		t.Fatal(err)
	}
	if err := im.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	requireDetached(t, &w.MidA)
	requireDetached(t, &w.MidB)
	if err := im.SetFaults(ImpairFaults{}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetFaults after Close: got %v, want ErrClosed", err)
	}
	if _, err := im.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters after Close: got %v, want ErrClosed", err)
	}
}

// runImpair runs the program once on a copy of frame as if received at ifindex
// (0: no interface) inside ns, and returns the verdict, the counter deltas and
// the frame as the program left it.
func runImpair(t *testing.T, im *Impair, ns *testenv.NS, ifindex int, frame []byte) (uint32, ImpairCounters, []byte) {
	t.Helper()
	before := impairCounters(t, im)
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: bytes.Clone(frame), DataOut: out,
		Context: &xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)}}
	var verdict uint32
	var err error
	in(t, ns, func() error {
		verdict, err = im.Program().Run(opts)
		return nil
	})
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN on %d bytes: %v", len(frame), err)
	}
	return verdict, impairDelta(impairCounters(t, im), before), opts.DataOut
}

// testRunLinear is the largest frame BPF_PROG_TEST_RUN hands over without
// fragments: a page less headroom and skb_shared_info. It does so for either
// entry point; only a driver enforces the single-buffer limit.
const testRunLinear = 3520

// Each fault setting on every frame case, entering at either port, through
// either entry point: every frame is redirected (a duplicate too: the broadcast
// shows only in the counters) unless it is RoCEv2 and dropped; only RoCEv2
// frames are hit; a frame in fragments is not duplicated. Frames from an
// interface that is not a port go to the kernel.
func TestImpairFrames(t *testing.T) {
	for _, multi := range []bool{false, true} {
		t.Run(fmt.Sprintf("multi-buffer=%v", multi), func(t *testing.T) {
			w := newQuietWire(t)
			im := attachImpair(t, w, ImpairOptions{MultiBuffer: multi})
			impairFrames(t, w, im)
		})
	}
}

func impairFrames(t *testing.T, w *testenv.Wire, im *Impair) {
	for _, fc := range []struct {
		f                    ImpairFaults
		drop, corrupts, dups bool
	}{
		{ImpairFaults{Seed: 5}, false, false, false},
		{ImpairFaults{Drop: 1, Seed: 5}, true, false, false},
		{ImpairFaults{Corrupt: 1, Seed: 5}, false, true, false},
		{ImpairFaults{Duplicate: 1, Seed: 5}, false, false, true},
		{ImpairFaults{Drop: 1, Corrupt: 1, Duplicate: 1, Seed: 5}, true, false, false},
		{ImpairFaults{Corrupt: 1, Duplicate: 1, Seed: 5}, false, true, true},
	} {
		if err := im.SetFaults(fc.f); err != nil {
			t.Fatal(err)
		}
		for _, port := range []*testenv.Endpoint{&w.MidA, &w.MidB} {
			for _, c := range frameCases() {
				what := name("%+v, from %s: %s (%d bytes)", fc.f, port.Name, c.name, len(c.frame))
				verdict, got, out := runImpair(t, im, w.Mid, port.Index, c.frame)
				want := ImpairPortCounters{Seen: 1, Forwarded: 1}
				wantVerdict := uint32(xdpRedirect)
				uoff, ulen, _ := udpLoc(c.frame)
				corrupt := false
				if c.kind == kindRoCE {
					want.RoCE = 1
					switch {
					case fc.drop:
						wantVerdict, want.Forwarded, want.Dropped = xdpDrop, 0, 1
					default:
						if fc.corrupts && ulen > 8+bthLen {
							corrupt, want.Corrupted = true, 1
						}
						switch {
						case fc.dups && len(c.frame) > testRunLinear:
							want.DupRefused = 1
						case fc.dups:
							want.Duplicated = 1
						}
					}
				}
				wantC := ImpairCounters{FromA: want}
				if port == &w.MidB {
					wantC = ImpairCounters{FromB: want}
				}
				if verdict != wantVerdict {
					t.Errorf("%s: got verdict %d, want %d", what, verdict, wantVerdict)
				}
				if got != wantC {
					t.Errorf("%s: got counter deltas %+v, want %+v", what, got, wantC)
				}
				if verdict == xdpDrop {
					continue
				}
				checkCorruption(t, what, c.frame, out[:len(c.frame)], corrupt, uoff+8+bthLen, uoff+ulen)
			}
		}
		// Not a port: no interface at all, and the middle's loopback.
		for _, ifindex := range []int{0, 1} {
			fr := eth(etherIPv4, ipv4(protoUDP, roce(64)))
			verdict, got, out := runImpair(t, im, w.Mid, ifindex, fr)
			if verdict != xdpPass || got != (ImpairCounters{Other: 1}) || !bytes.Equal(out[:len(fr)], fr) {
				t.Errorf("%+v, ifindex %d: got verdict %d, counter deltas %+v; want XDP_PASS, Other 1, frame untouched",
					fc.f, ifindex, verdict, got)
			}
		}
	}
}

// impairModel is the program's decisions for RoCEv2 frames from one port on one
// CPU: faultModel's drop and corruption, then the duplicate draw.
type impairModel struct {
	m   *faultModel
	dup uint64
}

func newImpairModel(f ImpairFaults, port, cpu int) *impairModel {
	return &impairModel{
		m:   newFaultModel(Faults{Drop: f.Drop, Corrupt: f.Corrupt, Seed: impairSeed(f.Seed, port)}, cpu),
		dup: threshold(f.Duplicate),
	}
}

// frame returns the outcome of a RoCEv2 frame whose UDP header is at uoff,
// ulen bytes long, and how many copies leave the wire; frags says the program
// sees it in fragments.
func (im *impairModel) frame(uoff, ulen int, frags bool) (outcome, int) {
	o := im.m.frame(uoff, ulen)
	if o.verdict == xdpDrop {
		return o, 0
	}
	o.verdict = xdpRedirect
	if im.dup != 0 && im.m.next()>>32 < im.dup && !frags {
		return o, 2
	}
	return o, 1
}

// On one CPU the faults follow the seed exactly, per port (port B draws from
// Seed+2^32), as the model predicts; BPF_PROG_TEST_RUN's Repeat counts as the
// model does.
func TestImpairSeeded(t *testing.T) {
	w := newQuietWire(t)
	im := attachImpair(t, w, ImpairOptions{})
	frames := [][]byte{
		eth(etherIPv4, ipv4(protoUDP, roce(1024+12+4))),
		eth(etherIPv6, ipv6(protoUDP, roce(4150-62))),
		eth(etherIPv4, ipv4(protoUDP, roce(12+4+4))),
	}
	const n = 300
	f := ImpairFaults{Drop: 0.15, Corrupt: 0.2, Duplicate: 0.25, Seed: 0xfeed}
	onOneCPU(t, func(cpu int) {
		if err := im.SetFaults(f); err != nil {
			t.Fatal(err)
		}
		for portIdx, port := range []*testenv.Endpoint{&w.MidA, &w.MidB} {
			m := newImpairModel(f, portIdx, cpu)
			var drops, corrupts, dups int
			for i := range n {
				fr := frames[i%len(frames)]
				uoff, ulen, _ := udpLoc(fr)
				want, copies := m.frame(uoff, ulen, len(fr) > testRunLinear)
				// On this pinned thread: the kernel looks the ifindex up in the
				// caller's namespace, and in() would run on another thread.
				verdict, got, out := runImpairHere(t, im, w.Mid, port.Index, fr)
				o := outcome{verdict: verdict, off: -1}
				if verdict != xdpDrop {
					if off, bit, ok := flipped(t, name("frame %d", i), fr, out[:len(fr)]); ok {
						o.off, o.bit = off, bit
					}
				}
				gotCopies := 0
				pc := got.FromA
				if portIdx == 1 {
					pc = got.FromB
				}
				if pc.Forwarded == 1 {
					gotCopies = 1 + int(pc.Duplicated)
				}
				if o != want || gotCopies != copies {
					t.Fatalf("seed %#x, CPU %d, port %d, frame %d: got %+v x%d, want %+v x%d",
						f.Seed, cpu, portIdx, i, o, gotCopies, want, copies)
				}
				switch {
				case copies == 0:
					drops++
				case copies == 2:
					dups++
				}
				if o.off >= 0 {
					corrupts++
				}
			}
			t.Logf("port %d, seed %#x on CPU %d: %d of %d dropped, %d corrupted, %d duplicated", portIdx, f.Seed, cpu,
				drops, n, corrupts, dups)
			if drops == 0 || corrupts == 0 || dups == 0 {
				t.Errorf("port %d: want some of each fault", portIdx)
			}
		}

		// Repeat: the kernel runs the frame 1000 times.
		const repeat = 1000
		if err := im.SetFaults(f); err != nil {
			t.Fatal(err)
		}
		before := impairCounters(t, im)
		fr := frames[0]
		withNS(t, w.Mid, func() {
			ctx := &xdpMD{DataEnd: uint32(len(fr)), IngressIfindex: uint32(w.MidA.Index)}
			if _, err := im.Program().Run(&ebpf.RunOptions{Data: bytes.Clone(fr), Context: ctx, Repeat: repeat}); err != nil {
				t.Error(err)
			}
		})
		m := newImpairModel(f, 0, cpu)
		uoff, ulen, _ := udpLoc(fr)
		var want ImpairPortCounters
		for range repeat {
			want.Seen++
			want.RoCE++
			o, copies := m.frame(uoff, ulen, len(fr) > testRunLinear)
			switch copies {
			case 0:
				want.Dropped++
				continue
			case 2:
				want.Duplicated++
			}
			want.Forwarded++
			if o.off >= 0 {
				want.Corrupted++
			}
		}
		if got := impairDelta(impairCounters(t, im), before); got != (ImpairCounters{FromA: want}) {
			t.Errorf("repeat %d: got counter deltas %+v, want %+v", repeat, got, want)
		}
	})
}

// withNS runs fn with the calling thread, which the caller has locked, inside
// ns, and moves it back afterwards. Unlike NS.Do it keeps the thread, so a CPU
// pinning stays in effect.
func withNS(t *testing.T, ns *testenv.NS, fn func()) {
	t.Helper()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("setns %s: %v", ns.Name, err)
	}
	defer func() {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread is locked and onOneCPU keeps it locked on failure, so it
			// never returns to the scheduler in the wrong namespace.
			panic(fmt.Sprintf("restore namespace: %v", err))
		}
	}()
	fn()
}

// runImpairHere is runImpair on the calling (locked, pinned) thread.
func runImpairHere(t *testing.T, im *Impair, ns *testenv.NS, ifindex int, frame []byte) (uint32, ImpairCounters, []byte) {
	t.Helper()
	before := impairCounters(t, im)
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: bytes.Clone(frame), DataOut: out,
		Context: &xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)}}
	var verdict uint32
	var err error
	withNS(t, ns, func() { verdict, err = im.Program().Run(opts) })
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN on %d bytes: %v", len(frame), err)
	}
	return verdict, impairDelta(impairCounters(t, im), before), opts.DataOut
}

// capture is an AF_PACKET socket on one end of a wire that records the frames
// arriving there.
type capture struct {
	fd int
}

func newCapture(t *testing.T, e *testenv.Endpoint) *capture {
	t.Helper()
	proto := int(htons(unix.ETH_P_ALL))
	var fd int
	in(t, e.NS, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		return err
	})
	c := &capture{fd: fd}
	t.Cleanup(func() { unix.Close(c.fd) })
	// Room for every frame of a run: the test reads them after sending.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
		t.Fatalf("SO_RCVBUFFORCE: %v", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: e.Index}); err != nil {
		t.Fatalf("bind AF_PACKET to %s: %v", e.Name, err)
	}
	// The receive path moves a VLAN tag out of the frame into the skb; the
	// auxiliary data gives it back (read).
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		t.Fatalf("PACKET_AUXDATA: %v", err)
	}
	tv := unix.NsecToTimeval((20 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// withVLAN puts back into f the VLAN tag that the auxiliary data in oob says
// the receive path took out.
func withVLAN(t *testing.T, f, oob []byte) []byte {
	t.Helper()
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		t.Fatalf("capture: control message: %v", err)
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA ||
			len(m.Data) < int(unsafe.Sizeof(unix.TpacketAuxdata{})) {
			continue
		}
		aux := (*unix.TpacketAuxdata)(unsafe.Pointer(&m.Data[0]))
		if aux.Status&unix.TP_STATUS_VLAN_VALID == 0 || len(f) < 12 {
			continue
		}
		tpid := uint16(ether8021Q)
		if aux.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
			tpid = aux.Vlan_tpid
		}
		tag := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, tpid), aux.Vlan_tci)
		f = append(f[:12], append(tag, f[12:]...)...)
	}
	return f
}

// read returns the incoming frames keep accepts, as they were on the wire (VLAN
// tag included), waiting until want of them arrived and then a little more for
// strays, or until timeout.
func (c *capture) read(t *testing.T, keep func([]byte) bool, want int, timeout time.Duration) [][]byte {
	t.Helper()
	var got [][]byte
	buf := make([]byte, 1<<16)
	oob := make([]byte, unix.CmsgSpace(int(unsafe.Sizeof(unix.TpacketAuxdata{}))))
	deadline := time.Now().Add(timeout)
	var quietUntil time.Time
	for {
		now := time.Now()
		if len(got) >= want && quietUntil.IsZero() {
			quietUntil = now.Add(100 * time.Millisecond)
		}
		if now.After(deadline) || (!quietUntil.IsZero() && now.After(quietUntil)) {
			break
		}
		n, oobn, _, from, err := unix.Recvmsg(c.fd, buf, oob, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f := withVLAN(t, bytes.Clone(buf[:n]), oob[:oobn])
		if keep(f) {
			got = append(got, f)
		}
	}
	st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		t.Fatal(err)
	}
	if st.Drops != 0 {
		t.Fatalf("capture socket dropped %d frames", st.Drops)
	}
	return got
}

// roceFrames builds n RC SEND Only frames from src to dst, PSN first+i,
// alternating IPv4 and IPv6, payloads of 0 to 4096 bytes (every 16th fills
// MTU 4096: multi-buffer in the middle).
func roceFrames(t *testing.T, src, dst *testenv.Endpoint, first uint32, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for i := range n {
		size := (i * 37) % 1100
		if i%16 == 15 {
			size = 4096
		}
		payload := make([]byte, size)
		for k := range payload {
			payload[k] = byte(i + k)
		}
		f, err := testenv.RoCESendOnly(src, dst, i%2 == 1, first+uint32(i), payload)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// psnOf returns a RoCEv2 frame's PSN, ok false when it is not RoCEv2 to 4791.
func psnOf(f []byte) (uint32, bool) {
	uoff, ulen, ok := udpLoc(f)
	if !ok || ulen < 8+bthLen || len(f) < uoff+8+bthLen || binary.BigEndian.Uint16(f[uoff+2:]) != roceV2Port {
		return 0, false
	}
	return binary.BigEndian.Uint32(f[uoff+8+8:]) & 0xffffff, true
}

// sendPinned sends frames out of end e from a thread pinned to one CPU, where
// the veths then run the wire's program for every frame (PLATFORM pitfall 11),
// and returns that CPU.
func sendPinned(t *testing.T, e *testenv.Endpoint, frames [][]byte) (cpu int) {
	t.Helper()
	var fd int
	in(t, e.NS, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	})
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: e.Index}
	onOneCPU(t, func(c int) {
		cpu = c
		for i, f := range frames {
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				t.Fatalf("send frame %d (%d bytes): %v", i, len(f), err)
			}
		}
	})
	return cpu
}

// fromPort returns the counters of frames that entered at port (0: A, 1: B)
// and of those that entered at the other one.
func fromPort(c ImpairCounters, port int) (this, other ImpairPortCounters) {
	if port == 1 {
		return c.FromB, c.FromA
	}
	return c.FromA, c.FromB
}

// waitImpair polls until port has seen roce more RoCEv2 frames than in before,
// and returns the counters' growth.
func waitImpair(t *testing.T, im *Impair, before ImpairCounters, port int, roce uint64) ImpairCounters {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := impairDelta(impairCounters(t, im), before)
		if pc, _ := fromPort(d, port); pc.RoCE >= roce || time.Now().After(deadline) {
			return d
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// binomialOK reports whether k successes in n trials at rate p are within six
// standard deviations of the mean (a false failure about once in 10^9 runs).
func binomialOK(k, n int, p float64) bool {
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	return math.Abs(float64(k)-mean) <= 6*sd+1
}

// RoCEv2 frames sent through a live wire and captured at the far end: with the
// sender pinned to one CPU, every frame's fate (dropped, corrupted at which bit,
// sent once or twice) is the model's, the rates are within binomial bounds, and
// the far end sees exactly Forwarded + Duplicated frames. Corrupted frames fail
// the ICRC check, the others pass it.
func TestImpairLive(t *testing.T) {
	w := newWire(t)
	im := attachImpair(t, w, ImpairOptions{})
	const n = 2000
	psn := uint32(0)
	for _, c := range []struct {
		name   string
		f      ImpairFaults
		fromB  bool
		copies int // every frame's copies at the far end; -1: various
	}{
		{"none", ImpairFaults{}, false, 1},
		{"duplicate=1", ImpairFaults{Duplicate: 1}, false, 2},
		{"duplicate=1 from B", ImpairFaults{Duplicate: 1}, true, 2},
		{"duplicate=0.1", ImpairFaults{Duplicate: 0.1, Seed: 0x5eed}, false, -1},
		{"duplicate=0.1 from B", ImpairFaults{Duplicate: 0.1, Seed: 0x5eed}, true, -1},
		{"drop=0.1", ImpairFaults{Drop: 0.1, Seed: 0x5eed}, false, -1},
		{"corrupt=0.1", ImpairFaults{Corrupt: 0.1, Seed: 0x5eed}, false, -1},
		{"all=0.05", ImpairFaults{Drop: 0.05, Corrupt: 0.05, Duplicate: 0.05, Seed: 42}, false, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, dst, port := &w.A, &w.B, 0
			if c.fromB {
				src, dst, port = &w.B, &w.A, 1
			}
			if err := im.SetFaults(c.f); err != nil {
				t.Fatal(err)
			}
			frames := roceFrames(t, src, dst, psn, n)
			byPSN := map[uint32][]byte{}
			for _, f := range frames {
				p, _ := psnOf(f)
				byPSN[p] = f
			}
			psn += n
			capt := newCapture(t, dst)
			before := impairCounters(t, im)
			cpu := sendPinned(t, src, frames)
			pc, other := fromPort(waitImpair(t, im, before, port, n), port)
			// Forwarded counts the ends' own frames too (ND, MLD): not RoCEv2.
			roceOut := int(pc.Forwarded-(pc.Seen-pc.RoCE)) + int(pc.Duplicated)
			got := capt.read(t, func(f []byte) bool {
				p, ok := psnOf(f)
				_, ours := byPSN[p]
				return ok && ours
			}, roceOut, 5*time.Second)
			t.Logf("CPU %d: counters %+v (other way %+v); %d RoCEv2 frames captured", cpu, pc, other, len(got))

			if pc.RoCE != n || pc.Dropped+pc.Forwarded+pc.NoEgress != pc.Seen || pc.NoEgress != 0 {
				t.Errorf("counters %+v: want %d RoCEv2 frames, each forwarded or dropped", pc, n)
			}
			if other.RoCE != 0 || other.Dropped+other.Duplicated+other.Corrupted != 0 {
				t.Errorf("the other direction was impaired: %+v", other)
			}
			// What the model says the far end gets, in order.
			type arrival struct {
				psn uint32
				off int
				bit byte
			}
			var want []arrival
			m := newImpairModel(c.f, port, cpu)
			var drops, corrupts, dups int
			for _, f := range frames {
				p, _ := psnOf(f)
				uoff, ulen, _ := udpLoc(f)
				// Generic mode: the single-buffer program sees every frame linear.
				o, copies := m.frame(uoff, ulen, false)
				if c.copies >= 0 && copies != c.copies {
					t.Fatalf("model: PSN %d gets %d copies, want %d", p, copies, c.copies)
				}
				switch copies {
				case 0:
					drops++
				case 2:
					dups++
				}
				if copies > 0 && o.off >= 0 {
					corrupts++
				}
				for range copies {
					want = append(want, arrival{p, o.off, o.bit})
				}
			}
			if uint64(drops) != pc.Dropped || uint64(dups) != pc.Duplicated || uint64(corrupts) != pc.Corrupted {
				t.Errorf("model: %d dropped, %d duplicated, %d corrupted; counters %+v", drops, dups, corrupts, pc)
			}
			for _, r := range []struct {
				what string
				k    int
				p    float64
			}{{"dropped", drops, c.f.Drop}, {"duplicated", dups, c.f.Duplicate * (1 - c.f.Drop)},
				{"corrupted", corrupts, c.f.Corrupt * (1 - c.f.Drop)}} {
				if !binomialOK(r.k, n, r.p) {
					t.Errorf("%d of %d frames %s at rate %v: outside the binomial bound", r.k, n, r.what, r.p)
				}
			}
			if len(got) != len(want) || len(got) != roceOut {
				t.Fatalf("captured %d RoCEv2 frames, want %d (model), counters say %d forwarded + %d duplicated",
					len(got), len(want), pc.Forwarded-(pc.Seen-pc.RoCE), pc.Duplicated)
			}
			var pkt wire.Packet
			for i, f := range got {
				wa := want[i]
				p, _ := psnOf(f)
				sent := byPSN[p]
				if p != wa.psn {
					t.Fatalf("arrival %d: PSN %d, want %d", i, p, wa.psn)
				}
				off, bit, changed := flipped(t, name("arrival %d (PSN %d)", i, p), sent, f)
				if changed != (wa.off >= 0) || (changed && (off != wa.off || bit != wa.bit)) {
					t.Fatalf("arrival %d (PSN %d): corrupted %v at %d bit %#x, want at %d bit %#x", i, p, changed, off, bit,
						wa.off, wa.bit)
				}
				err := wire.ParseAndVerify(f, &pkt)
				if changed != (err != nil) {
					t.Errorf("arrival %d (PSN %d, corrupted %v): ICRC check says %v", i, p, changed, err)
				}
			}
		})
	}
}

// Non-RoCEv2 frames cross the wire exactly once and untouched, even with every
// fault at rate 1.
func TestImpairLiveOtherTraffic(t *testing.T) {
	w := newWire(t)
	im := attachImpair(t, w, ImpairOptions{})
	if err := im.SetFaults(ImpairFaults{Drop: 1, Corrupt: 1, Duplicate: 1, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for i, c := range frameCases() {
		if c.kind == kindRoCE {
			continue
		}
		f := bytes.Clone(c.frame)
		if len(f) < 60 {
			f = append(f, make([]byte, 60-len(f))...) // as a NIC pads
		}
		copy(f, w.B.MAC)
		copy(f[6:], w.A.MAC)
		f = append(f, byte(i), 0xa5, 0x5a, byte(i)) // tell the cases apart
		frames = append(frames, f)
	}
	sent := map[string]int{}
	for _, f := range frames {
		sent[string(f)]++
	}
	capt := newCapture(t, &w.B)
	before := impairCounters(t, im)
	sendPinned(t, &w.A, frames)
	got := capt.read(t, func(f []byte) bool { return sent[string(f)] > 0 }, len(frames), 5*time.Second)
	d := impairDelta(impairCounters(t, im), before)
	seen := map[string]int{}
	for _, f := range got {
		seen[string(f)]++
	}
	for i, f := range frames {
		if seen[string(f)] != 1 {
			t.Errorf("frame %d (%d bytes): arrived %d times, want once, untouched", i, len(f), seen[string(f)])
		}
	}
	if d.FromA.RoCE != 0 || d.FromA.Dropped+d.FromA.Duplicated+d.FromA.Corrupted != 0 || d.FromA.Forwarded < uint64(len(frames)) {
		t.Errorf("counters %+v: want %d frames forwarded, none RoCEv2 or impaired", d.FromA, len(frames))
	}
}

// Native mode: the wire forwards and duplicates when the ends have a native
// XDP program (veth delivers redirected frames only into a peer with XDP or
// GRO, PLATFORM pitfall 3), and its frames are lost without one. At MTU 4200 it
// needs the multi-buffer program, which sends frames in fragments once.
func TestImpairNative(t *testing.T) {
	w := newWire(t)
	var err error
	in(t, w.Mid, func() error {
		_, err = AttachImpair(w.MidA.Name, w.MidB.Name, ImpairOptions{Mode: AttachNative})
		return nil
	})
	if !errors.Is(err, ErrMTUTooLarge) {
		t.Errorf("native single-buffer at MTU %d: got %v, want ErrMTUTooLarge", mtu4096, err)
	}
	requireDetached(t, &w.MidA)
	im := attachImpair(t, w, ImpairOptions{Mode: AttachNative, MultiBuffer: true})
	if im.Mode() != AttachNative {
		t.Errorf("Mode %v, want native", im.Mode())
	}
	if err := im.SetFaults(ImpairFaults{Duplicate: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 64
	run := func(first uint32) (captured int, c ImpairPortCounters) {
		frames := roceFrames(t, &w.A, &w.B, first, n)
		capt := newCapture(t, &w.B)
		before := impairCounters(t, im)
		sendPinned(t, &w.A, frames)
		d := waitImpair(t, im, before, 0, n)
		got := capt.read(t, func(f []byte) bool { p, ok := psnOf(f); return ok && p >= first && p < first+n }, 2*n, time.Second)
		return len(got), d.FromA
	}
	if got, c := run(0); got != 0 {
		t.Errorf("no XDP on the ends: captured %d frames (counters %+v), want 0: did veth change?", got, c)
	}
	for _, e := range []*testenv.Endpoint{&w.A, &w.B} {
		a, err := attach(t, e, AttachOptions{Mode: AttachNative})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
	}
	// Every 16th frame fills MTU 4096 and comes in fragments.
	big := n / 16
	if got, c := run(1000); got != 2*n-big || c.Duplicated != uint64(n-big) || c.DupRefused != uint64(big) {
		t.Errorf("native ends: captured %d frames, counters %+v; want %d, all duplicated but %d in fragments",
			got, c, 2*n-big, big)
	}
}

// Attaching, failing and closing leave no descriptor behind.
func TestImpairNoFDLeak(t *testing.T) {
	testutil.RequireRoot(t)
	w := newWire(t)
	cycle := func() {
		in(t, w.Mid, func() error {
			im, err := AttachImpair(w.MidA.Name, w.MidB.Name, ImpairOptions{})
			if err != nil {
				return err
			}
			if _, err := AttachImpair(w.MidA.Name, w.MidB.Name, ImpairOptions{}); !errors.Is(err, ErrXDPBusy) {
				return fmt.Errorf("second AttachImpair: got %v, want ErrXDPBusy", err)
			}
			if err := im.Close(); err != nil {
				return err
			}
			if _, err := AttachImpair(w.MidB.Name, "lo", ImpairOptions{Mode: AttachNative, MultiBuffer: true}); err == nil {
				return errors.New("native on lo succeeded")
			}
			return nil
		})
	}
	cycle()
	before := countFDs(t)
	for range 5 {
		cycle()
	}
	if after := countFDs(t); after != before {
		t.Errorf("open file descriptors: %d before, %d after", before, after)
	}
	requireDetached(t, &w.MidA)
	requireDetached(t, &w.MidB)
}
