// ICRC against an independent reference, and single-bit-flip detection.

package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// refICRC is a straightforward ICRC, written like
// shared/tools/rxe-vm/icrc-check.py: copy the headers, set the variant fields to
// ones by name, and run zlib's CRC-32 over 8 bytes of 0xFF and the rest.
func refICRC(frame []byte) (uint32, bool) {
	off := EthernetLen
	et := binary.BigEndian.Uint16(frame[12:])
	if et == EtherTypeVLAN {
		et = binary.BigEndian.Uint16(frame[16:])
		off += VLANLen
	}
	var ip []byte
	var end int
	switch et {
	case EtherTypeIPv4:
		ip = bytes.Clone(frame[off : off+20])
		end = off + int(binary.BigEndian.Uint16(ip[2:]))
		ip[1] = 0xFF                // TOS
		ip[8] = 0xFF                // TTL
		ip[10], ip[11] = 0xFF, 0xFF // header checksum
	case EtherTypeIPv6:
		ip = bytes.Clone(frame[off : off+40])
		end = off + 40 + int(binary.BigEndian.Uint16(ip[4:]))
		ip[0] |= 0x0F                          // traffic class, high nibble
		ip[1], ip[2], ip[3] = 0xFF, 0xFF, 0xFF // traffic class low nibble, flow label
		ip[7] = 0xFF                           // hop limit
	default:
		return 0, false
	}
	l4 := off + len(ip)
	udp := bytes.Clone(frame[l4 : l4+8])
	udp[6], udp[7] = 0xFF, 0xFF // checksum
	bth := bytes.Clone(frame[l4+8 : l4+20])
	bth[4] = 0xFF // FECN, BECN, Resv6
	var all []byte
	all = append(all, bytes.Repeat([]byte{0xFF}, 8)...)
	all = append(all, ip...)
	all = append(all, udp...)
	all = append(all, bth...)
	all = append(all, frame[l4+20:end-4]...)
	return crc32.ChecksumIEEE(all), true
}

func TestICRCSeed(t *testing.T) {
	// rxe_icrc.c starts from 0xdebb20e3: the crc32_le register after seed
	// 0xffffffff and 8 bytes of 0xff. The register is the complement of zlib's value.
	if got := ^crc32.ChecksumIEEE(bytes.Repeat([]byte{0xFF}, 8)); got != icrcSeed {
		t.Errorf("register after 8 x 0xff = %#08x, want %#08x", got, uint32(icrcSeed))
	}
}

// crcMasked with no mask, and updateIEEE, which splits its input between
// hash/crc32 and crcTab by length, agree with hash/crc32 at every length
// around the splits.
func TestCRCMaskedMatchesHashCRC32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	zero := make([]byte, 200)
	for n := range 200 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		seed := rng.Uint32()
		want := ^crc32.Update(^seed, crc32.IEEETable, b)
		if got := crcMasked(seed, b, zero); got != want {
			t.Fatalf("len %d: crcMasked = %#08x, want %#08x", n, got, want)
		}
		if got := ^updateIEEE(^seed, b); got != want {
			t.Fatalf("len %d: updateIEEE = %#08x, want %#08x", n, got, want)
		}
	}
}

func TestICRCMatchesReference(t *testing.T) {
	var frames [][]byte
	frames = append(frames, goldenFrames(t)...)
	for _, op := range validOpcodes() {
		for _, v := range []uint8{4, 6} {
			for _, n := range []int{0, 1, 2, 3, 4, 63, 1024, 4096} {
				f := sampleFields(op, v, n)
				f.Ethernet.VLAN = n%2 == 1
				frames = append(frames, mustBuild(t, f))
			}
		}
	}
	var p Packet
	for i, fr := range frames {
		if err := Parse(fr, &p); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		want, ok := refICRC(fr)
		if !ok {
			t.Fatalf("frame %d: reference rejected it", i)
		}
		if got := p.ComputeICRC(); got != want {
			t.Errorf("frame %d (%v): ComputeICRC = %#08x, reference %#08x", i, p.Opcode, got, want)
		}
		// The one-pass form, on the frame itself, which it must leave as it was.
		before := bytes.Clone(fr)
		ipOff := len(p.Ethernet) + len(p.VLAN)
		if got, ok := ICRCInPlace(fr[ipOff:len(p.Frame)-ICRCLen], len(p.IPHeader())); !ok || got != want {
			t.Errorf("frame %d (%v): ICRCInPlace = %#08x, %v; reference %#08x", i, p.Opcode, got, ok, want)
		}
		if !bytes.Equal(fr, before) {
			t.Errorf("frame %d (%v): ICRCInPlace left the frame changed:\n got %x\nwant %x", i, p.Opcode, fr, before)
		}
		// The wire holds the value least-significant byte first.
		if got := binary.LittleEndian.Uint32(p.ICRC); got != want {
			t.Errorf("frame %d (%v): stored ICRC (LE) = %#08x, reference %#08x", i, p.Opcode, got, want)
		}
	}
}

func TestComputeICRCArgs(t *testing.T) {
	ib := make([]byte, BTHLen)
	for _, tc := range []struct {
		name        string
		ip, udp, ib []byte
	}{
		{"ip 19", make([]byte, 19), make([]byte, 8), ib},
		{"ip 24", make([]byte, 24), make([]byte, 8), ib},
		{"udp 7", make([]byte, 20), make([]byte, 7), ib},
		{"ib 11", make([]byte, 40), make([]byte, 8), ib[:11]},
	} {
		if _, ok := ComputeICRC(tc.ip, tc.udp, tc.ib); ok {
			t.Errorf("%s: ok, want a refusal", tc.name)
		}
		if len(tc.ip) != IPv4Len && len(tc.ip) != IPv6Len {
			if _, ok := ICRCInPlace(make([]byte, 100), len(tc.ip)); ok {
				t.Errorf("ICRCInPlace, IP header of %d bytes: ok, want a refusal", len(tc.ip))
			}
		}
	}
	for _, ipLen := range []int{IPv4Len, IPv6Len} {
		if _, ok := ICRCInPlace(make([]byte, ipLen+UDPLen+BTHLen-1), ipLen); ok {
			t.Errorf("ICRCInPlace, %d bytes after a %d-byte IP header: ok, want a refusal", UDPLen+BTHLen-1, ipLen)
		}
	}
}

// TestVerifyICRCInPlaceViews: a Packet whose views do not lie one after
// another in its frame (a caller that put together its own) is still checked,
// by the two-pass form.
func TestVerifyICRCInPlaceViews(t *testing.T) {
	for _, v := range []uint8{4, 6} {
		for _, moved := range []string{"UDP header", "IB part"} {
			fr := mustBuild(t, sampleFields(RCRDMAWriteOnly, v, 64))
			var p Packet
			if err := ParseAndVerify(fr, &p); err != nil {
				t.Fatal(err)
			}
			b := (*[]byte)(&p.UDP)
			if moved == "IB part" {
				b = &p.Raw
			}
			*b = bytes.Clone(*b)
			if err := p.VerifyICRCInPlace(); err != nil {
				t.Errorf("IPv%d, %s elsewhere: %v", v, moved, err)
			}
			(*b)[1] ^= 1 // the UDP source port; the IB part's BTH
			if err := p.VerifyICRCInPlace(); !errors.Is(err, ErrBadICRC) {
				t.Errorf("IPv%d, %s elsewhere and changed: %v, want ErrBadICRC", v, moved, err)
			}
		}
	}
	// An IP header of a length no RoCEv2 packet has is refused, not indexed.
	var p Packet
	if err := ParseAndVerify(mustBuild(t, sampleFields(RCSendOnly, 4, 8)), &p); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 19} {
		p.IPv4 = p.IPv4[:n]
		if err := p.VerifyICRCInPlace(); err == nil {
			t.Errorf("IPv4 header of %d bytes: verified", n)
		}
	}
}

// icrcMasked lists the bits that the ICRC leaves out, by offset from the IP header.
func icrcMasked(ipv6 bool, off, bit int) bool {
	ipLen := IPv4Len
	if ipv6 {
		ipLen = IPv6Len
	}
	switch {
	case off < ipLen && ipv6:
		return maskIPv6[off]&(1<<bit) != 0
	case off < ipLen:
		return maskIPv4[off]&(1<<bit) != 0
	case off < ipLen+UDPLen:
		return maskUDP[off-ipLen]&(1<<bit) != 0
	case off < ipLen+UDPLen+BTHLen:
		return maskBTH[off-ipLen-UDPLen]&(1<<bit) != 0
	}
	return false
}

// TestICRCBitFlip flips single bits of parsed packets in place: every covered bit
// must break the ICRC (CRC-32 catches every single-bit error), every masked bit
// must not, and neither must the Ethernet header, which the ICRC does not cover.
func TestICRCBitFlip(t *testing.T) {
	var samples [][]byte
	pcaps := goldenPcaps(t)
	for _, name := range goldenFiles {
		fr := readPcap(t, pcaps[name])
		samples = append(samples, fr[0], fr[len(fr)-1])
	}
	for _, op := range []Opcode{RCRDMAWriteOnlyWithImmediate, RCAtomicAcknowledge, UDSendOnlyWithImmediate, RCCompareSwap, RCFlush} {
		for _, v := range []uint8{4, 6} {
			f := sampleFields(op, v, 37)
			f.Ethernet.VLAN = v == 6
			samples = append(samples, mustBuild(t, f))
		}
	}
	samples = append(samples, mustBuild(t, sampleFields(RCSendOnly, 4, 4096)), mustBuild(t, sampleFields(RCSendOnly, 6, 4096)))

	for si, fr := range samples {
		orig := bytes.Clone(fr)
		var p Packet
		if err := ParseAndVerify(fr, &p); err != nil {
			t.Fatalf("sample %d: %v", si, err)
		}
		ipOff := len(p.Ethernet) + len(p.VLAN)
		ipv6 := p.IPv6 != nil
		hdrEnd := ipOff + len(p.IPHeader()) + UDPLen + p.Info().HeaderLen
		flipped, caught := 0, 0
		for i := range p.Frame {
			// Every header byte and the ICRC; payload bytes at a deterministic stride.
			if i >= hdrEnd && i < len(p.Frame)-ICRCLen-8 && (i-hdrEnd)%61 != 0 {
				continue
			}
			for bit := range 8 {
				fr[i] ^= 1 << bit
				err := p.VerifyICRC()
				if err2 := p.VerifyICRCInPlace(); (err2 == nil) != (err == nil) {
					t.Errorf("sample %d (%v), bit %d of byte %d flipped: VerifyICRC %v, VerifyICRCInPlace %v", si, p.Opcode, bit, i, err, err2)
				}
				fr[i] ^= 1 << bit
				covered := i >= ipOff && !icrcMasked(ipv6, i-ipOff, bit)
				switch {
				case covered && err == nil:
					t.Errorf("sample %d (%v): flipping bit %d of byte %d left the ICRC valid", si, p.Opcode, bit, i)
				case !covered && err != nil:
					t.Errorf("sample %d (%v): flipping uncovered bit %d of byte %d broke the ICRC: %v", si, p.Opcode, bit, i, err)
				}
				flipped++
				if err != nil {
					caught++
				}
			}
		}
		if err := p.VerifyICRC(); err != nil {
			t.Fatalf("sample %d: not restored: %v", si, err)
		}
		if !bytes.Equal(fr, orig) {
			t.Fatalf("sample %d: the frame changed:\n got %x\nwant %x", si, fr, orig)
		}
		t.Logf("sample %d (%v, %d bytes): %d bits flipped, %d caught", si, p.Opcode, len(p.Frame), flipped, caught)
	}
}

// TestPatchICRC: carrying a change of covered bytes into a known ICRC gives
// the ICRC a full pass over the changed packet gives, for changes of 1-4
// bytes anywhere the masks leave alone, in packets of 40-9000 bytes, with one
// ICRCShift reused across lengths (its cache must follow n).
func TestPatchICRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 26))
	var sh ICRCShift
	for i := range 3000 {
		v6 := i%2 == 1
		ipLen := IPv4Len
		if v6 {
			ipLen = IPv6Len
		}
		n := ipLen + UDPLen + BTHLen + rng.IntN(9000)
		if i%7 == 0 {
			n = ipLen + UDPLen + BTHLen // headers alone
		}
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(rng.Uint32())
		}
		icrc, ok := ICRCInPlace(b, ipLen)
		if !ok {
			t.Fatalf("ICRCInPlace refused %d bytes", n)
		}
		w := 1 + rng.IntN(4)
		off := rng.IntN(n - w + 1)
		if overlapsMask(v6, off, w) {
			continue
		}
		diff := make([]byte, w)
		for k := range diff {
			diff[k] = byte(rng.Uint32())
			b[off+k] ^= diff[k]
		}
		want, _ := ICRCInPlace(b, ipLen)
		if got := PatchICRC(icrc, diff, n-off-w, &sh); got != want {
			t.Fatalf("packet %d (%d bytes, IPv6 %v): %d bytes changed at %d: patched %#08x, a full pass %#08x", i, n, v6, w, off, got, want)
		}
	}
}

// overlapsMask reports whether bytes [off, off+w) of a packet that starts at
// its IP header hold a field the ICRC masks.
func overlapsMask(v6 bool, off, w int) bool {
	for k := off; k < off+w; k++ {
		for bit := range 8 {
			if icrcMasked(v6, k, bit) {
				return true
			}
		}
	}
	return false
}

// TestICRCShiftPowers checks the factor against its definition: the raw CRC
// of a change followed by n zero bytes, run byte by byte.
func TestICRCShiftPowers(t *testing.T) {
	var sh ICRCShift
	for _, n := range []int{0, 1, 2, 3, 7, 8, 64, 1000, 4096, 4170, 65535, 1 << 20} {
		d := uint32(0x12345678)
		r := d
		for range n {
			r = crcTab[0][byte(r)] ^ r>>8
		}
		if got := mulModP(sh.of(n), d); got != r {
			t.Errorf("n %d: %#08x times the factor is %#08x, want %#08x", n, d, got, r)
		}
	}
}
