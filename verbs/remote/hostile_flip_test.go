package remote

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
)

// A process that flips its rings' indices between values each of which is
// valid: its send and receive rings' producer indices one or two entries past
// what the daemon consumed, its CQ ring's consumer index at all or all but one of what
// the daemon produced. The daemon must bound what it reads and writes by one
// snapshot of the index. Before, the pump counted once (Available, Free) and
// then fetched each entry with Peek or Reserve, which loaded the index again:
// one moved back in between gave it a nil entry, and decoding it (or writing
// a completion into it) panicked the engine goroutine, and with it the daemon
// and every process attached to it. Every send entry has an opcode the device
// refuses at post, so that the pump also takes the path that fetches the head
// again after PostSend, moves one entry a pass, and completes each on the CQ.
func TestHostileRingIndexFlips(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// A second QP, in INIT, whose receives the device takes until its queue
	// is full: then the pump looks at the ring again every pass.
	rqp, err := pd.CreateQP(QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var init verbs.QPAttr
	init.State, init.Port = verbs.QPSInit, 1
	if err := rqp.Modify(&init, verbs.AttrMask(1<<0|1<<3|1<<4|1<<5)); err != nil { // state, access, P_Key index, port
		t.Fatal(err)
	}
	rqMem := rqp.mem.Bytes()[(shm.RingSize(rqp.sq.Len(), rqp.sq.EntrySize())+63)&^63:] // after the send ring, as the daemon lays them
	rqProd, rqCons := (*atomic.Uint32)(unsafe.Pointer(&rqMem[0])), (*atomic.Uint32)(unsafe.Pointer(&rqMem[64]))
	mem := qp.mem.Bytes()
	n, esize := qp.sq.Len(), qp.sq.EntrySize()
	for i := range n {
		binary.LittleEndian.PutUint32(mem[shm.HeaderLen+i*esize+8:], 0xff) // opcode
	}
	word := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }
	prod, cons, flags := word(0), word(64), word(128)
	cqMem := cq.mem.Bytes()
	cqProd, cqCons := (*atomic.Uint32)(unsafe.Pointer(&cqMem[0])), (*atomic.Uint32)(unsafe.Pointer(&cqMem[64]))
	cqN := uint32(cq.ring.Len())
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		for range 1000 {
			c := cons.Load()
			prod.Store(c + 2)
			prod.Store(c + 1)
			c = rqCons.Load()
			rqProd.Store(c + 2)
			rqProd.Store(c + 1)
			p := cqProd.Load()
			cqCons.Store(p)
			cqCons.Store(p - cqN + 1)
		}
		if flags.Load()&shm.RingNeedWakeup != 0 || rqMem[128]&shm.RingNeedWakeup != 0 {
			d.ring()
		}
	}
	// The daemon is alive, and serves another process.
	if _, err := r.dial(t).AllocPD(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*QP{qp, rqp} {
		if _, err := q.Query(); err != nil {
			t.Fatal(err)
		}
	}
}
