// Asynchronous events (ibv_async_event), delivered from the engine side on
// RoutineEvents, never from inside an API call (MID2, MID5).

package engine

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/xrnic/xrnic/internal/goid"
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
	CQ   *CQ
	SRQ  *SRQ
	Port uint8
}

// lifetime is that of the object the event concerns; nil for device and port
// events.
func (ev *AsyncEvent) lifetime() *lifetime {
	switch {
	case ev.QP != nil:
		return &ev.QP.n
	case ev.CQ != nil:
		return &ev.CQ.n
	case ev.SRQ != nil:
		return &ev.SRQ.n
	}
	return nil
}

// evItem is one thing for RoutineEvents to do: deliver an event, or call an Op's
// callback (fn != nil).
type evItem struct {
	ev  AsyncEvent
	fn  func(error)
	err error
}

// eventQueue is the device's callback goroutine, RoutineEvents: it delivers the
// asynchronous events and runs the Ops' Notify callbacks, one at a time, in the
// order they were queued, never in an API call's chain (MID2, MID5). The engine
// queues and never blocks. An object's events are discarded once its close is
// accepted; a close completes after the event of the object being delivered, if
// any, has returned (NDKPI LT13).
type eventQueue struct {
	mu      sync.Mutex
	q       []evItem
	cur     *lifetime     // the object whose event is being delivered
	after   []closeWait   // closes waiting for cur's event to return
	stopped bool          // closed: nothing more is queued
	kick    chan struct{} // one token: RoutineEvents has work
	stop    chan struct{}
	done    chan struct{}
	gid     atomic.Uint64 // RoutineEvents' goroutine id
	handler func(AsyncEvent)
	logf    func(string, ...any)
	cnt     *counters
}

// closeWait is a close Op that completes when the current event returns.
type closeWait struct {
	op  *Op
	err error
}

func (eq *eventQueue) start(h func(AsyncEvent), logf func(string, ...any), c *counters) {
	eq.handler, eq.logf, eq.cnt = h, logf, c
	eq.kick = make(chan struct{}, 1)
	eq.stop = make(chan struct{})
	eq.done = make(chan struct{})
	go eq.routineEvents()
}

// post queues ev; safe from any goroutine and never blocks. Events of a closed
// object, and all events when there is no handler, are dropped.
func (eq *eventQueue) post(ev AsyncEvent) {
	if eq.handler == nil {
		return
	}
	if n := ev.lifetime(); n != nil && n.dead.Load() {
		return
	}
	eq.push(evItem{ev: ev})
}

// call queues f(err), an Op's callback. After the queue has stopped (the device
// is closed) f runs on a goroutine of its own.
func (eq *eventQueue) call(f func(error), err error) {
	if eq == nil || !eq.push(evItem{fn: f, err: err}) {
		go f(err)
	}
}

func (eq *eventQueue) push(it evItem) bool {
	eq.mu.Lock()
	if eq.stopped {
		eq.mu.Unlock()
		return false
	}
	if it.fn == nil && len(eq.q) >= MaxAsyncEvents {
		eq.mu.Unlock()
		eq.cnt.inc(CntEventsDropped)
		return true
	}
	eq.q = append(eq.q, it)
	eq.mu.Unlock()
	select {
	case eq.kick <- struct{}{}:
	default:
	}
	return true
}

// finishClose completes op, the close of n, once no event of n is being
// delivered: at once, or when the current one returns. n is dead already, so no
// later event of n is delivered.
func (eq *eventQueue) finishClose(n *lifetime, op *Op, err error) {
	eq.mu.Lock()
	if eq.cur == n && n != nil {
		eq.after = append(eq.after, closeWait{op, err})
		eq.mu.Unlock()
		return
	}
	eq.mu.Unlock()
	op.finish(err)
}

// delivering reports whether the caller is RoutineEvents delivering an event of
// n: a close of n waited for here would wait for itself.
func (eq *eventQueue) delivering(n *lifetime) bool {
	eq.mu.Lock()
	cur := eq.cur
	eq.mu.Unlock()
	return cur == n && eq.onGoroutine()
}

// onGoroutine reports whether the caller is RoutineEvents.
func (eq *eventQueue) onGoroutine() bool { return eq.gid.Load() == goid.ID() }

// close stops RoutineEvents after it has run what was queued, and waits for it.
func (eq *eventQueue) close() {
	close(eq.stop)
	<-eq.done
}

func (eq *eventQueue) routineEvents() {
	defer close(eq.done)
	eq.gid.Store(goid.ID())
	eq.logf("engine: RoutineEvents started")
	defer eq.logf("engine: RoutineEvents stopped")
	var batch []evItem
	for {
		eq.mu.Lock()
		batch, eq.q = eq.q, batch[:0]
		eq.mu.Unlock()
		for i := range batch {
			eq.run(&batch[i])
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
			eq.stopped = true
			eq.mu.Unlock()
			for i := range rest {
				eq.run(&rest[i])
			}
			return
		}
	}
}

// run delivers one item. An event whose object is dead is skipped; the check and
// the marking of cur are one step under mu, which finishClose also takes after
// the object died, so a close either sees cur or the event sees dead.
func (eq *eventQueue) run(it *evItem) {
	if it.fn != nil {
		it.fn(it.err)
		return
	}
	n := it.ev.lifetime()
	eq.mu.Lock()
	if n != nil && n.dead.Load() {
		eq.mu.Unlock()
		return
	}
	eq.cur = n
	eq.mu.Unlock()
	eq.handler(it.ev)
	eq.mu.Lock()
	eq.cur = nil
	after := eq.after
	eq.after = nil
	eq.mu.Unlock()
	for _, w := range after {
		w.op.finish(w.err)
	}
}
