package mad

import "encoding/binary"

// The CM tables place fields in big-endian words by their high bits: a field of
// width w at a 32-bit word's byte offset takes the word's w high bits
// (IBA_FIELD32_LOC), a field at a byte's bit offset o takes w bits below the o
// high ones (IBA_FIELD_BLOC).

func get32(d []byte, off, width int) uint32 {
	return binary.BigEndian.Uint32(d[off:]) >> (32 - width)
}

func set32(d []byte, off, width int, v uint32) {
	mask := uint32(1)<<width - 1
	shift := 32 - width
	w := binary.BigEndian.Uint32(d[off:])
	w = w&^(mask<<shift) | (v&mask)<<shift
	binary.BigEndian.PutUint32(d[off:], w)
}

// getBits reads width bits of byte d[off] below its o high bits.
func getBits(d []byte, off, o, width int) uint8 {
	return d[off] >> (8 - o - width) & (1<<width - 1)
}

func setBits(d []byte, off, o, width int, v uint8) {
	shift := 8 - o - width
	mask := uint8(1<<width-1) << shift
	d[off] = d[off]&^mask | v<<shift&mask
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
