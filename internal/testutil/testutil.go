// Package testutil holds helpers shared by xrnic's tests: privilege checks that
// follow the project rule (skip only when not root and CI is unset; under CI=true a
// missing capability is a failure) and the location of the shared/ folder.
package testutil

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// InCI reports whether the tests run under CI (CI=true), where nothing may skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireRoot skips t when the process is not root and CI is unset; under CI=true it
// fails t instead, since CI runs as root and a skip there would hide a broken setup.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if InCI() {
		t.Fatalf("test needs root, and CI=true forbids skipping")
	}
	t.Skip("test needs root (netns, veth, XDP, AF_XDP); skipped because CI is unset")
}

// RequireCommand returns the path of an external command (tshark, tcpdump, ...). It
// skips when the command is missing and CI is unset, and fails under CI=true.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if InCI() {
		t.Fatalf("%s not found and CI=true forbids skipping: .ci/run must install it", name)
	}
	t.Skipf("%s not found; skipped because CI is unset", name)
	return ""
}

// RepoRoot returns the module root (the folder holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("go.mod not found above the test's folder")
		}
		dir = parent
	}
}

// SharedDir returns ../shared beside the repository (golden pcaps, reference texts,
// tools). It fails the test when the folder is missing: golden vectors are required.
func SharedDir(t testing.TB) string {
	t.Helper()
	d := filepath.Join(RepoRoot(t), "..", "shared")
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
		t.Fatalf("shared/ not found at %s: the golden captures live there", d)
	}
	return d
}

// SyncBuffer is a bytes.Buffer one goroutine (a process, a daemon) writes while
// the test reads it; its methods are safe for concurrent use. A test that checks
// for a line waits for it with WaitFor: the writer may not have printed it yet.
type SyncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced by each Write
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor waits until the buffer holds substr, or timeout passes, and returns
// the buffer's contents and whether substr appeared.
func (s *SyncBuffer) WaitFor(substr string, timeout time.Duration) (string, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		text := s.b.String()
		if strings.Contains(text, substr) {
			s.mu.Unlock()
			return text, true
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			return s.String(), false
		}
	}
}

// ReadPcap returns the frames of an Ethernet pcap, read with gopacket's pcapgo;
// it fails t on a truncated frame or another link type.
func ReadPcap(t testing.TB, path string) [][]byte {
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

// InSyscallShare calls call in a loop on a goroutine of its own for d and
// returns the share of samples of runtime/metrics'
// /sched/goroutines/not-in-go that counted more goroutines in system calls
// than any sample before the loop began: near 1 for a loop of system calls
// that Go's scheduler sees (syscall.Syscall), near 0 for raw ones
// (syscall.RawSyscall), which leave the goroutine's P marked running.
func InSyscallShare(d time.Duration, call func()) float64 {
	s := []metrics.Sample{{Name: "/sched/goroutines/not-in-go:goroutines"}}
	read := func() uint64 { metrics.Read(s); return s[0].Value.Uint64() }
	var base uint64
	for range 20 {
		base = max(base, read())
		time.Sleep(100 * time.Microsecond)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			call()
		}
	}()
	above, n := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		if read() > base {
			above++
		}
		time.Sleep(50 * time.Microsecond)
	}
	stop.Store(true)
	<-done
	return float64(above) / float64(n)
}
