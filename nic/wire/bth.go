// Base Transport Header view, and the 24-bit field helpers.

package wire

import "encoding/binary"

// BTH is a view of the Base Transport Header (IBTA 9.2, BTHLen bytes):
//
//	byte 0     OpCode
//	byte 1     SE(1) MigReq(1) PadCnt(2) TVer(4)
//	bytes 2-3  P_Key
//	byte 4     FECN(1) BECN(1) Resv6 (IBA congestion control, Annex A10)
//	bytes 5-7  DestQP
//	byte 8     AckReq(1) Resv7
//	bytes 9-11 PSN
//
// Byte 4 is masked to 0xFF in the ICRC (rxe_icrc.c: bth->qpn |= ~BTH_QPN_MASK).
type BTH []byte

func (h BTH) Opcode() Opcode   { return Opcode(h[0]) }
func (h BTH) SE() bool         { return h[1]&0x80 != 0 }
func (h BTH) MigReq() bool     { return h[1]&0x40 != 0 }
func (h BTH) PadCount() int    { return int(h[1]>>4) & 3 }
func (h BTH) TVer() uint8      { return h[1] & 0x0F }
func (h BTH) PKey() uint16     { return binary.BigEndian.Uint16(h[2:4]) }
func (h BTH) FECN() bool       { return h[4]&0x80 != 0 }
func (h BTH) BECN() bool       { return h[4]&0x40 != 0 }
func (h BTH) DestQPN() uint32  { return binary.BigEndian.Uint32(h[4:8]) & 0xFFFFFF }
func (h BTH) AckReq() bool     { return h[8]&0x80 != 0 }
func (h BTH) PSN() PSN         { return PSN(binary.BigEndian.Uint32(h[8:12]) & PSNMask) }
func (h BTH) Reserved6() uint8 { return h[4] & 0x3F }
func (h BTH) Reserved7() uint8 { return h[8] & 0x7F }

func (h BTH) SetOpcode(op Opcode) { h[0] = byte(op) }
func (h BTH) SetSE(v bool)        { h[1] = setBit(h[1], 0x80, v) }
func (h BTH) SetMigReq(v bool)    { h[1] = setBit(h[1], 0x40, v) }
func (h BTH) SetPadCount(n int)   { h[1] = h[1]&^0x30 | byte(n&3)<<4 }
func (h BTH) SetTVer(v uint8)     { h[1] = h[1]&^0x0F | v&0x0F }
func (h BTH) SetPKey(k uint16)    { binary.BigEndian.PutUint16(h[2:4], k) }
func (h BTH) SetFECN(v bool)      { h[4] = setBit(h[4], 0x80, v) }
func (h BTH) SetBECN(v bool)      { h[4] = setBit(h[4], 0x40, v) }
func (h BTH) SetAckReq(v bool)    { h[8] = setBit(h[8], 0x80, v) }
func (h BTH) SetDestQPN(q uint32) { put24(h[5:8], q) }
func (h BTH) SetPSN(p PSN)        { put24(h[9:12], uint32(p)) }

// BTHFields describes a BTH. Reserved bits are written as zero: IBTA has senders
// transmit reserved fields as 0 and receivers ignore them.
type BTHFields struct {
	Opcode   Opcode
	SE       bool
	MigReq   bool
	PadCount uint8
	TVer     uint8
	PKey     uint16
	FECN     bool
	BECN     bool
	DestQPN  uint32
	AckReq   bool
	PSN      PSN
}

// Encode writes BTHLen bytes into b.
func (f *BTHFields) Encode(b []byte) {
	h := BTH(b[:BTHLen])
	h[0] = byte(f.Opcode)
	h[1] = bit(f.SE, 0x80) | bit(f.MigReq, 0x40) | (f.PadCount&3)<<4 | f.TVer&0x0F
	h.SetPKey(f.PKey)
	binary.BigEndian.PutUint32(h[4:8], f.DestQPN&0xFFFFFF|uint32(bit(f.FECN, 0x80)|bit(f.BECN, 0x40))<<24)
	binary.BigEndian.PutUint32(h[8:12], uint32(f.PSN)&PSNMask|uint32(bit(f.AckReq, 0x80))<<24)
}

// Fields returns the fields of h.
func (h BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: h.Opcode(), SE: h.SE(), MigReq: h.MigReq(), PadCount: uint8(h.PadCount()),
		TVer: h.TVer(), PKey: h.PKey(), FECN: h.FECN(), BECN: h.BECN(),
		DestQPN: h.DestQPN(), AckReq: h.AckReq(), PSN: h.PSN(),
	}
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}

func setBit(b, m byte, v bool) byte {
	if v {
		return b | m
	}
	return b &^ m
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}
