package cm

import (
	"testing"

	"github.com/xrnic/xrnic/nic/mad"
)

// FuzzReceive feeds arbitrary MADs to a CM with connections in several states:
// nothing panics, and the IDs stay bounded.
func FuzzReceive(f *testing.F) {
	var buf [mad.Size]byte
	for _, m := range []mad.Message{testREQ(svc), &mad.REP{}, &mad.RTU{}, &mad.DREQ{}, &mad.DREP{},
		&mad.MRA{}, &mad.REJ{}, &mad.SIDRREQ{ServiceID: svc}, &mad.SIDRREP{}} {
		mad.Marshal(buf[:], 1, m)
		f.Add(buf[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := newPair(t, func(c *Config) { c.MaxIDs = 8 })
		p.connect(t)
		id2, _ := p.a.NewID(p.ra.handle)
		id2.SendREQ(testREQ(svc), REQParam{Src: gidA, Dst: gidB})
		p.a.Receive(gidB, gidA, b)
		p.b.Receive(gidA, gidB, b)
		p.f.deliver()
		p.f.advance(IBTime(31))
		if p.a.NumIDs() > 8 || p.b.NumIDs() > 8 {
			t.Fatal("IDs unbounded")
		}
	})
}
