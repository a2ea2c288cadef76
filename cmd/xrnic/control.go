// The control socket: a unix socket on which the daemon answers introspection
// requests with a JSON snapshot of its device, and the client side of it.
//
// The protocol is one request line, "snapshot", and one JSON object in reply,
// after which the daemon closes the connection. A reply with "error" set is a
// failure.
//
// Who may read it: the snapshot holds every session's keys, addresses and
// PSNs, so the socket is the daemon's user's alone (mode 0600 whatever the
// umask, in a directory of mode 0755), and the daemon answers only a peer
// whose SO_PEERCRED uid is root's or its own, should the mode be widened.

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/bpf"
	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// controlTimeout bounds one control exchange, both sides; maxControlConns
// bounds the exchanges served at once (more are closed at once).
const (
	controlTimeout  = 5 * time.Second
	maxControlConns = 16
	controlDirMode  = 0o755
	controlSockMode = 0o600
)

// snapshot is the daemon's device as the introspection commands print it. A
// plain value, JSON on the control socket.
type snapshot struct {
	Error     string               `json:"error,omitempty"`
	Device    string               `json:"device"`
	Port      int                  `json:"port"`
	Interface string               `json:"interface"`
	Link      string               `json:"link"`
	XDPMode   string               `json:"xdp_mode,omitempty"`
	PortState string               `json:"port_state"`
	Width     string               `json:"active_width"` // "1X", as ibv_devinfo shows it
	Speed     string               `json:"active_speed"` // "10.0 Gbps", as ibv_devinfo shows it
	PID       int                  `json:"pid"`
	Comm      string               `json:"comm"`
	Counters  []namedValue         `json:"counters"`              // in the order of verbs.Counter
	Engine    []namedValue         `json:"engine_counters"`       // in the order of verbs.EngineCounter
	CM        []namedValue         `json:"cm_counters,omitempty"` // the IB CM's on QP1, once it runs
	LinkStats link.Stats           `json:"link_stats"`            // every queue's link, summed
	Queues    []namedValue         `json:"queues,omitempty"`      // with --queues: frames each queue's engine received
	XDP       *bpf.Counters        `json:"xdp,omitempty"`         // AF_XDP links only
	Resources verbs.Resources      `json:"resources"`
	CMIDs     []rdmacm.IDInfo      `json:"cm_ids"`
	Sessions  []sessionInfo        `json:"sessions"`
	Attached  []server.SessionInfo `json:"attached"`       // processes attached to the device
	Ended     [2]uint64            `json:"sessions_ended"` // ok, failed
}

type namedValue struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// sessionInfo is a running bench session.
type sessionInfo struct {
	ID    int       `json:"id"`
	Peer  string    `json:"peer"`
	Test  string    `json:"test"`
	Start time.Time `json:"start"`
	QPNs  []uint32  `json:"qpns"`
}

// snapshot takes the device's snapshot.
func (d *daemon) snapshot() (snapshot, error) {
	res, err := d.dev.Resources()
	if err != nil {
		return snapshot{}, err
	}
	info := d.l.Info()
	port := d.dev.QueryPort()
	s := snapshot{
		Device: d.dev.Name(), Port: 1, Interface: info.Name, Link: info.Kind.String(),
		PortState: port.State.String(), Width: port.ActiveWidth.String(), Speed: port.ActiveSpeed.String(),
		PID: d.pid, Comm: d.comm,
		Resources: res, CMIDs: rdmacm.Resources(d.dev),
	}
	for _, l := range d.ls {
		ls := l.Stats()
		s.LinkStats.RxFrames += ls.RxFrames
		s.LinkStats.RxBytes += ls.RxBytes
		s.LinkStats.TxFrames += ls.TxFrames
		s.LinkStats.TxBytes += ls.TxBytes
		s.LinkStats.RxDropped += ls.RxDropped
		s.LinkStats.TxDropped += ls.TxDropped
		s.LinkStats.TxErrors += ls.TxErrors
	}
	if q := d.dev.QueueCounters(); len(q) > 1 {
		for i, c := range q {
			s.Queues = append(s.Queues, namedValue{fmt.Sprint(i), c[verbs.EngRxFrames]})
		}
	}
	cnt := d.dev.Counters()
	for i, v := range cnt {
		s.Counters = append(s.Counters, namedValue{verbs.Counter(i).String(), v})
	}
	for i, v := range d.dev.EngineCounters() {
		s.Engine = append(s.Engine, namedValue{verbs.EngineCounter(i).String(), v})
	}
	if c, ok := d.dev.CMCounters(); ok {
		for i, v := range c {
			s.CM = append(s.CM, namedValue{cm.Counter(i).String(), v})
		}
	}
	if x, ok := d.l.(*link.AFXDP); ok {
		s.XDPMode = d.cfg.mode.String()
		if pc, err := x.ProgramCounters(); err == nil {
			s.XDP = &pc
		}
	}
	s.Sessions, s.Ended = d.sessionInfos()
	if d.attach != nil {
		s.Attached = d.attach.Sessions()
	}
	return s, nil
}

// listenControl creates the control socket. A socket file nobody listens on is
// a leftover and is replaced; one a daemon answers on is refused.
func listenControl(path string) (*net.UnixListener, error) { return listenUnix("unix", path) }

// listenUnix is listenControl for a socket of either type ("unix" or
// "unixpacket").
func listenUnix(network, path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, controlDirMode); err != nil {
			return nil, fmt.Errorf("control socket: %w (give --control PATH, or --control \"\" for none)", err)
		}
		if err := os.Chmod(dir, controlDirMode); err != nil { // not the umask's
			return nil, fmt.Errorf("control socket: %w", err)
		}
	}
	if _, err := os.Lstat(path); err == nil {
		c, err := net.DialTimeout(network, path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another xrnic daemon is listening on it (give --control)", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("control socket %s exists and is not a daemon's: %w", path, unwrapOp(err))
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket: removing the leftover %s: %w", path, err)
		}
	}
	ln, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w (give --control PATH, or --control \"\" for none)", path, unwrapOp(err))
	}
	// The umask decided the mode bind gave it; until this chmod the peer
	// check in handleControl is what keeps others out.
	if err := os.Chmod(path, controlSockMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return ln, nil
}

// controlPeerAllowed reports whether the peer on c is root or the daemon's
// own user (SO_PEERCRED).
func controlPeerAllowed(c net.Conn) (uid uint32, ok bool) {
	uc, isUnix := c.(*net.UnixConn)
	if !isUnix {
		return 0, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return 0, false
	}
	return cred.Uid, cred.Uid == 0 || int(cred.Uid) == os.Geteuid()
}

// serveControl starts RoutineControl on ln; stop closes the socket (removing its
// file) and waits for the requests in progress.
func (d *daemon) serveControl(ln *net.UnixListener, wg *sync.WaitGroup) (stop func()) {
	var reqs sync.WaitGroup
	slots := make(chan struct{}, maxControlConns)
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.lg.printf("RoutineControl started on %s", ln.Addr())
		defer d.lg.printf("RoutineControl stopped")
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					d.lg.printf("control socket: %v", err)
				}
				return
			}
			select {
			case slots <- struct{}{}:
			default:
				c.Close() // maxControlConns exchanges are running
				continue
			}
			reqs.Add(1)
			go func() {
				defer reqs.Done()
				defer func() { <-slots }()
				d.handleControl(c)
			}()
		}
	}()
	return func() {
		ln.Close()
		reqs.Wait()
	}
}

func (d *daemon) handleControl(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(controlTimeout))
	line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
	if err != nil {
		return
	}
	// Checked once the request is read: closing with it unread would reset
	// the connection before the peer reads the refusal.
	if uid, ok := controlPeerAllowed(c); !ok {
		d.lg.printf("control socket: refused a peer with uid %d", uid)
		_ = json.NewEncoder(c).Encode(map[string]string{
			"error": "permission denied: the control socket answers root and the daemon's user"})
		return
	}
	var s snapshot
	switch req := strings.TrimSpace(line); req {
	case "snapshot":
		if s, err = d.snapshot(); err != nil {
			s = snapshot{Error: err.Error()}
		}
	default:
		s.Error = fmt.Sprintf("unknown request %q", req)
	}
	_ = json.NewEncoder(c).Encode(&s)
}

// fetchSnapshot asks the daemon on socket for its snapshot.
func fetchSnapshot(socket string) (snapshot, error) {
	c, err := net.DialTimeout("unix", socket, controlTimeout)
	if err != nil {
		return snapshot{}, fmt.Errorf("control socket %s: no daemon answers (%v)", socket, unwrapOp(err))
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(controlTimeout))
	if _, err := io.WriteString(c, "snapshot\n"); err != nil {
		return snapshot{}, fmt.Errorf("control socket %s: %v", socket, unwrapOp(err))
	}
	var s snapshot
	if err := json.NewDecoder(c).Decode(&s); err != nil {
		return snapshot{}, fmt.Errorf("control socket %s: bad reply: %v", socket, unwrapOp(err))
	}
	if s.Error != "" {
		return snapshot{}, fmt.Errorf("daemon on %s: %s", socket, s.Error)
	}
	return s, nil
}

// findSocket picks the control socket when the command names none: the only
// one in controlDir.
func findSocket() (string, error) {
	m, _ := filepath.Glob(filepath.Join(controlDir, "*.sock"))
	switch len(m) {
	case 0:
		return "", fmt.Errorf("no daemon: %s has no control socket (start xrnic -i IFACE, or give -s SOCKET)", controlDir)
	case 1:
		return m[0], nil
	}
	return "", fmt.Errorf("%d daemons (%s): give -i IFACE or -s SOCKET", len(m), strings.Join(m, ", "))
}

// runClient runs an introspection command.
func runClient(c clientConfig, out, errOut io.Writer) error {
	if c.socket == "" {
		var err error
		if c.socket, err = findSocket(); err != nil {
			return err
		}
	}
	s, err := fetchSnapshot(c.socket)
	if err != nil {
		return err
	}
	var b strings.Builder
	switch {
	case c.cmd == "statistic":
		formatStatistic(&b, &s, c.details)
	case c.object == "qp":
		formatQPs(&b, &s)
	case c.object == "cq":
		formatCQs(&b, &s)
	case c.object == "mr":
		formatMRs(&b, &s)
	case c.object == "cm_id":
		formatCMIDs(&b, &s)
	default:
		formatResources(&b, &s)
	}
	_, err = io.WriteString(out, b.String())
	return err
}
