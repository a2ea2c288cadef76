// Package server is the daemon's side of the attach protocol (package attach,
// docs/attach.md): it serves processes attached to one verbs device, each in a
// session of its own objects, and moves their work requests and completions
// between the shared-memory rings and the device.
package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/verbs"
)

// Config bounds what the attached processes may take.
type Config struct {
	// MaxSessions attached at once (default 64); more are refused at accept.
	MaxSessions int
	// MaxUserSessions one user (SO_PEERCRED's uid) may hold at once (default
	// MaxSessions: no bound of its own). Where several users may attach
	// (--attach-group) a smaller one keeps one user from taking every slot.
	MaxUserSessions int
	// MaxObjects one session may hold (default 4096).
	MaxObjects int
	// MaxAllObjects all sessions together may hold (default: half the smaller
	// of vm.max_map_count and the open-file limit). An object may hold a
	// mapping and a descriptor of the daemon's: with both used up, every
	// session's calls fail, and the Go runtime's next mmap is a fatal error.
	// MaxSessions times MaxObjects (262,144) is past both.
	MaxAllObjects int
	// MaxShm bytes of rings one session may hold (default 256 MiB).
	MaxShm int
	// MaxMapped bytes of the process's memory one session may register
	// (default 1 TiB). The daemon maps each region, so MaxSessions times this
	// bounds what its address space (128 TiB) gives to processes.
	MaxMapped int
	// HelloTimeout bounds how long a connection may hold a session slot
	// before its HELLO (default 5 s): one that sends nothing is closed.
	HelloTimeout time.Duration
	// Allow decides whether a peer may attach, from its SO_PEERCRED (default:
	// root or the daemon's own user).
	Allow func(unix.Ucred) bool
	// Logf reports sessions starting and ending, and their protocol errors.
	Logf func(format string, args ...any)
}

func (c *Config) setDefaults() {
	if c.MaxSessions <= 0 {
		c.MaxSessions = 64
	}
	if c.MaxUserSessions <= 0 || c.MaxUserSessions > c.MaxSessions {
		c.MaxUserSessions = c.MaxSessions
	}
	if c.MaxObjects <= 0 {
		c.MaxObjects = 4096
	}
	if c.MaxAllObjects <= 0 {
		c.MaxAllObjects = allObjectsDefault()
	}
	if c.MaxShm <= 0 {
		c.MaxShm = 256 << 20
	}
	if c.MaxMapped <= 0 {
		c.MaxMapped = 1 << 40
	}
	if c.HelloTimeout <= 0 {
		c.HelloTimeout = 5 * time.Second
	}
	if c.Allow == nil {
		euid := uint32(os.Geteuid())
		c.Allow = func(u unix.Ucred) bool { return u.Uid == 0 || u.Uid == euid }
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// allObjectsDefault is half the smaller of the mappings and the descriptors
// the daemon may have: the other half is the runtime's, the data path's and
// the sessions' own.
func allObjectsDefault() int {
	n := 65530 // vm.max_map_count's default
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
			n = v
		}
	}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur < uint64(n) {
		n = int(rl.Cur)
	}
	return max(n/2, 1)
}

// Server serves attachments to one device. Safe for concurrent use.
type Server struct {
	dev   *verbs.Device
	cfg   Config
	unreg func()
	held  atomic.Int64 // objects all sessions hold (MaxAllObjects)

	srqs sync.Map // *verbs.SRQ to *srqObj: where an SRQ's events go (SRQs have no Context)

	mu       sync.Mutex
	sessions map[*session]struct{}
	perUser  map[uint32]int // sessions by uid (MaxUserSessions)
	closed   bool
	wg       sync.WaitGroup
}

// New starts a server for dev; Close stops it.
func New(dev *verbs.Device, cfg Config) *Server {
	cfg.setDefaults()
	s := &Server{dev: dev, cfg: cfg, sessions: map[*session]struct{}{}, perUser: map[uint32]int{}}
	s.unreg = dev.RegisterEventHandler(s.event)
	return s
}

// SessionInfo describes an attached process. A plain value.
type SessionInfo struct {
	PID     int      `json:"pid"`
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	Comm    string   `json:"comm"`
	Objects int      `json:"objects"`
	QPNs    []uint32 `json:"qpns"`
	CMIDs   []uint32 `json:"cm_ids"` // their cm-idn (rdmacm.IDInfo.N)
}

// Sessions lists the attached processes.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SessionInfo, 0, len(s.sessions))
	for ss := range s.sessions {
		ss.mu.Lock()
		si := SessionInfo{PID: int(ss.cred.Pid), UID: int(ss.cred.Uid), GID: int(ss.cred.Gid), Comm: ss.comm,
			Objects: len(ss.objs)}
		for _, q := range ss.qps {
			si.QPNs = append(si.QPNs, q.qp.QPN())
		}
		for _, o := range ss.objs {
			if c, ok := o.(*cmObj); ok {
				si.CMIDs = append(si.CMIDs, c.id.N())
			}
		}
		ss.mu.Unlock()
		out = append(out, si)
	}
	return out
}

// Serve accepts attachments on ln (a "unixpacket" listener) until ln is
// closed; it returns nil then.
func (s *Server) Serve(ln *net.UnixListener) error {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.Attach(c)
	}
}

// Attach serves one connection (a SOCK_SEQPACKET Unix socket) in a session
// of its own, after checking its peer's credentials; it does not block.
func (s *Server) Attach(c *net.UnixConn) {
	cred, err := peerCred(c)
	if err != nil || !s.cfg.Allow(cred) {
		s.cfg.Logf("attach: peer %+v refused (%v)", cred, err)
		c.Close()
		return
	}
	s.mu.Lock()
	if s.closed || len(s.sessions) >= s.cfg.MaxSessions {
		n := len(s.sessions)
		s.mu.Unlock()
		s.cfg.Logf("attach: pid %d refused: %d sessions", cred.Pid, n)
		c.Close()
		return
	}
	if n := s.perUser[cred.Uid]; n >= s.cfg.MaxUserSessions {
		s.mu.Unlock()
		s.cfg.Logf("attach: pid %d refused: uid %d holds %d sessions", cred.Pid, cred.Uid, n)
		c.Close()
		return
	}
	ss, err := newSession(s, c, cred)
	if err != nil {
		s.mu.Unlock()
		s.cfg.Logf("attach: pid %d: %v", cred.Pid, err)
		c.Close()
		return
	}
	s.sessions[ss] = struct{}{}
	s.perUser[cred.Uid]++
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		ss.run()
		s.mu.Lock()
		delete(s.sessions, ss)
		if s.perUser[cred.Uid]--; s.perUser[cred.Uid] == 0 {
			delete(s.perUser, cred.Uid)
		}
		s.mu.Unlock()
	}()
}

// Close ends every session (freeing its objects, as if its process had
// exited) and waits for them.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ss := range s.sessions {
		ss.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.unreg()
	return nil
}

func peerCred(c *net.UnixConn) (unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return unix.Ucred{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return unix.Ucred{}, err
	}
	if cerr != nil {
		return unix.Ucred{}, cerr
	}
	return *cred, nil
}

// event routes the device's asynchronous events to the session whose object
// they name (its QPs' and CQs' Context).
func (s *Server) event(ev verbs.AsyncEvent) {
	var o obj
	switch {
	case ev.QP != nil:
		if q, ok := ev.QP.Context().(*qpObj); ok {
			o = q
		}
	case ev.CQ != nil:
		if c, ok := ev.CQ.Context().(*cqObj); ok {
			o = c
		}
	case ev.SRQ != nil:
		if x, ok := s.srqs.Load(ev.SRQ); ok {
			o = x.(*srqObj)
		}
	default: // the port's and the device's go to everyone
		s.mu.Lock()
		for ss := range s.sessions {
			ss.sendEvent(attach.EventMsg{Type: uint32(ev.Type)})
		}
		s.mu.Unlock()
		return
	}
	if o == nil {
		return
	}
	b := o.base()
	b.ss.mu.Lock()
	h := b.handle
	b.ss.mu.Unlock()
	b.ss.sendEvent(attach.EventMsg{Type: uint32(ev.Type), Kind: b.kind, Handle: h})
}

var (
	errNoHandle = fmt.Errorf("no such handle: %w", verbs.ErrNotFound)
	errShmLimit = fmt.Errorf("the session's shared memory limit: %w", verbs.ErrLimit)
)

func handleErr(kind string, h uint32) error { return fmt.Errorf("%s %d: %w", kind, h, errNoHandle) }
