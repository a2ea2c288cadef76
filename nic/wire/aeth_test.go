// AETH syndromes, credit codes and RNR timer values.

package wire

import (
	"testing"
	"time"
)

func TestSyndromeEncodeDecode(t *testing.T) {
	for _, tc := range []struct {
		s     Syndrome
		want  Syndrome
		kind  SyndromeKind
		value uint8
		str   string
	}{
		// rxe_hdr.h enum aeth_syndrome values.
		{ACKSyndrome(CreditsUnlimited), 0x1F, KindACK, 31, "ACK (credits unlimited)"},
		{ACKSyndrome(5), 0x05, KindACK, 5, "ACK (6 credits)"},
		{RNRNAKSyndrome(14), 0x2E, KindRNRNAK, 14, "RNR NAK (timer 1.28ms)"},
		{RNRNAKSyndrome(0), 0x20, KindRNRNAK, 0, "RNR NAK (timer 655.36ms)"},
		{NAKSyndrome(NAKPSNSequenceError), 0x60, KindNAK, 0, "NAK (PSN sequence error)"},
		{NAKSyndrome(NAKInvalidRequest), 0x61, KindNAK, 1, "NAK (invalid request)"},
		{NAKSyndrome(NAKRemoteAccessError), 0x62, KindNAK, 2, "NAK (remote access error)"},
		{NAKSyndrome(NAKRemoteOperationError), 0x63, KindNAK, 3, "NAK (remote operational error)"},
		{NAKSyndrome(NAKInvalidRDRequest), 0x64, KindNAK, 4, "NAK (invalid RD request)"},
		{Syndrome(0x40), 0x40, KindReserved, 0, "reserved syndrome 0x40"},
	} {
		if tc.s != tc.want {
			t.Errorf("%s: syndrome %#02x, want %#02x", tc.str, uint8(tc.s), uint8(tc.want))
		}
		if got := tc.s.Kind(); got != tc.kind {
			t.Errorf("Syndrome(%#02x).Kind() = %v, want %v", uint8(tc.s), got, tc.kind)
		}
		if got := tc.s.Value(); got != tc.value {
			t.Errorf("Syndrome(%#02x).Value() = %d, want %d", uint8(tc.s), got, tc.value)
		}
		if got := tc.s.String(); got != tc.str {
			t.Errorf("Syndrome(%#02x).String() = %q, want %q", uint8(tc.s), got, tc.str)
		}
	}
}

func TestRNRTimerTable(t *testing.T) {
	// IBTA table 45 / ib_verbs.h enum ib_rnr_timeout, spot values.
	for _, tc := range []struct {
		code RNRTimer
		want time.Duration
	}{
		{0, 655360 * time.Microsecond},
		{1, 10 * time.Microsecond},
		{2, 20 * time.Microsecond},
		{5, 60 * time.Microsecond},
		{12, 640 * time.Microsecond},
		{14, 1280 * time.Microsecond},
		{18, 5120 * time.Microsecond},
		{24, 40960 * time.Microsecond},
		{30, 327680 * time.Microsecond},
		{31, 491520 * time.Microsecond},
	} {
		if got := tc.code.Duration(); got != tc.want {
			t.Errorf("RNRTimer(%d).Duration() = %v, want %v", tc.code, got, tc.want)
		}
	}
	// Codes 1..31 increase; code 0 is the longest of all.
	for c := RNRTimer(2); c < 32; c++ {
		if c.Micros() <= (c - 1).Micros() {
			t.Errorf("RNRTimer(%d) = %dus is not above code %d", c, c.Micros(), c-1)
		}
	}
	for _, tc := range []struct {
		d    time.Duration
		want RNRTimer
	}{
		{0, 1},
		{10 * time.Microsecond, 1},
		{11 * time.Microsecond, 2},
		{time.Millisecond, 14},
		{491520 * time.Microsecond, 31},
		{500 * time.Millisecond, 0},
		{time.Second, 0},
	} {
		if got := RNRTimerFor(tc.d); got != tc.want {
			t.Errorf("RNRTimerFor(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestCreditCodes(t *testing.T) {
	for _, tc := range []struct {
		c    CreditCode
		n    int
		ok   bool
		back CreditCode
	}{
		{0, 0, true, 0},
		{4, 4, true, 4},
		{5, 6, true, 5},
		{13, 96, true, 13},
		{30, 32768, true, 30},
		{CreditsUnlimited, 0, false, 30},
	} {
		n, ok := tc.c.Credits()
		if n != tc.n || ok != tc.ok {
			t.Errorf("CreditCode(%d).Credits() = %d, %v, want %d, %v", tc.c, n, ok, tc.n, tc.ok)
		}
		if ok {
			if got := CreditCodeFor(n); got != tc.back {
				t.Errorf("CreditCodeFor(%d) = %d, want %d", n, got, tc.back)
			}
		}
	}
	if got := CreditCodeFor(7); got != 5 { // 6 credits: never advertise more than we have
		t.Errorf("CreditCodeFor(7) = %d, want 5", got)
	}
	if got := CreditCodeFor(1 << 20); got != 30 {
		t.Errorf("CreditCodeFor(1<<20) = %d, want 30", got)
	}
}

func TestAETHView(t *testing.T) {
	b := make([]byte, AETHLen)
	f := AETHFields{Syndrome: NAKSyndrome(NAKRemoteAccessError), MSN: 0xABCDEF}
	f.Encode(b)
	if want := []byte{0x62, 0xAB, 0xCD, 0xEF}; string(b) != string(want) {
		t.Fatalf("AETH bytes %x, want %x", b, want)
	}
	if got := AETH(b).Fields(); got != f {
		t.Errorf("AETH.Fields() = %+v, want %+v", got, f)
	}
	AETH(b).SetMSN(0x1000001) // 24 bits kept
	if got := AETH(b).MSN(); got != 1 {
		t.Errorf("MSN after SetMSN(0x1000001) = %#x, want 1", got)
	}
}
