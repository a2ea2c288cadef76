// What perftest prints, in its exact formats as of the version bench announces
// (6.06, tag v4.5-0.17, which Debian ships; perftest_parameters.h and
// perftest_parameters.c: ctx_print_test_info, print_report_bw,
// print_full_bw_report, print_report_lat, print_report_lat_duration,
// ctx_print_pingpong_data in perftest_communication.c), and the arithmetic that
// turns time stamps into those numbers. Time stamps are nanoseconds from the
// monotonic clock where perftest has CPU cycles.

package perftest

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

const (
	resultLine     = "---------------------------------------------------------------------------------------\n"
	resultFmt      = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	resultFmtG     = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	resultFmtLat   = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	resultFmtLatD  = " #bytes        #iterations       t_avg[usec]    tps average"
	reportFmt      = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f"
	reportFmtExt   = " %-7d    %d           %-7.6f            %-7.6f            %-7.6f"
	reportFmtLat   = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
	reportFmtLatD  = " %-7d       %d            %-7.2f        %-7.2f"
	waitingBanner  = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
	mibPerSec      = 0x100000  // MBS format factor: perftest's "MB" is 2^20 bytes
	gbitPerSec     = 125000000 // GBS format factor: bytes per Gb
	latMeasureTail = 2         // LAT_MEASURE_TAIL: the largest samples dropped
)

// Info is what the test information block shows beyond the parameters: values
// the device and the exchange settled. A plain value.
type Info struct {
	Device   string
	MTU      int // bytes
	GIDIndex int
	OutReads int
	Inline   int
}

// PrintTestInfo writes ctx_print_test_info's block.
func PrintTestInfo(w io.Writer, p *Params, in Info) {
	var b strings.Builder
	b.WriteString(resultLine)
	b.WriteString("                    ")
	fmt.Fprintf(&b, "%s ", p.Test.Verb)
	if p.Test.Verb == VerbAtomic {
		fmt.Fprintf(&b, "%s ", atomicNames[p.AtomicType])
	}
	if p.Test.Kind == BW {
		if p.Duplex {
			b.WriteString("Bidirectional ")
		}
		if p.PostList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	} else {
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	if p.UseEvent {
		fmt.Fprintf(&b, " Test with events. Using %s_comp0\n", in.Device)
	}
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", in.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", p.QPs, "IB")
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", p.Conn, onOff(p.UseSRQ))
	fmt.Fprintf(&b, " PCIe relax order: %s\n", "Unsupported")
	fmt.Fprintf(&b, " ibv_wr* API     : %s\n", "OFF")
	if !p.Server() || p.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", p.TxDepth)
	}
	if p.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", p.PostList)
	}
	if p.RecvPostList > 1 {
		fmt.Fprintf(&b, " Recv Post List  : %d\n", p.RecvPostList)
	}
	if p.Test.Verb.hasRecvComp() && (p.Server() || p.Duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", p.RxDepth)
	}
	if p.Test.Kind == BW {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", p.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", in.MTU)
	fmt.Fprintf(&b, " Link type       : %s\n", "Ethernet")
	fmt.Fprintf(&b, " GID index       : %d\n", in.GIDIndex)
	if p.Test.Verb != VerbRead && p.Test.Verb != VerbAtomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", in.Inline)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", in.OutReads)
	}
	fmt.Fprintf(&b, " rdma_cm QPs\t : %s\n", onOff(p.RDMACM))
	fmt.Fprintf(&b, " Data ex. method : %s", map[bool]string{false: "Ethernet", true: "rdma_cm"}[p.CommRDMACM])
	if p.RDMACM && p.TOS >= 0 {
		fmt.Fprintf(&b, " \tTOS    : %d", p.TOS)
	}
	if p.RDMACM && p.Server() {
		b.WriteString("\n" + resultLine)
		b.WriteString(" Waiting for client rdma_cm QP to connect\n")
		b.WriteString(" Please run the same command with the IB/RoCE interface IP")
	}
	b.WriteString("\n")
	b.WriteString(resultLine)
	io.WriteString(w, b.String())
}

// onOff is perftest's qp_state strings.
func onOff(v bool) string {
	if v {
		return "ON"
	}
	return "OFF"
}

// cHex formats v as C's "%#0<width>x": a 0x prefix counted in the width, and
// none for zero.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return "0x" + fmt.Sprintf("%0*x", max(width-2, 0), v)
}

// PrintDest writes ctx_print_pingpong_data's lines for one QP: side is "local"
// or "remote".
func PrintDest(w io.Writer, side string, verb Verb, d *Dest) {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	switch verb {
	case VerbRead:
		fmt.Fprintf(&b, " OUT %s", cHex(uint64(d.OutReads), 4))
		fallthrough
	case VerbWrite:
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	b.WriteString("\n GID: ")
	for i, g := range d.GID {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02d", g)
	}
	b.WriteString("\n")
	io.WriteString(w, b.String())
}

// PrintBWHeader writes the bandwidth table's header.
func PrintBWHeader(w io.Writer, gbits bool) {
	h := resultFmt
	if gbits {
		h = resultFmtG
	}
	io.WriteString(w, resultLine+h+"\n")
}

// PrintLatHeader writes the latency table's header.
func PrintLatHeader(w io.Writer, duration bool) {
	h := resultFmtLat
	if duration {
		h = resultFmtLatD
	}
	io.WriteString(w, resultLine+h+"\n")
}

// PrintResultLine writes the closing dashes.
func PrintResultLine(w io.Writer) { io.WriteString(w, resultLine) }

// BWLine formats one bandwidth result (print_full_bw_report): rem, when not nil,
// is added to my as the bidirectional total.
func BWLine(gbits bool, my BWReport, rem *BWReport) string {
	peak, avg, rate := my.Peak, my.Avg, my.MsgRate
	if rem != nil {
		peak += rem.Peak
		avg += rem.Avg
		rate += rem.MsgRate
	}
	f := reportFmt
	if avg < 0.1 && gbits {
		f = reportFmtExt
	}
	return fmt.Sprintf(f, my.Size, my.Iters, peak, avg, rate) + "\n"
}

// BWSamples are the time stamps of a bandwidth run: nanoseconds since the run's
// start at which each work request was posted and at which the completion
// covering it arrived (perftest's tposted and tcompleted). With NoPeak, only
// element 0 of each means anything: the start and the end.
type BWSamples struct {
	Posted, Completed []int64
}

// ComputeBW is print_report_bw's arithmetic: n messages of size bytes, completions
// signalled every cqMod.
func ComputeBW(s *BWSamples, size, n uint64, cqMod int, noPeak, gbits bool) BWReport {
	const unitsPerSec = 1e9
	ff := float64(mibPerSec)
	if gbits {
		ff = gbitPerSec
	}
	r := BWReport{Size: size, Iters: n}
	if n == 0 {
		return r
	}
	loc := uint64(0)
	if !noPeak {
		loc = n - 1
	}
	sum := float64(s.Completed[loc] - s.Posted[0])
	if sum <= 0 {
		sum = 1
	}
	r.Avg = float64(size) * float64(n) * unitsPerSec / (sum * ff)
	r.MsgRate = float64(n) * unitsPerSec / (sum * 1e6)
	if noPeak {
		return r
	}
	// perftest's cycles_t is unsigned: a stamp not yet taken (0) or a difference
	// that comes out negative is effectively infinite, never the minimum.
	opt := math.Inf(1)
	if d := s.Completed[0] - s.Posted[0]; d > 0 {
		opt = float64(d)
	}
	N := int(n)
	for i := 0; i < N; i++ {
		j0 := roundUp(i+1, cqMod) - 1
		for j := j0; j < N; j += cqMod {
			if d := s.Completed[j] - s.Posted[i]; d > 0 {
				opt = min(opt, float64(d)/float64(j-i+1))
			}
		}
		if N%cqMod != 0 {
			j := N - 1
			if d := s.Completed[j] - s.Posted[i]; d > 0 {
				opt = min(opt, float64(d)/float64(j-i+1))
			}
		}
	}
	if math.IsInf(opt, 1) {
		return r
	}
	r.Peak = float64(size) * unitsPerSec / (opt * ff)
	return r
}

func roundUp(v, a int) int {
	if v%a == 0 {
		return v
	}
	return a * (v/a + 1)
}

// LatReport is print_report_lat's result, in microseconds. A plain value.
type LatReport struct {
	Size                       uint64
	Iters                      uint64
	Min, Max, Typical, Avg, SD float64
	P99, P999                  float64
}

// ComputeLat is print_report_lat's arithmetic over the post time stamps of a
// latency run: the gaps between consecutive posts, divided by 2 for ping-pong
// tests (rtt), sorted, the two largest dropped. The standard deviation is the
// real one (perftest truncates each deviation to an integer first). sorted
// receives the sorted gaps in microseconds, for -H.
func ComputeLat(posted []int64, size, iters uint64, rtt bool) (r LatReport, unsorted, sorted []float64) {
	r.Size, r.Iters = size, iters
	q := 1000.0 // ns per usec
	if rtt {
		q *= 2
	}
	n := len(posted) - 1
	if n < latMeasureTail+1 {
		return r, nil, nil
	}
	d := make([]int64, n)
	unsorted = make([]float64, n)
	for i := range d {
		d[i] = posted[i+1] - posted[i]
		unsorted[i] = float64(d[i]) / q
	}
	slices.Sort(d)
	m := n - latMeasureTail
	var median float64
	if (m-1)%2 != 0 {
		median = float64(d[m/2]+d[m/2-1]) / 2
	} else {
		median = float64(d[m/2])
	}
	var sum float64
	sorted = make([]float64, m)
	for i := 0; i < m; i++ {
		sorted[i] = float64(d[i]) / q
		sum += sorted[i]
	}
	r.Avg = sum / float64(m)
	var v float64
	for _, x := range sorted {
		v += (r.Avg - x) * (r.Avg - x)
	}
	r.SD = math.Sqrt(v / float64(m))
	r.Min = float64(d[0]) / q
	r.Max = float64(d[m]) / q
	r.Typical = median / q
	r.P99 = float64(d[int(math.Ceil(float64(m)*0.99))]) / q
	r.P999 = float64(d[int(math.Ceil(float64(m)*0.999))]) / q
	return r, unsorted, sorted
}

// LatLine formats one latency result.
// scaled is r with its times multiplied by f (microseconds to cycles).
func (r LatReport) scaled(f float64) LatReport {
	r.Min, r.Max, r.Typical, r.Avg, r.SD, r.P99, r.P999 = r.Min*f, r.Max*f, r.Typical*f, r.Avg*f, r.SD*f, r.P99*f, r.P999*f
	return r
}

// CPUMHz is the processor's clock in MHz as /proc/cpuinfo states it (the first
// "cpu MHz" line), which perftest's -C counts cycles of.
func CPUMHz() (float64, error) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 {
				return f, nil
			}
		}
	}
	return 0, errors.New("no \"cpu MHz\" in /proc/cpuinfo")
}

func LatLine(r LatReport) string {
	return fmt.Sprintf(reportFmtLat, r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.SD, r.P99, r.P999) + "\n"
}

// LatDurLine formats a duration-mode latency result (print_report_lat_duration):
// iters exchanges in sampleNs nanoseconds.
func LatDurLine(size, iters uint64, sampleNs int64, rtt bool) string {
	lat, tps := latDuration(iters, sampleNs, rtt)
	return fmt.Sprintf(reportFmtLatD, size, iters, lat, tps) + "\n"
}

func latDuration(iters uint64, sampleNs int64, rtt bool) (lat, tps float64) {
	f := 1.0
	if rtt {
		f = 2
	}
	if iters == 0 || sampleNs <= 0 {
		return 0, 0
	}
	us := float64(sampleNs) / 1000
	return us / f / float64(iters), float64(iters) / (float64(sampleNs) / 1e9)
}

// PrintSamples writes -U and -H lists: "#, usec" then "i, value" lines, values
// as C's %g prints them.
func PrintSamples(w io.Writer, v []float64) {
	var b strings.Builder
	b.WriteString("#, usec\n")
	for i, x := range v {
		fmt.Fprintf(&b, "%d, %.6g\n", i+1, x)
	}
	io.WriteString(w, b.String())
}

// testName is the "test" of the JSON report: "RDMA_Write_BW_Test".
func testName(p *Params) string {
	s := p.Test.Verb.String() + "_"
	if p.Test.Verb == VerbAtomic {
		s += atomicNames[p.AtomicType] + "_"
	}
	if p.Test.Kind == BW {
		if p.Duplex {
			s += "Bidirectional_"
		}
		s += "BW_"
	} else {
		s += "Latency_"
	}
	return s + "Test"
}

// jsonTestInfo is write_test_info_to_file.
func jsonTestInfo(p *Params, in Info) string {
	var b strings.Builder
	b.WriteString("\"test_info\": {\n")
	fmt.Fprintf(&b, "\"test\": \"%s\",\n", testName(p))
	if p.UseEvent {
		fmt.Fprintf(&b, "\"Test with events\": \"Using_%s_comp0\",\n", in.Device)
	}
	fmt.Fprintf(&b, "\"Dual_port\": \"%s\",\n\"Device\": \"%s\",\n", "OFF", in.Device)
	fmt.Fprintf(&b, "\"Number_of_qps\": %d,\n\"Transport_type\": \"%s\",\n", p.QPs, "IB")
	fmt.Fprintf(&b, "\"Connection_type\": \"%s\",\n\"Using_SRQ\": \"%s\",\n", p.Conn, onOff(p.UseSRQ))
	fmt.Fprintf(&b, " \"PCIe_relax_order\": \"%s\",\n", "Unsupported")
	fmt.Fprintf(&b, "\"ibv_wr_API\": \"%s\",\n", "OFF")
	if !p.Server() || p.Duplex {
		fmt.Fprintf(&b, "\"TX_depth\": %d,\n", p.TxDepth)
	}
	if p.PostList > 1 {
		fmt.Fprintf(&b, "\"Post_List\": %d,\n", p.PostList)
	}
	if p.RecvPostList > 1 {
		fmt.Fprintf(&b, "\"Recv_Post_List\": %d,\n", p.RecvPostList)
	}
	if p.Test.Verb.hasRecvComp() && (p.Server() || p.Duplex) {
		fmt.Fprintf(&b, "\"RX_depth\": %d,\n", p.RxDepth)
	}
	if p.Test.Kind == BW {
		fmt.Fprintf(&b, "\"CQ_Moderation\": %d,\n", p.CQMod)
	}
	fmt.Fprintf(&b, "\"Mtu\": %d,\n", in.MTU)
	fmt.Fprintf(&b, "\"Link_type\": \"%s\",\n", "Ethernet")
	fmt.Fprintf(&b, "\"GID_index\": %d,\n", in.GIDIndex)
	if p.Test.Verb != VerbRead && p.Test.Verb != VerbAtomic {
		fmt.Fprintf(&b, "\"Max_inline_data\": %d,\n", in.Inline)
	} else {
		fmt.Fprintf(&b, "\"Outstand_reads\": %d,\n", in.OutReads)
	}
	fmt.Fprintf(&b, "\"rdma_cm_QPs\": \"%s\",\n", "OFF")
	fmt.Fprintf(&b, "\"Use_ROCm_memory\": \"%s\",\n", "OFF")
	fmt.Fprintf(&b, "\"Use_MUSA_memory\": \"%s\",\n", "OFF")
	fmt.Fprintf(&b, "\"Data_ex_method\": \"%s\"", "Ethernet")
	b.WriteString("\n},\n")
	return b.String()
}

// JSONBW is the --out_json file of a bandwidth result.
func JSONBW(p *Params, in Info, my BWReport, rem *BWReport) string {
	peak, avg, rate := my.Peak, my.Avg, my.MsgRate
	if rem != nil {
		peak += rem.Peak
		avg += rem.Avg
		rate += rem.MsgRate
	}
	f := "\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"BW_peak\": %.2f,\n\"BW_average\": %.2f,\n\"MsgRate\": %.6f"
	if avg < 0.1 && p.ReportGbits {
		f = "\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"BW_peak\": %.6f,\n\"BW_average\": %.6f,\n\"MsgRate\": %.6f"
	}
	return "{\n" + jsonTestInfo(p, in) + "\"results\": {\n" + fmt.Sprintf(f, my.Size, my.Iters, peak, avg, rate) + "\n}\n}\n"
}

// JSONLat is the --out_json file of a latency result.
func JSONLat(p *Params, in Info, r LatReport) string {
	f := "\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"t_min\": %.2f,\n\"t_max\": %.2f,\n\"t_typical\": %.2f,\n\"t_avg\": %.2f,\n\"t_stdev\": %.2f,\n\"percentile_99\": %.2f,\n\"percentile_99.9\": %.2f"
	return "{\n" + jsonTestInfo(p, in) + "\"results\": {\n" +
		fmt.Sprintf(f, r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.SD, r.P99, r.P999) + "\n}\n}\n"
}

// JSONLatDur is the --out_json file of a duration-mode latency result.
func JSONLatDur(p *Params, in Info, size, iters uint64, sampleNs int64, rtt bool) string {
	lat, tps := latDuration(iters, sampleNs, rtt)
	return "{\n" + jsonTestInfo(p, in) + "\"results\": {\n" +
		fmt.Sprintf("\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"t_avg\": %.2f,\n\"tps_average\": %.2f", size, iters, lat, tps) + "\n}\n}\n"
}
