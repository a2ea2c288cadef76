// Running one side as rc_pingpong's main() does, and both sides in one process
// over lo (--local).

package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/oob"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/verbs"
)

// The work request IDs (PINGPONG_RECV_WRID, PINGPONG_SEND_WRID), also the bits
// of pending.
const (
	recvWRID = 1
	sendWRID = 2
)

// rc_pingpong's QP attributes (pp_connect_ctx).
const (
	maxDestRdAtomic = 1
	minRNRTimer     = 12
	ackTimeout      = 14
	retryCnt        = 7
	rnrRetry        = 7
	maxRdAtomic     = 1
	hopLimit        = 1
)

// patternByte is what memset(ctx->buf, 0x7b, size) leaves in the buffer.
const patternByte = 0x7b

// Run runs one side as ibv_rc_pingpong would, or with p.Local both sides,
// writing rc_pingpong's output to out; errw receives the link choice.
// Cancelling ctx ends the run: everything it opened is closed before Run
// returns.
func Run(ctx context.Context, p *Params, out, errw io.Writer) error {
	if p.Local {
		return runLocal(ctx, p, out, errw)
	}
	dev, closeDev, err := oob.OpenDevice(oob.Device{Interface: p.Device, Kind: p.LinkKind, Pcap: p.Pcap}, errw)
	if err != nil {
		return err
	}
	defer closeDev()
	s := &side{p: p, out: out, errw: errw, dev: dev}
	defer s.close()
	if err := s.setup(); err != nil {
		return err
	}
	var ln net.Listener
	if p.Server() {
		if ln, err = net.Listen("tcp", ":"+strconv.Itoa(p.Port)); err != nil {
			return fmt.Errorf("couldn't listen to port %d: %w", p.Port, oob.UnwrapOp(err))
		}
	}
	if err := s.run(ctx, ln, net.JoinHostPort(p.ServerName, strconv.Itoa(p.Port))); err != nil {
		return err
	}
	linger(dev)
	return nil
}

// linger keeps the QPs up until the wire has been quiet for lingerQuiet (at
// most lingerMax): the peer resends its last messages if our ACKs of them
// were lost, and rxe reads the examples' retry count of 7 as "forever" (as
// for RNR; rxe_completer's COMPST_ERROR_RETRY), so a peer whose last ACK was
// lost on a lossy wire would wait forever for a side that had exited. The
// examples themselves exit at once; the output is the same.
func linger(dev *verbs.Device) {
	lingerOn(func() uint64 {
		c := dev.Counters()
		for i := range c {
			if verbs.Counter(i).String() == "rcvd_pkts" {
				return c[i]
			}
		}
		return 0
	})
}

// lingerOn is linger on a count of received packets.
func lingerOn(rcvd func() uint64) {
	last, quiet := rcvd(), time.Now()
	for end := time.Now().Add(lingerMax); time.Now().Before(end); time.Sleep(lingerQuiet / 10) {
		if n := rcvd(); n != last {
			last, quiet = n, time.Now()
		} else if time.Since(quiet) >= lingerQuiet {
			return
		}
	}
}

const (
	lingerQuiet = 200 * time.Millisecond // three of the examples' ACK timeouts (timeout 14: 67 ms)
	lingerMax   = 3 * time.Second
)

// side is one side of a run: rc_pingpong's struct pingpong_context and the
// variables of its main. It belongs to the goroutine that runs it.
type side struct {
	p        *Params
	out      io.Writer
	errw     io.Writer // warnings; nil: none
	dev      *verbs.Device
	pageSize int

	ch        *verbs.CompChannel
	pd        *verbs.PD
	buf       []byte // ud_pingpong: the 40 bytes of the GRH, then the message
	msg       []byte // the message in buf
	mr        *verbs.MR
	cq        *verbs.CQ
	srq       *verbs.SRQ  // srq_pingpong
	qps       []*verbs.QP // srq_pingpong: -q of them; else one
	ah        *verbs.AH   // ud_pingpong: towards the peer
	sendFlags verbs.SendFlags
	recvWRs   []verbs.RecvWR
	sendWR    [1]verbs.SendWR
	wc        []verbs.WC // 2, or srq_pingpong's num_qp + rx_depth
	events    int        // CQ events to acknowledge

	my, rem []Dest // srq_pingpong exchanges maxQP of them, the others one
	gidText string // the last text inet_ntop put in main's gid[33]

	routs, rcnt, scnt int
	pending           []int // per QP

	want     []byte // with --chk, what every received message must be
	mismatch error  // the first received message that was not

	mangle func(buf []byte, scnt int) // tests: changes the buffer before each SEND
}

// setup is pp_init_ctx, the first receives, and this side's Dest.
func (s *side) setup() error {
	p := s.p
	s.pageSize = os.Getpagesize()
	port := s.dev.QueryPort()
	if p.Size > int(port.MaxMsgSize) {
		return fmt.Errorf("message size %d exceeds the device's maximum of %d", p.Size, port.MaxMsgSize)
	}
	if p.Kind == UD && p.Size > port.ActiveMTU.Bytes() {
		return fmt.Errorf("requested size larger than port MTU (%d)", port.ActiveMTU.Bytes())
	}
	grh := 0
	if p.Kind == UD {
		grh = udGRH
	}
	// Mapped memory, as an application gives a NIC: the engine writes into it
	// while this side reads it, and srq_pingpong's QPs all receive into the
	// one buffer at once (as the example's do).
	var err error
	if s.buf, err = verbs.MapBuffer(grh + p.Size); err != nil {
		return fmt.Errorf("couldn't allocate work buf: %w", err)
	}
	s.msg = s.buf[grh:]
	for i := range s.buf {
		s.buf[i] = s.fill()
	}
	if p.Events {
		s.ch = verbs.NewCompChannel()
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	if s.mr, err = s.pd.RegMR(s.buf, 0, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	nq := p.NumQP
	cqe := p.RxDepth + 1
	s.wc = make([]verbs.WC, 2)
	if p.Kind == SRQ {
		cqe = p.RxDepth + nq
		s.wc = make([]verbs.WC, nq+p.RxDepth)
	}
	if s.cq, err = s.dev.CreateCQ(cqe, verbs.CQOptions{Channel: s.ch}); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	ia := verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(p.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
	switch p.Kind {
	case UC:
		ia.Type = verbs.UC
	case UD:
		ia.Type = verbs.UD
	case SRQ:
		if s.srq, err = s.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(p.RxDepth), MaxSGE: 1}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %w", err)
		}
		ia.SRQ, ia.Cap.MaxRecvWR, ia.Cap.MaxRecvSGE = s.srq, 0, 0
	}
	s.sendFlags = verbs.SendSignaled
	for i := range nq {
		qp, err := s.pd.CreateQP(ia)
		if err != nil {
			return fmt.Errorf("couldn't create QP%s: %w", s.qpName(i), err)
		}
		s.qps = append(s.qps, qp)
		if int(qp.Cap().MaxInlineData) >= p.Size {
			s.sendFlags |= verbs.SendInline
		}
	}
	for i, qp := range s.qps {
		if p.IBPort != 1 {
			return fmt.Errorf("failed to modify QP%s to INIT: port %d: xrnic devices have port 1 only", s.qpName(i), p.IBPort)
		}
		a := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSInit, PKeyIndex: 0, Port: uint8(p.IBPort), AccessFlags: 0, QKey: udQKey}}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
		if p.Kind == UD {
			mask ^= verbs.AttrAccessFlags | verbs.AttrQKey
		}
		if err := qp.ModifySync(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP%s to INIT: %w", s.qpName(i), err)
		}
	}

	rsge := []verbs.SGE{{Addr: s.mr.Addr(), Length: uint32(grh + p.Size), LKey: s.mr.LKey()}}
	s.recvWRs = make([]verbs.RecvWR, p.RxDepth)
	for i := range s.recvWRs {
		s.recvWRs[i] = verbs.RecvWR{WRID: recvWRID, SGL: rsge}
	}
	ssge := []verbs.SGE{{Addr: s.mr.Addr() + uint64(grh), Length: uint32(p.Size), LKey: s.mr.LKey()}}
	s.sendWR[0] = verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, Flags: s.sendFlags, SGL: ssge}
	if s.routs = s.postRecv(p.RxDepth); s.routs < p.RxDepth {
		return fmt.Errorf("couldn't post receive (%d)", s.routs)
	}
	if p.Events {
		if err := s.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	if port.State != verbs.PortActive {
		return fmt.Errorf("port %d is %v", p.IBPort, port.State)
	}
	if s.errw != nil && p.Kind != UD && p.MTU > port.ActiveMTU && port.LinkKind != link.KindUDP && port.LinkKind != link.KindUDPGSO {
		fmt.Fprintf(s.errw, "bench: %s: warning: path MTU %d is above the port's active MTU %d; %s uses it anyway, and frames that do not fit the link are lost\n",
			p.Kind, p.MTU.Bytes(), port.ActiveMTU.Bytes(), p.Kind)
	}
	n := 1
	if p.Kind == SRQ {
		n = maxQP // the unused ones go as zeros
	}
	s.my = make([]Dest, n)
	var gid verbs.GID
	if p.GIDIndex >= 0 {
		if gid, err = s.dev.QueryGID(p.GIDIndex); err != nil {
			if p.Kind == RC || p.Kind == UC {
				return fmt.Errorf("can't read sgid of index %d: the device has %d GIDs", p.GIDIndex, len(port.GIDs))
			}
			return fmt.Errorf("could not get local gid for gid index %d: the device has %d GIDs", p.GIDIndex, len(port.GIDs))
		}
	}
	for i, qp := range s.qps {
		// RoCE has no LIDs.
		s.my[i] = Dest{QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: gid}
	}
	s.pending = make([]int, nq)
	if p.Check {
		s.want = make([]byte, p.Size)
		copy(s.want, s.msg)
		s.setValidation(s.want)
	}
	return nil
}

// udQKey is ud_pingpong's Q_Key.
const udQKey = 0x11111111

// fill is the byte the example fills its buffer with: srq_pingpong zeroes it,
// the others memset(buf, 0x7b, size).
func (s *side) fill() byte {
	if s.p.Kind == SRQ {
		return 0
	}
	return patternByte
}

// qpName is how the example's messages name QP i: "[i]" in srq_pingpong's.
func (s *side) qpName(i int) string {
	if s.p.Kind == SRQ {
		return "[" + strconv.Itoa(i) + "]"
	}
	return ""
}

// setValidation is what the client does to its buffer with -c before the first
// send: ctx->buf[i] = i / page_size % sizeof(char) for each page, and anything
// modulo sizeof(char), which is 1, is 0.
func (s *side) setValidation(b []byte) {
	for i := 0; i < len(b); i += s.pageSize {
		b[i] = 0
	}
}

// postRecv is pp_post_recv: it posts n receives (to the SRQ in
// srq_pingpong) and returns how many it could.
func (s *side) postRecv(n int) int {
	if s.srq != nil {
		k, _ := s.srq.PostRecv(s.recvWRs[:n])
		return k
	}
	k, _ := s.qps[0].PostRecv(s.recvWRs[:n])
	return k
}

// close is pp_close_ctx without the device, which is the caller's. Idempotent.
func (s *side) close() {
	for _, qp := range s.qps {
		_ = qp.Destroy().Wait()
	}
	s.qps = nil
	if s.ah != nil {
		_ = s.ah.Destroy().Wait()
		s.ah = nil
	}
	if s.srq != nil {
		_ = s.srq.Destroy().Wait()
		s.srq = nil
	}
	if s.cq != nil {
		if s.events > 0 {
			s.cq.AckEvents(s.events)
			s.events = 0
		}
		_ = s.cq.Destroy().Wait()
		s.cq = nil
	}
	if s.mr != nil {
		_ = s.mr.Dereg().Wait()
		s.mr = nil
	}
	if s.buf != nil {
		_ = verbs.UnmapBuffer(s.buf) // no QP or MR uses it any more
		s.buf, s.msg = nil, nil
	}
	if s.pd != nil {
		_ = s.pd.Dealloc().Wait()
		s.pd = nil
	}
	if s.ch != nil {
		_ = s.ch.Close()
		s.ch = nil
	}
}

// ntop prints a GID into main's gid[33] as inet_ntop does: a text that does not
// fit leaves the previous one.
func (s *side) ntop(g verbs.GID) string {
	if t, ok := Ntop(g); ok {
		s.gidText = t
	}
	return s.gidText
}

// printDest prints an address line; which is "local address: " or
// "remote address:".
func (s *side) printDest(which string, d *Dest) {
	sep := ","
	if s.p.Kind == UD && which == "local address: " {
		sep = ":" // ud_pingpong's local line says "PSN 0x%06x: GID"
	}
	fmt.Fprintf(s.out, "  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", which, d.LID, d.QPN, d.PSN, sep, s.ntop(d.GID))
}

// run is main from the local address line on: the exchange (on ln as server,
// to addr as client), the connection of the QP, the ping-pong and the report.
func (s *side) run(ctx context.Context, ln net.Listener, addr string) error {
	p := s.p
	nq := len(s.qps)
	for i := range nq {
		s.printDest("local address: ", &s.my[i])
	}
	var c net.Conn
	var err error
	if p.Server() {
		c, err = oob.Accept(ctx, ln)
		ln.Close()
	} else {
		c, err = oob.Dial(ctx, addr, ExchangeTimeout)
	}
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	if p.Server() {
		s.rem, err = ServerExchange(c, s.my, s.connect)
	} else {
		s.rem, err = ClientExchange(c, s.my)
	}
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	for i := range nq {
		s.printDest("remote address:", &s.rem[i])
	}
	if !p.Server() {
		if err := s.connect(s.rem); err != nil {
			return err
		}
	}

	for i := range s.pending {
		s.pending[i] = recvWRID
	}
	if !p.Server() {
		if p.Check {
			s.setValidation(s.msg)
		}
		for i := range nq {
			if err := s.postSend(i); err != nil {
				return fmt.Errorf("couldn't post send: %w", err)
			}
			s.pending[i] |= sendWRID
		}
	}
	start := time.Now()
	if err := s.loop(ctx); err != nil {
		if s.mismatch != nil && ctx.Err() == nil {
			return fmt.Errorf("%w; before that, %v", err, s.mismatch)
		}
		return err
	}
	s.report(time.Since(start))
	return s.mismatch
}

// connect is pp_connect_ctx: RTR towards the peer's QP, then RTS (RC and UC,
// each with its attributes); UD has no peer in its state but an address
// handle.
func (s *side) connect(rem []Dest) error {
	p := s.p
	// srq_pingpong takes the GRH of every QP from the first address.
	g := rem[0].GID
	if g.IsZero() || [8]byte(g[8:]) == [8]byte{} {
		// The examples set no GRH for such a GID (is_global = 0), and RoCE has
		// no path without one: rxe fails the modify.
		return fmt.Errorf("failed to modify QP to RTR: the remote GID %s has no interface ID, so there is no GRH, which RoCE needs (is the peer run with -g?)", g.FullString())
	}
	av := verbs.AV{DGID: g, SGIDIndex: uint8(p.GIDIndex), HopLimit: hopLimit, Port: uint8(p.IBPort)}
	for i, qp := range s.qps {
		a := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSRTR, PathMTU: p.MTU, DestQPN: rem[i].QPN, RQPSN: wire.PSN(rem[i].PSN),
			MaxDestRdAtomic: maxDestRdAtomic, MinRNRTimer: minRNRTimer}, AV: av}
		mask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		switch p.Kind {
		case RC, SRQ:
			mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		case UD:
			mask = verbs.AttrState
		}
		if err := qp.ModifySync(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP%s to RTR: %w", s.qpName(i), err)
		}
		a = verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSRTS, Timeout: ackTimeout, RetryCnt: retryCnt, RNRRetry: rnrRetry,
			SQPSN: wire.PSN(s.my[i].PSN), MaxRdAtomic: maxRdAtomic}}
		mask = verbs.AttrState | verbs.AttrSQPSN
		if p.Kind == RC || p.Kind == SRQ {
			mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		}
		if err := qp.ModifySync(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP%s to RTS: %w", s.qpName(i), err)
		}
	}
	if p.Kind == UD {
		ah, err := s.pd.CreateAH(av)
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		s.ah = ah
		w := &s.sendWR[0]
		w.AH, w.RemoteQPN, w.RemoteQKey = ah, rem[0].QPN, udQKey
	}
	return nil
}

// postSend is pp_post_send on QP i: one signaled SEND of the message.
func (s *side) postSend(i int) error {
	if s.mangle != nil {
		s.mangle(s.msg, s.scnt)
	}
	_, err := s.qps[i].PostSend(s.sendWR[:])
	return err
}

// loop is main's completion loop: until both counts reach -n, wait for
// completions (busy polling, or on CQ events with -e) and handle each.
func (s *side) loop(ctx context.Context) error {
	for s.rcnt < s.p.Iters || s.scnt < s.p.Iters {
		if s.p.Events {
			if err := s.waitEvent(ctx); err != nil {
				return err
			}
			if err := s.cq.ReqNotify(false); err != nil {
				return fmt.Errorf("couldn't request CQ notification: %w", err)
			}
			// rc_pingpong polls once for up to 2 completions per event; polling
			// until empty takes the same completions and cannot strand one.
			for {
				ne := s.cq.Poll(s.wc[:])
				for i := range ne {
					if err := s.handle(&s.wc[i]); err != nil {
						return err
					}
				}
				if ne < len(s.wc) {
					break
				}
			}
			continue
		}
		ne, err := s.poll(ctx)
		if err != nil {
			return err
		}
		for i := range ne {
			if err := s.handle(&s.wc[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// poll busy-polls for up to 2 completions, as ibv_poll_cq(cq, 2, wc) in a loop,
// until there are some, ctx ends or --timeout passes.
func (s *side) poll(ctx context.Context) (int, error) {
	var since time.Time
	for spins := 1; ; spins++ {
		if ne := s.cq.Poll(s.wc[:]); ne > 0 {
			return ne, nil
		}
		if spins%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if s.p.Timeout > 0 {
				if since.IsZero() {
					since = time.Now()
				} else if time.Since(since) > s.p.Timeout {
					return 0, s.stalled()
				}
			}
		}
		runtime.Gosched()
	}
}

// waitEvent is ibv_get_cq_event, bounded by ctx and --timeout.
func (s *side) waitEvent(ctx context.Context) error {
	wctx := ctx
	if s.p.Timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, s.p.Timeout)
		defer cancel()
	}
	c, err := s.ch.GetEvent(wctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return s.stalled()
		}
		return fmt.Errorf("failed to get cq_event: %w", err)
	}
	if c != s.cq {
		return errors.New("CQ event for unknown CQ")
	}
	s.events++
	return nil
}

func (s *side) stalled() error {
	return fmt.Errorf("%w stopped answering: no completion for %v after %d of %d sends and %d of %d receives (--timeout)",
		ErrPeer, s.p.Timeout, s.scnt, s.p.Iters, s.rcnt, s.p.Iters)
}

// handle is parse_single_wc for one completion (srq_pingpong's loop: per QP,
// found by the completion's QP number).
func (s *side) handle(wc *verbs.WC) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, int(wc.WRID))
	}
	q := 0
	if s.p.Kind == SRQ {
		if q = s.findQP(wc.QPN); q < 0 {
			return fmt.Errorf("couldn't find QPN %06x", wc.QPN)
		}
	}
	switch wc.WRID {
	case sendWRID:
		s.scnt++
	case recvWRID:
		s.verify(wc) // before the buffer is sent back or received into again
		low := 1
		if s.p.Kind == SRQ {
			low = s.p.NumQP
		}
		if s.routs--; s.routs <= low {
			s.routs += s.postRecv(s.p.RxDepth - s.routs)
			if s.routs < s.p.RxDepth {
				return fmt.Errorf("couldn't post receive (%d)", s.routs)
			}
		}
		s.rcnt++
	default:
		return fmt.Errorf("completion for unknown wr_id %d", int(wc.WRID))
	}
	s.pending[q] &^= int(wc.WRID)
	if s.scnt < s.p.Iters && s.pending[q] == 0 {
		if err := s.postSend(q); err != nil {
			return fmt.Errorf("couldn't post send: %w", err)
		}
		s.pending[q] = recvWRID | sendWRID
	}
	return nil
}

// findQP is srq_pingpong's find_qp.
func (s *side) findQP(qpn uint32) int {
	for i, qp := range s.qps {
		if qp.QPN() == qpn {
			return i
		}
	}
	return -1
}

// verify is bench's own check of a received message with --chk: its length is
// -s and every byte is what an rc_pingpong client with -c sends (and its server
// echoes). It keeps the first failure.
func (s *side) verify(wc *verbs.WC) {
	if s.want == nil || s.mismatch != nil {
		return
	}
	n := s.rcnt + 1
	if want := len(s.buf); int(wc.ByteLen) != want { // ud_pingpong: the GRH and the message
		s.mismatch = fmt.Errorf("data check: received message %d has %d bytes, want %d", n, wc.ByteLen, want)
		return
	}
	if bytes.Equal(s.msg, s.want) {
		return
	}
	for i := range s.msg {
		if s.msg[i] != s.want[i] {
			s.mismatch = fmt.Errorf("data check: received message %d has 0x%02x at byte %d, want 0x%02x", n, s.msg[i], i, s.want[i])
			return
		}
	}
}

// report prints rc_pingpong's two result lines and, on the client with -c, its
// check of the first byte of each page.
func (s *side) report(d time.Duration) {
	p := s.p
	// float usec = (end.tv_sec - start.tv_sec) * 1000000 + (end.tv_usec - start.tv_usec);
	usec := float32(d.Microseconds())
	nbytes := int64(p.Size) * int64(p.Iters) * 2
	fmt.Fprintf(s.out, "%d bytes in %s seconds = %s Mbit/sec\n", nbytes,
		cfloat(float64(usec)/1000000.), cfloat(float64(nbytes)*8./float64(usec)))
	fmt.Fprintf(s.out, "%d iters in %s seconds = %s usec/iter\n", p.Iters,
		cfloat(float64(usec)/1000000.), cfloat(float64(usec/float32(p.Iters))))
	if !p.Server() && p.Check {
		for i := 0; i < p.Size; i += s.pageSize {
			if s.msg[i] != 0 {
				fmt.Fprintf(s.out, "invalid data in page %d\n", i/s.pageSize)
				if s.mismatch == nil {
					s.mismatch = fmt.Errorf("data check: invalid data in page %d", i/s.pageSize)
				}
			}
		}
	}
}

// cfloat is printf's %.2f, with glibc's spelling of infinities and of the NaN
// that 0/0 makes on x86 ("-nan").
func cfloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "-nan"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// Loopback addresses --local tries, server first, other pairs when port 4791
// is taken (perftest's --local uses 127.0.0.1..6 first).
var localPairs = [][2]string{
	{"127.0.8.1", "127.0.8.2"}, {"127.0.8.3", "127.0.8.4"}, {"127.0.8.5", "127.0.8.6"},
	{"127.0.9.1", "127.0.9.2"}, {"127.0.10.1", "127.0.10.2"}, {"127.0.11.1", "127.0.11.2"},
}

// runLocal runs the server in a goroutine and the client here, each on a UDP
// link on lo with a one-entry GID table (the -g default is then 0), exchanging
// over TCP on the server's address (an ephemeral port unless -p was given). The
// client's output goes to out, the server's to p.LocalServerOut if set.
func runLocal(ctx context.Context, p *Params, out, errw io.Writer) error {
	if !p.gidSet {
		p = p.forRole("")
		p.Local = true
		p.GIDIndex = 0
	}
	srvSide, cliSide, err := oob.OpenLoopbackDevices(localPairs)
	if err != nil {
		return fmt.Errorf("--local: %w", err)
	}
	defer srvSide.Close()
	defer cliSide.Close()
	ds, dc, addrs := srvSide.Dev, cliSide.Dev, [2]netip.Addr{srvSide.Addr, cliSide.Addr}

	port := 0
	if p.portSet {
		port = p.Port
	}
	sp := p.forRole("")
	cp := p.forRole(addrs[0].String())
	srv := &side{p: sp, out: io.Discard, dev: ds}
	if p.LocalServerOut != nil {
		srv.out = p.LocalServerOut
	}
	cli := &side{p: cp, out: out, errw: errw, dev: dc}
	// Both sides' QPs live until both have ended: the side that ends first must
	// not take away the ACK of the other's last SEND.
	defer srv.close()
	defer cli.close()
	if err := srv.setup(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if err := cli.setup(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addrs[0].String(), strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("couldn't listen to port %d: %w", port, oob.UnwrapOp(err))
	}
	addr := ln.Addr().String()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		serr = srv.run(sctx, ln, "")
	}()
	err = cli.run(ctx, nil, addr)
	if err != nil {
		cancel()
	}
	wg.Wait()
	switch {
	case err == nil && serr != nil:
		return fmt.Errorf("server: %w", serr)
	case err != nil && errors.Is(err, ErrPeer) && serr != nil && !errors.Is(serr, ErrPeer) && !errors.Is(serr, context.Canceled):
		return fmt.Errorf("server: %w", serr)
	}
	return err
}
