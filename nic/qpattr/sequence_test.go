// Whole Modify QP sequences as real consumers issue them.

package qpattr

import (
	"errors"
	"testing"
)

// testLimits are rxe-like device limits.
var testLimits = Limits{
	MaxRdAtomic: 128, MaxDestRdAtomic: 128, NumPorts: 1, NumPKeys: 1, MaxMTU: MTU4096,
	MaxQPWR: 0x4000, MaxSendSGE: 32, MaxRecvSGE: 32, MaxInlineData: 4096,
}

type step struct {
	mask AttrMask
	attr Attr
	want State
}

// run drives a QP of type typ from RESET through steps with CheckModifyAttr.
func run(t *testing.T, typ Type, steps []step) {
	t.Helper()
	qp := Reset
	for _, s := range steps {
		next, err := CheckModifyAttr(qp, typ, &s.attr, s.mask, testLimits)
		if err != nil {
			t.Fatalf("%v %v -> %v with %v: %v", typ, qp, s.want, s.mask, err)
		}
		if next != s.want {
			t.Fatalf("%v %v with %v: moved to %v, want %v", typ, qp, s.mask, next, s.want)
		}
		qp = next
	}
}

// ibv_rc_pingpong's three modifies (libibverbs/examples/rc_pingpong.c).
func TestSequenceRCPingpong(t *testing.T) {
	run(t, RC, []step{
		{AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags,
			Attr{State: Init, Port: 1}, Init},
		{AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			Attr{State: RTR, PathMTU: MTU1024, DestQPN: 0x11, RQPSN: 0x123456, MaxDestRdAtomic: 1, MinRNRTimer: 12}, RTR},
		{AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
			Attr{State: RTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0xabcdef, MaxRdAtomic: 1}, RTS},
	})
}

// ibv_ud_pingpong: INIT with QKEY, RTR with STATE alone, RTS with SQ_PSN.
func TestSequenceUDPingpong(t *testing.T) {
	run(t, UD, []step{
		{AttrState | AttrPKeyIndex | AttrPort | AttrQKey, Attr{State: Init, Port: 1, QKey: 0x11111111}, Init},
		{AttrState, Attr{State: RTR}, RTR},
		{AttrState | AttrSQPSN, Attr{State: RTS, SQPSN: 0x1234}, RTS},
	})
}

// ibv_uc_pingpong, then a drain and resume.
func TestSequenceUCDrainResume(t *testing.T) {
	run(t, UC, []step{
		{AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags,
			Attr{State: Init, Port: 1, AccessFlags: AccessRemoteWrite}, Init},
		{AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
			Attr{State: RTR, PathMTU: MTU4096, DestQPN: 0xffffff, RQPSN: 0}, RTR},
		{AttrState | AttrSQPSN, Attr{State: RTS, SQPSN: 0xffffff}, RTS},
		{AttrState | AttrEnSQDAsyncNotify, Attr{State: SQD, SQDrainNotify: true}, SQD},
		{AttrPKeyIndex | AttrAccessFlags, Attr{AccessFlags: AccessRemoteWrite}, SQD},
		{AttrState, Attr{State: RTS}, RTS},
		{AttrState, Attr{State: Err}, Err},
		{AttrState, Attr{State: Reset}, Reset},
	})
}

// QP1 as ib_mad brings it up: no PORT (bound at create), the controlled QP1 Q_Key.
func TestSequenceGSI(t *testing.T) {
	run(t, GSI, []step{
		{AttrState | AttrPKeyIndex | AttrQKey, Attr{State: Init, QKey: 0x80010000}, Init},
		{AttrState, Attr{State: RTR}, RTR},
		{AttrState | AttrSQPSN, Attr{State: RTS}, RTS},
	})
	_, err := CheckModifyAttr(Reset, GSI, &Attr{State: Init, Port: 1},
		AttrState|AttrPKeyIndex|AttrQKey|AttrPort, testLimits)
	if !errors.Is(err, ErrUnexpectedAttr) {
		t.Errorf("GSI RESET -> INIT with PORT: got %v, want ErrUnexpectedAttr", err)
	}
}

// An unreliable QP whose send failed (the engine moved it to SQE) resumes with
// SQE -> RTS, asserting its current state.
func TestSequenceSQEToRTS(t *testing.T) {
	for _, typ := range []Type{UD, UC, GSI} {
		next, err := CheckModifyAttr(SQE, typ, &Attr{State: RTS, CurState: SQE}, AttrState|AttrCurState, testLimits)
		if err != nil || next != RTS {
			t.Errorf("%v SQE -> RTS: got %v, %v; want RTS, nil", typ, next, err)
		}
	}
	// RC never enters SQE, but the table (like the kernel's) lets it leave with STATE
	// alone; it takes no CUR_STATE.
	if _, err := CheckModifyAttr(SQE, RC, &Attr{State: RTS, CurState: SQE}, AttrState|AttrCurState, testLimits); !errors.Is(err, ErrUnexpectedAttr) {
		t.Errorf("RC SQE -> RTS with CUR_STATE: got %v, want ErrUnexpectedAttr", err)
	}
}

func TestSequenceResetFromEveryState(t *testing.T) {
	for s := range State(7) {
		for _, typ := range allTypes {
			if err := CheckModify(s, Reset, typ, AttrState); err != nil {
				t.Errorf("%v %v -> RESET: %v", typ, s, err)
			}
			err := CheckModify(s, Err, typ, AttrState)
			if s == Reset && !errors.Is(err, ErrBadTransition) {
				t.Errorf("%v RESET -> ERR: got %v, want ErrBadTransition (not in the kernel table)", typ, err)
			}
			if s != Reset && err != nil {
				t.Errorf("%v %v -> ERR: %v", typ, s, err)
			}
		}
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name      string
		qp        State
		attr      *Attr
		mask      AttrMask
		cur, next State
		err       error
	}{
		{"no STATE stays", RTS, &Attr{State: Err}, AttrAccessFlags, RTS, RTS, nil},
		{"STATE moves", RTS, &Attr{State: SQD}, AttrState, RTS, SQD, nil},
		{"CUR_STATE matches", SQE, &Attr{State: RTS, CurState: SQE}, AttrState | AttrCurState, SQE, RTS, nil},
		{"CUR_STATE stale", SQE, &Attr{State: RTS, CurState: RTS}, AttrState | AttrCurState, SQE, SQE, ErrBadTransition},
		{"CUR_STATE ignored without bit", SQE, &Attr{State: RTS, CurState: RTS}, AttrState, SQE, RTS, nil},
		{"CUR_STATE out of range", RTS, &Attr{CurState: 7}, AttrCurState, RTS, RTS, ErrBadAttr},
		{"STATE out of range", RTS, &Attr{State: 9}, AttrState, RTS, RTS, ErrBadAttr},
		{"nil attr", RTS, nil, AttrState, RTS, RTS, ErrBadAttr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, next, err := Resolve(tc.qp, tc.attr, tc.mask)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == nil && (cur != tc.cur || next != tc.next) {
				t.Errorf("got %v -> %v, want %v -> %v", cur, next, tc.cur, tc.next)
			}
		})
	}
}

func TestCheckModifyAttrReportsEachStage(t *testing.T) {
	// Stale CUR_STATE, a bad transition, a missing attribute, a bad value.
	for _, tc := range []struct {
		name string
		qp   State
		typ  Type
		attr Attr
		mask AttrMask
		err  error
	}{
		{"stale CUR_STATE", RTS, UD, Attr{State: RTS, CurState: SQE}, AttrState | AttrCurState, ErrBadTransition},
		{"RTR -> INIT", RTR, RC, Attr{State: Init}, AttrState, ErrBadTransition},
		{"RC RTR -> RTS without TIMEOUT", RTR, RC, Attr{State: RTS},
			AttrState | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic, ErrMissingAttr},
		{"TIMEOUT 32", RTR, RC, Attr{State: RTS, Timeout: 32},
			AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic, ErrBadAttr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, err := CheckModifyAttr(tc.qp, tc.typ, &tc.attr, tc.mask, testLimits)
			if !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if next != tc.qp {
				t.Errorf("failed modify returned state %v, want the unchanged %v", next, tc.qp)
			}
		})
	}
}

func TestCheckDrain(t *testing.T) {
	for _, tc := range []struct {
		cur, next State
		draining  bool
		ok        bool
	}{
		{SQD, RTS, true, false},
		{SQD, SQD, true, false},
		{SQD, Err, true, true},
		{SQD, Reset, true, true},
		{SQD, RTS, false, true},
		{SQD, SQD, false, true},
		{RTS, RTS, true, true}, // only SQD drains
	} {
		err := CheckDrain(tc.cur, tc.next, tc.draining)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrDraining)) {
			t.Errorf("CheckDrain(%v, %v, %v) = %v, want ok=%v", tc.cur, tc.next, tc.draining, err, tc.ok)
		}
	}
}
