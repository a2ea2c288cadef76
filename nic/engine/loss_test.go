// Loss, duplication and reordering on the wire: go-back-N, duplicate requests,
// and the data still arrives byte for byte.

package engine

import (
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
)

func TestRCLossyLink(t *testing.T) {
	faults := []struct {
		name string
		f    link.Faults
	}{
		{"drop", link.Faults{Seed: 1, Drop: 0.05}},
		{"duplicate", link.Faults{Seed: 2, Duplicate: 0.1}},
		{"reorder", link.Faults{Seed: 3, Reorder: 0.1}},
		{"corrupt", link.Faults{Seed: 4, Corrupt: 0.05}},
		{"all", link.Faults{Seed: 5, Drop: 0.03, Duplicate: 0.03, Reorder: 0.03, Corrupt: 0.02}},
	}
	for _, fc := range faults {
		for _, busy := range []bool{false, true} {
			t.Run(name("%s/busy=%v", fc.name, busy), func(t *testing.T) {
				f2 := fc.f
				f2.Seed += 100
				p, a, b := rcPair(t, pairOpts{mem: link.MemoryOptions{AtoB: fc.f, BtoA: f2}, busy: busy},
					nodeOpts{cap: qpattr.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}},
					connOpts{mtu: qpattr.MTU1024, timeout: 12, retry: 7}) // ~17 ms local ACK timeout
				const n = 40
				const size = 5000
				fill(a.buf[:n*size], 21)
				fill(b.buf[512*1024:512*1024+n*size], 22)
				for i := range n {
					recv(t, b, uint64(i), uint64(i)*size, size)
				}
				var wrs []SendWR
				for i := range n {
					off := uint64(i) * size
					switch i % 3 {
					case 0:
						wrs = append(wrs, SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(off, size)}})
					case 1:
						wrs = append(wrs, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(off, size)},
							RemoteAddr: b.mr.Addr() + 256*1024 + off, RKey: b.mr.RKey()})
					case 2:
						wrs = append(wrs, SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(256*1024+off, size)},
							RemoteAddr: b.mr.Addr() + 512*1024 + off, RKey: b.mr.RKey()})
					}
				}
				if k, err := a.qp.PostSend(wrs); err != nil || k != n {
					t.Fatalf("PostSend: %d, %v", k, err)
				}
				got := pollN(t, a.cq, n, 20*time.Second)
				for i, w := range got {
					if w.WRID != uint64(i) || w.Status != cq.Success {
						t.Fatalf("WC %d: got WRID %d status %v", i, w.WRID, w.Status)
					}
				}
				sends := 0
				for i := range n {
					off := i * size
					switch i % 3 {
					case 0:
						ro := sends * size // the k-th SEND takes the k-th receive
						sends++
						checkBytes(t, name("send %d", i), b.buf[ro:ro+size], a.buf[off:off+size])
					case 1:
						checkBytes(t, name("write %d", i), b.buf[256*1024+off:256*1024+off+size], a.buf[off:off+size])
					case 2:
						checkBytes(t, name("read %d", i), a.buf[256*1024+off:256*1024+off+size], b.buf[512*1024+off:512*1024+off+size])
					}
				}
				rg := pollN(t, b.cq, sends, 5*time.Second)
				for _, w := range rg {
					if w.Status != cq.Success || w.ByteLen != size {
						t.Fatalf("receive WC: %+v", w)
					}
				}
				ca, cb := p.a.Counters(), p.b.Counters()
				t.Logf("a: retransmitted %d completer_retry_err %d rcvd_seq_err %d bad_icrc %d; b: duplicate_request %d out_of_seq_request %d bad_icrc %d",
					ca[CntRetransmitted], ca[CntCompRetry], ca[CntRcvSeqErr], ca[CntRcvdBadICRC], cb[CntDupReq], cb[CntOutOfSeqReq], cb[CntRcvdBadICRC])
				// With BusyPoll an empty poll drives the engine (Drive) once its
				// goroutine sleeps, which a fast run may never have caught: poll
				// the idle device until one does. Without, none ever does.
				wc := make([]cq.WC, 1)
				for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
					if a.cq.Poll(wc); p.a.EngineCounters()[EngDriven] > 0 {
						break
					}
				}
				if d := p.a.EngineCounters()[EngDriven]; (d > 0) != busy {
					t.Fatalf("busy=%v: %d passes driven by polls", busy, d)
				}
			})
		}
	}
}
