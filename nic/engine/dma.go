// Copies between packets and scatter/gather lists (rxe copy_data), each SGE
// looked up in the memory region table for every packet.

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
		if f := e.d.mrs.Copy(s.LKey, pd, s.Addr+uint64(c.offset), b[:k], need, mr.Local, in); f != mr.FaultNone {
			return f
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
