// Reading the golden captures with gopacket's pcapgo.

package wire

import (
	"path/filepath"
	"sort"
	"testing"

	"github.com/xrnic/xrnic/internal/testutil"
)

// goldenFiles are the captures ../shared/pcaps/README.md lists; all must be present.
var goldenFiles = []string{
	"rc_send", "rdma_write", "rdma_read", "atomic_fetch_add", "atomic_cmp_swap",
	"uc_send", "ud_send", "rdma_cm_rping", "rdma_cm_write_bw",
	"rdma_write_loss_retransmit", "host_peer_cm_req",
}

// readPcap returns the frames of an Ethernet pcap (testutil.ReadPcap).
func readPcap(t testing.TB, path string) [][]byte { return testutil.ReadPcap(t, path) }

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
