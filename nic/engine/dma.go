// Copies between packets and scatter/gather lists (rxe copy_data), each SGE
// looked up in the memory region table for every packet.

package engine

import (
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/wire"
)

// copyOut copies len(dst) bytes from the WQE's data at cursor c into dst,
// folding them into the ICRC register *crc unless crc is nil (foldICRC), and
// advances c. A fault means an SGE's region went away or changed since the
// post.
func (e *engine) copyOut(pd uint32, w *sendWQE, dst []byte, crc *uint32) mr.Fault {
	c := &w.dma
	if w.isInline {
		off := len(w.inline) - int(c.resid)
		copyFold(dst, w.inline[off:off+len(dst)], crc)
		c.resid -= uint32(len(dst))
		return mr.FaultNone
	}
	return e.copySGL(pd, w.sgl, c, dst, 0, false, crc)
}

// copyIn copies src into the SGL at cursor c (receive buffers, READ response and
// atomic result targets: they need LOCAL_WRITE) and advances c. ok is false when
// src does not fit in what is left of the SGL.
func (e *engine) copyIn(pd uint32, sgl []SGE, c *dmaCursor, src []byte) (fits bool, f mr.Fault) {
	if uint32(len(src)) > c.resid {
		return false, mr.FaultNone
	}
	return true, e.copySGL(pd, sgl, c, src, mr.LocalWrite, true, nil)
}

// copySGL moves len(b) bytes between b and the SGL at cursor c: into the SGL when
// in is set, out of it otherwise. Out of it, it folds them into the ICRC
// register *crc as it copies unless crc is nil (copyRegion).
func (e *engine) copySGL(pd uint32, sgl []SGE, c *dmaCursor, b []byte, need mr.Access, in bool, crc *uint32) mr.Fault {
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
		var f mr.Fault
		if crc == nil {
			f = e.d.mrs.Copy(s.LKey, pd, s.Addr+uint64(c.offset), b[:k], need, mr.Local, in)
		} else {
			f = e.copyRegion(s.LKey, pd, s.Addr+uint64(c.offset), b[:k], need, mr.Local, crc)
		}
		if f != mr.FaultNone {
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

// copyRegion is mr.Table.Copy out of a region into a frame being built,
// folding the bytes into the frame's ICRC register *crc as it copies them
// (mr.Table.Lookup's piece by piece; mr knows nothing of the ICRC).
func (e *engine) copyRegion(key, pd uint32, va uint64, b []byte, need mr.Access, qpn uint32, crc *uint32) mr.Fault {
	for len(b) > 0 {
		m, f := e.d.mrs.Lookup(key, pd, va, len(b), need, qpn)
		if f != mr.FaultNone {
			return f
		}
		*crc = wire.CopyUpdateIEEE(*crc, b, m)
		b = b[len(m):]
		va += uint64(len(m))
	}
	return mr.FaultNone
}

// copyFold copies src into dst and folds it into the ICRC register *crc,
// in one pass over the bytes (wire.CopyUpdateIEEE), unless crc is nil.
func copyFold(dst, src []byte, crc *uint32) {
	if crc == nil {
		copy(dst, src)
		return
	}
	*crc = wire.CopyUpdateIEEE(*crc, dst, src)
}
