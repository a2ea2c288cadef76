package server

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A process that never reads its CM event channel: the channel's writes give
// up after their deadline instead of blocking the channel's goroutine
// forever, and never block anything else (each channel writes on its own).
func TestWriteWithinNeverRead(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])
	if err := unix.SetNonblock(pair[0], true); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 512)
	n := 0
	start := time.Now()
	for ; n < 1<<20; n++ {
		if err = writeWithin(context.Background(), pair[0], msg, 100*time.Millisecond); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatalf("%d datagrams nobody read all went", n)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("gave up after %v", d)
	}
	// A cancelled context ends the wait at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := writeWithin(ctx, pair[0], msg, time.Hour); err == nil {
		t.Fatal("a full socket took a datagram")
	}
}
