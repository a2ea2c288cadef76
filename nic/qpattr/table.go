// The Modify QP transition table and the checks built on it.

package qpattr

import "fmt"

// rule is one (current, next) cell of the table: whether the transition exists, and
// for each QP type the attributes it requires and the ones it also allows.
type rule struct {
	valid    bool
	req, opt [numTypes]AttrMask
}

// Attribute sets that recur in the table.
const (
	connOptRTS = AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState // UC into RTS
	rcOptRTS   = connOptRTS | AttrMinRNRTimer                                    // RC into RTS
	udOptRTS   = AttrCurState | AttrQKey                                         // UD, GSI into RTS
)

// table is Linux's qp_state_table (drivers/infiniband/core/verbs.c) for RC, UC, UD
// and GSI: table[cur][next]. A missing cell is an invalid transition; a missing type
// in a valid cell requires and allows nothing beyond STATE. Notable: RESET->ERR is
// not a transition; the GSI QP takes no PORT (it is bound to its port when created);
// SQD->SQD for RC may change the path (PORT, AV) and the retry and RDMA limits.
var table = [numStates][numStates]rule{
	Reset: {
		Reset: {valid: true},
		Init: {valid: true, req: [numTypes]AttrMask{
			UD:  AttrPKeyIndex | AttrPort | AttrQKey,
			UC:  AttrPKeyIndex | AttrPort | AttrAccessFlags,
			RC:  AttrPKeyIndex | AttrPort | AttrAccessFlags,
			GSI: AttrPKeyIndex | AttrQKey,
		}},
	},
	Init: {
		Reset: {valid: true},
		Err:   {valid: true},
		Init: {valid: true, opt: [numTypes]AttrMask{
			UD:  AttrPKeyIndex | AttrPort | AttrQKey,
			UC:  AttrPKeyIndex | AttrPort | AttrAccessFlags,
			RC:  AttrPKeyIndex | AttrPort | AttrAccessFlags,
			GSI: AttrPKeyIndex | AttrQKey,
		}},
		RTR: {valid: true,
			req: [numTypes]AttrMask{
				UC: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
				RC: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			},
			opt: [numTypes]AttrMask{
				UD:  AttrPKeyIndex | AttrQKey,
				UC:  AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				RC:  AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				GSI: AttrPKeyIndex | AttrQKey,
			}},
	},
	RTR: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true,
			req: [numTypes]AttrMask{
				UD:  AttrSQPSN,
				UC:  AttrSQPSN,
				RC:  AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
				GSI: AttrSQPSN,
			},
			opt: [numTypes]AttrMask{UD: udOptRTS, UC: connOptRTS, RC: rcOptRTS, GSI: udOptRTS}},
	},
	RTS: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true,
			opt: [numTypes]AttrMask{UD: udOptRTS, UC: connOptRTS, RC: rcOptRTS, GSI: udOptRTS}},
		SQD: {valid: true, opt: [numTypes]AttrMask{
			UD: AttrEnSQDAsyncNotify, UC: AttrEnSQDAsyncNotify,
			RC: AttrEnSQDAsyncNotify, GSI: AttrEnSQDAsyncNotify,
		}},
	},
	SQD: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true,
			opt: [numTypes]AttrMask{UD: udOptRTS, UC: connOptRTS, RC: rcOptRTS, GSI: udOptRTS}},
		SQD: {valid: true, opt: [numTypes]AttrMask{
			UD: AttrPKeyIndex | AttrQKey,
			UC: AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState,
			RC: AttrPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry |
				AttrMaxQPRdAtomic | AttrMaxDestRdAtomic | AttrAltPath | AttrAccessFlags |
				AttrPKeyIndex | AttrMinRNRTimer | AttrPathMigState,
			GSI: AttrPKeyIndex | AttrQKey,
		}},
	},
	SQE: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true, opt: [numTypes]AttrMask{
			UD:  AttrCurState | AttrQKey,
			UC:  AttrCurState | AttrAccessFlags,
			GSI: AttrCurState | AttrQKey,
		}},
	},
	Err: {
		Reset: {valid: true},
		Err:   {valid: true},
	},
}

// Transition reports whether Modify QP may take a QP of type t from cur to next, and
// if so which attributes it requires and which it also allows. STATE is in neither
// set: it is always allowed, and needed exactly when next differs from cur. ok is
// false for an out-of-range state or type.
func Transition(cur, next State, t Type) (required, optional AttrMask, ok bool) {
	if !cur.Valid() || !next.Valid() || !t.Valid() {
		return 0, 0, false
	}
	r := &table[cur][next]
	if !r.valid {
		return 0, 0, false
	}
	return r.req[t], r.opt[t], true
}

// CheckModify is ib_modify_qp_is_ok: it reports whether a Modify QP with attribute
// mask may take a QP of type t from cur to next. cur is the state the check runs
// from: the QP's state, or the CUR_STATE the consumer gave (see Resolve); the table
// allows CUR_STATE only when leaving RTR, RTS, SQD or SQE for RTS. A mask without
// STATE modifies attributes in place, so it needs next == cur.
//
// The error wraps ErrBadTransition (naming the transition and type, e.g. "RC RTR ->
// INIT"), ErrMissingAttr (naming the missing bits) or ErrUnexpectedAttr (naming the
// extra bits). CheckModify does not allocate when it returns nil.
func CheckModify(cur, next State, t Type, mask AttrMask) error {
	req, opt, ok := Transition(cur, next, t)
	if !ok {
		return badTransition(cur, next, t)
	}
	if next != cur && mask&AttrState == 0 {
		return fmt.Errorf("qpattr: %s %s -> %s: mask %s lacks STATE: %w", t, cur, next, mask, ErrMissingAttr)
	}
	if missing := req &^ mask; missing != 0 {
		return fmt.Errorf("qpattr: %s %s -> %s: requires %s: %w", t, cur, next, missing, ErrMissingAttr)
	}
	if extra := mask &^ (req | opt | AttrState); extra != 0 {
		return fmt.Errorf("qpattr: %s %s -> %s: does not take %s (allows %s): %w",
			t, cur, next, extra, req|opt|AttrState, ErrUnexpectedAttr)
	}
	return nil
}

func badTransition(cur, next State, t Type) error {
	switch {
	case !t.Valid():
		return fmt.Errorf("qpattr: unknown QP type %s: %w", t, ErrBadTransition)
	case !cur.Valid() || !next.Valid():
		return fmt.Errorf("qpattr: %s %s -> %s: unknown state: %w", t, cur, next, ErrBadTransition)
	}
	return fmt.Errorf("qpattr: %s %s -> %s: %w", t, cur, next, ErrBadTransition)
}

// Resolve works out the transition a Modify QP asks for, as the kernel does
// (rxe's __qp_chk_state): from the QP's state qp, to a.State when the mask has STATE
// and to qp otherwise. A CUR_STATE in the mask must name a valid state equal to qp:
// the engine's state is authoritative, so a different one means the consumer's view
// is stale, and Resolve says so (ErrBadTransition) instead of trusting it.
func Resolve(qp State, a *Attr, mask AttrMask) (cur, next State, err error) {
	cur, next = qp, qp
	if a == nil {
		return cur, next, errNilAttr
	}
	if mask&AttrCurState != 0 {
		if !a.CurState.Valid() {
			return cur, next, fmt.Errorf("qpattr: CUR_STATE %s: %w", a.CurState, ErrBadAttr)
		}
		if a.CurState != qp {
			return cur, next, fmt.Errorf("qpattr: CUR_STATE says %s but the QP is in %s: %w",
				a.CurState, qp, ErrBadTransition)
		}
	}
	if mask&AttrState != 0 {
		if !a.State.Valid() {
			return cur, next, fmt.Errorf("qpattr: STATE %s: %w", a.State, ErrBadAttr)
		}
		next = a.State
	}
	return cur, next, nil
}

// CheckDrain applies the IBTA rule for SQD (§10.3.1): while the send queue is still
// draining (draining is true), a QP in SQD may only be moved to RESET or ERR;
// SQD->SQD attribute changes and SQD->RTS must wait for the drain to finish. rxe
// refuses RESET as well; IBTA allows Reset from every state, and so do we.
func CheckDrain(cur, next State, draining bool) error {
	if cur == SQD && draining && next != Reset && next != Err {
		return fmt.Errorf("qpattr: SQD -> %s before the send queue drained: %w", next, ErrDraining)
	}
	return nil
}

// CheckModifyAttr checks a whole Modify QP call on a QP of type t in state qp: it
// resolves the transition (Resolve), checks it against the table (CheckModify) and
// checks the attribute values (Validate). It returns the state the QP moves to. The
// engine adds what this package cannot see: the address vector, CheckDrain, and
// that an INIT->RTR AV names the QP's own port.
func CheckModifyAttr(qp State, t Type, a *Attr, mask AttrMask, lim Limits) (next State, err error) {
	cur, next, err := Resolve(qp, a, mask)
	if err != nil {
		return qp, err
	}
	if err := CheckModify(cur, next, t, mask); err != nil {
		return qp, err
	}
	if err := Validate(t, a, mask, lim); err != nil {
		return qp, err
	}
	return next, nil
}
