// The exchange over an rdma_cm connection instead of TCP (perftest's -z and -R,
// which implies -z): perftest_communication.c's rdma_client_connect and
// rdma_server_connect set up one RC QP through rdma_cm, and rdma_write_data,
// rdma_read_data, rdma_write_keys and rdma_read_keys move every exchange as a
// SEND into a single posted receive of sizeof(struct pingpong_dest) bytes.

package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

const (
	syncSpecID = 5  // SYNC_SPEC_ID: the WRID of every exchange's SEND and receive
	destSize   = 56 // sizeof(struct pingpong_dest): the receive's length
	cmRetries  = 10 // rdma_cm_client_connection: tries, 100 ms apart
	cmRetryGap = 100 * time.Millisecond
)

// appendDestBinary appends d as rdma_write_keys sends it: struct pingpong_dest
// with its integers big-endian (lid, out_reads, qpn, psn, rkey, 4 bytes of
// padding, vaddr, the GID, srqn, gid_index).
func appendDestBinary(b []byte, d *Dest) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(d.LID))
	b = binary.BigEndian.AppendUint32(b, uint32(d.OutReads))
	b = binary.BigEndian.AppendUint32(b, d.QPN)
	b = binary.BigEndian.AppendUint32(b, d.PSN)
	b = binary.BigEndian.AppendUint32(b, d.RKey)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, d.VAddr)
	b = append(b, d.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, d.SRQN)
	return append(b, 0, 0, 0, 0)
}

// parseDestBinary reads what rdma_read_keys reads of a struct pingpong_dest.
func parseDestBinary(b []byte) Dest {
	var d Dest
	d.LID = uint16(binary.BigEndian.Uint32(b[0:]))
	d.OutReads = uint16(binary.BigEndian.Uint32(b[4:]))
	d.QPN = binary.BigEndian.Uint32(b[8:])
	d.PSN = binary.BigEndian.Uint32(b[12:])
	d.RKey = binary.BigEndian.Uint32(b[16:])
	d.VAddr = binary.BigEndian.Uint64(b[24:])
	copy(d.GID[:], b[32:48])
	d.SRQN = binary.BigEndian.Uint32(b[48:])
	return d
}

// cmLink is the exchange's RC connection through rdma_cm. Its exchanges belong
// to the test's goroutine; close and watch may run concurrently with them.
type cmLink struct {
	ch       *rdmacm.EventChannel
	listen   *rdmacm.ID // the server's, until a request came
	id       *rdmacm.ID
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	buf      []byte // receive area [0, destSize), send area after it
	mr       *verbs.MR
	peer     netip.AddrPort

	stopEvents context.CancelFunc
	evDone     chan struct{}

	mu      sync.Mutex
	closed  bool
	gone    bool         // the peer disconnected
	watcher *atomic.Bool // set with gone while a WatchPeer runs
}

// addrFor is the device's address that perftest's routing would pick as the
// source for a peer of v6's family (the best GID's).
func addrFor(dev *verbs.Device, v6 bool) (netip.Addr, error) {
	gids := dev.GIDs()
	i := bestGID(gids, v6)
	if i < 0 {
		return netip.Addr{}, errors.New("the device has no usable GID")
	}
	return gids[i].Addr().Unmap(), nil
}

// nextEvent waits for the channel's next event, until ctx ends or, when d > 0,
// for d.
func nextEvent(ctx context.Context, ch *rdmacm.EventChannel, d time.Duration) (*rdmacm.Event, error) {
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return ch.GetEvent(ctx)
}

// eventErr is the error for an event other than the one awaited.
func eventErr(what string, ev *rdmacm.Event) error {
	return fmt.Errorf("%w: %s: %v (status %d)", ErrPeer, what, ev.Type, ev.Status)
}

// dialCM is rdma_client_connect: resolve, route, the QP with one receive
// posted, connect, ESTABLISHED. A REJ (no listener yet) is tried again, as
// rdma_cm_client_connection does.
func dialCM(ctx context.Context, dev *verbs.Device, dst netip.AddrPort, timeout time.Duration) (*cmLink, error) {
	src, err := addrFor(dev, dst.Addr().Is6() && !dst.Addr().Is4In6())
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		l, err := dialCMOnce(ctx, dev, src, dst, timeout)
		if err == nil || try == cmRetries || ctx.Err() != nil || !errors.Is(err, errRejected) {
			return l, err
		}
		select {
		case <-time.After(cmRetryGap):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

var errRejected = errors.New("rejected")

func dialCMOnce(ctx context.Context, dev *verbs.Device, src netip.Addr, dst netip.AddrPort, timeout time.Duration) (l *cmLink, err error) {
	l = &cmLink{ch: rdmacm.NewEventChannel(), peer: dst}
	defer func() {
		if err != nil {
			l.release()
			l = nil
		}
	}()
	if l.id, err = l.ch.CreateID(nil, rdmacm.PSTCP); err != nil {
		return l, err
	}
	if err = l.id.ResolveAddr(src, dst); err != nil {
		return l, err
	}
	for _, want := range []rdmacm.EventType{rdmacm.EventAddrResolved, rdmacm.EventRouteResolved, rdmacm.EventEstablished} {
		ev, err := nextEvent(ctx, l.ch, timeout)
		if err != nil {
			return l, fmt.Errorf("waiting for %v: %w", want, err)
		}
		if ev.Type != want {
			if ev.Type == rdmacm.EventRejected {
				return l, fmt.Errorf("%w (%v) %w the connection (reason %d)", ErrPeer, dst, errRejected, ev.Status)
			}
			return l, eventErr("rdma_cm connection", ev)
		}
		switch want {
		case rdmacm.EventAddrResolved:
			err = l.id.ResolveRoute()
		case rdmacm.EventRouteResolved:
			if err = l.setupQP(dev, l.id); err == nil {
				err = l.id.Connect(rdmacm.ConnParam{RetryCount: retryCount, RNRRetryCount: rnrRetry})
			}
		}
		if err != nil {
			return l, err
		}
	}
	l.startEvents()
	return l, nil
}

// listenCM binds and listens (rdma_server_connect's first half); port 0 picks
// one, which Port returns.
func listenCM(dev *verbs.Device, port uint16) (*cmLink, error) {
	a, err := addrFor(dev, false)
	if err != nil {
		return nil, err
	}
	l := &cmLink{ch: rdmacm.NewEventChannel()}
	if l.listen, err = l.ch.CreateID(nil, rdmacm.PSTCP); err == nil {
		if err = l.listen.BindAddr(netip.AddrPortFrom(a, port)); err == nil {
			err = l.listen.Listen(1)
		}
	}
	if err != nil {
		l.release()
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	return l, nil
}

// Port is the listener's port.
func (l *cmLink) Port() uint16 { return l.listen.LocalAddr().Port() }

// accept is rdma_server_connect's second half: the first CONNECT_REQUEST gets
// the QP, a posted receive and rdma_accept; the listener goes. As perftest, it
// does not wait for ESTABLISHED: the client's first SEND comes after it.
func (l *cmLink) accept(ctx context.Context) error {
	var ev *rdmacm.Event
	for {
		var err error
		if ev, err = l.ch.GetEvent(ctx); err != nil {
			l.release()
			return err
		}
		if ev.Type == rdmacm.EventConnectRequest {
			break
		}
	}
	l.id, l.peer = ev.ID, ev.ID.PeerAddr()
	err := l.setupQP(ev.ID.Device(), l.id)
	if err == nil {
		err = l.id.Accept(rdmacm.ConnParam{RetryCount: retryCount, RNRRetryCount: rnrRetry})
	}
	if err == nil {
		err = l.listen.Destroy()
		l.listen = nil
	}
	if err != nil {
		l.release()
		return err
	}
	l.startEvents()
	return nil
}

// setupQP is ctx_init for the exchange: PD, CQs, a QP of depth 1 each way, the
// buffer, and the receive rdma_read_data expects.
func (l *cmLink) setupQP(dev *verbs.Device, id *rdmacm.ID) error {
	var err error
	if l.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	if l.scq, err = dev.CreateCQ(1, verbs.CQOptions{}); err != nil {
		return err
	}
	if l.rcq, err = dev.CreateCQ(1, verbs.CQOptions{}); err != nil {
		return err
	}
	if l.qp, err = id.CreateQP(l.pd, verbs.QPInitAttr{SendCQ: l.scq, RecvCQ: l.rcq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	if l.buf, err = dev.MapBuffer(2 * destSize); err != nil {
		return err
	}
	if l.mr, err = l.pd.RegMR(l.buf, 0, verbs.AccessLocalWrite); err != nil {
		return err
	}
	return l.postRecv()
}

func (l *cmLink) postRecv() error {
	_, err := l.qp.PostRecv([]verbs.RecvWR{{WRID: syncSpecID, SGL: []verbs.SGE{l.mr.SGE(0, destSize)}}})
	return err
}

// startEvents takes the channel's events from now on: a DISCONNECTED (the peer
// left or died) marks the link gone, which ends a waiting exchange.
func (l *cmLink) startEvents() {
	ctx, cancel := context.WithCancel(context.Background())
	l.stopEvents, l.evDone = cancel, make(chan struct{})
	go func() {
		defer close(l.evDone)
		for {
			ev, err := l.ch.GetEvent(ctx)
			if err != nil {
				return
			}
			switch ev.Type {
			case rdmacm.EventDisconnected, rdmacm.EventDeviceRemoval, rdmacm.EventConnectError,
				rdmacm.EventUnreachable, rdmacm.EventRejected:
				l.mu.Lock()
				l.gone = true
				if l.watcher != nil {
					l.watcher.Store(true)
				}
				l.mu.Unlock()
			}
		}
	}()
}

// state reports whether the link was closed or its peer left.
func (l *cmLink) state() (closed, gone bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed, l.gone
}

// wait polls cq for the exchange's one completion until the deadline (if any),
// or until the link closes or the peer leaves.
func (l *cmLink) wait(cq *verbs.CQ, what string, deadline time.Time, timeout time.Duration) (verbs.WC, error) {
	wc, err := pollOne(cq, func() error {
		switch closed, gone := l.state(); {
		case closed:
			return fmt.Errorf("connection to %v closed: %w", l.peer, rdmacm.ErrClosed)
		case gone:
			return fmt.Errorf("%w (%v) closed the connection", ErrPeer, l.peer)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("%w (%v) did not answer within %v", ErrPeer, l.peer, timeout)
		}
		return nil
	})
	if err == nil && (wc.Status != verbs.WCSuccess || wc.WRID != syncSpecID) {
		err = fmt.Errorf("%w (%v): %s completed with status %v", ErrPeer, l.peer, what, wc.Status)
	}
	return wc, err
}

// pollOne polls cq for one completion, backing off to a millisecond between
// polls, until stop, asked between polls, returns an error.
func pollOne(cq *verbs.CQ, stop func() error) (verbs.WC, error) {
	var wc [1]verbs.WC
	for nap := time.Microsecond; cq.Poll(wc[:]) == 0; nap = min(2*nap, time.Millisecond) {
		if err := stop(); err != nil {
			return wc[0], err
		}
		time.Sleep(nap)
	}
	return wc[0], nil
}

// write is rdma_write_data: b as one signalled SEND, waited for.
func (l *cmLink) write(b []byte, deadline time.Time, timeout time.Duration) error {
	if len(b) > destSize {
		return fmt.Errorf("perftest: exchange message of %d bytes: the peer receives %d", len(b), destSize)
	}
	copy(l.buf[destSize:], b)
	wr := []verbs.SendWR{{WRID: syncSpecID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{l.mr.SGE(destSize, uint32(len(b)))}}}
	if _, err := l.qp.PostSend(wr); err != nil {
		return err
	}
	_, err := l.wait(l.scq, "SEND", deadline, timeout)
	return err
}

// read is rdma_read_data: the next message into b, and the receive posted again.
func (l *cmLink) read(b []byte, deadline time.Time, timeout time.Duration) error {
	if _, err := l.wait(l.rcq, "receive", deadline, timeout); err != nil {
		return err
	}
	copy(b, l.buf[:destSize])
	return l.postRecv()
}

// watch makes a departure of the peer set gone until stop.
func (l *cmLink) watch(gone *atomic.Bool) (stop func()) {
	l.mu.Lock()
	l.watcher = gone
	if l.gone {
		gone.Store(true)
	}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.watcher = nil
		l.mu.Unlock()
	}
}

// close makes a waiting exchange return and later ones fail; release frees.
// Safe to call more than once and concurrently with an exchange.
func (l *cmLink) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// release frees what was made, in reverse order: the connection's QP, its ID
// (destroying a connected ID sends the DREQ), the memory. It belongs to the
// goroutine that owns the exchanges, once none runs.
func (l *cmLink) release() {
	l.close()
	if l.stopEvents != nil {
		l.stopEvents()
		<-l.evDone
		l.stopEvents = nil
	}
	if l.id != nil && l.qp != nil {
		l.id.DestroyQP()
	}
	for _, id := range []*rdmacm.ID{l.id, l.listen} {
		if id != nil {
			id.Destroy()
		}
	}
	if l.mr != nil {
		l.mr.Dereg().Wait()
	}
	for _, cq := range []*verbs.CQ{l.scq, l.rcq} {
		if cq != nil {
			cq.Destroy().Wait()
		}
	}
	if l.pd != nil {
		l.pd.Dealloc().Wait()
	}
	if l.buf != nil {
		verbs.UnmapBuffer(l.buf)
	}
	l.ch.Close()
	l.id, l.listen, l.qp, l.mr, l.scq, l.rcq, l.pd, l.buf = nil, nil, nil, nil, nil, nil, nil, nil
}

// cmQPs is -R's connections of the test's QPs (create_rdma_cm_connection): one
// rdma_cm ID per QP, on a channel of their own. ids[i] owns the session's
// qps[i].
type cmQPs struct {
	ch     *rdmacm.EventChannel
	listen *rdmacm.ID
	ids    []*rdmacm.ID
	up     map[*rdmacm.ID]bool // the client's IDs that reached ESTABLISHED
}

// portSpace is the data QPs' rdma_cm port space: UDP (SIDR) for UD.
func (s *session) portSpace() rdmacm.PortSpace {
	if s.p.Conn == ConnUD {
		return rdmacm.PSUDP
	}
	return rdmacm.PSTCP
}

// connParam is what perftest's route and connect-request handlers pass to
// rdma_connect and rdma_accept.
func (s *session) connParam() rdmacm.ConnParam {
	rc := uint8(s.p.RetryCount) // --retry_count: the test's rdma_cm connections (perftest's rdma_cm_connect)
	cp := rdmacm.ConnParam{RetryCount: rc, RNRRetryCount: rc}
	if v := s.p.Test.Verb; v == VerbRead || v == VerbAtomic {
		cp.ResponderResources, cp.InitiatorDepth = uint8(s.outReads), uint8(s.outReads)
	}
	return cp
}

// connectCM is create_rdma_cm_connection: a handshake, the connections (the
// client tries again after a REJ, as the server may not listen yet), a
// handshake.
func (s *session) connectCM() error {
	var zero Dest
	if _, err := s.conn.HandShake(&zero, false); err != nil {
		return err
	}
	var err error
	if s.p.Listens() {
		err = s.acceptQPs()
	} else {
		for try := 1; ; try++ {
			if err = s.dialQPs(); err == nil || try == cmRetries || !errors.Is(err, errRejected) {
				break
			}
			s.destroyAHs()
			s.closeCM()
			time.Sleep(cmRetryGap)
		}
	}
	if err != nil {
		return err
	}
	_, err = s.conn.HandShake(&zero, false)
	return err
}

// dialQPs is the client's rdma_cm_client_connection: every ID resolves the
// server's address and route, gets its QP and connects; all must reach
// ESTABLISHED.
func (s *session) dialQPs() error {
	c := &cmQPs{ch: rdmacm.NewEventChannel(), up: map[*rdmacm.ID]bool{}}
	s.cm = c
	src, dst := s.conn.cm.id.LocalAddr().Addr(), s.conn.cm.peer
	s.qps = make([]*verbs.QP, s.p.QPs)
	if s.p.Conn == ConnUD {
		s.ud = make([]udPeer, s.p.QPs)
	}
	for i := range s.p.QPs {
		id, err := c.ch.CreateID(i, s.portSpace())
		if err != nil {
			return err
		}
		c.ids = append(c.ids, id)
		if err := id.ResolveAddr(src, dst); err != nil {
			return err
		}
	}
	for left := s.p.QPs; left > 0; {
		ev, err := nextEvent(s.ctx, c.ch, s.conn.Timeout)
		if err != nil {
			return fmt.Errorf("rdma_cm connections: %w", err)
		}
		i, _ := ev.ID.Context().(int)
		switch ev.Type {
		case rdmacm.EventAddrResolved:
			err = ev.ID.ResolveRoute()
		case rdmacm.EventRouteResolved:
			if s.qps[i], err = ev.ID.CreateQP(s.pd, s.qpInitAttr()); err == nil {
				if s.p.TOS >= 0 {
					ev.ID.SetTOS(uint8(s.p.TOS)) // rdma_set_option(RDMA_OPTION_ID_TOS)
				}
				err = ev.ID.Connect(s.connParam())
			}
		case rdmacm.EventEstablished:
			left--
			c.up[ev.ID] = true
			if s.p.Conn == ConnUD { // rdma_cm_establish_ud_connection
				var ah *verbs.AH
				if ah, err = s.pd.CreateAH(ev.UD.AV); err != nil {
					return fmt.Errorf("failed to create AH for RDMA CM connection: %w", err)
				}
				s.ud[i] = udPeer{ah: ah, qpn: ev.UD.QPN, qkey: ev.UD.QKey}
				if s.udExchange() {
					err = s.sendUDParam(i)
				}
			}
		case rdmacm.EventRejected:
			return fmt.Errorf("%w (%v) %w the connection of QP %d (reason %d)", ErrPeer, dst, errRejected, i, ev.Status)
		case rdmacm.EventUnreachable:
			if ev.Status > 0 { // a SIDR_REP's status: UD's REJ (no listener yet)
				return fmt.Errorf("%w (%v) %w the connection of QP %d (SIDR status %d)", ErrPeer, dst, errRejected, i, ev.Status)
			}
			return eventErr("rdma_cm connection", ev)
		default:
			return eventErr("rdma_cm connection", ev)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// acceptQPs is the server's rdma_cm_server_connection: listen where the
// exchange's connection came, accept a connection per QP (each with its QP and
// perftest's MIN_RNR_TIMER), then stop listening. As perftest, it does not wait
// for ESTABLISHED.
func (s *session) acceptQPs() error {
	c := &cmQPs{ch: rdmacm.NewEventChannel()}
	s.cm = c
	var err error
	if c.listen, err = c.ch.CreateID(nil, s.portSpace()); err != nil {
		return err
	}
	if err := c.listen.BindAddr(s.conn.cm.id.LocalAddr()); err != nil {
		return err
	}
	if err := c.listen.Listen(s.p.QPs); err != nil {
		return err
	}
	s.qps = make([]*verbs.QP, 0, s.p.QPs)
	if s.p.Conn == ConnUD {
		s.ud = make([]udPeer, s.p.QPs)
	}
	for len(s.qps) < s.p.QPs {
		ev, err := nextEvent(s.ctx, c.ch, s.conn.Timeout)
		if err != nil {
			return fmt.Errorf("rdma_cm connections: %w", err)
		}
		switch ev.Type {
		case rdmacm.EventConnectRequest:
		case rdmacm.EventEstablished:
			continue
		default:
			return eventErr("rdma_cm connection", ev)
		}
		c.ids = append(c.ids, ev.ID)
		qp, err := ev.ID.CreateQP(s.pd, s.qpInitAttr())
		if err != nil {
			return err
		}
		s.qps = append(s.qps, qp)
		i := len(s.qps) - 1
		if s.udExchange() { // rdma_cm_request_ud_connection_parameters
			rwr := [1]verbs.RecvWR{{SGL: []verbs.SGE{s.sge(i, s.sendOff(i), udAddition+4)}}}
			if _, err := qp.PostRecv(rwr[:]); err != nil {
				return fmt.Errorf("failed to post receive for RDMA CM UD request connection parameters: %w", err)
			}
		}
		if err := ev.ID.Accept(s.connParam()); err != nil {
			return err
		}
		if s.p.Conn == ConnUD {
			if s.udExchange() {
				if err := s.recvUDParam(i); err != nil {
					return err
				}
			}
			continue
		}
		// Perftest ignores whether this RTS-to-RTS change is allowed.
		_ = qp.ModifySync(&verbs.QPAttr{Attr: verbs.QPBaseAttr{MinRNRTimer: minRNRTimer}}, verbs.AttrMinRNRTimer)
	}
	err = c.listen.Destroy()
	c.listen = nil
	return err
}

// udExchange reports whether a UD test over rdma_cm needs each server to learn
// its client (latency and -b: the server sends too). SIDR tells only the client.
func (s *session) udExchange() bool {
	return s.p.Conn == ConnUD && (s.p.Test.Kind == Lat || s.p.Duplex)
}

// sendUDParam is rdma_cm_send_ud_connection_parameters: QP i's number, as the
// immediate of a 4-byte SEND, to the server's QP that SIDR named.
func (s *session) sendUDParam(i int) error {
	u := s.ud[i]
	wr := [1]verbs.SendWR{{Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: s.qps[i].QPN(),
		SGL: []verbs.SGE{s.sge(i, s.sendOff(i), 4)}, AH: u.ah, RemoteQPN: u.qpn, RemoteQKey: u.qkey}}
	if _, err := s.qps[i].PostSend(wr[:]); err != nil {
		return fmt.Errorf("failed to post send for RDMA CM UD send connection parameters: %w", err)
	}
	wc, err := s.pollCM(s.scq, "UD connection parameters' SEND")
	if err == nil && (wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCSend) {
		err = fmt.Errorf("bad WQE status when trying to send UD connection parameters in RDMA CM: %v", wc.Status)
	}
	return err
}

// recvUDParam is rdma_cm_initialize_ud_connection_parameters: the client's SEND
// with immediate gives QP i its peer: the address from the GRH, the QPN from
// the immediate, the Q_Key rdma_cm gave both.
func (s *session) recvUDParam(i int) error {
	wc, err := s.pollCM(s.rcq, "UD connection parameters")
	if err != nil {
		return err
	}
	if wc.Status != verbs.WCSuccess || !wc.Opcode.IsRecv() || wc.Flags&verbs.WCWithImm == 0 {
		return fmt.Errorf("bad WQE status when trying to create AH for UD connection in RDMA CM: %v", wc.Status)
	}
	av, err := s.dev.AVFromWC(&wc, s.buf[s.sendOff(i):][:udAddition])
	if err != nil {
		return err
	}
	ah, err := s.pd.CreateAH(av)
	if err != nil {
		return err
	}
	s.ud[i] = udPeer{ah: ah, qpn: wc.ImmData, qkey: rdmacm.UDPQKey}
	return nil
}

// pollCM waits for one completion on cq during the connection phase, within
// the exchange's timeout.
func (s *session) pollCM(cq *verbs.CQ, what string) (verbs.WC, error) {
	deadline := time.Now().Add(s.conn.Timeout)
	return pollOne(cq, func() error {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		if s.conn.Timeout > 0 && time.Now().After(deadline) {
			return fmt.Errorf("%w (%v): no %s within %v", ErrPeer, s.conn.peer(), what, s.conn.Timeout)
		}
		return nil
	})
}

// closeCM ends -R's connections: the client disconnects each and waits for
// its DISCONNECTED (rdma_cm_disconnect_nodes; not when the peer is gone), then
// the QPs and IDs go (a connected ID's destruction sends the DREQ).
func (s *session) closeCM() {
	c := s.cm
	if c == nil {
		return
	}
	s.cm = nil
	if !s.p.Listens() && !s.peerGone.Load() && s.ctx.Err() == nil {
		// Only a connection brings a DISCONNECTED: rdma_disconnect of an
		// ID that was refused or never got there succeeds and sends nothing.
		n := 0
		for _, id := range c.ids {
			if id.Disconnect() == nil && c.up[id] {
				n++
			}
		}
		for n > 0 {
			ev, err := nextEvent(s.ctx, c.ch, s.conn.Timeout)
			if err != nil {
				fmt.Fprintf(s.errw, "bench: rdma_cm disconnect: %v\n", err)
				break
			}
			if ev.Type == rdmacm.EventDisconnected {
				n--
			}
		}
	}
	for i, id := range c.ids {
		if i < len(s.qps) && s.qps[i] != nil {
			id.DestroyQP()
		}
		id.Destroy()
	}
	if c.listen != nil {
		c.listen.Destroy()
	}
	c.ch.Close()
	s.qps = nil
}
