// Frame fixtures shared by the tests.

package wire

import (
	"net/netip"
	"testing"
)

var (
	macA = MAC{0x52, 0x54, 0x00, 0xc0, 0x02, 0x0b}
	macB = MAC{0x52, 0x54, 0x00, 0xc0, 0x02, 0x0c}
	ip4A = netip.MustParseAddr("192.0.2.11")
	ip4B = netip.MustParseAddr("192.0.2.12")
	ip6A = netip.MustParseAddr("2001:db8::11")
	ip6B = netip.MustParseAddr("2001:db8::12")
)

// validOpcodes returns every opcode Parse accepts, in order.
func validOpcodes() []Opcode {
	var ops []Opcode
	for i := range 256 {
		if Opcode(i).Valid() {
			ops = append(ops, Opcode(i))
		}
	}
	return ops
}

// patterned returns n bytes of a recognisable pattern.
func patterned(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// sampleFields returns frame fields for op with every header field set to a
// distinct non-zero value, and n bytes of payload when op carries one.
func sampleFields(op Opcode, ipVersion uint8, n int) *FrameFields {
	f := &FrameFields{
		Ethernet:  EthernetFields{Dst: macB, Src: macA},
		IPVersion: ipVersion,
		IPv4:      IPv4Fields{TOS: 0x02, ID: 0xce13, Flags: IPv4FlagDF, TTL: 64, Src: ip4A, Dst: ip4B},
		IPv6:      IPv6Fields{TrafficClass: 0x68, FlowLabel: 0xABCDE, HopLimit: 64, Src: ip6A, Dst: ip6B},
		UDP:       UDPFields{SrcPort: UDPSport(0, 0x11, 0x12), DstPort: UDPPortRoCEv2},
		IB: IBFields{
			BTH: BTHFields{
				Opcode: op, SE: true, PKey: DefaultPKey, DestQPN: 0x123456,
				AckReq: true, PSN: 0xFEDCBA,
			},
			DETH:         DETHFields{QKey: 0x11223344, SrcQPN: 0x00ABCD},
			FETH:         FETHFields{Selectivity: 1, PlacementType: 3},
			RETH:         RETHFields{VA: 0x00005577d89f9000, RKey: 0x0c4e, DMALen: 3000},
			AtomicETH:    AtomicETHFields{VA: 0x7f0011223340, RKey: 0xdeadbeef, SwapAdd: 0x0102030405060708, Compare: 0x1112131415161718},
			AETH:         AETHFields{Syndrome: ACKSyndrome(CreditsUnlimited), MSN: 0x00BEEF},
			AtomicAckETH: AtomicAckETHFields{OrigRemData: 0x2122232425262728},
			ImmDt:        0xCAFEF00D,
			IETH:         0x0badcafe,
		},
	}
	if op.Info().Mask&MaskPayload != 0 {
		f.IB.Payload = patterned(n)
		if op == CNP {
			f.IB.Payload = nil
		}
	}
	return f
}

// mustBuild encodes f into a fresh buffer.
func mustBuild(t testing.TB, f *FrameFields) []byte {
	t.Helper()
	b := make([]byte, f.Len())
	n, err := f.Encode(b)
	if err != nil {
		t.Fatalf("Encode(%v): %v", f.IB.BTH.Opcode, err)
	}
	if n != len(b) {
		t.Fatalf("Encode(%v) wrote %d bytes, Len() said %d", f.IB.BTH.Opcode, n, len(b))
	}
	return b
}
