package verbs

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/mad"
)

// A Get on QP1 that no agent takes (here the CM's ClassPortInfo, which ib_cm
// does not serve) is answered GetResp "unsupported method/attribute", as
// Linux's ib_mad answers for rxe (generate_unmatched_resp): the asker hears
// no rather than waiting out its timeout. B's CM counts the answer it gets
// (a GetResp is no CM message); A's CM never sees the Get. Before, A's CM
// counted the Get and nothing answered.
func TestGSIAnswersUnmatchedGet(t *testing.T) {
	a, b := memDevicesWrapped(t, nil)
	for _, d := range []*Device{a, b} {
		if _, err := d.CM(cm.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	var get [mad.Size]byte
	h := mad.Header{BaseVersion: mad.BaseVersion, MgmtClass: mad.ClassCM, ClassVersion: mad.CMClassVersion,
		Method: mad.MethodGet, TID: 42, AttrID: 0x0001}
	h.Encode(get[:])
	b.gsiMu.Lock()
	g := b.gsi
	b.gsiMu.Unlock()
	if err := g.SendMAD(gidB, gidA, get[:]); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(deadline); ; time.Sleep(time.Millisecond) {
		cb, _ := b.CMCounters()
		if cb[cm.CntUnknownAttr] == 1 {
			break
		}
		if time.Now().After(end) {
			ca, _ := a.CMCounters()
			t.Fatalf("no answer came back to B (A's CM counted %d unknown attributes)", ca[cm.CntUnknownAttr])
		}
	}
	if ca, _ := a.CMCounters(); ca[cm.CntUnknownAttr] != 0 || ca[cm.CntReceived] != 0 {
		t.Fatalf("A's CM saw the Get: %v", ca)
	}
}
