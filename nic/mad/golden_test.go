package mad

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/wire"
)

// cmFrame is one CM MAD of a golden capture: its frame number (from 1) and the
// MAD.
type cmFrame struct {
	n   int
	mad []byte
}

// goldenCM returns the CM MADs of a capture: UD SENDs to QP1.
func goldenCM(t *testing.T, name string) (string, []cmFrame) {
	t.Helper()
	path := filepath.Join(testutil.SharedDir(t), "pcaps", name)
	var out []cmFrame
	for i, f := range testutil.ReadPcap(t, path) {
		var p wire.Packet
		if err := wire.Parse(f, &p); err != nil {
			t.Fatalf("%s frame %d: %v", name, i+1, err)
		}
		if p.BTH.DestQPN() == 1 {
			out = append(out, cmFrame{i + 1, p.Payload})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no CM MADs", name)
	}
	return path, out
}

// tsharkFields runs tshark on path and returns, per frame number, the values of
// fields (as tshark prints them).
func tsharkFields(t *testing.T, path string, fields []string) map[int][]string {
	t.Helper()
	bin := testutil.RequireCommand(t, "tshark")
	args := []string{"--disable-protocol", "rpcordma", "-r", path, "-Y", "infiniband.mad", "-T", "fields",
		"-E", "separator=/t", "-e", "frame.number"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	res := map[int][]string{}
	for line := range strings.Lines(string(out)) {
		cols := strings.Split(strings.TrimRight(line, "\n"), "\t")
		n, err := strconv.Atoi(cols[0])
		if err != nil {
			t.Fatalf("tshark line %q", line)
		}
		res[n] = cols[1:]
	}
	return res
}

// check compares our values with tshark's for the fields tshark shows.
func check(t *testing.T, what string, frame int, tshark []string, fields []string, ours []uint64) {
	t.Helper()
	for i, s := range tshark {
		if s == "" {
			t.Errorf("%s frame %d: tshark shows no %s", what, frame, fields[i])
			continue
		}
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("%s frame %d: tshark's %s = %q", what, frame, fields[i], s)
		}
		if v != ours[i] {
			t.Errorf("%s frame %d: %s = %#x, tshark says %#x", what, frame, fields[i], ours[i], v)
		}
	}
}

// TestGoldenCMMADs parses every CM MAD of the rdma_cm captures (rping,
// ib_write_bw -R) and a REJ for timeout, checks the fields against Wireshark's
// dissector field by field, and re-encodes each message to the same bytes. Not
// compared: the primary path's flow label and packet rate, which Wireshark 4.0
// reads from other bits than ib_cm writes them to (ibta_vol1_c12.h: the flow
// label is the 20 high bits of the word at CM data byte 88, the rate the 6 low
// bits of byte 91); the byte-exact re-encoding covers them.
func TestGoldenCMMADs(t *testing.T) {
	fields := map[AttrID][]string{
		AttrREQ: {"infiniband.cm.req.serviceid", "infiniband.cm.req.localcaguid", "infiniband.cm.req.localqkey",
			"infiniband.cm.req.localqpn", "infiniband.cm.req.responderres", "infiniband.cm.req.initdepth",
			"infiniband.cm.req.remoteresptout", "infiniband.cm.req.transpsvctype", "infiniband.cm.req.startpsn",
			"infiniband.cm.req.localresptout", "infiniband.cm.req.retrcount", "infiniband.cm.req.pkey",
			"infiniband.cm.req.pppmtu", "infiniband.cm.req.rnrretrcount", "infiniband.cm.req.maxcmretr",
			"infiniband.cm.req.srq", "infiniband.cm.req.prim_tfcclass",
			"infiniband.cm.req.prim_hoplim", "infiniband.cm.req.prim_localacktout", "infiniband.cm.req.ip_cm.sport"},
		AttrREP: {"infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqkey", "infiniband.cm.rep.localqpn",
			"infiniband.cm.rep.startpsn", "infiniband.cm.rep.respres", "infiniband.cm.rep.initdepth",
			"infiniband.cm.rep.tgtackdelay", "infiniband.cm.rep.failoveracc", "infiniband.cm.rep.rnrretrcount",
			"infiniband.cm.rep.srq", "infiniband.cm.rep.localcaguid"},
		AttrRTU:  {"infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid"},
		AttrREJ:  {"infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid", "infiniband.cm.rej.msgrej", "infiniband.cm.rej.rejinfolen", "infiniband.cm.rej.reason"},
		AttrDREQ: {"infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid", "infiniband.cm.req.remoteqpneecn"},
		AttrDREP: {"infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid"},
	}
	seen := map[AttrID]int{}
	for _, name := range []string{"rdma_cm_rping.pcap", "rdma_cm_write_bw.pcap", "host_peer_cm_req.pcap"} {
		path, frames := goldenCM(t, name)
		ts := map[AttrID]map[int][]string{}
		for a, f := range fields {
			ts[a] = tsharkFields(t, path, f)
		}
		for _, f := range frames {
			h, m, err := Parse(f.mad)
			if err != nil {
				t.Fatalf("%s frame %d: %v", name, f.n, err)
			}
			seen[h.AttrID]++
			what := fmt.Sprintf("%s %v", name, h.AttrID)
			var ours []uint64
			switch m := m.(type) {
			case *REQ:
				cma, err := ParseCMAHeader(m.PrivateData[:])
				if err != nil {
					t.Fatalf("%s frame %d: %v", what, f.n, err)
				}
				if ps, port, ok := SplitServiceID(m.ServiceID); !ok || ps != PortSpaceTCP || port == 0 {
					t.Errorf("%s frame %d: service ID %#x is not rdma_cm's TCP port space", what, f.n, m.ServiceID)
				}
				if cma.Src != netip.MustParseAddr("192.0.2.11") || cma.Dst.IsUnspecified() {
					t.Errorf("%s frame %d: rdma_cm header %+v", what, f.n, cma)
				}
				if g := netip.AddrFrom16(m.Primary.LocalGID).Unmap(); g != cma.Src {
					t.Errorf("%s frame %d: primary local GID %v, rdma_cm source %v", what, f.n, g, cma.Src)
				}
				p := &m.Primary
				ours = []uint64{m.ServiceID, m.LocalCAGUID, uint64(m.LocalQKey), uint64(m.LocalQPN),
					uint64(m.ResponderResources), uint64(m.InitiatorDepth), uint64(m.RemoteCMResponseTimeout),
					uint64(m.TransportServiceType), uint64(m.StartingPSN), uint64(m.LocalCMResponseTimeout),
					uint64(m.RetryCount), uint64(m.PKey), uint64(m.PathMTU), uint64(m.RNRRetryCount),
					uint64(m.MaxCMRetries), uint64(b2u(m.SRQ)), uint64(p.TrafficClass),
					uint64(p.HopLimit), uint64(p.LocalACKTimeout), uint64(cma.SrcPort)}
			case *REP:
				ours = []uint64{uint64(m.RemoteCommID), uint64(m.LocalQKey), uint64(m.LocalQPN), uint64(m.StartingPSN),
					uint64(m.ResponderResources), uint64(m.InitiatorDepth), uint64(m.TargetACKDelay),
					uint64(m.FailoverAccepted), uint64(m.RNRRetryCount), uint64(b2u(m.SRQ)), m.LocalCAGUID}
			case *RTU:
				ours = []uint64{uint64(m.LocalCommID), uint64(m.RemoteCommID)}
			case *REJ:
				ours = []uint64{uint64(m.LocalCommID), uint64(m.RemoteCommID), uint64(m.MessageRejected),
					uint64(m.RejectedInfoLength), uint64(m.Reason)}
			case *DREQ:
				ours = []uint64{uint64(m.LocalCommID), uint64(m.RemoteCommID), uint64(m.RemoteQPN)}
			case *DREP:
				ours = []uint64{uint64(m.LocalCommID), uint64(m.RemoteCommID)}
			default:
				t.Fatalf("%s frame %d: unexpected %T", name, f.n, m)
			}
			check(t, what, f.n, ts[h.AttrID][f.n], fields[h.AttrID], ours)

			// Encoding the parsed message gives the captured MAD back.
			again := make([]byte, Size)
			Marshal(again, h.TID, m)
			if !bytes.Equal(again, f.mad[:Size]) {
				for i := range again {
					if again[i] != f.mad[i] {
						t.Errorf("%s frame %d: re-encoded byte %d (CM data %d) is %#02x, captured %#02x",
							what, f.n, i, i-HeaderLen, again[i], f.mad[i])
						break
					}
				}
			}
		}
	}
	for _, a := range []AttrID{AttrREQ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrREJ} {
		if seen[a] == 0 {
			t.Errorf("no %v in the captures", a)
		}
	}
	t.Logf("CM MADs checked: %v", seen)
}
