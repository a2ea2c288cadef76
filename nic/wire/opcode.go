// The opcode table: which headers each opcode carries and what it means.

package wire

import (
	"fmt"
	"strings"
)

// Opcode is the BTH OpCode: the top 3 bits select the transport, the low 5 bits the
// operation (IBTA Vol 1 9.2, BTH OpCode; include/rdma/ib_pack.h).
type Opcode uint8

// Transport operation bases (top 3 bits of the opcode).
const (
	opRC  = 0x00
	opUC  = 0x20
	opUD  = 0x60
	opCNP = 0x80
)

// Operations: the low 5 bits of an opcode, shared by the transports that have them.
const (
	opSendFirst              = 0x00
	opSendMiddle             = 0x01
	opSendLast               = 0x02
	opSendLastWithImmediate  = 0x03
	opSendOnly               = 0x04
	opSendOnlyWithImmediate  = 0x05
	opWriteFirst             = 0x06
	opWriteMiddle            = 0x07
	opWriteLast              = 0x08
	opWriteLastWithImmediate = 0x09
	opWriteOnly              = 0x0A
	opWriteOnlyWithImmediate = 0x0B
	opReadRequest            = 0x0C
	opReadResponseFirst      = 0x0D
	opReadResponseMiddle     = 0x0E
	opReadResponseLast       = 0x0F
	opReadResponseOnly       = 0x10
	opAcknowledge            = 0x11
	opAtomicAcknowledge      = 0x12
	opCompareSwap            = 0x13
	opFetchAdd               = 0x14
	opSendLastWithInvalidate = 0x16
	opSendOnlyWithInvalidate = 0x17
	opFlush                  = 0x1C
	opAtomicWrite            = 0x1D
)

// The opcodes of the RC, UC and UD transports, and the RoCEv2 CNP.
const (
	RCSendFirst                  Opcode = opRC | opSendFirst
	RCSendMiddle                 Opcode = opRC | opSendMiddle
	RCSendLast                   Opcode = opRC | opSendLast
	RCSendLastWithImmediate      Opcode = opRC | opSendLastWithImmediate
	RCSendOnly                   Opcode = opRC | opSendOnly
	RCSendOnlyWithImmediate      Opcode = opRC | opSendOnlyWithImmediate
	RCRDMAWriteFirst             Opcode = opRC | opWriteFirst
	RCRDMAWriteMiddle            Opcode = opRC | opWriteMiddle
	RCRDMAWriteLast              Opcode = opRC | opWriteLast
	RCRDMAWriteLastWithImmediate Opcode = opRC | opWriteLastWithImmediate
	RCRDMAWriteOnly              Opcode = opRC | opWriteOnly
	RCRDMAWriteOnlyWithImmediate Opcode = opRC | opWriteOnlyWithImmediate
	RCRDMAReadRequest            Opcode = opRC | opReadRequest
	RCRDMAReadResponseFirst      Opcode = opRC | opReadResponseFirst
	RCRDMAReadResponseMiddle     Opcode = opRC | opReadResponseMiddle
	RCRDMAReadResponseLast       Opcode = opRC | opReadResponseLast
	RCRDMAReadResponseOnly       Opcode = opRC | opReadResponseOnly
	RCAcknowledge                Opcode = opRC | opAcknowledge
	RCAtomicAcknowledge          Opcode = opRC | opAtomicAcknowledge
	RCCompareSwap                Opcode = opRC | opCompareSwap
	RCFetchAdd                   Opcode = opRC | opFetchAdd
	RCSendLastWithInvalidate     Opcode = opRC | opSendLastWithInvalidate
	RCSendOnlyWithInvalidate     Opcode = opRC | opSendOnlyWithInvalidate
	RCFlush                      Opcode = opRC | opFlush
	RCAtomicWrite                Opcode = opRC | opAtomicWrite

	UCSendFirst                  Opcode = opUC | opSendFirst
	UCSendMiddle                 Opcode = opUC | opSendMiddle
	UCSendLast                   Opcode = opUC | opSendLast
	UCSendLastWithImmediate      Opcode = opUC | opSendLastWithImmediate
	UCSendOnly                   Opcode = opUC | opSendOnly
	UCSendOnlyWithImmediate      Opcode = opUC | opSendOnlyWithImmediate
	UCRDMAWriteFirst             Opcode = opUC | opWriteFirst
	UCRDMAWriteMiddle            Opcode = opUC | opWriteMiddle
	UCRDMAWriteLast              Opcode = opUC | opWriteLast
	UCRDMAWriteLastWithImmediate Opcode = opUC | opWriteLastWithImmediate
	UCRDMAWriteOnly              Opcode = opUC | opWriteOnly
	UCRDMAWriteOnlyWithImmediate Opcode = opUC | opWriteOnlyWithImmediate

	UDSendOnly              Opcode = opUD | opSendOnly
	UDSendOnlyWithImmediate Opcode = opUD | opSendOnlyWithImmediate

	// CNP is the RoCEv2 Congestion Notification Packet (Annex A17.9): BTH with
	// opcode 0x81, 16 reserved bytes, ICRC.
	CNP Opcode = opCNP | 0x01
)

// Transport is the transport class of an opcode (its top 3 bits).
type Transport uint8

const (
	TransportRC  Transport = 0
	TransportUC  Transport = 1
	TransportRD  Transport = 2
	TransportUD  Transport = 3
	TransportCNP Transport = 4 // IBTA names class 100b "CNP" in RoCEv2
	TransportXRC Transport = 5
)

func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	case TransportXRC:
		return "XRC"
	}
	return "manufacturer-specific"
}

// Transport returns the transport class of op.
func (op Opcode) Transport() Transport { return Transport(op >> 5) }

// Info returns op's entry in Opcodes.
func (op Opcode) Info() *OpcodeInfo { return &Opcodes[op] }

// Valid reports whether op is in the table (and so is accepted by Parse).
func (op Opcode) Valid() bool { return Opcodes[op].Mask != 0 }

func (op Opcode) String() string {
	if n := Opcodes[op].Name; n != "" {
		return n
	}
	return fmt.Sprintf("Opcode(0x%02x)", uint8(op))
}

// Header names a header (or the payload) in OpcodeInfo.Offset; its bit in OpMask
// says that the opcode carries it. The order is the order on the wire (IBTA 9.3).
type Header uint8

const (
	HdrBTH Header = iota
	HdrDETH
	HdrFETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrPayload
	NumHeaders
)

var headerNames = [NumHeaders]string{"BTH", "DETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "Payload"}

var headerLens = [NumHeaders]int{BTHLen, DETHLen, FETHLen, RETHLen, AtomicETHLen, AETHLen, AtomicAckLen, ImmDtLen, IETHLen, 0}

func (h Header) String() string {
	if h < NumHeaders {
		return headerNames[h]
	}
	return fmt.Sprintf("Header(%d)", uint8(h))
}

// Len is the length of header h (0 for the payload).
func (h Header) Len() int { return headerLens[h] }

// OpMask describes an opcode: which headers it carries (one bit per Header) and what
// it means, like rxe's enum rxe_hdr_mask (rxe_opcode.h).
type OpMask uint32

const (
	MaskBTH          OpMask = 1 << HdrBTH
	MaskDETH         OpMask = 1 << HdrDETH
	MaskFETH         OpMask = 1 << HdrFETH
	MaskRETH         OpMask = 1 << HdrRETH
	MaskAtomicETH    OpMask = 1 << HdrAtomicETH
	MaskAETH         OpMask = 1 << HdrAETH
	MaskAtomicAckETH OpMask = 1 << HdrAtomicAckETH
	MaskImmDt        OpMask = 1 << HdrImmDt
	MaskIETH         OpMask = 1 << HdrIETH
	MaskPayload      OpMask = 1 << HdrPayload // may carry data (possibly 0 bytes)
)

// What an opcode means.
const (
	MaskReq          OpMask = 1 << (16 + iota) // request (requester to responder)
	MaskAck                                    // response (ACK, atomic ACK, read response)
	MaskReadResponse                           // RDMA READ response
	MaskSend                                   // SEND
	MaskWrite                                  // RDMA WRITE
	MaskRead                                   // RDMA READ request
	MaskAtomic                                 // COMPARE_SWAP or FETCH_ADD
	MaskFlush                                  // FLUSH
	MaskAtomicWrite                            // ATOMIC WRITE
	MaskRecvWQE                                // consumes a receive WQE (rxe RXE_RWR_MASK)
	MaskComplete                               // completes a message at the responder (rxe RXE_COMP_MASK)
	MaskFirst                                  // first packet of a message
	MaskMiddle                                 // middle packet
	MaskLast                                   // last packet; First|Last is an ONLY
	MaskCNP                                    // RoCEv2 congestion notification
)

// MaskOnly is an ONLY packet: both the first and the last of its message.
const MaskOnly = MaskFirst | MaskLast

var maskNames = []string{
	"BTH", "DETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "Payload",
	10: "", 11: "", 12: "", 13: "", 14: "", 15: "",
	"Req", "Ack", "ReadResponse", "Send", "Write", "Read", "Atomic", "Flush", "AtomicWrite",
	"RecvWQE", "Complete", "First", "Middle", "Last", "CNP",
}

func (m OpMask) String() string {
	var b strings.Builder
	for i, n := range maskNames {
		if m&(1<<i) != 0 && n != "" {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n)
		}
	}
	return b.String()
}

// Has reports whether every bit of x is set in m.
func (m OpMask) Has(x OpMask) bool { return m&x == x }

// OpcodeInfo describes one opcode. The table is read-only after init.
type OpcodeInfo struct {
	Name string
	Mask OpMask // zero for opcodes that Parse rejects
	// HeaderLen is the length of the BTH and the extension headers.
	HeaderLen int
	// Offset is the offset of each present header from the start of the BTH;
	// Offset[HdrPayload] == HeaderLen.
	Offset [NumHeaders]uint8
}

// Opcodes is the opcode table, indexed by opcode, in the shape of rxe_opcode.c's
// rxe_opcode[]. RD (0x40-0x5F) and XRC (0xA0-0xBF) are absent: xrnic, like rxe,
// does not implement them, so Parse rejects them as unknown.
var Opcodes = buildOpcodes()

// Message kinds shared by the transports.
const (
	sendFirst  = MaskPayload | MaskReq | MaskSend | MaskRecvWQE | MaskFirst
	sendMiddle = MaskPayload | MaskReq | MaskSend | MaskMiddle
	sendLast   = MaskPayload | MaskReq | MaskSend | MaskComplete | MaskLast
	sendOnly   = MaskPayload | MaskReq | MaskSend | MaskComplete | MaskRecvWQE | MaskOnly

	writeFirst  = MaskRETH | MaskPayload | MaskReq | MaskWrite | MaskFirst
	writeMiddle = MaskPayload | MaskReq | MaskWrite | MaskMiddle
	writeLast   = MaskPayload | MaskReq | MaskWrite | MaskLast
	writeOnly   = MaskRETH | MaskPayload | MaskReq | MaskWrite | MaskOnly
	// WRITE with immediate consumes a receive WQE and completes there.
	writeImm = MaskImmDt | MaskComplete | MaskRecvWQE
)

func buildOpcodes() (t [256]OpcodeInfo) {
	ops := []struct {
		op   Opcode
		name string
		mask OpMask
	}{
		{RCSendFirst, "RC_SEND_FIRST", sendFirst},
		{RCSendMiddle, "RC_SEND_MIDDLE", sendMiddle},
		{RCSendLast, "RC_SEND_LAST", sendLast},
		{RCSendLastWithImmediate, "RC_SEND_LAST_WITH_IMMEDIATE", sendLast | MaskImmDt},
		{RCSendOnly, "RC_SEND_ONLY", sendOnly},
		{RCSendOnlyWithImmediate, "RC_SEND_ONLY_WITH_IMMEDIATE", sendOnly | MaskImmDt},
		{RCRDMAWriteFirst, "RC_RDMA_WRITE_FIRST", writeFirst},
		{RCRDMAWriteMiddle, "RC_RDMA_WRITE_MIDDLE", writeMiddle},
		{RCRDMAWriteLast, "RC_RDMA_WRITE_LAST", writeLast},
		{RCRDMAWriteLastWithImmediate, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", writeLast | writeImm},
		{RCRDMAWriteOnly, "RC_RDMA_WRITE_ONLY", writeOnly},
		{RCRDMAWriteOnlyWithImmediate, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", writeOnly | writeImm},
		{RCRDMAReadRequest, "RC_RDMA_READ_REQUEST", MaskRETH | MaskReq | MaskRead | MaskOnly},
		{RCRDMAReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", MaskAETH | MaskPayload | MaskAck | MaskReadResponse | MaskFirst},
		{RCRDMAReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", MaskPayload | MaskAck | MaskReadResponse | MaskMiddle},
		{RCRDMAReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", MaskAETH | MaskPayload | MaskAck | MaskReadResponse | MaskLast},
		{RCRDMAReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", MaskAETH | MaskPayload | MaskAck | MaskReadResponse | MaskOnly},
		{RCAcknowledge, "RC_ACKNOWLEDGE", MaskAETH | MaskAck | MaskOnly},
		{RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", MaskAETH | MaskAtomicAckETH | MaskAck | MaskOnly},
		{RCCompareSwap, "RC_COMPARE_SWAP", MaskAtomicETH | MaskReq | MaskAtomic | MaskOnly},
		{RCFetchAdd, "RC_FETCH_ADD", MaskAtomicETH | MaskReq | MaskAtomic | MaskOnly},
		{RCSendLastWithInvalidate, "RC_SEND_LAST_WITH_INVALIDATE", sendLast | MaskIETH},
		{RCSendOnlyWithInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", sendOnly | MaskIETH},
		// FLUSH carries FETH then RETH and no payload; ATOMIC WRITE carries a RETH and
		// 8 bytes of payload (IBTA 1.5; rxe_opcode.c since Linux 6.2).
		{RCFlush, "RC_FLUSH", MaskFETH | MaskRETH | MaskReq | MaskFlush | MaskOnly},
		{RCAtomicWrite, "RC_ATOMIC_WRITE", MaskRETH | MaskPayload | MaskReq | MaskAtomicWrite | MaskOnly},

		{UCSendFirst, "UC_SEND_FIRST", sendFirst},
		{UCSendMiddle, "UC_SEND_MIDDLE", sendMiddle},
		{UCSendLast, "UC_SEND_LAST", sendLast},
		{UCSendLastWithImmediate, "UC_SEND_LAST_WITH_IMMEDIATE", sendLast | MaskImmDt},
		{UCSendOnly, "UC_SEND_ONLY", sendOnly},
		{UCSendOnlyWithImmediate, "UC_SEND_ONLY_WITH_IMMEDIATE", sendOnly | MaskImmDt},
		{UCRDMAWriteFirst, "UC_RDMA_WRITE_FIRST", writeFirst},
		{UCRDMAWriteMiddle, "UC_RDMA_WRITE_MIDDLE", writeMiddle},
		{UCRDMAWriteLast, "UC_RDMA_WRITE_LAST", writeLast},
		{UCRDMAWriteLastWithImmediate, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", writeLast | writeImm},
		{UCRDMAWriteOnly, "UC_RDMA_WRITE_ONLY", writeOnly},
		{UCRDMAWriteOnlyWithImmediate, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", writeOnly | writeImm},

		{UDSendOnly, "UD_SEND_ONLY", MaskDETH | sendOnly},
		{UDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", MaskDETH | sendOnly | MaskImmDt},

		// The 16 reserved bytes of a CNP are its "payload" here; Parse checks the size.
		{CNP, "CNP", MaskPayload | MaskCNP},
	}
	for _, o := range ops {
		in := &t[o.op]
		in.Name = o.name
		in.Mask = o.mask | MaskBTH
		off := 0
		for h := HdrBTH; h < HdrPayload; h++ {
			if in.Mask&(1<<h) != 0 {
				in.Offset[h] = uint8(off)
				off += h.Len()
			}
		}
		in.Offset[HdrPayload] = uint8(off)
		in.HeaderLen = off
	}
	return t
}
