// Package engine is xrnic's NIC engine: devices, protection domains, memory
// regions, completion queues, queue pairs (RC, UC, UD and the GSI QP1), shared
// receive queues and address handles, and the IBTA transport that moves their work
// requests over a link.Link as RoCEv2 frames.
//
// # Ownership
//
// One goroutine per Device, RoutineEngine, owns every QP's transport state (PSNs,
// WQE cursors, responder resources, timers) and the link's ReadBatch, WriteBatch and
// Wait; it takes no locks on that state. Its loop reads a batch of frames, parses them
// in place (wire.Parse and the ICRC), dispatches each by destination QPN (requests to
// the responder, acknowledgements and read responses to the completer), runs the
// requesters within a budget, writing frames straight into preallocated buffers,
// writes the batch once, fires due timers, and when idle waits on the link until the
// next timer deadline. Time comes from an injected Clock.
//
// Applications post work requests into per-QP rings from any goroutine (a small
// producer lock per ring, never shared across QPs) and ring a doorbell (link.Wake);
// they poll completions from nic/cq rings. Control operations (QP modify and destroy,
// device close) are requests to the engine goroutine and complete asynchronously
// through an Op. Nothing the engine does calls into application code: completion
// notifications run on nic/cq's goroutines, asynchronous events on RoutineEvents.
//
// # Structure
//
// The transport follows Linux Soft-RoCE (drivers/infiniband/sw/rxe), one file per
// role: recv.go validates and dispatches, req.go turns WQEs into packets, resp.go
// executes requests and answers them, comp.go turns acknowledgements into work
// completions, timers.go holds the retransmission and RNR timers, qp.go the QP
// objects and attribute changes, limits.go every limit (rxe_param.h), counters.go
// the counters (rxe_hw_counters.c). Comments cite the IBTA rules (Vol 1, chapter 9,
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
