package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// A key message as perftest's ethernet_write_keys writes it for a RoCE QP
// (KEY_PRINT_FMT_GID, sprintf'd, with its NUL): LID 0, 1 outstanding read, QPN
// 0x11, PSN 0x3c4a1b, R_Key 0x1b6, VA 0x7f40544aa000, GID ::ffff:192.0.2.1.
const perftestKeyGID = "0000:0001:000011:3c4a1b:000001b6:00007f40544aa000:" +
	"00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:01:00000000:\x00"

// The same without a GID (KEY_PRINT_FMT), as an IB port with -x unset sends it.
const perftestKey = "0000:0001:000011:3c4a1b:000001b6:00007f40544aa000:00000000\x00"

var keyDest = Dest{LID: 0, OutReads: 1, QPN: 0x11, PSN: 0x3c4a1b, RKey: 0x1b6, VAddr: 0x7f40544aa000,
	GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}}

func TestKeyMessageMatchesPerftest(t *testing.T) {
	if len(perftestKeyGID) != keyMsgSizeGID || len(perftestKey) != keyMsgSize {
		t.Fatalf("literal sizes %d, %d; perftest's KEY_MSG_SIZE_GID %d, KEY_MSG_SIZE %d",
			len(perftestKeyGID), len(perftestKey), keyMsgSizeGID, keyMsgSize)
	}
	if got := string(keyDest.AppendKey(nil, true)); got != perftestKeyGID {
		t.Errorf("AppendKey(GID):\n got %q\nwant %q", got, perftestKeyGID)
	}
	if got := string(keyDest.AppendKey(nil, false)); got != perftestKey {
		t.Errorf("AppendKey:\n got %q\nwant %q", got, perftestKey)
	}
	for _, c := range []struct {
		msg     string
		withGID bool
	}{{perftestKeyGID, true}, {perftestKey, false}} {
		d, err := ParseKey([]byte(c.msg), c.withGID)
		if err != nil {
			t.Fatal(err)
		}
		want := keyDest
		if !c.withGID {
			want.GID = [16]byte{}
		}
		if d != want {
			t.Errorf("ParseKey(%q) = %+v, want %+v", c.msg, d, want)
		}
	}
	// Largest values fill every field's width exactly.
	big := Dest{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: math.MaxUint64, SRQN: 0xffffffff}
	for i := range big.GID {
		big.GID[i] = 0xff
	}
	m := big.AppendKey(nil, true)
	if len(m) != keyMsgSizeGID {
		t.Errorf("largest message is %d bytes, want %d", len(m), keyMsgSizeGID)
	}
	if d, err := ParseKey(m, true); err != nil || d != big {
		t.Errorf("round trip of the largest message: %+v, %v", d, err)
	}
	for _, bad := range []string{"", "0000:0001", "zz00:0001:000011:3c4a1b:000001b6:00007f40544aa000:00000000"} {
		if _, err := ParseKey([]byte(bad), false); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

// script is a perftest peer that writes and reads raw bytes in order.
type step struct {
	read  []byte // bytes the peer expects
	write []byte // bytes the peer sends
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func version(s string) []byte {
	b := make([]byte, versionSize)
	copy(b, s)
	return b
}

// runPeer plays steps on c as a perftest server does (read, then write) when
// server is true, else as a client (write, then read).
func runPeer(c net.Conn, server bool, steps []step) error {
	for i, s := range steps {
		if !server && s.write != nil {
			if _, err := c.Write(s.write); err != nil {
				return err
			}
		}
		if s.read != nil {
			got := make([]byte, len(s.read))
			if _, err := io.ReadFull(c, got); err != nil {
				return err
			}
			if !bytes.Equal(got, s.read) {
				return fmt.Errorf("step %d: got %q, want %q", i, got, s.read)
			}
		}
		if server && s.write != nil {
			if _, err := c.Write(s.write); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestConnFacesPerftest plays the bytes a perftest 6.29 server sends and expects
// against bench's client, and the other way round: versions, system data, MTU,
// key message, and a bandwidth report.
func TestConnFacesPerftest(t *testing.T) {
	rep := BWReport{Size: 65536, Iters: 5000, Peak: 1234.5, Avg: 1000.25, MsgRate: 0.016}
	steps := []step{
		{read: version(Version), write: version("6.29")},
		{read: be32(4096), write: be32(8192)},
		{read: be32(64), write: be32(128)},
		{read: []byte("5\x00"), write: []byte("3\x00")},
		{read: []byte(perftestKeyGID), write: []byte(perftestKeyGID)},
		{read: be64(rep.Size), write: be64(1)},
		{read: be64(rep.Iters), write: be64(2)},
		{read: be64(math.Float64bits(rep.Peak)), write: be64(math.Float64bits(3.5))},
		{read: be64(math.Float64bits(rep.Avg)), write: be64(math.Float64bits(4.5))},
		{read: be64(math.Float64bits(rep.MsgRate)), write: be64(math.Float64bits(5.5))},
	}
	for _, benchIsClient := range []bool{true, false} {
		a, b := net.Pipe()
		peerErr := make(chan error, 1)
		go func() { peerErr <- runPeer(b, benchIsClient, steps) }()
		c := NewConn(a, benchIsClient)
		v, f, err := c.XchgVersions(Version)
		if err != nil || v != "6.29" || f != 6.29 {
			t.Fatalf("XchgVersions = %q, %v, %v", v, f, err)
		}
		cb, cl, err := c.XchgSysData(4096, 64)
		if err != nil || cb != 8192 || cl != 128 {
			t.Fatalf("XchgSysData = %d, %d, %v", cb, cl, err)
		}
		if m, err := c.XchgMTU(5); err != nil || m != 3 {
			t.Fatalf("XchgMTU = %d, %v", m, err)
		}
		if d, err := c.HandShake(&keyDest, false); err != nil || d != keyDest {
			t.Fatalf("HandShake = %+v, %v", d, err)
		}
		r, err := c.XchgBWReports(rep)
		if want := (BWReport{1, 2, 3.5, 4.5, 5.5}); err != nil || r != want {
			t.Fatalf("XchgBWReports = %+v, %v; want %+v", r, err, want)
		}
		if err := <-peerErr; err != nil {
			t.Fatalf("client=%v: perftest peer: %v", benchIsClient, err)
		}
		a.Close()
		b.Close()
	}
}

func TestConnPeerGone(t *testing.T) {
	a, b := net.Pipe()
	c := NewConn(a, true)
	c.Timeout = 200 * time.Millisecond
	b.Close()
	if _, err := c.HandShake(&keyDest, false); !errors.Is(err, ErrPeer) {
		t.Errorf("handshake with a closed peer: %v, want ErrPeer", err)
	}
	a.Close()

	// A silent peer: the deadline ends the exchange.
	a, b = net.Pipe()
	defer b.Close()
	c = NewConn(a, false)
	c.Timeout = 50 * time.Millisecond
	if _, err := c.HandShake(&keyDest, false); !errors.Is(err, ErrPeer) {
		t.Errorf("handshake with a silent peer: %v, want ErrPeer", err)
	}
	a.Close()
}

// TestWatchPeer: bytes read while watching reach the next exchange; a peer that
// closes is seen.
func TestWatchPeer(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	c := NewConn(a, false)
	var gone atomic.Bool
	stop := c.WatchPeer(&gone)
	go b.Write([]byte(perftestKeyGID))
	time.Sleep(20 * time.Millisecond)
	stop()
	go func() { io.ReadFull(b, make([]byte, keyMsgSizeGID)) }()
	if d, err := c.HandShake(&keyDest, false); err != nil || d != keyDest {
		t.Fatalf("handshake after a watch: %+v, %v", d, err)
	}
	if gone.Load() {
		t.Errorf("gone set while the peer is there")
	}
	stop = c.WatchPeer(&gone)
	b.Close()
	deadline := time.Now().Add(2 * time.Second)
	for !gone.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	if !gone.Load() {
		t.Errorf("closed peer not seen")
	}
}

func TestAtof(t *testing.T) {
	for s, want := range map[string]float64{"6.06": 6.06, "6.29": 6.29, "5.70-beta": 5.70, "": 0, "x": 0, "7": 7, "6.": 6} {
		if got := atof(s); got != want {
			t.Errorf("atof(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestWatchPeerBounded plays a peer that streams bytes on the exchange's
// connection during a run (before: the watcher kept all of them, 1.1 GiB for
// 300 MB streamed, never given back): the watcher keeps at most maxPending
// and takes the peer for gone.
func TestWatchPeerBounded(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := NewConn(a, false)
	var gone atomic.Bool
	stop := c.WatchPeer(&gone)
	go func() {
		chunk := make([]byte, 4096)
		for range 256 { // 1 MiB, or until the watcher stops reading
			if _, err := b.Write(chunk); err != nil {
				return
			}
		}
	}()
	for end := time.Now().Add(10 * time.Second); !gone.Load() && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	b.Close()
	stop()
	if !gone.Load() {
		t.Fatal("a peer streaming during the run was not taken for gone")
	}
	if n := len(c.pending); n > maxPending {
		t.Fatalf("the watcher kept %d bytes, more than %d", n, maxPending)
	}
}
