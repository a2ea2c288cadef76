// The out-of-band exchange over TCP, byte for byte as perftest's
// perftest_communication.c does it without rdma_cm: the version string, the
// system data, the MTU, the QP keys (ethernet_write_keys/ethernet_read_keys),
// the handshakes that synchronise the two sides, and the bandwidth reports.
//
// Every exchange follows ctx_xchg_data_ethernet's order: the client writes, then
// reads; the server reads, then writes.

package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Version is the perftest version bench announces. Peers read it with atof and
// adapt: at 6.06 (Debian's perftest) and anything from 5.70 up to 6.27 a peer
// exchanges the same messages in the same order; from 6.28 on a peer would first
// negotiate parameters, but only with a peer that announced 6.28 or more, so a
// newer perftest skips that step with bench as it does with 6.06.
const Version = "6.06"

// Message sizes: sprintf'd text plus its NUL (KEY_MSG_SIZE, KEY_MSG_SIZE_GID).
const (
	keyMsgSize    = 59
	keyMsgSizeGID = 108
	versionSize   = 16 // MAX_VERSION
	// maxPending bounds what WatchPeer keeps of what the peer sends during
	// a run: its next handshake, twice over.
	maxPending = 2 * keyMsgSizeGID
)

// ErrPeer is wrapped by every error that means the other side broke off.
var ErrPeer = errors.New("the other side")

// Dest is struct pingpong_dest: what each side tells the other about one QP.
// A plain value.
type Dest struct {
	LID      uint16
	OutReads uint16
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// AppendKey appends d as perftest's key message: KEY_PRINT_FMT_GID
// ("%04x:%04x:%06x:%06x:%08x:%016llx:" then the 16 GID bytes as "%02x:" and
// "%08x:") when withGID, else KEY_PRINT_FMT; then the NUL that write() sends.
func (d *Dest) AppendKey(b []byte, withGID bool) []byte {
	b = fmt.Appendf(b, "%04x:%04x:%06x:%06x:%08x:%016x", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr)
	if withGID {
		for _, g := range d.GID {
			b = fmt.Appendf(b, ":%02x", g)
		}
		b = fmt.Appendf(b, ":%08x:", d.SRQN)
	} else {
		b = fmt.Appendf(b, ":%08x", d.SRQN)
	}
	return append(b, 0)
}

// ParseKey reads a key message as ethernet_read_keys does: colon-separated hex
// fields up to the NUL.
func ParseKey(msg []byte, withGID bool) (Dest, error) {
	var d Dest
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	f := strings.Split(string(msg), ":")
	want := 7
	if withGID {
		want = 23
	}
	if len(f) < want {
		return d, fmt.Errorf("couldn't parse key message %q: %d fields, want %d", msg, len(f), want)
	}
	var vals [23]uint64
	for i := 0; i < want; i++ {
		v, err := strconv.ParseUint(f[i], 16, 64)
		if err != nil {
			return d, fmt.Errorf("couldn't parse key message %q: field %d: %v", msg, i, err)
		}
		vals[i] = v
	}
	d.LID, d.OutReads = uint16(vals[0]), uint16(vals[1])
	d.QPN, d.PSN, d.RKey, d.VAddr = uint32(vals[2]), uint32(vals[3]), uint32(vals[4]), vals[5]
	if withGID {
		for i := range d.GID {
			d.GID[i] = byte(vals[6+i])
		}
		d.SRQN = uint32(vals[22])
	} else {
		d.SRQN = uint32(vals[6])
	}
	return d, nil
}

// BWReport is struct bw_report_data as xchg_bw_reports exchanges it. A plain value.
type BWReport struct {
	Size    uint64
	Iters   uint64
	Peak    float64
	Avg     float64
	MsgRate float64
}

// Conn is the connection of the exchange: TCP, or an rdma_cm connection with
// -z and -R. Its methods belong to the test's goroutine; Close, and the watcher
// WatchPeer starts, may run concurrently.
type Conn struct {
	c      net.Conn // TCP, or nil
	cm     *cmLink  // rdma_cm, or nil
	client bool
	// Timeout bounds each prompt exchange (setup, syncs); exchanges that wait for
	// the other side's whole measurement have none and rely on TCP keepalive, EOF
	// and Close.
	Timeout time.Duration

	mu      sync.Mutex // guards pending while a watcher runs
	pending []byte     // bytes a watcher read ahead
	buf     [keyMsgSizeGID]byte
}

// NewConn wraps an established connection; client says which side writes first.
func NewConn(c net.Conn, client bool) *Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 5})
		_ = tc.SetNoDelay(true)
	}
	return &Conn{c: c, client: client, Timeout: 30 * time.Second}
}

// newCMConn wraps an established rdma_cm link.
func newCMConn(l *cmLink, client bool) *Conn {
	return &Conn{cm: l, client: client, Timeout: 30 * time.Second}
}

// Close closes the connection; a blocked exchange returns an error. An rdma_cm
// link's resources stay until release.
func (c *Conn) Close() error {
	if c.cm != nil {
		c.cm.close()
		return nil
	}
	return c.c.Close()
}

// release frees an rdma_cm link (perftest destroys it after the test's own
// connections); the test's goroutine calls it once no exchange runs.
func (c *Conn) release() {
	if c.cm != nil {
		c.cm.release()
	}
}

// peerAddr is the peer's IP address, when the exchange runs over TCP or
// rdma_cm.
func (c *Conn) peerAddr() netip.Addr {
	if c.cm != nil {
		return c.cm.peer.Addr().Unmap()
	}
	if ap, err := netip.ParseAddrPort(c.c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// peer is the peer's address.
func (c *Conn) peer() string {
	if c.cm != nil {
		return c.cm.peer.String()
	}
	return c.c.RemoteAddr().String()
}

// xchg is ctx_xchg_data_ethernet: the client writes my then reads len(rem) bytes,
// the server the other way round. long drops the deadline.
func (c *Conn) xchg(my, rem []byte, long bool) error {
	dl := time.Time{}
	if !long && c.Timeout > 0 {
		dl = time.Now().Add(c.Timeout)
	}
	if c.cm != nil { // ctx_xchg_data_rdma
		first, second := func() error { return c.cm.write(my, dl, c.Timeout) }, func() error { return c.cm.read(rem, dl, c.Timeout) }
		if !c.client {
			first, second = second, first
		}
		if err := first(); err != nil {
			return err
		}
		return second()
	}
	if err := c.c.SetDeadline(dl); err != nil {
		return c.wrap(err)
	}
	if c.client {
		if err := c.write(my); err != nil {
			return err
		}
		return c.read(rem)
	}
	if err := c.read(rem); err != nil {
		return err
	}
	return c.write(my)
}

func (c *Conn) write(b []byte) error {
	if _, err := c.c.Write(b); err != nil {
		return c.wrap(err)
	}
	return nil
}

func (c *Conn) read(b []byte) error {
	c.mu.Lock()
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	c.mu.Unlock()
	if _, err := io.ReadFull(c.c, b[n:]); err != nil {
		return c.wrap(err)
	}
	return nil
}

func (c *Conn) wrap(err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w (%v) closed the connection", ErrPeer, c.peer())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w (%v) did not answer within %v", ErrPeer, c.peer(), c.Timeout)
	case errors.Is(err, net.ErrClosed):
		return fmt.Errorf("connection to %v closed: %w", c.peer(), net.ErrClosed)
	}
	return fmt.Errorf("%w (%v): %v", ErrPeer, c.peer(), err)
}

// XchgVersions is exchange_versions: 16 bytes of version text each way. It
// returns the peer's version as atof reads it.
func (c *Conn) XchgVersions(my string) (string, float64, error) {
	var m, r [versionSize]byte
	copy(m[:versionSize-1], my)
	if err := c.xchg(m[:], r[:], false); err != nil {
		return "", 0, err
	}
	s := string(r[:])
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return s, atof(s), nil
}

// atof reads the leading decimal number of s, 0 when there is none.
func atof(s string) float64 {
	end := 0
	dot := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		dot = dot || s[end] == '.'
		end++
	}
	v, _ := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	return v
}

// XchgSysData is check_sys_data: the cycle buffer and the cache line size, each
// a big-endian int32 in an exchange of its own.
func (c *Conn) XchgSysData(cycleBuffer, cacheLine int) (remCycle, remCache int, err error) {
	var m, r [4]byte
	binary.BigEndian.PutUint32(m[:], uint32(cycleBuffer))
	if err := c.xchg(m[:], r[:], false); err != nil {
		return 0, 0, err
	}
	remCycle = int(int32(binary.BigEndian.Uint32(r[:])))
	binary.BigEndian.PutUint32(m[:], uint32(cacheLine))
	if err := c.xchg(m[:], r[:], false); err != nil {
		return 0, 0, err
	}
	return remCycle, int(int32(binary.BigEndian.Uint32(r[:]))), nil
}

// XchgMTU is check_mtu's exchange: the enum ibv_mtu value as "%d" text in two
// bytes (sizeof(char[2]) for peers from 5.31 on). It returns the peer's value,
// 0 if unreadable.
func (c *Conn) XchgMTU(mtuEnum int) (int, error) {
	m := [2]byte{byte('0' + mtuEnum%10), 0}
	var r [2]byte
	if err := c.xchg(m[:], r[:], false); err != nil {
		return 0, err
	}
	v, _ := strconv.Atoi(string(bytes.TrimRight(r[:], "\x00")))
	return v, nil
}

// HandShake is ctx_hand_shake: the key messages of one QP each way (text over
// TCP, struct pingpong_dest over rdma_cm). long marks a handshake that waits
// for the other side's measurement.
func (c *Conn) HandShake(my *Dest, long bool) (Dest, error) {
	if c.cm != nil {
		var r [destSize]byte
		if err := c.xchg(appendDestBinary(c.buf[:0], my), r[:], long); err != nil {
			return Dest{}, err
		}
		return parseDestBinary(r[:]), nil
	}
	m := my.AppendKey(c.buf[:0], true)
	var r [keyMsgSizeGID]byte
	if err := c.xchg(m, r[:], long); err != nil {
		return Dest{}, err
	}
	d, err := ParseKey(r[:], true)
	if err != nil {
		return d, fmt.Errorf("%w (%v) sent a bad key message: %v", ErrPeer, c.peer(), err)
	}
	return d, nil
}

// XchgBWReports is xchg_bw_reports for peers from 5.33 on: size, iterations,
// peak, average and message rate, each in an exchange of its own, 64-bit
// big-endian (doubles byte-swapped as hton_double does).
func (c *Conn) XchgBWReports(my BWReport) (BWReport, error) {
	var rem BWReport
	for i, v := range []uint64{my.Size, my.Iters, math.Float64bits(my.Peak), math.Float64bits(my.Avg), math.Float64bits(my.MsgRate)} {
		var m, r [8]byte
		binary.BigEndian.PutUint64(m[:], v)
		if err := c.xchg(m[:], r[:], false); err != nil {
			return rem, err
		}
		u := binary.BigEndian.Uint64(r[:])
		switch i {
		case 0:
			rem.Size = u
		case 1:
			rem.Iters = u
		case 2:
			rem.Peak = math.Float64frombits(u)
		case 3:
			rem.Avg = math.Float64frombits(u)
		case 4:
			rem.MsgRate = math.Float64frombits(u)
		}
	}
	return rem, nil
}

// WatchPeer starts reading ahead on the connection, so that a peer that dies or
// closes while the measurement runs is seen at once: gone is set then. stop ends
// the watch and keeps what was read for the next exchange. Between the two, the
// caller must not exchange.
func (c *Conn) WatchPeer(gone *atomic.Bool) (stop func()) {
	if c.cm != nil {
		return c.cm.watch(gone)
	}
	done := make(chan struct{})
	_ = c.c.SetReadDeadline(time.Time{})
	go func() {
		defer close(done)
		var b [keyMsgSizeGID]byte
		for {
			n, err := c.c.Read(b[:])
			if n > 0 {
				c.mu.Lock()
				over := len(c.pending)+n > maxPending
				if !over {
					c.pending = append(c.pending, b[:n]...)
				}
				c.mu.Unlock()
				if over {
					// An honest peer is at most its next handshake ahead;
					// one that streams is ended rather than buffered.
					gone.Store(true)
					return
				}
			}
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					gone.Store(true)
				}
				return
			}
		}
	}()
	return func() {
		_ = c.c.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = c.c.SetReadDeadline(time.Time{})
	}
}
