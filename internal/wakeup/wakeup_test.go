package wakeup

import (
	"errors"
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
