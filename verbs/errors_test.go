package verbs

import (
	"errors"
	"testing"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/engine"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/nic/xsk"
)

// vocabulary is verbs' sentinels: every error an application can get matches one.
var vocabulary = []error{ErrInvalid, ErrClosed, ErrBusy, ErrWrongState, ErrWrongPD, ErrBadLKey,
	ErrSGERange, ErrAccess, ErrQueueFull, ErrUnsupported, ErrLimit, ErrUnreachable, ErrExists,
	ErrNotFound, ErrOverrun, ErrDeadlock}

// TestErrorVocabularyEveryLayer: each exported sentinel of the layers under verbs
// (the ones whose errors reach an application) matches a verbs sentinel with
// errors.Is, so one vocabulary serves every layer.
func TestErrorVocabularyEveryLayer(t *testing.T) {
	layers := map[string][]error{
		"engine": {engine.ErrInvalid, engine.ErrClosed, engine.ErrBusy, engine.ErrWrongState, engine.ErrWrongPD,
			engine.ErrBadLKey, engine.ErrSGERange, engine.ErrAccess, engine.ErrQueueFull, engine.ErrUnsupported,
			engine.ErrLimit, engine.ErrUnreachable, engine.ErrDeadlock},
		"cq":     {cq.ErrInvalid, cq.ErrBusy, cq.ErrClosed, cq.ErrOverrun},
		"mr":     {mr.ErrInvalid, mr.ErrNotSupported, mr.ErrInUse, mr.ErrInvalidKey, mr.ErrBadAccess, mr.ErrBadLength, mr.ErrTooMany},
		"qpattr": {qpattr.ErrNotSupported, qpattr.ErrBadTransition, qpattr.ErrMissingAttr, qpattr.ErrBadAttr},
		"link":   {link.ErrClosed, link.ErrBadOption, link.ErrBadFrame, link.ErrUnavailable},
		"xsk":    {xsk.ErrInvalidOptions, xsk.ErrNoInterface, xsk.ErrNoQueue, xsk.ErrBusy, xsk.ErrNotSupported, xsk.ErrMemlock, xsk.ErrLinkDown, xsk.ErrClosed},
		"netdev": {netdev.ErrNoInterface, netdev.ErrInterfaceDown, netdev.ErrNoRoute, netdev.ErrLocalAddress, netdev.ErrNeighborUnresolved},
		"verbs":  vocabulary,
	}
	for layer, sentinels := range layers {
		for _, s := range sentinels {
			matched := false
			for _, v := range vocabulary {
				matched = matched || errors.Is(s, v)
			}
			if !matched {
				t.Errorf("%s: %q matches no verbs sentinel", layer, s)
			}
		}
	}
}

// TestErrorVocabularyFromCalls: errors raised by each layer through verbs calls
// match verbs' sentinels.
func TestErrorVocabularyFromCalls(t *testing.T) {
	da, _ := memDevices(t)
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	c, err := da.CreateCQ(4, CQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: c, RecvCQ: c, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	_, odpErr := pd.RegMR(make([]byte, 8), 0, mr.OnDemand)
	_, gidErr := da.QueryGID(5000)
	_, sendErr := qp.PostSend([]SendWR{{Opcode: WRSend}}) // in RESET
	modErr := qp.ModifySync(&QPAttr{Attr: QPBaseAttr{State: QPSRTS}}, AttrState)
	deallocErr := pd.Dealloc().Wait()
	qp.Destroy().Wait()
	_, postErr := qp.PostRecv([]RecvWR{{}})
	c.Destroy().Wait()
	notifyErr := c.ReqNotify(false)
	for _, tc := range []struct {
		layer string
		err   error
		want  error
	}{
		{"mr", odpErr, ErrUnsupported},
		{"verbs", gidErr, ErrInvalid},
		{"engine post", sendErr, ErrWrongState},
		{"qpattr", modErr, ErrInvalid},
		{"engine lifetime", deallocErr, ErrBusy},
		{"engine destroyed", postErr, ErrClosed},
		{"cq", notifyErr, ErrClosed},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.layer, tc.err, tc.want)
		}
	}
}
