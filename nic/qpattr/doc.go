// Package qpattr is the queue pair's attributes as struct ibv_qp_attr has them
// (the state, the path MTU, the capabilities, the mask bits, and the QP types of
// ibv_qp_init_attr) and the IBTA state machine over them: the seven QP states, the
// Modify QP transitions between them and the attribute masks each transition
// requires and allows, and range checks of the attribute values. It holds no QPs
// and does no I/O; the engine owns the QPs and asks this package whether a Modify
// QP is legal.
//
// # The table
//
// Transition and CheckModify follow Linux's qp_state_table and ib_modify_qp_is_ok
// (drivers/infiniband/core/verbs.c), which is what every rdma-core consumer's
// ibv_modify_qp meets on Linux, for the four QP types xrnic has: RC, UC, UD and the
// GSI QP (QP1). The mask bits are those of enum ibv_qp_attr_mask. The table is the
// same for InfiniBand and RoCE: older kernels gave ib_modify_qp_is_ok a link-layer
// argument that added kernel-internal L2 bits (SMAC, ALT_SMAC, VID, ALT_VID: bits
// 21-24, never part of ibv_qp_attr_mask) on Ethernet; current kernels resolve those
// from the address vector instead. So a RoCE consumer sends the same masks an IB
// consumer does, PKEY_INDEX included (a RoCE port has a P_Key table holding the
// default 0xFFFF).
//
// # What each state means to the engine (IBTA Vol 1 §10.3.1)
//
//   - RESET: the state a QP is created in. Posting to either queue fails at once
//     (CanPostSend and CanPostRecv are false); incoming packets are dropped. Moving a
//     QP to RESET, which is legal from every state, empties both queues without
//     completions and forgets the connection: PSNs, MSN, outstanding reads and
//     atomics, retry counters (rxe_qp_reset).
//   - INIT: receives may be posted (and wait); posting a send fails at once. Incoming
//     packets are still dropped.
//   - RTR (ready to receive): the responder runs: incoming requests are processed and
//     consume receive WQEs. Posting a send still fails at once. The first packet that
//     arrives raises the Communication Established affiliated event.
//   - RTS (ready to send): the requester runs too; sends are posted and processed.
//   - SQD (send queue drain, entered only from RTS): sends may still be posted but no
//     new one is started; messages already under way finish (RC: until acknowledged),
//     then the QP raises the Send Queue Drained event if EN_SQD_ASYNC_NOTIFY asked for
//     it. Receives keep being processed. Until the drain completes the QP may only
//     leave for RESET or ERR (CheckDrain); afterwards SQD->SQD changes attributes and
//     SQD->RTS resumes.
//   - SQE (send queue error; UC, UD and GSI only): a send completed in error on an
//     unreliable QP; the engine moves the QP here on its own (no Modify QP leads into
//     SQE). The failed WR completes with its error, every other send WR (outstanding
//     or posted later) completes with a flush error, and receives go on. SQE->RTS
//     resumes sending. An RC QP never enters SQE: a send error on RC moves it to ERR.
//     (The kernel table still lists SQE->RTS for RC with no attributes; Transition
//     reports that as the kernel does.)
//   - ERR: every outstanding WR on both queues, and every WR posted from now on,
//     completes with a flush error (Flushes); no packet is sent and incoming packets
//     are dropped. Modify to ERR is legal from every state except RESET; the only
//     ways out are RESET and ERR->ERR. The engine also moves a QP to ERR on its own
//     (RC transport errors, fatal local errors).
//
// The Current QP State attribute (CUR_STATE, IBTA §11.2.5.2) is accepted only where
// the table allows it: leaving RTR, RTS, SQD or SQE for RTS. It exists because a
// driver's cached state can lag the hardware; xrnic's engine owns the state, so
// Resolve refuses a CUR_STATE that differs from the QP's real state rather than
// overriding it (rxe trusts it blindly).
//
// # Errors
//
// Every error wraps one sentinel, for errors.Is, and names the states, type, bits or
// value at fault. The verbs layer maps them to errno as Linux does: ErrNotPermitted
// to EPERM, the others to EINVAL.
//
// # Concurrency
//
// Every function is pure: it reads only its arguments and read-only tables, so any
// number of goroutines may call them at once. CheckModify does not allocate unless it
// fails.
package qpattr
