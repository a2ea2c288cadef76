// AETH view, and the syndrome encodings: ACK credits, RNR timer, NAK codes.

package wire

import (
	"encoding/binary"
	"fmt"
	"time"
)

// AETH is the ACK Extended Transport Header (IBTA 9.3.5, AETHLen bytes): an 8-bit
// syndrome and a 24-bit MSN.
type AETH []byte

func (h AETH) Syndrome() Syndrome     { return Syndrome(h[0]) }
func (h AETH) MSN() uint32            { return get24(h[1:4]) }
func (h AETH) SetSyndrome(s Syndrome) { h[0] = byte(s) }
func (h AETH) SetMSN(m uint32)        { put24(h[1:4], m) }

// AETHFields describes an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

// Encode writes AETHLen bytes into b.
func (f *AETHFields) Encode(b []byte) {
	binary.BigEndian.PutUint32(b[:AETHLen], uint32(f.Syndrome)<<24|f.MSN&0xFFFFFF)
}

// Fields returns the fields of h.
func (h AETH) Fields() AETHFields { return AETHFields{Syndrome: h.Syndrome(), MSN: h.MSN()} }

// Syndrome is the AETH syndrome byte (IBTA 9.3.5; rxe_hdr.h enum aeth_syndrome):
// bit 7 is reserved,
// bits 6-5 say ACK, RNR NAK or NAK, bits 4-0 carry the credit count, the RNR timer
// or the NAK code.
type Syndrome uint8

// SyndromeKind is the two-bit type field of a Syndrome.
type SyndromeKind uint8

const (
	KindACK      SyndromeKind = 0
	KindRNRNAK   SyndromeKind = 1
	KindReserved SyndromeKind = 2
	KindNAK      SyndromeKind = 3
)

func (k SyndromeKind) String() string {
	switch k {
	case KindACK:
		return "ACK"
	case KindRNRNAK:
		return "RNR NAK"
	case KindNAK:
		return "NAK"
	}
	return "reserved"
}

// NAKCode is the 5-bit value of a NAK syndrome (rxe_hdr.h AETH_NAK_*).
type NAKCode uint8

const (
	NAKPSNSequenceError     NAKCode = 0
	NAKInvalidRequest       NAKCode = 1
	NAKRemoteAccessError    NAKCode = 2
	NAKRemoteOperationError NAKCode = 3
	NAKInvalidRDRequest     NAKCode = 4
)

func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOperationError:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return fmt.Sprintf("reserved NAK code %d", uint8(c))
}

// CreditCode is the 5-bit end-to-end credit count of an ACK syndrome (IBTA 9.7.7,
// end-to-end flow control). Code 31 means the count is invalid: the
// responder does no flow control (rxe always sends it, AETH_ACK_UNLIMITED).
type CreditCode uint8

// CreditsUnlimited is the credit code that turns end-to-end flow control off.
const CreditsUnlimited CreditCode = 31

// creditTable maps codes 0..30 to receive WQE counts (IBTA's encoding; rdmavt's
// ib_rvt_credit_table holds the same numbers).
var creditTable = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
	384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// Credits returns the number of receive WQEs c advertises; ok is false for
// CreditsUnlimited (no flow control) and out-of-range codes.
func (c CreditCode) Credits() (n int, ok bool) {
	if int(c) >= len(creditTable) {
		return 0, false
	}
	return int(creditTable[c]), true
}

// CreditCodeFor returns the largest code that advertises at most n credits, as a
// responder must never advertise more than it has.
func CreditCodeFor(n int) CreditCode {
	c := CreditCode(0)
	for i, v := range creditTable {
		if int(v) <= n {
			c = CreditCode(i)
		}
	}
	return c
}

// RNRTimer is the 5-bit minimum RNR NAK timer code (the IBTA RNR timer encoding
// table; include/rdma/ib_verbs.h enum ib_rnr_timeout has the same values).
type RNRTimer uint8

// rnrMicros maps timer codes to microseconds; code 0 is the longest.
var rnrMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
}

// Micros returns the timer value in microseconds.
func (t RNRTimer) Micros() uint32 { return rnrMicros[t&31] }

// Duration returns the timer value.
func (t RNRTimer) Duration() time.Duration { return time.Duration(t.Micros()) * time.Microsecond }

// RNRTimerFor returns the code of the shortest timer that lasts at least d (the
// 655.36 ms code 0 for anything above 491.52 ms).
func RNRTimerFor(d time.Duration) RNRTimer {
	best := RNRTimer(0)
	for c := RNRTimer(1); c < 32; c++ {
		if c.Duration() >= d && c.Duration() < best.Duration() {
			best = c
		}
	}
	return best
}

// ACKSyndrome returns the syndrome of a positive ACK with credit code c.
func ACKSyndrome(c CreditCode) Syndrome { return Syndrome(c & 31) }

// RNRNAKSyndrome returns the syndrome of an RNR NAK with timer t.
func RNRNAKSyndrome(t RNRTimer) Syndrome { return Syndrome(1<<5 | t&31) }

// NAKSyndrome returns the syndrome of a NAK with code c.
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(3<<5 | c&31) }

// Kind returns the type field.
func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s >> 5 & 3) }

// Value returns the 5-bit value field.
func (s Syndrome) Value() uint8 { return uint8(s & 31) }

// Credits returns the credit code of an ACK syndrome.
func (s Syndrome) Credits() CreditCode { return CreditCode(s & 31) }

// RNRTimer returns the timer code of an RNR NAK syndrome.
func (s Syndrome) RNRTimer() RNRTimer { return RNRTimer(s & 31) }

// NAKCode returns the code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s & 31) }

func (s Syndrome) String() string {
	switch s.Kind() {
	case KindACK:
		if s.Credits() == CreditsUnlimited {
			return "ACK (credits unlimited)"
		}
		n, _ := s.Credits().Credits()
		return fmt.Sprintf("ACK (%d credits)", n)
	case KindRNRNAK:
		return fmt.Sprintf("RNR NAK (timer %s)", s.RNRTimer().Duration())
	case KindNAK:
		return "NAK (" + s.NAKCode().String() + ")"
	}
	return fmt.Sprintf("reserved syndrome 0x%02x", uint8(s))
}
