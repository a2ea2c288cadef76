package engine

import (
	"sync/atomic"
	"testing"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
)

// lendingLink lends a memory link's frames, as an AF_XDP link lends its UMEM
// (link.Lender), from copies link.Lending makes, and poisons them at Reclaim.
type lendingLink struct {
	link.Link
	t     testing.TB
	rx    link.Lender
	lent  [][]byte // the engine's goroutine's, or its driver's
	lends atomic.Int64
}

func newLendingLink(t testing.TB, l link.Link) *lendingLink {
	return &lendingLink{Link: l, t: t, rx: link.Lending(l, DefaultBatch, l.Info().MTU+maxEthernetLen)}
}

func (l *lendingLink) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.t.Error("the engine copied frames from a link that lends them")
	return l.Link.ReadBatch(bufs, sizes)
}

func (l *lendingLink) Lend(frames [][]byte) (int, error) {
	if l.lent != nil {
		l.t.Error("Lend before the last Lend's Reclaim")
	}
	n, err := l.rx.Lend(frames)
	if n > 0 {
		l.lent = frames[:n]
	}
	l.lends.Add(int64(n))
	return n, err
}

func (l *lendingLink) Reclaim() {
	if l.lent == nil {
		l.t.Error("Reclaim without frames lent")
	}
	for _, f := range l.lent {
		for i := range f {
			f[i] = 0xee
		}
	}
	l.lent = nil
	l.rx.Reclaim()
}

// TestEngineReadsLentFrames: over a link that lends its frames, the engine
// takes them by Lend, never by ReadBatch, gives each batch back by Reclaim,
// and has used what it needs of them by then (the link poisons them at
// Reclaim): WRITE, SEND and READ data arrive intact, in both directions.
func TestEngineReadsLentFrames(t *testing.T) {
	var lender *lendingLink
	wrap := func(l link.Link) link.Link { lender = newLendingLink(t, l); return lender }
	_, a, b := rcPair(t, pairOpts{wrapA: wrap}, nodeOpts{}, connOpts{mtu: qpattr.MTU4096})
	const size = 65536
	fill(b.buf[:size], 9)
	send(t, b, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{b.mr.SGE(0, size)},
		RemoteAddr: a.mr.Addr() + 4096, RKey: a.mr.RKey()})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 1, Status: cq.Success, Opcode: cq.RDMAWrite, ByteLen: size, QPN: b.qp.QPN()})
	checkBytes(t, "written to A", a.buf[4096:4096+size], b.buf[:size])

	recv(t, a, 2, 128<<10, size)
	send(t, b, SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{b.mr.SGE(0, size)}})
	checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 3, Status: cq.Success, Opcode: cq.Send, ByteLen: size, QPN: b.qp.QPN()})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 2, Status: cq.Success, Opcode: cq.Recv, ByteLen: size, QPN: a.qp.QPN()})
	checkBytes(t, "sent to A", a.buf[128<<10:128<<10+size], b.buf[:size])

	fill(b.buf[256<<10:256<<10+size], 11)
	send(t, a, SendWR{WRID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(512<<10, size)},
		RemoteAddr: b.mr.Addr() + 256<<10, RKey: b.mr.RKey()})
	checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 4, Status: cq.Success, Opcode: cq.RDMARead, ByteLen: size, QPN: a.qp.QPN()})
	checkBytes(t, "read by A", a.buf[512<<10:512<<10+size], b.buf[256<<10:256<<10+size])
	if n := lender.lends.Load(); n < 3*size/4096 {
		t.Errorf("%d frames lent, want at least the %d of the three messages", n, 3*size/4096)
	}
}
