//go:build interop

package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/mad"
)

// rpingCount and rpingSize: 10 pings of 1000 bytes, verified (-V) and shown (-v).
const rpingCount, rpingSize = 10, 1000

// rpingPair runs rdma-core's rping in the guest against bench rping: the
// connection through the two CMs over QP1, the ping loop's RDMA READs and
// WRITEs, both sides' data lines compared with what rping prints.
// With lossPct, that share of xrnic's RoCE frames (its MADs among them) is
// dropped on the wire: the CM's retransmissions and RC's recover.
//
// With ndk, bench runs rping over the ndk layer (--ndk): NDKPI's listener or
// connector, QP and CQ notification instead of verbs and rdma_cm's API.
//
// With lossPct < 0, exactly the first frame xrnic sends is lost: its first CM
// MAD (the REP as server, the REQ as client), which ib_cm's retry after the
// message's timeout must recover.
func rpingPair(t *testing.T, g *guest, xrnicServer bool, lossPct int, ndk bool) {
	name := artifactName(t)
	switch {
	case lossPct > 0:
		dropOnWire(t, float64(lossPct)/100)
	case lossPct < 0:
		a := dropOnWire(t, 1)
		done := make(chan struct{})
		lost := make(chan uint64, 1)
		go func() {
			defer close(lost)
			for {
				c, err := a.Counters()
				if err == nil && c.DroppedInjected > 0 {
					a.SetFaults(bpf.Faults{})
					lost <- c.DroppedInjected
					return
				}
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		defer func() {
			close(done)
			n, ok := <-lost
			c, _ := a.Counters()
			if !ok || n != 1 || c.DroppedInjected != 1 {
				t.Errorf("xrnic's frames lost: %d when the drop was lifted, %d in all; want its first MAD only", n, c.DroppedInjected)
			}
		}()
	}
	args := fmt.Sprintf("-v -V -C %d -S %d", rpingCount, rpingSize)
	bench, ready := []string{suite.bench, "rping"}, "rdma_listen"
	if ndk {
		bench, ready = append(bench, "--ndk"), "NdkListen"
	}
	var guestCmd string
	if xrnicServer {
		bench = append(append(bench, "-s", "-d", "-a", ipXrnic), strings.Fields(args)...)
		guestCmd = "rping -c " + args + " -a"
	} else {
		bench = append(append(bench, "-c"), strings.Fields(args)...)
		bench = append(bench, "-a")
		guestCmd = "rping -s -v -S " + fmt.Sprint(rpingSize) + " -a " + ipGuest
	}
	c, xOut, gOut := playWith(t, g, name, bench, guestCmd, xrnicServer, ready, nil, func(j *job) {
		g.waitCMListen(t, 7174, "rdma_cm listener", j)
	})
	client, server := gOut, xOut
	if !xrnicServer {
		client, server = xOut, gOut
	}
	if got, want := dataLines(client, "ping data: "), rpingData("ping data: "); got != want {
		t.Errorf("the client's ping data differ from rping's (%d bytes, want %d): see %s", len(got), len(want), name)
	}
	if got, want := dataLines(server, "server ping data: "), rpingData("server ping data: "); got != want {
		t.Errorf("the server's ping data differ from rping's (%d bytes, want %d): see %s", len(got), len(want), name)
	}
	checkICRC(t, c, name, frames(t, c.path))
	checkCMMADs(t, c, lossPct != 0, xrnicServer)
}

// rpingData is what rping -v prints for the run's pings.
func rpingData(prefix string) string {
	var b strings.Builder
	start := 65
	for ping := range rpingCount {
		buf := make([]byte, rpingSize)
		cc := copy(buf, fmt.Sprintf("rdma-ping-%d: ", ping))
		ch := start
		for i := cc; i < rpingSize; i++ {
			buf[i] = byte(ch)
			if ch++; ch > 122 {
				ch = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		fmt.Fprintf(&b, "%s%s\n", prefix, buf[:rpingSize-1])
	}
	return b.String()
}

// dataLines returns out's lines that start with prefix. The harness merges a
// side's stdout and stderr, so rping's stderr lines, which may land inside a
// data line, are taken out first.
func dataLines(out, prefix string) string {
	for _, l := range []string{"client DISCONNECT EVENT...\n", "server DISCONNECT EVENT...\n",
		"wait for RDMA_READ_ADV state 10\n"} {
		out = strings.ReplaceAll(out, l, "")
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// checkCMMADs checks the capture's CM MADs: each parses, and in the order of
// their first appearance they are the handshake REQ, REP, RTU and the
// disconnect DREQ, DREP. The capture holds what survived the drop, so under
// loss a message may appear again (a REP resent because its RTU was lost);
// without loss the handshake's messages appear once each. (Both sides may
// send a DREQ, as rping's server disconnects too.)
func checkCMMADs(t *testing.T, c *capture, lossy, xrnicServer bool) {
	t.Helper()
	seq := cmMADs(frames(t, c.path))
	var first []string
	seen := map[string]bool{}
	for _, a := range seq {
		if !seen[a] {
			seen[a] = true
			first = append(first, a)
		}
	}
	got := strings.Join(seq, " ")
	t.Logf("CM MADs on the wire (xrnic's after any drop, and the guest's): %s", got)
	// Under loss, xrnic's DREP (as server) may be the frame dropped: rping's
	// client destroys its ID right after rdma_disconnect, and ib_cm then stops
	// retrying the DREQ (cm_destroy_id in DREQ_SENT), so nothing asks again.
	order := strings.Join(first, " ")
	if order != "REQ REP RTU DREQ DREP" && !(lossy && xrnicServer && order == "REQ REP RTU DREQ") {
		t.Errorf("CM MADs on the wire, in order of first appearance: %s, want REQ REP RTU DREQ DREP", order)
	}
	if !lossy && !strings.HasPrefix(got, "REQ REP RTU DREQ") {
		t.Errorf("CM MADs on the wire without loss: %s, want the handshake once each", got)
	}
}

// rpingPeerGone: the guest's rping client sends its REQ and bench rping's
// server accepts it, but the guest never hears from xrnic again (every frame
// xrnic sends is dropped): the REP is sent once and retried the REQ's Max CM
// Retries (15) times, the REQ's Local CM Response Timeout (2^20 × 4.096 µs)
// apart, as ib_cm does, and then the server ends with rping's report of
// UNREACHABLE (-ETIMEDOUT), not a hang. The guest's duplicate REQs meanwhile
// draw nothing (ib_cm ignores them in REP_SENT).
func rpingPeerGone(t *testing.T, g *guest) {
	name := artifactName(t)
	drop := dropOnWire(t, 1)
	c := startCapture(t, name)
	h := startHost(t, runTimeout, "rdma_listen", suite.bench, "rping", "-s", "-d", "-a", ipXrnic, "-C", "1")
	start := time.Now()
	j := g.start(t, "rping -c -C 1 -a "+ipXrnic)
	xOut, xErr := h.wait()
	took := time.Since(start)
	j.kill()
	c.stop(t)
	save(t, name+".xrnic.txt", []byte(xOut))
	cnt, err := drop.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bench rping ended after %.1f s: %v; %d of xrnic's frames dropped", took.Seconds(), xErr, cnt.DroppedInjected)
	if xErr == nil || !strings.Contains(xOut, "cma event RDMA_CM_EVENT_UNREACHABLE, error -110\n") {
		t.Errorf("bench rping's server, its peer gone after the REQ: %v\n%s", xErr, xOut)
	}
	if cnt.DroppedInjected != 16 {
		t.Errorf("xrnic sent %d frames, want the REP and its 15 retries", cnt.DroppedInjected)
	}
	// 16 tries 4.29 s apart: not before the last one's timeout.
	if min := 16 * (1 << 20) * 4096 * time.Nanosecond; took < min {
		t.Errorf("UNREACHABLE after %v, before the REP's 16 tries could time out (%v)", took, min)
	}
	var reqs int
	for _, f := range frames(t, c.path) {
		b := f.data
		if isRoCEv2(b) && len(b) >= mad.Size+4 {
			if _, m, err := mad.Parse(b[len(b)-4-mad.Size : len(b)-4]); err == nil && m.Attr() == mad.AttrREQ {
				reqs++
			}
		}
	}
	t.Logf("the guest sent its REQ %d times meanwhile", reqs)
	if reqs < 2 {
		t.Errorf("the guest sent %d REQs: want its retries while it heard nothing", reqs)
	}
}
