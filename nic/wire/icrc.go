// The RoCEv2 invariant CRC, bit-exact with rxe.

package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The RoCEv2 invariant CRC (IBTA Vol 1 7.8.1 and the RoCEv2 Annex A17), exactly as Linux
// rxe_icrc.c computes it:
//
//   - CRC-32 with the IEEE polynomial, reflected (crc32_le), register seeded with
//     0xFFFFFFFF and run over 8 bytes of 0xFF that stand for the masked LRH; rxe
//     starts from the resulting register value 0xDEBB20E3.
//   - Then the IP header with its variant fields set to all ones (IPv4: TOS, TTL,
//     header checksum; IPv6: traffic class, flow label, hop limit), the UDP header
//     with its checksum set to 0xFFFF, and the BTH with byte 4 (FECN, BECN, Resv6;
//     rxe's "resv8a") set to 0xFF.
//   - Then everything after the BTH up to the ICRC: extension headers, payload, pad.
//   - The register is inverted (~crc), which makes the value equal to zlib's
//     crc32 / Go's crc32.ChecksumIEEE of the same bytes.
//   - rxe stores that u32 with a plain store into a __be32 slot, so on the
//     little-endian hosts it runs on the ICRC goes on the wire least-significant
//     byte first. Every packet of the golden captures confirms it (TestGolden).

// icrcSeed is the CRC register after 0xFFFFFFFF and 8 bytes of 0xFF (rxe_icrc.c).
const icrcSeed = 0xDEBB20E3

// The masks OR-ed into the covered headers; 0xFF bytes are the variant fields.
var (
	maskIPv4 = [IPv4Len]byte{1: 0xFF, 8: 0xFF, 10: 0xFF, 11: 0xFF}
	maskIPv6 = [IPv6Len]byte{0: 0x0F, 1: 0xFF, 2: 0xFF, 3: 0xFF, 7: 0xFF}
	maskUDP  = [UDPLen]byte{6: 0xFF, 7: 0xFF}
	maskBTH  = [BTHLen]byte{4: 0xFF}
)

// crcTab is a slicing-by-8 table for the reflected IEEE polynomial. The masked
// headers are hashed with it because hash/crc32 would need them copied into a buffer
// that escapes to the heap (its Update calls through a function value).
var crcTab = func() (t [8][256]uint32) {
	for i := range 256 {
		c := uint32(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ crc32.IEEE
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for i := range 256 {
		for k := 1; k < 8; k++ {
			t[k][i] = t[k-1][i]>>8 ^ t[0][t[k-1][i]&0xFF]
		}
	}
	return t
}()

// crcMasked runs the raw (uninverted) CRC register over b with mask OR-ed in.
// len(mask) must be at least len(b).
func crcMasked(crc uint32, b, mask []byte) uint32 {
	mask = mask[:len(b)]
	for len(b) >= 8 {
		crc = crcStep8(crc, binary.LittleEndian.Uint64(b)|binary.LittleEndian.Uint64(mask))
		b, mask = b[8:], mask[8:]
	}
	for i := range b {
		crc = crcTab[0][byte(crc)^(b[i]|mask[i])] ^ crc>>8
	}
	return crc
}

// crcStep8 runs the raw CRC register over the 8 bytes of v (little-endian).
func crcStep8(crc uint32, v uint64) uint32 {
	lo := uint32(v) ^ crc
	hi := uint32(v >> 32)
	return crcTab[0][hi>>24] ^ crcTab[1][hi>>16&0xFF] ^ crcTab[2][hi>>8&0xFF] ^ crcTab[3][hi&0xFF] ^
		crcTab[4][lo>>24] ^ crcTab[5][lo>>16&0xFF] ^ crcTab[6][lo>>8&0xFF] ^ crcTab[7][lo&0xFF]
}

// updateIEEE is crc32.Update(crc, crc32.IEEETable, b). Below 128 bytes it
// folds the multiple of 16 bytes itself (fold16): hash/crc32 reaches its
// PCLMULQDQ fold through two calls and a function value, and from 64 bytes
// only, about 120 of the 357 instructions of a 64-byte WRITE's ICRC
// (BenchmarkInstructions in nic/engine). From 128 bytes on hash/crc32's
// fold, four accumulators wide, is as fast or faster (64 bytes 14 against
// 19 ns, 128 both 22, 192 29 against 25, on the EPYC here). Either way the
// rest goes 8 bytes a step: hash/crc32 takes a tail under 16 bytes a byte
// at a time, each lookup waiting on the last (BenchmarkICRCWrite64,
// BenchmarkICRCAck). From FoldCopyMin bytes, with AVX-512, the rounds of 256
// bytes go through foldCRC, four 512-bit accumulators wide, as a sender's
// payload goes through foldCopy.
func updateIEEE(crc uint32, b []byte) uint32 {
	if n := len(b) &^ 255; hasFoldCopy && n >= FoldCopyMin {
		var acc [16]byte
		foldCRC(^crc, &b[0], n, &acc)
		crc = ^fold16(0, &acc[0], len(acc)) // hasFoldCopy implies hasFold16
		b = b[n:]
	}
	// Without fold16 (no PCLMULQDQ, another architecture) hash/crc32 takes
	// from 64 bytes, as before fold16.
	if n := len(b) &^ 15; hasFold16 && n >= 16 && n < 128 {
		crc = ^fold16(^crc, &b[0], n)
		b = b[n:]
	} else if n >= 64 {
		crc = crc32.Update(crc, crc32.IEEETable, b[:n])
		b = b[n:]
	}
	crc = ^crc
	for len(b) >= 8 {
		crc = crcStep8(crc, binary.LittleEndian.Uint64(b))
		b = b[8:]
	}
	for _, c := range b {
		crc = crcTab[0][byte(crc)^c] ^ crc>>8
	}
	return ^crc
}

// ComputeICRC returns the ICRC of a RoCEv2 packet. ip is the 20-byte IPv4 or
// 40-byte IPv6 header, udp the 8-byte UDP header and ib the UDP payload without its
// trailing 4-byte ICRC (so BTH, extension headers, payload and pad). ok is false
// when the arguments have the wrong lengths. The caller stores the value with
// PutICRC.
func ComputeICRC(ip, udp, ib []byte) (icrc uint32, ok bool) {
	if len(udp) != UDPLen || len(ib) < BTHLen {
		return 0, false
	}
	crc := uint32(icrcSeed)
	switch len(ip) {
	case IPv4Len:
		crc = crcMasked(crc, ip, maskIPv4[:])
	case IPv6Len:
		crc = crcMasked(crc, ip, maskIPv6[:])
	default:
		return 0, false
	}
	crc = crcMasked(crc, udp, maskUDP[:])
	crc = crcMasked(crc, ib[:BTHLen], maskBTH[:])
	// updateIEEE, as crc32.Update, works on the inverted register:
	// Update(^r, p) == ^raw(r, p), which is the final ~crc rxe stores.
	return updateIEEE(^crc, ib[BTHLen:]), true
}

// ICRCInPlace is ComputeICRC for a packet that lies whole in b: the IP header
// (ipLen bytes, IPv4Len or IPv6Len), then the UDP header, then the IB part
// without its ICRC. It runs one CRC pass, folded with PCLMULQDQ, over all of b,
// where ComputeICRC runs slicing-by-8 over the 40-60 bytes of masked headers and
// then a second pass over the rest (BenchmarkInstructions in nic/engine). For
// that pass it sets b's variant fields as the masks do and then puts the bytes
// back, so the caller must own b: a concurrent reader would see them masked.
func ICRCInPlace(b []byte, ipLen int) (icrc uint32, ok bool) {
	// The variant bytes by offset (the masks above), set by hand: a loop over
	// a table of them cost as much as the CRC pass.
	const (
		udp4 = IPv4Len + 6 // the UDP checksum
		bth4 = IPv4Len + UDPLen + 4
		udp6 = IPv6Len + 6
		bth6 = IPv6Len + UDPLen + 4
	)
	if len(b) < ipLen+UDPLen+BTHLen {
		return 0, false
	}
	seed := ^uint32(icrcSeed)
	switch ipLen {
	case IPv4Len:
		_ = b[bth4]
		tos, ttl, sum, udpSum, resv := b[1], b[8], [2]byte(b[10:12]), [2]byte(b[udp4:udp4+2]), b[bth4]
		b[1], b[8], b[10], b[11], b[udp4], b[udp4+1], b[bth4] = 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF
		icrc = updateIEEE(seed, b)
		b[1], b[8], b[10], b[11], b[udp4], b[udp4+1], b[bth4] = tos, ttl, sum[0], sum[1], udpSum[0], udpSum[1], resv
	case IPv6Len:
		_ = b[bth6]
		tcfl, hop, udpSum, resv := [4]byte(b[0:4]), b[7], [2]byte(b[udp6:udp6+2]), b[bth6]
		b[0] |= 0x0F
		b[1], b[2], b[3], b[7], b[udp6], b[udp6+1], b[bth6] = 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF
		icrc = updateIEEE(seed, b)
		copy(b[0:4], tcfl[:])
		b[7], b[udp6], b[udp6+1], b[bth6] = hop, udpSum[0], udpSum[1], resv
	default:
		return 0, false
	}
	return icrc, true
}

// PutICRC stores icrc in the 4 bytes of b the way rxe does (least-significant byte
// first).
func PutICRC(b []byte, icrc uint32) { binary.LittleEndian.PutUint32(b[:ICRCLen], icrc) }

// GetICRC reads an ICRC stored by PutICRC.
func GetICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b[:ICRCLen]) }

// CRC-32 is linear: the CRCs of two inputs of one length differ by the raw
// CRC (zero seed, no inversion) of their xor. A change of a few bytes with n
// bytes of input after it changes the CRC by the raw CRC of the change times
// x^(8n) modulo the polynomial. PatchICRC uses that to carry a change of a
// covered field into a known ICRC without a pass over the bytes after it: the
// UDP link renumbers the IPv4 identification (IBTA 17.3.4 does not mask it)
// of each segment of a GSO send, after the engine computed the ICRC.

// x2k[k] is x^(2^k) modulo the reflected IEEE polynomial, with bit 31 the
// coefficient of x^0 (the reflected order of crc32.IEEE).
var x2k = func() (t [64]uint32) {
	t[0] = 1 << 30 // x
	for k := 1; k < len(t); k++ {
		t[k] = mulModP(t[k-1], t[k-1])
	}
	return t
}()

// mulModP returns a times b modulo the polynomial, both reflected.
func mulModP(a, b uint32) uint32 {
	var p uint32
	for i := 31; i >= 0; i-- { // a's coefficients of x^0, x^1, ...
		p ^= b & -(a >> i & 1)
		b = b>>1 ^ crc32.IEEE&-(b&1) // b times x
	}
	return p
}

// ICRCShift holds x^(8n) modulo the polynomial for the last n PatchICRC was
// given: the frames of a GSO run share their length. Its zero value is ready;
// one owner.
type ICRCShift struct {
	n   int
	pow uint32 // 0 until computed: no power of x is 0 modulo the polynomial
}

func (s *ICRCShift) of(n int) uint32 {
	if s.pow == 0 || s.n != n {
		p := uint32(1) << 31 // x^0
		for k, e := 0, uint64(n)<<3; e != 0; k, e = k+1, e>>1 {
			if e&1 != 0 {
				p = mulModP(x2k[k], p)
			}
		}
		s.n, s.pow = n, p
	}
	return s.pow
}

// PatchICRC returns the ICRC of a packet whose ICRC was icrc once diff, the
// xor of a covered field's old and new bytes, is xor-ed into it at a point
// that after covered bytes follow (up to the ICRC). The field must not be
// one the ICRC masks. s caches the factor for after.
func PatchICRC(icrc uint32, diff []byte, after int, s *ICRCShift) uint32 {
	var d uint32
	for _, c := range diff {
		d = crcTab[0][byte(d)^c] ^ d>>8
	}
	return icrc ^ mulModP(s.of(after), d)
}
