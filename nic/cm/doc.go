// Package cm is xrnic's InfiniBand communication manager (IBTA Vol. 1 chapter 12),
// run as Linux's ib_cm runs it: the CM messages travel as MADs on QP1 (package
// mad), each connection is a CM ID with ib_cm's states, requests are retransmitted
// on the timeouts the messages carry, duplicates are answered from the state
// they find, and a closed connection waits out TimeWait before its IDs are
// reused.
//
// The package knows nothing of QPs or of the wire: a Transport sends MADs, the
// owner of QP1 hands received ones to CM.Receive, and time comes from an injected
// clock.Clock, so that every transition is tested on a manual clock. The rdma_cm
// layer (port spaces, the rdma_cm header, QP transitions) sits above, in
// verbs/rdmacm.
//
// The PSN rule is Linux's (cm_format_req, cm_req_handler, cm_rep_handler): the
// Starting PSN a side puts in its REQ or REP is the PSN it expects to receive,
// so the peer's send queue starts there.
package cm
