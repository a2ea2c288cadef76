package server

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/conv"
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// A session is one attached process: its objects, by handle, and the
// goroutines that serve it (control here; its rings move on the engine
// goroutine, pump.go). Its objects
// are reachable only through its own handle table, so a process names only
// what it made; the engine's PD checks keep its work requests to its own
// memory.
type session struct {
	srv  *Server
	c    *net.UnixConn
	cred unix.Ucred
	comm string // the process's name at attach (/proc/PID/comm), for rdma resource's comm

	// bell is the read end of the session's doorbell pipe: the client
	// writes bellFD, its write end, and readBell wakes the engine. The ends
	// are separate descriptions: nothing the client does to its end (reading
	// is refused; O_NONBLOCK is its own) reaches bell.
	bell   *os.File
	bellFD int
	// engineBell, when the link has one, is a write end of the engine's own
	// wake-up pipe (internal/wakeup), of the session's own description: the
	// client's doorbell wakes the engine's Wait directly, with no goroutine
	// in between. -1: bellFD is the doorbell.
	engineBell int
	// async is the daemon's end of the process's async event socket (a
	// SOCK_SEQPACKET pair; HELLO hands the other end, asyncPeer, over):
	// libibverbs' async_fd. Written without blocking: past a full socket,
	// events are dropped, as uverbs drops past its limit.
	async, asyncPeer int
	stop             chan struct{}
	events           chan outMsg // events for the process, written by writeEvents
	wmu              sync.Mutex  // writes on c

	// The session's own CM event channel (its events on the control
	// socket), made by the first CM_CREATE_ID that names no channel.
	cmOnce sync.Once
	cm     *cmChanObj
	// Descriptors a reply hands over and the daemon then closes (the
	// process's ends of its sockets); the control goroutine's.
	closeAfterReply []int

	mu     sync.Mutex // the fields below; the pump holds it for a pass
	objs   map[uint32]obj
	next   uint32
	shm    int // bytes of rings
	mapped int // bytes of the process's memory mapped for its regions
	qps    []*qpObj
	cqs    []*cqObj
	srqs   []*srqObj
	cmID   map[*rdmacm.ID]*cmObj // an ID's object: a CONNECT_REQUEST's ID has its listener's Context
}

// eventQueue bounds the events waiting for a slow client; past it they are
// dropped (and logged), as the kernel's uverbs drops past its event limit.
const eventQueue = 256

// writeTimeout bounds a reply or event to a client that does not read.
const writeTimeout = 5 * time.Second

func newSession(s *Server, c *net.UnixConn, cred unix.Ucred) (*session, error) {
	var bell [2]int
	if err := unix.Pipe2(bell[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("doorbell: %w", err)
	}
	_, _ = unix.FcntlInt(uintptr(bell[1]), unix.F_SETPIPE_SZ, 4096) // as a channel's
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(bell[0])
		unix.Close(bell[1])
		return nil, fmt.Errorf("async event socket: %w", err)
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cred.Pid))
	engineBell, err := s.dev.WakeFD()
	if err != nil {
		engineBell = -1
	}
	return &session{srv: s, c: c, cred: cred, comm: strings.TrimSpace(string(comm)), bell: os.NewFile(uintptr(bell[0]), "xrnic-doorbell"), bellFD: bell[1],
		stop: make(chan struct{}), events: make(chan outMsg, eventQueue),
		objs: map[uint32]obj{}, cmID: map[*rdmacm.ID]*cmObj{}, engineBell: engineBell,
		async: pair[0], asyncPeer: pair[1]}, nil
}

func (ss *session) logf(format string, a ...any) {
	ss.srv.cfg.Logf("attach: pid %d: "+format, append([]any{ss.cred.Pid}, a...)...)
}

// run serves the session until its socket closes or breaks the protocol, then
// frees everything the process held.
func (ss *session) run() {
	ss.logf("attached (uid %d)", ss.cred.Uid)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ss.readBell() }()
	go func() { defer wg.Done(); ss.writeEvents() }()
	err := ss.srv.dev.AddPoller(ss)
	if err == nil {
		err = ss.control()
		if rerr := ss.srv.dev.RemovePoller(ss); rerr != nil {
			ss.logf("removing the poller: %v", rerr)
		}
	}
	close(ss.stop)
	ss.bell.Close() // ends readBell
	unix.Close(ss.bellFD)
	if ss.engineBell >= 0 {
		unix.Close(ss.engineBell)
	}
	wg.Wait()
	n := ss.teardown()
	if ss.cm != nil { // the IDs are gone: no more events
		if err := ss.cm.shutdown(); err != nil {
			ss.logf("the CM channel: %v", err)
		}
	}
	ss.c.Close()
	unix.Close(ss.async)
	if ss.asyncPeer >= 0 {
		unix.Close(ss.asyncPeer)
	}
	ss.logf("detached (%v); freed %d objects", err, n)
}

func (ss *session) readBell() {
	var b [512]byte
	for {
		if _, err := ss.bell.Read(b[:]); err != nil {
			return
		}
		ss.kick()
	}
}

// kick wakes the engine to look at the session's rings; it never blocks.
func (ss *session) kick() { ss.srv.dev.Wake() }

// outMsg is an event for the process: its op and payload.
type outMsg struct {
	op attach.Op
	p  any
}

func (ss *session) sendEvent(ev attach.EventMsg) { ss.queue(attach.OpEvent, &ev) }

// queue hands an event to writeEvents; past eventQueue undelivered ones it is
// dropped.
func (ss *session) queue(op attach.Op, p any) {
	select {
	case ss.events <- outMsg{op, p}:
	default:
		ss.logf("%v %+v dropped: %d undelivered", op, p, eventQueue)
	}
}

// writeEvents writes the queued events: asynchronous events on the async
// socket, CM events on the control socket.
func (ss *session) writeEvents() {
	buf := make([]byte, 0, attach.MaxMessage)
	for {
		select {
		case ev := <-ss.events:
			msg, _ := attach.Encode(buf[:0], ev.op, 0, 0, ev.p)
			if ev.op == attach.OpEvent {
				ss.writeAsync(msg)
				continue
			}
			if err := ss.write(msg); err != nil {
				return
			}
		case <-ss.stop:
			return
		}
	}
}

// writeAsync sends an asynchronous event without blocking: a process that
// does not read its async socket loses events, and stalls nothing.
func (ss *session) writeAsync(msg []byte) {
	err := unix.Sendmsg(ss.async, msg, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	if errors.Is(err, unix.EAGAIN) {
		ss.logf("an async event dropped: the process does not read its async socket")
	}
}

func (ss *session) write(msg []byte, fds ...int) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	_ = ss.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	return attach.Send(ss.c, msg, fds...)
}

// control answers requests, one at a time, until the socket closes or a
// message breaks the protocol.
func (ss *session) control() error {
	buf := make([]byte, attach.MaxMessage)
	oob := make([]byte, attach.OOBSpace)
	out := make([]byte, 0, attach.MaxMessage)
	hello := false
	_ = ss.c.SetReadDeadline(time.Now().Add(ss.srv.cfg.HelloTimeout))
	for {
		msg, fds, err := attach.Recv(ss.c, buf, oob)
		if err != nil {
			return err
		}
		h, p, err := attach.DecodeHeader(msg)
		if err == nil && !hello && h.Op != attach.OpHello {
			err = fmt.Errorf("%w: %v before HELLO", attach.ErrProtocol, h.Op)
		}
		if err != nil {
			attach.CloseFDs(fds)
			return err
		}
		rep, rfd, err := ss.handle(h.Op, p, fds)
		if errors.Is(err, attach.ErrProtocol) {
			return err
		}
		if h.Op == attach.OpHello && err == nil {
			hello = true
			// Attached: a process may be idle for as long as it runs.
			_ = ss.c.SetReadDeadline(time.Time{})
		}
		if err != nil {
			// The reply carries only the errno, as libibverbs' calls return:
			// no payload, not even a handler's typed nil (which Encode
			// refuses, and its nil message reads as the socket's end).
			ss.logf("%v: %v", h.Op, err)
			rep = nil
		}
		out, _ = attach.Encode(out[:0], h.Op, h.Seq, attach.Errno(err), rep)
		var werr error
		switch {
		case h.Op == attach.OpHello && err == nil:
			// HELLO's two descriptors: the doorbell and the async socket,
			// whose other end the process then holds alone.
			werr = ss.write(out, rfd, ss.asyncPeer)
			unix.Close(ss.asyncPeer)
			ss.asyncPeer = -1
		case rfd >= 0:
			werr = ss.write(out, rfd)
		default:
			werr = ss.write(out)
		}
		for _, fd := range ss.closeAfterReply {
			unix.Close(fd)
		}
		ss.closeAfterReply = ss.closeAfterReply[:0]
		if werr != nil {
			return werr
		}
	}
}

// handle runs one request. It owns fds: each is used or closed. The reply's
// descriptor, when rfd >= 0, stays the session's (sending dups it).
func (ss *session) handle(op attach.Op, p []byte, fds []int) (rep any, rfd int, err error) {
	rfd = -1
	wantFDs := 0
	if op == attach.OpRegMR {
		wantFDs = 1
	}
	if len(fds) != wantFDs {
		attach.CloseFDs(fds)
		return nil, -1, fmt.Errorf("%w: %v with %d descriptors", attach.ErrProtocol, op, len(fds))
	}
	d := ss.srv.dev
	switch op {
	case attach.OpHello:
		var req attach.HelloReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		if ss.asyncPeer < 0 {
			return nil, -1, fmt.Errorf("%w: a second HELLO", attach.ErrProtocol)
		}
		if req.Version < attach.MinVersion || req.Version > attach.Version {
			return nil, -1, fmt.Errorf("%w: version %d, the daemon speaks %d to %d", attach.ErrProtocol, req.Version,
				attach.MinVersion, attach.Version)
		}
		r := &attach.HelloRep{Version: req.Version, NodeGUID: d.NodeGUID()}
		copy(r.Name[:], d.Name())
		if ss.engineBell >= 0 {
			return r, ss.engineBell, nil
		}
		return r, ss.bellFD, nil
	case attach.OpQueryDevice:
		r := conv.WireDevice(d.Query(), d.NodeGUID())
		return &r, -1, checkEmpty(p)
	case attach.OpQueryPort:
		r := conv.WirePort(d.QueryPort())
		return &r, -1, checkEmpty(p)
	case attach.OpQueryGID:
		var req attach.GIDReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		g, err := d.QueryGID(int(req.Index))
		return &attach.GIDRep{GID: g}, -1, err
	case attach.OpAllocPD:
		if err := checkEmpty(p); err != nil {
			return nil, -1, err
		}
		return ss.allocPD()
	case attach.OpRegMR:
		var req attach.RegMRReq
		if err := attach.DecodePayload(p, &req); err != nil {
			attach.CloseFDs(fds)
			return nil, -1, err
		}
		return ss.regMR(&req, fds[0])
	case attach.OpCreateCompChannel:
		if err := checkEmpty(p); err != nil {
			return nil, -1, err
		}
		return ss.createChannel()
	case attach.OpCreateCQ:
		var req attach.CreateCQReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		return ss.createCQ(&req)
	case attach.OpCreateQP:
		var req attach.CreateQPReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		return ss.createQP(&req)
	case attach.OpModifyQP:
		var req attach.ModifyQPReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		return nil, -1, ss.modifyQP(&req)
	case attach.OpQueryQP:
		var req attach.DestroyReq // kind and handle
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		r, err := ss.queryQP(req.Handle)
		return r, -1, err
	case attach.OpCreateAH:
		var req attach.CreateAHReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		return ss.createAH(&req)
	case attach.OpCreateSRQ:
		var req attach.CreateSRQReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		return ss.createSRQ(&req)
	case attach.OpModifySRQ:
		var req attach.ModifySRQReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		o, err := get[*srqObj](ss, attach.KindSRQ, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		return nil, -1, o.srq.Modify(verbs.SRQAttr{MaxWR: req.MaxWR, Limit: req.Limit}, verbs.SRQAttrMask(req.Mask))
	case attach.OpQuerySRQ:
		var req attach.DestroyReq // kind and handle
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		o, err := get[*srqObj](ss, attach.KindSRQ, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		// rxe_query_srq: the limit armed, 0 once it fired.
		a := o.srq.Query()
		return &attach.QuerySRQRep{MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, Limit: a.Limit}, -1, nil
	case attach.OpAttachMcast, attach.OpDetachMcast:
		var req attach.McastReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		// ib_uverbs_attach_mcast: a handle naming no QP is EINVAL.
		o, err := ref[*qpObj](ss, attach.KindQP, req.QP)
		if err != nil {
			return nil, -1, err
		}
		if op == attach.OpAttachMcast {
			return nil, -1, o.qp.AttachMcast(req.GID, req.MLID)
		}
		return nil, -1, o.qp.DetachMcast(req.GID, req.MLID)
	case attach.OpCMCreateID, attach.OpCMBindAddr, attach.OpCMResolveAddr, attach.OpCMResolveRoute,
		attach.OpCMListen, attach.OpCMConnect, attach.OpCMAccept, attach.OpCMReject, attach.OpCMDisconnect,
		attach.OpCMEstablish, attach.OpCMInitQPAttr, attach.OpCMMigrateID, attach.OpCMSetOption, attach.OpCMNotify,
		attach.OpCMJoinMcast, attach.OpCMLeaveMcast:
		rep, err := ss.cmRequest(op, p)
		return rep, -1, err
	case attach.OpCMCreateChannel:
		if err := checkEmpty(p); err != nil {
			return nil, -1, err
		}
		return ss.createCMChannel()
	case attach.OpDestroy:
		var req attach.DestroyReq
		if err := attach.DecodePayload(p, &req); err != nil {
			return nil, -1, err
		}
		return nil, -1, ss.destroy(req.Kind, req.Handle)
	}
	return nil, -1, fmt.Errorf("%w: op %v", attach.ErrProtocol, op)
}

func checkEmpty(p []byte) error {
	if len(p) != 0 {
		return fmt.Errorf("%w: %d payload bytes where none belong", attach.ErrProtocol, len(p))
	}
	return nil
}

// pow2 is the smallest power of two at least n (and at least 1).
func pow2(n uint32) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len32(n-1)
}

// add gives o a handle, charging shmBytes against the session's limits.
func (ss *session) add(o obj, shmBytes int) (uint32, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.objs) >= ss.srv.cfg.MaxObjects {
		return 0, fmt.Errorf("%w: %d objects", verbs.ErrLimit, len(ss.objs))
	}
	if ss.shm+shmBytes > ss.srv.cfg.MaxShm {
		return 0, fmt.Errorf("%w: %d + %d bytes", errShmLimit, ss.shm, shmBytes)
	}
	cq, _ := o.(*cqObj)
	if cq != nil && cq.ch != nil && cq.ch.dying {
		return 0, handleErr(kindName(attach.KindCompChannel), cq.ch.handle)
	}
	if ss.srv.held.Add(1) > int64(ss.srv.cfg.MaxAllObjects) {
		ss.srv.held.Add(-1)
		return 0, fmt.Errorf("%w: %d objects held by all processes", verbs.ErrLimit, ss.srv.cfg.MaxAllObjects)
	}
	if cq != nil && cq.ch != nil {
		cq.ch.users++
	}
	for {
		ss.next++
		if _, taken := ss.objs[ss.next]; ss.next != 0 && !taken {
			break
		}
	}
	b := o.base()
	b.handle, b.shm = ss.next, shmBytes
	ss.objs[ss.next] = o
	ss.shm += shmBytes
	ss.mapped += b.mapped
	switch x := o.(type) {
	case *qpObj:
		ss.qps = append(ss.qps, x)
		ss.kick() // a sleeping engine set no RingNeedWakeup on these rings yet
	case *cqObj:
		ss.cqs = append(ss.cqs, x)
	case *srqObj:
		ss.srqs = append(ss.srqs, x)
		ss.kick()
	case *cmObj:
		ss.cmID[x.id] = x
	}
	return ss.next, nil
}

// lookup finds a live object of kind by handle; the caller holds mu.
func (ss *session) lookup(kind, h uint32) (obj, error) {
	o, ok := ss.objs[h]
	if !ok || o.base().kind != kind || o.base().dying {
		return nil, handleErr(kindName(kind), h)
	}
	return o, nil
}

// ref is get for an object a create names (a QP's PD and CQs, an MR's
// PD): one the session has not is EINVAL, as uverbs answers when a create's
// handle finds nothing; a destroy or modify of a missing handle stays ENOENT.
func ref[T obj](ss *session, kind, h uint32) (T, error) {
	o, err := get[T](ss, kind, h)
	return o, refErr(err)
}

// errNoRef is a create naming an object the session has not.
var errNoRef = fmt.Errorf("names no object of the process's: %w", verbs.ErrInvalid)

func refErr(err error) error {
	if errors.Is(err, errNoHandle) {
		return fmt.Errorf("%w (%v)", errNoRef, err)
	}
	return err
}

func get[T obj](ss *session, kind, h uint32) (T, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	o, err := ss.lookup(kind, h)
	if err != nil {
		var zero T
		return zero, err
	}
	return o.(T), nil
}

// destroy closes one object. The device decides whether it can go (a PD with
// children cannot: EBUSY); the pump stops touching it first.
func (ss *session) destroy(kind, h uint32) error {
	ss.mu.Lock()
	o, err := ss.lookup(kind, h)
	if err != nil {
		ss.mu.Unlock()
		return err
	}
	o.base().dying = true
	ss.mu.Unlock()
	err = o.close()
	ss.mu.Lock()
	if err != nil {
		o.base().dying = false
		ss.mu.Unlock()
		return err
	}
	ss.forget(o)
	ss.mu.Unlock()
	o.release()
	return nil
}

// forget takes o out of the tables; the caller holds mu.
func (ss *session) forget(o obj) {
	b := o.base()
	delete(ss.objs, b.handle)
	ss.srv.held.Add(-1)
	ss.shm -= b.shm
	ss.mapped -= b.mapped
	switch x := o.(type) {
	case *qpObj:
		ss.qps = remove(ss.qps, x)
	case *cqObj:
		ss.cqs = remove(ss.cqs, x)
		if x.ch != nil {
			x.ch.users--
		}
	case *srqObj:
		ss.srqs = remove(ss.srqs, x)
	case *cmObj:
		delete(ss.cmID, x.id)
	}
}

func remove[T comparable](s []T, x T) []T {
	for i, y := range s {
		if y == x {
			s[i] = s[len(s)-1]
			var zero T
			s[len(s)-1] = zero
			return s[:len(s)-1]
		}
	}
	return s
}

// teardown frees what the process left, children before parents, as the
// kernel's uverbs does when a process exits: its QPs' outstanding work
// requests are flushed, and peers see the QPs gone. It returns how many
// objects there were.
func (ss *session) teardown() int {
	// The CM channels' goroutines first: each may still make an object of a
	// CONNECT_REQUEST, and none may come after the list below.
	ss.mu.Lock()
	var chans []*cmChanObj
	for _, o := range ss.objs {
		if c, ok := o.(*cmChanObj); ok {
			chans = append(chans, c)
		}
	}
	ss.mu.Unlock()
	if ss.cm != nil {
		ss.cm.halt()
	}
	for _, c := range chans {
		c.halt()
	}
	ss.mu.Lock()
	all := make([]obj, 0, len(ss.objs))
	for _, o := range ss.objs {
		all = append(all, o)
	}
	ss.mu.Unlock()
	for _, kind := range []uint32{attach.KindCMID, attach.KindCMChannel, attach.KindQP, attach.KindSRQ, attach.KindAH, attach.KindMR,
		attach.KindCQ, attach.KindCompChannel, attach.KindPD} {
		for _, o := range all {
			if o.base().kind != kind {
				continue
			}
			var err error
			if c, ok := o.(*cmChanObj); ok {
				err = c.shutdown()
			} else if q, ok := o.(*qpObj); ok {
				// Close, not Destroy: it leaves the QP's multicast groups,
				// as ib_uverbs_detach_umcast does for a process that goes
				// (a user's destroy of an attached QP is EBUSY).
				err = q.qp.Close().Wait()
			} else {
				err = o.close()
			}
			if err != nil {
				ss.logf("teardown: %s %d: %v", kindName(kind), o.base().handle, err)
			}
			ss.mu.Lock()
			ss.forget(o)
			ss.mu.Unlock()
			o.release()
		}
	}
	return len(all)
}

func kindName(k uint32) string {
	switch k {
	case attach.KindPD:
		return "PD"
	case attach.KindMR:
		return "MR"
	case attach.KindCompChannel:
		return "completion channel"
	case attach.KindCQ:
		return "CQ"
	case attach.KindQP:
		return "QP"
	case attach.KindAH:
		return "AH"
	case attach.KindSRQ:
		return "SRQ"
	case attach.KindCMID:
		return "CM ID"
	case attach.KindCMChannel:
		return "CM event channel"
	}
	return fmt.Sprintf("kind %d", k)
}

// regionFor maps the client's memfd for an MR: the pages holding Length bytes
// at FileOff.
func regionFor(fd int, fileOff, length, room uint64) (*shm.Region, []byte, error) {
	page := uint64(os.Getpagesize())
	if length == 0 || length > 1<<40 || fileOff > 1<<48 {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("%w: %d bytes at %d", verbs.ErrInvalid, length, fileOff)
	}
	start := fileOff &^ (page - 1)
	span := (fileOff + length - start + page - 1) &^ (page - 1)
	if span > 1<<40 {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("%w: %d bytes", verbs.ErrInvalid, span)
	}
	if span > room {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("%w: %d bytes to map, %d left to the session", verbs.ErrLimit, span, room)
	}
	r, err := shm.Map(fd, int64(start), int(span))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", verbs.ErrInvalid, err)
	}
	lo := fileOff - start
	return r, r.Bytes()[lo : lo+length], nil
}
