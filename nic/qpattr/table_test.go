// The transition table against Linux's qp_state_table, written out independently.

package qpattr

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// ibvBits is enum ibv_qp_attr_mask from libibverbs/verbs.h, by name without the
// IBV_QP_ prefix. It is the test's own copy: nothing here reads the package's names.
var ibvBits = map[string]uint32{
	"STATE":               1 << 0,
	"CUR_STATE":           1 << 1,
	"EN_SQD_ASYNC_NOTIFY": 1 << 2,
	"ACCESS_FLAGS":        1 << 3,
	"PKEY_INDEX":          1 << 4,
	"PORT":                1 << 5,
	"QKEY":                1 << 6,
	"AV":                  1 << 7,
	"PATH_MTU":            1 << 8,
	"TIMEOUT":             1 << 9,
	"RETRY_CNT":           1 << 10,
	"RNR_RETRY":           1 << 11,
	"RQ_PSN":              1 << 12,
	"MAX_QP_RD_ATOMIC":    1 << 13,
	"ALT_PATH":            1 << 14,
	"MIN_RNR_TIMER":       1 << 15,
	"SQ_PSN":              1 << 16,
	"MAX_DEST_RD_ATOMIC":  1 << 17,
	"PATH_MIG_STATE":      1 << 18,
	"CAP":                 1 << 19,
	"DEST_QPN":            1 << 20,
	"RATE_LIMIT":          1 << 25,
}

// kernelRows is qp_state_table from Linux drivers/infiniband/core/verbs.c (v6.x),
// transcribed by hand for the QP types xrnic has (IB_QPT_RC, _UC, _UD, _GSI; the
// SMI, XRC and raw packet columns are left out). One row per cell and type that has
// attributes; a row with type "" declares a valid cell whose types (all, or those not
// listed) take nothing but STATE. Every cell not declared is invalid.
var kernelRows = []struct{ cur, next, typ, req, opt string }{
	{"RESET", "RESET", "", "", ""},
	{"RESET", "INIT", "UD", "PKEY_INDEX|PORT|QKEY", ""},
	{"RESET", "INIT", "UC", "PKEY_INDEX|PORT|ACCESS_FLAGS", ""},
	{"RESET", "INIT", "RC", "PKEY_INDEX|PORT|ACCESS_FLAGS", ""},
	{"RESET", "INIT", "GSI", "PKEY_INDEX|QKEY", ""},

	{"INIT", "RESET", "", "", ""},
	{"INIT", "ERR", "", "", ""},
	{"INIT", "INIT", "UD", "", "PKEY_INDEX|PORT|QKEY"},
	{"INIT", "INIT", "UC", "", "PKEY_INDEX|PORT|ACCESS_FLAGS"},
	{"INIT", "INIT", "RC", "", "PKEY_INDEX|PORT|ACCESS_FLAGS"},
	{"INIT", "INIT", "GSI", "", "PKEY_INDEX|QKEY"},
	{"INIT", "RTR", "UD", "", "PKEY_INDEX|QKEY"},
	{"INIT", "RTR", "UC", "AV|PATH_MTU|DEST_QPN|RQ_PSN", "ALT_PATH|ACCESS_FLAGS|PKEY_INDEX"},
	{"INIT", "RTR", "RC", "AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER", "ALT_PATH|ACCESS_FLAGS|PKEY_INDEX"},
	{"INIT", "RTR", "GSI", "", "PKEY_INDEX|QKEY"},

	{"RTR", "RESET", "", "", ""},
	{"RTR", "ERR", "", "", ""},
	{"RTR", "RTS", "UD", "SQ_PSN", "CUR_STATE|QKEY"},
	{"RTR", "RTS", "UC", "SQ_PSN", "CUR_STATE|ALT_PATH|ACCESS_FLAGS|PATH_MIG_STATE"},
	{"RTR", "RTS", "RC", "TIMEOUT|RETRY_CNT|RNR_RETRY|SQ_PSN|MAX_QP_RD_ATOMIC", "CUR_STATE|ALT_PATH|ACCESS_FLAGS|MIN_RNR_TIMER|PATH_MIG_STATE"},
	{"RTR", "RTS", "GSI", "SQ_PSN", "CUR_STATE|QKEY"},

	{"RTS", "RESET", "", "", ""},
	{"RTS", "ERR", "", "", ""},
	{"RTS", "RTS", "UD", "", "CUR_STATE|QKEY"},
	{"RTS", "RTS", "UC", "", "CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE"},
	{"RTS", "RTS", "RC", "", "CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE|MIN_RNR_TIMER"},
	{"RTS", "RTS", "GSI", "", "CUR_STATE|QKEY"},
	{"RTS", "SQD", "UD", "", "EN_SQD_ASYNC_NOTIFY"},
	{"RTS", "SQD", "UC", "", "EN_SQD_ASYNC_NOTIFY"},
	{"RTS", "SQD", "RC", "", "EN_SQD_ASYNC_NOTIFY"},
	{"RTS", "SQD", "GSI", "", "EN_SQD_ASYNC_NOTIFY"},

	{"SQD", "RESET", "", "", ""},
	{"SQD", "ERR", "", "", ""},
	{"SQD", "RTS", "UD", "", "CUR_STATE|QKEY"},
	{"SQD", "RTS", "UC", "", "CUR_STATE|ALT_PATH|ACCESS_FLAGS|PATH_MIG_STATE"},
	{"SQD", "RTS", "RC", "", "CUR_STATE|ALT_PATH|ACCESS_FLAGS|MIN_RNR_TIMER|PATH_MIG_STATE"},
	{"SQD", "RTS", "GSI", "", "CUR_STATE|QKEY"},
	{"SQD", "SQD", "UD", "", "PKEY_INDEX|QKEY"},
	{"SQD", "SQD", "UC", "", "AV|ALT_PATH|ACCESS_FLAGS|PKEY_INDEX|PATH_MIG_STATE"},
	{"SQD", "SQD", "RC", "", "PORT|AV|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|MAX_DEST_RD_ATOMIC|ALT_PATH|ACCESS_FLAGS|PKEY_INDEX|MIN_RNR_TIMER|PATH_MIG_STATE"},
	{"SQD", "SQD", "GSI", "", "PKEY_INDEX|QKEY"},

	{"SQE", "RESET", "", "", ""},
	{"SQE", "ERR", "", "", ""},
	{"SQE", "RTS", "", "", ""}, // RC: valid, nothing optional
	{"SQE", "RTS", "UD", "", "CUR_STATE|QKEY"},
	{"SQE", "RTS", "UC", "", "CUR_STATE|ACCESS_FLAGS"},
	{"SQE", "RTS", "GSI", "", "CUR_STATE|QKEY"},

	{"ERR", "RESET", "", "", ""},
	{"ERR", "ERR", "", "", ""},
}

// The enum values the test relies on: enum ibv_qp_state, and enum ib_qp_type for
// the types.
var (
	stateByName = map[string]State{"RESET": 0, "INIT": 1, "RTR": 2, "RTS": 3, "SQD": 4, "SQE": 5, "ERR": 6}
	typeByName  = map[string]Type{"GSI": 1, "RC": 2, "UC": 3, "UD": 4}
)

type cellKey struct {
	cur, next State
	typ       Type
}

type kernelCell struct{ req, opt uint32 }

// kernelTable turns kernelRows into (cur, next, type) -> masks; a key is present iff
// the transition is valid.
func kernelTable(t testing.TB) map[cellKey]kernelCell {
	t.Helper()
	parse := func(s string) uint32 {
		var m uint32
		if s == "" {
			return 0
		}
		for _, name := range strings.Split(s, "|") {
			b, ok := ibvBits[name]
			if !ok {
				t.Fatalf("kernelRows: unknown bit %q", name)
			}
			m |= b
		}
		return m
	}
	tab := make(map[cellKey]kernelCell)
	for _, r := range kernelRows {
		cur, ok1 := stateByName[r.cur]
		next, ok2 := stateByName[r.next]
		if !ok1 || !ok2 {
			t.Fatalf("kernelRows: bad state in %+v", r)
		}
		types := []string{"RC", "UC", "UD", "GSI"}
		if r.typ != "" {
			types = []string{r.typ}
		}
		for _, name := range types {
			k := cellKey{cur, next, typeByName[name]}
			if _, dup := tab[k]; dup && r.typ == "" {
				continue // a typed row already filled it
			}
			tab[k] = kernelCell{parse(r.req), parse(r.opt)}
		}
	}
	return tab
}

// kernelIsOK is ib_modify_qp_is_ok over the transcribed table, plus the one rule
// CheckModify adds because it takes next explicitly: a mask without STATE stays put.
func kernelIsOK(tab map[cellKey]kernelCell, cur, next State, typ Type, mask uint32) bool {
	const state, curState = 1 << 0, 1 << 1
	if mask&curState != 0 && cur != 2 && cur != 3 && cur != 4 && cur != 5 {
		return false
	}
	c, ok := tab[cellKey{cur, next, typ}]
	if !ok {
		return false
	}
	if mask&c.req != c.req || mask&^(c.req|c.opt|state) != 0 {
		return false
	}
	return next == cur || mask&state != 0
}

var allTypes = []Type{RC, UC, UD, GSI}

func TestTransitionMatchesKernelTable(t *testing.T) {
	tab := kernelTable(t)
	nvalid := 0
	for cur := range State(7) {
		for next := range State(7) {
			for _, typ := range allTypes {
				req, opt, ok := Transition(cur, next, typ)
				want, wantOK := tab[cellKey{cur, next, typ}]
				if ok != wantOK || uint32(req) != want.req || uint32(opt) != want.opt {
					t.Errorf("Transition(%v, %v, %v) = %v, %v, %v; want %v, %v, %v",
						cur, next, typ, req, opt, ok, AttrMask(want.req), AttrMask(want.opt), wantOK)
				}
				if ok {
					nvalid++
				}
			}
		}
	}
	// 22 valid (cur, next) cells, each valid for all four types.
	if nvalid != 22*4 {
		t.Errorf("%d valid (cur, next, type) triples, want %d", nvalid, 22*4)
	}
}

func TestTransitionOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		cur, next State
		typ       Type
	}{
		{Reset, Init, 0}, {Reset, Init, 5}, {Reset, Init, 255},
		{7, Reset, RC}, {Reset, 7, RC}, {255, 255, UD},
	} {
		if req, opt, ok := Transition(tc.cur, tc.next, tc.typ); ok || req != 0 || opt != 0 {
			t.Errorf("Transition(%v, %v, %v) = %v, %v, %v; want 0, 0, false", tc.cur, tc.next, tc.typ, req, opt, ok)
		}
		err := CheckModify(tc.cur, tc.next, tc.typ, AttrState)
		if !errors.Is(err, ErrBadTransition) {
			t.Errorf("CheckModify(%v, %v, %v) = %v; want ErrBadTransition", tc.cur, tc.next, tc.typ, err)
		}
	}
}

// TestCheckModifyEveryTransition walks every (cur, next, type): the required mask
// passes, each required bit left out is ErrMissingAttr naming it, each optional bit
// added passes, and every other bit added is ErrUnexpectedAttr naming it.
func TestCheckModifyEveryTransition(t *testing.T) {
	tab := kernelTable(t)
	nameOf := make(map[uint32]string)
	for n, b := range ibvBits {
		nameOf[b] = n
	}
	for cur := range State(7) {
		for next := range State(7) {
			for _, typ := range allTypes {
				t.Run(fmt.Sprintf("%v/%v->%v", typ, cur, next), func(t *testing.T) {
					c, valid := tab[cellKey{cur, next, typ}]
					base := AttrMask(c.req) | AttrState
					if !valid {
						err := CheckModify(cur, next, typ, base)
						if !errors.Is(err, ErrBadTransition) {
							t.Fatalf("got %v, want ErrBadTransition", err)
						}
						if want := fmt.Sprintf("%v %v -> %v", typ, cur, next); !strings.Contains(err.Error(), want) {
							t.Errorf("error %q does not name %q", err, want)
						}
						return
					}
					if err := CheckModify(cur, next, typ, base); err != nil {
						t.Fatalf("required mask %v: got %v, want nil", base, err)
					}
					for b := uint32(1); b != 0; b <<= 1 {
						switch {
						case c.req&b != 0:
							err := CheckModify(cur, next, typ, base&^AttrMask(b))
							if !errors.Is(err, ErrMissingAttr) {
								t.Errorf("without %s: got %v, want ErrMissingAttr", nameOf[b], err)
							} else if !strings.Contains(err.Error(), nameOf[b]) {
								t.Errorf("error %q does not name %s", err, nameOf[b])
							}
						case c.opt&b != 0 || b == 1:
							if err := CheckModify(cur, next, typ, base|AttrMask(b)); err != nil {
								t.Errorf("with optional %s: got %v, want nil", nameOf[b], err)
							}
						default:
							err := CheckModify(cur, next, typ, base|AttrMask(b))
							if !errors.Is(err, ErrUnexpectedAttr) {
								t.Errorf("with extra bit %#x: got %v, want ErrUnexpectedAttr", b, err)
							} else if n, ok := nameOf[b]; ok && !strings.Contains(err.Error(), n) {
								t.Errorf("error %q does not name %s", err, n)
							}
						}
					}
					// Without STATE the QP stays put: fine for cur == next only.
					err := CheckModify(cur, next, typ, base&^AttrState)
					if cur == next && err != nil {
						t.Errorf("attribute-only modify %v: got %v, want nil", base&^AttrState, err)
					}
					if cur != next && !errors.Is(err, ErrMissingAttr) {
						t.Errorf("no STATE: got %v, want ErrMissingAttr", err)
					}
				})
			}
		}
	}
}

// TestCheckModifyRandomMasks compares CheckModify with the kernel model on random
// masks, biased toward the bits each cell cares about.
func TestCheckModifyRandomMasks(t *testing.T) {
	tab := kernelTable(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		cur, next := State(rng.IntN(8)), State(rng.IntN(8))
		typ := Type(rng.IntN(6))
		c := tab[cellKey{cur, next, typ}]
		mask := (c.req | c.opt | 3) & rng.Uint32()
		if rng.IntN(4) == 0 {
			mask |= 1 << rng.IntN(32)
		}
		want := kernelIsOK(tab, cur, next, typ, mask)
		err := CheckModify(cur, next, typ, AttrMask(mask))
		if (err == nil) != want {
			t.Fatalf("CheckModify(%v, %v, %v, %v) = %v; kernel model says ok=%v", cur, next, typ, AttrMask(mask), err, want)
		}
	}
}

// FuzzCheckModify: CheckModify agrees with the kernel model on any input.
func FuzzCheckModify(f *testing.F) {
	f.Add(uint8(0), uint8(1), uint8(2), uint32(0x39))
	f.Add(uint8(1), uint8(2), uint8(2), uint32(0x3b181))
	f.Add(uint8(2), uint8(3), uint8(4), uint32(0x10001))
	f.Add(uint8(5), uint8(3), uint8(3), uint32(0xb))
	tab := kernelTable(f)
	f.Fuzz(func(t *testing.T, cur, next, typ uint8, mask uint32) {
		want := kernelIsOK(tab, State(cur), State(next), Type(typ), mask)
		err := CheckModify(State(cur), State(next), Type(typ), AttrMask(mask))
		if (err == nil) != want {
			t.Fatalf("CheckModify(%d, %d, %d, %#x) = %v; kernel model says ok=%v", cur, next, typ, mask, err, want)
		}
		if err != nil && !errors.Is(err, ErrBadTransition) && !errors.Is(err, ErrMissingAttr) && !errors.Is(err, ErrUnexpectedAttr) {
			t.Fatalf("error %v wraps no CheckModify sentinel", err)
		}
	})
}

// TestCurStateOnlyFromRTRRTSSQDSQE is ib_modify_qp_is_ok's explicit CUR_STATE rule;
// the table makes it hold on its own.
func TestCurStateOnlyFromRTRRTSSQDSQE(t *testing.T) {
	for cur := range State(7) {
		for next := range State(7) {
			for _, typ := range allTypes {
				_, opt, ok := Transition(cur, next, typ)
				if ok && opt&AttrCurState != 0 && cur != RTR && cur != RTS && cur != SQD && cur != SQE {
					t.Errorf("%v %v -> %v allows CUR_STATE", typ, cur, next)
				}
			}
		}
	}
}

func TestCheckModifyNamesTheTransition(t *testing.T) {
	err := CheckModify(RTR, Init, RC, AttrState)
	if !errors.Is(err, ErrBadTransition) {
		t.Fatalf("got %v, want ErrBadTransition", err)
	}
	if want := "RC RTR -> INIT"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
	err = CheckModify(Init, RTR, RC, AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN)
	if !errors.Is(err, ErrMissingAttr) || !strings.Contains(err.Error(), "MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC") {
		t.Errorf("got %v, want ErrMissingAttr naming MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC", err)
	}
	err = CheckModify(Reset, Init, UD, AttrState|AttrPKeyIndex|AttrPort|AttrQKey|AttrAccessFlags)
	if !errors.Is(err, ErrUnexpectedAttr) || !strings.Contains(err.Error(), "ACCESS_FLAGS") {
		t.Errorf("got %v, want ErrUnexpectedAttr naming ACCESS_FLAGS", err)
	}
}

func TestCheckModifyDoesNotAllocate(t *testing.T) {
	mask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	if n := testing.AllocsPerRun(1000, func() {
		if CheckModify(Init, RTR, RC, mask) != nil {
			panic("CheckModify failed")
		}
	}); n != 0 {
		t.Errorf("CheckModify allocates %v times per call, want 0", n)
	}
}

func BenchmarkCheckModify(b *testing.B) {
	mask := AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic
	b.ReportAllocs()
	for b.Loop() {
		if CheckModify(RTR, RTS, RC, mask) != nil {
			b.Fatal("CheckModify failed")
		}
	}
}

// TestIBVBits checks the test's own copy of enum ibv_qp_attr_mask: 21 contiguous
// bits and RATE_LIMIT.
func TestIBVBits(t *testing.T) {
	var all uint32
	for _, b := range ibvBits {
		all |= b
	}
	if all != 1<<21-1|1<<25 || bits.OnesCount32(all) != len(ibvBits) {
		t.Errorf("ibvBits covers %#x, want %#x", all, 1<<21-1|1<<25)
	}
}
