package rping

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"

	"github.com/xrnic/xrnic/ndk"
	"github.com/xrnic/xrnic/verbs"
)

// runNDK is rping over the ndk layer (--ndk): the same protocol, buffers,
// data and output, through NDKPI's objects instead of verbs and rdma_cm. A
// Listener or Connector makes the connection (rdma_cm's REQ/REP/RTU on the
// wire, so a real rping faces it), the ping loop runs on one QP whose CQ
// notification wakes it, and everything is closed successors first, each
// close waited for, as NDK's rules ask.
func runNDK(ctx context.Context, p *Params, dev *verbs.Device, src, dst netip.AddrPort, out, errw io.Writer) error {
	a, err := ndk.OpenAdapter(dev)
	if err != nil {
		return err
	}
	defer a.Close()
	n := &nping{cb: cb{p: p, out: out, errw: errw, server: p.Server}, a: a, notified: make(chan error, 1)}
	defer n.closeAll()
	if err := n.setup(ctx); err != nil {
		n.printf(errw, "setup failed: %v\n", err)
		return err
	}
	if p.Server {
		err = n.serve(ctx, dst)
	} else {
		err = n.connect(ctx, src, dst)
	}
	return err
}

// nping is the ndk control block: rping's, with NDK objects.
type nping struct {
	cb
	a        *ndk.Adapter
	pd       *ndk.PD
	cq       *ndk.CQ
	qp       *ndk.QP
	mr       *ndk.MR
	lst      *ndk.Listener
	conn     *ndk.Connector
	notified chan error // the CQ's notification callback
	peerGone chan struct{}
	closers  []func(func(error)) error // in creation order
}

// await waits for an ndk completion callback's result.
func await[T any](ctx context.Context, ch <-chan T) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// pending turns a call's return into its result: ErrPending waits for the
// completion callback's.
func pending(ctx context.Context, err error, ch <-chan error) error {
	if !errors.Is(err, ndk.ErrPending) {
		return err
	}
	err, cerr := await(ctx, ch)
	if cerr != nil {
		return cerr
	}
	return err
}

func errCh() (func(error), chan error) {
	ch := make(chan error, 1)
	return func(err error) { ch <- err }, ch
}

// setup creates the PD, CQ, QP and registered buffer (rping_setup_qp and
// rping_setup_buffers) and posts the first receive.
func (n *nping) setup(ctx context.Context) error {
	var err error
	if n.pd, err = n.a.CreatePD(nil); err != nil {
		return err
	}
	n.closers = append(n.closers, n.pd.Close)
	notify := func(err error) {
		select {
		case n.notified <- err:
		default:
		}
	}
	if n.cq, err = n.a.CreateCQ(sqDepth*2, notify, nil); err != nil {
		return err
	}
	n.closers = append(n.closers, n.cq.Close)
	created := make(chan *ndk.QP, 1)
	cerr := make(chan error, 1)
	err = n.pd.CreateQP(ndk.QPOptions{ReceiveCQ: n.cq, InitiatorCQ: n.cq, ReceiveDepth: 2, InitiatorDepth: sqDepth},
		func(q *ndk.QP, err error) { created <- q; cerr <- err })
	if err = pending(ctx, err, cerr); err != nil {
		return err
	}
	n.qp = <-created
	n.closers = append(n.closers, n.qp.Close)
	n.debugf("created qp %d\n", n.qp.QPN())
	size := n.p.Size
	if n.buf, err = verbs.MapBuffer(offRDMA + 2*size); err != nil {
		return err
	}
	if n.mr, err = n.pd.CreateMR(false, nil); err != nil {
		return err
	}
	n.closers = append(n.closers, n.mr.Close)
	if err = n.mr.Register(n.buf, ndk.AllowLocalWrite|ndk.AllowRemoteRead|ndk.AllowRemoteWrite, nil); err != nil {
		return err
	}
	n.rdmaBuf = n.buf[offRDMA : offRDMA+size]
	n.start = n.buf[offRDMA+size : offRDMA+2*size]
	n.debugf("allocated & registered buffers...\n")
	return n.postRecv()
}

// closeAll closes what was made, successors first, each close waited for.
func (n *nping) closeAll() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		if err := ndk.Await(n.closers[i]); err != nil {
			n.printf(n.errw, "close: %v\n", err)
		}
	}
	if n.buf != nil {
		verbs.UnmapBuffer(n.buf)
	}
}

func (n *nping) postRecv() error {
	return n.qp.Receive(0, []ndk.SGE{n.mr.SGE(offRecv, infoLen)})
}

// sendInfo advertises off of the buffer (off < 0: the "go ahead" as it stands).
func (n *nping) sendInfo(off int) error {
	if off >= 0 {
		b := n.buf[offSend : offSend+infoLen]
		addr := n.mr.Addr() + uint64(off)
		binary.BigEndian.PutUint64(b[0:], addr)
		binary.BigEndian.PutUint32(b[8:], n.mr.RemoteToken())
		binary.BigEndian.PutUint32(b[12:], uint32(n.p.Size))
		n.debugf("RDMA addr %x rkey %x len %d\n", addr, n.mr.RemoteToken(), n.p.Size)
	}
	return n.qp.Send(0, []ndk.SGE{n.mr.SGE(offSend, infoLen)}, 0)
}

// errFlushed: a request completed flushed, the connection is gone.
var errFlushed = errors.New("rping: flushed")

// next waits for the next completion of type want. Send completions on the way
// are checked and passed over; a receive is checked, reposted and, on the
// server, read as the peer's buffer.
func (n *nping) next(ctx context.Context, want ndk.ResultType) error {
	var rs [1]ndk.Result
	for {
		if n.cq.GetResults(rs[:]) == 0 {
			if err := n.cq.Arm(ndk.NotifyAny); err != nil {
				return err
			}
			if n.cq.GetResults(rs[:]) == 0 {
				select {
				case err := <-n.notified:
					if err != nil {
						n.printf(n.errw, "cq notification: %v\n", err)
						return err
					}
				case <-ctx.Done():
					return ctx.Err()
				}
				continue
			}
		}
		r := &rs[0]
		if err := r.Err(); err != nil {
			if errors.Is(err, ndk.ErrCanceled) {
				return errFlushed
			}
			n.printf(n.errw, "cq completion failed status %d\n", int(r.Status))
			return err
		}
		switch r.Type {
		case ndk.OpSend:
			n.debugf("send completion\n")
			if want != ndk.OpSend {
				continue
			}
		case ndk.OpReceive:
			n.debugf("recv completion\n")
			if r.BytesTransferred != infoLen {
				n.printf(n.errw, "Received bogus data, size %d\n", r.BytesTransferred)
				return errors.New("rping: bogus data")
			}
			if n.server {
				b := n.buf[offRecv : offRecv+infoLen]
				n.remote.addr = binary.BigEndian.Uint64(b[0:])
				n.remote.rkey = uint64(binary.BigEndian.Uint32(b[8:]))
				n.remote.len = uint64(binary.BigEndian.Uint32(b[12:]))
				n.debugf("Received rkey %x addr %x len %d from peer\n", n.remote.rkey, n.remote.addr, n.remote.len)
			}
			if err := n.postRecv(); err != nil {
				n.printf(n.errw, "post recv error: %v\n", err)
				return err
			}
		case ndk.OpRead:
			n.debugf("rdma read completion\n")
		case ndk.OpWrite:
			n.debugf("rdma write completion\n")
		}
		if r.Type != want {
			n.printf(n.errw, "completion of type %d while waiting for %d\n", r.Type, want)
			return errOutOfStep
		}
		return nil
	}
}

// connect is the client: Connect, CompleteConnect, the ping loop, Disconnect.
func (n *nping) connect(ctx context.Context, src, dst netip.AddrPort) error {
	var err error
	n.peerGone = make(chan struct{})
	if n.conn, err = n.a.CreateConnector(n.onPeerGone, nil); err != nil {
		return err
	}
	n.closers = append(n.closers, n.conn.Close)
	done, ch := errCh()
	err = n.conn.Connect(n.qp, src, dst, 1, 1, nil, done)
	if err = pending(ctx, err, ch); err != nil {
		n.printf(n.errw, "connect error: %v\n", err)
		return err
	}
	if err = n.conn.CompleteConnect(nil); err != nil {
		n.printf(n.errw, "complete connect error: %v\n", err)
		return err
	}
	n.debugf("NdkConnect and NdkCompleteConnect successful\n")
	start := 65
	for ping := 0; n.p.Count == 0 || ping < n.p.Count; ping++ {
		fillStart(n.start, ping, start)
		if start++; start > 122 {
			start = 65
		}
		if err = n.sendInfo(offRDMA + n.p.Size); err == nil {
			err = n.next(ctx, ndk.OpReceive) // the server READ our source: its go ahead
		}
		if err == nil {
			err = n.sendInfo(offRDMA)
		}
		if err == nil {
			err = n.next(ctx, ndk.OpReceive) // the server WROTE our sink
		}
		if err != nil {
			break
		}
		if n.p.Validate && string(n.start) != string(n.rdmaBuf) {
			n.printf(n.errw, "data mismatch!\n")
			err = errors.New("rping: data mismatch")
			break
		}
		if n.p.Verbose > 0 {
			n.printf(n.out, "ping data: %s\n", cstr(n.rdmaBuf))
		}
	}
	if err != nil {
		n.printf(n.errw, "rping client failed: %v\n", err)
	}
	done, ch = errCh()
	if derr := pending(ctx, n.conn.Disconnect(done), ch); derr != nil && err == nil {
		err = derr
	}
	return err
}

func (n *nping) onPeerGone() {
	side := "client"
	if n.server {
		side = "server"
	}
	n.printf(n.errw, "%s DISCONNECT EVENT...\n", side)
	close(n.peerGone)
}

// serve is the server: Listen, the first connection request, Accept, the ping
// loop until the client disconnects.
func (n *nping) serve(ctx context.Context, ap netip.AddrPort) error {
	reqs := make(chan *ndk.Connector, 1)
	var err error
	n.lst, err = n.a.CreateListener(func(c *ndk.Connector) {
		select {
		case reqs <- c:
		default:
			c.Reject(nil) // one client, as rping without -P
			c.Close(nil)
		}
	}, nil)
	if err != nil {
		return err
	}
	n.closers = append(n.closers, n.lst.Close)
	if err = n.lst.Listen(ap, nil); err != nil {
		n.printf(n.errw, "NdkListen: %v\n", err)
		return err
	}
	n.debugf("NdkListen\n")
	if n.conn, err = await(ctx, reqs); err != nil {
		return err
	}
	n.closers = append(n.closers, n.conn.Close)
	n.peerGone = make(chan struct{})
	n.conn.SetDisconnectEvent(n.onPeerGone)
	n.debugf("accepting client connection request\n")
	done, ch := errCh()
	if err = pending(ctx, n.conn.Accept(n.qp, 1, 1, nil, done), ch); err != nil {
		n.printf(n.errw, "NdkAccept: %v\n", err)
		return err
	}
	for {
		if err = n.next(ctx, ndk.OpReceive); err != nil {
			break
		}
		n.debugf("server received source adv\n")
		if err = n.qp.Read(0, []ndk.SGE{n.mr.SGE(offRDMA, uint32(n.remote.len))}, n.remote.addr, uint32(n.remote.rkey), 0); err != nil {
			break
		}
		if err = n.next(ctx, ndk.OpRead); err != nil {
			break
		}
		if n.p.Verbose > 0 {
			n.printf(n.out, "server ping data: %s\n", cstr(n.rdmaBuf))
		}
		if err = n.sendInfo(-1); err != nil {
			break
		}
		if err = n.next(ctx, ndk.OpReceive); err != nil {
			break
		}
		n.debugf("server received sink adv\n")
		l := uint32(len(cstr(n.rdmaBuf)) + 1)
		if err = n.qp.Write(0, []ndk.SGE{n.mr.SGE(offRDMA, l)}, n.remote.addr, uint32(n.remote.rkey), 0); err != nil {
			break
		}
		if err = n.next(ctx, ndk.OpWrite); err != nil {
			break
		}
		if err = n.sendInfo(-1); err != nil {
			break
		}
	}
	if errors.Is(err, errFlushed) {
		// The client disconnected: its DREQ flushed our receive. Answer it.
		select {
		case <-n.peerGone:
		case <-ctx.Done():
			return ctx.Err()
		}
		return n.conn.Disconnect(nil)
	}
	n.printf(n.errw, "rping server failed: %v\n", err)
	done, ch = errCh()
	pending(ctx, n.conn.Disconnect(done), ch)
	return err
}
