// The opcode table against ib_pack.h and rxe_opcode.c.

package wire

import "testing"

func TestOpcodeTable(t *testing.T) {
	// Numbers from include/rdma/ib_pack.h (IBTA 1.5 table 38); header lengths from
	// rxe_opcode.c's .length.
	for _, tc := range []struct {
		op      Opcode
		code    uint8
		name    string
		hdrLen  int
		headers OpMask
	}{
		{RCSendFirst, 0x00, "RC_SEND_FIRST", 12, MaskPayload},
		{RCSendLastWithImmediate, 0x03, "RC_SEND_LAST_WITH_IMMEDIATE", 16, MaskImmDt | MaskPayload},
		{RCSendOnlyWithImmediate, 0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", 16, MaskImmDt | MaskPayload},
		{RCRDMAWriteFirst, 0x06, "RC_RDMA_WRITE_FIRST", 28, MaskRETH | MaskPayload},
		{RCRDMAWriteMiddle, 0x07, "RC_RDMA_WRITE_MIDDLE", 12, MaskPayload},
		{RCRDMAWriteLastWithImmediate, 0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, MaskImmDt | MaskPayload},
		{RCRDMAWriteOnlyWithImmediate, 0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, MaskRETH | MaskImmDt | MaskPayload},
		{RCRDMAReadRequest, 0x0C, "RC_RDMA_READ_REQUEST", 28, MaskRETH},
		{RCRDMAReadResponseFirst, 0x0D, "RC_RDMA_READ_RESPONSE_FIRST", 16, MaskAETH | MaskPayload},
		{RCRDMAReadResponseMiddle, 0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, MaskPayload},
		{RCRDMAReadResponseOnly, 0x10, "RC_RDMA_READ_RESPONSE_ONLY", 16, MaskAETH | MaskPayload},
		{RCAcknowledge, 0x11, "RC_ACKNOWLEDGE", 16, MaskAETH},
		{RCAtomicAcknowledge, 0x12, "RC_ATOMIC_ACKNOWLEDGE", 24, MaskAETH | MaskAtomicAckETH},
		{RCCompareSwap, 0x13, "RC_COMPARE_SWAP", 40, MaskAtomicETH},
		{RCFetchAdd, 0x14, "RC_FETCH_ADD", 40, MaskAtomicETH},
		{RCSendLastWithInvalidate, 0x16, "RC_SEND_LAST_WITH_INVALIDATE", 16, MaskIETH | MaskPayload},
		{RCSendOnlyWithInvalidate, 0x17, "RC_SEND_ONLY_WITH_INVALIDATE", 16, MaskIETH | MaskPayload},
		{RCFlush, 0x1C, "RC_FLUSH", 32, MaskFETH | MaskRETH},
		{RCAtomicWrite, 0x1D, "RC_ATOMIC_WRITE", 28, MaskRETH | MaskPayload},
		{UCSendFirst, 0x20, "UC_SEND_FIRST", 12, MaskPayload},
		{UCSendOnlyWithImmediate, 0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", 16, MaskImmDt | MaskPayload},
		{UCRDMAWriteFirst, 0x26, "UC_RDMA_WRITE_FIRST", 28, MaskRETH | MaskPayload},
		{UCRDMAWriteOnlyWithImmediate, 0x2B, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, MaskRETH | MaskImmDt | MaskPayload},
		{UDSendOnly, 0x64, "UD_SEND_ONLY", 20, MaskDETH | MaskPayload},
		{UDSendOnlyWithImmediate, 0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, MaskDETH | MaskImmDt | MaskPayload},
		{CNP, 0x81, "CNP", 12, MaskPayload},
	} {
		in := tc.op.Info()
		if uint8(tc.op) != tc.code {
			t.Errorf("%s = %#02x, want %#02x", tc.name, uint8(tc.op), tc.code)
		}
		if in.Name != tc.name || tc.op.String() != tc.name {
			t.Errorf("Opcode(%#02x): name %q, String %q, want %q", tc.code, in.Name, tc.op.String(), tc.name)
		}
		if in.HeaderLen != tc.hdrLen {
			t.Errorf("%s: HeaderLen %d, want %d", tc.name, in.HeaderLen, tc.hdrLen)
		}
		const hdrBits = MaskDETH | MaskFETH | MaskRETH | MaskAtomicETH | MaskAETH | MaskAtomicAckETH | MaskImmDt | MaskIETH | MaskPayload
		if got := in.Mask & hdrBits; got != tc.headers {
			t.Errorf("%s: headers %v, want %v", tc.name, got, tc.headers)
		}
	}
}

func TestOpcodeTableShape(t *testing.T) {
	n := map[Transport]int{}
	for i := range 256 {
		op := Opcode(i)
		in := op.Info()
		if !op.Valid() {
			if in.Name != "" || in.HeaderLen != 0 {
				t.Errorf("invalid %v has name %q / length %d", op, in.Name, in.HeaderLen)
			}
			if got, want := op.String(), "Opcode(0x"; got[:len(want)] != want {
				t.Errorf("String() of invalid opcode %#02x = %q", i, got)
			}
			continue
		}
		n[op.Transport()]++
		// Headers lie back to back in wire order, after the BTH.
		off := BTHLen
		for h := HdrDETH; h < HdrPayload; h++ {
			if in.Mask&(1<<h) == 0 {
				continue
			}
			if int(in.Offset[h]) != off {
				t.Errorf("%v: %v at %d, want %d", op, h, in.Offset[h], off)
			}
			off += h.Len()
		}
		if in.HeaderLen != off || int(in.Offset[HdrPayload]) != off {
			t.Errorf("%v: HeaderLen %d, payload offset %d, want %d", op, in.HeaderLen, in.Offset[HdrPayload], off)
		}
		if in.HeaderLen > MaxHeaderLen {
			t.Errorf("%v: HeaderLen %d exceeds MaxHeaderLen", op, in.HeaderLen)
		}
		m := in.Mask
		if m.Has(MaskReq) == m.Has(MaskAck) && !m.Has(MaskCNP) {
			t.Errorf("%v: must be exactly one of request and response: %v", op, m)
		}
		if !m.Has(MaskCNP) && !(m.Has(MaskFirst) || m.Has(MaskMiddle) || m.Has(MaskLast)) {
			t.Errorf("%v: no position in its message: %v", op, m)
		}
		if m.Has(MaskMiddle) && (m.Has(MaskFirst) || m.Has(MaskLast)) {
			t.Errorf("%v: middle and first/last: %v", op, m)
		}
	}
	want := map[Transport]int{TransportRC: 25, TransportUC: 12, TransportUD: 2, TransportCNP: 1}
	for tr, w := range want {
		if n[tr] != w {
			t.Errorf("%v opcodes: %d, want %d", tr, n[tr], w)
		}
	}
	if len(n) != len(want) {
		t.Errorf("transports with opcodes: %v, want %v", n, want)
	}
}

func TestTransportString(t *testing.T) {
	for op, want := range map[Opcode]string{0x00: "RC", 0x3F: "UC", 0x40: "RD", 0x64: "UD", 0x81: "CNP", 0xA0: "XRC", 0xC0: "manufacturer-specific"} {
		if got := op.Transport().String(); got != want {
			t.Errorf("Opcode(%#02x).Transport() = %q, want %q", uint8(op), got, want)
		}
	}
	if got, want := (MaskRETH | MaskReq | MaskFirst).String(), "RETH|Req|First"; got != want {
		t.Errorf("OpMask.String() = %q, want %q", got, want)
	}
}
