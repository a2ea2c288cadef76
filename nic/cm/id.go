package cm

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/xrnic/xrnic/nic/clock"
	"github.com/xrnic/xrnic/nic/errs"
	"github.com/xrnic/xrnic/nic/mad"
)

// State is a CM ID's state (enum ib_cm_state, IBTA 12.9.6).
type State int

const (
	StateIdle State = iota
	StateListen
	StateREQSent
	StateREQRcvd
	StateMRAREQSent
	StateMRAREQRcvd
	StateREPSent
	StateREPRcvd
	StateMRAREPSent
	StateMRAREPRcvd
	StateEstablished
	StateDREQSent
	StateDREQRcvd
	StateTimeWait
	StateSIDRREQSent
	StateSIDRREQRcvd
)

var stateNames = [...]string{"IDLE", "LISTEN", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT",
	"MRA_REQ_RCVD", "REP_SENT", "REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED",
	"DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT", "SIDR_REQ_RCVD"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// REJ reasons (IBTA Table 109, enum ib_cm_rej_reason) the CM and rdma_cm use.
const (
	RejNoQP               = 1
	RejNoResources        = 3
	RejTimeout            = 4
	RejUnsupported        = 5
	RejInvalidCommID      = 6
	RejInvalidServiceID   = 8
	RejInvalidTransport   = 9
	RejStaleConn          = 10
	RejInvalidGID         = 12
	RejConsumerDefined    = 28
	RejInvalidClassVer    = 31
	RejVendorOptionUnsupp = 35
)

// MessageRejected values of a REJ, and MessageMRAed values of an MRA.
const (
	MsgREQ   = 0
	MsgREP   = 1
	MsgOther = 2
)

// SIDR_REP statuses (IBTA Table 121, enum ib_cm_sidr_status).
const (
	SIDRSuccess       = 0
	SIDRUnsupported   = 1
	SIDRReject        = 2
	SIDRNoQP          = 3
	SIDRRedirect      = 4
	SIDRUnsupportedVr = 5
)

// ID is one end of a connection, or a listener (struct ib_cm_id). Its methods
// are safe from any goroutine, its handler included; its events arrive on
// RoutineCMEvents, never in the call chain of a method.
type ID struct {
	cm        *CM
	handler   atomic.Pointer[Handler]
	destroyed atomic.Bool
	fromWire  bool // a REQ or SIDR_REQ made it (CM.wireIDs)
	// halfOpen is how long the REQ it took says its sender waits (REQRcvd).
	halfOpen time.Duration
	// mraWait is the service timeout of a delayed MRA not sent yet: the
	// half-open expiry grows by it when a duplicate REQ draws the MRA.
	mraWait time.Duration

	// Under cm.mu.
	state      State
	localID    uint32
	remoteID   uint32
	remoteGUID uint64
	tid        uint64 // the TID of the MADs we originate
	peerTID    uint64 // the TID of the request we answer
	serviceID  uint64
	src, dst   GID // our GID and the peer's
	localQPN   uint32
	remoteQPN  uint32
	inRemote   bool // in cm.remote
	sidrKey    *sidrKey
	cmTimeout  time.Duration // the base timeout of our requests
	// avTimeout is ib_cm's av.timeout: the path's round trip, which an MRA
	// adds to its service timeout, and then how long TimeWait lasts. Twice the
	// packet life time on the active side until the REP, then the ACK timeout
	// of the REP's Target ACK Delay (cm_rep_handler); the REQ's Local ACK
	// Timeout on the passive (cm_format_paths_from_req). 0: not known yet.
	avTimeout  time.Duration
	maxRetries int

	// The request waiting for its answer (REQ, REP, DREQ, SIDR_REQ).
	msg       [mad.Size]byte
	pending   bool
	timeout   time.Duration
	retries   int            // retransmissions left
	resp      [mad.Size]byte // the last response (MRA, DREP), for duplicates
	respValid bool
	respAttr  mad.AttrID

	// The ID's one timer: the request's retransmission, the expiry of a REQ
	// taken and not answered, or the end of TimeWait (never two at once).
	timer    clock.Timer
	timerSeq uint64 // bumped by arm and stopTimer: a timer that fired late sees it changed
}

// State returns the ID's state.
func (id *ID) State() State {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.state
}

// LocalCommID and RemoteCommID return the comm IDs of the connection.
func (id *ID) LocalCommID() uint32 { id.cm.mu.Lock(); defer id.cm.mu.Unlock(); return id.localID }

func (id *ID) RemoteCommID() uint32 {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.remoteID
}

// ServiceID returns the service ID listened on or connected to.
func (id *ID) ServiceID() uint64 { id.cm.mu.Lock(); defer id.cm.mu.Unlock(); return id.serviceID }

// SetHandler redirects the ID's later events (a new ID starts with its
// listener's handler).
func (id *ID) SetHandler(h Handler) { id.handler.Store(&h) }

func (id *ID) handlerIfLive() Handler {
	h := id.handler.Load()
	if h == nil || id.destroyed.Load() {
		return nil
	}
	return *h
}

func (id *ID) isDestroyed() bool { return id.destroyed.Load() }

// Listen makes an Idle ID a listener for serviceID (ib_cm_listen): REQs and
// SIDR_REQs for it come to its handler as REQ_RECEIVED and SIDR_REQ_RECEIVED
// with a new ID each.
func (id *ID) Listen(serviceID uint64) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if id.state != StateIdle {
		return ErrState
	}
	if _, ok := c.listeners[serviceID]; ok {
		return ErrInUse
	}
	id.state, id.serviceID = StateListen, serviceID
	c.listeners[serviceID] = id
	return nil
}

func (id *ID) usableLocked() error {
	if id.cm.closed || id.destroyed.Load() {
		return ErrClosed
	}
	return nil
}

// REQParam is what SendREQ needs beyond the REQ itself: the GIDs the MADs use.
type REQParam struct {
	Src, Dst GID
}

// SendREQ sends req from an Idle ID (ib_send_cm_req): the CM fills its Local
// Comm ID, Local CA GUID and CM timeouts and retransmits it every 2 × packet
// life + Remote CM Response Timeout until a REP, REJ or MRA answers, Max CM
// Retries times. The ID keeps the Local QPN and Starting PSN as given.
func (id *ID) SendREQ(req *mad.REQ, p REQParam) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if id.state != StateIdle {
		return ErrState
	}
	m := *req
	m.LocalCommID = id.localID
	m.LocalCAGUID = c.cfg.CAGUID
	id.src, id.dst = p.Src, p.Dst
	id.serviceID = m.ServiceID
	id.localQPN = m.LocalQPN
	id.cmTimeout = responseWait(c.cfg.PacketLifeTime, m.RemoteCMResponseTimeout)
	id.maxRetries = int(m.MaxCMRetries)
	id.avTimeout = 0 // twice the packet life time until the REP
	id.state = StateREQSent
	id.request(id.tid, &m)
	return nil
}

// request sends m as the ID's outstanding request and arms its retransmission.
func (id *ID) request(tid uint64, m mad.Message) {
	id.cm.sendLocked(id.src, id.dst, tid, m, &id.msg)
	id.pending = true
	id.retries = id.maxRetries
	id.armLocked(id.cmTimeout)
}

// respond sends m, an answer that is not retransmitted, and keeps it for the
// duplicates of the request it answers.
func (id *ID) respond(tid uint64, m mad.Message) {
	id.keepResp(tid, m)
	id.cm.transmit(id.src, id.dst, id.resp[:])
}

// keepResp keeps m as the response a duplicate request draws (resendResp),
// without sending it now.
func (id *ID) keepResp(tid uint64, m mad.Message) {
	mad.Marshal(id.resp[:], tid, m)
	id.respValid, id.respAttr = true, m.Attr()
}

func (id *ID) resendResp(attr mad.AttrID) bool {
	if !id.respValid || id.respAttr != attr {
		return false
	}
	id.cm.transmit(id.src, id.dst, id.resp[:])
	return true
}

// arm replaces the ID's timer: f runs after d, under the CM's lock, unless the
// CM closed or another arm or stopTimer came first.
func (id *ID) arm(d time.Duration, f func()) {
	if id.timer != nil {
		id.timer.Stop()
	}
	id.timerSeq++
	seq := id.timerSeq
	id.timer = id.cm.cfg.Clock.AfterFunc(d, func() {
		c := id.cm
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed && seq == id.timerSeq {
			f()
		}
	})
}

// armLocked (re)arms the outstanding request's retransmission.
func (id *ID) armLocked(d time.Duration) {
	id.timeout = d
	id.arm(d, id.expireLocked)
}

// stopTimer cancels the ID's timer, and with it the outstanding request.
func (id *ID) stopTimer() {
	if id.timer != nil {
		id.timer.Stop()
		id.timer = nil
	}
	id.timerSeq++
	id.pending = false
}

// expireLocked runs when the outstanding request's timer fires: send it again,
// or give up (cm_process_send_error).
func (id *ID) expireLocked() {
	c := id.cm
	if !id.pending {
		return
	}
	if id.retries > 0 {
		id.retries--
		c.inc(CntRetransmits)
		c.transmit(id.src, id.dst, id.msg[:])
		next := id.timeout
		if c.cfg.Backoff {
			next = min(2*next, max(c.cfg.MaxRetryTimeout, id.timeout))
		}
		id.armLocked(next)
		return
	}
	id.pending = false
	c.inc(CntTimeouts)
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
		id.toIdleLocked()
		id.post(Event{Type: EventREQError})
	case StateREPSent, StateMRAREPRcvd:
		id.toIdleLocked()
		id.post(Event{Type: EventREPError})
	case StateDREQSent:
		id.enterTimeWaitLocked()
		id.post(Event{Type: EventDREQError})
	case StateSIDRREQSent:
		id.state = StateIdle
		id.post(Event{Type: EventSIDRREQError})
	}
}

// armHalfOpen expires a REQ the consumer never answers, once the active side
// has given up on it too (its CM response timeout times its retries), or after
// MaxPassiveWait: the passive side's memory for half-open connections is bounded
// in time, whatever the REQ says.
func (id *ID) armHalfOpen(d time.Duration) {
	id.arm(min(d, id.cm.cfg.MaxPassiveWait), func() {
		c := id.cm
		if id.state != StateREQRcvd && id.state != StateMRAREQSent {
			return
		}
		c.inc(CntTimeouts)
		id.rejectLocked(RejTimeout, guidARI(c.cfg.CAGUID), nil)
		id.post(Event{Type: EventREQError})
	})
}

// armSIDRExpiry expires a SIDR_REQ the consumer never answers after what our
// own SIDR_REQ waits for its answer (its timeout times its retries), up to
// MaxPassiveWait: the ID goes Idle with SIDR_REQ_ERROR, and the requester has
// given up by then.
func (id *ID) armSIDRExpiry() {
	c := id.cm
	d := allTries(responseWait(c.cfg.PacketLifeTime, c.cfg.ResponseTimeout), c.cfg.MaxCMRetries)
	id.arm(min(d, c.cfg.MaxPassiveWait), func() {
		if id.state != StateSIDRREQRcvd {
			return
		}
		c.inc(CntTimeouts)
		if id.sidrKey != nil {
			delete(c.sidr, *id.sidrKey)
			id.sidrKey = nil
		}
		id.state = StateIdle
		id.post(Event{Type: EventSIDRREQError})
	})
}

func guidARI(g uint64) []byte {
	var b [8]byte
	for i := range b {
		b[i] = byte(g >> (56 - 8*i))
	}
	return b[:]
}

func (id *ID) post(ev Event) {
	ev.ID = id
	if ev.Src.IsZero() {
		ev.Src, ev.Dst = id.dst, id.src
	}
	id.cm.events.post(ev)
}

// toIdleLocked forgets the peer (cm_reset_to_idle).
func (id *ID) toIdleLocked() {
	id.stopTimer()
	id.dropRemoteLocked()
	id.state = StateIdle
}

func (id *ID) dropRemoteLocked() {
	if id.inRemote {
		delete(id.cm.remote, remoteKey{id.remoteID, id.remoteGUID})
		id.inRemote = false
	}
}

// enterTimeWaitLocked keeps the connection's IDs for the time its packets may
// still be in flight (cm_enter_timewait), then frees them and, unless the ID is
// destroyed, reports TIMEWAIT_EXIT.
func (id *ID) enterTimeWaitLocked() {
	id.stopTimer()
	id.state = StateTimeWait
	wait := id.avTimeout // cm_enter_timewait: av.timeout
	if wait == 0 {
		wait = IBTime(ackTimeout(id.cm.cfg.TargetACKDelay, id.cm.cfg.PacketLifeTime))
	}
	// The peer's field sets it, and an ID in TimeWait holds its place under
	// MaxIDs: bounded as a passive wait is (an ACK timeout of 31 says 2.4 h).
	wait = min(wait, id.cm.cfg.MaxPassiveWait)
	id.arm(wait, func() {
		c := id.cm
		if id.state != StateTimeWait {
			return
		}
		id.dropRemoteLocked()
		id.respValid = false
		id.state = StateIdle
		if id.destroyed.Load() {
			c.freeIDLocked(id)
			return
		}
		id.post(Event{Type: EventTimeWaitExit})
	})
}

// rejectLocked sends a REJ for the connection, which names the message it
// rejects and our comm ID as cm_format_rej does from our state: the REQ, from
// REQ_RCVD without our comm ID; the REP, from REP_RCVD; "other" from the rest.
// A Linux peer looks a REJ of its REQ up by its comm ID alone, so one that
// named the REQ after our REP never found a connection that had our REP's
// comm ID (cm_acquire_rejected_id). Then the ID goes Idle, or to TimeWait
// after our REP, or for a stale connection (ib_send_cm_rej).
func (id *ID) rejectLocked(reason uint16, ari, private []byte) {
	local, msg := id.localID, uint8(MsgOther)
	switch id.state {
	case StateREQRcvd:
		local, msg = 0, MsgREQ
	case StateMRAREQSent:
		msg = MsgREQ
	case StateREPRcvd, StateMRAREPSent:
		msg = MsgREP
	}
	afterREP := id.state == StateREPSent || id.state == StateMRAREPRcvd
	id.sendREJLocked(reason, msg, local, ari, private)
	if reason == RejStaleConn || afterREP {
		id.enterTimeWaitLocked()
		return
	}
	id.toIdleLocked()
}

// sendREJLocked sends a REJ for the connection, rejecting message msg, with
// local as its Local Comm ID.
func (id *ID) sendREJLocked(reason uint16, msg uint8, local uint32, ari, private []byte) {
	r := &mad.REJ{LocalCommID: local, RemoteCommID: id.remoteID, MessageRejected: msg, Reason: reason}
	r.RejectedInfoLength = uint8(copy(r.ARI[:], ari))
	copy(r.PrivateData[:], private)
	tid := id.peerTID
	if id.state == StateREQSent || id.state == StateMRAREQRcvd || id.state == StateREPRcvd ||
		id.state == StateMRAREPSent || id.state == StateEstablished || id.state == StateDREQSent {
		tid = id.tid
	}
	var buf [mad.Size]byte
	id.cm.sendLocked(id.src, id.dst, tid, r, &buf)
}

// MRAFlagDelay in SendMRA's serviceTimeout is ib_cm's IB_CM_MRA_FLAG_DELAY:
// no MRA goes now; the ID enters MRA_REQ_SENT or MRA_REP_SENT, and the first
// duplicate of the peer's request draws the MRA (rdma_cm asks so of every RC
// request and reply it hands to its consumer, CMA_CM_MRA_SETTING).
const MRAFlagDelay = 0x80

// SendMRA asks the peer to wait serviceTimeout (an exponent, with MRAFlagDelay
// perhaps) longer for our REP or RTU (ib_send_cm_mra): from REQ_RCVD (we will
// send the REP late) or REP_RCVD. It is sent again for each duplicate of the
// request.
func (id *ID) SendMRA(serviceTimeout uint8, private []byte) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if len(private) > mad.MRAPrivateLen {
		return errPrivate
	}
	delay := serviceTimeout&MRAFlagDelay != 0
	serviceTimeout &^= MRAFlagDelay
	var what uint8
	switch id.state {
	case StateREQRcvd:
		id.state, what = StateMRAREQSent, MsgREQ
		// The consumer asked the peer to wait serviceTimeout longer: so does
		// the half-open expiry (up to MaxPassiveWait), once the MRA goes.
		if delay {
			id.mraWait = IBTime(serviceTimeout)
		} else {
			id.armHalfOpen(IBTime(serviceTimeout) + id.halfOpen)
		}
	case StateREPRcvd:
		id.state, what = StateMRAREPSent, MsgREP
	default:
		return ErrState
	}
	m := &mad.MRA{LocalCommID: id.localID, RemoteCommID: id.remoteID, MessageMRAed: what,
		ServiceTimeout: serviceTimeout}
	copy(m.PrivateData[:], private)
	tid := id.peerTID
	if what == MsgREP {
		tid = id.tid
	}
	if delay {
		id.keepResp(tid, m)
	} else {
		id.respond(tid, m)
	}
	return nil
}

var errPrivate = fmt.Errorf("cm: private data too long: %w", errs.ErrInvalid)

// REPParam is what SendREP needs beyond the REP itself.
type REPParam struct {
	LocalQPN uint32
}

// SendREP accepts the REQ (ib_send_cm_rep): the CM fills the comm IDs, CA GUID
// and Target ACK Delay and retransmits it until an RTU (or a REJ, or data:
// Established) answers.
func (id *ID) SendREP(rep *mad.REP) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if id.state != StateREQRcvd && id.state != StateMRAREQSent {
		return ErrState
	}
	m := *rep
	m.LocalCommID, m.RemoteCommID = id.localID, id.remoteID
	m.LocalCAGUID = c.cfg.CAGUID
	m.TargetACKDelay = c.cfg.TargetACKDelay
	id.localQPN = m.LocalQPN
	id.respValid = false
	id.state = StateREPSent
	id.request(id.peerTID, &m)
	return nil
}

// SendRTU completes an active connection (ib_send_cm_rtu) from REP_RCVD or
// MRA_REP_SENT. The RTU is kept to answer a duplicate REP.
func (id *ID) SendRTU(private []byte) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if id.state != StateREPRcvd && id.state != StateMRAREPSent {
		return ErrState
	}
	if len(private) > mad.RTUPrivateLen {
		return errPrivate
	}
	m := &mad.RTU{LocalCommID: id.localID, RemoteCommID: id.remoteID}
	copy(m.PrivateData[:], private)
	id.state = StateEstablished
	id.respond(id.tid, m)
	return nil
}

// Established moves a passive ID whose RTU was lost to Established when data
// arrives on its QP first (ib_cm_notify IB_EVENT_COMM_EST, cm_establish): the
// REP is no longer retransmitted, USER_ESTABLISHED follows, and the late RTU
// is counted a duplicate (cm_rtu_handler). ErrIsConn when established already,
// ErrState from any other state.
func (id *ID) Established() error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	switch id.state {
	case StateREPSent, StateMRAREPRcvd:
	case StateEstablished:
		return ErrIsConn
	default:
		return ErrState
	}
	id.stopTimer()
	id.state = StateEstablished
	id.post(Event{Type: EventUserEstablished})
	return nil
}

// SendREJ refuses a REQ or a REP (ib_send_cm_rej) with reason, ARI and private
// data.
func (id *ID) SendREJ(reason uint16, ari, private []byte) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if len(private) > mad.REJPrivateLen || len(ari) > mad.REJARILen {
		return errPrivate
	}
	switch id.state {
	case StateREQRcvd, StateMRAREQSent, StateREPSent, StateMRAREPRcvd,
		StateREQSent, StateMRAREQRcvd, StateREPRcvd, StateMRAREPSent:
		id.rejectLocked(reason, ari, private)
	default:
		return ErrState
	}
	return nil
}

// SendDREQ starts a disconnect from Established (ib_send_cm_dreq): retransmitted
// until a DREP or a DREQ of the peer's answers it, then TimeWait. From any other
// state it fails with ErrState.
func (id *ID) SendDREQ(private []byte) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if len(private) > mad.DREQPrivateLen {
		return errPrivate
	}
	return id.dreqLocked(private)
}

func (id *ID) dreqLocked(private []byte) error {
	if id.state != StateEstablished {
		return ErrState
	}
	m := &mad.DREQ{LocalCommID: id.localID, RemoteCommID: id.remoteID, RemoteQPN: id.remoteQPN}
	copy(m.PrivateData[:], private)
	id.state = StateDREQSent
	id.request(id.tid, m)
	return nil
}

// SendDREP answers the peer's DREQ (ib_send_cm_drep) and enters TimeWait; the
// DREP is kept to answer its duplicates.
func (id *ID) SendDREP(private []byte) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if len(private) > mad.DREPPrivateLen {
		return errPrivate
	}
	return id.drepLocked(private)
}

func (id *ID) drepLocked(private []byte) error {
	if id.state != StateDREQRcvd {
		return ErrState
	}
	m := &mad.DREP{LocalCommID: id.localID, RemoteCommID: id.remoteID}
	copy(m.PrivateData[:], private)
	id.respond(id.peerTID, m) // kept through TimeWait for duplicate DREQs
	id.enterTimeWaitLocked()
	return nil
}

// SIDRParam is what SendSIDRREQ needs.
type SIDRParam struct {
	Src, Dst  GID
	ServiceID uint64
	PKey      uint16
	Private   []byte
	Timeout   time.Duration // each try; default the CM response time of rdma_cm (2^20 × 4.096 µs)
	Retries   int
}

// SendSIDRREQ asks the peer for the QPN and Q_Key of a UD service
// (ib_send_cm_sidr_req).
func (id *ID) SendSIDRREQ(p SIDRParam) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if id.state != StateIdle {
		return ErrState
	}
	if len(p.Private) > mad.SIDRREQPrivateLen {
		return errPrivate
	}
	m := &mad.SIDRREQ{RequestID: id.localID, PKey: p.PKey, ServiceID: p.ServiceID}
	copy(m.PrivateData[:], p.Private)
	id.src, id.dst, id.serviceID = p.Src, p.Dst, p.ServiceID
	id.cmTimeout = p.Timeout
	if id.cmTimeout == 0 {
		id.cmTimeout = IBTime(20)
	}
	id.maxRetries = p.Retries
	id.state = StateSIDRREQSent
	id.request(id.tid, m)
	return nil
}

// SendSIDRREP answers a SIDR_REQ (ib_send_cm_sidr_rep): status, and on success
// the QPN and Q_Key of the service.
func (id *ID) SendSIDRREP(status uint8, qpn, qkey uint32, private []byte) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := id.usableLocked(); err != nil {
		return err
	}
	if id.state != StateSIDRREQRcvd {
		return ErrState
	}
	if len(private) > mad.SIDRREPPrivateLen {
		return errPrivate
	}
	id.sidrRepLocked(status, qpn, qkey, private)
	return nil
}

func (id *ID) sidrRepLocked(status uint8, qpn, qkey uint32, private []byte) {
	m := &mad.SIDRREP{RequestID: id.remoteID, Status: status, QPN: qpn, ServiceID: id.serviceID, QKey: qkey}
	copy(m.PrivateData[:], private)
	var buf [mad.Size]byte
	id.cm.sendLocked(id.src, id.dst, id.peerTID, m, &buf)
	if id.sidrKey != nil {
		delete(id.cm.sidr, *id.sidrKey)
		id.sidrKey = nil
	}
	id.state = StateIdle
}

// Destroy ends the ID (ib_destroy_cm_id) as ib_cm's cm_destroy_id does from its
// state: a REQ of ours is cancelled with a REJ (timeout), a REQ or REP not yet
// answered is refused (consumer defined), an established connection sends a
// DREQ and a DREQ received is answered, then the comm IDs wait out TimeWait
// before they are freed. No event is delivered once Destroy returns; from
// another goroutine it waits for a running handler of the ID.
func (id *ID) Destroy() {
	c := id.cm
	c.mu.Lock()
	if id.destroyed.Swap(true) {
		c.mu.Unlock()
		return
	}
	if !c.closed {
		id.destroyLocked()
	}
	c.mu.Unlock()
	c.events.waitIdle(id)
}

func (id *ID) destroyLocked() {
	c := id.cm
	switch id.state {
	case StateListen:
		delete(c.listeners, id.serviceID)
	case StateSIDRREQRcvd:
		id.sidrRepLocked(SIDRReject, 0, 0, nil)
	case StateREQSent, StateMRAREQRcvd:
		id.rejectLocked(RejTimeout, guidARI(c.cfg.CAGUID), nil)
	case StateREQRcvd, StateMRAREQSent, StateREPSent, StateMRAREPRcvd, StateREPRcvd, StateMRAREPSent:
		id.rejectLocked(RejConsumerDefined, nil, nil)
	case StateEstablished:
		id.dreqLocked(nil)
		id.enterTimeWaitLocked()
	case StateDREQSent:
		id.enterTimeWaitLocked()
	case StateDREQRcvd:
		id.drepLocked(nil)
	}
	if id.state == StateTimeWait {
		return // kept for the stale-connection checks until TimeWait ends
	}
	id.stopTimer()
	id.dropRemoteLocked()
	if id.sidrKey != nil {
		delete(c.sidr, *id.sidrKey)
	}
	c.freeIDLocked(id)
}
