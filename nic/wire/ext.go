// Extension transport header views: RETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, FETH.

package wire

import "encoding/binary"

// The extension transport headers of IBTA 9.3, in the order they follow the BTH:
// DETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH. Each view must be at
// least as long as its header; Parse hands out views of exactly that length.

// RETH is the RDMA Extended Transport Header (IBTA 9.3.3, RETHLen bytes): the
// remote virtual address, R_Key and DMA length of an RDMA WRITE or READ (and of a
// FLUSH and an ATOMIC WRITE).
type RETH []byte

func (h RETH) VA() uint64       { return binary.BigEndian.Uint64(h[0:8]) }
func (h RETH) RKey() uint32     { return binary.BigEndian.Uint32(h[8:12]) }
func (h RETH) DMALen() uint32   { return binary.BigEndian.Uint32(h[12:16]) }
func (h RETH) SetVA(v uint64)   { binary.BigEndian.PutUint64(h[0:8], v) }
func (h RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(h[8:12], k) }
func (h RETH) SetDMALen(n uint32) {
	binary.BigEndian.PutUint32(h[12:16], n)
}

// RETHFields describes a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// Encode writes RETHLen bytes into b.
func (f *RETHFields) Encode(b []byte) {
	h := RETH(b[:RETHLen])
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetDMALen(f.DMALen)
}

// Fields returns the fields of h.
func (h RETH) Fields() RETHFields { return RETHFields{VA: h.VA(), RKey: h.RKey(), DMALen: h.DMALen()} }

// AtomicETH is the Atomic Extended Transport Header (IBTA 9.3.4, AtomicETHLen bytes)
// of COMPARE_SWAP and FETCH_ADD: address, R_Key, swap (or add) data, compare data.
type AtomicETH []byte

func (h AtomicETH) VA() uint64          { return binary.BigEndian.Uint64(h[0:8]) }
func (h AtomicETH) RKey() uint32        { return binary.BigEndian.Uint32(h[8:12]) }
func (h AtomicETH) SwapAdd() uint64     { return binary.BigEndian.Uint64(h[12:20]) }
func (h AtomicETH) Compare() uint64     { return binary.BigEndian.Uint64(h[20:28]) }
func (h AtomicETH) SetVA(v uint64)      { binary.BigEndian.PutUint64(h[0:8], v) }
func (h AtomicETH) SetRKey(k uint32)    { binary.BigEndian.PutUint32(h[8:12], k) }
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:20], v) }
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:28], v) }

// AtomicETHFields describes an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// Encode writes AtomicETHLen bytes into b.
func (f *AtomicETHFields) Encode(b []byte) {
	h := AtomicETH(b[:AtomicETHLen])
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetSwapAdd(f.SwapAdd)
	h.SetCompare(f.Compare)
}

// Fields returns the fields of h.
func (h AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()}
}

// AtomicAckETH is the Atomic Acknowledge Extended Transport Header (IBTA 9.3.6,
// AtomicAckLen bytes): the original remote data an atomic operation found.
type AtomicAckETH []byte

func (h AtomicAckETH) OrigRemData() uint64 { return binary.BigEndian.Uint64(h[0:8]) }
func (h AtomicAckETH) SetOrigRemData(v uint64) {
	binary.BigEndian.PutUint64(h[0:8], v)
}

// AtomicAckETHFields describes an AtomicAckETH.
type AtomicAckETHFields struct {
	OrigRemData uint64
}

// Encode writes AtomicAckLen bytes into b.
func (f *AtomicAckETHFields) Encode(b []byte) {
	AtomicAckETH(b[:AtomicAckLen]).SetOrigRemData(f.OrigRemData)
}

// Fields returns the fields of h.
func (h AtomicAckETH) Fields() AtomicAckETHFields {
	return AtomicAckETHFields{OrigRemData: h.OrigRemData()}
}

// ImmDt is the Immediate Data Extended Transport Header (IBTA 9.3.7, ImmDtLen
// bytes). The value is opaque to the transport; Imm reads it big-endian, so a
// verbs layer that keeps imm_data in network order stores it back the same way.
type ImmDt []byte

func (h ImmDt) Imm() uint32     { return binary.BigEndian.Uint32(h[0:4]) }
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h[0:4], v) }

// IETH is the Invalidate Extended Transport Header (IBTA 9.3.8, IETHLen bytes) of
// SEND_WITH_INVALIDATE: the R_Key the responder invalidates.
type IETH []byte

func (h IETH) RKey() uint32     { return binary.BigEndian.Uint32(h[0:4]) }
func (h IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(h[0:4], k) }

// DETH is the Datagram Extended Transport Header (IBTA 9.3.2, DETHLen bytes) of UD:
// the Q_Key and the source QP (byte 4 is reserved).
type DETH []byte

func (h DETH) QKey() uint32       { return binary.BigEndian.Uint32(h[0:4]) }
func (h DETH) SrcQPN() uint32     { return get24(h[5:8]) }
func (h DETH) SetQKey(k uint32)   { binary.BigEndian.PutUint32(h[0:4], k) }
func (h DETH) SetSrcQPN(q uint32) { h[4] = 0; put24(h[5:8], q) }

// DETHFields describes a DETH.
type DETHFields struct {
	QKey   uint32
	SrcQPN uint32
}

// Encode writes DETHLen bytes into b.
func (f *DETHFields) Encode(b []byte) {
	h := DETH(b[:DETHLen])
	h.SetQKey(f.QKey)
	h.SetSrcQPN(f.SrcQPN)
}

// Fields returns the fields of h.
func (h DETH) Fields() DETHFields { return DETHFields{QKey: h.QKey(), SrcQPN: h.SrcQPN()} }

// FETH is the FLUSH Extended Transport Header (IBTA 1.5 FLUSH; rxe_hdr.h struct
// rxe_feth, FETHLen bytes): the selectivity level (bits 5-4) and placement type
// (bits 3-0) of a FLUSH; the upper bits are reserved.
type FETH []byte

func (h FETH) Selectivity() uint8   { return h[3] >> 4 & 3 }
func (h FETH) PlacementType() uint8 { return h[3] & 0x0F }
func (h FETH) Set(sel, plt uint8) {
	binary.BigEndian.PutUint32(h[0:4], uint32(sel&3)<<4|uint32(plt&0x0F))
}

// FETHFields describes a FETH.
type FETHFields struct {
	Selectivity   uint8 // 0: memory region range, 1: whole memory region
	PlacementType uint8 // bit 0: global visibility, bit 1: persistence
}

// Encode writes FETHLen bytes into b.
func (f *FETHFields) Encode(b []byte) { FETH(b[:FETHLen]).Set(f.Selectivity, f.PlacementType) }

// Fields returns the fields of h.
func (h FETH) Fields() FETHFields {
	return FETHFields{Selectivity: h.Selectivity(), PlacementType: h.PlacementType()}
}
