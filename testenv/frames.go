package testenv

import (
	"fmt"

	"github.com/xrnic/xrnic/nic/wire"
)

// RoCESendOnly builds a whole RoCEv2 frame, an RC SEND Only to QPN 0x11 with the given
// PSN and payload, from endpoint src to endpoint dst over IPv4 or IPv6. It carries what
// a kernel UDP socket would send (source port 4791, IPv4 identification 0 and DF,
// TTL/hop limit 64), so the same frame is valid whichever link sends it. Tests, the
// data-path benchmark and `bench link` use it as their traffic.
func RoCESendOnly(src, dst *Endpoint, ipv6 bool, psn uint32, payload []byte) ([]byte, error) {
	f := wire.FrameFields{
		Ethernet:  wire.EthernetFields{Dst: wire.MAC(dst.MAC), Src: wire.MAC(src.MAC)},
		IPVersion: 4,
		IPv4:      wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: src.IPv4, Dst: dst.IPv4},
		UDP:       wire.UDPFields{SrcPort: wire.UDPPortRoCEv2},
		IB: wire.IBFields{
			BTH:     wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQPN: 0x11, PSN: wire.PSN(psn), AckReq: true},
			Payload: payload,
		},
	}
	if ipv6 {
		f.IPVersion = 6
		f.IPv6 = wire.IPv6Fields{HopLimit: 64, Src: src.IPv6, Dst: dst.IPv6}
	}
	b := make([]byte, f.Len())
	n, err := f.Encode(b)
	if err != nil {
		return nil, fmt.Errorf("testenv: build RoCEv2 frame: %w", err)
	}
	return b[:n], nil
}
