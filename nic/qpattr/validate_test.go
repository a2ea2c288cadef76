// Attribute value checks.

package qpattr

import (
	"errors"
	"strings"
	"testing"

	"github.com/xrnic/xrnic/nic/wire"
)

// goodAttr passes Validate for an RC QP with every bit an RC QP can take.
func goodAttr() Attr {
	return Attr{
		State: RTS, CurState: RTR, PathMTU: MTU4096, PathMigState: MigMigrated,
		RQPSN: 0xffffff, SQPSN: 0, DestQPN: 0xffffff,
		AccessFlags: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic,
		PKeyIndex:   0, Port: 1, Timeout: 31, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 31,
		MaxRdAtomic: 128, MaxDestRdAtomic: 128, SQDrainNotify: true,
		Cap: Cap{MaxSendWR: 0x4000, MaxRecvWR: 0x4000, MaxSendSGE: 32, MaxRecvSGE: 32, MaxInlineData: 4096},
	}
}

// rcBits is every attribute Validate checks on an RC QP, except ALT_PATH and
// RATE_LIMIT, which it refuses.
const rcBits = AttrKnown &^ (AttrAltPath | AttrRateLimit | AttrQKey)

func TestValidateAcceptsEdges(t *testing.T) {
	a := goodAttr()
	if err := Validate(RC, &a, rcBits, testLimits); err != nil {
		t.Fatalf("Validate(good RC attr) = %v", err)
	}
	u := Attr{QKey: 0x7fffffff, PKeyIndex: 0, Port: 1}
	if err := Validate(UD, &u, AttrQKey|AttrPKeyIndex|AttrPort, testLimits); err != nil {
		t.Fatalf("Validate(good UD attr) = %v", err)
	}
	if err := Validate(RC, nil, 0, testLimits); !errors.Is(err, ErrBadAttr) {
		t.Errorf("Validate(nil) = %v, want ErrBadAttr", err)
	}
}

func TestValidateBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string // also what the error must name
		typ  Type
		mask AttrMask
		set  func(*Attr)
		lim  func(*Limits)
		err  error
	}{
		{"STATE", RC, AttrState, func(a *Attr) { a.State = 7 }, nil, ErrBadAttr},
		{"CUR_STATE", RC, AttrCurState, func(a *Attr) { a.CurState = 255 }, nil, ErrBadAttr},
		{"ACCESS_FLAGS", RC, AttrAccessFlags, func(a *Attr) { a.AccessFlags = 1 << 4 }, nil, ErrBadAttr}, // MW_BIND
		{"ACCESS_FLAGS", RC, AttrAccessFlags, func(a *Attr) { a.AccessFlags = 1 << 20 }, nil, ErrBadAttr},
		{"ACCESS_FLAGS", UD, AttrAccessFlags, func(a *Attr) { a.AccessFlags = AccessRemoteWrite }, nil, ErrBadAttr},
		{"PKEY_INDEX", RC, AttrPKeyIndex, func(a *Attr) { a.PKeyIndex = 1 }, nil, ErrBadAttr},
		{"PKEY_INDEX", RC, AttrPKeyIndex, func(a *Attr) { a.PKeyIndex = 64 }, func(l *Limits) { l.NumPKeys = 64 }, ErrBadAttr},
		{"PORT", RC, AttrPort, func(a *Attr) { a.Port = 0 }, nil, ErrBadAttr},
		{"PORT", RC, AttrPort, func(a *Attr) { a.Port = 2 }, nil, ErrBadAttr},
		{"QKEY", UD, AttrQKey, func(a *Attr) { a.QKey = 0x80000000 }, nil, ErrNotPermitted},
		{"PATH_MTU", RC, AttrPathMTU, func(a *Attr) { a.PathMTU = 0 }, nil, ErrBadAttr},
		{"PATH_MTU", RC, AttrPathMTU, func(a *Attr) { a.PathMTU = 6 }, nil, ErrBadAttr},
		{"PATH_MTU", RC, AttrPathMTU, func(a *Attr) { a.PathMTU = MTU4096 }, func(l *Limits) { l.MaxMTU = MTU1024 }, ErrBadAttr},
		{"TIMEOUT", RC, AttrTimeout, func(a *Attr) { a.Timeout = 32 }, nil, ErrBadAttr},
		{"RETRY_CNT", RC, AttrRetryCnt, func(a *Attr) { a.RetryCnt = 8 }, nil, ErrBadAttr},
		{"RNR_RETRY", RC, AttrRNRRetry, func(a *Attr) { a.RNRRetry = 8 }, nil, ErrBadAttr},
		{"RQ_PSN", RC, AttrRQPSN, func(a *Attr) { a.RQPSN = 1 << 24 }, nil, ErrBadAttr},
		{"MAX_QP_RD_ATOMIC", RC, AttrMaxQPRdAtomic, func(a *Attr) { a.MaxRdAtomic = 129 }, nil, ErrBadAttr},
		{"ALT_PATH", RC, AttrAltPath, func(a *Attr) {}, nil, ErrNotSupported},
		{"MIN_RNR_TIMER", RC, AttrMinRNRTimer, func(a *Attr) { a.MinRNRTimer = 32 }, nil, ErrBadAttr},
		{"SQ_PSN", RC, AttrSQPSN, func(a *Attr) { a.SQPSN = wire.PSN(0xffffffff) }, nil, ErrBadAttr},
		{"MAX_DEST_RD_ATOMIC", RC, AttrMaxDestRdAtomic, func(a *Attr) { a.MaxDestRdAtomic = 5 }, func(l *Limits) { l.MaxDestRdAtomic = 4 }, ErrBadAttr},
		{"PATH_MIG_STATE", RC, AttrPathMigState, func(a *Attr) { a.PathMigState = 3 }, nil, ErrBadAttr},
		{"max_send_wr", RC, AttrCap, func(a *Attr) { a.Cap.MaxSendWR = 0x4001 }, nil, ErrBadAttr},
		{"max_recv_wr", RC, AttrCap, func(a *Attr) { a.Cap.MaxRecvWR = 0x4001 }, nil, ErrBadAttr},
		{"max_send_sge", RC, AttrCap, func(a *Attr) { a.Cap.MaxSendSGE = 33 }, nil, ErrBadAttr},
		{"max_recv_sge", RC, AttrCap, func(a *Attr) { a.Cap.MaxRecvSGE = 33 }, nil, ErrBadAttr},
		{"max_inline_data", RC, AttrCap, func(a *Attr) { a.Cap.MaxInlineData = 4097 }, nil, ErrBadAttr},
		{"DEST_QPN", RC, AttrDestQPN, func(a *Attr) { a.DestQPN = 1 << 24 }, nil, ErrBadAttr},
		{"RATE_LIMIT", RC, AttrRateLimit, func(a *Attr) {}, nil, ErrNotSupported},
		{"0x200000", RC, 1 << 21, func(a *Attr) {}, nil, ErrUnexpectedAttr},
		{"0x80000000", RC, 1 << 31, func(a *Attr) {}, nil, ErrUnexpectedAttr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, lim := goodAttr(), testLimits
			tc.set(&a)
			if tc.lim != nil {
				tc.lim(&lim)
			}
			err := Validate(tc.typ, &a, tc.mask, lim)
			if !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if !strings.Contains(err.Error(), tc.name) {
				t.Errorf("error %q does not name %s", err, tc.name)
			}
			// The same bad value is ignored when its bit is not in the mask.
			if err := Validate(tc.typ, &a, 0, lim); err != nil {
				t.Errorf("with an empty mask: got %v, want nil", err)
			}
		})
	}
}

func TestValidateQKey(t *testing.T) {
	a := Attr{QKey: 0x80010000}
	if err := Validate(GSI, &a, AttrQKey, testLimits); err != nil {
		t.Errorf("GSI with QP1's controlled Q_Key: %v", err)
	}
	lim := testLimits
	lim.PrivilegedQKey = true
	if err := Validate(UD, &a, AttrQKey, lim); err != nil {
		t.Errorf("UD controlled Q_Key with PrivilegedQKey: %v", err)
	}
}

func TestValidateCapWithSRQ(t *testing.T) {
	c := Cap{MaxSendWR: 1, MaxRecvWR: 1 << 30, MaxRecvSGE: 1 << 30}
	if err := ValidateCap(c, testLimits, true); err != nil {
		t.Errorf("with an SRQ the receive sizes are not checked: %v", err)
	}
	if err := ValidateCap(c, testLimits, false); !errors.Is(err, ErrBadAttr) {
		t.Errorf("without an SRQ: got %v, want ErrBadAttr", err)
	}
}

func TestValidateDoesNotAllocate(t *testing.T) {
	a := goodAttr()
	if n := testing.AllocsPerRun(1000, func() {
		if Validate(RC, &a, rcBits, testLimits) != nil {
			panic("Validate failed")
		}
	}); n != 0 {
		t.Errorf("Validate allocates %v times per call, want 0", n)
	}
}
