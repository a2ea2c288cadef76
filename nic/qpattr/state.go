// QP states, QP types, and what each state lets the engine do.

package qpattr

import "strconv"

// State is a QP state (IBTA Vol 1 §10.3.1), numbered as enum ibv_qp_state and the
// kernel's enum ib_qp_state. A State is a plain value.
type State uint8

// The QP states.
const (
	Reset State = iota // IBV_QPS_RESET
	Init               // IBV_QPS_INIT
	RTR                // IBV_QPS_RTR: ready to receive
	RTS                // IBV_QPS_RTS: ready to send
	SQD                // IBV_QPS_SQD: send queue drain
	SQE                // IBV_QPS_SQE: send queue error
	Err                // IBV_QPS_ERR

	numStates = iota
)

var stateNames = [numStates]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// Valid reports whether s is one of the seven states.
func (s State) Valid() bool { return s < numStates }

// String returns the state as the rdma tool (iproute2 rdma/res-qp.c) and rxe's
// qps2str print it: "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"; "State(9)"
// when out of range.
func (s State) String() string {
	if s.Valid() {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Type is a QP transport service type, numbered as the kernel's enum ib_qp_type
// (RC, UC and UD also as enum ibv_qp_type). The zero Type is invalid. A Type is a
// plain value.
type Type uint8

// The QP types xrnic has.
const (
	GSI Type = 1 // IB_QPT_GSI: QP1, the general services (MAD/CM) QP; UD transport
	RC  Type = 2 // IB_QPT_RC, IBV_QPT_RC: reliable connected
	UC  Type = 3 // IB_QPT_UC, IBV_QPT_UC: unreliable connected
	UD  Type = 4 // IB_QPT_UD, IBV_QPT_UD: unreliable datagram

	numTypes = 5 // array length for tables indexed by Type
)

// Valid reports whether t is RC, UC, UD or GSI.
func (t Type) Valid() bool { return t >= GSI && t <= UD }

// Connected reports whether t is a connected service (RC or UC): it has a
// destination QPN and an address vector of its own and no Q_Key.
func (t Type) Connected() bool { return t == RC || t == UC }

// String returns "RC", "UC", "UD" or "GSI" (as the rdma tool prints them); "Type(7)"
// when invalid.
func (t Type) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	case GSI:
		return "GSI"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// CanPostSend reports whether a Post Send in state s is accepted (IBTA §11.4.1.1).
// In RESET, INIT and RTR (and for an invalid state) it fails at once; in RTS it is
// processed; in SQD it waits for the drain to end; in SQE and ERR it is accepted and
// completes with a flush error.
func CanPostSend(s State) bool {
	switch s {
	case RTS, SQD, SQE, Err:
		return true
	}
	return false
}

// CanPostRecv reports whether a Post Receive in state s is accepted (IBTA
// §11.4.1.2): from INIT on. In INIT it waits for RTR; in ERR it completes with a
// flush error; in RESET (and for an invalid state) it fails at once.
func CanPostRecv(s State) bool {
	switch s {
	case Init, RTR, RTS, SQD, SQE, Err:
		return true
	}
	return false
}

// ProcessesIncoming reports whether the QP handles packets that arrive for it in
// state s: RTR, RTS, SQD and SQE. In RESET, INIT and ERR they are dropped silently.
// (In SQD and SQE the receive side, and for RC the completion of sends already under
// way, carry on.)
func ProcessesIncoming(s State) bool {
	switch s {
	case RTR, RTS, SQD, SQE:
		return true
	}
	return false
}

// StartsSends reports whether the requester may start a send WQE in state s: RTS
// only. In SQD the WQEs already started finish; nothing new starts.
func StartsSends(s State) bool { return s == RTS }

// Flushes reports whether state s completes every WR on both queues, outstanding
// and newly posted, with a flush error (IBV_WC_WR_FLUSH_ERR): ERR.
func Flushes(s State) bool { return s == Err }

// FlushesSend reports whether state s flushes the send queue: ERR, and SQE (where
// the receive queue keeps working).
func FlushesSend(s State) bool { return s == Err || s == SQE }
