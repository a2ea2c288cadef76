package cm

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/mad"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/nic/wire"
)

// goldenMAD is one CM MAD of a golden capture, with its addresses.
type goldenMAD struct {
	src, dst GID
	b        []byte
	h        mad.Header
	m        mad.Message
}

func golden(t *testing.T, name string) []goldenMAD {
	t.Helper()
	var out []goldenMAD
	for i, f := range testutil.ReadPcap(t, filepath.Join(testutil.SharedDir(t), "pcaps", name)) {
		var p wire.Packet
		if err := wire.Parse(f, &p); err != nil {
			t.Fatalf("%s frame %d: %v", name, i+1, err)
		}
		if p.BTH.DestQPN() != 1 {
			continue
		}
		h, m, err := mad.Parse(p.Payload)
		if err != nil {
			t.Fatalf("%s frame %d: %v", name, i+1, err)
		}
		out = append(out, goldenMAD{src: netdev.GIDFromAddr(p.IPv4.Src()), dst: netdev.GIDFromAddr(p.IPv4.Dst()),
			b: append([]byte(nil), p.Payload...), h: h, m: m})
	}
	return out
}

// rewrite returns g's MAD with its Remote Comm ID (at byte 4 of the CM data)
// set to id: the capture's peer named rxe's comm ID, the replay names ours.
func (g goldenMAD) rewrite(id uint32) []byte {
	b := append([]byte(nil), g.b...)
	binary.BigEndian.PutUint32(b[mad.HeaderLen+4:], id)
	return b
}

// TestGoldenHostPeerREQ: the Linux host's REQ that went unanswered in
// host_peer_cm_req.pcap now gets a REP that Linux's cm_rep_handler takes (its
// Remote Comm ID and TID are the REQ's, the rest shaped as rxe's REP in
// rdma_cm_rping.pcap); the REQ's retry, 6.4 s later, draws nothing (REP_SENT
// keeps retransmitting on its own timer); the host's REJ (timeout), which names
// us only through its ARI, ends the connection.
func TestGoldenHostPeerREQ(t *testing.T) {
	mads := golden(t, "host_peer_cm_req.pcap")
	if len(mads) != 3 || mads[0].h.AttrID != mad.AttrREQ || mads[2].h.AttrID != mad.AttrREJ {
		t.Fatalf("capture: %d MADs", len(mads))
	}
	rxeREP := golden(t, "rdma_cm_rping.pcap")[1].m.(*mad.REP)
	req := mads[0].m.(*mad.REQ)
	f := newFabric(t)
	c := f.newCM(mads[0].dst, 0x505400fffec00202, nil)
	r := newRecorder(t)
	l, _ := c.NewID(r.handle)
	if err := l.Listen(req.ServiceID); err != nil {
		t.Fatal(err)
	}
	c.Receive(mads[0].src, mads[0].dst, mads[0].b)
	ev := r.expect(EventREQReceived)
	if ev.Src != mads[0].src || ev.Dst != mads[0].dst {
		t.Fatalf("REQ from %v to %v", ev.Src, ev.Dst)
	}
	if err := ev.ID.SendREP(&mad.REP{LocalQPN: 0x11, StartingPSN: 0xabcdef, ResponderResources: 1,
		InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	fr := f.frames()
	if len(fr) != 1 || fr[0].attr != mad.AttrREP || fr[0].dst != mads[0].src || fr[0].src != mads[0].dst {
		t.Fatalf("sent %+v", fr)
	}
	rep := fr[0].msg.(*mad.REP)
	if fr[0].tid != mads[0].h.TID || rep.RemoteCommID != req.LocalCommID || rep.LocalCommID == 0 ||
		rep.LocalCAGUID != 0x505400fffec00202 {
		t.Fatalf("REP TID %#x (REQ %#x), %+v", fr[0].tid, mads[0].h.TID, rep)
	}
	shape := func(m mad.REP) mad.REP {
		m.LocalCommID, m.RemoteCommID, m.LocalQPN, m.StartingPSN, m.LocalCAGUID = 0, 0, 0, 0, 0
		m.PrivateData = [mad.REPPrivateLen]byte{}
		return m
	}
	if shape(*rep) != shape(*rxeREP) {
		t.Fatalf("REP\n%+v\nrxe's\n%+v", shape(*rep), shape(*rxeREP))
	}
	c.Receive(mads[1].src, mads[1].dst, mads[1].b) // the retry
	wantSent(t, f)
	r.none(c)
	c.Receive(mads[2].src, mads[2].dst, mads[2].b)
	if rej := r.expect(EventREJReceived).Msg.(*mad.REJ); rej.Reason != RejTimeout {
		t.Fatalf("REJ reason %d", rej.Reason)
	}
	wantState(t, ev.ID, StateIdle)
}

// TestGoldenReplayPassive plays the active side of rdma_cm_rping.pcap (the
// REQ, RTU and DREQ rping's client sent) into our CM: it answers REP and DREP
// as rxe did and reaches Established and TimeWait.
func TestGoldenReplayPassive(t *testing.T) {
	mads := golden(t, "rdma_cm_rping.pcap")
	want := []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP}
	for i, m := range mads {
		if m.h.AttrID != want[i] {
			t.Fatalf("MAD %d is %v", i, m.h.AttrID)
		}
	}
	req := mads[0].m.(*mad.REQ)
	f := newFabric(t)
	c := f.newCM(mads[0].dst, 0x505400fffec0020c, nil)
	r := newRecorder(t)
	l, _ := c.NewID(r.handle)
	l.Listen(req.ServiceID)
	c.Receive(mads[0].src, mads[0].dst, mads[0].b)
	id := r.expect(EventREQReceived).ID
	rxeREP := mads[1].m.(*mad.REP)
	if err := id.SendREP(rxeREP); err != nil {
		t.Fatal(err)
	}
	c.Receive(mads[2].src, mads[2].dst, mads[2].rewrite(id.LocalCommID()))
	r.expect(EventRTUReceived)
	wantState(t, id, StateEstablished)
	c.Receive(mads[3].src, mads[3].dst, mads[3].rewrite(id.LocalCommID()))
	r.expect(EventDREQReceived)
	id.SendDREP(nil)
	fr := f.frames()
	if len(fr) != 2 || fr[0].attr != mad.AttrREP || fr[1].attr != mad.AttrDREP {
		t.Fatalf("sent %+v", fr)
	}
	// Each answer is rxe's but for our comm ID.
	for i, g := range []goldenMAD{mads[1], mads[4]} {
		ours := append([]byte(nil), fr[i].b...)
		binary.BigEndian.PutUint32(ours[mad.HeaderLen:], binary.BigEndian.Uint32(g.b[mad.HeaderLen:]))
		if string(ours) != string(g.b) {
			t.Errorf("%v differs from rxe's:\n%x\n%x", fr[i].attr, ours, g.b)
		}
	}
	wantState(t, id, StateTimeWait)
}

// TestGoldenReplayActive plays the passive side of rdma_cm_rping.pcap (rxe's
// REP and DREP) against our REQ and DREQ.
func TestGoldenReplayActive(t *testing.T) {
	mads := golden(t, "rdma_cm_rping.pcap")
	f := newFabric(t)
	c := f.newCM(mads[0].src, 0x505400fffec0020b, nil)
	r := newRecorder(t)
	id, _ := c.NewID(r.handle)
	req := *mads[0].m.(*mad.REQ)
	if err := id.SendREQ(&req, REQParam{Src: mads[0].src, Dst: mads[0].dst}); err != nil {
		t.Fatal(err)
	}
	c.Receive(mads[1].src, mads[1].dst, mads[1].rewrite(id.LocalCommID()))
	r.expect(EventREPReceived)
	id.SendRTU(nil)
	id.SendDREQ(nil)
	c.Receive(mads[4].src, mads[4].dst, mads[4].rewrite(id.LocalCommID()))
	r.expect(EventDREPReceived)
	fr := f.frames()
	if len(fr) != 3 {
		t.Fatalf("sent %d MADs", len(fr))
	}
	// Our REQ, RTU and DREQ are rping's but for our comm ID and TID.
	for i, g := range []goldenMAD{mads[0], mads[2], mads[3]} {
		ours := append([]byte(nil), fr[i].b...)
		copy(ours[8:16], g.b[8:16])
		binary.BigEndian.PutUint32(ours[mad.HeaderLen:], binary.BigEndian.Uint32(g.b[mad.HeaderLen:]))
		if string(ours) != string(g.b) {
			t.Errorf("%v differs from Linux's:\n%x\n%x", fr[i].attr, ours, g.b)
		}
	}
}
