package bpf

// Fault injection: SetFaults's checks, the verdicts and frame changes of each
// fault through BPF_PROG_TEST_RUN, the per-CPU seeded sequence against a model
// of the program's PRNG, and the faults on a live veth.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/testenv"
)

const xdpDrop = 1

// bthLen is BTH_LEN of xrnic.c: corruption starts after it.
const bthLen = 12

func TestSetFaultsRates(t *testing.T) {
	p := loadProgram(t)
	for _, f := range []Faults{
		{Drop: -0.01}, {Drop: 1.01}, {Corrupt: -1}, {Corrupt: 2},
		{Drop: math.NaN()}, {Corrupt: math.NaN()}, {Drop: math.Inf(1)},
	} {
		if err := p.SetFaults(f); !errors.Is(err, ErrFaultRate) {
			t.Errorf("SetFaults(%+v): got %v, want ErrFaultRate", f, err)
		}
	}
	for _, f := range []Faults{{}, {Drop: 1, Corrupt: 1, Seed: 1}, {Drop: 0.001, Corrupt: 1e-9, Seed: math.MaxUint64}} {
		if err := p.SetFaults(f); err != nil {
			t.Errorf("SetFaults(%+v): %v", f, err)
		}
	}
	if got, want := threshold(1), uint64(1)<<32; got != want {
		t.Errorf("threshold(1): got %#x, want %#x", got, want)
	}
	if got := threshold(1e-12); got != 0 {
		t.Errorf("threshold(1e-12): got %d, want 0", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.SetFaults(Faults{}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetFaults after Close: got %v, want ErrClosed", err)
	}
}

// runOut runs prog once on a copy of frame (ifindex 0, queue 0) and returns the
// verdict, the counter deltas and the frame as the program left it.
func runOut(t *testing.T, p *Program, prog *ebpf.Program, frame []byte) (uint32, Counters, []byte) {
	t.Helper()
	before, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: bytes.Clone(frame), DataOut: out, Context: &xdpMD{DataEnd: uint32(len(frame))}}
	verdict, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN on %d bytes: %v", len(frame), err)
	}
	after, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return verdict, delta(after, before), opts.DataOut
}

// udpLoc finds the UDP header of a test frame as the program does: offset and
// UDP length, ok false when the frame is not IPv4 or IPv6 UDP behind at most one
// tag.
func udpLoc(f []byte) (off, ulen int, ok bool) {
	off = 14
	proto := binary.BigEndian.Uint16(f[12:])
	if proto == ether8021Q || proto == ether8021AD {
		if len(f) < 18 {
			return 0, 0, false
		}
		proto = binary.BigEndian.Uint16(f[16:])
		off = 18
	}
	switch proto {
	case etherIPv4:
		off += 20
	case etherIPv6:
		off += 40
	default:
		return 0, 0, false
	}
	if len(f) < off+8 {
		return 0, 0, false
	}
	return off, int(binary.BigEndian.Uint16(f[off+4:])), true
}

// flipped checks that out differs from in by one bit in one byte and returns
// that byte's offset and the flipped bit; ok is false when they are equal.
func flipped(t *testing.T, what string, in, out []byte) (off int, bit byte, ok bool) {
	t.Helper()
	if len(in) != len(out) {
		t.Fatalf("%s: frame length changed from %d to %d", what, len(in), len(out))
	}
	off = -1
	for i := range in {
		if in[i] == out[i] {
			continue
		}
		if off >= 0 {
			t.Fatalf("%s: bytes %d and %d both changed", what, off, i)
		}
		off, bit = i, in[i]^out[i]
	}
	if off < 0 {
		return 0, 0, false
	}
	if bit&(bit-1) != 0 {
		t.Fatalf("%s: byte %d changed by %#02x, want one bit", what, off, bit)
	}
	return off, bit, true
}

// checkCorruption checks that out is in with one bit flipped in [lo, hi) when
// corrupt, and is in unchanged otherwise.
func checkCorruption(t *testing.T, what string, in, out []byte, corrupt bool, lo, hi int) {
	t.Helper()
	off, _, changed := flipped(t, what, in, out)
	switch {
	case changed != corrupt:
		t.Errorf("%s: frame changed %v, want %v", what, changed, corrupt)
	case changed && (off < lo || off >= hi):
		t.Errorf("%s: byte %d corrupted, want one in [%d, %d)", what, off, lo, hi)
	}
}

// Each fault setting on every frame case, with and without a socket, through
// both entry points: only RoCEv2 frames are hit; a dropped frame gets XDP_DROP,
// a corrupted one is steered as usual with one bit flipped after its BTH.
func TestFaultsFrames(t *testing.T) {
	p := loadProgram(t)
	v := newVeth(t, testenv.PairOptions{})
	x := newTestXSK(t, &v.A, 0)
	for _, fc := range []struct {
		name           string
		f              Faults
		drop, corrupts bool
	}{
		{"rate 0", Faults{Seed: 7}, false, false},
		{"drop 1", Faults{Drop: 1, Seed: 7}, true, false},
		{"corrupt 1", Faults{Corrupt: 1, Seed: 7}, false, true},
		{"drop 1 corrupt 1", Faults{Drop: 1, Corrupt: 1, Seed: 7}, true, false},
	} {
		if err := p.SetFaults(fc.f); err != nil {
			t.Fatal(err)
		}
		for _, socket := range []bool{true, false} {
			var err error
			if socket {
				err = p.RegisterSocket(0, x.fd)
			} else {
				err = p.UnregisterSocket(0)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range frameCases() {
				for _, e := range []struct {
					name string
					prog *ebpf.Program
				}{{"frags", p.XDP()}, {"single", p.XDPSingleBuffer()}} {
					what := name("%s, socket %v: %s (%d bytes, %s)", fc.name, socket, c.name, len(c.frame), e.name)
					verdict, got, out := runOut(t, p, e.prog, c.frame)
					wantVerdict, wantCounters := want(c.kind, socket)
					uoff, ulen, _ := udpLoc(c.frame)
					corrupt := false
					if c.kind == kindRoCE {
						switch {
						case fc.drop:
							wantVerdict, wantCounters = xdpDrop, Counters{Seen: 1, DroppedInjected: 1}
						case fc.corrupts && ulen > 8+bthLen:
							corrupt = true
							wantCounters.CorruptedInjected = 1
						}
					}
					if verdict != wantVerdict {
						t.Errorf("%s: got verdict %d, want %d", what, verdict, wantVerdict)
					}
					if got != wantCounters {
						t.Errorf("%s: got counter deltas %+v, want %+v", what, got, wantCounters)
					}
					if verdict == xdpDrop {
						continue
					}
					checkCorruption(t, what, c.frame, out[:len(c.frame)], corrupt, uoff+8+bthLen, uoff+ulen)
				}
			}
		}
	}
}

func name(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// faultModel is the program's PRNG and fault decision (xrnic.c next_rand and
// inject) in Go, for one CPU.
type faultModel struct {
	f          Faults
	drop, corr uint64
	x          uint64
}

func newFaultModel(f Faults, cpu int) *faultModel {
	m := &faultModel{f: f, drop: threshold(f.Drop), corr: threshold(f.Corrupt)}
	z := f.Seed + uint64(cpu) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	m.x = z ^ (z >> 31)
	if m.x == 0 {
		m.x = 0x9e3779b97f4a7c15
	}
	return m
}

func (m *faultModel) next() uint64 {
	m.x ^= m.x << 13
	m.x ^= m.x >> 7
	m.x ^= m.x << 17
	return m.x
}

// outcome is what happened to one frame.
type outcome struct {
	verdict uint32
	off     int // corrupted byte, -1 none
	bit     byte
}

// frame decides the fault of a RoCEv2 frame whose UDP header is at uoff, ulen
// bytes long, that the program then passes.
func (m *faultModel) frame(uoff, ulen int) outcome {
	o := outcome{verdict: xdpPass, off: -1}
	if m.drop == 0 && m.corr == 0 {
		return o
	}
	r1 := m.next()
	if r1>>32 < m.drop {
		return outcome{verdict: xdpDrop, off: -1}
	}
	if m.corr == 0 {
		return o
	}
	r2 := m.next()
	if r2>>32 >= m.corr || ulen <= 8+bthLen {
		return o
	}
	span := uint32(ulen - 8 - bthLen)
	o.off = uoff + 8 + bthLen + int(uint32(r2)%span)
	o.bit = 1 << (r1 & 7)
	return o
}

// onOneCPU runs fn on a thread pinned to one CPU the process may use, and passes
// that CPU's id: the program's per-CPU PRNG then serves every run.
func onOneCPU(t *testing.T, fn func(cpu int)) {
	t.Helper()
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("sched_getaffinity: %v", err)
	}
	cpu := 0
	for !old.IsSet(cpu) {
		cpu++
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("sched_setaffinity: %v", err)
	}
	defer func() {
		// A thread left pinned must not go back to the scheduler's pool: stay
		// locked, and Go ends the thread with the goroutine.
		if err := unix.SchedSetaffinity(0, &old); err == nil {
			runtime.UnlockOSThread()
		}
	}()
	fn(cpu)
}

// On one CPU, the faults follow the seed exactly: the model predicts every
// frame, SetFaults with the same seed replays the sequence, another seed gives
// another one, and a BPF_PROG_TEST_RUN repeat counts as the model does.
func TestFaultsSeeded(t *testing.T) {
	p := loadProgram(t)
	frames := [][]byte{
		eth(etherIPv4, ipv4(protoUDP, roce(1024+12+4))),
		eth(etherIPv6, ipv6(protoUDP, roce(4150-62))), // multi-buffer: bytes in fragments too
		eth(etherIPv4, ipv4(protoUDP, roce(12+4+4))),  // an ACK: AETH and ICRC
	}
	const n = 300
	f := Faults{Drop: 0.2, Corrupt: 0.3, Seed: 0xfeed}
	onOneCPU(t, func(cpu int) {
		run := func(f Faults) []outcome {
			t.Helper()
			if err := p.SetFaults(f); err != nil {
				t.Fatal(err)
			}
			var got []outcome
			for i := range n {
				fr := frames[i%len(frames)]
				verdict, _, out := runOut(t, p, p.XDP(), fr)
				o := outcome{verdict: verdict, off: -1}
				if verdict != xdpDrop {
					if off, bit, ok := flipped(t, name("frame %d", i), fr, out[:len(fr)]); ok {
						o.off, o.bit = off, bit
					}
				}
				got = append(got, o)
			}
			return got
		}
		model := func(f Faults) []outcome {
			m := newFaultModel(f, cpu)
			var want []outcome
			for i := range n {
				uoff, ulen, _ := udpLoc(frames[i%len(frames)])
				want = append(want, m.frame(uoff, ulen))
			}
			return want
		}
		got := run(f)
		want := model(f)
		drops, corrupts := 0, 0
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("seed %#x, CPU %d, frame %d: got %+v, want %+v", f.Seed, cpu, i, got[i], want[i])
			}
			switch {
			case got[i].verdict == xdpDrop:
				drops++
			case got[i].off >= 0:
				corrupts++
			}
		}
		t.Logf("seed %#x on CPU %d: %d of %d dropped, %d corrupted", f.Seed, cpu, drops, n, corrupts)
		if drops == 0 || corrupts == 0 {
			t.Errorf("got %d drops and %d corruptions in %d frames, want some of each", drops, corrupts, n)
		}
		if again := run(f); !equalOutcomes(again, got) {
			t.Errorf("SetFaults with the same seed again: the sequence differs")
		}
		g := f
		g.Seed++
		if other := run(g); equalOutcomes(other, got) {
			t.Errorf("seed %#x and %#x gave the same sequence", f.Seed, g.Seed)
		} else if want := model(g); !equalOutcomes(other, want) {
			t.Errorf("seed %#x: the sequence differs from the model", g.Seed)
		}

		// Repeat: the kernel runs the frame 1000 times (modifying it in place).
		const repeat = 1000
		if err := p.SetFaults(f); err != nil {
			t.Fatal(err)
		}
		before, err := p.Counters()
		if err != nil {
			t.Fatal(err)
		}
		fr := frames[0]
		if _, err := p.XDP().Run(&ebpf.RunOptions{Data: bytes.Clone(fr), Repeat: repeat}); err != nil {
			t.Fatal(err)
		}
		after, err := p.Counters()
		if err != nil {
			t.Fatal(err)
		}
		m := newFaultModel(f, cpu)
		uoff, ulen, _ := udpLoc(fr)
		var wantC Counters
		for range repeat {
			wantC.Seen++
			switch o := m.frame(uoff, ulen); {
			case o.verdict == xdpDrop:
				wantC.DroppedInjected++
			case o.off >= 0:
				wantC.CorruptedInjected++
				wantC.Passed++
				wantC.Unsteered++ // no socket
			default:
				wantC.Passed++
				wantC.Unsteered++
			}
		}
		if gotC := delta(after, before); gotC != wantC {
			t.Errorf("repeat %d: got counter deltas %+v, want %+v", repeat, gotC, wantC)
		}
	})
}

func equalOutcomes(a, b []outcome) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The faults on a live veth through Attachment.SetFaults: dropped frames never
// reach the socket, corrupted ones do, other traffic is untouched.
func TestFaultsLive(t *testing.T) {
	p := newVeth(t, testenv.PairOptions{MTU: mtu4096})
	att, err := attach(t, &p.A, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { att.Close() })
	x := newTestXSK(t, &p.A, 0)
	if err := att.RegisterSocket(0, x.fd); err != nil {
		t.Fatal(err)
	}
	frames := [][]byte{
		eth(etherIPv4, ipv4(protoUDP, roce(64))),
		eth(etherIPv6, ipv6(protoUDP, roce(4150-62))),
		eth(etherIPv4, ipv4(protoUDP, udp(40000, 53, make([]byte, 32)))),
	}
	var total Counters
	for _, c := range []struct {
		f    Faults
		want Counters
	}{
		{Faults{Drop: 1, Seed: 3}, Counters{Seen: 3, DroppedInjected: 2, Passed: 1}},
		{Faults{Corrupt: 1, Seed: 3}, Counters{Seen: 3, Redirected: 2, CorruptedInjected: 2, Passed: 1}},
		{Faults{}, Counters{Seen: 3, Redirected: 2, Passed: 1}},
	} {
		if err := att.SetFaults(c.f); err != nil {
			t.Fatal(err)
		}
		sendRaw(t, &p.B, p.A.MAC, frames)
		got := waitCounters(t, att, total.Seen+3)
		if d := delta(got, total); d != c.want {
			t.Errorf("%+v: got counter deltas %+v, want %+v", c.f, d, c.want)
		}
		total = got
	}
	if n := x.received(t); n != 4 {
		t.Errorf("socket got %d frames, want 4 (the dropped ones never arrive)", n)
	}
}
