package o2ib

import (
	"bytes"
	"testing"
	"time"

	"github.com/xrnic/xrnic/ndk"
)

// rawSend sends b as a message of c's, outside the protocol: what a hostile
// peer could put on the wire.
func rawSend(t *testing.T, c *Conn, b []byte) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.txFree[len(c.txFree)-1]
	c.txFree = c.txFree[:len(c.txFree)-1]
	copy(c.msgBuf(i), b)
	if err := c.qp.Send(ctxTx|uint64(i), []ndk.SGE{c.msgSGE(i, len(b))}, 0); err != nil {
		t.Fatal(err)
	}
}

// waitStat waits for ni's stats to satisfy ok.
func waitStat(t *testing.T, ni *NI, what string, ok func(Stats) bool) {
	t.Helper()
	for end := time.Now().Add(hang); !ok(ni.Stats()); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: stats %+v", what, ni.Stats())
		}
	}
}

// checkAlive sends on c and checks its peer NI gets it: the connections a
// hostile peer did not touch keep running.
func checkAlive(t *testing.T, c *Conn, peer *NI) {
	t.Helper()
	done := make(chan error, 1)
	if err := c.Put([]byte("still here"), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, "put", done); err != nil {
		t.Fatal(err)
	}
	if m := recvMsg(t, peer); !bytes.Equal(m.Data, []byte("still here")) {
		t.Fatalf("got %q", m.Data)
	}
}

// TestHostilePeer: a peer that sends a malformed header, one that returns
// credits it never had, and one that answers a PUT with memory it does not
// have, each gets its connection closed and counted; another connection
// between the same NIs keeps running.
func TestHostilePeer(t *testing.T) {
	a, b := pair(t, 4720, Config{})
	good := dial(t, a, 4720)

	bad := func(what string, count func(Stats) uint64, attack func(c *Conn)) {
		t.Helper()
		c := dial(t, a, 4720)
		before := count(b.Stats())
		attack(c)
		waitStat(t, b, what, func(s Stats) bool { return count(s) == before+1 })
		for end := time.Now().Add(hang); c.Refs() != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: the attacker's connection was not closed (count %d)", what, c.Refs())
			}
		}
		checkAlive(t, good, b)
	}
	bad("malformed header", func(s Stats) uint64 { return s.BadMsg }, func(c *Conn) {
		var m [hdrLen]byte
		(&hdr{typ: msgNoop}).put(m[:])
		m[0] ^= 0xff // the magic
		rawSend(t, c, m[:])
	})
	bad("unknown cookie", func(s Stats) uint64 { return s.BadMsg }, func(c *Conn) {
		var m [hdrLen]byte
		(&hdr{typ: msgPutDone, cookie: 999}).put(m[:])
		rawSend(t, c, m[:])
	})
	bad("credits overrun", func(s Stats) uint64 { return s.Overrun }, func(c *Conn) {
		var m [hdrLen]byte
		(&hdr{typ: msgNoop, credits: 1000}).put(m[:])
		rawSend(t, c, m[:])
	})

	// B's PUT to A: A answers with an address and key it does not have.
	a.testHookAck = func(h *hdr) { h.addr, h.rkey = 0xdead0000, 0x12345 }
	ac := dial(t, a, 4720)
	local, _ := ac.Addrs()
	var bc *Conn
	for end := time.Now().Add(hang); bc == nil; time.Sleep(time.Millisecond) {
		for _, x := range b.Connections() {
			if _, peer := x.Addrs(); peer == local {
				bc = x
			}
		}
		if time.Now().After(end) {
			t.Fatal("B never had the connection")
		}
	}
	before := b.Stats().RDMA
	done := make(chan error, 1)
	if err := bc.Put(make([]byte, 100_000), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, "put to a lying peer", done); err == nil {
		t.Fatal("a PUT into memory the peer does not have succeeded")
	}
	waitStat(t, b, "bad RDMA address", func(s Stats) bool { return s.RDMA == before+1 })
	a.testHookAck = nil
	checkAlive(t, good, b)
}
