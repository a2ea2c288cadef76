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
	"strings"
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
	dev, err := verbs.Open(verbs.Options{Interface: p.Device, LinkKind: p.LinkKind, Logf: linkLog(errw),
		Engine: verbs.EngineConfig{Logf: func(string, ...any) {}}})
	if err != nil {
		return fmt.Errorf("device %s: %w", p.Device, err)
	}
	defer dev.Close()
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
	return s.run(ctx, ln, net.JoinHostPort(p.ServerName, strconv.Itoa(p.Port)))
}

// linkLog passes on the link's report of its choice (AF_XDP, or why the UDP
// fallback) and drops the goroutine start and stop lines.
func linkLog(w io.Writer) func(string, ...any) {
	return func(f string, a ...any) {
		if m := fmt.Sprintf(f, a...); strings.HasPrefix(m, "xrnic: ") {
			fmt.Fprintln(w, m)
		}
	}
}

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
	buf       []byte
	mr        *verbs.MR
	cq        *verbs.CQ
	qp        *verbs.QP
	sendFlags verbs.SendFlags
	recvWRs   []verbs.RecvWR
	sendWR    [1]verbs.SendWR
	wc        [2]verbs.WC
	events    int // CQ events to acknowledge

	my, rem Dest
	gidText string // the last text inet_ntop put in main's gid[33]

	routs, rcnt, scnt, pending int

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
	s.buf = make([]byte, p.Size)
	for i := range s.buf {
		s.buf[i] = patternByte
	}
	if p.Events {
		s.ch = verbs.NewCompChannel()
	}
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	if s.mr, err = s.pd.RegMR(s.buf, 0, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	if s.cq, err = s.dev.CreateCQ(p.RxDepth+1, verbs.CQOptions{Channel: s.ch}); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(p.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	s.sendFlags = verbs.SendSignaled
	if int(s.qp.Cap().MaxInlineData) >= p.Size {
		s.sendFlags |= verbs.SendInline
	}
	if p.IBPort != 1 {
		return fmt.Errorf("failed to modify QP to INIT: port %d: xrnic devices have port 1 only", p.IBPort)
	}
	a := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSInit, PKeyIndex: 0, Port: uint8(p.IBPort), AccessFlags: 0}}
	if err := s.qp.ModifySync(&a, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return fmt.Errorf("failed to modify QP to INIT: %w", err)
	}

	sge := []verbs.SGE{{Addr: s.mr.Addr(), Length: uint32(p.Size), LKey: s.mr.LKey()}}
	s.recvWRs = make([]verbs.RecvWR, p.RxDepth)
	for i := range s.recvWRs {
		s.recvWRs[i] = verbs.RecvWR{WRID: recvWRID, SGL: sge}
	}
	s.sendWR[0] = verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, Flags: s.sendFlags, SGL: sge}
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
	if s.errw != nil && p.MTU > port.ActiveMTU && port.LinkKind != link.KindUDP {
		fmt.Fprintf(s.errw, "bench: rc_pingpong: warning: path MTU %d is above the port's active MTU %d; rc_pingpong uses it anyway, and frames that do not fit the link are lost\n",
			p.MTU.Bytes(), port.ActiveMTU.Bytes())
	}
	s.my.LID = 0 // RoCE has no LIDs
	if p.GIDIndex >= 0 {
		if s.my.GID, err = s.dev.QueryGID(p.GIDIndex); err != nil {
			return fmt.Errorf("can't read sgid of index %d: the device has %d GIDs", p.GIDIndex, len(port.GIDs))
		}
	}
	s.my.QPN = s.qp.QPN()
	s.my.PSN = rand.Uint32() & 0xffffff
	if p.Check {
		s.want = make([]byte, p.Size)
		copy(s.want, s.buf)
		s.setValidation(s.want)
	}
	return nil
}

// setValidation is what the client does to its buffer with -c before the first
// send: ctx->buf[i] = i / page_size % sizeof(char) for each page, and anything
// modulo sizeof(char), which is 1, is 0.
func (s *side) setValidation(b []byte) {
	for i := 0; i < len(b); i += s.pageSize {
		b[i] = 0
	}
}

// postRecv is pp_post_recv: it posts n receives and returns how many it could.
func (s *side) postRecv(n int) int {
	k, _ := s.qp.PostRecv(s.recvWRs[:n])
	return k
}

// close is pp_close_ctx without the device, which is the caller's. Idempotent.
func (s *side) close() {
	if s.qp != nil {
		_ = s.qp.Destroy().Wait()
		s.qp = nil
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
	fmt.Fprintf(s.out, "  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", which, d.LID, d.QPN, d.PSN, s.ntop(d.GID))
}

// run is main from the local address line on: the exchange (on ln as server,
// to addr as client), the connection of the QP, the ping-pong and the report.
func (s *side) run(ctx context.Context, ln net.Listener, addr string) error {
	p := s.p
	s.printDest("local address: ", &s.my)
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
		s.rem, err = ServerExchange(c, &s.my, s.connect)
	} else {
		s.rem, err = ClientExchange(c, &s.my)
	}
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	s.printDest("remote address:", &s.rem)
	if !p.Server() {
		if err := s.connect(&s.rem); err != nil {
			return err
		}
	}

	s.pending = recvWRID
	if !p.Server() {
		if p.Check {
			s.setValidation(s.buf)
		}
		if err := s.postSend(); err != nil {
			return fmt.Errorf("couldn't post send: %w", err)
		}
		s.pending |= sendWRID
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

// connect is pp_connect_ctx: RTR towards the peer's QP, then RTS.
func (s *side) connect(rem *Dest) error {
	p := s.p
	if rem.GID.IsZero() || [8]byte(rem.GID[8:]) == [8]byte{} {
		// rc_pingpong sets no GRH for such a GID (is_global = 0), and RoCE has
		// no path without one: rxe fails the modify.
		return fmt.Errorf("failed to modify QP to RTR: the remote GID %s has no interface ID, so there is no GRH, which RoCE needs (is the peer run with -g?)", rem.GID.FullString())
	}
	a := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSRTR, PathMTU: p.MTU, DestQPN: rem.QPN, RQPSN: wire.PSN(rem.PSN),
		MaxDestRdAtomic: maxDestRdAtomic, MinRNRTimer: minRNRTimer},
		AV: verbs.AV{DGID: rem.GID, SGIDIndex: uint8(p.GIDIndex), HopLimit: hopLimit, Port: uint8(p.IBPort)}}
	mask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
		verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	if err := s.qp.ModifySync(&a, mask); err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	a = verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSRTS, Timeout: ackTimeout, RetryCnt: retryCnt, RNRRetry: rnrRetry,
		SQPSN: wire.PSN(s.my.PSN), MaxRdAtomic: maxRdAtomic}}
	mask = verbs.AttrState | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrSQPSN |
		verbs.AttrMaxQPRdAtomic
	if err := s.qp.ModifySync(&a, mask); err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	return nil
}

// postSend is pp_post_send: one signaled SEND of the whole buffer.
func (s *side) postSend() error {
	if s.mangle != nil {
		s.mangle(s.buf, s.scnt)
	}
	_, err := s.qp.PostSend(s.sendWR[:])
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

// handle is parse_single_wc for one completion.
func (s *side) handle(wc *verbs.WC) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, int(wc.WRID))
	}
	switch wc.WRID {
	case sendWRID:
		s.scnt++
	case recvWRID:
		s.verify(wc) // before the buffer is sent back or received into again
		if s.routs--; s.routs <= 1 {
			s.routs += s.postRecv(s.p.RxDepth - s.routs)
			if s.routs < s.p.RxDepth {
				return fmt.Errorf("couldn't post receive (%d)", s.routs)
			}
		}
		s.rcnt++
	default:
		return fmt.Errorf("completion for unknown wr_id %d", int(wc.WRID))
	}
	s.pending &^= int(wc.WRID)
	if s.scnt < s.p.Iters && s.pending == 0 {
		if err := s.postSend(); err != nil {
			return fmt.Errorf("couldn't post send: %w", err)
		}
		s.pending = recvWRID | sendWRID
	}
	return nil
}

// verify is bench's own check of a received message with --chk: its length is
// -s and every byte is what an rc_pingpong client with -c sends (and its server
// echoes). It keeps the first failure.
func (s *side) verify(wc *verbs.WC) {
	if s.want == nil || s.mismatch != nil {
		return
	}
	n := s.rcnt + 1
	if int(wc.ByteLen) != s.p.Size {
		s.mismatch = fmt.Errorf("data check: received message %d has %d bytes, want %d", n, wc.ByteLen, s.p.Size)
		return
	}
	if bytes.Equal(s.buf, s.want) {
		return
	}
	for i := range s.buf {
		if s.buf[i] != s.want[i] {
			s.mismatch = fmt.Errorf("data check: received message %d has 0x%02x at byte %d, want 0x%02x", n, s.buf[i], i, s.want[i])
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
			if s.buf[i] != 0 {
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
