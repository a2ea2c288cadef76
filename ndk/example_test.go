package ndk_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xrnic/xrnic/ndk"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
)

// Example connects two adapters (two devices wired back to back in memory)
// with a listener and a connector, sends a message, and closes everything,
// successors before antecedents, each close waited for as NDK's rules say.
func Example() {
	la, lb, _ := link.NewMemoryPair(link.MemoryOptions{})
	defer la.Close()
	defer lb.Close()
	ipA, ipB := netip.MustParseAddr("192.0.2.41"), netip.MustParseAddr("192.0.2.42")
	da, _ := verbs.Open(verbs.Options{Link: la, GIDs: []verbs.GID{verbs.GIDFromAddr(ipA)}})
	defer da.Close()
	db, _ := verbs.Open(verbs.Options{Link: lb, GIDs: []verbs.GID{verbs.GIDFromAddr(ipB)}})
	defer db.Close()

	type end struct {
		ad  *ndk.Adapter
		pd  *ndk.PD
		cq  *ndk.CQ
		qp  *ndk.QP
		mr  *ndk.MR
		buf []byte
	}
	open := func(d *verbs.Device) *end {
		e := &end{buf: make([]byte, 4096)}
		e.ad, _ = ndk.OpenAdapter(d)
		e.pd, _ = e.ad.CreatePD(nil) // synchronous: the callback is never called
		e.cq, _ = e.ad.CreateCQ(16, nil, nil)
		created := make(chan *ndk.QP, 1)
		// CreateQP completes asynchronously: ErrPending, then the callback.
		e.pd.CreateQP(ndk.QPOptions{ReceiveCQ: e.cq, InitiatorCQ: e.cq, ReceiveDepth: 4, InitiatorDepth: 4},
			func(q *ndk.QP, err error) { created <- q })
		e.qp = <-created
		e.mr, _ = e.pd.CreateMR(false, nil)
		e.mr.Register(e.buf, ndk.AllowLocalWrite, nil)
		return e
	}
	cli, srv := open(da), open(db)

	accepted := make(chan error, 1)
	var sc *ndk.Connector
	lst, _ := srv.ad.CreateListener(func(c *ndk.Connector) { // runs on the adapter's callback goroutine
		sc = c
		c.Accept(srv.qp, 1, 1, nil, func(err error) { accepted <- err })
	}, nil)
	lst.Listen(netip.AddrPortFrom(ipB, 445), nil)
	srv.qp.Receive(1, []ndk.SGE{srv.mr.SGE(0, 64)})

	cc, _ := cli.ad.CreateConnector(nil, nil)
	connected := make(chan error, 1)
	err := cc.Connect(cli.qp, netip.AddrPortFrom(ipA, 0), netip.AddrPortFrom(ipB, 445), 1, 1, nil,
		func(err error) { connected <- err })
	if errors.Is(err, ndk.ErrPending) {
		err = <-connected
	}
	if err == nil {
		err = cc.CompleteConnect(nil)
	}
	fmt.Println("connected:", err, <-accepted)

	copy(cli.buf, "hello")
	cli.qp.Send(2, []ndk.SGE{cli.mr.SGE(0, 5)}, 0)
	var rs [1]ndk.Result
	for srv.cq.GetResults(rs[:]) == 0 {
	}
	fmt.Printf("received: %q\n", srv.buf[:rs[0].BytesTransferred])

	// Close: nil is done; ErrPending means the callback will say when.
	closeWait := func(close func(func(error)) error) {
		ch := make(chan error, 1)
		if errors.Is(close(func(err error) { ch <- err }), ndk.ErrPending) {
			<-ch
		}
	}
	for _, e := range []*end{cli, srv} {
		if e == cli {
			closeWait(cc.Close)
		} else {
			closeWait(sc.Close)
			closeWait(lst.Close)
		}
		for _, c := range []func(func(error)) error{e.qp.Close, e.mr.Close, e.cq.Close, e.pd.Close} {
			closeWait(c)
		}
		fmt.Println("adapter closed:", e.ad.Close()) // blocks until every callback returned
	}
	// Output:
	// connected: <nil> <nil>
	// received: "hello"
	// adapter closed: <nil>
	// adapter closed: <nil>
}
