package xsk_test

import (
	"log"
	"time"

	"github.com/xrnic/xrnic/nic/xsk"
)

// An engine loop: drain RX in batches, answer in place in TX chunks, kick once
// per batch, sleep in Poll when idle. (Compiled, not run: it needs a bound XDP
// program and root.)
func Example() {
	const ifindex, queue = 2, 0
	opts := xsk.DefaultOptions()
	opts.MultiBuffer = true // RoCE MTU 4096 frames span two chunks on veth
	s, err := xsk.New(ifindex, queue, opts)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	// ... put s.FD() into the XDP program's XSKMAP at queue ...

	pkts := make([]xsk.Packet, 64)
	tx := make([]xsk.TxFrame, 64)
	scratch := make([]byte, s.MaxTxLen())
	for {
		n, err := s.Receive(pkts)
		if err != nil {
			return
		}
		m := s.NextTxFrames(tx[:n])
		for i := range m {
			frame := pkts[i].Bytes(scratch) // in place unless multi-buffer
			k := copy(tx[i].Buf, frame)     // a real engine builds its reply here
			tx[i].Buf = tx[i].Buf[:k]
		}
		s.Release(pkts[:n])
		if _, err := s.SubmitTx(tx[:m]); err != nil {
			log.Print(err)
		}
		if n == 0 {
			if _, err := s.Poll(10 * time.Millisecond); err != nil {
				return
			}
		}
	}
}
