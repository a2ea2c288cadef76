// Peer death on the real data path: two namespaces, AF_XDP links, an RC stream
// in progress, and the responder gone without a word, either crashed (its link
// and device closed, nothing sent) or with its veth deleted. Nothing answers any
// more, so the requester ends the stream by the local ACK timeout (IBTA
// 9.7.6.1.3; rxe_comp.c retransmit_timer, COMPST_ERROR_RETRY, COMPST_ERROR): the
// WR at the head completes with RETRY_EXC_ERR once retry_cnt retries, each a
// timeout without progress, went unanswered, every later WR with WR_FLUSH_ERR,
// and the QP goes to ERR: (retry_cnt+1) local ACK timeouts after the last ACK,
// not sooner.

package engine

import (
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xrnic/xrnic/internal/testutil/wcstream"
	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/qpattr"
	"github.com/xrnic/xrnic/testenv"
)

const (
	deathTimeout = 14  // local ACK timeout code: 4.096 us * 2^14 = 67 ms
	deathRetry   = 7   // retry_cnt 7 is finite here (IBTA), infinite in rxe
	deathWRs     = 256 // WRs in the stream
	deathMsg     = 256 << 10
)

// checkRetryExceeded checks that wcs are WRs 0..n-1 in order: successes, then
// one RETRY_EXC_ERR, then WR_FLUSH_ERR; each WR exactly once. It returns how
// many succeeded.
func checkRetryExceeded(t *testing.T, wcs []cq.WC, n int) int {
	t.Helper()
	if len(wcs) != n {
		t.Fatalf("%d completions for %d WRs", len(wcs), n)
	}
	ok := 0
	for ok < n && wcs[ok].Status == cq.Success {
		ok++
	}
	for i, w := range wcs {
		want := cq.Success
		switch {
		case i == ok:
			want = cq.RetryExcErr
		case i > ok:
			want = cq.WRFlushErr
		}
		if w.WRID != uint64(i) || w.Status != want {
			t.Fatalf("completion %d: WRID %d %v, want WRID %d %v (%d succeeded before)", i, w.WRID, w.Status, i, want, ok)
		}
	}
	if ok == n {
		t.Fatalf("all %d WRs succeeded", n)
	}
	return ok
}

func TestVethPeerDeath(t *testing.T) {
	for _, how := range []string{"crash", "vethDeleted"} {
		for _, op := range []WROpcode{WRRDMAWrite, WRSend} {
			t.Run(how+"/"+op.String(), func(t *testing.T) { vethPeerDeath(t, how, op) })
		}
	}
}

func vethPeerDeath(t *testing.T, how string, op WROpcode) {
	p := testenv.NewTestPair(t, testenv.PairOptions{NoIPv6: true})
	da := openVeth(t, &p.A, link.KindAFXDP, false)
	// B's link is opened here, not by openVeth, so the test can pull it away.
	var lb link.Link
	if err := p.B.Do(func() (err error) {
		lb, err = link.NewAFXDP(link.AFXDPOptions{Interface: p.B.Name})
		return err
	}); err != nil {
		t.Fatalf("AF_XDP link on %s: %v", p.B.Name, err)
	}
	db, err := Open(lb, Config{GIDs: gids(p.B.IPv4)})
	if err != nil {
		lb.Close()
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close b: %v", err)
		}
		lb.Close()
	})
	c := qpattr.Cap{MaxSendWR: deathWRs, MaxRecvWR: deathWRs, MaxSendSGE: 1, MaxRecvSGE: 1}
	a := newNode(t, da, nodeOpts{bufLen: deathMsg, cap: c})
	b := newNode(t, db, nodeOpts{bufLen: deathMsg, cap: c})
	connect(t, a, b, connOpts{timeout: deathTimeout, retry: deathRetry})

	wrs := make([]SendWR, deathWRs)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i), Opcode: op, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, deathMsg)}}
		if op == WRSend {
			recv(t, b, uint64(i), 0, deathMsg)
		} else {
			wrs[i].RemoteAddr, wrs[i].RKey = b.mr.Addr(), b.mr.RKey()
		}
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatalf("PostSend: %v", err)
	}
	s := &wcstream.Stream{CQ: a.cq}
	s.Until(t, "the stream flowing", 10*time.Second, func() bool { return len(s.WCs) >= 4 })
	c0, mark := wcstream.MarkProgress(t, s, a.d.Counters, 10*time.Second, "the peer died", nil)

	killed := time.Now()
	switch how {
	case "crash":
		// A crashed process: its link goes first, so nothing leaves B, not even
		// what Close would flush; the device's flush stays local.
		lb.Close()
		if err := db.Close(); err != nil {
			t.Fatalf("close b: %v", err)
		}
	case "vethDeleted":
		// Deleting B's end deletes the pair: A's interface goes too (A's socket
		// is unbound, its sendto fails), and A's engine runs on by its timers.
		if err := p.B.Do(func() error {
			l, err := netlink.LinkByName(p.B.Name)
			if err != nil {
				return err
			}
			return netlink.LinkDel(l)
		}); err != nil {
			t.Fatalf("delete %s: %v", p.B.Name, err)
		}
	}

	to := ackTimeout(deathTimeout)
	budget := time.Duration(deathRetry+1) * to
	limit := 3*budget + 2*time.Second
	s.Until(t, "every WR completed after the peer died", limit+5*time.Second,
		func() bool { return len(s.WCs) == deathWRs })
	ok := checkRetryExceeded(t, s.WCs, deathWRs)
	noMore(t, a.cq)
	if st, ok := errState(a.qp); !ok {
		t.Errorf("QP in %v after RETRY_EXC_ERR, want ERR", st)
	}
	c1 := a.d.Counters()
	retries := c1[CntCompRetry] - c0[CntCompRetry]
	if retries < deathRetry {
		t.Errorf("gave up after %d retries, want %d (retry_cnt)", retries, deathRetry)
	}
	if n := c1[CntRetryExceeded] - c0[CntRetryExceeded]; n != 1 {
		t.Errorf("retry_exceeded_err counted %d times, want 1", n)
	}
	// The last progress came after mark: the error may come no sooner than
	// retry_cnt+1 timeouts after it; one timeout of slack covers the engine pass
	// that started the timer before mark.
	if el := s.ErrAt.Sub(mark); el < time.Duration(deathRetry)*to {
		t.Errorf("RETRY_EXC_ERR %v after the last progress, before %d local ACK timeouts of %v", el, deathRetry, to)
	}
	el := s.ErrAt.Sub(killed)
	if el > limit {
		t.Errorf("RETRY_EXC_ERR %v after the peer died, over %v (budget %v)", el, limit, budget)
	}
	t.Logf("RETRY_EXC_ERR %v after the peer died (budget (%d+1) x %v = %v); %d retries, %d packets retransmitted, %d frames the link refused; %d WRs succeeded, %d flushed",
		el.Round(time.Millisecond), deathRetry, to, budget, retries, c1[CntRetransmitted]-c0[CntRetransmitted],
		c1[CntSendErr]-c0[CntSendErr], ok, deathWRs-ok-1)
}
