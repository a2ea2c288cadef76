package link

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

func frame(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i + j)
	}
	return b
}

func bufs(n, size int) ([][]byte, []int) {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, size)
	}
	return b, make([]int, n)
}

func TestMemoryPairDeliversInOrder(t *testing.T) {
	a, b, err := NewMemoryPair(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	var frames [][]byte
	for i := 0; i < 100; i++ {
		frames = append(frames, frame(i, 60+i*40))
	}
	if n, err := a.WriteBatch(frames); n != len(frames) || err != nil {
		t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(frames))
	}
	rb, sizes := bufs(32, 9000)
	var got [][]byte
	for len(got) < len(frames) {
		n, err := b.ReadBatch(rb, sizes)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("ReadBatch returned 0 after %d frames", len(got))
		}
		for i := 0; i < n; i++ {
			got = append(got, append([]byte(nil), rb[i][:sizes[i]]...))
		}
	}
	for i := range frames {
		if !bytes.Equal(got[i], frames[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if st := b.Stats(); st.RxFrames != 100 {
		t.Errorf("RxFrames = %d, want 100", st.RxFrames)
	}
	// Nothing flows backwards.
	if n, _ := a.ReadBatch(rb, sizes); n != 0 {
		t.Errorf("a read %d frames it never was sent", n)
	}
}

func TestMemoryFullQueueAndLongFrames(t *testing.T) {
	a, b, err := NewMemoryPair(MemoryOptions{Depth: 4, MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	frames := [][]byte{frame(1, 100), frame(2, 100), frame(3, 100), frame(4, 100), frame(5, 100)}
	if n, _ := a.WriteBatch(frames); n != 4 {
		t.Fatalf("WriteBatch into a depth-4 queue took %d, want 4", n)
	}
	rb, sizes := bufs(8, 2000)
	if n, _ := b.ReadBatch(rb, sizes); n != 4 {
		t.Fatalf("read %d, want 4", n)
	}
	// A frame longer than MTU+18 is taken and dropped, like a wire would.
	if n, _ := a.WriteBatch([][]byte{frame(0, 1519)}); n != 1 {
		t.Fatalf("long frame not taken")
	}
	if n, _ := b.ReadBatch(rb, sizes); n != 0 {
		t.Fatalf("long frame delivered")
	}
	if st := a.Stats(); st.TxDropped != 1 {
		t.Errorf("TxDropped = %d, want 1", st.TxDropped)
	}
	// A frame longer than the reader's buffer is dropped and counted.
	a.WriteBatch([][]byte{frame(0, 1000)})
	small, ss := bufs(1, 500)
	if n, _ := b.ReadBatch(small, ss); n != 0 {
		t.Fatalf("frame larger than the buffer delivered")
	}
	if st := b.Stats(); st.RxDropped != 1 {
		t.Errorf("RxDropped = %d, want 1", st.RxDropped)
	}
}

func TestMemoryFaultsAreSeeded(t *testing.T) {
	run := func(seed uint64) (delivered []string, st Stats) {
		a, b, err := NewMemoryPair(MemoryOptions{AtoB: Faults{Seed: seed, Drop: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1}})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		defer b.Close()
		rb, sizes := bufs(64, 2000)
		for i := 0; i < 500; i++ {
			a.WriteBatch([][]byte{frame(i, 64)})
			n, _ := b.ReadBatch(rb, sizes)
			for j := 0; j < n; j++ {
				delivered = append(delivered, fmt.Sprintf("%x", rb[j][:sizes[j]]))
			}
		}
		return delivered, a.Stats()
	}
	d1, st := run(7)
	d2, _ := run(7)
	if fmt.Sprint(d1) != fmt.Sprint(d2) {
		t.Fatalf("same seed, different deliveries")
	}
	d3, _ := run(8)
	if fmt.Sprint(d1) == fmt.Sprint(d3) {
		t.Fatalf("different seeds, same deliveries")
	}
	// Each fault kind must have happened at these rates over 500 frames.
	var dropped, dup, corrupt, reordered int
	seen := map[string]int{}
	want := map[string]int{}
	for i := 0; i < 500; i++ {
		want[fmt.Sprintf("%x", frame(i, 64))] = i
	}
	last := -1
	for _, d := range d1 {
		seen[d]++
		i, ok := want[d]
		if !ok {
			corrupt++
			continue
		}
		if i < last {
			reordered++
		}
		last = i
	}
	for f := range want {
		switch seen[f] {
		case 0:
			dropped++
		case 2:
			dup++
		}
	}
	if dropped == 0 || dup == 0 || corrupt == 0 || reordered == 0 {
		t.Errorf("faults: dropped %d, duplicated %d, corrupted %d, reordered %d; want all > 0", dropped, dup, corrupt, reordered)
	}
	if st.TxDropped == 0 {
		t.Errorf("drops not counted")
	}
}

func TestMemoryBadOptions(t *testing.T) {
	for _, o := range []MemoryOptions{{MTU: 10}, {Depth: -1}, {AtoB: Faults{Drop: 2}}, {BtoA: Faults{Corrupt: -0.5}}} {
		if _, _, err := NewMemoryPair(o); !errors.Is(err, ErrBadOption) {
			t.Errorf("NewMemoryPair(%+v) = %v, want ErrBadOption", o, err)
		}
	}
}

func TestMemoryWaitWakeClose(t *testing.T) {
	a, b, err := NewMemoryPair(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	done := make(chan error)
	go func() { done <- b.Wait(-1) }()
	a.WriteBatch([][]byte{frame(0, 64)})
	if err := <-done; err != nil {
		t.Fatalf("Wait after a write: %v", err)
	}
	go func() { done <- b.Wait(-1) }()
	b.Wake()
	if err := <-done; err != nil {
		t.Fatalf("Wait after Wake: %v", err)
	}
	if err := b.Wait(time.Millisecond); err != nil {
		t.Fatalf("Wait with timeout: %v", err)
	}
	go func() { done <- b.Wait(-1) }()
	b.Close()
	if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait during Close = %v", err)
	}
	if _, err := b.ReadBatch(nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadBatch after Close = %v, want ErrClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestMemoryNoAllocs(t *testing.T) {
	a, b, _ := NewMemoryPair(MemoryOptions{})
	defer a.Close()
	defer b.Close()
	frames := [][]byte{frame(0, 1000), frame(1, 60)}
	rb, sizes := bufs(4, 2000)
	allocs := testing.AllocsPerRun(1000, func() {
		a.WriteBatch(frames)
		b.ReadBatch(rb, sizes)
	})
	if allocs != 0 {
		t.Errorf("allocs per write+read = %v, want 0", allocs)
	}
}
