// Asynchronous events (ibv_async_event), delivered from the engine side on
// RoutineEvents, never from inside an API call (MID2, MID5).

package engine

import (
	"strconv"
	"sync"

	"github.com/xrnic/xrnic/nic/cq"
)

// EventType is an asynchronous event type, numbered as enum ibv_event_type. A plain
// value.
type EventType uint8

// The event types the engine raises (and the others of enum ibv_event_type).
const (
	EventCQErr            EventType = 0  // IBV_EVENT_CQ_ERR: a CQ overflowed
	EventQPFatal          EventType = 1  // IBV_EVENT_QP_FATAL: the QP went to ERR on a transport error
	EventQPReqErr         EventType = 2  // IBV_EVENT_QP_REQ_ERR: the responder saw an invalid request
	EventQPAccessErr      EventType = 3  // IBV_EVENT_QP_ACCESS_ERR: the responder saw an access violation
	EventCommEst          EventType = 4  // IBV_EVENT_COMM_EST: first packet received in RTR
	EventSQDrained        EventType = 5  // IBV_EVENT_SQ_DRAINED
	EventPathMig          EventType = 6  // IBV_EVENT_PATH_MIG
	EventPathMigErr       EventType = 7  // IBV_EVENT_PATH_MIG_ERR
	EventDeviceFatal      EventType = 8  // IBV_EVENT_DEVICE_FATAL
	EventPortActive       EventType = 9  // IBV_EVENT_PORT_ACTIVE
	EventPortErr          EventType = 10 // IBV_EVENT_PORT_ERR: the link failed
	EventLIDChange        EventType = 11 // IBV_EVENT_LID_CHANGE
	EventPKeyChange       EventType = 12 // IBV_EVENT_PKEY_CHANGE
	EventSMChange         EventType = 13 // IBV_EVENT_SM_CHANGE
	EventSRQErr           EventType = 14 // IBV_EVENT_SRQ_ERR
	EventSRQLimitReached  EventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQEReached EventType = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
	EventClientReregister EventType = 17 // IBV_EVENT_CLIENT_REREGISTER
	EventGIDChange        EventType = 18 // IBV_EVENT_GID_CHANGE
)

var eventNames = [...]string{"CQ error", "local work queue catastrophic error",
	"invalid request local work queue error", "local access violation work queue error",
	"communication established", "send queue drained", "path migrated",
	"path migration request error", "local catastrophic error", "port active",
	"port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
	"SRQ limit reached", "last WQE reached", "client reregistration", "GID table change"}

// String returns ibv_event_type_str's text.
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// AsyncEvent is an asynchronous event (struct ibv_async_event): its type and the
// object it concerns. A plain value.
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *cq.CQ
	SRQ  *SRQ
	Port uint8
}

// eventQueue hands events from the engine (which never blocks) to RoutineEvents,
// which calls the handler one event at a time, in order.
type eventQueue struct {
	mu      sync.Mutex
	q       []AsyncEvent
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	handler func(AsyncEvent)
	logf    func(string, ...any)
	cnt     *counters
}

func (eq *eventQueue) start(h func(AsyncEvent), logf func(string, ...any), c *counters) {
	eq.handler, eq.logf, eq.cnt = h, logf, c
	eq.kick = make(chan struct{}, 1)
	eq.stop = make(chan struct{})
	eq.done = make(chan struct{})
	if h == nil {
		close(eq.done)
		return
	}
	go eq.routineEvents()
}

// post queues ev; safe from any goroutine and never blocks.
func (eq *eventQueue) post(ev AsyncEvent) {
	if eq.handler == nil {
		return
	}
	eq.mu.Lock()
	if len(eq.q) >= MaxAsyncEvents {
		eq.mu.Unlock()
		eq.cnt.inc(CntEventsDropped)
		return
	}
	eq.q = append(eq.q, ev)
	eq.mu.Unlock()
	select {
	case eq.kick <- struct{}{}:
	default:
	}
}

// close stops RoutineEvents after it delivered what was queued, and waits for it.
func (eq *eventQueue) close() {
	if eq.handler != nil {
		close(eq.stop)
	}
	<-eq.done
}

func (eq *eventQueue) routineEvents() {
	defer close(eq.done)
	eq.logf("engine: RoutineEvents started")
	defer eq.logf("engine: RoutineEvents stopped")
	var batch []AsyncEvent
	for {
		eq.mu.Lock()
		batch, eq.q = eq.q, batch[:0]
		eq.mu.Unlock()
		for _, ev := range batch {
			eq.handler(ev)
		}
		clear(batch)
		if len(batch) > 0 {
			continue
		}
		select {
		case <-eq.kick:
		case <-eq.stop:
			eq.mu.Lock()
			rest := eq.q
			eq.q = nil
			eq.mu.Unlock()
			for _, ev := range rest {
				eq.handler(ev)
			}
			return
		}
	}
}
