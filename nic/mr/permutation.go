package mr

import "math/rand/v2"

// permutation is a random bijection of [0, n), computed, not stored: a
// four-round Feistel network on the smallest even number of bits that holds
// n, walked until it lands in range (cycle walking; a bijection of the power
// of two restricted this way stays one of [0, n)). The table hands out its
// never-used indices in this order, so the indices of a device's regions say
// nothing about one another. It is not a cipher a determined analyst cannot
// invert from many samples; it only makes index guessing as hard as guessing
// uniformly in the range, which is what a peer that sees a few keys has.
type permutation struct {
	n    uint32
	half uint      // bits per Feistel half
	keys [4]uint64 // round keys
}

func newPermutation(n uint32) permutation {
	bits := uint(2)
	for uint64(1)<<bits < uint64(n) {
		bits += 2
	}
	p := permutation{n: n, half: bits / 2}
	for i := range p.keys {
		p.keys[i] = rand.Uint64()
	}
	return p
}

// at returns the image of x < n.
func (p *permutation) at(x uint32) uint32 {
	for {
		x = p.feistel(x)
		if x < p.n {
			return x
		}
	}
}

func (p *permutation) feistel(x uint32) uint32 {
	mask := uint32(1)<<p.half - 1
	l, r := x>>p.half, x&mask
	for _, k := range p.keys {
		l, r = r, l^uint32(mix(uint64(r)^k))&mask
	}
	return l<<p.half | r
}

// mix is splitmix64's finaliser: every input bit moves every output bit.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
