// Golden vectors: every captured rxe packet parses, verifies and re-encodes.

package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"
	"testing"
)

// CM MAD attribute IDs (IBTA 12.6) that README.md says the captures hold.
const (
	attrCMREQ  = 0x0010
	attrCMREJ  = 0x0012
	attrCMREP  = 0x0013
	attrCMRTU  = 0x0014
	attrCMDREQ = 0x0015
	attrCMDREP = 0x0016
)

// goldenCounts is what each capture holds, by opcode (and, for ACKs, by syndrome
// kind and for QP1 sends by CM attribute). The README.md table gives most numbers;
// the rest were counted with tshark 4.0 and agree with the README's prose.
var goldenCounts = map[string]map[string]int{
	"rc_send":          {"RC_SEND_FIRST": 6, "RC_SEND_MIDDLE": 6, "RC_SEND_LAST": 6, "RC_ACKNOWLEDGE/ACK": 6},
	"rdma_write":       {"RC_RDMA_WRITE_FIRST": 8, "RC_RDMA_WRITE_MIDDLE": 8, "RC_RDMA_WRITE_LAST": 8, "RC_ACKNOWLEDGE/ACK": 8},
	"rdma_read":        {"RC_RDMA_READ_REQUEST": 8, "RC_RDMA_READ_RESPONSE_FIRST": 8, "RC_RDMA_READ_RESPONSE_MIDDLE": 8, "RC_RDMA_READ_RESPONSE_LAST": 8},
	"atomic_fetch_add": {"RC_FETCH_ADD": 8, "RC_ATOMIC_ACKNOWLEDGE/ACK": 8},
	"atomic_cmp_swap":  {"RC_COMPARE_SWAP": 8, "RC_ATOMIC_ACKNOWLEDGE/ACK": 8},
	"uc_send":          {"UC_SEND_FIRST": 6, "UC_SEND_MIDDLE": 6, "UC_SEND_LAST": 6},
	"ud_send":          {"UD_SEND_ONLY": 6},
	"host_peer_cm_req": {"CM REQ": 2, "CM REJ": 1},
	"rdma_cm_rping": {
		"CM REQ": 1, "CM REP": 1, "CM RTU": 1, "CM DREQ": 1, "CM DREP": 1,
		"RC_SEND_ONLY": 8, "RC_RDMA_READ_REQUEST": 2, "RC_RDMA_READ_RESPONSE_ONLY": 2,
		"RC_RDMA_WRITE_ONLY": 2, "RC_ACKNOWLEDGE/ACK": 10,
	},
	"rdma_cm_write_bw": {
		"CM REQ": 2, "CM REP": 2, "CM RTU": 2, "CM DREQ": 2, "CM DREP": 2, "RC_SEND_ONLY": 32,
		"RC_RDMA_WRITE_FIRST": 8, "RC_RDMA_WRITE_MIDDLE": 8, "RC_RDMA_WRITE_LAST": 8, "RC_ACKNOWLEDGE/ACK": 40,
	},
	"rdma_write_loss_retransmit": {
		"RC_RDMA_WRITE_FIRST": 52, "RC_RDMA_WRITE_MIDDLE": 114, "RC_RDMA_WRITE_LAST": 55,
		"RC_ACKNOWLEDGE/ACK": 8, "RC_ACKNOWLEDGE/NAK": 7,
	},
}

func TestGolden(t *testing.T) {
	pcaps := goldenPcaps(t)
	names := make([]string, 0, len(pcaps))
	for n := range pcaps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			frames := readPcap(t, pcaps[name])
			if len(frames) == 0 {
				t.Fatalf("no frames")
			}
			counts := map[string]int{}
			buf := make([]byte, 9000)
			for i, frame := range frames {
				var p Packet
				if err := ParseAndVerify(frame, &p); err != nil {
					t.Errorf("frame %d: %v", i+1, err)
					continue
				}
				if got, want := len(p.Frame), len(frame); got != want {
					t.Errorf("frame %d: parsed %d bytes, want the whole %d-byte frame (no Ethernet padding in these captures)", i+1, got, want)
				}
				var f FrameFields
				p.Fields(&f)
				n, err := f.Encode(buf)
				if err != nil {
					t.Errorf("frame %d: re-encode: %v", i+1, err)
					continue
				}
				if !bytes.Equal(buf[:n], p.Frame) {
					t.Errorf("frame %d (%v): re-encoded frame differs:\n got %x\nwant %x", i+1, p.Opcode, buf[:n], p.Frame)
				}
				counts[countKey(&p)]++
			}
			want, ok := goldenCounts[name]
			if !ok {
				t.Fatalf("no expected counts for %s.pcap: add it to goldenCounts", name)
			}
			if got := fmt.Sprint(counts); got != fmt.Sprint(want) {
				t.Errorf("opcode counts:\n got %v\nwant %v", counts, want)
			}
			checkSports(t, frames)
		})
	}
}

// countKey names a packet for goldenCounts.
func countKey(p *Packet) string {
	switch {
	case p.AETH != nil && p.Info().Mask&MaskReadResponse == 0:
		return p.Opcode.String() + "/" + p.AETH.Syndrome().Kind().String()
	case p.DETH != nil && p.BTH.DestQPN() == 1 && len(p.Payload) >= 24 && p.Payload[1] == 0x07:
		// A CM MAD on QP1: management class 7, attribute ID at byte 16 (IBTA 13.4.2).
		switch binary.BigEndian.Uint16(p.Payload[16:18]) {
		case attrCMREQ:
			return "CM REQ"
		case attrCMREP:
			return "CM REP"
		case attrCMRTU:
			return "CM RTU"
		case attrCMREJ:
			return "CM REJ"
		case attrCMDREQ:
			return "CM DREQ"
		case attrCMDREP:
			return "CM DREP"
		}
		return "CM other"
	}
	return p.Opcode.String()
}

// checkSports checks the UDP source port of every packet against the Linux schemes
// (sport.go): connected QPs hash both QPNs or use the RDMA CM's flow label, UD and
// QP1 hash their own QPN.
func checkSports(t *testing.T, frames [][]byte) {
	t.Helper()
	// The QPNs that live at each IP address, as seen in DestQP of packets sent there.
	qpnsAt := map[netip.Addr]map[uint32]bool{}
	// The flow labels of the CM REQs, checked against CMFlowLabel.
	var cmLabels []uint32
	var p Packet
	for i, f := range frames {
		if err := Parse(f, &p); err != nil {
			t.Fatal(err)
		}
		if qpnsAt[p.IPv4.Dst()] == nil {
			qpnsAt[p.IPv4.Dst()] = map[uint32]bool{}
		}
		qpnsAt[p.IPv4.Dst()][p.BTH.DestQPN()] = true
		if countKey(&p) == "CM REQ" {
			// IBTA 12.6.5 REQ: ServiceID at MAD byte 32 (its low 16 bits are the IP
			// CM destination port, Annex A11), primary flow label in the top 20 bits
			// of the word at byte 112, IP CM private data from byte 164 with the
			// source port at 166.
			mad := p.Payload
			fl := binary.BigEndian.Uint32(mad[112:116]) >> 12
			src, dst := binary.BigEndian.Uint16(mad[166:168]), binary.BigEndian.Uint16(mad[38:40])
			if want := CMFlowLabel(src, dst); fl != want {
				t.Errorf("frame %d: CM REQ flow label %#x, want CMFlowLabel(%d, %d) = %#x", i+1, fl, src, dst, want)
			}
			cmLabels = append(cmLabels, fl)
		}
	}
	for i, f := range frames {
		if err := Parse(f, &p); err != nil {
			t.Fatal(err)
		}
		sport := p.UDP.SrcPort()
		switch p.Opcode.Transport() {
		case TransportUD:
			if want := QPSport(p.DETH.SrcQPN()); sport != want {
				t.Errorf("frame %d: UD source port %d, want QPSport(%#x) = %d", i+1, sport, p.DETH.SrcQPN(), want)
			}
		default:
			ok := false
			if len(cmLabels) > 0 {
				for _, fl := range cmLabels {
					ok = ok || UDPSport(fl, 0, 0) == sport
				}
			} else {
				for local := range qpnsAt[p.IPv4.Src()] {
					ok = ok || UDPSport(0, local, p.BTH.DestQPN()) == sport
				}
			}
			if !ok {
				t.Errorf("frame %d: %v source port %d matches neither a CM flow label %#x nor UDPSport(0, local QPN, %#x)", i+1, p.Opcode, sport, cmLabels, p.BTH.DestQPN())
			}
		}
	}
}
