// Copies between packets and scatter/gather lists (rxe copy_data), each SGE
// looked up in the memory region table for every packet, and between packets and
// remote-keyed memory.

package engine

import "github.com/xrnic/xrnic/nic/mr"

// copyOut copies len(dst) bytes from the WQE's data at cursor c into dst and
// advances c. A fault means an SGE's region went away or changed since the post.
func (e *engine) copyOut(pd uint32, w *sendWQE, dst []byte) mr.Fault {
	c := &w.dma
	if w.isInline {
		off := len(w.inline) - int(c.resid)
		copy(dst, w.inline[off:])
		c.resid -= uint32(len(dst))
		return mr.FaultNone
	}
	f := e.copySGL(pd, w.sgl, c, dst, 0, false)
	return f
}

// copyIn copies src into the SGL at cursor c (receive buffers, READ response and
// atomic result targets: they need LOCAL_WRITE) and advances c. ok is false when
// src does not fit in what is left of the SGL.
func (e *engine) copyIn(pd uint32, sgl []SGE, c *dmaCursor, src []byte) (fits bool, f mr.Fault) {
	if uint32(len(src)) > c.resid {
		return false, mr.FaultNone
	}
	return true, e.copySGL(pd, sgl, c, src, mr.LocalWrite, true)
}

// copySGL moves len(b) bytes between b and the SGL at cursor c: into the SGL when
// in is set, out of it otherwise.
func (e *engine) copySGL(pd uint32, sgl []SGE, c *dmaCursor, b []byte, need mr.Access, in bool) mr.Fault {
	for len(b) > 0 {
		if c.sge >= len(sgl) {
			return mr.FaultBounds
		}
		s := &sgl[c.sge]
		avail := s.Length - c.offset
		if avail == 0 {
			c.sge++
			c.offset = 0
			continue
		}
		k := min(uint32(len(b)), avail)
		m, f := e.d.mrs.Lookup(s.LKey, pd, s.Addr+uint64(c.offset), int(k), need, mr.Local)
		if f != mr.FaultNone {
			return f
		}
		k = uint32(len(m)) // a page list hands out one page's part at a time
		if in {
			copy(m, b[:k])
		} else {
			copy(b[:k], m)
		}
		b = b[k:]
		c.offset += k
		c.resid -= k
		if c.offset == s.Length {
			c.sge++
			c.offset = 0
		}
	}
	return mr.FaultNone
}

// regionCopy moves len(b) bytes between b and the memory of R_Key rkey from IOVA
// va, which the caller has checked with Lookup: into the region when in is set.
// It loops because a region bound to a page list hands out one page's part per
// Lookup.
func (e *engine) regionCopy(qp *QP, rkey uint32, va uint64, b []byte, need mr.Access, in bool) mr.Fault {
	for len(b) > 0 {
		m, f := e.d.mrs.Lookup(rkey, qp.pd.handle, va, len(b), need, qp.qpn)
		if f != mr.FaultNone {
			return f
		}
		if in {
			copy(m, b)
		} else {
			copy(b, m)
		}
		b = b[len(m):]
		va += uint64(len(m))
	}
	return mr.FaultNone
}
