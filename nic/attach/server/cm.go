package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/conv"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// The connection manager over the socket: the daemon's rdma_cm (QP1 and the
// IB CM belong to the device, one per port) runs the process's IDs, as the
// kernel's rdma_ucm does for librdmacm. The IDs have no QP of the daemon's
// making: CM_CONNECT and CM_ACCEPT name the process's own QP, whose number the
// daemon announces, and the process moves it through its states with the
// attributes CM_INIT_QP_ATTR gives (rdma_init_qp_attr), as librdmacm does.

// cmObj is a CM ID of the process's.
type cmObj struct {
	objBase
	id *rdmacm.ID
	ch *cmChanObj // the channel it is on (the control goroutine's after creation)
}

func (o *cmObj) close() error { return o.id.Destroy() }
func (o *cmObj) release()     {}

// cmChanObj is an event channel (rdma_create_event_channel): an rdma_cm
// channel of the daemon's whose events a goroutine writes, one datagram
// each, to a socket whose other end the process holds (librdmacm's channel
// fd). The session's own channel, for IDs that name none (handle 0), writes
// to the control socket instead.
type cmChanObj struct {
	objBase
	ev   *rdmacm.EventChannel
	sock int // the daemon's end; -1: the control socket
	stop context.CancelFunc
	done chan struct{}
	// fwd is held by the channel's goroutine from taking an event to having
	// written it: a migration of an ID off the channel waits for it, so that
	// no event taken before the migration is written after it (the events not
	// yet taken move with the ID).
	fwd sync.Mutex
}

// close fails with EBUSY while IDs remain on the channel.
func (o *cmChanObj) close() error {
	if err := o.ev.Close(); err != nil {
		return err
	}
	o.halt()
	return nil
}

// halt stops the channel's goroutine (again: a no-op).
func (o *cmChanObj) halt() {
	o.stop()
	<-o.done
}

// shutdown is close when the session ends: with the goroutine halted, the IDs
// of CONNECT_REQUESTs the process never got, still queued on the channel and
// not the session's objects, are rejected and destroyed, so that the channel
// closes. Before, teardown's close failed (EBUSY) on them and the goroutine
// lived on, making objects of the dead session and writing to a closed
// descriptor.
func (o *cmChanObj) shutdown() error {
	o.halt()
	done, cancel := context.WithCancel(context.Background())
	cancel() // GetEvent returns what is queued, then the context's error
	for range 100 {
		for {
			ev, err := o.ev.GetEvent(done)
			if err != nil {
				break
			}
			if ev.Type == rdmacm.EventConnectRequest {
				ev.ID.Reject(nil)
				ev.ID.Destroy()
			}
		}
		// A CONNECT_REQUEST may have come meanwhile: its listener may still
		// be in teardown's hands. Again, a while.
		if err := o.ev.Close(); !errors.Is(err, rdmacm.ErrBusy) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return o.ev.Close()
}

func (o *cmChanObj) release() {
	if o.sock >= 0 {
		unix.Close(o.sock)
	}
}

// startChannel makes a channel writing to sock and starts its goroutine.
func (ss *session) startChannel(sock int) *cmChanObj {
	ctx, cancel := context.WithCancel(context.Background())
	o := &cmChanObj{objBase: objBase{kind: attach.KindCMChannel, ss: ss}, ev: rdmacm.NewEventChannel(), sock: sock,
		stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		ss.cmEvents(ctx, o)
	}()
	return o
}

// cmChannel returns the channel of handle h, or the session's own for 0
// (made the first time).
func (ss *session) cmChannel(h uint32) (*cmChanObj, error) {
	if h != 0 {
		return get[*cmChanObj](ss, attach.KindCMChannel, h)
	}
	ss.cmOnce.Do(func() { ss.cm = ss.startChannel(-1) })
	return ss.cm, nil
}

// createCMChannel is CM_CREATE_CHANNEL: the reply carries the process's end
// of the channel's socket, which the daemon then closes.
func (ss *session) createCMChannel() (any, int, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, err
	}
	unix.SetNonblock(pair[0], true)
	o := ss.startChannel(pair[0])
	h, err := ss.add(o, 0)
	if err != nil {
		o.close()
		o.release()
		unix.Close(pair[1])
		return nil, -1, err
	}
	ss.closeAfterReply = append(ss.closeAfterReply, pair[1])
	return &attach.HandleRep{Handle: h}, pair[1], nil
}

// cmEvents forwards the channel's events to the process. A CONNECT_REQUEST's
// new ID becomes the process's object first; an event that finds the process
// at its object limit rejects the request.
func (ss *session) cmEvents(ctx context.Context, ch *cmChanObj) {
	buf := make([]byte, 0, attach.MaxMessage)
	for {
		if ch.ev.Wait(ctx) != nil {
			return
		}
		ch.fwd.Lock()
		ev, err := ch.ev.TryGetEvent()
		if err != nil {
			ch.fwd.Unlock()
			return
		}
		if ev != nil {
			buf = ss.forward(ctx, ch, ev, buf)
		}
		ch.fwd.Unlock()
	}
}

// forward writes one event of channel ch to the process (cmEvents).
func (ss *session) forward(ctx context.Context, ch *cmChanObj, ev *rdmacm.Event, buf []byte) []byte {
	var o *cmObj
	var listen uint32
	if ev.Type == rdmacm.EventConnectRequest {
		o = &cmObj{objBase: objBase{kind: attach.KindCMID, ss: ss}, id: ev.ID, ch: ch}
		if _, err := ss.add(o, 0); err != nil {
			ss.logf("CONNECT_REQUEST rejected: %v", err)
			ev.ID.Reject(nil)
			ev.ID.Destroy()
			return buf
		}
		if l := ss.cmObjOf(ev.Listen); l != nil {
			listen = ss.handleOf(l)
		}
	} else {
		o = ss.cmObjOf(ev.ID)
		if uid, ok := ev.Context.(uint32); ok { // a join's (CM_JOIN_MCAST)
			listen = uid
		}
	}
	if o == nil { // destroyed meanwhile
		return buf
	}
	msg := &attach.CMEventMsg{Type: uint32(ev.Type), ID: ss.handleOf(o), Listen: listen, Status: int32(ev.Status),
		Src: attach.MakeSockAddr(ev.ID.LocalAddr()), Dst: attach.MakeSockAddr(ev.ID.PeerAddr()),
		AV: conv.WireAV(ev.UD.AV)}
	// An event's private data fit the field: the largest, a REP's, is its size.
	msg.Param, _ = conv.WireConnParam(ev.Param)
	if ev.ID.PortSpace() == rdmacm.PSUDP {
		msg.Param.QPN, msg.Param.QKey = ev.UD.QPN, ev.UD.QKey
		msg.Param.PrivLen = uint32(copy(msg.Param.Private[:], ev.UD.PrivateData))
	}
	if ch.sock < 0 {
		ss.queue(attach.OpCMEvent, msg)
		return buf
	}
	buf, _ = attach.Encode(buf[:0], attach.OpCMEvent, 0, 0, msg)
	if err := writeWithin(ctx, ch.sock, buf, writeTimeout); err != nil {
		ss.logf("CM_EVENT %v dropped: %v", ev.Type, err)
	}
	return buf
}

// writeWithin sends a datagram on a non-blocking socket, waiting for room
// until d passes or ctx ends: a process that does not read its channel stalls
// only that channel.
func writeWithin(ctx context.Context, fd int, msg []byte, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		err := unix.Sendmsg(fd, msg, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if !errors.Is(err, unix.EAGAIN) {
			return err
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("the process does not read its event channel: %w", err)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		unix.Poll(fds, 50) // rechecks ctx and the deadline at least this often
	}
}

// cmObjOf is the process's object of an ID (nil once destroyed).
func (ss *session) cmObjOf(id *rdmacm.ID) *cmObj {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.cmID[id]
}

// handleOf reads an object's handle.
func (ss *session) handleOf(o obj) uint32 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return o.base().handle
}

// connParam is the request's rdma_conn_param, with the QPN of the process's
// QP it names: by handle, or by number (librdmacm's conn_param qp_num for a QP
// not on the ID) when that number is one of the process's QPs; another
// process's QP is never named.
func (ss *session) connParam(req *attach.CMConnReq) (rdmacm.ConnParam, error) {
	c, ok := conv.VerbsConnParam(&req.Param)
	if !ok {
		return rdmacm.ConnParam{}, fmt.Errorf("%w: %d bytes of private data", verbs.ErrInvalid, req.Param.PrivLen)
	}
	if req.QP != 0 {
		q, err := get[*qpObj](ss, attach.KindQP, req.QP)
		if err != nil {
			return c, err
		}
		c.QPN = q.qp.QPN()
	} else if c.QPN != 0 && !ss.ownsQPN(c.QPN) {
		return c, fmt.Errorf("%w: QP %#x is not the process's", verbs.ErrInvalid, c.QPN)
	}
	return c, nil
}

// ownsQPN reports whether a live QP of the session's has number qpn.
func (ss *session) ownsQPN(qpn uint32) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, q := range ss.qps {
		if q.qp.QPN() == qpn && !q.dying {
			return true
		}
	}
	return false
}

// cmRequest runs a CM request.
func (ss *session) cmRequest(op attach.Op, p []byte) (any, error) {
	switch op {
	case attach.OpCMCreateID:
		var req attach.CMIDReq // ID: the channel's handle
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, err
		}
		ch, err := ss.cmChannel(req.ID)
		if err != nil {
			return nil, err
		}
		o := &cmObj{objBase: objBase{kind: attach.KindCMID, ss: ss}, ch: ch}
		id, err := ch.ev.CreateID(o, rdmacm.PortSpace(req.Arg))
		if err != nil {
			return nil, err
		}
		o.id = id
		h, err := ss.add(o, 0)
		if err != nil {
			id.Destroy()
			return nil, err
		}
		return &attach.HandleRep{Handle: h}, nil
	case attach.OpCMBindAddr, attach.OpCMResolveAddr:
		var req attach.CMAddrReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, err
		}
		o, err := get[*cmObj](ss, attach.KindCMID, req.ID)
		if err != nil {
			return nil, err
		}
		src, err1 := req.Src.AddrPort()
		dst, err2 := req.Dst.AddrPort()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: address family", verbs.ErrInvalid)
		}
		if op == attach.OpCMBindAddr {
			if p := src.Port(); p != 0 && p < 1024 && !capable(ss.cred.Pid, unix.CAP_NET_BIND_SERVICE) {
				// The daemon binds as root: the process's own right counts
				// (cma_use_port: EACCES below PROT_SOCK without it).
				return nil, fmt.Errorf("%w: port %d needs CAP_NET_BIND_SERVICE", verbs.ErrAccess, p)
			}
			if err := o.id.BindAddr(src); err != nil {
				return nil, err
			}
			a := attach.MakeSockAddr(o.id.LocalAddr()) // port 0's port is chosen at bind (cma_get_port)
			return &a, nil
		}
		return nil, o.id.ResolveAddr(src.Addr(), dst)
	case attach.OpCMConnect, attach.OpCMAccept, attach.OpCMReject:
		var req attach.CMConnReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, err
		}
		o, err := get[*cmObj](ss, attach.KindCMID, req.ID)
		if err != nil {
			return nil, err
		}
		c, err := ss.connParam(&req)
		if err != nil {
			return nil, err
		}
		switch op {
		case attach.OpCMConnect:
			return nil, o.id.Connect(c)
		case attach.OpCMAccept:
			return nil, o.id.Accept(c)
		}
		return nil, o.id.Reject(c.PrivateData)
	case attach.OpCMJoinMcast, attach.OpCMLeaveMcast:
		var req attach.CMJoinReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, err
		}
		o, err := get[*cmObj](ss, attach.KindCMID, req.ID)
		if err != nil {
			return nil, err
		}
		a, err := req.Addr.AddrPort()
		if err != nil || !a.Addr().IsValid() {
			return nil, fmt.Errorf("%w: address family", verbs.ErrInvalid)
		}
		if op == attach.OpCMJoinMcast {
			// The uid comes back in the join's events (forward).
			return nil, o.id.JoinMulticast(a.Addr(), req.UID)
		}
		// The join the client names (librdmacm leaves by the join).
		return nil, o.id.LeaveMulticastContext(a.Addr(), req.UID)
	case attach.OpCMSetOption:
		var req attach.CMOptionReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, err
		}
		o, err := get[*cmObj](ss, attach.KindCMID, req.ID)
		if err != nil {
			return nil, err
		}
		return nil, o.id.SetOption(rdmacm.Option(req.Option), req.Value)
	}
	var req attach.CMIDReq
	if err := attach.DecodePayload(p, &req); err != nil {
		return nil, err
	}
	o, err := get[*cmObj](ss, attach.KindCMID, req.ID)
	if err != nil {
		return nil, err
	}
	switch op {
	case attach.OpCMMigrateID: // Arg: the channel's handle
		ch, err := ss.cmChannel(req.Arg)
		if err != nil {
			return nil, err
		}
		// The old channel's event in hand is written first (fwd); the rest
		// move (the kernel's ucma_migrate_id moves an ID's pending events).
		o.ch.fwd.Lock()
		err = o.id.Migrate(ch.ev)
		o.ch.fwd.Unlock()
		if err == nil {
			o.ch = ch
		}
		return nil, err
	case attach.OpCMResolveRoute:
		return nil, o.id.ResolveRoute()
	case attach.OpCMListen:
		if err := o.id.Listen(int(req.Arg)); err != nil {
			return nil, err
		}
		a := attach.MakeSockAddr(o.id.LocalAddr()) // as CM_BIND_ADDR's (rdma_get_src_port)
		return &a, nil
	case attach.OpCMDisconnect:
		return nil, o.id.Disconnect()
	case attach.OpCMEstablish:
		return nil, o.id.Establish()
	case attach.OpCMNotify: // Arg: enum ibv_event_type
		if req.Arg > 0xff { // not one, and verbs.EventType would wrap it
			return nil, fmt.Errorf("%w: event %d", verbs.ErrInvalid, req.Arg)
		}
		return nil, o.id.Notify(verbs.EventType(req.Arg))
	case attach.OpCMInitQPAttr:
		a, mask, err := o.id.InitQPAttr(verbs.QPState(req.Arg))
		if err != nil {
			return nil, err
		}
		return &attach.CMInitQPAttrRep{Mask: uint32(mask), Attr: conv.WireQPAttr(&a)}, nil
	}
	return nil, fmt.Errorf("%w: op %v", attach.ErrProtocol, op)
}
