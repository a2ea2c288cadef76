// Reading the golden captures with gopacket's pcapgo.

package wire

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xrnic/xrnic/internal/testutil"
)

// goldenFiles are the captures ../shared/pcaps/README.md lists; all must be present.
var goldenFiles = []string{
	"rc_send", "rdma_write", "rdma_read", "atomic_fetch_add", "atomic_cmp_swap",
	"uc_send", "ud_send", "rdma_cm_rping", "rdma_cm_write_bw",
	"rdma_write_loss_retransmit", "host_peer_cm_req",
}

// readPcap returns the frames of an Ethernet pcap, read with gopacket's pcapgo.
func readPcap(t testing.TB, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open capture: %v", err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("%s: link type %v, want Ethernet", path, r.LinkType())
	}
	var frames [][]byte
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatalf("%s: frame %d: %v", path, len(frames)+1, err)
		}
		if ci.CaptureLength != ci.Length {
			t.Fatalf("%s: frame %d truncated by the capture (%d of %d bytes)", path, len(frames)+1, ci.CaptureLength, ci.Length)
		}
		frames = append(frames, data)
	}
}

// goldenPcaps returns every *.pcap in ../shared/pcaps by base name, failing when
// one of goldenFiles is missing.
func goldenPcaps(t testing.TB) map[string]string {
	t.Helper()
	dir := filepath.Join(testutil.SharedDir(t), "pcaps")
	paths, err := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, p := range paths {
		m[trimExt(filepath.Base(p))] = p
	}
	var missing []string
	for _, n := range goldenFiles {
		if _, ok := m[n]; !ok {
			missing = append(missing, n+".pcap")
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("golden captures missing from %s: %v", dir, missing)
	}
	return m
}

func trimExt(s string) string { return s[:len(s)-len(filepath.Ext(s))] }

// goldenFrames returns all frames of all golden captures, in a stable order.
func goldenFrames(t testing.TB) [][]byte {
	t.Helper()
	m := goldenPcaps(t)
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var all [][]byte
	for _, n := range names {
		all = append(all, readPcap(t, m[n])...)
	}
	return all
}
