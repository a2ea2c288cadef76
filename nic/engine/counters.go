// Device counters, named like rxe's hw counters (rxe_hw_counters.c), plus the drop
// reasons of the receive path.

package engine

import "sync/atomic"

// Counter names one device counter. A plain value.
type Counter int

// The counters. The first block carries rxe's names and meanings; the rest count
// why the engine dropped what it dropped.
const (
	CntSentPkts         Counter = iota // sent_pkts: frames handed to the link
	CntRcvdPkts                        // rcvd_pkts: valid RoCEv2 packets received for a QP
	CntDupReq                          // duplicate_request: responder saw a PSN it already executed
	CntOutOfSeqReq                     // out_of_seq_request: responder saw a PSN gap (NAK sequence error)
	CntRcvRNR                          // rcvd_rnr_err: requester received an RNR NAK
	CntSndRNR                          // send_rnr_err: responder sent an RNR NAK
	CntRcvSeqErr                       // rcvd_seq_err: requester received a NAK sequence error
	CntAckDeferred                     // ack_deferred: ACKs merged into a later one (coalesced)
	CntRetryExceeded                   // retry_exceeded_err: retry_cnt exhausted
	CntRNRRetryExceeded                // retry_rnr_exceeded_err: rnr_retry exhausted
	CntCompRetry                       // completer_retry_err: go-back-N retransmissions started
	CntSendErr                         // send_err: frames the link refused or dropped
	CntLinkDowned                      // link_downed: times the port went down (rxe_port_down) or the link failed
	CntRDMASends                       // rdma_sends: send WRs completed successfully
	CntRDMARecvs                       // rdma_recvs: receive WRs completed successfully

	CntRcvdMalformed  // frames wire.Parse rejected
	CntRcvdBadICRC    // frames whose ICRC did not match
	CntRcvdUnknownQP  // packets for a QPN with no QP
	CntRcvdBadState   // packets a QP cannot take in its state or for its transport
	CntRcvdBadPKey    // P_Key mismatch
	CntRcvdBadQKey    // UD Q_Key mismatch
	CntRcvdBadAddr    // source or destination address not the QP's
	CntRcvdDropped    // UC/UD messages dropped (lost packet, no receive WQE, bad length)
	CntRcvdBadAck     // responses the completer could not use (stale, unexpected)
	CntTxDropped      // responses dropped because the response queue was full (the transmit ring behind it stayed full)
	CntCQOverflow     // completions a full CQ refused
	CntEventsDropped  // asynchronous events dropped because the handler fell behind
	CntRetransmitted  // request packets sent again (timeout or NAK)
	CntSndRNRDropped  // RNR NAKs not sent because the response queue was full (not in send_rnr_err)
	CntDupReadLimited // duplicate READs left unanswered: past the replay budget (replayBudget)
	NumCounters
)

var counterNames = [NumCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
	"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err",
	"retry_rnr_exceeded_err", "completer_retry_err", "send_err", "link_downed",
	"rdma_sends", "rdma_recvs",
	"rcvd_malformed", "rcvd_bad_icrc", "rcvd_unknown_qp", "rcvd_bad_state",
	"rcvd_bad_pkey", "rcvd_bad_qkey", "rcvd_bad_addr", "rcvd_dropped", "rcvd_bad_ack",
	"tx_dropped", "cq_overflow", "events_dropped", "retransmitted_pkts",
	"send_rnr_dropped", "duplicate_read_limited",
}

func (c Counter) String() string {
	if c >= 0 && c < NumCounters {
		return counterNames[c]
	}
	return "counter(?)"
}

// Counters is a snapshot of a device's counters, indexed by Counter. A plain value.
type Counters [NumCounters]uint64

// Map returns the snapshot keyed by counter name, as sysfs hw_counters lists them.
func (c *Counters) Map() map[string]uint64 {
	m := make(map[string]uint64, NumCounters)
	for i, v := range c {
		m[Counter(i).String()] = v
	}
	return m
}

// counters are written by the engine goroutine and read from anywhere.
type counters [NumCounters]atomic.Uint64

func (c *counters) inc(n Counter)           { c[n].Add(1) }
func (c *counters) add(n Counter, v uint64) { c[n].Add(v) }
func (c *counters) snapshot() (s Counters) {
	for i := range c {
		s[i] = c[i].Load()
	}
	return s
}

// EngineCounter names one counter of the engine loop. These are not rxe's: they
// describe the engine goroutine's work (passes of its loop, the link's batches,
// its idle waits, its timers), and are kept apart from Counter so that the
// rxe-named set stays rxe-shaped. Their names carry the prefix "engine_". A
// plain value.
type EngineCounter int

// The engine loop counters.
const (
	EngLoops        EngineCounter = iota // engine_loops: passes of the engine loop
	EngRxPolls                           // engine_rx_polls: reads of the link (Lend)
	EngRxBatches                         // engine_rx_batches: reads that returned frames
	EngRxFrames                          // engine_rx_frames: frames the reads returned
	EngTxBatches                         // engine_tx_batches: calls that hand the link frames (WriteBatch, or a lending link's SendTx)
	EngTxFrames                          // engine_tx_frames: frames the link took
	EngIdleWaits                         // engine_idle_waits: waits for frames, a doorbell or a timer (link.Wait)
	EngTimersFired                       // engine_timers_fired: retransmit and RNR timers that fired
	EngDriven                            // engine_driven: passes a busy-polling thread ran (Drive)
	EngHandoffs                          // engine_handoffs: frames received on one queue for another queue's QP, handed to its engine
	EngHandoffDrops                      // engine_handoff_drops: such frames dropped, the other engine's ring full
	EngTxDeferred                        // engine_tx_deferred: Drive passes that left their transmit to the next, a completion or a WRITE in for the poller
	EngWakeWaits                         // engine_wake_waits: idle waits for a doorbell alone, busy pollers taking the frames
	EngRoomWaits                         // engine_room_waits: RC QPs that waited for the PSNs in flight to their destination to fall (cwnd.go)
	EngRoomStale                         // engine_room_stale: RC QPs whose PSNs stopped counting there, no ACK for roomStale
	EngIdleSpins                         // engine_idle_spins: passes that found nothing and yielded the CPU before the engine slept
	EngLoopback                          // engine_loopback: frames to the device's own address, taken to its receive path, not the link
	NumEngineCounters
)

var engineCounterNames = [NumEngineCounters]string{
	"engine_loops", "engine_rx_polls", "engine_rx_batches", "engine_rx_frames",
	"engine_tx_batches", "engine_tx_frames", "engine_idle_waits", "engine_timers_fired", "engine_driven",
	"engine_handoffs", "engine_handoff_drops", "engine_tx_deferred", "engine_wake_waits",
	"engine_room_waits", "engine_room_stale", "engine_idle_spins", "engine_loopback",
}

func (c EngineCounter) String() string {
	if c >= 0 && c < NumEngineCounters {
		return engineCounterNames[c]
	}
	return "engine_counter(?)"
}

// EngineCounters is a snapshot of a device's engine loop counters, indexed by
// EngineCounter. A plain value.
type EngineCounters [NumEngineCounters]uint64

// Map returns the snapshot keyed by counter name.
func (c *EngineCounters) Map() map[string]uint64 {
	m := make(map[string]uint64, NumEngineCounters)
	for i, v := range c {
		m[EngineCounter(i).String()] = v
	}
	return m
}

// engineCounters are written by one shard's engine loop only and read from
// anywhere. With one writer, add is a load and a store rather than a locked
// read-modify-write: the loop pays no more than a plain increment, and readers
// still see whole values.
type engineCounters [NumEngineCounters]atomic.Uint64

func (c *engineCounters) inc(n EngineCounter)           { c[n].Store(c[n].Load() + 1) }
func (c *engineCounters) add(n EngineCounter, v uint64) { c[n].Store(c[n].Load() + v) }
func (c *engineCounters) snapshot() (s EngineCounters) {
	for i := range c {
		s[i] = c[i].Load()
	}
	return s
}
