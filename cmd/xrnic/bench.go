// The bench server: perftest's server side for any number of clients at once, each
// session with its own resources on the daemon's device.

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xrnic/xrnic/cmd/internal/perftest"
)

// The bench servers' bounds: they serve whoever connects (see --bench-listen's
// help). maxSessions run at once, maxPerSource of them from one address (more
// clients are turned away); each prompt exchange of a session's setup and
// syncs must finish within benchExchangeTimeout, and --bench-session-limit
// ends a session that runs longer. A session's buffer is the server options'
// size or the peer's cycle buffer (at most 2 MiB), per QP and half.
const (
	maxSessions          = 64
	maxPerSource         = 4
	benchExchangeTimeout = 5 * time.Second
)

// benchListenAddr is the address the bench servers listen on: --bench-listen,
// or the interface's first IPv4 address, else its first global IPv6 one.
func benchListenAddr(c config) (netip.Addr, error) {
	if c.benchListen.IsValid() {
		return c.benchListen, nil
	}
	ifi, err := net.InterfaceByName(c.iface)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bench server: %w", err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bench server: %s's addresses: %w", c.iface, err)
	}
	var v6 netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		switch ip = ip.Unmap(); {
		case ip.Is4():
			return ip, nil
		case ip.IsGlobalUnicast() && !v6.IsValid():
			v6 = ip
		}
	}
	if v6.IsValid() {
		return v6, nil
	}
	return netip.Addr{}, fmt.Errorf("bench server: %s has no IP address to listen on (give --bench-listen, or --bench-port 0)", c.iface)
}

// keyMsgLen is the length of perftest's key message with a GID
// (KEY_MSG_SIZE_GID): what the server writes for each QP in a handshake.
const keyMsgLen = 108

// benchSession is one client of the bench server. id, peer, test and start are
// set before the session is listed; mu guards qpns.
type benchSession struct {
	id    int
	peer  string
	test  string
	start time.Time

	mu   sync.Mutex
	qpns []uint32 // the session's QPs, as its key messages announced them
}

func (s *benchSession) addQPN(qpn uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.qpns, qpn) {
		s.qpns = append(s.qpns, qpn)
	}
}

// info is the session as the control socket reports it.
func (s *benchSession) info() sessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sessionInfo{ID: s.id, Peer: s.peer, Test: s.test, Start: s.start, QPNs: slices.Clone(s.qpns)}
}

// keySniffer passes a session's connection through and notes the QPNs of the
// key messages the server writes, so that introspection can name each QP's
// session.
type keySniffer struct {
	net.Conn
	s *benchSession
}

func (k *keySniffer) Write(p []byte) (int, error) {
	if len(p) == keyMsgLen {
		if d, err := perftest.ParseKey(p, true); err == nil {
			k.s.addQPN(d.QPN)
		}
	}
	return k.Conn.Write(p)
}

// benchServer accepts the clients of one test and runs their sessions until
// stop.
type benchServer struct {
	d      *daemon
	p      *perftest.Params // the server side's test and options
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup // RoutineBenchAccept and the sessions
}

// serveBench starts RoutineBenchAccept on ln for test p.
func (d *daemon) serveBench(ln net.Listener, p *perftest.Params) *benchServer {
	q := *p
	q.ExchangeTimeout, q.PeerGIDIsConnPeer = benchExchangeTimeout, !d.cfg.benchAnyGID
	p = &q
	ctx, cancel := context.WithCancel(context.Background())
	b := &benchServer{d: d, p: p, ln: ln, cancel: cancel}
	for _, w := range p.Warnings {
		for _, line := range strings.Split(strings.TrimSpace(w), "\n") {
			d.lg.printf("bench %s server: %s", p.Test.Name, strings.TrimSpace(strings.Trim(line, "-")))
		}
	}
	b.wg.Add(1)
	go b.routineAccept(ctx)
	return b
}

// stop closes the listener, ends the sessions (their QPs flush: each
// outstanding work request completes with WR_FLUSH_ERR) and waits for them.
func (b *benchServer) stop() {
	b.ln.Close()
	b.cancel()
	b.wg.Wait()
}

func (b *benchServer) routineAccept(ctx context.Context) {
	defer b.wg.Done()
	b.d.lg.printf("RoutineBenchAccept started on %v", b.ln.Addr())
	defer b.d.lg.printf("RoutineBenchAccept stopped")
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			// Out of descriptors or the like: say so, and do not spin.
			b.d.lg.printf("bench server: accept: %v", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		s, why := b.d.addSession(c.RemoteAddr().String(), b.p.Test.Name)
		if s == nil {
			b.d.lg.printf("bench server: turning %v away: %s", c.RemoteAddr(), why)
			c.Close()
			continue
		}
		b.wg.Add(1)
		go b.routineSession(ctx, s, c)
	}
}

// routineSession serves one client.
func (b *benchServer) routineSession(ctx context.Context, s *benchSession, c net.Conn) {
	defer b.wg.Done()
	d := b.d
	d.lg.printf("bench session %d from %s: %s", s.id, s.peer, s.test)
	if tc, ok := c.(*net.TCPConn); ok {
		// What perftest.NewConn does for a bare TCP connection.
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 5})
		_ = tc.SetNoDelay(true)
	}
	var rep bytes.Buffer
	sctx, cancel := context.WithTimeout(ctx, d.cfg.benchLimit)
	defer cancel()
	err := perftest.RunConn(sctx, b.p, &rep, io.Discard, d.dev, d.cfg.iface, &keySniffer{Conn: c, s: s})
	// The session counts as ended once its report is out: whoever sees it
	// ended in a snapshot finds the report.
	defer d.endSession(s, err == nil)
	switch {
	case ctx.Err() != nil:
		d.lg.printf("bench session %d from %s: closed (the daemon is stopping)", s.id, s.peer)
	case sctx.Err() != nil:
		d.lg.printf("bench session %d from %s: ended after --bench-session-limit %v", s.id, s.peer, d.cfg.benchLimit)
	case err != nil:
		d.lg.printf("bench session %d from %s: %v", s.id, s.peer, err)
	default:
		d.lg.printf("bench session %d from %s: done", s.id, s.peer)
		fmt.Fprintf(d.out, "bench session %d from %s (%s):\n%s", s.id, s.peer, s.test, rep.String())
	}
}

// addSession lists a new session, or returns nil and why when maxSessions
// are running, or maxPerSource from peer's address.
func (d *daemon) addSession(peer, test string) (*benchSession, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.sessions) >= maxSessions {
		return nil, fmt.Sprintf("%d sessions are running", maxSessions)
	}
	host := sourceOf(peer)
	n := 0
	for _, s := range d.sessions {
		if sourceOf(s.peer) == host {
			n++
		}
	}
	if n >= maxPerSource {
		return nil, fmt.Sprintf("%d sessions from %s are running", maxPerSource, host)
	}
	d.nextID++
	s := &benchSession{id: d.nextID, peer: peer, test: test, start: time.Now()}
	d.sessions[s.id] = s
	return s, ""
}

// sourceOf is the address part of a session's peer, host:port.
func sourceOf(peer string) string {
	if host, _, err := net.SplitHostPort(peer); err == nil {
		return host
	}
	return peer
}

func (d *daemon) endSession(s *benchSession, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.sessions, s.id)
	if ok {
		d.ended[0]++
	} else {
		d.ended[1]++
	}
}

// sessionInfos lists the running sessions by ID, and how many ended (ok, failed).
func (d *daemon) sessionInfos() ([]sessionInfo, [2]uint64) {
	d.mu.Lock()
	ss := make([]*benchSession, 0, len(d.sessions))
	for _, s := range d.sessions {
		ss = append(ss, s)
	}
	ended := d.ended
	d.mu.Unlock()
	infos := make([]sessionInfo, len(ss))
	for i, s := range ss {
		infos[i] = s.info()
	}
	slices.SortFunc(infos, func(a, b sessionInfo) int { return a.ID - b.ID })
	return infos, ended
}
