// Prometheus metrics: a collector that reads the daemon's snapshot at each scrape.
//
// The port's counters keep rxe's names (rxe_hw_counters.c): xrnic_<name>_total
// with labels device and port. The engine loop's counters, not rxe's, are
// xrnic_engine_<name>_total with label device. The link's, the XDP program's, the QPs' rings and
// the CQs' statistics, and the bench sessions, follow under their own names.

package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xrnic/xrnic/verbs"
)

// counterHelp explains each engine counter; the names are rxe's.
var counterHelp = map[string]string{
	"sent_pkts":              "Frames handed to the link.",
	"rcvd_pkts":              "Valid RoCEv2 packets received for a QP.",
	"duplicate_request":      "Requests the responder had already executed (duplicate PSN).",
	"out_of_seq_request":     "Requests past a PSN gap (NAK sequence error sent).",
	"rcvd_rnr_err":           "RNR NAKs the requester received.",
	"send_rnr_err":           "RNR NAKs the responder sent.",
	"rcvd_seq_err":           "NAK sequence errors the requester received.",
	"ack_deferred":           "ACKs merged into a later one.",
	"retry_exceeded_err":     "Work requests failed because retry_cnt ran out.",
	"retry_rnr_exceeded_err": "Work requests failed because rnr_retry ran out.",
	"completer_retry_err":    "Go-back-N retransmissions started.",
	"send_err":               "Frames the link refused or dropped.",
	"link_downed":            "Link errors.",
	"rdma_sends":             "Send work requests completed successfully.",
	"rdma_recvs":             "Receive work requests completed successfully.",
	"rcvd_malformed":         "Frames the parser rejected.",
	"rcvd_bad_icrc":          "Frames whose ICRC did not match.",
	"rcvd_unknown_qp":        "Packets for a QPN with no QP.",
	"rcvd_bad_state":         "Packets a QP could not take in its state or for its transport.",
	"rcvd_bad_pkey":          "Packets with a P_Key mismatch.",
	"rcvd_bad_qkey":          "UD packets with a Q_Key mismatch.",
	"rcvd_bad_addr":          "Packets whose addresses were not the QP's.",
	"rcvd_dropped":           "UC/UD messages dropped (lost packet, no receive WQE, bad length).",
	"rcvd_bad_ack":           "Responses the completer could not use.",
	"tx_dropped":             "Responses dropped because the response queue was full (the transmit ring behind it stayed full).",
	"cq_overflow":            "Completions a full CQ refused.",
	"events_dropped":         "Asynchronous events dropped because the handler fell behind.",
	"retransmitted_pkts":     "Request packets sent again (timeout or NAK).",
	"send_rnr_dropped":       "RNR NAKs not sent because the response queue was full.",
	"duplicate_read_limited": "Duplicate READs left unanswered: past the replay budget.",
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("xrnic_"+name, help, labels, nil)
}

// engineHelp explains each engine loop counter; these are not rxe's.
var engineHelp = map[string]string{
	"engine_loops":        "Passes of the engine loop.",
	"engine_rx_polls":     "Reads of the link.",
	"engine_rx_batches":   "Reads of the link that returned frames.",
	"engine_rx_frames":    "Frames the reads of the link returned.",
	"engine_tx_batches":   "Calls that hand the link frames (WriteBatch, or SendTx of the buffers an AF_XDP link lends).",
	"engine_tx_frames":    "Frames the link took.",
	"engine_idle_waits":   "Waits of the idle engine for frames, a doorbell, a control operation or a timer.",
	"engine_timers_fired": "Retransmit and RNR timers that fired.",
	"engine_loopback":     "Frames to the device's own address, taken to its receive path, not the link.",
}

// collector reads the daemon at each scrape. Safe for concurrent scrapes.
type collector struct {
	d        *daemon
	counters [verbs.NumCounters]*prometheus.Desc
	engine   [verbs.NumEngineCounters]*prometheus.Desc

	info, portState, up                      *prometheus.Desc
	linkRx, linkRxBytes, linkTx, linkTxBytes *prometheus.Desc
	linkRxDrop, linkTxDrop, linkTxErr        *prometheus.Desc
	xdpSeen, xdpRedir, xdpPass, xdpBad       *prometheus.Desc
	xdpUnsteered                             *prometheus.Desc
	objects, qps                             *prometheus.Desc
	sqOut, rqPosted                          *prometheus.Desc
	cqQueued, cqComp, cqPolled, cqLost       *prometheus.Desc
	sessions, sessionsEnded                  *prometheus.Desc
}

func newCollector(d *daemon) *collector {
	c := &collector{d: d}
	for i := range c.counters {
		n := verbs.Counter(i).String()
		h := counterHelp[n]
		if h == "" {
			h = "Engine counter " + n + "."
		}
		c.counters[i] = desc(n+"_total", h+" (rxe hw counter "+n+")", "device", "port")
	}
	for i := range c.engine {
		n := verbs.EngineCounter(i).String()
		h := engineHelp[n]
		if h == "" {
			h = "Engine loop counter " + n + "."
		}
		c.engine[i] = desc(n+"_total", h+" (engine loop, not an rxe counter)", "device")
	}
	dl, il := []string{"device"}, []string{"device", "interface", "link"}
	c.up = desc("up", "1 when the daemon could read its device, else 0.", "device")
	c.info = desc("device_info", "The device, its interface, link kind and XDP mode; always 1.", "device", "interface", "link", "xdp_mode")
	c.portState = desc("port_state", "Port state as enum ibv_port_state (1 DOWN, 4 ACTIVE).", "device", "port")
	c.linkRx = desc("link_rx_frames_total", "Frames the UDP link received (the AF_XDP link counts none).", il...)
	c.linkRxBytes = desc("link_rx_bytes_total", "Bytes the UDP link received.", il...)
	c.linkTx = desc("link_tx_frames_total", "Frames the UDP link sent.", il...)
	c.linkTxBytes = desc("link_tx_bytes_total", "Bytes the UDP link sent.", il...)
	c.linkRxDrop = desc("link_rx_dropped_total", "Frames the link received and dropped (AF_XDP: XDP_STATISTICS drops included).", il...)
	c.linkTxDrop = desc("link_tx_dropped_total", "Frames the link took and did not send.", il...)
	c.linkTxErr = desc("link_tx_errors_total", "Frames the kernel refused to send.", il...)
	xl := []string{"device", "interface"}
	c.xdpSeen = desc("xdp_seen_total", "Frames the XDP program looked at.", xl...)
	c.xdpRedir = desc("xdp_redirected_total", "RoCEv2 frames the XDP program redirected to the AF_XDP socket.", xl...)
	c.xdpPass = desc("xdp_passed_total", "Frames the XDP program passed to the kernel.", xl...)
	c.xdpBad = desc("xdp_malformed_total", "Frames the XDP program found malformed.", xl...)
	c.xdpUnsteered = desc("xdp_unsteered_total", "RoCEv2 frames passed to the kernel, lost, for want of an AF_XDP socket at their receive queue.", xl...)
	c.objects = desc("objects", "Objects on the device by kind (pd, mr, cq, qp, srq, ah).", "device", "kind")
	c.qps = desc("qps", "QPs by type and state.", "device", "type", "state")
	c.sqOut = desc("qp_sq_outstanding", "Send work requests posted and not yet completed.", "device", "qpn")
	c.rqPosted = desc("qp_rq_posted", "Receive work requests posted and not yet consumed.", "device", "qpn")
	c.cqQueued = desc("cq_queued", "Completions waiting to be polled.", "device", "cqn")
	c.cqComp = desc("cq_completions_total", "Completions queued on the CQ.", "device", "cqn")
	c.cqPolled = desc("cq_polled_total", "Completions polled from the CQ.", "device", "cqn")
	c.cqLost = desc("cq_lost_total", "Completions the CQ refused (overflow).", "device", "cqn")
	c.sessions = desc("bench_sessions", "Bench sessions running.", dl...)
	c.sessionsEnded = desc("bench_sessions_ended_total", "Bench sessions that ended, by result.", "device", "result")
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.counters {
		ch <- d
	}
	for _, d := range c.engine {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.info, c.portState, c.up, c.linkRx, c.linkRxBytes, c.linkTx, c.linkTxBytes,
		c.linkRxDrop, c.linkTxDrop, c.linkTxErr, c.xdpSeen, c.xdpRedir, c.xdpPass, c.xdpBad, c.xdpUnsteered, c.objects, c.qps,
		c.sqOut, c.rqPosted, c.cqQueued, c.cqComp, c.cqPolled, c.cqLost, c.sessions, c.sessionsEnded} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	dev := c.d.dev.Name()
	s, err := c.d.snapshot()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0, dev)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1, dev)
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v int, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), l...)
	}
	port := strconv.Itoa(s.Port)
	for i, n := range s.Counters {
		counter(c.counters[i], n.Value, dev, port)
	}
	for i, n := range s.Engine {
		if i < len(c.engine) {
			counter(c.engine[i], n.Value, dev)
		}
	}
	gauge(c.info, 1, dev, s.Interface, s.Link, s.XDPMode)
	gauge(c.portState, int(c.d.dev.QueryPort().State), dev, port)

	ls, il := s.LinkStats, []string{dev, s.Interface, s.Link}
	if s.Link != "af_xdp" {
		counter(c.linkRx, ls.RxFrames, il...)
		counter(c.linkRxBytes, ls.RxBytes, il...)
		counter(c.linkTx, ls.TxFrames, il...)
		counter(c.linkTxBytes, ls.TxBytes, il...)
	}
	counter(c.linkRxDrop, ls.RxDropped, il...)
	counter(c.linkTxDrop, ls.TxDropped, il...)
	counter(c.linkTxErr, ls.TxErrors, il...)
	if x := s.XDP; x != nil {
		counter(c.xdpSeen, x.Seen, dev, s.Interface)
		counter(c.xdpRedir, x.Redirected, dev, s.Interface)
		counter(c.xdpPass, x.Passed, dev, s.Interface)
		counter(c.xdpBad, x.Malformed, dev, s.Interface)
		counter(c.xdpUnsteered, x.Unsteered, dev, s.Interface)
	}

	r := &s.Resources
	for _, o := range []struct {
		kind string
		n    int
	}{{"pd", r.PDs}, {"mr", len(r.MRs)}, {"cq", len(r.CQs)}, {"qp", len(r.QPs)}, {"srq", r.SRQs}, {"ah", r.AHs}} {
		gauge(c.objects, o.n, dev, o.kind)
	}
	type ts struct{ t, s string }
	byState := map[ts]int{}
	for _, q := range r.QPs {
		byState[ts{q.Type.String(), q.State.String()}]++
		qpn := strconv.FormatUint(uint64(q.QPN), 10)
		gauge(c.sqOut, q.SQOutstanding, dev, qpn)
		if !q.SRQ {
			gauge(c.rqPosted, q.RQPosted, dev, qpn)
		}
	}
	for k, n := range byState {
		gauge(c.qps, n, dev, k.t, k.s)
	}
	for _, q := range r.CQs {
		cqn := strconv.FormatUint(uint64(q.CQN), 10)
		gauge(c.cqQueued, q.Queued, dev, cqn)
		counter(c.cqComp, q.Stats.Completions, dev, cqn)
		counter(c.cqPolled, q.Stats.Polled, dev, cqn)
		counter(c.cqLost, q.Stats.Lost, dev, cqn)
	}
	gauge(c.sessions, len(s.Sessions), dev)
	counter(c.sessionsEnded, s.Ended[0], dev, "ok")
	counter(c.sessionsEnded, s.Ended[1], dev, "failed")
}

// metricsMaxConns bounds the metrics port's open connections (a scraper needs
// one); past it, new ones wait in the listen backlog.
const metricsMaxConns = 16

// newMetricsHTTP is the metrics port's server and listener. Any local user can
// reach the port, so its connections are bounded in number and in how long each
// may sit idle or trickle a request or the read of a reply.
func newMetricsHTTP(ln net.Listener, h http.Handler) (*http.Server, net.Listener) {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}, netutil.LimitListener(ln, metricsMaxConns)
}

// metricsServer serves /metrics until stop.
type metricsServer struct {
	srv *http.Server
}

// serveMetrics starts RoutineMetrics: an HTTP server for /metrics on ln.
func (d *daemon) serveMetrics(ln net.Listener, wg *sync.WaitGroup) *metricsServer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(d), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv, ln := newMetricsHTTP(ln, mux)
	m := &metricsServer{srv: srv}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.lg.printf("RoutineMetrics started on %v", ln.Addr())
		defer d.lg.printf("RoutineMetrics stopped")
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.lg.printf("metrics: %v", err)
		}
	}()
	return m
}

// stop ends the server, letting scrapes in progress finish for a moment.
func (m *metricsServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		m.srv.Close()
	}
}
