// Package engine is xrnic's NIC engine: devices, protection domains, memory
// regions, completion queues, queue pairs (RC, UC, UD and the GSI QP1), shared
// receive queues and address handles, and the IBTA transport that moves their work
// requests over a link.Link as RoCEv2 frames.
//
// # Ownership
//
// One goroutine per link, RoutineEngine, owns the transport state of its QPs
// (PSNs, WQE cursors, responder resources, timers) and its link's ReadBatch,
// WriteBatch and Wait; it takes no locks on that state. Open gives a device one
// link; OpenQueues one per receive queue, a QP belonging to the engine of queue
// QPN modulo their number, and a frame that comes in on another engine's queue
// is handed to its QP's engine through that engine's ring (shard.go). The
// engines share the CQs, SRQs and the memory region table, which have locks of
// their own. Its loop reads a batch of frames, parses them
// in place (wire.Parse and the ICRC), dispatches each by destination QPN (requests to
// the responder, acknowledgements and read responses to the completer), runs the
// requesters within a budget, writing frames straight into preallocated buffers,
// writes the batch once, fires due timers, and when idle waits on the link until the
// next timer deadline. Time comes from an injected Clock.
//
// Applications post work requests into per-QP rings from any goroutine (a small
// producer lock per ring, never shared across QPs) and ring a doorbell (link.Wake);
// they poll completions from nic/cq rings. Nothing the engine does calls into
// application code: completion notifications run on nic/cq's goroutines,
// asynchronous events and Op callbacks on RoutineEvents.
//
// # The control contract and object lifetimes
//
// Creates return the object at once. Every Modify, Destroy, Dealloc, Dereg and
// Close returns an Op (op.go): complete when the call returns, or later when the
// engine has done the work; the caller waits for it or names a callback with
// Notify. Each object knows its parents (a QP's PD, CQs and SRQ; a PD's or CQ's
// device) and counts its live children (lifetime.go). Destroy, Dealloc and Dereg
// are libibverbs': ErrBusy, changing nothing, while children live. Close is
// NDKPI's: the object takes no more children at once and its teardown runs when
// the last child is gone (LT8). A QP's close flushes its outstanding work
// requests with WR_FLUSH_ERR. Once an object's close is accepted its undelivered
// events are discarded, and its close completes only after the event being
// delivered for it, if any, has returned: no event or callback names an object
// after its close completed (LT13, LT14). Device.Close stops everything and
// returns when every callback goroutine of the device has (LT12). A wait that
// would wait for the callback making it fails with ErrDeadlock (LT11).
//
// # Structure
//
// The transport follows Linux Soft-RoCE (drivers/infiniband/sw/rxe), one file per
// role: recv.go validates and dispatches, req.go turns WQEs into packets, resp.go
// executes requests and answers them, comp.go turns acknowledgements into work
// completions, timers.go holds the retransmission and RNR timers; qp.go is the QP
// object, modify.go its attribute changes and their effects, post.go the post
// verbs, av.go address resolution, wr.go the work-request opcode table
// (rxe_wr_opcode_info); pd.go, mr.go, ah.go, srq.go and cq.go the other objects,
// lifetime.go and op.go the control contract, limits.go every limit
// (rxe_param.h), counters.go the counters (rxe_hw_counters.c). Comments cite the IBTA rules (Vol 1, chapter 9,
// "C9-nn") they implement.
//
// # Errors
//
// Every API misuse returns an error that wraps one of the sentinels in errors.go.
// The data path never returns errors: a bad packet is dropped and counted or answered
// with the NAK the specification names, and a failed work request completes with the
// matching cq.Status. No packet can make the engine touch memory outside a region
// registered with the right key, protection domain and access.
package engine
