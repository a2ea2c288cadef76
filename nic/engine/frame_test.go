package engine

import (
	"net/netip"
	"testing"

	"github.com/xrnic/xrnic/nic/wire"
)

// TestRouteFrames: the frames begin, foldICRC and seal build carry a valid
// IPv4 header checksum (updated from the route's partial sum, RFC 1624) and a
// valid ICRC (one pass over a short frame, or folded as the payload is
// copied), for IPv4 and IPv6, across lengths and IPv4 IDs that make the
// one's-complement sum carry; the receive path takes them.
func TestRouteFrames(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		p := routeParams{src: netip.MustParseAddr("10.1.2.3"), dst: netip.MustParseAddr("10.255.254.253"),
			smac: wire.MAC{2, 0, 0, 0, 0, 1}, dmac: wire.MAC{2, 0, 0, 0, 0, 2}, sport: 0xC001, tclass: 0xB8, hopLimit: 7}
		if v6 {
			p.src, p.dst = netip.MustParseAddr("fd00::1:2:3"), netip.MustParseAddr("fd00::ffff:fffe")
			p.flowLabel = 0xABCDE
		}
		rt, err := newRoute(p)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 9000)
		for _, payload := range []int{0, 1, 64, 4093, 4096, 8000} {
			for _, id := range []uint16{0, 1, 0x7FFF, 0xFF00, 0xFFFE, 0xFFFF} {
				n := ibLen(wire.RCRDMAWriteOnly, payload)
				ib := rt.begin(buf, n, id)
				bth := wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PadCount: uint8(-payload & 3), PKey: 0xFFFF,
					DestQPN: 0x123456, AckReq: true, PSN: 0xABCDEF}
				bth.Encode(ib)
				// The rest (RETH and payload) comes in as the ICRC folds it.
				src := make([]byte, n-wire.ICRCLen-int(bth.PadCount)-wire.BTHLen)
				for i := range src {
					src[i] = byte(i * 7)
				}
				end := rt.hdrLen + wire.BTHLen
				var reg uint32
				crc := rt.foldICRC(buf, end, len(src), &reg)
				copyFold(ib[wire.BTHLen:], src, crc)
				var pkt wire.Packet
				if err := wire.ParseAndVerify(buf[:rt.seal(buf, n, end+len(src), crc)], &pkt); err != nil {
					t.Fatalf("v6 %v, payload %d, ID %#x: %v", v6, payload, id, err)
				}
				if ip := pkt.IPv4; ip != nil && (ip.ID() != id || ip.Checksum() != ip.CalculateChecksum()) {
					t.Fatalf("payload %d, ID %#x: ID %#x, checksum %#04x, want %#04x", payload, id, ip.ID(),
						ip.Checksum(), ip.CalculateChecksum())
				}
			}
		}
	}
}
