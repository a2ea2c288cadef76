//go:build interop

package interop

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
)

// TestRxeRetryShift shows what issue 19's "remote invalid request" (bench's
// server, rxe sending over 4 QPs on a loaded machine) was: rxe's requester, not
// xrnic's responder. A scripted responder at xrnic's address (UDP sockets, and
// perftest's TCP exchange by hand) takes the guest's ib_send_bw: 120-packet
// SENDs, two posted. It acknowledges nothing until rxe's ACK timer resends the
// first message; as the resent FIRST arrives, it sends the ACK of that
// message's LAST, as a responder whose ACK was merely late would.
//
// rxe's completer takes the ACK while the message is still being resent
// (COMPST_WRITE_SEND with the WQE "processing"): comp.psn moves past the WQE,
// which is not completed. At the next timeout, req_retry resends from
// comp.psn: retry_first_write_send steps over all the WQE's packets, and the
// WQE goes out again as a SEND ONLY with no payload, one PSN after its LAST.
// Every later message moves up one PSN. A responder that had executed the
// second message's FIRST at that PSN, as xrnic's had, then gets a FIRST in the
// middle of a message: an opcode sequence error, class C, and the receive
// completes with "remote invalid request" (rxe's responder does the same).
// xrnic's requester had the same flaw and moves past such a WQE
// (TestRetryLateACKDuringResend).
func TestRxeRetryShift(t *testing.T) {
	startBudget(t)
	g := boot(t, 1024)
	// rxe resends a message in one burst, faster than an ACK comes back,
	// unless its requester pauses: it does while 64 of its packets are out
	// (RXE_INFLIGHT_SKBS_PER_QP_HIGH). netem's slots hold the guest's packets
	// (8 every 5 ms) without orphaning them, as a loaded host's slow transmit
	// completions would: the resend pauses every 64 packets, and the ACK
	// arrives within the message.
	g.netem(t, "slot 5ms 5ms packets 8 limit 10000")
	const pkts = 120 // 120 KiB at RoCE MTU 1024: two messages fill rxe's 128-PSN window
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = retryShift(t, g, pkts); err == nil {
			return
		}
		t.Logf("attempt %d: %v", attempt, err)
	}
	t.Fatal(err)
}

// retryShift runs the scenario once; nil when rxe shifted its PSNs.
func retryShift(t *testing.T, g *guest, pkts int) error {
	ns, err := testenv.JoinNS(nsXrnic)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var ln net.Listener
	var l *link.UDP
	if err := ns.Do(func() (err error) {
		if ln, err = net.Listen("tcp4", ipXrnic+":18515"); err != nil {
			return err
		}
		l, err = link.NewUDP(link.UDPOptions{Interface: ifXrnic, Addrs: []netip.Addr{netip.MustParseAddr(ipXrnic)}})
		return err
	}); err != nil {
		t.Fatalf("in %s: %v", nsXrnic, err)
	}
	defer ln.Close()
	defer l.Close()
	c := startCapture(t, artifactName(t))
	defer c.stop(t)
	j := g.start(t, fmt.Sprintf("ib_send_bw -d %s -x 1 -s %d -n 8 -t 2 -u 17 %s", guestDev, pkts*1024, ipXrnic))
	defer j.kill()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(shortTimeout))
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("the guest's ib_send_bw did not connect: %v", err)
	}
	defer conn.Close()
	qpn, psn0 := perftestServer(t, conn)
	t.Logf("rxe's QP %#x starts at PSN %#x", qpn, psn0)

	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 9000)
	}
	sizes := make([]int, len(bufs))
	first, last := wire.PSN(psn0), wire.PSN(psn0).Add(uint32(pkts-1))
	next := last.Next()
	seen := map[wire.PSN]int{}
	acked, shifted := false, false
	var trail []string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := l.Wait(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		n, err := l.ReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			var p wire.Packet
			if wire.Parse(bufs[i][:sizes[i]], &p) != nil || p.BTH.DestQPN() != 0x11 {
				continue
			}
			psn := p.BTH.PSN()
			seen[psn]++
			if psn == first || psn == next || psn == next.Next() {
				trail = append(trail, fmt.Sprintf("%v at PSN %#x, %d bytes (copy %d)", p.Opcode, uint32(psn), len(p.Payload), seen[psn]))
			}
			switch {
			case !acked && psn == first && seen[first] >= 2 && seen[last] >= 1:
				// rxe's timer fired and it resends the first message: now the
				// ACK of its LAST, late.
				if n, err := l.WriteBatch([][]byte{ackFrame(t, qpn, last)}); n != 1 || err != nil {
					t.Fatalf("send the ACK: %d, %v", n, err)
				}
				acked = true
				trail = append(trail, fmt.Sprintf("xrnic's side: ACK of PSN %#x", uint32(last)))
			case acked && !shifted && psn == next && p.Opcode == wire.RCSendOnly && len(p.Payload) == 0:
				shifted = true
			case shifted && psn == next.Next():
				// The second message, one PSN on: its FIRST where its first
				// MIDDLE was.
				if p.Opcode != wire.RCSendFirst {
					t.Fatalf("after the empty SEND ONLY, %v at PSN %#x, want the next message's FIRST:\n  %s",
						p.Opcode, uint32(psn), strings.Join(trail, "\n  "))
				}
				t.Logf("rxe resent the acknowledged message as an empty SEND ONLY one PSN after its LAST (%#x), and the next message one PSN on:\n  %s",
					uint32(last), strings.Join(trail, "\n  "))
				return nil
			case acked && !shifted && psn == next && seen[next] >= 3:
				return fmt.Errorf("the ACK came after the message's resend (rxe completed it): %s", strings.Join(trail, "; "))
			}
		}
	}
	return fmt.Errorf("no empty SEND ONLY at PSN %#x, then the next FIRST, within 20 s (ACK sent: %v): %s",
		uint32(next), acked, strings.Join(trail, "; "))
}

// perftestServer plays an ib_send_bw server's side of perftest's TCP exchange
// (perftest_communication.c: versions, system data, MTU, then key messages)
// with one QP, 0x11, at xrnic's address; it returns the client's QPN and first
// PSN and goes on answering its handshakes until the connection closes.
func perftestServer(t *testing.T, conn net.Conn) (qpn, psn uint32) {
	t.Helper()
	conn.SetDeadline(time.Now().Add(shortTimeout))
	xchg := func(my []byte) []byte {
		t.Helper()
		r := make([]byte, len(my))
		if _, err := io.ReadFull(conn, r); err != nil {
			t.Fatalf("perftest exchange: %v", err)
		}
		if _, err := conn.Write(my); err != nil {
			t.Fatalf("perftest exchange: %v", err)
		}
		return r
	}
	xchg(append([]byte("6.06"), make([]byte, 12)...)) // version, 16 bytes
	xchg([]byte{0, 0, 0x10, 0})                       // cycle buffer 4096
	xchg([]byte{0, 0, 0, 64})                         // cache line 64
	xchg([]byte{'3', 0})                              // MTU 1024 (IBV_MTU_1024)
	key := fmt.Sprintf("%04x:%04x:%06x:%06x:%08x:%016x", 0, 1, 0x11, 0x100, 0, 0)
	ip := netip.MustParseAddr(ipXrnic).As4()
	for _, b := range append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, ip[:]...) {
		key += fmt.Sprintf(":%02x", b)
	}
	key += fmt.Sprintf(":%08x:", 0) + "\x00"
	f := strings.Split(string(xchg([]byte(key))), ":")
	if len(f) < 4 {
		t.Fatalf("the guest's key message: %q", f)
	}
	q, err1 := strconv.ParseUint(f[2], 16, 32)
	p, err2 := strconv.ParseUint(f[3], 16, 32)
	if err1 != nil || err2 != nil {
		t.Fatalf("the guest's key message: %q", f)
	}
	go func() {
		// The rest of the run's handshakes, whatever their number.
		conn.SetDeadline(time.Time{})
		r := make([]byte, len(key))
		for {
			if _, err := io.ReadFull(conn, r); err != nil {
				return
			}
			if _, err := conn.Write([]byte(key)); err != nil {
				return
			}
		}
	}()
	return uint32(q), uint32(p)
}

// ackFrame is an RC ACKNOWLEDGE for psn from xrnic's address, as the UDP link
// sends it (source port 4791, IPv4 identification 0, DF): the ICRC covers
// those fields.
func ackFrame(t *testing.T, qpn uint32, psn wire.PSN) []byte {
	t.Helper()
	f := wire.FrameFields{
		IPVersion: 4,
		IPv4:      wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: netip.MustParseAddr(ipXrnic), Dst: netip.MustParseAddr(ipGuest)},
		UDP:       wire.UDPFields{SrcPort: wire.UDPPortRoCEv2},
		IB: wire.IBFields{
			BTH:  wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: wire.DefaultPKey, DestQPN: qpn, PSN: psn},
			AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsUnlimited), MSN: 1},
		},
	}
	b := make([]byte, f.Len())
	n, err := f.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}
