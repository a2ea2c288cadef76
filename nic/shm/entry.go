package shm

import (
	"encoding/binary"
	"fmt"
)

// The entries' layouts, little-endian (docs/attach.md has them as C structs).
// Numbers are libibverbs': opcodes (enum ibv_wr_opcode, enum ibv_wc_opcode),
// flags (enum ibv_send_flags, enum ibv_wc_flags), statuses (enum
// ibv_wc_status). Immediate data is the four bytes of ibv_send_wr.imm_data
// and ibv_wc.imm_data as they lie in memory (network order).

// SGE is struct ibv_sge: 16 bytes.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

const sgeLen = 16

// SendWQE is a send work request: a 64-byte head, then NumSGE SGEs or, with
// IBV_SEND_INLINE, InlineLen bytes of data.
type SendWQE struct {
	WRID       uint64
	Opcode     uint32
	Flags      uint32
	Imm        [4]byte // imm_data, or invalidate_rkey little-endian
	NumSGE     uint32  // or, inline, the data's length
	RemoteAddr uint64
	RKey       uint32
	AH         uint32 // UD: the AH's handle
	RemoteQPN  uint32
	RemoteQKey uint32
	CompareAdd uint64
	Swap       uint64
}

// SendHeadLen is the head of a send WQE; the SGEs or inline data follow.
const SendHeadLen = 64

// SendEntrySize is the entry size of a send ring taking maxSGE SGEs or
// maxInline inline bytes.
func SendEntrySize(maxSGE, maxInline int) int {
	return SendHeadLen + roundUp(max(maxSGE*sgeLen, maxInline), 8)
}

// RecvEntrySize is the entry size of a receive ring taking maxSGE SGEs.
func RecvEntrySize(maxSGE int) int { return recvHeadLen + maxSGE*sgeLen }

const recvHeadLen = 16

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// PutSendWQE writes w and its SGEs into the entry e; inline, when not nil, is
// the data of an inline send instead (NumSGE is then its length).
func PutSendWQE(e []byte, w *SendWQE, sges []SGE, inline []byte) error {
	tail := len(sges) * sgeLen
	if inline != nil {
		tail = len(inline)
	}
	if SendHeadLen+tail > len(e) {
		return fmt.Errorf("%w: %d SGEs, %d inline bytes in a %d-byte entry", ErrLayout, len(sges), len(inline), len(e))
	}
	le := binary.LittleEndian
	le.PutUint64(e[0:], w.WRID)
	le.PutUint32(e[8:], w.Opcode)
	le.PutUint32(e[12:], w.Flags)
	copy(e[16:20], w.Imm[:])
	n := uint32(len(sges))
	if inline != nil {
		n = uint32(len(inline))
		copy(e[SendHeadLen:], inline)
	}
	le.PutUint32(e[20:], n)
	le.PutUint64(e[24:], w.RemoteAddr)
	le.PutUint32(e[32:], w.RKey)
	le.PutUint32(e[36:], w.AH)
	le.PutUint32(e[40:], w.RemoteQPN)
	le.PutUint32(e[44:], w.RemoteQKey)
	le.PutUint64(e[48:], w.CompareAdd)
	le.PutUint64(e[56:], w.Swap)
	if inline == nil {
		putSGEs(e[SendHeadLen:], sges)
	}
	return nil
}

// GetSendWQE reads the head of the entry e into w. The caller then reads the
// tail with GetSGEs or takes the inline bytes, after bounding NumSGE.
func GetSendWQE(e []byte, w *SendWQE) {
	le := binary.LittleEndian
	_ = e[SendHeadLen-1]
	w.WRID = le.Uint64(e[0:])
	w.Opcode = le.Uint32(e[8:])
	w.Flags = le.Uint32(e[12:])
	copy(w.Imm[:], e[16:20])
	w.NumSGE = le.Uint32(e[20:])
	w.RemoteAddr = le.Uint64(e[24:])
	w.RKey = le.Uint32(e[32:])
	w.AH = le.Uint32(e[36:])
	w.RemoteQPN = le.Uint32(e[40:])
	w.RemoteQKey = le.Uint32(e[44:])
	w.CompareAdd = le.Uint64(e[48:])
	w.Swap = le.Uint64(e[56:])
}

// SendTail is the part of a send entry after its head.
func SendTail(e []byte) []byte { return e[SendHeadLen:] }

// PutRecvWQE writes a receive work request (wr_id, num_sge, SGEs).
func PutRecvWQE(e []byte, wrid uint64, sges []SGE) error {
	if recvHeadLen+len(sges)*sgeLen > len(e) {
		return fmt.Errorf("%w: %d SGEs in a %d-byte entry", ErrLayout, len(sges), len(e))
	}
	le := binary.LittleEndian
	le.PutUint64(e[0:], wrid)
	le.PutUint32(e[8:], uint32(len(sges)))
	le.PutUint32(e[12:], 0)
	putSGEs(e[recvHeadLen:], sges)
	return nil
}

// GetRecvWQE reads a receive entry's wr_id and SGE count; its SGEs follow in
// RecvTail.
func GetRecvWQE(e []byte) (wrid uint64, numSGE uint32) {
	le := binary.LittleEndian
	return le.Uint64(e[0:]), le.Uint32(e[8:])
}

// RecvTail is the part of a receive entry after its head.
func RecvTail(e []byte) []byte { return e[recvHeadLen:] }

func putSGEs(b []byte, sges []SGE) {
	le := binary.LittleEndian
	for i, s := range sges {
		le.PutUint64(b[i*sgeLen:], s.Addr)
		le.PutUint32(b[i*sgeLen+8:], s.Length)
		le.PutUint32(b[i*sgeLen+12:], s.LKey)
	}
}

// GetSGEs reads n SGEs from b into dst (which must hold n); it fails when b
// is too short.
func GetSGEs(b []byte, n int, dst []SGE) error {
	if n < 0 || n > len(dst) || n*sgeLen > len(b) {
		return fmt.Errorf("%w: %d SGEs", ErrLayout, n)
	}
	le := binary.LittleEndian
	for i := range n {
		dst[i] = SGE{Addr: le.Uint64(b[i*sgeLen:]), Length: le.Uint32(b[i*sgeLen+8:]), LKey: le.Uint32(b[i*sgeLen+12:])}
	}
	return nil
}

// CQE is a completion (struct ibv_wc's fields): 48 bytes in a 64-byte entry.
type CQE struct {
	WRID         uint64
	Status       uint32
	Opcode       uint32
	VendorErr    uint32
	ByteLen      uint32
	Imm          [4]byte // imm_data (network order), or invalidated rkey little-endian
	QPN          uint32
	SrcQP        uint32
	Flags        uint32
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
}

// CQEntrySize is the size of a CQ ring's entries.
const CQEntrySize = 64

// PutCQE writes c into the entry e.
func PutCQE(e []byte, c *CQE) {
	le := binary.LittleEndian
	_ = e[CQEntrySize-1]
	le.PutUint64(e[0:], c.WRID)
	le.PutUint32(e[8:], c.Status)
	le.PutUint32(e[12:], c.Opcode)
	le.PutUint32(e[16:], c.VendorErr)
	le.PutUint32(e[20:], c.ByteLen)
	copy(e[24:28], c.Imm[:])
	le.PutUint32(e[28:], c.QPN)
	le.PutUint32(e[32:], c.SrcQP)
	le.PutUint32(e[36:], c.Flags)
	le.PutUint16(e[40:], c.PKeyIndex)
	le.PutUint16(e[42:], c.SLID)
	e[44] = c.SL
	e[45] = c.DLIDPathBits
	clear(e[46:CQEntrySize])
}

// GetCQE reads the entry e into c.
func GetCQE(e []byte, c *CQE) {
	le := binary.LittleEndian
	_ = e[CQEntrySize-1]
	c.WRID = le.Uint64(e[0:])
	c.Status = le.Uint32(e[8:])
	c.Opcode = le.Uint32(e[12:])
	c.VendorErr = le.Uint32(e[16:])
	c.ByteLen = le.Uint32(e[20:])
	copy(c.Imm[:], e[24:28])
	c.QPN = le.Uint32(e[28:])
	c.SrcQP = le.Uint32(e[32:])
	c.Flags = le.Uint32(e[36:])
	c.PKeyIndex = le.Uint16(e[40:])
	c.SLID = le.Uint16(e[42:])
	c.SL = e[44]
	c.DLIDPathBits = e[45]
}
