//go:build interop

package interop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
)

// The rxe-vm harness's fixed layout for `net-up host` (its README): the guest
// (vm "a", 192.0.2.11) is bridged in netns rxevm-a to veth va0, whose peer vb0
// (192.0.2.2) in netns rxevm-b is the seat for xrnic.
const (
	nsGuest   = "rxevm-a"
	nsXrnic   = "rxevm-b"
	ifXrnic   = "vb0"
	ifCapture = "va0" // the guest side of the veth: no XDP program there, so tcpdump sees both ways
	ipXrnic   = "192.0.2.2"
	ipGuest   = "192.0.2.11"
	// ipBroadcast is the bridge's /24 broadcast (rxe-vm net-up).
	ipBroadcast = "192.0.2.255"
	guestDev    = "rxe0"
	vmName      = "a"
)

// Step timeouts: every external step is bounded, so the suite never hangs.
const (
	buildTimeout = 10 * time.Minute
	bootTimeout  = 3 * time.Minute
	runTimeout   = 3 * time.Minute
	shortTimeout = 30 * time.Second
)

// Needed on the host: qemu and the image builder for the guest, tcpdump for the
// captures, python3 for the independent ICRC checker.
var hostCommands = []string{"qemu-system-x86_64", "mmdebstrap", "cpio", "bc", "tcpdump", "python3", "ip", "gcc",
	"ibv_rc_pingpong", "ib_write_bw", "rping"}

// suite is what TestMain prepared; nil fields mean it could not.
var suite struct {
	rxeVM     string // the rxe-vm script
	icrcCheck string // icrc-check.py
	cache     string // RXE_VM_CACHE
	bench     string // bench, built for this run
	lib       string // xrnic's libibverbs.so.1 and librdmacm.so.1 (clib/), built for this run
	slowConn  string // testdata/connect_delay.c, built for this run: LD_PRELOAD it for a late rdma_connect
	artifacts string
	err       error // why the suite cannot run; every test fails with it
	skip      string
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 && !testutil.InCI() {
		suite.skip = "the interop suite needs root (namespaces, qemu taps, XDP); skipped because CI is unset"
		return m.Run()
	}
	dir, err := prepare()
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		// One line that says why, and every test fails with it.
		fmt.Fprintf(os.Stderr, "interop: %v\n", err)
		suite.err = err
	}
	code := m.Run()
	account(os.Stdout)
	return code
}

// prepare checks the host, builds bench and the guest image if absent.
func prepare() (tmp string, err error) {
	if os.Geteuid() != 0 {
		return "", errors.New("not root, and CI=true forbids skipping")
	}
	if err := checkHost(); err != nil {
		return "", err
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	tools := filepath.Join(root, "..", "shared", "tools", "rxe-vm")
	suite.rxeVM = filepath.Join(tools, "rxe-vm")
	suite.icrcCheck = filepath.Join(tools, "icrc-check.py")
	for _, f := range []string{suite.rxeVM, suite.icrcCheck} {
		if _, err := os.Stat(f); err != nil {
			return "", fmt.Errorf("the rxe-vm harness is missing: %v", err)
		}
	}
	suite.cache = os.Getenv("RXE_VM_CACHE")
	if suite.cache == "" {
		suite.cache = "/var/tmp/rxe-vm-cache"
	}
	suite.artifacts = os.Getenv("XRNIC_INTEROP_ARTIFACTS")
	if suite.artifacts == "" {
		suite.artifacts = filepath.Join(root, "artifacts", "interop")
	}
	tmp, err = os.MkdirTemp("", "xrnic-interop-")
	if err != nil {
		return "", err
	}
	suite.bench = filepath.Join(tmp, "bench")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", tmp, "./cmd/bench", "./cmd/xrnic")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return tmp, fmt.Errorf("go build ./cmd/bench ./cmd/xrnic: %v: %s", err, bytes.TrimSpace(out))
	}
	suite.lib = filepath.Join(tmp, "lib")
	if out, err := exec.CommandContext(ctx, "bash", filepath.Join(root, "clib", "build.sh"), suite.lib).CombinedOutput(); err != nil {
		return tmp, fmt.Errorf("clib/build.sh: %v: %s", err, bytes.TrimSpace(out))
	}
	suite.slowConn = filepath.Join(tmp, "connect_delay.so")
	if out, err := exec.CommandContext(ctx, "cc", "-shared", "-fPIC", "-Wall", "-o", suite.slowConn,
		filepath.Join(root, "interop", "testdata", "connect_delay.c"), "-ldl").CombinedOutput(); err != nil {
		return tmp, fmt.Errorf("cc testdata/connect_delay.c: %v: %s", err, bytes.TrimSpace(out))
	}
	if err := sweepStale(); err != nil {
		return tmp, err
	}
	// Emptied only now: a second suite in this tree, its namespaces still a
	// live run's, would otherwise delete that run's captures under it.
	if err := os.RemoveAll(suite.artifacts); err != nil {
		return tmp, err
	}
	if err := os.MkdirAll(suite.artifacts, 0o755); err != nil {
		return tmp, err
	}
	if imgs, _ := filepath.Glob(filepath.Join(suite.cache, "images", "base.cpio*")); len(imgs) == 0 {
		fmt.Fprintf(os.Stderr, "interop: building the rxe guest image (rxe-vm build, ~25 s with a fast mirror)\n")
		if err := buildImage(ctx, nil); err != nil {
			return tmp, err
		}
	}
	return tmp, nil
}

// checkHost finds the host commands the suite needs.
func checkHost() error {
	for _, c := range hostCommands {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("%s not found: install qemu-system-x86 mmdebstrap cpio bc tcpdump python3 iproute2 gcc libibverbs-dev librdmacm-dev perftest ibverbs-utils rdmacm-utils (.ci/run does)", c)
		}
	}
	return nil
}

// buildImage runs rxe-vm build with env added.
func buildImage(ctx context.Context, env []string) error {
	if out, err := rxeVM(ctx, env, "build"); err != nil {
		return fmt.Errorf("the guest image could not be built (rxe-vm build: %v): %s", err, lastLine(out))
	}
	return nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found")
		}
		dir = parent
	}
}

// rxeVM runs the harness with the suite's settings and returns its combined output.
func rxeVM(ctx context.Context, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, suite.rxeVM, args...)
	cmd.Env = append(os.Environ(), "RXE_VM_CACHE="+suite.cache, "RXE_VM_ACCEL="+accel())
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return string(out), err
}

// accel keeps the harness's KVM probe out of the run unless asked for: this
// kind of machine has no usable KVM (the harness README), and the probe costs
// about 40 s. RXE_VM_ACCEL overrides.
func accel() string {
	if a := os.Getenv("RXE_VM_ACCEL"); a != "" {
		return a
	}
	return "tcg"
}

// lastLine is the last line of s, surrounding space trimmed.
func lastLine(s string) string { return tailLines(strings.TrimSpace(s), 1) }

// The suite marks the namespaces and guest it creates with its PID, so that a
// later run removes what a killed run left, and nothing else.
func ownerFile() string { return filepath.Join(suite.cache, "xrnic-interop.owner") }

func nsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/var/run/netns", name))
	return err == nil
}

// sweepStale removes the guest and namespaces of an earlier run of this suite
// whose process is gone; namespaces it did not create make the run fail instead.
func sweepStale() error {
	if !nsExists(nsGuest) && !nsExists(nsXrnic) {
		return nil
	}
	b, err := os.ReadFile(ownerFile())
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
		return fmt.Errorf("namespaces %s/%s exist and were not left by an earlier run of this suite: "+
			"stop whoever uses them (rxe-vm down) and run again", nsGuest, nsXrnic)
	}
	return teardown()
}

// teardown stops the guest by its PID file and deletes the two namespaces.
func teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if out, err := rxeVM(ctx, nil, "stop", vmName); err != nil {
		errs = append(errs, fmt.Errorf("rxe-vm stop: %v: %s", err, lastLine(out)))
	}
	if out, err := rxeVM(ctx, nil, "net-down"); err != nil {
		errs = append(errs, fmt.Errorf("rxe-vm net-down: %v: %s", err, lastLine(out)))
	}
	_ = os.Remove(ownerFile())
	return errors.Join(errs...)
}

// guest is a booted rxe guest at one MTU.
type guest struct {
	mtu     int // RoCE path MTU: 1024 (netdev MTU 1500) or 4096 (netdev MTU 9000)
	netMTU  int
	reboots int    // after its network died (playWith)
	netemOn string // the netem a test put on eth0 (g.netem); a reboot puts it back
}

// netem puts a netem qdisc with args on the guest's eth0 until the test
// ends. A reboot in between (playWith, when the guest's network died) puts
// it back, so that the rerun runs impaired like the run it repeats, and the
// cleanup finds a qdisc to delete.
func (g *guest) netem(t *testing.T, args string) {
	t.Helper()
	g.addNetem(t, args)
	g.netemOn = args
	t.Cleanup(func() {
		g.netemOn = ""
		if out, err := g.exec(t, shortTimeout, "tc qdisc del dev eth0 root"); err != nil {
			t.Errorf("netem in the guest: %v: %s", err, out)
		}
	})
}

// boot brings up the network and the guest for one RoCE MTU; cleanup tears both
// down, whatever happens to the test.
func boot(t *testing.T, roceMTU int) *guest {
	t.Helper()
	if suite.skip != "" {
		t.Skip(suite.skip)
	}
	if suite.err != nil {
		t.Fatalf("interop: %v", suite.err)
	}
	g := &guest{mtu: roceMTU, netMTU: 1500}
	if roceMTU == 4096 {
		g.netMTU = 9000
	}
	if err := sweepStale(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	if err := os.WriteFile(ownerFile(), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := teardown(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	if out, err := rxeVM(ctx, g.env(), "net-up", "host"); err != nil {
		t.Fatalf("rxe-vm net-up host: %v: %s", err, lastLine(out))
	}
	g.startVM(t)
	return g
}

// env is rxe-vm's environment for the guest's netdev MTU.
func (g *guest) env() []string { return []string{"RXE_VM_MTU=" + strconv.Itoa(g.netMTU)} }

// startVM boots the guest on the network already up and checks its rxe0.
func (g *guest) startVM(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	start := time.Now()
	if out, err := rxeVM(ctx, g.env(), "start", vmName); err != nil {
		t.Fatalf("the guest did not boot (rxe-vm start: %v): %s", err, lastLine(out))
	}
	t.Logf("guest booted in %.1f s (RoCE MTU %d, netdev MTU %d)", time.Since(start).Seconds(), g.mtu, g.netMTU)
	// Each boot starts with an empty share; host and guest are both bookworm,
	// so the host's build of connect_delay.so loads in the guest.
	so, err := os.ReadFile(suite.slowConn)
	if err == nil {
		err = os.WriteFile(filepath.Join(suite.cache, "run", vmName, "share", guestSlowConn), so, 0o755)
	}
	if err != nil {
		t.Fatalf("connect_delay.so into the guest's share: %v", err)
	}
	out, err := g.exec(t, shortTimeout, "rdma link show; ibv_devinfo -d "+guestDev+" | grep -E 'state|active_mtu'")
	if err != nil || !strings.Contains(out, "ACTIVE") || !strings.Contains(out, fmt.Sprintf("active_mtu:\t\t%d", g.mtu)) {
		t.Fatalf("guest's rxe0 is not ACTIVE at MTU %d (%v):\n%s", g.mtu, err, out)
	}
}

// guestSlowConn is connect_delay.so's name in the guest's share (/share).
const guestSlowConn = "connect_delay.so"

// lateConnect is the guest's command cmd with connect_delay.so preloaded: a
// perftest client over rdma_cm (-R) that connects 250 ms late, so xrnic's
// server has listened again (testdata/connect_delay.c).
func lateConnect(cmd string) string {
	return "LD_PRELOAD=/share/" + guestSlowConn + " " + cmd
}

// checkLateConnect fails t unless the client's output, prog's, shows that
// connect_delay.so was loaded.
func checkLateConnect(t *testing.T, prog, out string) {
	t.Helper()
	if !strings.Contains(out, "connect_delay: rdma_connect 250 ms late") {
		t.Errorf("the client's %s did not connect through testdata/connect_delay.c:\n%s", prog, out)
	}
}

// netAlive reports whether the guest answers ping from xrnic's namespace.
func (g *guest) netAlive(t *testing.T) bool {
	t.Helper()
	_, err := runHost(t, shortTimeout, "ping", "-c", "3", "-i", "0.5", "-W", "2", ipGuest)
	return err == nil
}

// reboot restarts a guest whose network died, keeping what tells why as
// artifacts of run name: the guest's interface and qdisc counters, the
// tap's, qemu's view of the virtio queues, and the console (the kernel's
// warnings).
func (g *guest) reboot(t *testing.T, name string) {
	t.Helper()
	out, err := g.exec(t, 10*time.Second, "ip -s -s link show dev eth0; tc -s qdisc show dev eth0; ip neigh; grep -E 'MemFree|Slab' /proc/meminfo")
	host, herr := exec.Command("ip", "-n", nsGuest, "-s", "-s", "link", "show", "dev", "tap-a").CombinedOutput()
	// The virtio-net device's receive and transmit queues, as qemu holds them.
	vqs := qemuMonitor("info virtio-queue-status /machine/peripheral-anon/device[0]/virtio-backend 0",
		"info virtio-queue-status /machine/peripheral-anon/device[0]/virtio-backend 1")
	save(t, name+".guest-net.txt", []byte(fmt.Sprintf("--- the guest (%v):\n%s--- tap-a (%v):\n%s--- qemu:\n%s", err, out, herr, host, vqs)))
	if b, err := os.ReadFile(filepath.Join(suite.cache, "run", vmName, "console.log")); err == nil {
		save(t, name+".guest-console.log", b)
		t.Logf("the guest's console ends:\n%s", tailLines(string(b), 15))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := rxeVM(ctx, nil, "stop", vmName); err != nil {
		t.Fatalf("rxe-vm stop: %v: %s", err, lastLine(out))
	}
	g.startVM(t)
	g.reboots++
	if g.netemOn != "" {
		g.addNetem(t, g.netemOn)
	}
}

// addNetem puts a root netem qdisc with args on the guest's eth0.
func (g *guest) addNetem(t *testing.T, args string) {
	t.Helper()
	if out, err := g.exec(t, shortTimeout, "tc qdisc add dev eth0 root netem "+args); err != nil {
		t.Fatalf("netem in the guest: %v: %s", err, out)
	}
}

// qemuMonitor runs HMP commands on the guest's monitor and returns their
// output, or why it could not.
func qemuMonitor(cmds ...string) string {
	c, err := net.DialTimeout("unix", filepath.Join(suite.cache, "run", vmName, "monitor.sock"), 5*time.Second)
	if err != nil {
		return err.Error() + "\n"
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	prompt := func() (string, error) { // all up to the next "(qemu) "
		var b strings.Builder
		for !strings.HasSuffix(b.String(), "(qemu) ") {
			ch, err := r.ReadByte()
			if err != nil {
				return b.String(), err
			}
			b.WriteByte(ch)
		}
		return b.String(), nil
	}
	if _, err := prompt(); err != nil {
		return err.Error() + "\n"
	}
	var out strings.Builder
	for _, cmd := range cmds {
		fmt.Fprintf(&out, "%s:\n", cmd)
		if _, err := io.WriteString(c, cmd+"\n"); err != nil {
			return out.String() + err.Error() + "\n"
		}
		got, err := prompt()
		for _, l := range strings.Split(got, "\n") {
			if !strings.Contains(l, "\x1b") && !strings.HasPrefix(l, "(qemu)") { // the monitor echoes what it is sent
				out.WriteString(l + "\n")
			}
		}
		if err != nil {
			return out.String() + err.Error() + "\n"
		}
	}
	return out.String()
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// exec runs cmd in the guest and returns its output; a non-zero exit is an error.
func (g *guest) exec(t *testing.T, timeout time.Duration, cmd string) (string, error) {
	t.Helper()
	ctx, cancel := runCtx(timeout + 10*time.Second)
	defer cancel()
	out, err := rxeVM(ctx, nil, "exec", vmName, "--timeout", strconv.Itoa(int(timeout.Seconds())), "--", cmd)
	return out, err
}

// job is a command running in the guest in the background.
type job struct {
	g  *guest
	id string
}

func (g *guest) start(t *testing.T, cmd string) *job {
	t.Helper()
	checkBudget(t)
	ctx, cancel := runCtx(shortTimeout)
	defer cancel()
	out, err := rxeVM(ctx, nil, "exec", vmName, "--bg", "--", cmd)
	if err != nil {
		t.Fatalf("guest: start %q: %v: %s", cmd, err, out)
	}
	j := &job{g: g, id: strings.TrimSpace(out)}
	t.Cleanup(func() { j.kill() })
	return j
}

// wait returns the job's output and its exit status.
func (j *job) wait(timeout time.Duration) (string, error) {
	ctx, cancel := runCtx(timeout + 10*time.Second)
	defer cancel()
	return rxeVM(ctx, nil, "wait", vmName, j.id, strconv.Itoa(int(timeout.Seconds())))
}

// kill ends the job's process group in the guest if it still runs (the agent
// writes its PID); a finished job is left alone.
func (j *job) kill() {
	dir := filepath.Join(suite.cache, "run", vmName, "share", "out")
	if _, err := os.Stat(filepath.Join(dir, j.id+".rc")); err == nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, j.id+".pid"))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shortTimeout)
	defer cancel()
	pid := strings.TrimSpace(string(b))
	_, _ = rxeVM(ctx, nil, "exec", vmName, "--timeout", "10", "--", "pkill -P "+pid+"; kill "+pid+" 2>/dev/null; true")
}

// waitListen waits until something in the guest listens on TCP port; a connect
// would use up a perftest server's only accept, so the guest is asked instead.
func (g *guest) waitListen(t *testing.T, port int, j *job) {
	t.Helper()
	g.waitCount(t, fmt.Sprintf("ss -Hltn 'sport = :%d' | wc -l", port), fmt.Sprintf("TCP port %d", port), j)
}

// waitCMListen waits until an rdma_cm ID in the guest listens on port, as
// "rdma resource show cm_id" shows it (state LISTEN); what names it.
func (g *guest) waitCMListen(t *testing.T, port int, what string, j *job) {
	t.Helper()
	g.waitCount(t, fmt.Sprintf("rdma resource show cm_id | grep -c 'state LISTEN.*:%d'", port), fmt.Sprintf("%s on %d", what, port), j)
}

// waitCount waits until the guest's shell command cmd prints a count above 0.
func (g *guest) waitCount(t *testing.T, cmd, what string, j *job) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		checkBudget(t)
		out, _ := g.exec(t, 10*time.Second, cmd)
		if strings.TrimSpace(lastLine(out)) != "0" && strings.TrimSpace(lastLine(out)) != "" {
			return
		}
		if j != nil {
			if _, err := os.Stat(filepath.Join(suite.cache, "run", vmName, "share", "out", j.id+".rc")); err == nil {
				out, _ := j.wait(time.Second)
				t.Fatalf("the guest's server exited before listening:\n%s", out)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("nothing listens on the guest's %s after a minute", what)
}

// host is a process run in xrnic's namespace.
type host struct {
	cmd    *exec.Cmd
	out    *testutil.SyncBuffer
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// startHost runs args in netns rxevm-b; ready, if set, is waited for in its output.
func startHost(t *testing.T, timeout time.Duration, ready string, args ...string) *host {
	t.Helper()
	checkBudget(t)
	ctx, cancel := runCtx(timeout)
	full := append([]string{"netns", "exec", nsXrnic}, args...)
	h := &host{cmd: exec.CommandContext(ctx, "ip", full...), out: &testutil.SyncBuffer{}, done: make(chan struct{}), cancel: cancel}
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	h.cmd.Cancel = func() error { return h.cmd.Process.Signal(syscall.SIGTERM) }
	h.cmd.WaitDelay = 10 * time.Second
	if err := h.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start %v: %v", args, err)
	}
	go func() {
		h.err = h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
	})
	if ready != "" {
		deadline := time.After(shortTimeout)
		for !strings.Contains(h.out.String(), ready) {
			select {
			case <-h.done:
				t.Fatalf("%v exited before %q (%v):\n%s", args, ready, h.err, h.out)
			case <-deadline:
				t.Fatalf("%v did not print %q within %v:\n%s", args, ready, shortTimeout, h.out)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return h
}

// wait returns the process's output and exit error.
func (h *host) wait() (string, error) {
	<-h.done
	h.cancel()
	return h.out.String(), h.err
}

// runHost runs args in netns rxevm-b to completion.
func runHost(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	return startHost(t, timeout, "", args...).wait()
}

// save keeps an artifact of the run.
func save(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(suite.artifacts, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Errorf("artifact %s: %v", name, err)
	}
	return p
}

// capture is tcpdump on va0 in the guest's namespace.
type capture struct {
	path string
	h    *exec.Cmd
	out  *testutil.SyncBuffer
	done chan error
}

func startCapture(t *testing.T, name string) *capture {
	t.Helper()
	c := &capture{path: filepath.Join(suite.artifacts, name+".pcap"), out: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	checkBudget(t)
	ctx, cancel := runCtx(2 * runTimeout)
	// -U: each packet written at once; -B: a large buffer, no kernel drops; -Z root
	// keeps the file owned by root (tcpdump would drop privileges).
	// At nice -20, as xrnic's engine thread runs: a capture that waits out
	// the engine's turns drops frames (922 in a CI run's read_lat -a).
	c.h = exec.CommandContext(ctx, "ip", "netns", "exec", nsGuest, "nice", "-n", "-20", "tcpdump", "-i", ifCapture, "-U", "-B", "16384",
		"-s", "0", "-Z", "root", "-w", c.path, "udp port 4791 or icmp")
	c.h.Stdout, c.h.Stderr = c.out, c.out
	c.h.Cancel = func() error { return c.h.Process.Signal(syscall.SIGINT) }
	c.h.WaitDelay = 10 * time.Second
	if err := c.h.Start(); err != nil {
		cancel()
		t.Fatalf("tcpdump: %v", err)
	}
	go func() { c.done <- c.h.Wait(); cancel() }()
	keepIfFailed(t, c.path) // runs after the stop below: cleanups run last first
	t.Cleanup(func() { _ = c.h.Process.Signal(syscall.SIGINT); <-c.done })
	deadline := time.Now().Add(shortTimeout)
	for !strings.Contains(c.out.String(), "listening on") {
		if time.Now().After(deadline) {
			t.Fatalf("tcpdump did not start:\n%s", c.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

// keepIfFailed removes a capture when the test passes, unless
// XRNIC_KEEP_CAPTURES is set: a full suite captures gigabytes, and the
// captures that matter are the failing runs'.
func keepIfFailed(t *testing.T, path string) {
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("XRNIC_KEEP_CAPTURES") == "" {
			_ = os.Remove(path)
		}
	})
}

// hexBytes decodes ping's -p pattern.
func hexBytes(h string) []byte {
	b := make([]byte, len(h)/2)
	for i := range b {
		v, _ := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		b[i] = byte(v)
	}
	return b
}

// stop ends the capture and checks that the kernel dropped nothing.
func (c *capture) stop(t *testing.T) {
	t.Helper()
	// tcpdump can lag behind on a busy machine, and SIGINT ends it without
	// draining the kernel's ring. A ping from xrnic's side with a pattern of
	// this capture's own is the barrier: frames are written in the order the
	// interface saw them, so once the ping is in the file, all that came
	// before it is too. It is broadcast: a ping to the guest waits for ARP,
	// which a stalled guest never answers, and then never leaves (a CI run's
	// send_lat -e, whose stall then went unrecognised).
	pattern := fmt.Sprintf("%016x", rand.Uint64())
	deadline := time.Now().Add(shortTimeout)
	for sent := false; budget.ctx == nil || budget.ctx.Err() == nil; { // out of time, tcpdump is gone
		if !sent || time.Now().After(deadline.Add(-shortTimeout/2)) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = exec.CommandContext(ctx, "ip", "netns", "exec", nsXrnic, "ping", "-b", "-c", "1", "-W", "2", "-p", pattern, ipBroadcast).Run()
			cancel()
			sent = true
		}
		if b, err := os.ReadFile(c.path); err == nil && bytes.Contains(b, hexBytes(pattern)) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("tcpdump: the barrier ping never reached the capture within %v", shortTimeout)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = c.h.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(shortTimeout):
		t.Fatalf("tcpdump did not stop")
	}
	c.done <- nil // for the cleanup
	sc := bufio.NewScanner(strings.NewReader(c.out.String()))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 4 && strings.Join(f[1:], " ") == "packets dropped by kernel" && f[0] != "0" {
			t.Errorf("tcpdump: %s: the capture misses frames", sc.Text())
		}
	}
}
