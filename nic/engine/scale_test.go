// Many QPs and concurrent posters: 256 RC connections, one poster goroutine each,
// under -race; every completion arrives once and every byte lands.

package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/qpattr"
)

func TestManyQPsConcurrentPosters(t *testing.T) {
	const nQP = 256
	const msgs = 24
	const size = 2000
	p := newPair(t, pairOpts{})
	pda, _ := p.a.AllocPD()
	pdb, _ := p.b.AllocPD()
	cap := qpattr.Cap{MaxSendWR: 8, MaxRecvWR: msgs, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	as := make([]*node, nQP)
	bs := make([]*node, nQP)
	for i := range nQP {
		as[i] = newNode(t, p.a, nodeOpts{pd: pda, cap: cap, bufLen: msgs * size, cqe: 64})
		bs[i] = newNode(t, p.b, nodeOpts{pd: pdb, cap: cap, bufLen: msgs * size, cqe: 64})
		connect(t, as[i], bs[i], connOpts{mtu: qpattr.MTU1024})
	}
	var wg sync.WaitGroup
	errs := make(chan string, nQP)
	for i := range nQP {
		a, b := as[i], bs[i]
		fill(a.buf, byte(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			wc := make([]cq.WC, 8)
			for m := range msgs {
				if _, err := b.qp.PostRecv([]RecvWR{{WRID: uint64(m), SGL: []SGE{b.mr.SGE(uint64(m)*size, size)}}}); err != nil {
					errs <- err.Error()
					return
				}
			}
			posted, done := 0, 0
			deadline := time.Now().Add(60 * time.Second)
			for done < msgs {
				// Keep the send queue full; a full queue is an error to retry, not to fail.
				for posted < msgs && posted-done < int(cap.MaxSendWR) {
					off := uint64(posted) * size
					op := WRSend
					if posted%2 == 1 {
						op = WRRDMAWriteWithImm
					}
					_, err := a.qp.PostSend([]SendWR{{WRID: uint64(posted), Opcode: op, Flags: SendSignaled, ImmData: uint32(posted),
						SGL: []SGE{a.mr.SGE(off, size)}, RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey()}})
					if err != nil {
						errs <- err.Error()
						return
					}
					posted++
				}
				n := a.cq.Poll(wc)
				for _, w := range wc[:n] {
					if w.Status != cq.Success || w.WRID != uint64(done) {
						errs <- name("QP %d: WC %+v, want WRID %d success", i, w, done)
						return
					}
					done++
				}
				if n == 0 {
					if time.Now().After(deadline) {
						errs <- name("QP %d: %d of %d completions", i, done, msgs)
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		return
	}
	for i := range nQP {
		got := pollN(t, bs[i].cq, msgs, 10*time.Second)
		for m, w := range got {
			op := cq.Recv
			if m%2 == 1 {
				op = cq.RecvRDMAWithImm
			}
			if w.Status != cq.Success || w.Opcode != op || w.ByteLen != size {
				t.Fatalf("QP %d receive %d: %+v", i, m, w)
			}
		}
		p.b.Sync().Wait()
		checkBytes(t, name("QP %d", i), bs[i].buf, as[i].buf)
	}
	for _, n := range append(as, bs...) {
		if err := n.qp.Destroy().Wait(); err != nil {
			t.Fatal(err)
		}
	}
}
