// Package rping is xrnic's rping: rdma-core's librdmacm/examples/rping.c (v44)
// over verbs/rdmacm, with its options, its connection through the RDMA CM (port
// 7174 of the TCP port space), its ping loop (the client advertises a source
// buffer, the server RDMA READs it, the client advertises a sink, the server
// RDMA WRITEs the data back, each step acknowledged by a SEND), its data
// pattern and check (-V) and its output, so that a real rping on Linux
// Soft-RoCE can face it as server or as client.
//
// rping finds its device from the addresses; so does bench, in the calling
// namespace (verbs.InterfaceFor), unless --ib-dev names the interface.
package rping

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// rping's constants.
const (
	DefaultPort = 7174
	bufMax      = 64 * 1024 // RPING_BUFSIZE
	minSize     = 11 + 15   // RPING_MIN_BUFSIZE: sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)
	sqDepth     = 16        // RPING_SQ_DEPTH
	infoLen     = 16        // struct rping_rdma_info: be64 buf, be32 rkey, be32 size
)

// ErrUsage marks a bad command line.
var ErrUsage = errors.New("usage")

// Params are rping's options. A plain value.
type Params struct {
	Server, Client bool
	Addr           string // -a
	Source         string // -I
	Port           int    // -p
	Count          int    // -C; 0: for ever
	Size           int    // -S
	Verbose        int    // -v
	Validate       bool   // -V
	Debug          bool   // -d
	Persistent     bool   // -P: not supported
	SelfQP         bool   // -q
	NDK            bool   // --ndk: through the ndk layer instead of verbs and rdma_cm
	Device         string // --ib-dev: the interface (default: from the addresses)
	LinkKind       link.Kind
	Help           bool
}

// Usage prints rping's usage.
func Usage(w io.Writer) {
	const name = "rping"
	fmt.Fprintf(w, "%s -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n", name)
	fmt.Fprintf(w, "%s -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n", name)
	fmt.Fprintf(w, "\t-c\t\tclient side\n")
	fmt.Fprintf(w, "\t-I\t\tSource address to bind to for client.\n")
	fmt.Fprintf(w, "\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n")
	fmt.Fprintf(w, "\t-v\t\tdisplay ping data to stdout\n")
	fmt.Fprintf(w, "\t-V\t\tvalidate ping data\n")
	fmt.Fprintf(w, "\t-d\t\tdebug printfs\n")
	fmt.Fprintf(w, "\t-S size \tping data size\n")
	fmt.Fprintf(w, "\t-C count\tping count times\n")
	fmt.Fprintf(w, "\t-a addr\t\taddress\n")
	fmt.Fprintf(w, "\t-p port\t\tport\n")
	fmt.Fprintf(w, "\t-P\t\tpersistent server mode allowing multiple connections\n")
	fmt.Fprintf(w, "\t-q\t\tuse self-created, self-modified QP\n")
	fmt.Fprintf(w, "\t--ib-dev IF\tthe interface xrnic runs on (bench; default: the one with the address)\n")
	fmt.Fprintf(w, "\t--link KIND\tafxdp or udp (bench)\n")
	fmt.Fprintf(w, "\t--ndk\t\trun over the ndk layer (NDKPI objects) instead of verbs (bench)\n")
}

// Parse reads rping's command line.
func Parse(args []string) (*Params, error) {
	p := &Params{}
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.StringVarP(&p.Addr, "addr", "a", "", "")
	fs.StringVarP(&p.Source, "source", "I", "", "")
	fs.BoolVarP(&p.Persistent, "persistent", "P", false, "")
	fs.IntVarP(&p.Port, "port", "p", DefaultPort, "")
	fs.IntVarP(&p.Count, "count", "C", 0, "")
	fs.IntVarP(&p.Size, "size", "S", 64, "")
	fs.BoolVarP(&p.Server, "server", "s", false, "")
	fs.BoolVarP(&p.Client, "client", "c", false, "")
	fs.CountVarP(&p.Verbose, "verbose", "v", "")
	fs.BoolVarP(&p.Validate, "validate", "V", false, "")
	fs.BoolVarP(&p.Debug, "debug", "d", false, "")
	fs.BoolVarP(&p.SelfQP, "self-qp", "q", false, "")
	fs.BoolVarP(&p.Help, "help", "h", false, "")
	fs.StringVar(&p.Device, "ib-dev", "", "")
	fs.BoolVar(&p.NDK, "ndk", false, "")
	kind := fs.String("link", "", "")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("rping: %v: %w", err, ErrUsage)
	}
	if p.Help {
		return p, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("rping: unexpected argument %q: %w", fs.Arg(0), ErrUsage)
	}
	switch {
	case p.Size < minSize || p.Size > bufMax-1:
		return nil, fmt.Errorf("rping: invalid size %d (valid range is %d to %d): %w", p.Size, minSize, bufMax, ErrUsage)
	case p.Count < 0:
		return nil, fmt.Errorf("rping: invalid count %d: %w", p.Count, ErrUsage)
	case p.Server == p.Client:
		return nil, fmt.Errorf("rping: one of -s and -c: %w", ErrUsage)
	case p.Client && p.Addr == "":
		return nil, fmt.Errorf("rping: the client needs -a: %w", ErrUsage)
	case p.Persistent:
		return nil, fmt.Errorf("rping: -P (persistent server) is not supported: %w", ErrUsage)
	case p.Port <= 0 || p.Port > 65535:
		return nil, fmt.Errorf("rping: port %d: %w", p.Port, ErrUsage)
	}
	if *kind != "" {
		k, err := link.ParseKind(*kind)
		if err != nil {
			return nil, fmt.Errorf("rping: %v: %w", err, ErrUsage)
		}
		p.LinkKind = k
	}
	return p, nil
}

// lookup resolves an address as getaddrinfo does for rping (numeric or a name).
func lookup(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed (%v) - invalid hostname or IP address", err)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

// Run runs rping to completion: a server serves one client, a client pings
// Count times (for ever with 0) until ctx ends.
func Run(ctx context.Context, p *Params, out, errw io.Writer) error {
	var sin, src netip.Addr
	var err error
	if p.Addr != "" {
		if sin, err = lookup(p.Addr); err != nil {
			fmt.Fprintln(out, err)
			return err
		}
	} else {
		sin = netip.IPv4Unspecified()
	}
	if p.Source != "" {
		if src, err = lookup(p.Source); err != nil {
			fmt.Fprintln(out, err)
			return err
		}
	}
	ifname := p.Device
	if ifname == "" {
		local, remote := sin, netip.Addr{}
		if p.Client {
			local, remote = src, sin
		}
		var routeSrc netip.Addr
		if ifname, routeSrc, err = verbs.InterfaceFor(local, remote); err != nil {
			return fmt.Errorf("rping: no xrnic device for the addresses (%w); --ib-dev names one", err)
		}
		if p.Client && !src.IsValid() {
			src = routeSrc // the source the kernel's route gives, as rdma_resolve_addr takes it
		}
	}
	dev, err := verbs.Open(verbs.Options{Interface: ifname, LinkKind: p.LinkKind})
	if err != nil {
		return err
	}
	defer dev.Close()
	port := uint16(p.Port)
	if p.NDK {
		if !src.IsValid() {
			src = netip.IPv4Unspecified()
			if sin.Is6() {
				src = netip.IPv6Unspecified()
			}
		}
		return runNDK(ctx, p, dev, netip.AddrPortFrom(src, 0), netip.AddrPortFrom(sin, port), out, errw)
	}

	cb := &cb{p: p, out: out, errw: errw, sem: make(chan struct{}, 64), state: stIdle, server: p.Server}
	cb.ch = rdmacm.NewEventChannel()
	defer cb.ch.Close()
	if cb.cmID, err = cb.ch.CreateID(cb, rdmacm.PSTCP); err != nil {
		return err
	}
	cb.debugf("created cm_id %p\n", cb.cmID)
	// rping's cm_thread exits the process when an event fails (a connection
	// error, UNREACHABLE, REJECTED): here it ends the run with that error.
	runCtx, endRun := context.WithCancelCause(ctx)
	defer endRun(nil)
	cmCtx, stopCM := context.WithCancel(ctx)
	cmDone := make(chan error, 1)
	go func() {
		err := cb.cmThread(cmCtx)
		if err != nil {
			endRun(err)
		}
		cmDone <- err
	}()
	if p.Server {
		err = cb.runServer(runCtx, netip.AddrPortFrom(sin, port))
	} else {
		err = cb.runClient(runCtx, src, netip.AddrPortFrom(sin, port))
	}
	cb.debugf("destroy cm_id %p\n", cb.cmID)
	cb.cmID.Destroy()
	stopCM()
	if cerr := <-cmDone; cerr != nil {
		err = cerr
	}
	return err
}

// The states of rping's control block (enum test_state).
type state int

const (
	stIdle state = iota + 1
	stConnectRequest
	stAddrResolved
	stRouteResolved
	stConnected
	stReadAdv
	stReadComplete
	stWriteAdv
	stWriteComplete
	stDisconnected
	stError
)

// cb is rping's control block.
type cb struct {
	p         *Params
	out, errw io.Writer
	server    bool

	mu    sync.Mutex
	state state
	sem   chan struct{}

	ch      *rdmacm.EventChannel
	cmID    *rdmacm.ID
	child   *rdmacm.ID
	id      *rdmacm.ID // the connection's ID (child on the server)
	pd      *verbs.PD
	compCh  *verbs.CompChannel
	cq      *verbs.CQ
	qp      *verbs.QP
	buf     []byte
	mr      *verbs.MR
	cqDone  chan struct{}
	remote  struct{ addr, rkey, len uint64 }
	outMu   sync.Mutex
	rdmaBuf []byte
	start   []byte
}

// Buffer layout in the one registered region: recv_buf, send_buf, rdma_buf,
// start_buf.
const (
	offRecv = 0
	offSend = infoLen
	offRDMA = 2 * infoLen
)

func (c *cb) debugf(format string, args ...any) {
	if c.p.Debug {
		c.outMu.Lock()
		fmt.Fprintf(c.out, format, args...)
		c.outMu.Unlock()
	}
}

func (c *cb) printf(w io.Writer, format string, args ...any) {
	c.outMu.Lock()
	fmt.Fprintf(w, format, args...)
	c.outMu.Unlock()
}

func (c *cb) setState(s state) {
	c.mu.Lock()
	c.state = s
	c.mu.Unlock()
}

func (c *cb) getState() state {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *cb) post() { c.sem <- struct{}{} }

func (c *cb) wait(ctx context.Context) error {
	select {
	case <-c.sem:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await is rping's sem_wait and state check: the next event must have left
// the state want (named as rping names it in its complaint).
func (c *cb) await(ctx context.Context, want state, name string) error {
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s != want {
		c.printf(c.errw, "wait for %s state %d\n", name, s)
		return errOutOfStep
	}
	return nil
}

var errOutOfStep = errors.New("rping: out of step")

// cmThread is rping's cm_thread: it takes the CM events until ctx ends.
func (c *cb) cmThread(ctx context.Context) error {
	for {
		ev, err := c.ch.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := c.onEvent(ev); err != nil {
			return err
		}
	}
}

// onEvent is rping_cma_event_handler.
func (c *cb) onEvent(ev *rdmacm.Event) error {
	which := "child"
	if ev.ID == c.cmID {
		which = "parent"
	}
	c.debugf("cma_event type %s cma_id %p (%s)\n", ev.Type, ev.ID, which)
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		c.setState(stAddrResolved)
		if err := ev.ID.ResolveRoute(); err != nil {
			c.setState(stError)
			c.printf(c.errw, "rdma_resolve_route: %v\n", err)
			c.post()
		}
	case rdmacm.EventRouteResolved:
		c.setState(stRouteResolved)
		c.post()
	case rdmacm.EventConnectRequest:
		c.setState(stConnectRequest)
		c.child = ev.ID
		c.debugf("child cma %p\n", c.child)
		c.post()
	case rdmacm.EventConnectResponse:
		c.debugf("CONNECT_RESPONSE\n")
		c.setState(stConnected)
		c.post()
	case rdmacm.EventEstablished:
		c.debugf("ESTABLISHED\n")
		// The server wakes up when the first RECV completes.
		if !c.server {
			c.setState(stConnected)
		}
		c.post()
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError,
		rdmacm.EventUnreachable, rdmacm.EventRejected:
		c.printf(c.errw, "cma event %s, error %d\n", ev.Type, ev.Status)
		c.post()
		return fmt.Errorf("rping: %s, error %d", ev.Type, ev.Status)
	case rdmacm.EventDisconnected:
		side := "client"
		if c.server {
			side = "server"
		}
		c.printf(c.errw, "%s DISCONNECT EVENT...\n", side)
		c.setState(stDisconnected)
		c.post()
	case rdmacm.EventDeviceRemoval:
		c.printf(c.errw, "cma detected device removal!!!!\n")
		c.setState(stError)
		c.post()
		return errors.New("rping: device removal")
	default:
		c.printf(c.errw, "unhandled event: %s, ignoring\n", ev.Type)
	}
	return nil
}

// setupQP is rping_setup_qp and rping_setup_buffers on id's device.
func (c *cb) setupQP(id *rdmacm.ID) error {
	d := id.Device()
	var err error
	if c.pd, err = d.AllocPD(); err != nil {
		c.printf(c.errw, "ibv_alloc_pd failed\n")
		return err
	}
	c.debugf("created pd %p\n", c.pd)
	c.compCh = verbs.NewCompChannel()
	c.debugf("created channel %p\n", c.compCh)
	if c.cq, err = d.CreateCQ(sqDepth*2, verbs.CQOptions{Channel: c.compCh, Context: c}); err != nil {
		c.printf(c.errw, "ibv_create_cq failed\n")
		return err
	}
	c.debugf("created cq %p\n", c.cq)
	if err = c.cq.ReqNotify(false); err != nil {
		c.printf(c.errw, "ibv_create_cq failed\n")
		return err
	}
	init := verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if c.qp, err = id.CreateQP(c.pd, init); err != nil {
		c.printf(c.errw, "rdma_create_qp: %v\n", err)
		return err
	}
	c.debugf("created qp %p\n", c.qp)
	c.debugf("rping_setup_buffers called on cb %p\n", c)
	size := c.p.Size
	n := offRDMA + size
	if !c.server {
		n += size
	}
	if c.buf, err = verbs.MapBuffer(n); err != nil {
		return err
	}
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessZeroBased
	if c.mr, err = c.pd.RegMR(c.buf, 0, acc); err != nil {
		c.printf(c.errw, "rdma_buf reg_mr failed\n")
		return err
	}
	c.rdmaBuf = c.buf[offRDMA : offRDMA+size]
	if !c.server {
		c.start = c.buf[offRDMA+size : offRDMA+2*size]
	}
	c.debugf("allocated & registered buffers...\n")
	return nil
}

func (c *cb) free() {
	c.debugf("rping_free_buffers called on cb %p\n", c)
	if c.mr != nil {
		c.mr.Dereg().Wait()
	}
	if c.buf != nil {
		verbs.UnmapBuffer(c.buf)
	}
	if c.id != nil && c.qp != nil {
		c.id.DestroyQP()
	}
	if c.cq != nil {
		c.cq.Destroy().Wait()
	}
	if c.pd != nil {
		c.pd.Dealloc().Wait()
	}
}

func (c *cb) postRecv() error {
	wr := [1]verbs.RecvWR{{SGL: []verbs.SGE{c.mr.SGE(offRecv, infoLen)}}}
	_, err := c.qp.PostRecv(wr[:])
	return err
}

// sendInfo is rping_format_send and the SEND of sq_wr: advertise buf (at off)
// to the peer; off < 0 sends the "go ahead" as it stands.
func (c *cb) sendInfo(off int) error {
	if off >= 0 {
		b := c.buf[offSend : offSend+infoLen]
		binary.BigEndian.PutUint64(b[0:], uint64(off))
		binary.BigEndian.PutUint32(b[8:], c.mr.RKey())
		binary.BigEndian.PutUint32(b[12:], uint32(c.p.Size))
		c.debugf("RDMA addr %x rkey %x len %d\n", off, c.mr.RKey(), c.p.Size)
	}
	wr := [1]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.mr.SGE(offSend, infoLen)}}}
	_, err := c.qp.PostSend(wr[:])
	return err
}

func (c *cb) rdma(op verbs.WROpcode, length int) error {
	wr := [1]verbs.SendWR{{Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{c.mr.SGE(offRDMA, uint32(length))},
		RemoteAddr: c.remote.addr, RKey: uint32(c.remote.rkey)}}
	_, err := c.qp.PostSend(wr[:])
	return err
}

// cqThread is rping's cq_thread: it ends when the handler reports a flush or an
// error, or ctx ends.
func (c *cb) cqThread(ctx context.Context) {
	defer close(c.cqDone)
	c.debugf("cq_thread started.\n")
	for {
		cq, err := c.compCh.GetEvent(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.printf(c.errw, "Failed to get cq event!\n")
			}
			return
		}
		if cq != c.cq {
			c.printf(c.errw, "Unknown CQ!\n")
			return
		}
		if err := c.cq.ReqNotify(false); err != nil {
			c.printf(c.errw, "Failed to set notify!\n")
			return
		}
		ret := c.onCQ()
		c.cq.AckEvents(1)
		if ret != 0 {
			return
		}
	}
}

// onCQ is rping_cq_event_handler: 1 when a flush was seen, -1 on error.
func (c *cb) onCQ() int {
	var wc [1]verbs.WC
	flushed := 0
	for c.cq.Poll(wc[:]) == 1 {
		w := &wc[0]
		if w.Status != verbs.WCSuccess {
			if w.Status == verbs.WCWRFlushErr {
				flushed = 1
				continue
			}
			c.printf(c.errw, "cq completion failed status %d\n", int(w.Status))
			return c.fail()
		}
		switch w.Opcode {
		case verbs.WCSend:
			c.debugf("send completion\n")
		case verbs.WCRDMAWrite:
			c.debugf("rdma write completion\n")
			c.setState(stWriteComplete)
			c.post()
		case verbs.WCRDMARead:
			c.debugf("rdma read completion\n")
			c.setState(stReadComplete)
			c.post()
		case verbs.WCRecv:
			c.debugf("recv completion\n")
			if w.ByteLen != infoLen {
				c.printf(c.errw, "Received bogus data, size %d\n", w.ByteLen)
				c.printf(c.errw, "recv wc error: %d\n", -1)
				return c.fail()
			}
			if c.server {
				c.serverRecv()
			} else if c.getState() == stReadAdv {
				c.setState(stWriteAdv)
			} else {
				c.setState(stWriteComplete)
			}
			if err := c.postRecv(); err != nil {
				c.printf(c.errw, "post recv error: %v\n", err)
				return c.fail()
			}
			c.post()
		default:
			c.debugf("unknown!!!!! completion\n")
			return c.fail()
		}
	}
	return flushed
}

func (c *cb) fail() int {
	c.setState(stError)
	c.post()
	return -1
}

// serverRecv is server_recv: the client's buffer, then the state it moves to.
func (c *cb) serverRecv() {
	b := c.buf[offRecv : offRecv+infoLen]
	c.remote.addr = binary.BigEndian.Uint64(b[0:])
	c.remote.rkey = uint64(binary.BigEndian.Uint32(b[8:]))
	c.remote.len = uint64(binary.BigEndian.Uint32(b[12:]))
	c.debugf("Received rkey %x addr %x len %d from peer\n", c.remote.rkey, c.remote.addr, c.remote.len)
	if s := c.getState(); s <= stConnected || s == stWriteComplete {
		c.setState(stReadAdv)
	} else {
		c.setState(stWriteAdv)
	}
}

func connParam() rdmacm.ConnParam {
	return rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
}

// setup sets up the connection's QP and buffers on id (rping_setup_qp,
// rping_setup_buffers), posts the first receive and starts the CQ thread. The
// returned stop ends the thread and frees what was set up; call it in every
// case.
func (c *cb) setup(ctx context.Context, id *rdmacm.ID) (stop func(), err error) {
	c.id = id
	cqCtx, stopCQ := context.WithCancel(ctx)
	stop = func() {
		stopCQ()
		if c.cqDone != nil {
			<-c.cqDone
		}
		c.free()
	}
	if err := c.setupQP(id); err != nil {
		c.printf(c.errw, "setup_qp failed: %v\n", err)
		return stop, err
	}
	if err := c.postRecv(); err != nil {
		c.printf(c.errw, "ibv_post_recv failed: %v\n", err)
		return stop, err
	}
	c.cqDone = make(chan struct{})
	go c.cqThread(cqCtx)
	return stop, nil
}

func (c *cb) runServer(ctx context.Context, sin netip.AddrPort) error {
	if err := c.cmID.BindAddr(sin); err != nil {
		c.printf(c.errw, "rdma_bind_addr: %v\n", err)
		return err
	}
	c.debugf("rdma_bind_addr successful\n")
	c.debugf("rdma_listen\n")
	if err := c.cmID.Listen(3); err != nil {
		c.printf(c.errw, "rdma_listen: %v\n", err)
		return err
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s != stConnectRequest {
		c.printf(c.errw, "wait for CONNECT_REQUEST state %d\n", s)
		return errors.New("rping: no connection request")
	}
	defer c.child.Destroy()
	stopCQ, err := c.setup(ctx, c.child)
	defer stopCQ()
	if err != nil {
		return err
	}
	c.debugf("accepting client connection request\n")
	if err := c.child.Accept(connParam()); err != nil {
		c.printf(c.errw, "rdma_accept: %v\n", err)
		return err
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s == stError {
		c.printf(c.errw, "wait for CONNECTED state %d\n", s)
		return errors.New("rping: connection failed")
	}
	if err = c.testServer(ctx); err != nil {
		c.printf(c.errw, "rping server failed: %v\n", err)
	}
	c.child.Disconnect()
	return err
}

// testServer is rping_test_server.
func (c *cb) testServer(ctx context.Context) error {
	var err error
	for {
		if err = c.await(ctx, stReadAdv, "RDMA_READ_ADV"); err != nil {
			break
		}
		c.debugf("server received source adv\n")
		if err = c.rdma(verbs.WRRDMARead, int(c.remote.len)); err != nil {
			c.printf(c.errw, "post send error %v\n", err)
			break
		}
		c.debugf("server posted rdma read req \n")
		if err = c.await(ctx, stReadComplete, "RDMA_READ_COMPLETE"); err != nil {
			break
		}
		c.debugf("server received read complete\n")
		if c.p.Verbose > 0 {
			c.printf(c.out, "server ping data: %s\n", cstr(c.rdmaBuf))
		}
		if err = c.sendInfo(-1); err != nil {
			c.printf(c.errw, "post send error %v\n", err)
			break
		}
		c.debugf("server posted go ahead\n")
		if err = c.await(ctx, stWriteAdv, "RDMA_WRITE_ADV"); err != nil {
			break
		}
		c.debugf("server received sink adv\n")
		n := len(cstr(c.rdmaBuf)) + 1
		c.debugf("rdma write from lkey %x laddr %x len %d\n", c.mr.LKey(), offRDMA, n)
		if err = c.rdma(verbs.WRRDMAWrite, n); err != nil {
			c.printf(c.errw, "post send error %v\n", err)
			break
		}
		if err = c.await(ctx, stWriteComplete, "RDMA_WRITE_COMPLETE"); err != nil {
			break
		}
		c.debugf("server rdma write complete \n")
		if err = c.sendInfo(-1); err != nil {
			c.printf(c.errw, "post send error %v\n", err)
			break
		}
		c.debugf("server posted go ahead\n")
	}
	if c.getState() == stDisconnected {
		return nil
	}
	return err
}

func (c *cb) runClient(ctx context.Context, src netip.Addr, dst netip.AddrPort) error {
	if err := c.cmID.ResolveAddr(src, dst); err != nil {
		c.printf(c.errw, "rdma_resolve_addr: %v\n", err)
		return err
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s != stRouteResolved {
		c.printf(c.errw, "waiting for addr/route resolution state %d\n", s)
		return errors.New("rping: resolution failed")
	}
	c.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	stopCQ, err := c.setup(ctx, c.cmID)
	defer stopCQ()
	if err != nil {
		return err
	}
	if err := c.cmID.Connect(connParam()); err != nil {
		c.printf(c.errw, "rdma_connect: %v\n", err)
		return err
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if s := c.getState(); s != stConnected {
		c.printf(c.errw, "wait for CONNECTED state %d\n", s)
		c.printf(c.errw, "connect error %d\n", -1)
		return errors.New("rping: connection failed")
	}
	c.debugf("rdma_connect successful\n")
	if err = c.testClient(ctx); err != nil {
		c.printf(c.errw, "rping client failed: %v\n", err)
	}
	if c.cmID.Disconnect() == nil {
		c.lingerDisconnect(ctx)
	}
	return err
}

// disconnectLinger bounds how long the client keeps its ID after its DREQ.
const disconnectLinger = 20 * time.Second

// lingerDisconnect waits for the DISCONNECTED that the peer's DREP brings,
// for at most disconnectLinger. rping destroys its ID at once, which ends the
// DREQ's retransmission: were that one DREQ lost, a server waiting for its
// next ping (rping's, among others) would wait forever. Keeping the ID while
// the DREQ is retried costs nothing when the DREP comes.
func (c *cb) lingerDisconnect(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, disconnectLinger)
	defer cancel()
	for c.getState() != stDisconnected && c.wait(ctx) == nil {
	}
}

// Data is the ping data rping's client sends in ping number ping (from 0) of
// size bytes, its final NUL left out: what rping -v prints after "ping data: "
// (client) or "server ping data: " (server).
func Data(ping, size int) []byte {
	b := make([]byte, size)
	fillStart(b, ping, 65+ping%58)
	return b[:size-1]
}

// fillStart is the client's ping data: "rdma-ping-%d: " then letters from
// start, cycling 'A'..'z', and a final NUL.
func fillStart(b []byte, ping, start int) {
	cc := copy(b, "rdma-ping-"+strconv.Itoa(ping)+": ")
	ch := start
	for i := cc; i < len(b); i++ {
		b[i] = byte(ch)
		ch++
		if ch > 122 {
			ch = 65
		}
	}
	b[len(b)-1] = 0
}

// testClient is rping_test_client.
func (c *cb) testClient(ctx context.Context) error {
	start := 65
	var err error
	for ping := 0; c.p.Count == 0 || ping < c.p.Count; ping++ {
		c.setState(stReadAdv)
		fillStart(c.start, ping, start)
		start++
		if start > 122 {
			start = 65
		}
		if err = c.sendInfo(offRDMA + c.p.Size); err != nil {
			c.printf(c.errw, "post send error %v\n", err)
			break
		}
		if err = c.await(ctx, stWriteAdv, "RDMA_WRITE_ADV"); err != nil {
			break
		}
		if err = c.sendInfo(offRDMA); err != nil {
			c.printf(c.errw, "post send error %v\n", err)
			break
		}
		if err = c.await(ctx, stWriteComplete, "RDMA_WRITE_COMPLETE"); err != nil {
			break
		}
		if c.p.Validate && string(c.start) != string(c.rdmaBuf) {
			c.printf(c.errw, "data mismatch!\n")
			err = errors.New("rping: data mismatch")
			break
		}
		if c.p.Verbose > 0 {
			c.printf(c.out, "ping data: %s\n", cstr(c.rdmaBuf))
		}
	}
	if c.getState() == stDisconnected {
		return nil
	}
	return err
}

// cstr is b up to its first NUL, as %s prints a C string.
func cstr(b []byte) []byte {
	for i, x := range b {
		if x == 0 {
			return b[:i]
		}
	}
	return b
}
