package link

import (
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/testenv"
)

// devMcast returns the multicast MACs of e's interface (the kernel's
// dev_mcast list, as `ip maddr` shows it), hex without colons.
func devMcast(t *testing.T, e *testenv.Endpoint) string {
	t.Helper()
	var s string
	if err := e.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/dev_mcast")
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[1] == e.Name {
				s += f[4] + " "
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAFXDPMulticast: a group the engine joins puts its MAC in the
// interface's filter (rxe_mcast_add: ip_mc_join_group, dev_mc_add) until it
// leaves, and a RoCEv2 frame to the group reaches the AF_XDP socket.
func TestAFXDPMulticast(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	la := openOn(t, &p.A, KindAFXDP).(*AFXDP)
	lb := openOn(t, &p.B, KindAFXDP)
	groups := []struct {
		ip  netip.Addr
		mac string
	}{{netip.MustParseAddr("239.1.2.3"), "01005e010203"}, {netip.MustParseAddr("ff0e::1:2345"), "333300012345"}}
	for _, g := range groups {
		if err := la.JoinGroup(g.ip); err != nil {
			t.Fatalf("JoinGroup %v: %v", g.ip, err)
		}
		if m := devMcast(t, &p.A); !strings.Contains(m, g.mac) {
			t.Fatalf("%s's multicast MACs %q lack %s", p.A.Name, m, g.mac)
		}
		f := wire.FrameFields{
			Ethernet:  wire.EthernetFields{Dst: wire.MAC(must(hex.DecodeString(g.mac))), Src: wire.MAC(p.B.MAC)},
			IPVersion: 4,
			IPv4:      wire.IPv4Fields{Flags: wire.IPv4FlagDF, TTL: 64, Src: p.B.IPv4, Dst: g.ip},
			UDP:       wire.UDPFields{SrcPort: 50000},
			IB: wire.IBFields{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQPN: 0xFFFFFF},
				DETH: wire.DETHFields{QKey: 7, SrcQPN: 0x11}, Payload: []byte("group")},
		}
		if g.ip.Is6() {
			f.IPVersion = 6
			f.IPv6 = wire.IPv6Fields{HopLimit: 64, Src: p.B.IPv6, Dst: g.ip}
		}
		b := make([]byte, f.Len())
		n, err := f.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		sendAll(t, lb, [][]byte{b[:n]})
		got := readN(t, la, 1)
		var pk wire.Packet
		if len(got) != 1 || wire.ParseAndVerify(got[0], &pk) != nil || pk.BTH.DestQPN() != 0xFFFFFF {
			t.Fatalf("%v: the group's frame did not reach the socket intact: %x", g.ip, got)
		}
	}
	for _, g := range groups {
		if err := la.LeaveGroup(g.ip); err != nil {
			t.Fatalf("LeaveGroup %v: %v", g.ip, err)
		}
		if m := devMcast(t, &p.A); strings.Contains(m, g.mac) {
			t.Fatalf("%s's multicast MACs %q still have %s", p.A.Name, m, g.mac)
		}
	}
	if err := la.JoinGroup(netip.MustParseAddr("192.0.2.1")); err == nil {
		t.Fatal("joined a unicast address")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
