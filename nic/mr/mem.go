// mem: the memory behind one registration, contiguous or a list of pages.

package mr

// mem is what a view's IOVA range maps to: one contiguous buffer (Register,
// Reregister, FastReg), or pages of 1<<shift bytes each (a page list bound by
// MapSG and a REG_MR work request, IBTA 10.6.3.3), which need not be adjacent in
// host memory. It is immutable once built.
type mem struct {
	buf []byte // contiguous: len == cap == n; nil when paged

	// Paged: byte x of the range (0 <= x < n) is at page (off0+x)>>shift, offset
	// (off0+x)&(1<<shift-1) in that page. pages[i] holds the page's bytes that the
	// range covers, starting at base0 in the page for i == 0 and at 0 for the
	// others.
	pages [][]byte
	shift uint8
	off0  uint64 // in-page offset of byte 0 of the range
	base0 uint64 // in-page offset of pages[0][0] (<= off0)

	n uint64 // length in bytes
}

// contiguous returns a mem for buf (len == cap, so no lookup can reslice past it).
func contiguous(buf []byte) mem {
	return mem{buf: buf[:len(buf):len(buf)], n: uint64(len(buf))}
}

// piece returns the longest run of bytes from offset off, at most length of them,
// that is contiguous in host memory. The caller has checked off+length <= m.n.
func (m *mem) piece(off uint64, length int) []byte {
	if m.pages == nil {
		end := off + uint64(length)
		return m.buf[off:end:end]
	}
	abs := m.off0 + off
	i := abs >> m.shift
	in := abs & (1<<m.shift - 1)
	if i == 0 {
		in -= m.base0
	}
	b := m.pages[i][in:]
	k := min(len(b), length)
	return b[:k:k]
}

// sub returns the mem of [off, off+n) of m (a memory window's range). The caller
// has checked the range.
func (m *mem) sub(off, n uint64) mem {
	if m.pages == nil {
		return contiguous(m.buf[off : off+n])
	}
	abs := m.off0 + off
	first := abs >> m.shift
	last := (abs + max(n, 1) - 1) >> m.shift
	s := mem{pages: m.pages[first : last+1 : last+1], shift: m.shift, off0: abs & (1<<m.shift - 1), n: n}
	if first == 0 {
		s.base0 = m.base0
	}
	return s
}
