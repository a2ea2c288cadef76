// Package cq implements xrnic's completion queues: the work completion record
// (struct ibv_wc, with enum ibv_wc_status, ibv_wc_opcode and ibv_wc_flags numbered
// as rdma-core numbers them), a bounded completion ring that engine goroutines
// push into and any number of consumer goroutines poll, one-shot completion
// notification (next or solicited completion), completion channels
// (ibv_comp_channel with GetEvent/AckEvents), kernel-style completion handlers,
// resize, QP reference counts and close.
//
// The model is Linux Soft-RoCE: rxe_cq.c (post, overflow, notify), rxe_queue.c
// (ring sizing and resize) and rxe_verbs.c (poll, req_notify), with libibverbs'
// documented semantics where rxe leaves a choice to its callers.
//
// # Concurrency (the MID rules of ib-midlayer-locking.txt)
//
//   - MID1, MID3: Push, Poll and ReqNotify never block and may be called from any
//     goroutine at once, including from a handler. Each takes the CQ's own short
//     mutex and nothing else (a channel's mutex after it, when an event is raised);
//     none waits for another goroutine, the consumer or a handler.
//   - MID4: any number of goroutines may poll one CQ; each completion is returned
//     exactly once.
//   - MID5: consumer code (the handler, OnError) runs only on the CQ's dispatcher
//     goroutine, never in the call chain of Push, Poll or ReqNotify. Channel
//     events are queued in Push but read by the consumer's own GetEvent.
//   - MID6: one dispatcher goroutine per CQ, so at most one handler call per CQ
//     at a time.
//   - MID7: a handler that blocks stalls only its own CQ's later handler calls;
//     other CQs have their own dispatchers, and Push on the blocked CQ still
//     returns at once.
//
// # The ring
//
// A power-of-two array of WC values with free-running head and tail counters,
// guarded by a per-CQ sync.Mutex, the equivalent of rxe's cq_lock spinlock. The
// lock also orders arming against firing (ReqNotify versus Push) and makes Resize
// a plain copy. "Never blocks" means what the midlayer means by "may not sleep":
// no operation waits for an event, a consumer or another goroutine's progress; the
// critical sections are a few dozen instructions and a bounded copy.
//
// A lock-free Vyukov MPMC ring (a sequence number per slot) was measured against
// it, BenchmarkRing in bench_test.go, on the two-core target (means of 5 runs of
// push+poll, ns per round): one completion at a time, mutex 16, Vyukov 11;
// batches of 16, mutex 125, Vyukov 175 (the mutex copies a batch under one lock,
// the lock-free ring pays a CAS per completion); two goroutines contending,
// mutex 18 to 24, Vyukov 33 to 34 with a wide spread. The machine was shared and
// loaded, so read these as ratios. Neither wins clearly, and the lock-free
// ring would need a shared reader count or an epoch scheme to resize, separate
// atomics for the arming state with their own ordering argument, and it reports
// "empty" while a preempted producer holds a reserved slot. The mutex ring was
// kept. No operation on the ring allocates.
//
// # Events
//
// An armed CQ fires once, on the first qualifying Push after ReqNotify. The event
// goes to the CQ's Channel (queued; GetEvent returns it; AckEvents acknowledges
// it) or to its Handler (run on the dispatcher goroutine). An overflow puts the
// CQ in the error state for good and raises IBV_EVENT_CQ_ERR through OnError,
// once.
package cq
