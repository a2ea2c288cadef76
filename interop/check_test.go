//go:build interop

package interop

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xrnic/xrnic/nic/wire"
)

// frames reads an Ethernet capture.
func frames(t *testing.T, path string) [][]byte {
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
	var out [][]byte
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if ci.CaptureLength != ci.Length {
			t.Fatalf("capture %s: a frame is truncated (%d of %d bytes)", path, ci.CaptureLength, ci.Length)
		}
		out = append(out, data)
	}
	return out
}

// roce returns the RoCEv2 frames of a capture from src, parsed by our codec.
func roce(t *testing.T, all [][]byte, src string) []wire.Packet {
	t.Helper()
	want := netip.MustParseAddr(src)
	var out []wire.Packet
	for i, f := range all {
		var p wire.Packet
		if err := wire.Parse(f, &p); err != nil {
			t.Errorf("frame %d: our codec cannot parse it: %v", i+1, err)
			continue
		}
		if p.IPv4 != nil && p.IPv4.Src() == want {
			out = append(out, p)
		}
	}
	return out
}

var icrcLine = regexp.MustCompile(`ICRC ok=(\d+) bad=(\d+) skipped\(non-RoCE or truncated\)=(\d+)`)

// checkICRC runs the harness's independent checker over the frames xrnic sent
// (tcpdump writes them to their own file) and over the whole capture; every
// frame must verify. It returns how many of xrnic's frames were checked.
func checkICRC(t *testing.T, c *capture, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	ours := filepath.Join(suite.artifacts, name+".xrnic-sent.pcap")
	if out, err := exec.CommandContext(ctx, "tcpdump", "-r", c.path, "-w", ours, "src host "+ipXrnic+" and udp dst port 4791").CombinedOutput(); err != nil {
		t.Fatalf("tcpdump -r: %v: %s", err, out)
	}
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
	for _, r := range m {
		if r[2] != "0" || r[3] != "0" {
			t.Errorf("icrc-check.py: %s", r[0])
		}
	}
	sent := len(roce(t, frames(t, c.path), ipXrnic))
	if okOurs == 0 || okOurs != sent {
		t.Errorf("ICRC verified on %d of the %d frames xrnic sent", okOurs, sent)
	}
	return okOurs
}

// writeModel rebuilds, from the RDMA WRITE packets of one sender in a capture,
// the bytes each address must hold afterwards. Retransmissions carry the same
// PSN and must carry the same data; perftest writes each address from the same
// source bytes every time, so a later message may rewrite an address only with
// the same bytes.
type writeModel struct {
	mem      map[uint64]byte
	psnAddr  map[uint32]uint64 // PSN -> address of its first payload byte
	next     uint64
	nextPSN  uint32
	inMsg    bool
	packets  int
	maxPay   int
	problems []string
}

func newWriteModel() *writeModel {
	return &writeModel{mem: map[uint64]byte{}, psnAddr: map[uint32]uint64{}}
}

func (m *writeModel) add(p *wire.Packet) {
	info := p.Info()
	if info.Mask&wire.MaskWrite == 0 {
		return
	}
	psn := uint32(p.BTH.PSN())
	var addr uint64
	switch a, seen := m.psnAddr[psn]; {
	case seen:
		addr = a
	case info.Mask&wire.MaskRETH != 0:
		addr = p.RETH.VA()
	case m.inMsg && psn == m.nextPSN:
		addr = m.next
	default:
		m.problems = append(m.problems, fmt.Sprintf("PSN %#x: a middle or last packet with no message before it", psn))
		return
	}
	m.psnAddr[psn] = addr
	m.packets++
	m.maxPay = max(m.maxPay, len(p.Payload))
	for i, b := range p.Payload {
		if old, ok := m.mem[addr+uint64(i)]; ok && old != b && len(m.problems) < 10 {
			m.problems = append(m.problems, fmt.Sprintf("PSN %#x: address %#x written as %#02x, earlier as %#02x", psn, addr+uint64(i), b, old))
		}
		m.mem[addr+uint64(i)] = b
	}
	m.next = addr + uint64(len(p.Payload))
	m.nextPSN = (psn + 1) & uint32(wire.PSNMask)
	m.inMsg = info.Mask&wire.MaskLast == 0 // ONLY has the LAST bit too
}

// compare checks every byte the model holds against buf, where address a is
// buf[a-base].
func (m *writeModel) compare(t *testing.T, what string, buf []byte, base uint64) {
	t.Helper()
	for _, p := range m.problems {
		t.Errorf("%s: %s", what, p)
	}
	if len(m.mem) == 0 {
		t.Fatalf("%s: the capture holds no RDMA WRITE data", what)
	}
	bad := 0
	for a, want := range m.mem {
		off := a - base
		if a < base || off >= uint64(len(buf)) {
			t.Fatalf("%s: address %#x lies outside the buffer [%#x, %#x)", what, a, base, base+uint64(len(buf)))
		}
		if buf[off] != want {
			if bad++; bad <= 5 {
				t.Errorf("%s: byte at %#x is %#02x, the wire carried %#02x", what, a, buf[off], want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d bytes differ", what, bad, len(m.mem))
	}
	t.Logf("%s: %d bytes from %d WRITE packets (largest payload %d B) match", what, len(m.mem), m.packets, m.maxPay)
}

// perftest's lines, as both sides print them.
var (
	addrLine = regexp.MustCompile(`(?m)^ (local|remote) address: LID \w+ QPN (\w+) PSN (\w+) RKey (\w+) VAddr (\w+)$`)
	bwHeader = regexp.MustCompile(`(?m)^ #bytes +#iterations +BW peak.*$`)
	bwResult = regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([\d.]+) +([\d.]+)\s+([\d.]+)\s*$`)
	mtuLine  = regexp.MustCompile(`(?m)^ Mtu +: .*$`)
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

func parseBW(t *testing.T, who, out string) bwLine {
	t.Helper()
	m := bwResult.FindStringSubmatch(out)
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
