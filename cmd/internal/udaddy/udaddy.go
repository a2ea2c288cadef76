// Package udaddy is xrnic's udaddy: rdma-core's librdmacm/examples/udaddy.c
// (v44) over verbs/rdmacm. UD QPs of the UDP port space find each other
// through SIDR (port 7174): the client resolves each connection's server QP
// and Q_Key, sends its messages (SEND with immediate: its QPN), and waits for
// as many replies; the server answers each connection through an address
// handle made from the first message's GRH. Options and output are udaddy's,
// so that a real udaddy on Linux Soft-RoCE can face it in either role.
package udaddy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	flag "github.com/spf13/pflag"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// Port is udaddy's fixed port.
const Port = 7174

const grhLen = 40 // sizeof(struct ibv_grh): the receive buffer's head

// ErrUsage marks a bad command line.
var ErrUsage = errors.New("usage")

// Params are udaddy's options. A plain value.
type Params struct {
	Server      string // -s: the server's address (client mode)
	Bind        string // -b
	Connections int    // -c
	Count       int    // -C
	Size        int    // -S
	Device      string // --ib-dev: the interface (default: from the addresses)
	LinkKind    link.Kind
	Help        bool
}

// Usage prints udaddy's usage for what bench takes.
func Usage(w io.Writer) {
	fmt.Fprintf(w, "usage: udaddy\n")
	fmt.Fprintf(w, "\t[-s server_address]\n")
	fmt.Fprintf(w, "\t[-b bind_address]\n")
	fmt.Fprintf(w, "\t[-f address_format]\n")
	fmt.Fprintf(w, "\t    name, ip, ipv6\n")
	fmt.Fprintf(w, "\t[-P port_space]\n")
	fmt.Fprintf(w, "\t    udp\n")
	fmt.Fprintf(w, "\t[-c connections]\n")
	fmt.Fprintf(w, "\t[-C message_count]\n")
	fmt.Fprintf(w, "\t[-S message_size]\n")
	fmt.Fprintf(w, "\t[-p port_space - %#x for UDP (default)]\n", uint16(rdmacm.PSUDP))
	fmt.Fprintf(w, "\t[--ib-dev IF]\tthe interface xrnic runs on (bench; default: the one with the address)\n")
	fmt.Fprintf(w, "\t[--link KIND]\taf_xdp or udp (bench)\n")
}

// Parse reads udaddy's command line. What xrnic has no use for is refused: the
// IPoIB port space, GID addresses, and -t (RoCE's ToS is not per ID here).
func Parse(args []string) (*Params, error) {
	p := &Params{}
	fs := flag.NewFlagSet("udaddy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVarP(&p.Server, "server", "s", "", "")
	fs.StringVarP(&p.Bind, "bind", "b", "", "")
	fs.IntVarP(&p.Connections, "connections", "c", 1, "")
	fs.IntVarP(&p.Count, "count", "C", 10, "")
	fs.IntVarP(&p.Size, "size", "S", 100, "")
	tos := fs.StringP("tos", "t", "", "")
	ps := fs.StringP("port-space", "p", "", "")
	psName := fs.StringP("port-space-name", "P", "", "")
	format := fs.StringP("format", "f", "", "")
	fs.BoolVarP(&p.Help, "help", "h", false, "")
	fs.StringVar(&p.Device, "ib-dev", "", "")
	kind := fs.String("link", "", "")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("udaddy: %v: %w", err, ErrUsage)
	}
	switch {
	case p.Help:
		return p, nil
	case fs.NArg() > 0:
		return nil, fmt.Errorf("udaddy: unexpected argument %q: %w", fs.Arg(0), ErrUsage)
	case p.Connections < 1 || p.Connections > 1024:
		return nil, fmt.Errorf("udaddy: %d connections (1..1024): %w", p.Connections, ErrUsage)
	case p.Count < 0 || p.Count > 1<<16:
		return nil, fmt.Errorf("udaddy: message count %d (0..65536): %w", p.Count, ErrUsage)
	case p.Size < 0:
		return nil, fmt.Errorf("udaddy: message size %d: %w", p.Size, ErrUsage)
	case *tos != "":
		return nil, fmt.Errorf("udaddy: -t is not supported: %w", ErrUsage)
	case *ps != "" && *ps != "0x111" && *ps != "273":
		return nil, fmt.Errorf("udaddy: port space %s: only UDP (0x111): %w", *ps, ErrUsage)
	case *psName != "" && *psName != "udp":
		return nil, fmt.Errorf("udaddy: port space %q: only udp: %w", *psName, ErrUsage)
	case *format == "gid":
		return nil, fmt.Errorf("udaddy: GID addresses (AF_IB) are not supported: %w", ErrUsage)
	}
	if p.Size == 0 {
		p.Count = 0 // create_message: no size, no messages
	}
	if *kind != "" {
		k, err := link.ParseKind(*kind)
		if err != nil || k == link.KindMemory {
			return nil, fmt.Errorf("udaddy: --link %q: want af_xdp or udp: %w", *kind, ErrUsage)
		}
		p.LinkKind = k
	}
	return p, nil
}

// node is struct cmatest_node.
type node struct {
	id         *rdmacm.ID
	pd         *verbs.PD
	cq         *verbs.CQ
	qp         *verbs.QP
	buf        []byte // GRH room, then the message
	mr         *verbs.MR
	ah         *verbs.AH
	remoteQPN  uint32
	remoteQKey uint32
	connected  bool
}

// test is struct cmatest. It belongs to Run's goroutine.
type test struct {
	p     *Params
	out   io.Writer
	ch    *rdmacm.EventChannel
	nodes []node
	next  int // conn_index
	left  int // connects_left
}

func lookup(ctx context.Context, s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", s)
	if err != nil || len(as) == 0 {
		return netip.Addr{}, fmt.Errorf("udaddy: getaddrinfo %s: %v", s, err)
	}
	return as[0].Unmap(), nil
}

// Run runs udaddy; the error is nil when udaddy's return status is 0.
func Run(ctx context.Context, p *Params, out, errw io.Writer) error {
	var dst, src netip.Addr
	var err error
	if p.Server != "" {
		if dst, err = lookup(ctx, p.Server); err != nil {
			return err
		}
	}
	if p.Bind != "" {
		if src, err = lookup(ctx, p.Bind); err != nil {
			return err
		}
	}
	ifname := p.Device
	if ifname == "" {
		var routeSrc netip.Addr
		if ifname, routeSrc, err = verbs.InterfaceFor(src, dst); err != nil {
			return fmt.Errorf("udaddy: no xrnic device for the addresses (%w); --ib-dev names one", err)
		}
		if dst.IsValid() && !src.IsValid() {
			src = routeSrc
		}
	}
	dev, err := verbs.Open(verbs.Options{Interface: ifname, LinkKind: p.LinkKind})
	if err != nil {
		return err
	}
	defer dev.Close()
	t := &test{p: p, out: out, ch: rdmacm.NewEventChannel(), nodes: make([]node, p.Connections),
		left: p.Connections}
	defer t.ch.Close()
	var status int
	if dst.IsValid() {
		status = t.runClient(ctx, src, dst)
	} else {
		status = t.runServer(ctx, src)
	}
	fmt.Fprintf(out, "test complete\n")
	t.destroy()
	fmt.Fprintf(out, "return status %d\n", status)
	if status != 0 {
		return fmt.Errorf("udaddy: return status %d", status)
	}
	return nil
}

// runClient is run_client.
func (t *test) runClient(ctx context.Context, src, dst netip.Addr) int {
	fmt.Fprintf(t.out, "udaddy: starting client\n")
	for i := range t.nodes {
		id, err := t.ch.CreateID(i, rdmacm.PSUDP)
		if err != nil {
			fmt.Fprintf(t.out, "udaddy: rdma_create_id: %v\n", err)
			return -1
		}
		t.nodes[i].id = id
	}
	fmt.Fprintf(t.out, "udaddy: connecting\n")
	for i := range t.nodes {
		if err := t.nodes[i].id.ResolveAddr(src, netip.AddrPortFrom(dst, Port)); err != nil {
			fmt.Fprintf(t.out, "udaddy: failure getting addr: %v\n", err)
			return -1
		}
	}
	if ret := t.connectEvents(ctx); ret != 0 {
		return ret
	}
	if t.p.Count == 0 {
		return 0
	}
	fmt.Fprintf(t.out, "initiating data transfers\n")
	for i := range t.nodes {
		if ret := t.postSends(&t.nodes[i], 0); ret != 0 {
			return ret
		}
	}
	fmt.Fprintf(t.out, "receiving data transfers\n")
	if ret := t.pollCQs(ctx); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.out, "data transfers complete\n")
	return 0
}

// runServer is run_server.
func (t *test) runServer(ctx context.Context, src netip.Addr) int {
	fmt.Fprintf(t.out, "udaddy: starting server\n")
	listen, err := t.ch.CreateID(nil, rdmacm.PSUDP)
	if err != nil {
		fmt.Fprintf(t.out, "udaddy: listen request failed: %v\n", err)
		return -1
	}
	defer listen.Destroy()
	if !src.IsValid() {
		src = netip.IPv4Unspecified()
	}
	if err := listen.BindAddr(netip.AddrPortFrom(src, Port)); err != nil {
		fmt.Fprintf(t.out, "udaddy: bind address failed: %v\n", err)
		return -1
	}
	if err := listen.Listen(0); err != nil {
		fmt.Fprintf(t.out, "udaddy: failure trying to listen: %v\n", err)
		return -1
	}
	t.connectEvents(ctx)
	if t.p.Count == 0 {
		return 0
	}
	fmt.Fprintf(t.out, "receiving data transfers\n")
	if ret := t.pollCQs(ctx); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.out, "sending replies\n")
	for i := range t.nodes {
		if ret := t.postSends(&t.nodes[i], verbs.SendSignaled); ret != 0 {
			return ret
		}
	}
	if ret := t.pollCQs(ctx); ret != 0 {
		return ret
	}
	fmt.Fprintf(t.out, "data transfers complete\n")
	return 0
}

// connectEvents is connect_events: events until every connection is made or
// has failed, or one fails to be handled.
func (t *test) connectEvents(ctx context.Context) int {
	for t.left > 0 {
		ev, err := t.ch.GetEvent(ctx)
		if err != nil {
			fmt.Fprintf(t.out, "udaddy: rdma_get_cm_event: %v\n", err)
			return -1
		}
		if ret := t.onEvent(ev); ret != 0 {
			return ret
		}
	}
	return 0
}

// onEvent is cma_handler.
func (t *test) onEvent(ev *rdmacm.Event) int {
	switch ev.Type {
	case rdmacm.EventAddrResolved:
		if err := ev.ID.ResolveRoute(); err != nil {
			fmt.Fprintf(t.out, "udaddy: resolve route failed: %v\n", err)
			t.left--
			return -1
		}
	case rdmacm.EventRouteResolved:
		n := &t.nodes[ev.ID.Context().(int)]
		if ret := t.setup(n); ret != 0 {
			t.left--
			return ret
		}
		if err := n.id.Connect(rdmacm.ConnParam{}); err != nil {
			fmt.Fprintf(t.out, "udaddy: failure connecting: %v\n", err)
			t.left--
			return -1
		}
	case rdmacm.EventConnectRequest:
		return t.onRequest(ev.ID)
	case rdmacm.EventEstablished:
		n := &t.nodes[ev.ID.Context().(int)]
		n.remoteQPN, n.remoteQKey = ev.UD.QPN, ev.UD.QKey
		ah, err := n.pd.CreateAH(ev.UD.AV)
		if err != nil {
			fmt.Fprintf(t.out, "udaddy: failure creating address handle\n")
			t.left--
			return -1
		}
		n.ah, n.connected = ah, true
		t.left--
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError,
		rdmacm.EventUnreachable, rdmacm.EventRejected:
		fmt.Fprintf(t.out, "udaddy: event: %s, error: %d\n", ev.Type, ev.Status)
		t.left--
		return ev.Status
	}
	return 0
}

// onRequest is connect_handler: the next node takes the request, gets its QP
// and receives, and answers with its QPN.
func (t *test) onRequest(id *rdmacm.ID) int {
	if t.next == len(t.nodes) {
		fmt.Fprintf(t.out, "udaddy: failing connection request\n")
		id.Reject(nil)
		id.Destroy()
		return -1
	}
	n := &t.nodes[t.next]
	t.next++
	n.id = id
	ret := t.setup(n)
	if ret == 0 {
		if err := id.Accept(rdmacm.ConnParam{QPN: n.qp.QPN()}); err != nil {
			fmt.Fprintf(t.out, "udaddy: failure accepting: %v\n", err)
			ret = -1
		}
	}
	if ret != 0 {
		t.left--
		fmt.Fprintf(t.out, "udaddy: failing connection request\n")
		id.Reject(nil)
		return ret
	}
	n.connected = true
	t.left--
	return 0
}

// setup is verify_test_params, init_node and post_recvs.
func (t *test) setup(n *node) int {
	d := n.id.Device()
	if mtu := d.QueryPort().ActiveMTU.Bytes(); t.p.Count > 0 && t.p.Size > mtu {
		fmt.Fprintf(t.out, "udaddy: message_size %d is larger than active mtu %d\n", t.p.Size, mtu)
		return -rdmacm.EINVAL
	}
	var err error
	if n.pd, err = d.AllocPD(); err != nil {
		fmt.Fprintf(t.out, "udaddy: unable to allocate PD\n")
		return -1
	}
	depth := max(t.p.Count, 1)
	if n.cq, err = d.CreateCQ(2*depth, verbs.CQOptions{}); err != nil {
		fmt.Fprintf(t.out, "udaddy: unable to create CQ\n")
		return -1
	}
	if n.qp, err = n.id.CreateQP(n.pd, verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: uint32(depth), MaxRecvWR: uint32(depth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		fmt.Fprintf(t.out, "udaddy: unable to create QP: %v\n", err)
		return -1
	}
	if t.p.Count == 0 {
		return 0
	}
	if n.buf, err = verbs.MapBuffer(t.p.Size + grhLen); err != nil {
		fmt.Fprintf(t.out, "failed message allocation\n")
		return -1
	}
	if n.mr, err = n.pd.RegMR(n.buf, 0, verbs.AccessLocalWrite); err != nil {
		fmt.Fprintf(t.out, "failed to reg MR\n")
		return -1
	}
	wr := []verbs.RecvWR{{SGL: []verbs.SGE{n.mr.SGE(0, uint32(t.p.Size+grhLen))}}}
	for range t.p.Count {
		if _, err := n.qp.PostRecv(wr); err != nil {
			fmt.Fprintf(t.out, "failed to post receives: %v\n", err)
			return -1
		}
	}
	return 0
}

// postSends is post_sends: the messages, each a SEND with our QPN as immediate
// data, signalled or not.
func (t *test) postSends(n *node, flags verbs.SendFlags) int {
	if !n.connected || t.p.Count == 0 {
		return 0
	}
	wr := []verbs.SendWR{{Opcode: verbs.WRSendWithImm, Flags: flags, ImmData: n.qp.QPN(),
		SGL: []verbs.SGE{n.mr.SGE(0, uint32(t.p.Size))}, AH: n.ah, RemoteQPN: n.remoteQPN, RemoteQKey: n.remoteQKey}}
	for range t.p.Count {
		if _, err := n.qp.PostSend(wr); err != nil {
			fmt.Fprintf(t.out, "failed to post sends: %v\n", err)
			return -1
		}
	}
	return 0
}

// pollCQs is poll_cqs: Count completions from each connected node; the first
// one of a node without an address handle makes the reply's from its GRH and
// immediate data (create_reply_ah). udaddy waits for ever; this waits until
// ctx ends.
func (t *test) pollCQs(ctx context.Context) int {
	var wc [8]verbs.WC
	for i := range t.nodes {
		n := &t.nodes[i]
		if !n.connected {
			continue
		}
		nap := time.Microsecond
		for done := 0; done < t.p.Count; {
			got := n.cq.Poll(wc[:])
			if got == 0 {
				if ctx.Err() != nil {
					fmt.Fprintf(t.out, "udaddy: failed polling CQ: %v\n", ctx.Err())
					return -1
				}
				time.Sleep(nap)
				nap = min(2*nap, time.Millisecond)
				continue
			}
			nap = time.Microsecond
			if n.ah == nil {
				av, err := n.id.Device().AVFromWC(&wc[0], n.buf[:grhLen])
				if err == nil {
					n.ah, err = n.pd.CreateAH(av)
				}
				if err != nil {
					fmt.Fprintf(t.out, "udaddy: failed to create reply AH\n")
					return -1
				}
				n.remoteQPN, n.remoteQKey = wc[0].ImmData, rdmacm.UDPQKey
			}
			done += got
		}
	}
	return 0
}

// destroy is destroy_nodes: each node's objects, its ID last.
func (t *test) destroy() {
	for i := range t.nodes {
		n := &t.nodes[i]
		if n.id == nil {
			continue
		}
		if n.ah != nil {
			n.ah.Destroy()
		}
		if n.qp != nil {
			n.id.DestroyQP()
		}
		if n.cq != nil {
			n.cq.Destroy().Wait()
		}
		if n.mr != nil {
			n.mr.Dereg().Wait()
		}
		if n.buf != nil {
			verbs.UnmapBuffer(n.buf)
		}
		if n.pd != nil {
			n.pd.Dealloc().Wait()
		}
		n.id.Destroy()
	}
}
