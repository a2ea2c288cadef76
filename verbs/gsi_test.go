package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/nic/wire"
)

// A Get on QP1 that no agent takes (here the CM's ClassPortInfo, which ib_cm
// does not serve) is answered GetResp "unsupported method/attribute", as
// Linux's ib_mad answers for rxe (generate_unmatched_resp): the asker hears
// no rather than waiting out its timeout. B's CM counts the answer it gets
// (a GetResp is no CM message); A's CM never sees the Get; what A sends is
// the Get's header, TID included, as a GetResp with that status, to QP1.
// Before, A's CM counted the Get and nothing answered.
func TestGSIAnswersUnmatchedGet(t *testing.T) {
	tap := &madTap{}
	a, b := memDevicesWrapped(t, func(l link.Link) link.Link { tap.Link = l; return tap })
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
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if len(tap.sent) != 1 {
		t.Fatalf("A sent %d MADs on QP1, want 1", len(tap.sent))
	}
	got := tap.sent[0]
	want := h
	want.Method, want.Status = mad.MethodGetResp, mad.StatusUnsupportedMethodAttr
	if got.h != want || got.destQP != 1 {
		t.Fatalf("A answered %+v to QP %d, want %+v to QP 1", got.h, got.destQP, want)
	}
}

// madTap is a link that records the headers of the MADs sent through it to a
// QP1 (the destination QP, from the BTH).
type madTap struct {
	link.Link
	mu   sync.Mutex
	sent []struct {
		h      mad.Header
		destQP uint32
	}
}

func (m *madTap) WriteBatch(frames [][]byte) (int, error) {
	for _, f := range frames {
		var p wire.Packet
		if wire.Parse(f, &p) != nil || p.DETH == nil || p.DETH.SrcQPN() != 1 {
			continue
		}
		if h, err := mad.ParseHeader(p.Payload); err == nil {
			m.mu.Lock()
			m.sent = append(m.sent, struct {
				h      mad.Header
				destQP uint32
			}{h, p.BTH.DestQPN()})
			m.mu.Unlock()
		}
	}
	return m.Link.WriteBatch(frames)
}
