// Fuzz targets FuzzParse and FuzzRoundTrip.

package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"unsafe"
)

// within reports whether v lies inside frame (or is nil).
func within(frame, v []byte) bool {
	if v == nil {
		return true
	}
	if len(frame) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(frame)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	return p >= lo && p+uintptr(cap(v)) <= lo+uintptr(cap(frame))
}

// canonical returns the frame as Encode would write it from its parsed fields:
// reserved bits and pad bytes zero, IPv4 checksum and ICRC recomputed.
func canonical(p *Packet) []byte {
	b := bytes.Clone(p.Frame)
	var q Packet
	if err := Parse(b, &q); err != nil {
		panic(err)
	}
	q.BTH[4] &= 0xC0 // Resv6
	q.BTH[8] &= 0x80 // Resv7
	if q.DETH != nil {
		q.DETH[4] = 0
	}
	if q.FETH != nil {
		q.FETH.Set(q.FETH.Selectivity(), q.FETH.PlacementType())
	}
	clear(q.Pad)
	if q.IPv4 != nil {
		q.IPv4.UpdateChecksum()
	}
	q.UpdateICRC()
	return b
}

func FuzzParse(f *testing.F) {
	for _, fr := range goldenFrames(f) {
		f.Add(fr)
	}
	for _, op := range validOpcodes() {
		for _, v := range []uint8{4, 6} {
			s := sampleFields(op, v, 3)
			s.Ethernet.VLAN = v == 6
			b := make([]byte, s.Len())
			if _, err := s.Encode(b); err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var p Packet
		err := Parse(frame, &p)
		if err != nil {
			if !reflect.ValueOf(p).IsZero() {
				t.Fatalf("rejected (%v) but left a partial view", err)
			}
			ok := false
			for _, s := range []error{ErrTruncated, ErrBadHeader, ErrUnsupported, ErrUnknownOpcode} {
				ok = ok || errors.Is(err, s)
			}
			if !ok {
				t.Fatalf("error %q wraps no sentinel", err)
			}
			return
		}
		// Every view lies in the frame and they tile it.
		for _, v := range [][]byte{p.Ethernet, p.VLAN, p.IPv4, p.IPv6, p.UDP, p.BTH, p.DETH, p.FETH, p.RETH,
			p.AtomicETH, p.AETH, p.AtomicAckETH, p.ImmDt, p.IETH, p.Payload, p.Pad, p.ICRC, p.Raw, p.Frame} {
			if !within(frame, v) {
				t.Fatalf("a view lies outside the frame")
			}
		}
		in := p.Info()
		if got := len(p.Ethernet) + len(p.VLAN) + len(p.IPHeader()) + len(p.UDP) + len(p.Raw); got != len(p.Frame) {
			t.Fatalf("headers and IB part cover %d bytes, frame %d", got, len(p.Frame))
		}
		if got := in.HeaderLen + len(p.Payload) + len(p.Pad) + len(p.ICRC); got != len(p.Raw) {
			t.Fatalf("IB part tiles %d bytes, want %d", got, len(p.Raw))
		}
		if len(p.Pad) != p.BTH.PadCount() || len(p.ICRC) != ICRCLen {
			t.Fatalf("pad %d (count %d), ICRC %d", len(p.Pad), p.BTH.PadCount(), len(p.ICRC))
		}
		// Re-encoding the parsed fields gives the canonical form of the frame.
		var ff FrameFields
		p.Fields(&ff)
		buf := make([]byte, ff.Len())
		n, err := ff.Encode(buf)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if want := canonical(&p); !bytes.Equal(buf[:n], want) {
			t.Fatalf("re-encoded frame differs:\n got %x\nwant %x", buf[:n], want)
		}
		// Either way it must not panic, and the one-pass form agrees and leaves
		// the frame as it was.
		before := bytes.Clone(frame)
		err = p.VerifyICRC()
		if err2 := p.VerifyICRCInPlace(); (err == nil) != (err2 == nil) {
			t.Fatalf("VerifyICRC %v, VerifyICRCInPlace %v", err, err2)
		}
		if !bytes.Equal(frame, before) {
			t.Fatalf("VerifyICRCInPlace changed the frame")
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(0), false, false, uint16(0), uint32(0x11), uint32(0), uint8(0), uint16(0xFFFF), uint64(1), uint64(2), uint64(3), uint32(4), []byte("hello"), uint16(49441), uint8(64), uint8(0), uint16(1))
	f.Add(uint8(13), true, true, uint16(0x2005), uint32(0xFFFFFF), uint32(0xFFFFFF), uint8(0xFF), uint16(0x8001), ^uint64(0), uint64(0), uint64(1<<63), ^uint32(0), bytes.Repeat([]byte{0xA5}, 4097), uint16(65535), uint8(1), uint8(0xFF), uint16(0xFFFF))
	ops := validOpcodes()
	f.Fuzz(func(t *testing.T, opIdx uint8, v6, vlan bool, tci uint16, qpn, psn uint32, flags uint8, pkey uint16,
		a, b, c uint64, k uint32, payload []byte, sport uint16, ttl, tos uint8, id uint16) {
		op := ops[int(opIdx)%len(ops)]
		if op.Info().Mask&MaskPayload == 0 || (op == CNP && len(payload) != CNPLen) {
			payload = nil
		}
		if len(payload) > 9000 {
			payload = payload[:9000]
		}
		ff := &FrameFields{
			Ethernet:  EthernetFields{Dst: macB, Src: macA, VLAN: vlan, TCI: tci},
			IPVersion: 4,
			IPv4:      IPv4Fields{TOS: tos, ID: id, Flags: flags >> 5, TTL: ttl, Src: ip4A, Dst: ip4B},
			IPv6:      IPv6Fields{TrafficClass: tos, FlowLabel: k, HopLimit: ttl, Src: ip6A, Dst: ip6B},
			UDP:       UDPFields{SrcPort: sport, DstPort: UDPPortRoCEv2, Checksum: id},
			IB: IBFields{
				BTH: BTHFields{Opcode: op, SE: flags&1 != 0, MigReq: flags&2 != 0, PKey: pkey,
					FECN: flags&4 != 0, BECN: flags&8 != 0, DestQPN: qpn & 0xFFFFFF, AckReq: flags&16 != 0, PSN: PSN(psn & PSNMask)},
				DETH:         DETHFields{QKey: k, SrcQPN: uint32(a) & 0xFFFFFF},
				FETH:         FETHFields{Selectivity: uint8(b) & 3, PlacementType: uint8(c) & 0xF},
				RETH:         RETHFields{VA: a, RKey: k, DMALen: uint32(b)},
				AtomicETH:    AtomicETHFields{VA: a, RKey: k, SwapAdd: b, Compare: c},
				AETH:         AETHFields{Syndrome: Syndrome(flags), MSN: uint32(c) & 0xFFFFFF},
				AtomicAckETH: AtomicAckETHFields{OrigRemData: b},
				ImmDt:        uint32(a >> 32),
				IETH:         uint32(c >> 32),
				Payload:      payload,
			},
		}
		ff.IPv4.FragmentOffset = 0
		ff.IPv4.Flags &^= IPv4FlagMF // Parse rejects fragments
		ff.IPv6.FlowLabel &= 0xFFFFF
		if v6 {
			ff.IPVersion = 6
		}
		frame := make([]byte, ff.Len())
		n, err := ff.Encode(frame)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		var p Packet
		if err := ParseAndVerify(frame[:n], &p); err != nil {
			t.Fatalf("ParseAndVerify of an encoded frame: %v", err)
		}
		var got FrameFields
		p.Fields(&got)
		want := normalized(ff)
		if len(got.IB.Payload) == 0 && len(want.IB.Payload) == 0 {
			got.IB.Payload, want.IB.Payload = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fields differ\n got %+v\nwant %+v", got, want)
		}
		again := make([]byte, got.Len())
		if m, err := got.Encode(again); err != nil || !bytes.Equal(again[:m], frame[:n]) {
			t.Fatalf("second encode differs (err %v)", err)
		}
	})
}
