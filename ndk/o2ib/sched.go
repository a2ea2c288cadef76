package o2ib

import (
	"errors"
	"fmt"
	"time"

	"github.com/xrnic/xrnic/ndk"
)

// notified is the CQ's notification (kiblnd_cq_completion), on the adapter's
// callback goroutine: the connection goes on the scheduler's list, holding a
// reference while it waits there (O2-5).
func (c *Conn) notified(error) {
	if c.scheduled.Swap(true) {
		return
	}
	c.addref()
	ni := c.ni
	ni.schedMu.Lock()
	ni.schedQ = append(ni.schedQ, c)
	ni.schedC.Signal()
	ni.schedMu.Unlock()
}

// scheduler is kiblnd_scheduler: it takes connections off its list, handles
// their completions, re-arms their CQs and drops the list's reference.
func (ni *NI) scheduler() {
	defer ni.wg.Done()
	var rs [16]ndk.Result
	for {
		ni.schedMu.Lock()
		for len(ni.schedQ) == 0 && !ni.stopped() {
			ni.schedC.Wait()
		}
		if len(ni.schedQ) == 0 {
			ni.schedMu.Unlock()
			return
		}
		c := ni.schedQ[0]
		ni.schedQ[0] = nil
		ni.schedQ = ni.schedQ[1:]
		ni.schedMu.Unlock()

		if h := ni.testHookSched; h != nil {
			h(c)
		}
		c.scheduled.Store(false)
		n := c.cq.GetResults(rs[:])
		if n < len(rs) {
			// Arm, then look again: what came between the poll and the arm
			// fires nothing.
			_ = c.cq.Arm(ndk.NotifyAny)
			n += c.cq.GetResults(rs[n:])
		}
		for i := range rs[:n] {
			c.complete(&rs[i])
		}
		if n > 0 {
			c.notified(nil) // more may wait: back on the list, with a reference
		}
		c.decref() // O2-5
	}
}

func (ni *NI) stopped() bool {
	select {
	case <-ni.stop:
		return true
	default:
		return false
	}
}

// complete handles one completion (kiblnd_complete).
func (c *Conn) complete(r *ndk.Result) {
	v := r.RequestContext &^ ctxMask
	switch r.RequestContext & ctxMask {
	case ctxRx:
		c.rxDone(int(v), r)
	case ctxTx:
		c.txDone(int(v), r)
	case ctxRDMA:
		c.rdmaDone(v, r)
	}
	c.checkSends()
}

// rxDone is kiblnd_rx_complete: a flushed receive drops its reference
// (O2-6); a message is handled and its buffer posted again, its credit
// owed to the peer.
func (c *Conn) rxDone(i int, r *ndk.Result) {
	if err := r.Err(); err != nil {
		if !errors.Is(err, ndk.ErrCanceled) {
			c.closeFor(fmt.Errorf("o2ib: receive: %w", err), nil)
		}
		c.decref() // kiblnd_drop_rx
		return
	}
	// A peer's fault closes the connection; the buffer is not posted again.
	refuse := func(err error, count func(*Stats)) {
		c.closeFor(err, count)
		c.decref() // kiblnd_drop_rx
	}
	badMsg := func(s *Stats) { s.BadMsg++ }
	h, err := parse(c.msgBuf(i), int(r.BytesTransferred), c.ni.cfg.MaxRDMA)
	if err != nil {
		refuse(err, badMsg)
		return
	}
	c.mu.Lock()
	if c.credits+int(h.credits) > c.maxCredits {
		c.mu.Unlock()
		refuse(errors.New("o2ib: the peer returned credits it never had"), func(s *Stats) { s.Overrun++ })
		return
	}
	c.credits += int(h.credits)
	c.heard = time.Now()
	c.mu.Unlock()
	if err := c.handle(h, c.msgBuf(i)[hdrLen:r.BytesTransferred]); err != nil {
		refuse(err, badMsg)
		return
	}
	c.mu.Lock()
	c.outCredits++
	c.mu.Unlock()
	c.postRx(i) // the buffer keeps its reference, posted again
}

// handle acts on a message (kiblnd_handle_rx).
func (c *Conn) handle(h hdr, payload []byte) error {
	ni := c.ni
	switch h.typ {
	case msgNoop:
	case msgImmediate:
		ni.recv <- Message{Conn: c, Data: append([]byte(nil), payload...)}
	case msgPutReq, msgGetReq:
		if s, ok := ni.takeLent(c, h); ok {
			c.lendTo(h, s)
		} // else parked: served when a lent buffer comes back
	case msgPutDone, msgGetDone:
		c.mu.Lock()
		l, ok := c.lent[h.cookie]
		delete(c.lent, h.cookie)
		c.mu.Unlock()
		if !ok {
			return fmt.Errorf("%w: DONE for cookie %d, never lent", errBadMsg, h.cookie)
		}
		var data []byte
		if h.typ == msgPutDone {
			data = append([]byte(nil), ni.slotBytes(l.slot, l.length)...)
		}
		ni.release(l.slot)
		if data != nil {
			ni.recv <- Message{Conn: c, Data: data}
		}
	case msgPutAck, msgGetAck, msgNak:
		want := msgPutReq
		if h.typ == msgGetAck {
			want = msgGetReq
		}
		c.mu.Lock()
		t, ok := c.waiting[h.cookie]
		if !ok || (h.typ != msgNak && (t.h.typ != want || h.length != t.h.length)) {
			c.mu.Unlock()
			return fmt.Errorf("%w: %d for cookie %d, not waiting", errBadMsg, h.typ, h.cookie)
		}
		if t.aborted {
			c.mu.Unlock() // its close ends it
			return nil
		}
		if h.typ == msgNak {
			t.aborted, t.why = true, ErrRefused
			end := c.endLocked(t)
			c.mu.Unlock()
			if end {
				c.endTx(t, nil, ErrRefused)
			}
			return nil
		}
		sge := []ndk.SGE{ni.slotSGE(t.slot, int(h.length))}
		var err error
		t.posted++
		if h.typ == msgPutAck {
			err = c.qp.Write(ctxRDMA|h.cookie, sge, h.addr, h.rkey, 0)
		} else {
			err = c.qp.Read(ctxRDMA|h.cookie, sge, h.addr, h.rkey, 0)
		}
		if err != nil {
			t.posted--
		}
		c.mu.Unlock()
		if err != nil {
			return fmt.Errorf("o2ib: RDMA: %w", err)
		}
	}
	return nil
}

// lendTo answers a peer's PUT_REQ or GET_REQ with lent buffer s: its
// address and key (PUT_ACK, GET_ACK), or a NAK for a GET of nothing.
func (c *Conn) lendTo(h hdr, s int) {
	ni := c.ni
	ack := msgPutAck
	if h.typ == msgGetReq {
		var data []byte
		if ni.cfg.OnGet != nil {
			data = ni.cfg.OnGet(h.addr, int(h.length))
		}
		if len(data) != int(h.length) {
			ni.release(s)
			c.reply(hdr{typ: msgNak, cookie: h.cookie})
			return
		}
		copy(ni.slotBytes(s, len(data)), data)
		ack = msgGetAck
	}
	c.mu.Lock()
	if c.state == stClosing {
		c.mu.Unlock()
		ni.release(s)
		return
	}
	c.lent[h.cookie] = lent{s, int(h.length)}
	c.mu.Unlock()
	a := hdr{typ: ack, cookie: h.cookie, length: h.length, addr: ni.slotAddr(s), rkey: ni.slab.RemoteToken()}
	if ni.testHookAck != nil {
		ni.testHookAck(&a)
	}
	c.reply(a)
}

// txDone is a message send's completion (kiblnd_tx_complete): a tx whose
// last message it was ends.
func (c *Conn) txDone(i int, r *ndk.Result) {
	c.mu.Lock()
	t := c.sent[i]
	c.sent[i] = nil
	c.txFree = append(c.txFree, i)
	if t == nil {
		c.mu.Unlock()
		return
	}
	t.posted--
	err := r.Err()
	if err != nil {
		t.aborted = true
	}
	// A request (PUT_REQ, GET_REQ) that went out waits for its answer.
	end := (t.ending || t.aborted) && c.endLocked(t)
	c.mu.Unlock()
	if err != nil && !errors.Is(err, ndk.ErrCanceled) {
		c.closeFor(fmt.Errorf("o2ib: send: %w", err), nil)
	}
	if end {
		var data []byte
		if t.h.typ == msgGetDone && err == nil {
			data = t.data
		}
		if t.aborted {
			// Its message went out, but a close or a NAK aborted it
			// meanwhile: it did not happen (O2-4).
			err = cmpErr(err, cmpErr(t.why, ErrClosed))
		}
		c.endTx(t, data, err)
	}
}

// rdmaDone is a PUT's WRITE or a GET's READ completing: the tx's DONE goes
// out next, ahead of what is queued; a failure (the peer named memory it
// does not have) closes the connection.
func (c *Conn) rdmaDone(cookie uint64, r *ndk.Result) {
	c.mu.Lock()
	t, ok := c.waiting[cookie]
	if !ok {
		c.mu.Unlock()
		return
	}
	t.posted--
	err := r.Err()
	if err != nil || t.aborted {
		t.aborted = true
		end := c.endLocked(t)
		c.mu.Unlock()
		if err != nil && !errors.Is(err, ndk.ErrCanceled) {
			c.closeFor(fmt.Errorf("o2ib: RDMA: %w", err), func(s *Stats) { s.RDMA++ })
		}
		if end {
			c.endTx(t, nil, cmpErr(err, cmpErr(t.why, ErrClosed)))
		}
		return
	}
	delete(c.waiting, cookie)
	if t.h.typ == msgGetReq {
		copy(t.data, c.ni.slotBytes(t.slot, len(t.data)))
		t.h = hdr{typ: msgGetDone, cookie: cookie}
	} else {
		t.h = hdr{typ: msgPutDone, cookie: cookie}
	}
	t.ending = true
	c.queue = append([]*tx{t}, c.queue...)
	c.mu.Unlock()
}

// cmpErr is err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// toConnd puts c on one of connd's lists and wakes it.
func (ni *NI) toConnd(list *[]*Conn, c *Conn) {
	ni.conndMu.Lock()
	*list = append(*list, c)
	ni.conndMu.Unlock()
	select {
	case ni.conndWake <- struct{}{}:
	default: // a wakeup is pending already
	}
}

// connd is kiblnd_connd: it disconnects closing connections, dropping the
// NI's reference once the disconnect is under way, and frees those whose
// count reached zero (O2-7), away from the scheduler.
func (ni *NI) connd() {
	defer ni.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			for _, c := range ni.Connections() {
				c.checkTimeout(now)
			}
		case <-ni.conndWake:
			ni.conndMu.Lock()
			closing, zombies := ni.closing, ni.zombies
			ni.closing, ni.zombies = nil, nil
			ni.conndMu.Unlock()
			for _, c := range closing {
				c.disconnect()
			}
			for _, c := range zombies {
				c.free()
			}
		case <-ni.stop:
			return
		}
	}
}

// disconnect is connd's part of a close.
func (c *Conn) disconnect() {
	c.mu.Lock()
	if c.connecting {
		c.closeAfter = true // its connect's completion sends it back
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if c.cn == nil {
		c.qp.Flush()
		c.decref()
		return
	}
	// Disconnect flushes the QP and sends the DREQ; the NI's reference goes
	// at once, as kiblnd_connd drops it after rdma_disconnect: a dead peer's
	// DREP may never come, and the connector's close cancels the wait for it.
	if err := c.cn.Disconnect(nil); err != nil && !errors.Is(err, ndk.ErrPending) {
		c.qp.Flush()
	}
	c.decref()
}

// free closes the connection's objects, successors first, and forgets it.
func (c *Conn) free() {
	if h := c.ni.testHookFree; h != nil {
		h(c)
	}
	c.freeObjects(nil)
	// Buffers lent to the peer's transfers that never got their DONE.
	c.mu.Lock()
	ls := c.lent
	c.lent = map[uint64]lent{}
	c.mu.Unlock()
	for _, l := range ls {
		c.ni.release(l.slot)
	}
	ni := c.ni
	ni.mu.Lock()
	delete(ni.conns, c)
	ni.stats.Reaped++
	ni.reaped.Broadcast()
	ni.mu.Unlock()
}

// freeObjects closes what the connection made; it returns err.
func (c *Conn) freeObjects(err error) error {
	if c.cn != nil {
		ndk.Await(c.cn.Close)
	}
	if c.qp != nil {
		ndk.Await(c.qp.Close)
	}
	if c.mr != nil {
		ndk.Await(c.mr.Close)
	}
	if c.cq != nil {
		ndk.Await(c.cq.Close)
	}
	return err
}
