package cm

import (
	"sync"
	"sync/atomic"

	"github.com/xrnic/xrnic/internal/goid"
	"github.com/xrnic/xrnic/nic/mad"
)

// EventType is what happened to a CM ID (enum ib_cm_event_type).
type EventType int

const (
	EventREQError        EventType = iota + 1 // our REQ ran out of retries; or a REQ we took was never answered
	EventREQReceived                          // to a listener's handler, with a new ID
	EventREPError                             // our REP ran out of retries
	EventREPReceived                          // the consumer sends RTU (or REJ)
	EventRTUReceived                          // established
	EventDREQError                            // our DREQ ran out of retries: TimeWait
	EventDREQReceived                         // the consumer sends DREP
	EventDREPReceived                         // TimeWait
	EventTimeWaitExit                         // the IDs may be reused; the ID is Idle
	EventMRAReceived                          // the peer needs longer: our timer was extended
	EventREJReceived                          // Msg is the REJ
	EventSIDRREQError                         // our SIDR_REQ ran out of retries; or a SIDR_REQ we took was never answered
	EventSIDRREQReceived                      // to a listener's handler, with a new ID
	EventSIDRREPReceived                      // Msg is the SIDR_REP
	EventUserEstablished                      // ID.Established: established without the RTU
)

var eventNames = map[EventType]string{EventREQError: "REQ_ERROR", EventREQReceived: "REQ_RECEIVED",
	EventREPError: "REP_ERROR", EventREPReceived: "REP_RECEIVED", EventRTUReceived: "RTU_RECEIVED",
	EventDREQError: "DREQ_ERROR", EventDREQReceived: "DREQ_RECEIVED", EventDREPReceived: "DREP_RECEIVED",
	EventTimeWaitExit: "TIMEWAIT_EXIT", EventMRAReceived: "MRA_RECEIVED", EventREJReceived: "REJ_RECEIVED",
	EventSIDRREQError: "SIDR_REQ_ERROR", EventSIDRREQReceived: "SIDR_REQ_RECEIVED",
	EventSIDRREPReceived: "SIDR_REP_RECEIVED", EventUserEstablished: "USER_ESTABLISHED"}

func (t EventType) String() string { return eventNames[t] }

// Event is one event of a CM ID. A plain value; Msg is the handler's to keep.
type Event struct {
	Type EventType
	ID   *ID
	// Listener is the listening ID a REQ or SIDR_REQ arrived on.
	Listener *ID
	// Msg is the message that caused the event (*mad.REQ, *mad.REP, *mad.RTU,
	// *mad.REJ, *mad.MRA, *mad.DREQ, *mad.DREP, *mad.SIDRREQ, *mad.SIDRREP), nil
	// for timeouts.
	Msg mad.Message
	// Src and Dst are the GIDs the MAD came from and went to.
	Src, Dst GID
}

// Handler receives a CM ID's events, one at a time, on RoutineCMEvents.
type Handler func(Event)

// eventQueue is RoutineCMEvents: it runs handlers in order, one at a time. The
// queue is bounded by the IDs (each transition queues at most one event, and IDs
// are bounded by MaxIDs).
type eventQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	q       []Event
	stopped bool
	running *ID // the ID whose handler runs, for Destroy's wait
	gid     atomic.Uint64
	done    chan struct{}
}

func (e *eventQueue) start() {
	e.cond = sync.NewCond(&e.mu)
	e.done = make(chan struct{})
	go e.routine()
}

func (e *eventQueue) routine() {
	defer close(e.done)
	e.gid.Store(goid.ID())
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		for len(e.q) == 0 && !e.stopped {
			e.cond.Wait()
		}
		if e.stopped {
			return
		}
		ev := e.q[0]
		e.q[0] = Event{}
		e.q = e.q[1:]
		if len(e.q) == 0 {
			e.cond.Broadcast() // for waiters on an empty queue
		}
		id := ev.ID
		if ev.Listener != nil && ev.Listener.isDestroyed() {
			// A REQ for a listener destroyed meanwhile: the new ID goes too
			// (ib_cm destroys a new ID whose handler fails).
			e.mu.Unlock()
			id.Destroy()
			e.mu.Lock()
			continue
		}
		h := id.handlerIfLive()
		if h == nil {
			continue
		}
		e.running = id
		e.mu.Unlock()
		h(ev)
		e.mu.Lock()
		e.running = nil
		e.cond.Broadcast()
	}
}

// post queues ev. Called with the CM's lock held; never blocks.
func (e *eventQueue) post(ev Event) {
	e.mu.Lock()
	if !e.stopped {
		e.q = append(e.q, ev)
		e.cond.Broadcast()
	}
	e.mu.Unlock()
}

// waitIdle waits until no handler of id runs (unless called from one).
func (e *eventQueue) waitIdle(id *ID) {
	if e.inRoutine() {
		return
	}
	e.mu.Lock()
	for e.running == id {
		e.cond.Wait()
	}
	e.mu.Unlock()
}

func (e *eventQueue) inRoutine() bool { return e.gid.Load() == goid.ID() }

// stop discards what is queued, waits for the running handler and ends the
// goroutine.
func (e *eventQueue) stop() {
	e.mu.Lock()
	e.stopped = true
	e.q = nil
	e.cond.Broadcast()
	e.mu.Unlock()
	<-e.done
}
