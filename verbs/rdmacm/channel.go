package rdmacm

import (
	"context"
	"sync"

	"github.com/xrnic/xrnic/verbs"
)

// AV is the address vector of a UD peer.
type AV = verbs.AV

// Event is struct rdma_cm_event. A plain value, the caller's to keep.
type Event struct {
	Type EventType
	ID   *ID
	// Listen is the listening ID of a CONNECT_REQUEST (ID is the new one).
	Listen *ID
	// Status is 0, a REJ reason code (REJECTED), a SIDR status, or a negative
	// errno (UNREACHABLE: -ETIMEDOUT), as librdmacm reports them.
	Status int
	Param  ConnParam
	UD     UDParam // UD IDs: CONNECT_REQUEST, ESTABLISHED, MULTICAST_JOIN
	// Context is JoinMulticast's (MULTICAST_JOIN, MULTICAST_ERROR), which
	// librdmacm puts in param.ud.private_data.
	Context any

	complete bool    // a CONNECT_RESPONSE GetEvent completes (the ID has a QP)
	mc       *mcJoin // a join whose QP GetEvent attaches (ucma_process_join)
}

// EventChannel is struct rdma_event_channel: the queue of its IDs' events. Safe
// for concurrent use; the queue is bounded by its IDs (each state change queues
// one event).
type EventChannel struct {
	mu     sync.Mutex
	q      []*Event
	wake   chan struct{}
	ids    int
	closed bool
}

// NewEventChannel returns an event channel (rdma_create_event_channel).
func NewEventChannel() *EventChannel {
	return &EventChannel{wake: make(chan struct{}, 1)}
}

func (ch *EventChannel) post(ev *Event) {
	ch.mu.Lock()
	if !ch.closed {
		ch.q = append(ch.q, ev)
	}
	ch.mu.Unlock()
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// GetEvent returns the next event, waiting for one until ctx ends
// (rdma_get_cm_event). A peer's REP for an ID with a QP is completed here, in
// the caller's goroutine, as librdmacm does: the QP goes to RTR and RTS, the RTU
// is sent, and the event is ESTABLISHED (or CONNECT_ERROR).
func (ch *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	for {
		if ev, err := ch.TryGetEvent(); ev != nil || err != nil {
			return ev, err
		}
		if err := ch.Wait(ctx); err != nil {
			return nil, err
		}
	}
}

// TryGetEvent is GetEvent without the wait: nil, nil when no event is queued.
// With Wait, a forwarder can take an event under a lock of its own that a
// Migrate of the event's ID then waits for (the attach daemon's channels).
func (ch *EventChannel) TryGetEvent() (*Event, error) {
	ch.mu.Lock()
	if len(ch.q) == 0 {
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		return nil, nil
	}
	ev := ch.q[0]
	ch.q[0] = nil
	ch.q = ch.q[1:]
	ch.mu.Unlock()
	if ev.complete {
		ev.ID.completeConnect(ev)
	}
	if ev.mc != nil {
		ev.ID.processJoin(ev)
	}
	return ev, nil
}

// Wait waits until an event is queued or the channel is closed, or ctx ends
// (its error then).
func (ch *EventChannel) Wait(ctx context.Context) error {
	for {
		ch.mu.Lock()
		ready := len(ch.q) > 0 || ch.closed
		ch.mu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ch.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close closes the channel (rdma_destroy_event_channel); it fails with ErrBusy
// while IDs made on it are not destroyed.
func (ch *EventChannel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.ids > 0 {
		return ErrBusy
	}
	ch.closed = true
	ch.q = nil
	select {
	case ch.wake <- struct{}{}:
	default:
	}
	return nil
}

func (ch *EventChannel) addID() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return ErrClosed
	}
	ch.ids++
	return nil
}

func (ch *EventChannel) removeID(id *ID) {
	// rdma_destroy_id: the ID's events not yet taken go with it, and a
	// listener's requests not yet taken are refused, their IDs destroyed
	// (ucma_cleanup_ctx_events).
	for _, ev := range ch.take(id) {
		if ev.Listen == id {
			ev.ID.Destroy()
		}
	}
}

// take removes the ID from the channel and returns its events not yet taken,
// a listener's connection requests among them.
func (ch *EventChannel) take(id *ID) []*Event {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.ids--
	var mine []*Event
	q := ch.q[:0]
	for _, ev := range ch.q {
		if ev.ID == id || ev.Listen == id {
			mine = append(mine, ev)
		} else {
			q = append(q, ev)
		}
	}
	clear(ch.q[len(q):])
	ch.q = q
	return mine
}

// Migrate moves the ID to ch (rdma_migrate_id): its later events, and those
// not yet taken, come on ch. A listener's requests not yet taken move too,
// with their new IDs (ucma_move_events moves them as the listener's events;
// their IDs are made where they are taken).
func (id *ID) Migrate(ch *EventChannel) error {
	if err := ch.addID(); err != nil {
		return err
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	old := id.ch
	id.ch = ch
	// Under the ID's lock: an event of its arriving now waits, and follows
	// those moved.
	for _, ev := range old.take(id) {
		if ev.Listen == id {
			ev.ID.moveRequest(old, ch, ev)
		} else {
			ch.post(ev)
		}
	}
	return nil
}

// moveRequest moves a listener's new ID, whose request req nobody has taken,
// from old to ch: the ID first, then the request and the ID's own events, so
// that whoever takes the request from ch finds the ID there already.
func (id *ID) moveRequest(old, ch *EventChannel, req *Event) {
	_ = ch.addID() // cannot fail: the migrating listener holds ch open
	id.mu.Lock()
	defer id.mu.Unlock()
	id.ch = ch
	evs := old.take(id)
	ch.post(req)
	for _, ev := range evs {
		ch.post(ev)
	}
}

// channel is the ID's channel (Migrate changes it).
func (id *ID) channel() *EventChannel {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ch
}
