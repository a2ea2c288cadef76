package engine

import (
	"errors"
	"testing"

	"github.com/xrnic/xrnic/nic/mr"
	"github.com/xrnic/xrnic/nic/qpattr"
)

// TestResources: the snapshot lists the QPs with their transport state and
// rings, the CQs they use under stable numbers, and counts the rest.
func TestResources(t *testing.T) {
	p, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{psnA: 0x100, psnB: 0x200})
	recv(t, b, 1, 0, 64)
	recv(t, b, 2, 0, 64)
	send(t, a, SendWR{WRID: 9, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}})
	pollOne(t, a.cq)
	pollOne(t, b.cq)

	r, err := p.b.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.QPs) != 1 || len(r.CQs) != 1 || r.PDs != 1 || len(r.MRs) != 1 || r.SRQs != 0 || r.AHs != 0 {
		t.Fatalf("B's resources: %+v", r)
	}
	wantMR := MRInfo{LKey: b.mr.LKey(), RKey: b.mr.RKey(), Addr: 0x10000, Len: len(b.buf),
		Access: mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic, PD: b.pd.Handle(), Valid: true}
	if r.MRs[0] != wantMR || r.MRs[0].MRN() != b.mr.LKey()>>8 {
		t.Errorf("B's MR:\n got %+v\nwant %+v", r.MRs[0], wantMR)
	}
	q := r.QPs[0]
	want := QPInfo{QPN: b.qp.QPN(), Type: qpattr.RC, State: qpattr.RTS, DestQPN: a.qp.QPN(), SQPSN: 0x200, RQPSN: 0x101,
		PathMTU: 1024, PD: b.pd.Handle(), SendCQ: q.SendCQ, RecvCQ: q.SendCQ, DGID: a.gid(),
		SQOutstanding: 0, SQCap: 128, RQPosted: 1, RQCap: 128}
	if q != want {
		t.Errorf("B's QP:\n got %+v\nwant %+v", q, want)
	}
	c := r.CQs[0]
	if c.CQN != q.SendCQ || c.CQN == 0 || c.Users != 1 || c.CQE != b.cq.Cqe() || c.Queued != 0 ||
		c.Stats.Completions != 1 || c.Stats.Polled != 1 {
		t.Errorf("B's CQ: %+v", c)
	}
	ra, err := p.a.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if len(ra.CQs) != 1 || ra.CQs[0].CQN != ra.QPs[0].SendCQ || ra.QPs[0].SQPSN != 0x101 {
		t.Errorf("A's resources: %+v", ra)
	}
	if again, _ := p.b.Resources(); again.CQs[0].CQN != c.CQN {
		t.Errorf("CQ number changed from %d to %d", c.CQN, again.CQs[0].CQN)
	}

	b.qp.Destroy().Wait()
	if r, _ := p.b.Resources(); len(r.QPs) != 0 || len(r.CQs) != 1 || r.CQs[0].Users != 0 || len(r.MRs) != 1 {
		t.Errorf("after destroying the QP (the CQ stays, unused): %+v", r)
	}
	if err := b.cq.Destroy().Wait(); err != nil {
		t.Fatal(err)
	}
	if r, _ := p.b.Resources(); len(r.CQs) != 0 {
		t.Errorf("after destroying the CQ: %+v", r.CQs)
	}
	f, err := b.pd.AllocFastRegMR(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.mr.Dereg().Wait(); err != nil {
		t.Fatal(err)
	}
	if r, _ := p.b.Resources(); len(r.MRs) != 1 || r.MRs[0].LKey != f.LKey() || !r.MRs[0].FastReg || r.MRs[0].Valid || r.MRs[0].Len != 0 {
		t.Errorf("after deregistering the MR and allocating a fast-reg one: %+v", r.MRs)
	}
	p.b.Close()
	if _, err := p.b.Resources(); !errors.Is(err, ErrClosed) {
		t.Errorf("Resources of a closed device: %v", err)
	}
}
