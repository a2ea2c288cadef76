package o2ib

import (
	"encoding/binary"
	"errors"
)

// The message types, as o2iblnd's IBLND_MSG_*: NOOP returns credits only;
// IMMEDIATE carries its payload; a PUT is PUT_REQ (the length), PUT_ACK (the
// sink's address and key), the sender's RDMA WRITE, then PUT_DONE; a GET is
// GET_REQ (what is wanted and how long), GET_ACK (the source's address and
// key), the requester's RDMA READ, then GET_DONE.
const (
	msgNoop uint8 = iota + 1
	msgImmediate
	msgPutReq
	msgPutAck
	msgPutDone
	msgGetReq
	msgGetAck
	msgGetDone
	msgNak // PUT_ACK or GET_ACK refused: no buffer, or nothing to get
)

// hdrLen is the header of every message:
//
//	0 magic u32 | 4 type u8 | 5 zero u8 | 6 credits u16 | 8 cookie u64
//	16 length u32 | 20 rkey u32 | 24 addr u64 | 32 payload (IMMEDIATE)
const hdrLen = 32

const magic = 0x6f32_6962 // "o2ib"

// hdr is a decoded header. A plain value.
type hdr struct {
	typ     uint8
	credits uint16
	cookie  uint64
	length  uint32
	rkey    uint32
	addr    uint64
}

func (h *hdr) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], magic)
	b[4], b[5] = h.typ, 0
	binary.BigEndian.PutUint16(b[6:], h.credits)
	binary.BigEndian.PutUint64(b[8:], h.cookie)
	binary.BigEndian.PutUint32(b[16:], h.length)
	binary.BigEndian.PutUint32(b[20:], h.rkey)
	binary.BigEndian.PutUint64(b[24:], h.addr)
}

var errBadMsg = errors.New("o2ib: malformed message")

// parse decodes the header of a received message of n bytes, checking what a
// peer controls: the magic, the type, and an IMMEDIATE's length against the
// bytes that came.
func parse(b []byte, n int, maxRDMA int) (hdr, error) {
	if n < hdrLen || n > len(b) || binary.BigEndian.Uint32(b) != magic || b[5] != 0 {
		return hdr{}, errBadMsg
	}
	h := hdr{typ: b[4], credits: binary.BigEndian.Uint16(b[6:]), cookie: binary.BigEndian.Uint64(b[8:]),
		length: binary.BigEndian.Uint32(b[16:]), rkey: binary.BigEndian.Uint32(b[20:]), addr: binary.BigEndian.Uint64(b[24:])}
	switch h.typ {
	case msgNoop, msgPutDone, msgGetDone, msgNak:
	case msgImmediate:
		if int(h.length) != n-hdrLen {
			return hdr{}, errBadMsg
		}
	case msgPutReq, msgPutAck, msgGetReq, msgGetAck:
		if h.length == 0 || int(h.length) > maxRDMA {
			return hdr{}, errBadMsg
		}
	default:
		return hdr{}, errBadMsg
	}
	return h, nil
}
