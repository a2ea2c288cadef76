package ndk

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xrnic/xrnic/verbs"
)

// TestUseAfterClose: every function of every object, called after the
// object's close completed, returns an error wrapping verbs.ErrClosed: no
// panic, no use of freed state, no callback (LT9, LT14).
func TestUseAfterClose(t *testing.T) {
	da, _ := memDevices(t)
	a, err := OpenAdapter(da)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := a.CreatePD(nil)
	cq, _ := a.CreateCQ(16, func(error) { t.Error("CQ notification after close") }, nil)
	qp := createQP(t, pd, cq)
	mr, _ := pd.CreateMR(false, nil)
	buf := make([]byte, 4096)
	if err := mr.Register(buf, AllowLocalWrite|AllowRemoteWrite, nil); err != nil {
		t.Fatal(err)
	}
	mw, _ := pd.CreateMW(nil)
	srq, _ := pd.CreateSRQ(8, 1, 0, nil, nil)
	conn, _ := a.CreateConnector(func() { t.Error("disconnect event after close") }, nil)
	lst, _ := a.CreateListener(func(*Connector) { t.Error("connect event after close") }, nil)
	sep, _ := a.CreateSharedEndpoint(netip.AddrPortFrom(ipA, 0), nil)
	sge := []SGE{mr.SGE(0, 64)}
	for _, c := range []struct {
		what  string
		close func(func(error)) error
	}{{"qp", qp.Close}, {"mw", mw.Close}, {"mr", mr.Close}, {"srq", srq.Close}, {"cq", cq.Close},
		{"pd", pd.Close}, {"connector", conn.Close}, {"listener", lst.Close}, {"shared endpoint", sep.Close}} {
		if err := closeWait(t, c.what, c.close); err != nil {
			t.Fatalf("%s close: %v", c.what, err)
		}
		if err := c.close(nil); !errors.Is(err, ErrClosed) {
			t.Errorf("second %s close: %v, want ErrClosed", c.what, err)
		}
	}
	never := func(error) { t.Error("a callback of a call on a closed object") }
	dst := netip.AddrPortFrom(ipB, 4600)
	calls := map[string]func() error{
		"PD.CreateMR":  func() error { _, err := pd.CreateMR(false, nil); return err },
		"PD.CreateMW":  func() error { _, err := pd.CreateMW(nil); return err },
		"PD.CreateSRQ": func() error { _, err := pd.CreateSRQ(8, 1, 0, nil, nil); return err },
		"PD.CreateQP": func() error {
			return pd.CreateQP(QPOptions{ReceiveCQ: cq, InitiatorCQ: cq, ReceiveDepth: 1, InitiatorDepth: 1},
				func(*QP, error) { t.Error("a create callback on a closed PD") })
		},
		"CQ.Arm":               func() error { return cq.Arm(NotifyAny) },
		"CQ.Resize":            func() error { return cq.Resize(32) },
		"QP.Send":              func() error { return qp.Send(1, sge, 0) },
		"QP.SendAndInvalidate": func() error { return qp.SendAndInvalidate(1, sge, 0, 1) },
		"QP.Receive":           func() error { return qp.Receive(1, sge) },
		"QP.Read":              func() error { return qp.Read(1, sge, 0, 1, 0) },
		"QP.Write":             func() error { return qp.Write(1, sge, 0, 1, 0) },
		"QP.Bind":              func() error { return qp.Bind(1, mr, mw, 0, 64, AllowRemoteWrite, 0) },
		"QP.FastRegister": func() error {
			return qp.FastRegister(1, mr, [][]byte{buf}, 0, 64, 0, AllowRemoteWrite, 0)
		},
		"QP.Invalidate":     func() error { return qp.Invalidate(1, mr, nil, 0) },
		"QP.Flush":          func() error { return qp.Flush() },
		"MR.Register":       func() error { return mr.Register(buf, AllowLocalWrite, never) },
		"MR.Deregister":     func() error { return mr.Deregister(never) },
		"SRQ.Receive":       func() error { return srq.Receive(1, sge) },
		"SRQ.Modify":        func() error { return srq.Modify(0, 1, never) },
		"Connector.Connect": func() error { return conn.Connect(qp, netip.AddrPortFrom(ipA, 0), dst, 1, 1, nil, never) },
		"Connector.ConnectWithSharedEndpoint": func() error {
			return conn.ConnectWithSharedEndpoint(qp, sep, dst, 1, 1, nil, never)
		},
		"Connector.CompleteConnect": func() error { return conn.CompleteConnect(never) },
		"Connector.Accept":          func() error { return conn.Accept(qp, 1, 1, nil, never) },
		"Connector.Reject":          func() error { return conn.Reject(nil) },
		"Connector.Disconnect":      func() error { return conn.Disconnect(never) },
		"Connector.GetConnectionData": func() error {
			_, _, _, err := conn.GetConnectionData()
			return err
		},
		"Connector.GetLocalAddress": func() error { _, err := conn.GetLocalAddress(); return err },
		"Connector.GetPeerAddress":  func() error { _, err := conn.GetPeerAddress(); return err },
		"Listener.Listen":           func() error { return lst.Listen(netip.AddrPortFrom(ipA, 4601), never) },
	}
	check := func() {
		t.Helper()
		for name, call := range calls {
			if err := call(); !errors.Is(err, verbs.ErrClosed) {
				t.Errorf("%s after close: %v, want an error wrapping verbs.ErrClosed", name, err)
			}
		}
	}
	check()
	if rs := make([]Result, 4); cq.GetResults(rs) != 0 {
		t.Error("results from a closed CQ")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// After the adapter's close too, and the adapter's own functions.
	check()
	for name, call := range map[string]func() error{
		"Adapter.QueryAdapterInfo":     func() error { _, err := a.QueryAdapterInfo(); return err },
		"Adapter.CreatePD":             func() error { _, err := a.CreatePD(nil); return err },
		"Adapter.CreateCQ":             func() error { _, err := a.CreateCQ(4, nil, nil); return err },
		"Adapter.CreateConnector":      func() error { _, err := a.CreateConnector(nil, nil); return err },
		"Adapter.CreateListener":       func() error { _, err := a.CreateListener(func(*Connector) {}, nil); return err },
		"Adapter.CreateSharedEndpoint": func() error { _, err := a.CreateSharedEndpoint(netip.AddrPortFrom(ipA, 0), nil); return err },
		"Adapter.Close":                a.Close,
	} {
		if err := call(); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("%s after the adapter's close: %v", name, err)
		}
	}
}
