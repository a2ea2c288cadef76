package conv

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// Every field the protocol carries comes back as it went: a field one
// direction forgot would come back zero.
func TestRoundTrips(t *testing.T) {
	a := verbs.QPAttr{AV: verbs.AV{DGID: verbs.GID{1, 2, 3}, SGIDIndex: 4, FlowLabel: 5, HopLimit: 6, TrafficClass: 7, Port: 1}}
	a.State, a.CurState, a.PathMTU, a.PathMigState = verbs.QPSRTS, verbs.QPSRTR, 5, 1
	a.QKey, a.RQPSN, a.SQPSN, a.DestQPN, a.AccessFlags = 8, 9, 10, 11, 12
	a.PKeyIndex, a.Port, a.Timeout, a.RetryCnt, a.RNRRetry = 13, 1, 14, 7, 6
	a.MinRNRTimer, a.MaxRdAtomic, a.MaxDestRdAtomic, a.SQDrainNotify = 15, 16, 17, true
	a.Cap = verbs.QPCap{MaxSendWR: 18, MaxRecvWR: 19, MaxSendSGE: 20, MaxRecvSGE: 21, MaxInlineData: 22}
	w := WireQPAttr(&a)
	if got := VerbsQPAttr(&w); !reflect.DeepEqual(got, a) {
		t.Errorf("QP attributes: %+v, want %+v", got, a)
	}
	d := verbs.DeviceAttr{MaxMRSize: 1, PageSizeCap: 2, MaxQP: 3, MaxQPWR: 4, MaxSGE: 5, MaxSGERd: 5, MaxCQ: 6, MaxCQE: 7,
		MaxMR: 8, MaxPD: 9, MaxQPRdAtom: 10, MaxQPInitRdAtom: 11, MaxSRQ: 12, MaxSRQWR: 13, MaxSRQSGE: 14, MaxAH: 15,
		MaxInlineData: 16, PhysPortCnt: 1, AtomicCap: 1}
	if wd := WireDevice(d, 99); VerbsDevice(wd) != d || wd.NodeGUID != 99 {
		t.Errorf("device: %+v, want %+v", VerbsDevice(wd), d)
	}
	p := verbs.PortAttr{State: verbs.PortActive, MaxMTU: 5, ActiveMTU: 3, GIDTblLen: 4, PKeyTblLen: 1, MaxMsgSize: 1 << 31,
		LinkLayer: "Ethernet", PortCapRoCE: true, ActiveWidth: 16, ActiveSpeed: 32}
	if got := VerbsPort(WirePort(p)); got.State != p.State || got.MaxMTU != p.MaxMTU || got.ActiveMTU != p.ActiveMTU ||
		got.GIDTblLen != p.GIDTblLen || got.MaxMsgSize != p.MaxMsgSize || got.ActiveWidth != p.ActiveWidth ||
		got.ActiveSpeed != p.ActiveSpeed {
		t.Errorf("port: %+v, want %+v", got, p)
	}
	c := rdmacm.ConnParam{PrivateData: []byte("hi"), ResponderResources: 1, InitiatorDepth: 2, FlowControl: true,
		RetryCount: 3, RNRRetryCount: 4, SRQ: true, QPN: 5}
	wc, err := WireConnParam(c)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := VerbsConnParam(&wc)
	if !ok || !bytes.Equal(got.PrivateData, c.PrivateData) {
		t.Fatalf("private data %q %v", got.PrivateData, ok)
	}
	got.PrivateData, c.PrivateData = nil, nil
	if !reflect.DeepEqual(got, c) {
		t.Errorf("conn param: %+v, want %+v", got, c)
	}
	if _, err := WireConnParam(rdmacm.ConnParam{PrivateData: make([]byte, 197)}); !errors.Is(err, rdmacm.ErrPrivate) {
		t.Errorf("197 bytes of private data: %v", err)
	}
	wc.PrivLen = 500
	if p, ok := VerbsConnParam(&wc); ok || len(p.PrivateData) != len(wc.Private) {
		t.Errorf("a length past the field: %v, %d bytes", ok, len(p.PrivateData))
	}
}
