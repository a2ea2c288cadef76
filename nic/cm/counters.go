package cm

// Counter names one of the CM's counters (Counters). Like ib_cm's cm_counters
// (sysfs cm_tx_msgs, cm_rx_duplicates, ...), plus the drops the hostile-input
// rules ask for.
type Counter int

const (
	CntSent          Counter = iota // MADs handed to the transport
	CntSendErrors                   // MADs the transport refused
	CntRetransmits                  // requests sent again after a timeout
	CntReceived                     // CM MADs taken
	CntMalformed                    // truncated, or not CM class 7 version 2
	CntUnknownAttr                  // attributes the CM does not run (ClassPortInfo, LAP/APR on RoCE)
	CntUnknownCommID                // REP, RTU, MRA, REJ, DREP naming no ID of ours
	CntWrongState                   // a message the ID's state does not take
	CntDuplicates                   // duplicate REQ, REP, DREQ, SIDR_REQ
	CntBadQPN                       // a DREQ naming another QPN
	CntRejectedLimit                // REQs and SIDR_REQs refused past MaxIDs
	CntTimeouts                     // requests that ran out of retries
	CntStale                        // stale connections rejected
	CntNoListener                   // REQs (REJ 8) and SIDR_REQs (status 1) for a service ID nobody listens on
	NumCounters
)

var counterNames = [NumCounters]string{"sent", "send_errors", "retransmits", "received",
	"malformed", "unknown_attr", "unknown_comm_id", "wrong_state", "duplicates", "bad_qpn",
	"rejected_limit", "timeouts", "stale", "no_listener"}

func (n Counter) String() string { return counterNames[n] }

// Counters is a snapshot of the CM's counters: Counters[i] is Counter(i).
type Counters [NumCounters]uint64

// Counters returns a snapshot of the counters.
func (c *CM) Counters() Counters {
	var s Counters
	for i := range s {
		s[i] = c.counters[i].Load()
	}
	return s
}

func (c *CM) inc(n Counter) { c.counters[n].Add(1) }
