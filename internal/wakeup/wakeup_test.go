package wakeup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func readable(t *testing.T, p *Pipe) bool {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(p.FD()), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestWakeDrain(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if readable(t, p) {
		t.Fatal("a new pipe is readable")
	}
	for range 3 {
		if err := p.Wake(); err != nil {
			t.Fatal(err)
		}
	}
	if !readable(t, p) {
		t.Fatal("not readable after Wake")
	}
	p.Drain()
	if readable(t, p) {
		t.Fatal("readable after Drain")
	}
	if n := testing.AllocsPerRun(100, func() { p.Wake(); p.Drain() }); n != 0 {
		t.Fatalf("Wake and Drain allocate %v times", n)
	}
}

// A process given a write end can neither read the owner's wake-ups nor, by
// clearing O_NONBLOCK on its end, make the owner's Wake or Drain block: its end
// is a description of its own (an eventfd's duplicate would share one).
func TestWriterCannotReachOwner(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w, err := p.Writer()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(w)
	var b [8]byte
	if _, err := unix.Read(w, b[:]); !errors.Is(err, unix.EBADF) {
		t.Fatalf("a read of the write end: %v, want EBADF", err)
	}
	if err := unix.SetNonblock(w, false); err != nil {
		t.Fatal(err)
	}
	// The writer rings: the owner wakes.
	if _, err := unix.Write(w, b[:]); err != nil {
		t.Fatal(err)
	}
	if !readable(t, p) {
		t.Fatal("the writer's ring did not wake the owner")
	}
	p.Drain()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Drain() // empty: must not block
		for range 2 * size {
			if err := p.Wake(); err != nil { // full: must not block
				t.Error(err)
				return
			}
		}
		p.Drain()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		var b [size]byte
		unix.Read(p.FD(), b[:]) // unblock a blocked Wake before failing
		t.Fatal("the owner's Drain or Wake blocked after the writer cleared O_NONBLOCK on its end")
	}
}

// A process that owns the pipe's user (the daemon's, when it is not root)
// cannot reopen a write end for reading through /proc/self/fd: the pipe is
// write-only. The test runs itself again as nobody, from a copy of its binary
// nobody may run.
func TestWriterCannotBeReopenedForReading(t *testing.T) {
	if os.Getenv("WAKEUP_REOPEN_CHILD") != "" {
		return // the child's part is reopenChild, run from TestMain
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to run a child as another user")
		}
		t.Skip("needs root")
	}
	dir, err := os.MkdirTemp("", "wakeup") // t.TempDir's parent is root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "wakeup.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "WAKEUP_REOPEN_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reopen: EACCES") {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("WAKEUP_REOPEN_CHILD") != "" {
		os.Exit(reopenChild())
	}
	os.Exit(m.Run())
}

// reopenChild makes a pipe, opens a writer as Writer does, and tries to
// reopen that writer for reading.
func reopenChild() int {
	p, err := New()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer p.Close()
	w, err := p.Writer()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer unix.Close(w)
	r, err := unix.Open("/proc/self/fd/"+strconv.Itoa(w), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	switch {
	case err == nil:
		unix.Close(r)
		fmt.Println("reopen: a read end")
		return 1
	case errors.Is(err, unix.EACCES):
		fmt.Println("reopen: EACCES")
		return 0
	}
	fmt.Println("reopen:", err)
	return 1
}
