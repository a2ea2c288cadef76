// Examples of the two ways to wait for completions.

package cq_test

import (
	"context"
	"fmt"

	"github.com/xrnic/xrnic/nic/cq"
)

// The consumer loop of ibv_get_cq_event(3): wait, acknowledge, re-arm, then poll
// until empty, so that a completion pushed between the poll and the re-arm is not
// stranded.
func ExampleChannel() {
	ch := cq.NewChannel()
	c, err := cq.New(64, cq.Options{Channel: ch})
	if err != nil {
		panic(err)
	}
	_ = c.ReqNotify(false) // before any completion can arrive

	// The engine completes a receive.
	c.Push(&cq.WC{WRID: 7, Opcode: cq.Recv, ByteLen: 512}, false)

	ev, err := ch.GetEvent(context.Background())
	if err != nil {
		panic(err)
	}
	ev.AckEvents(1) // could be batched; Close needs every event acknowledged
	_ = ev.ReqNotify(false)
	var wcs [16]cq.WC
	for n := ev.Poll(wcs[:]); n > 0; n = ev.Poll(wcs[:]) {
		for _, wc := range wcs[:n] {
			fmt.Println(wc.WRID, wc.Opcode, wc.Status, wc.ByteLen)
		}
	}
	_ = c.Close()
	_ = ch.Close()
	// Output: 7 recv success 512
}

// A kernel-style completion handler: it runs on the CQ's own goroutine, re-arms
// and drains.
func ExampleCQ_SetHandler() {
	done := make(chan uint64)
	c, err := cq.New(64, cq.Options{})
	if err != nil {
		panic(err)
	}
	_ = c.SetHandler(func(c *cq.CQ) {
		_ = c.ReqNotify(false)
		var wcs [16]cq.WC
		for n := c.Poll(wcs[:]); n > 0; n = c.Poll(wcs[:]) {
			for _, wc := range wcs[:n] {
				done <- wc.WRID
			}
		}
	})
	_ = c.ReqNotify(false)
	c.Push(&cq.WC{WRID: 42, Opcode: cq.RDMAWrite}, false)
	fmt.Println(<-done)
	_ = c.Close()
	<-c.Done()
	// Output: 42
}
