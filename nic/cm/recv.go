package cm

import "github.com/xrnic/xrnic/nic/mad"

// Receive takes one MAD that arrived on QP1 from the port with GID src for our
// GID dst. Anything malformed, of another class or of an attribute the CM does
// not run is dropped and counted; so are messages no state takes. Never blocks
// on a handler; safe from any goroutine.
func (c *CM) Receive(src, dst GID, b []byte) {
	h, m, err := mad.Parse(b)
	if err != nil {
		if h.MgmtClass == mad.ClassCM && h.ClassVersion == mad.CMClassVersion && len(b) >= mad.Size {
			c.inc(CntUnknownAttr) // ClassPortInfo, or an attribute the CM has not
			return
		}
		c.inc(CntMalformed)
		return
	}
	switch m.(type) {
	case *mad.LAP, *mad.APR:
		// Linux drops them on RoCE ("Alternate path messages are not
		// supported with RoCE link layer", cm_lap_handler, cm_apr_handler).
		c.inc(CntUnknownAttr)
		return
	}
	if h.Method != mad.MethodSend {
		c.inc(CntUnknownAttr)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.inc(CntReceived)
	switch m := m.(type) {
	case *mad.REQ:
		c.onREQ(src, dst, h.TID, m)
	case *mad.MRA:
		c.onMRA(src, dst, m)
	case *mad.REJ:
		c.onREJ(src, dst, m)
	case *mad.REP:
		c.onREP(src, dst, m)
	case *mad.RTU:
		c.onRTU(src, dst, m)
	case *mad.DREQ:
		c.onDREQ(src, dst, h.TID, m)
	case *mad.DREP:
		c.onDREP(src, dst, m)
	case *mad.SIDRREQ:
		c.onSIDRREQ(src, dst, h.TID, m)
	case *mad.SIDRREP:
		c.onSIDRREP(src, dst, m)
	}
}

// byComm finds the ID a message names by our comm ID, checking the peer's comm
// ID when we know it; nil (counted) when there is none.
func (c *CM) byComm(local, remote uint32) *ID {
	id := c.ids[local]
	if id == nil || (id.remoteID != 0 && id.remoteID != remote) {
		c.inc(CntUnknownCommID)
		return nil
	}
	return id
}

// connectedQP is the ID, other than except, connected to the peer's QP qpn on
// the CA guid: a REQ or REP naming that QP again is stale. ib_cm keys its
// remote QP table on the QPN and the CA GUID (cm_insert_remote_qpn), not on
// the address the message came from.
func (c *CM) connectedQP(qpn uint32, guid uint64, except *ID) *ID {
	for _, id := range c.ids {
		if id != except && id.inRemote && id.remoteQPN == qpn && id.remoteGUID == guid && id.state != StateTimeWait {
			return id
		}
	}
	return nil
}

func (c *CM) onREQ(src, dst GID, tid uint64, req *mad.REQ) {
	key := remoteKey{req.LocalCommID, req.LocalCAGUID}
	if id := c.remote[key]; id != nil {
		// A duplicate (cm_dup_req_handler): our MRA again, or a REJ if the
		// connection it names is over.
		c.inc(CntDuplicates)
		switch id.state {
		case StateMRAREQSent:
			if id.resendResp(mad.AttrMRA) && id.mraWait != 0 {
				// A delayed MRA goes now: the peer waits its time.
				id.armHalfOpen(id.mraWait + id.halfOpen)
				id.mraWait = 0
			}
		case StateTimeWait:
			// cm_format_rej from TimeWait: "other", our comm ID.
			c.inc(CntStale)
			c.reply(dst, src, tid, &mad.REJ{LocalCommID: id.localID, RemoteCommID: req.LocalCommID,
				MessageRejected: MsgOther, Reason: RejStaleConn})
		}
		return
	}
	if id := c.connectedQP(req.LocalQPN, req.LocalCAGUID, nil); id != nil {
		c.inc(CntStale)
		c.reply(dst, src, tid, &mad.REJ{RemoteCommID: req.LocalCommID, MessageRejected: MsgREQ,
			Reason: RejStaleConn})
		if id.state == StateEstablished {
			// The peer's QP starts over (a rebooted peer reuses its QPN): end
			// the old connection too, so that a later REQ gets in once it is
			// gone (cm_match_req's ib_send_cm_dreq).
			_ = id.dreqLocked(nil)
		}
		return
	}
	l := c.listeners[req.ServiceID]
	if l == nil {
		c.inc(CntNoListener)
		c.reply(dst, src, tid, &mad.REJ{RemoteCommID: req.LocalCommID, MessageRejected: MsgREQ,
			Reason: RejInvalidServiceID})
		return
	}
	if c.wireFullLocked() {
		c.inc(CntRejectedLimit)
		c.reply(dst, src, tid, &mad.REJ{RemoteCommID: req.LocalCommID, MessageRejected: MsgREQ,
			Reason: RejNoResources})
		return
	}
	id := c.newWireIDLocked(*l.handler.Load())
	id.state = StateREQRcvd
	id.remoteID, id.remoteGUID = req.LocalCommID, req.LocalCAGUID
	c.remote[key] = id
	id.inRemote = true
	id.peerTID = tid
	id.serviceID = req.ServiceID
	id.src, id.dst = dst, src
	id.remoteQPN = req.LocalQPN
	id.avTimeout = IBTime(max(req.Primary.LocalACKTimeout, 1)) // packet life = timeout - 1, then + 1
	// Our REP waits for the RTU as long as the REQ's sender says it takes to
	// answer, no packet life time added (cm_req_handler: timeout_ms from the
	// REQ's Local CM Response Timeout alone).
	id.cmTimeout = IBTime(req.LocalCMResponseTimeout)
	id.maxRetries = int(req.MaxCMRetries)
	id.halfOpen = allTries(responseWait(c.cfg.PacketLifeTime, req.RemoteCMResponseTimeout), req.MaxCMRetries)
	id.armHalfOpen(id.halfOpen)
	cp := *req
	id.post(Event{Type: EventREQReceived, Listener: l, Msg: &cp})
}

func (c *CM) onMRA(src, dst GID, m *mad.MRA) {
	id := c.byComm(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		return
	}
	switch {
	case m.MessageMRAed == MsgREQ && id.state == StateREQSent:
		id.state = StateMRAREQRcvd
		id.remoteID = m.LocalCommID
	case m.MessageMRAed == MsgREP && id.state == StateREPSent:
		id.state = StateMRAREPRcvd
	case id.state == StateMRAREQRcvd || id.state == StateMRAREPRcvd:
		c.inc(CntDuplicates) // cm_mra_handler: the timer was extended once
		return
	default:
		c.inc(CntWrongState)
		return
	}
	if !id.pending {
		return
	}
	// cm_mra_handler: the request waits the service timeout plus the path's
	// round trip (av.timeout) longer, this once; later retries wait the
	// request's own timeout again (Linux's "apply timeout modification (CM
	// MRA) only once", IBTA 12.6.6). Kept for every retry, an MRA of 31 held
	// our request 16 times 2.4 hours.
	rtt := id.avTimeout
	if rtt == 0 { // the active side before the REP: the packet life time + 1
		rtt = 2 * IBTime(c.cfg.PacketLifeTime)
	}
	id.arm(IBTime(m.ServiceTimeout)+rtt, id.expireLocked)
	cp := *m
	id.post(Event{Type: EventMRAReceived, Msg: &cp})
}

func (c *CM) onREJ(src, dst GID, m *mad.REJ) {
	id := c.ids[m.RemoteCommID]
	if id == nil && m.Reason == RejTimeout {
		// A REJ (timeout) from a destroyed active ID names us only by its own
		// comm ID and CA GUID, in the ARI (cm_acquire_rejected_id).
		var g uint64
		for _, b := range m.ARI[:8] {
			g = g<<8 | uint64(b)
		}
		id = c.remote[remoteKey{m.LocalCommID, g}]
	}
	if id == nil || (id.remoteID != 0 && m.LocalCommID != 0 && id.remoteID != m.LocalCommID) {
		c.inc(CntUnknownCommID)
		return
	}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREQRcvd, StateMRAREQSent:
		if m.Reason == RejStaleConn {
			id.enterTimeWaitLocked()
		} else {
			id.toIdleLocked()
		}
	case StateDREQSent, StateREPRcvd, StateMRAREPSent, StateEstablished:
		id.enterTimeWaitLocked()
	default:
		c.inc(CntWrongState)
		return
	}
	cp := *m
	id.post(Event{Type: EventREJReceived, Msg: &cp})
}

func (c *CM) onREP(src, dst GID, m *mad.REP) {
	id := c.ids[m.RemoteCommID]
	if id == nil {
		c.inc(CntUnknownCommID)
		return
	}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
	case StateEstablished, StateMRAREPSent:
		if id.remoteID == m.LocalCommID {
			// A duplicate (cm_dup_rep_handler): our RTU or MRA again.
			c.inc(CntDuplicates)
			if id.state == StateEstablished {
				id.resendResp(mad.AttrRTU)
			} else {
				id.resendResp(mad.AttrMRA)
			}
			return
		}
		c.inc(CntWrongState)
		return
	case StateREPRcvd:
		c.inc(CntDuplicates)
		return
	default:
		c.inc(CntWrongState)
		return
	}
	key := remoteKey{m.LocalCommID, m.LocalCAGUID}
	if other := c.remote[key]; other != nil && other != id {
		// The peer's comm ID is another connection's: stale. cm_rep_handler
		// drops such a REP and lets our REQ time out; a REJ ends both
		// attempts at once.
		id.refuseStaleREPLocked(m)
		return
	}
	if other := c.connectedQP(m.LocalQPN, m.LocalCAGUID, id); other != nil {
		// Stale, and the old connection ends too (cm_rep_handler's
		// cm_insert_remote_qpn, then ib_send_cm_dreq), as for a REQ.
		id.refuseStaleREPLocked(m)
		if other.state == StateEstablished {
			_ = other.dreqLocked(nil)
		}
		return
	}
	id.stopTimer()
	id.avTimeout = IBTime(ackTimeout(m.TargetACKDelay, c.cfg.PacketLifeTime))
	id.remoteID, id.remoteGUID = m.LocalCommID, m.LocalCAGUID
	c.remote[key] = id
	id.inRemote = true
	id.remoteQPN = m.LocalQPN
	id.state = StateREPRcvd
	cp := *m
	id.post(Event{Type: EventREPReceived, Msg: &cp})
}

// refuseStaleREPLocked refuses a stale REP with a REJ naming it (cm_issue_rej,
// STALE_CONN) and ends our attempt in TimeWait, telling the consumer.
func (id *ID) refuseStaleREPLocked(m *mad.REP) {
	id.cm.inc(CntStale)
	id.remoteID = m.LocalCommID
	id.sendREJLocked(RejStaleConn, MsgREP, id.localID, nil, nil)
	id.enterTimeWaitLocked()
	id.post(Event{Type: EventREJReceived, Msg: &mad.REJ{Reason: RejStaleConn}})
}

func (c *CM) onRTU(src, dst GID, m *mad.RTU) {
	id := c.byComm(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		return
	}
	if id.state == StateEstablished {
		// Late, after Established (data came first): cm_rtu_handler
		// counts it a duplicate, and there is no second event.
		c.inc(CntDuplicates)
		return
	}
	if id.state != StateREPSent && id.state != StateMRAREPRcvd {
		c.inc(CntWrongState)
		return
	}
	id.stopTimer()
	id.state = StateEstablished
	cp := *m
	id.post(Event{Type: EventRTUReceived, Msg: &cp})
}

func (c *CM) onDREQ(src, dst GID, tid uint64, m *mad.DREQ) {
	id := c.ids[m.RemoteCommID]
	if id == nil || id.remoteID != m.LocalCommID || id.state == StateIdle {
		// A connection long gone: answer so the peer stops asking
		// (cm_issue_drep).
		c.inc(CntUnknownCommID)
		c.reply(dst, src, tid, &mad.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID})
		return
	}
	if id.localQPN != m.RemoteQPN {
		c.inc(CntBadQPN)
		return
	}
	switch id.state {
	case StateREPSent, StateDREQSent, StateMRAREPRcvd:
		id.stopTimer()
	case StateEstablished:
	case StateTimeWait:
		// Our DREP again; or, when we sent the DREQ and never a DREP, a new
		// one (cm_dreq_handler formats a DREP in TimeWait whatever led there).
		c.inc(CntDuplicates)
		if !id.resendResp(mad.AttrDREP) {
			c.reply(dst, src, tid, &mad.DREP{LocalCommID: id.localID, RemoteCommID: id.remoteID})
		}
		return
	case StateDREQRcvd:
		c.inc(CntDuplicates)
		return
	default:
		c.inc(CntWrongState)
		return
	}
	id.state = StateDREQRcvd
	id.peerTID = tid
	cp := *m
	id.post(Event{Type: EventDREQReceived, Msg: &cp})
}

func (c *CM) onDREP(src, dst GID, m *mad.DREP) {
	id := c.byComm(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		return
	}
	if id.state != StateDREQSent && id.state != StateDREQRcvd {
		c.inc(CntWrongState)
		return
	}
	id.enterTimeWaitLocked()
	cp := *m
	id.post(Event{Type: EventDREPReceived, Msg: &cp})
}

func (c *CM) onSIDRREQ(src, dst GID, tid uint64, m *mad.SIDRREQ) {
	key := sidrKey{src, m.RequestID}
	if c.sidr[key] != nil {
		c.inc(CntDuplicates)
		return
	}
	l := c.listeners[m.ServiceID]
	if l == nil || c.wireFullLocked() {
		status := uint8(SIDRUnsupported)
		if l == nil {
			c.inc(CntNoListener)
		} else {
			c.inc(CntRejectedLimit)
			status = SIDRReject
		}
		c.reply(dst, src, tid, &mad.SIDRREP{RequestID: m.RequestID, Status: status, ServiceID: m.ServiceID})
		return
	}
	id := c.newWireIDLocked(*l.handler.Load())
	id.state = StateSIDRREQRcvd
	id.remoteID = m.RequestID
	id.peerTID = tid
	id.serviceID = m.ServiceID
	id.src, id.dst = dst, src
	id.sidrKey = &key
	c.sidr[key] = id
	id.armSIDRExpiry()
	cp := *m
	id.post(Event{Type: EventSIDRREQReceived, Listener: l, Msg: &cp})
}

func (c *CM) onSIDRREP(src, dst GID, m *mad.SIDRREP) {
	id := c.ids[m.RequestID]
	if id == nil {
		c.inc(CntUnknownCommID)
		return
	}
	if id.state != StateSIDRREQSent {
		c.inc(CntWrongState)
		return
	}
	id.stopTimer()
	id.state = StateIdle
	cp := *m
	id.post(Event{Type: EventSIDRREPReceived, Msg: &cp})
}
