// RFC 1071 Internet checksum, shared by IPv4 and UDP.

package wire

import "encoding/binary"

// sum16 adds b as big-endian 16-bit words to an RFC 1071 one's-complement sum,
// folding 64-bit partial sums so long payloads need no carry per word.
func sum16(sum uint64, b []byte) uint64 {
	for len(b) >= 32 {
		// Four 64-bit loads; the carries out of 32 bits are kept by using halves.
		for i := 0; i < 32; i += 8 {
			v := binary.BigEndian.Uint64(b[i:])
			sum += v >> 32
			sum += v & 0xFFFFFFFF
		}
		b = b[32:]
	}
	for len(b) >= 4 {
		sum += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	return sum
}

// fold reduces a sum16 accumulator to 16 bits.
func fold(sum uint64) uint16 {
	for sum > 0xFFFF {
		sum = (sum >> 16) + (sum & 0xFFFF)
	}
	return uint16(sum)
}

// Checksum returns the RFC 1071 Internet checksum of b (the value to store in a
// header whose checksum field was zero while summing).
func Checksum(b []byte) uint16 { return ^fold(sum16(0, b)) }

// PartialChecksum is the RFC 1071 sum of b before folding, for a header whose
// fields are mostly fixed: add the words that change to it and store
// FinishChecksum of the total (RFC 1624's incremental update).
func PartialChecksum(b []byte) uint64 { return sum16(0, b) }

// FinishChecksum folds a sum of 16-bit words and complements it: the value to
// store in the checksum field.
func FinishChecksum(sum uint64) uint16 { return ^fold(sum) }
