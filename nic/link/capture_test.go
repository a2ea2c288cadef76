package link

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// TestCaptureBothDirections: every frame written and every frame read goes to
// the pcap stream, whole and in order, and closing flushes it.
func TestCaptureBothDirections(t *testing.T) {
	a, b, err := NewMemoryPair(MemoryOptions{MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var out bytes.Buffer
	c, err := NewCapture(a, &out)
	if err != nil {
		t.Fatal(err)
	}
	frame := func(tag byte, n int) []byte { return bytes.Repeat([]byte{tag}, n) }
	sent := [][]byte{frame(1, 60), frame(2, 1500), frame(3, 4200)}
	if n, err := c.WriteBatch(sent); n != 3 || err != nil {
		t.Fatalf("WriteBatch: %d, %v", n, err)
	}
	back := [][]byte{frame(4, 64), frame(5, 9018)}
	if n, err := b.WriteBatch(back); n != 2 || err != nil {
		t.Fatalf("peer WriteBatch: %d, %v", n, err)
	}
	bufs := [][]byte{make([]byte, 9216), make([]byte, 9216), make([]byte, 9216)}
	sizes := make([]int, 3)
	got := 0
	for got < 2 {
		n, err := c.ReadBatch(bufs[got:], sizes[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Errorf("link type %v", r.LinkType())
	}
	for i, want := range append(sent, back...) {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(data, want) || ci.Length != len(want) || ci.Timestamp.IsZero() {
			t.Errorf("frame %d: %d bytes (length %d) starting %x, want %d of %x", i, len(data), ci.Length, data[:1], len(want), want[0])
		}
	}
	if _, _, err := r.ReadPacketData(); err == nil {
		t.Error("more frames than went by")
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n--; w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// TestCaptureWriteError: a failing writer never fails the link; Flush and
// Close report it.
func TestCaptureWriteError(t *testing.T) {
	a, b, err := NewMemoryPair(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := NewCapture(a, &failingWriter{n: 1})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1500)
	for range 100 { // more than the buffer holds
		if n, err := c.WriteBatch([][]byte{big}); n != 1 || err != nil {
			t.Fatalf("WriteBatch: %d, %v", n, err)
		}
		var bufs = [][]byte{make([]byte, 2048)}
		sizes := []int{0}
		for {
			if n, _ := b.ReadBatch(bufs, sizes); n == 1 {
				break
			}
		}
	}
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Close: %v, want the write error", err)
	}
	if _, err := NewCapture(a, &failingWriter{}); err == nil {
		t.Error("NewCapture on a failing writer: no error")
	}
}
