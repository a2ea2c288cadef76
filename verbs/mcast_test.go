package verbs

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xrnic/xrnic/nic/netdev"
)

// TestMcastVerbs: ibv_attach_mcast and ibv_detach_mcast in process: a UD send
// to the group reaches the attached QP of the other device, a destroy of an
// attached QP is EBUSY (uverbs_free_qp), and the checks of ib_attach_mcast.
func TestMcastVerbs(t *testing.T) {
	da, db := memDevices(t)
	a := newEndpoint(t, da, epOpts{typ: UD})
	b := newEndpoint(t, db, epOpts{typ: UD})
	rc := newEndpoint(t, db, epOpts{})
	udUp(t, a, 3)
	udUp(t, b, 3)
	mgid := netdev.GIDFromAddr(netip.MustParseAddr("239.0.0.7"))
	if err := b.qp.AttachMcast(mgid, 0xc001); err != nil {
		t.Fatal(err)
	}
	if err := rc.qp.AttachMcast(mgid, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("attach of an RC QP: %v, want ErrInvalid", err)
	}
	if err := b.qp.AttachMcast(gidA, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("attach to a unicast GID: %v, want ErrInvalid", err)
	}
	ah, err := a.pd.CreateAH(AV{DGID: mgid})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	mustPostRecv(t, b.qp, RecvWR{WRID: 1, SGL: []SGE{b.mr.SGE(0, 256)}})
	mustPostSend(t, a.qp, SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, InlineData: []byte("mc"), AH: ah,
		RemoteQPN: 0xFFFFFF, RemoteQKey: 3})
	checkWC(t, pollN(t, a.scq, 1)[0], WC{WRID: 2, Opcode: WCSend, ByteLen: 2, QPN: a.qp.QPN()})
	checkWC(t, pollN(t, b.rcq, 1)[0], WC{WRID: 1, Opcode: WCRecv, ByteLen: 42, QPN: b.qp.QPN(), SrcQP: a.qp.QPN(), Flags: WCGRH})
	if err := b.qp.Destroy().Wait(); !errors.Is(err, ErrBusy) {
		t.Fatalf("destroy of an attached QP: %v, want ErrBusy", err)
	}
	if err := b.qp.DetachMcast(mgid, 0xc001); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.DetachMcast(mgid, 0xc001); !errors.Is(err, ErrInvalid) {
		t.Fatalf("detach again: %v, want ErrInvalid", err)
	}
}
