// The out-of-band exchange over TCP, byte for byte as rdma-core's
// libibverbs/examples/rc_pingpong.c (v44) does it in pp_client_exch_dest and
// pp_server_exch_dest, with pingpong.c's gid_to_wire_gid and wire_gid_to_gid:
//
//	client: connect, write the 52-byte message, read the server's, write "done\0", close
//	server: accept, read the client's message, connect the QP (RTR and RTS),
//	        write its own message, read "done\0", close
//
// srq_pingpong sends 256 messages each way instead of one (MAX_QP, zeros for
// the QPs it does not have).
//
// A message is sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, wire_gid) in a
// buffer of sizeof "0000:000000:000000:00000000000000000000000000000000", NUL
// included, and write() sends the whole buffer.

package pingpong

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/oob"
	"github.com/xrnic/xrnic/verbs"
)

// MsgSize is sizeof "0000:000000:000000:00000000000000000000000000000000": the
// 51 characters of a message and its NUL.
const MsgSize = len("0000:000000:000000:00000000000000000000000000000000") + 1

// doneMsg is what the client writes once it has the server's message: write(fd,
// "done", sizeof "done"), the NUL included.
var doneMsg = []byte("done\x00")

// ErrPeer is wrapped by every error that means the other side broke off or sent
// something rc_pingpong would not.
var ErrPeer = errors.New("the other side")

// Dest is struct pingpong_dest: what each side tells the other about its QP. A
// plain value.
type Dest struct {
	LID uint16 // 0 on RoCE
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID verbs.GID
}

// WireGID is gid_to_wire_gid: the GID as four "%08x" of htobe32 of its 32-bit
// words, which is its 16 bytes in order as 32 lower-case hex digits.
func WireGID(g verbs.GID) string { return hex.EncodeToString(g[:]) }

// ParseWireGID is wire_gid_to_gid for a well-formed field: exactly 32 hex
// digits (either case, as sscanf's %x reads them).
func ParseWireGID(s string) (verbs.GID, error) {
	var g verbs.GID
	if len(s) != 2*len(g) {
		return g, fmt.Errorf("GID %q: %d characters, want 32 hex digits", s, len(s))
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return verbs.GID{}, fmt.Errorf("GID %q: want 32 hex digits", s)
	}
	return g, nil
}

// Message returns d as the message rc_pingpong writes: "%04x:%06x:%06x:%s" with
// the wire GID, then the NUL, MsgSize bytes in all. Values wider than their
// fields (which would overrun rc_pingpong's buffer) are an error.
func (d *Dest) Message() ([]byte, error) {
	b := fmt.Appendf(make([]byte, 0, MsgSize), "%04x:%06x:%06x:%s", d.LID, d.QPN, d.PSN, WireGID(d.GID))
	if len(b) != MsgSize-1 {
		return nil, fmt.Errorf("QPN %#x or PSN %#x wider than 24 bits", d.QPN, d.PSN)
	}
	return append(b, 0), nil
}

// ParseMessage reads a peer's message as rc_pingpong's
// sscanf(msg, "%x:%x:%x:%s") and wire_gid_to_gid do, but strictly: it must be
// MsgSize bytes, NUL-terminated, with four colon-separated fields of hex digits
// that fit a LID (16 bits), a QPN and a PSN (24 bits) and a GID (32 digits).
func ParseMessage(msg []byte) (Dest, error) {
	var d Dest
	if len(msg) != MsgSize {
		return d, fmt.Errorf("message of %d bytes, want %d", len(msg), MsgSize)
	}
	end := bytes.IndexByte(msg, 0)
	if end < 0 {
		return d, fmt.Errorf("message %q is not NUL-terminated", msg)
	}
	f := bytes.Split(msg[:end], []byte(":"))
	if len(f) != 4 {
		return d, fmt.Errorf("message %q: %d fields, want LID:QPN:PSN:GID", msg[:end], len(f))
	}
	field := func(i int, name string, bits int) (uint32, error) {
		s := string(f[i])
		if len(s) == 0 || len(s) > bits/4 || !isHex(s) {
			return 0, fmt.Errorf("message %q: %s %q is not a %d-bit hex number", msg[:end], name, s, bits)
		}
		v, err := strconv.ParseUint(s, 16, bits)
		return uint32(v), err
	}
	lid, err := field(0, "LID", 16)
	if err != nil {
		return d, err
	}
	d.LID = uint16(lid)
	if d.QPN, err = field(1, "QPN", 24); err != nil {
		return d, err
	}
	if d.PSN, err = field(2, "PSN", 24); err != nil {
		return d, err
	}
	if d.GID, err = ParseWireGID(string(f[3])); err != nil {
		return d, fmt.Errorf("message %q: %w", msg[:end], err)
	}
	return d, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// ExchangeTimeout bounds each read and write of the exchange once connected; 0
// means none. rc_pingpong has none, but a peer that accepts and never answers
// would then hang bench for good.
var ExchangeTimeout = 30 * time.Second

// ClientExchange is pp_client_exch_dest once connected: it writes my messages
// (one per QP; srq_pingpong's maxQP), reads as many of the server's, writes
// "done" and closes c. It returns the server's Dests.
func ClientExchange(c net.Conn, my []Dest) ([]Dest, error) {
	defer c.Close()
	out, err := messages(my)
	if err != nil {
		return nil, err
	}
	setDeadline(c)
	if _, err := c.Write(out); err != nil {
		return nil, fmt.Errorf("couldn't send local address: %w", peerErr(c, err, 0, 0))
	}
	rem := make([]Dest, len(my))
	for i := range rem {
		if rem[i], err = readDest(c); err != nil {
			return nil, err
		}
	}
	if _, err := c.Write(doneMsg); err != nil {
		return nil, fmt.Errorf("couldn't write \"done\": %w", peerErr(c, err, 0, 0))
	}
	return rem, nil
}

// messages are the address messages of my, one after another.
func messages(my []Dest) ([]byte, error) {
	out := make([]byte, 0, len(my)*MsgSize)
	for i := range my {
		m, err := my[i].Message()
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	return out, nil
}

// readDest reads and parses the peer's address message.
func readDest(c net.Conn) (Dest, error) {
	var r [MsgSize]byte
	if n, err := io.ReadFull(c, r[:]); err != nil {
		return Dest{}, fmt.Errorf("couldn't read remote address: %w", peerErr(c, err, n, MsgSize))
	}
	rem, err := ParseMessage(r[:])
	if err != nil {
		return Dest{}, fmt.Errorf("%w (%v) sent a bad address: %v", ErrPeer, c.RemoteAddr(), err)
	}
	return rem, nil
}

// ServerExchange is pp_server_exch_dest once a client is accepted: it reads as
// many of the client's messages as my has, calls connect with them (the
// examples move their QPs to RTR and RTS there, before they answer), writes my
// messages, reads "done" and closes c. It returns the client's Dests.
func ServerExchange(c net.Conn, my []Dest, connect func(rem []Dest) error) ([]Dest, error) {
	defer c.Close()
	out, err := messages(my)
	if err != nil {
		return nil, err
	}
	setDeadline(c)
	rem := make([]Dest, len(my))
	for i := range rem {
		if rem[i], err = readDest(c); err != nil {
			return nil, err
		}
	}
	if err := connect(rem); err != nil {
		return nil, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	setDeadline(c)
	if _, err := c.Write(out); err != nil {
		return nil, fmt.Errorf("couldn't send local address: %w", peerErr(c, err, 0, 0))
	}
	var done [len("done") + 1]byte
	if n, err := io.ReadFull(c, done[:]); err != nil {
		return nil, fmt.Errorf("couldn't read \"done\": %w", peerErr(c, err, n, len(done)))
	}
	if !bytes.Equal(done[:], doneMsg) {
		return nil, fmt.Errorf("%w (%v) sent %q, want \"done\\x00\"", ErrPeer, c.RemoteAddr(), done[:])
	}
	return rem, nil
}

func setDeadline(c net.Conn) {
	if ExchangeTimeout > 0 {
		_ = c.SetDeadline(time.Now().Add(ExchangeTimeout))
	}
}

// peerErr describes a failed read (n of want bytes) or write on c.
func peerErr(c net.Conn, err error, n, want int) error {
	switch {
	case errors.Is(err, io.EOF) && n == 0:
		return fmt.Errorf("%w (%v) closed the connection", ErrPeer, c.RemoteAddr())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w (%v) closed the connection after %d of %d bytes", ErrPeer, c.RemoteAddr(), n, want)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w (%v) did not answer within %v", ErrPeer, c.RemoteAddr(), ExchangeTimeout)
	case errors.Is(err, net.ErrClosed):
		return fmt.Errorf("connection to %v closed: %w", c.RemoteAddr(), net.ErrClosed)
	}
	return fmt.Errorf("%w (%v): %v", ErrPeer, c.RemoteAddr(), oob.UnwrapOp(err))
}

// Ntop is glibc's inet_ntop(AF_INET6, gid, buf, 33) as rc_pingpong calls it
// for its address lines: the compressed IPv6 text, with the dotted IPv4 tail
// only for ::a.b.c.d and ::ffff:a.b.c.d. ok is false when the text does not fit
// the 33-byte buffer (more than 32 characters): inet_ntop then fails and leaves
// the buffer as it was.
func Ntop(g verbs.GID) (s string, ok bool) {
	var w [8]int
	for i := range 16 {
		w[i/2] |= int(g[i]) << ((1 - i%2) * 8)
	}
	// The longest run of zero words, the first of equal ones, if 2 or more.
	bestBase, bestLen, curBase, curLen := -1, 0, -1, 0
	for i := range 8 {
		if w[i] == 0 {
			if curBase == -1 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase != -1 {
			if bestBase == -1 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase != -1 && bestLen < 2 {
		bestBase = -1
	}
	b := make([]byte, 0, 46)
	for i := 0; i < 8; i++ {
		if bestBase != -1 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b = append(b, ':')
			}
			continue
		}
		if i != 0 {
			b = append(b, ':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || bestLen == 5 && w[5] == 0xffff) {
			b = fmt.Appendf(b, "%d.%d.%d.%d", g[12], g[13], g[14], g[15])
			break
		}
		b = strconv.AppendInt(b, int64(w[i]), 16)
	}
	if bestBase != -1 && bestBase+bestLen == 8 {
		b = append(b, ':')
	}
	return string(b), len(b) <= 32
}
