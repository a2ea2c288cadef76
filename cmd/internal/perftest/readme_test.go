package perftest

import (
	"os"
	"strings"
	"testing"

	flag "github.com/spf13/pflag"
)

// perftestOptions are the long options of perftest 6.06's parser
// (perftest_parameters.c, long_options).
var perftestOptions = []string{
	"CPU-freq", "MGID", "aes_block_size", "aes_xts", "all", "atomic_type", "bidirectional",
	"burst_size", "client", "comm_rdma_cm", "connection", "cpu_util", "cq-mod", "credentials_path",
	"data_enc_key_app_path", "data_enc_keys_number", "dest_ip", "dest_mac", "dest_port",
	"disable_pcie_relaxed", "dlid", "dont_xchg_versions", "dualport", "duration", "encrypt_on_tx",
	"ethertype", "events", "flow_label", "flows", "flows_burst", "force-link", "gid-index", "help",
	"hop_limit", "ib-dev", "ib-port", "inline_recv", "inline_size", "ipv6", "iters", "kek_path",
	"latency_gap", "limit_bw", "limit_msgrate", "local_ip", "local_mac", "local_port",
	"log_active_dci_streams", "log_dci_streams", "mac_fwd", "margin", "mcg", "mmap", "mmap-offset",
	"mr_per_qp", "mtu", "noPeak", "odp", "out_json", "out_json_file", "output", "outs",
	"perform_warm_up", "pkey_index", "port", "post_list", "promiscuous", "qp", "qp-timeout",
	"rate_limit", "rate_limit_type", "rate_units", "raw_ipv6", "raw_mcast", "rdma_cm",
	"recv_post_list", "remote_ip", "remote_mac", "remote_port", "reply_every", "report-both",
	"report-counters", "report-cycles", "report-histogrm", "report-per-port", "report-unsorted",
	"report_gbits", "retry_count", "reversed", "run_infinitely", "rx-depth", "server", "sig_before",
	"size", "sl", "sniffer", "source_ip", "source_mac", "source_port", "tclass", "tcp", "tos",
	"tx-depth", "typical_pkt_size", "use-srq", "use_cuda", "use_cuda_bus_id", "use_cuda_dmabuf",
	"use_hugepages", "use_old_post_send", "use_ooo", "use_rocm", "use_rss", "vector", "version",
	"vlan_en", "vlan_pcp", "wait_destroy",
}

// TestReadmeOptionTable: bench knows every perftest option (accepted with its
// meaning, or refused with a reason), and README's table lists each one with
// the status the code gives it.
func TestReadmeOptionTable(t *testing.T) {
	usage := map[string]string{}
	for _, tt := range Tests {
		newFlagSet(&Params{Test: tt}).VisitAll(func(f *flag.Flag) { usage[f.Name] = f.Usage })
	}
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for l := range strings.Lines(string(b)) {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(l, " | ")
		opt := strings.Trim(cells[0], "| `")
		if _, long, ok := strings.Cut(opt, ", "); ok {
			opt = long
		}
		if len(cells) >= 3 && strings.HasPrefix(opt, "--") {
			rows[strings.TrimPrefix(opt, "--")] = cells[2]
		}
	}
	for _, o := range perftestOptions {
		u, ok := usage[o]
		if !ok {
			t.Errorf("perftest's --%s: bench does not know it", o)
			continue
		}
		status, ok := rows[o]
		if !ok {
			t.Errorf("perftest's --%s: no row in README's option table", o)
			continue
		}
		if refused := strings.HasPrefix(u, "refused: "); refused != (status == "refused") {
			t.Errorf("--%s: README says %q, the code %q", o, status, u)
		}
	}
}
