//go:build interop

package interop

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xrnic/xrnic/nic/wire"
)

// frame is one captured frame and when it was captured.
type frame struct {
	data []byte
	ts   time.Time
}

// frames reads an Ethernet capture.
func frames(t *testing.T, path string) []frame {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("capture %s: %v", path, err)
	}
	var out []frame
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if ci.CaptureLength != ci.Length {
			t.Fatalf("capture %s: a frame is truncated (%d of %d bytes)", path, ci.CaptureLength, ci.Length)
		}
		out = append(out, frame{data, ci.Timestamp})
	}
	return out
}

// rocePacket is a RoCEv2 frame of a capture, parsed by our codec.
type rocePacket struct {
	wire.Packet
	ts time.Time
}

// roce returns the RoCEv2 frames of a capture from src.
func roce(t *testing.T, all []frame, src string) []rocePacket {
	t.Helper()
	want := netip.MustParseAddr(src)
	var out []rocePacket
	for i, f := range all {
		if !isRoCEv2(f.data) {
			continue // the capture's barrier pings
		}
		var p wire.Packet
		if err := wire.Parse(f.data, &p); err != nil {
			t.Errorf("frame %d: our codec cannot parse it: %v", i+1, err)
			continue
		}
		if p.IPv4 != nil && p.IPv4.Src() == want {
			out = append(out, rocePacket{p, f.ts})
		}
	}
	return out
}

// isRoCEv2 tells an untagged IPv4 UDP frame to port 4791, the only kind the
// captures hold besides ICMP.
func isRoCEv2(f []byte) bool {
	if len(f) < 14+20+8 || f[12] != 0x08 || f[13] != 0x00 || f[14+9] != 17 {
		return false
	}
	udp := 14 + int(f[14]&0x0F)*4
	return len(f) >= udp+8 && int(f[udp+2])<<8|int(f[udp+3]) == 4791
}

var icrcLine = regexp.MustCompile(`ICRC ok=(\d+) bad=(\d+) skipped\(non-RoCE or truncated\)=(\d+)`)

// checkICRC runs the harness's independent checker over the frames xrnic sent
// (tcpdump writes them to their own file) and over the whole capture; every
// frame must verify; all is the capture, read. It returns how many of xrnic's
// frames were checked.
func checkICRC(t *testing.T, c *capture, name string, all []frame) int {
	t.Helper()
	return checkICRCs(t, c, name, all, true)
}

// checkICRCs is checkICRC for a run where xrnic may send nothing (xrnicSends
// false: a multicast group's receiver), every frame of the capture checked.
func checkICRCs(t *testing.T, c *capture, name string, all []frame, xrnicSends bool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	ours := filepath.Join(suite.artifacts, name+".xrnic-sent.pcap")
	if out, err := exec.CommandContext(ctx, "tcpdump", "-r", c.path, "-w", ours, "src host "+ipXrnic+" and udp dst port 4791").CombinedOutput(); err != nil {
		t.Fatalf("tcpdump -r: %v: %s", err, out)
	}
	keepIfFailed(t, ours)
	out, err := exec.CommandContext(ctx, "python3", suite.icrcCheck, ours, c.path).CombinedOutput()
	save(t, name+".icrc.txt", out)
	if err != nil {
		t.Errorf("icrc-check.py: %v:\n%s", err, out)
	}
	m := icrcLine.FindAllStringSubmatch(string(out), -1)
	if len(m) != 2 {
		t.Fatalf("icrc-check.py printed no totals:\n%s", out)
	}
	okOurs, _ := strconv.Atoi(m[0][1])
	// Every frame checks; only the whole capture may skip (its barrier pings).
	for i, r := range m {
		if r[2] != "0" || (i == 0 && r[3] != "0") {
			t.Errorf("icrc-check.py: %s", r[0])
		}
	}
	sent := len(roce(t, all, ipXrnic))
	if okOurs == 0 && xrnicSends || okOurs != sent {
		t.Errorf("ICRC verified on %d of the %d frames xrnic sent", okOurs, sent)
	}
	return okOurs
}

// writeModel rebuilds, from the RDMA WRITE packets of one sender in a capture,
// the bytes each address must hold afterwards, accepting packets as a responder
// does (IBTA 9.7.5.1): the expected PSN executes, an earlier PSN is a duplicate
// that must carry the same bytes as before, a later PSN is out of sequence and
// dropped. perftest writes each address from the same source bytes every time,
// so a later message may rewrite an address only with the same bytes.
type writeModel struct {
	mem      map[uint64]byte
	psnAddr  map[wire.PSN]uint64 // PSN -> address of its first payload byte
	ePSN     wire.PSN            // the next PSN a responder executes
	started  bool
	next     uint64 // where the next packet of the message goes
	packets  int
	dropped  int // out of sequence
	maxPay   int
	problems []string
}

// newWriteModel returns a model of pkts' sender, whose responder expects first
// the lowest PSN among pkts: the first packet sent may be the one lost before the
// capture point, and the capture then starts with later packets, the retransmission
// coming afterwards.
func newWriteModel(pkts []*wire.Packet) *writeModel {
	m := &writeModel{mem: map[uint64]byte{}, psnAddr: map[wire.PSN]uint64{}}
	for _, p := range pkts {
		if p.Info().Mask&wire.MaskWrite == 0 {
			continue
		}
		if psn := p.BTH.PSN(); !m.started || psn.Sub(m.ePSN) < 0 {
			m.ePSN, m.started = psn, true
		}
	}
	return m
}

func (m *writeModel) add(p *wire.Packet) {
	info := p.Info()
	if info.Mask&wire.MaskWrite == 0 {
		return
	}
	psn := p.BTH.PSN()
	if !m.started {
		m.ePSN, m.started = psn, true
	}
	var addr uint64
	d := psn.Sub(m.ePSN)
	switch {
	case d > 0:
		m.dropped++
		return
	case d < 0:
		a, ok := m.psnAddr[psn]
		if !ok {
			m.problems = append(m.problems, fmt.Sprintf("PSN %#x: a duplicate of a packet not in the capture", uint32(psn)))
			return
		}
		addr = a
	case info.Mask&wire.MaskRETH != 0:
		addr = p.RETH.VA()
	default:
		addr = m.next
	}
	if d == 0 {
		m.psnAddr[psn] = addr
		m.next = addr + uint64(len(p.Payload))
		m.ePSN = psn.Next()
	}
	m.packets++
	m.maxPay = max(m.maxPay, len(p.Payload))
	for i, b := range p.Payload {
		if old, ok := m.mem[addr+uint64(i)]; ok && old != b && len(m.problems) < 10 {
			m.problems = append(m.problems, fmt.Sprintf("PSN %#x: address %#x written as %#02x, earlier as %#02x", uint32(psn), addr+uint64(i), b, old))
		}
		m.mem[addr+uint64(i)] = b
	}
}

// compare checks every byte the model holds against buf, where address a is
// buf[a-base].
func (m *writeModel) compare(t *testing.T, what string, buf []byte, base uint64) {
	t.Helper()
	problems, err := m.check(buf, base)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", what, p)
	}
	if len(problems) == 0 {
		t.Logf("%s: %d bytes from %d WRITE packets (largest payload %d B) match", what, len(m.mem), m.packets, m.maxPay)
	}
}

// check returns the model's own problems and the bytes of buf that differ.
func (m *writeModel) check(buf []byte, base uint64) ([]string, error) {
	if len(m.mem) == 0 {
		return nil, errors.New("the capture holds no RDMA WRITE data")
	}
	problems := slices.Clone(m.problems)
	bad := 0
	for a, want := range m.mem {
		off := a - base
		if a < base || off >= uint64(len(buf)) {
			return nil, fmt.Errorf("address %#x lies outside the buffer [%#x, %#x)", a, base, base+uint64(len(buf)))
		}
		if buf[off] != want {
			if bad++; bad <= 5 {
				problems = append(problems, fmt.Sprintf("byte at %#x is %#02x, the wire carried %#02x", a, buf[off], want))
			}
		}
	}
	if bad > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d bytes differ", bad, len(m.mem)))
	}
	return problems, nil
}

// perftest's lines, as both sides print them.
var (
	addrLine = regexp.MustCompile(`(?m)^ (local|remote) address: LID \w+ QPN (\w+) PSN (\w+) RKey (\w+) VAddr (\w+)$`)
	bwHeader = regexp.MustCompile(`(?m)^ #bytes +#iterations +BW peak.*$`)
	bwResult = regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([\d.]+) +([\d.]+)\s+([\d.]+)\s*$`)
	// Any result line of a latency table, its seven times whatever they are.
	latLine = regexp.MustCompile(`(?m)^ \d+ +\d+((?:[ \t]+\S+){7})[ \t]*$`)
	mtuLine = regexp.MustCompile(`(?m)^ Mtu +: .*$`)
)

// vaddr returns the VAddr of perftest's local or remote address line.
func vaddr(t *testing.T, out, side string) uint64 {
	t.Helper()
	for _, m := range addrLine.FindAllStringSubmatch(out, -1) {
		if m[1] == side {
			v, err := strconv.ParseUint(strings.TrimPrefix(m[5], "0x"), 16, 64)
			if err != nil {
				t.Fatalf("VAddr %q: %v", m[5], err)
			}
			return v
		}
	}
	t.Fatalf("no %s address line in:\n%s", side, out)
	return 0
}

// bwLine is one result line of a bandwidth table.
type bwLine struct {
	text           string
	size, iters    uint64
	peak, avg, mpp float64
}

// sane: a positive average no larger than the peak and below 100 Gb/s.
func (l bwLine) sane() bool { return l.avg > 0 && l.avg <= l.peak*1.001 && l.avg < 12500 }

// clockMisread tells a perftest run whose CPU clock calibration failed, as it
// can under emulation or on a loaded host (the harness's README): perftest
// says it cannot produce a report (get_cpu_mhz's fit of cycles against time
// was poor), or prints numbers that cannot be. A peak of 0.00 is perftest's
// "no peak" (noPeak: the receiver of send_bw, -N, -D), not a misread: only the
// average is judged then. A latency test reports on regardless
// (print_report_lat divides by the failed calibration's 0 MHz): its line
// then holds inf and -nan.
func clockMisread(out string) bool {
	if strings.Contains(out, "Can't produce a report") {
		return true
	}
	for _, m := range latLine.FindAllStringSubmatch(out, -1) {
		for _, f := range strings.Fields(m[1]) {
			if v, err := strconv.ParseFloat(f, 64); err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				return true
			}
		}
	}
	m := lastBW(out) // with -a, the largest size (2 bytes may well show 0.00)
	if m == nil {
		return false
	}
	peak, _ := strconv.ParseFloat(m[3], 64)
	avg, _ := strconv.ParseFloat(m[4], 64)
	if peak == 0 {
		peak = avg
	}
	return !(bwLine{peak: peak, avg: avg}).sane()
}

// misread is "clock misread" when a run whose perftests measure misread a
// clock: the guest's, or with the C library the host's too.
func misread(measures bool, outs ...string) string {
	if measures && slices.ContainsFunc(outs, clockMisread) {
		return "clock misread"
	}
	return ""
}

// writeSpan returns the time from the first to the last RDMA WRITE packet of pkts.
func writeSpan(pkts []rocePacket) time.Duration {
	var first, last time.Time
	for _, p := range pkts {
		if p.Info().Mask&wire.MaskWrite == 0 {
			continue
		}
		if first.IsZero() {
			first = p.ts
		}
		last = p.ts
	}
	return last.Sub(first)
}

// lastBW is the last bandwidth result line of out, its fields matched; nil if
// none.
func lastBW(out string) []string {
	all := bwResult.FindAllStringSubmatch(out, -1)
	if all == nil {
		return nil
	}
	return all[len(all)-1]
}

func parseBW(t *testing.T, who, out string) bwLine {
	t.Helper()
	m := lastBW(out) // with -a, the largest size: the one a server prints too
	if m == nil {
		t.Fatalf("%s printed no bandwidth result:\n%s", who, out)
	}
	var l bwLine
	l.text = strings.TrimRight(m[0], " ")
	l.size, _ = strconv.ParseUint(m[1], 10, 64)
	l.iters, _ = strconv.ParseUint(m[2], 10, 64)
	l.peak, _ = strconv.ParseFloat(m[3], 64)
	l.avg, _ = strconv.ParseFloat(m[4], 64)
	l.mpp, _ = strconv.ParseFloat(m[5], 64)
	return l
}
