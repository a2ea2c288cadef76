// One side of a test: the device, its resources (perftest's ctx_init:
// PD, one MR over page-aligned memory, CQs, RC QPs), the connection of the QPs
// (ctx_connect), and the flow of exchanges and measurements each test's main()
// follows.

package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/spin"
	"github.com/xrnic/xrnic/nic/wire"
	"github.com/xrnic/xrnic/verbs"
)

// Limits of the resources a session creates.
const (
	pollBatch    = 16 // CTX_POLL_BATCH: completions per poll
	minRNRTimer  = 12 // MIN_RNR_TIMER
	retryCount   = 7  // DEF_RETRY_COUNT
	rnrRetry     = 7
	atomicAdd    = 1 // ATOMIC_ADD_VALUE
	atomicSwap   = 0 // ATOMIC_SWAP_VALUE
	gidScoreFam  = 100
	gidScoreGlob = 10
	gidScoreV2   = 2
)

// session is one side of a running test. It belongs to the goroutine that runs
// the test; stop may be set from any goroutine.
type session struct {
	ctx    context.Context
	p      *Params
	out    io.Writer
	figOut io.Writer // where --output's figure goes (out is then io.Discard)
	errw   io.Writer
	dev    *verbs.Device
	name   string // the device as the header names it
	conn   *Conn

	cycleBuffer, cacheLine int
	mtu                    verbs.MTU
	gidIndex               int
	gid                    verbs.GID
	outReads               int
	inline                 int

	pd       *verbs.PD
	buf      []byte      // MapAnonymous memory
	mrs      []*verbs.MR // one, or with --mr_per_qp one per QP (QP i's send and receive halves)
	buffSize uint64      // BUFF_SIZE(size, cycle_buffer): one QP's half of buf
	scq, rcq *verbs.CQ
	ch       *verbs.CompChannel // -e: the CQs' completion channel
	srq      *verbs.SRQ         // --use-srq, on the sides that receive
	qps      []*verbs.QP
	cm       *cmQPs   // -R: the rdma_cm IDs that own qps
	ud       []udPeer // UD: where each QP's SENDs go
	my, rem  []Dest

	w    wrs          // the work requests and counters of the loops
	spin spin.Counter // the loops' spins on memory and on a full send queue

	stop     atomic.Bool // set when the run must end: cancelled, or the peer left
	peerGone atomic.Bool
	// haltCtx ends a wait on ch when the run must end (watch cancels it).
	haltCtx    context.Context
	fileMapped bool      // --mmap: buf is the file's mapping
	syncedAt   time.Time // when the last handshake ended
	ctxErr     func() error
	progress   *progress

	belowBW, belowRate bool      // -w, -y: a result fell below the limit
	mhz                float64   // -C: the CPU's clock
	lastClock          *durClock // the last run's duration clock (--cpu_util)
}

// The buffer's layout (create_single_mr, or create_mr per QP with
// --mr_per_qp): each QP has a send half and a receive half of buffSize bytes,
// all send halves then all receive halves, or each QP's two halves together.
func (s *session) sendOff(i int) uint64 {
	if s.p.MRPerQP {
		return uint64(2*i) * s.buffSize
	}
	return uint64(i) * s.buffSize
}

func (s *session) recvOff(i int) uint64 {
	if s.p.MRPerQP {
		return uint64(2*i+1) * s.buffSize
	}
	return uint64(s.p.QPs+i) * s.buffSize
}

// addr is the address of offset off in the buffer.
func (s *session) addr(off uint64) uint64 { return s.mrs[0].Addr() + off }

// mrOf is the MR that covers QP i's halves.
func (s *session) mrOf(i int) *verbs.MR {
	if s.p.MRPerQP {
		return s.mrs[i]
	}
	return s.mrs[0]
}

// sge is length bytes at offset off of QP i's halves.
func (s *session) sge(i int, off uint64, length uint32) verbs.SGE {
	return verbs.SGE{Addr: s.addr(off), Length: length, LKey: s.mrOf(i).LKey()}
}

// udPeer is a UD QP's destination: perftest's ctx->ah, rem_qpn and remote_qkey.
type udPeer struct {
	ah   *verbs.AH
	qpn  uint32
	qkey uint32
}

// info is what PrintTestInfo shows of this session.
func (s *session) info() Info {
	return Info{Device: s.name, MTU: s.mtu.Bytes(), GIDIndex: s.gidIndex, OutReads: s.outReads, Inline: s.inline}
}

// bestGID is perftest's get_best_gid_index: the preferred address family first,
// then global scope over link-local.
func bestGID(gids []verbs.GID, ipv6 bool) int {
	best, bestScore := -1, -1
	for i, g := range gids {
		if g.IsZero() {
			continue
		}
		score := gidScoreV2
		v4 := g.IsIPv4Mapped()
		if ipv6 != v4 {
			score += gidScoreFam
		}
		a := g.Addr()
		if !a.IsLinkLocalUnicast() {
			score += gidScoreGlob
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// setup does what perftest's main does between opening the device and the
// first handshake: the exchanges of versions, system data and MTU, then the
// resources and this side's Dest of every QP.
func (s *session) setup() error {
	p := s.p
	port := s.dev.QueryPort()
	if port.State != verbs.PortActive {
		return fmt.Errorf("port 1 of %s is %v", s.name, port.State)
	}
	gids := port.GIDs
	s.gidIndex = p.GIDIndex
	if s.gidIndex < 0 {
		s.gidIndex = bestGID(gids, p.IPv6)
		if s.gidIndex < 0 {
			return fmt.Errorf("%s has no usable GID", s.name)
		}
	} else if s.gidIndex >= len(gids) {
		return fmt.Errorf("GID index %d: %s has %d GIDs", s.gidIndex, s.name, len(gids))
	}
	s.gid = gids[s.gidIndex]
	if p.Cycles {
		var err error
		if s.mhz, err = CPUMHz(); err != nil {
			return fmt.Errorf("-C: %w", err)
		}
	}

	// exchange_versions, check_version_compatibility, check_sys_data.
	rv := atof(Version) // --dont_xchg_versions: as if the peer spoke ours
	if !p.NoXchgVer {
		var err error
		if _, rv, err = s.conn.XchgVersions(Version); err != nil {
			return err
		}
	}
	if rv < 5.70 {
		return fmt.Errorf("the other side runs perftest %.2f: not compatible with versions older than 5.70", rv)
	}
	s.cycleBuffer, s.cacheLine = defCycleBuffer, defCacheLine
	rc, rl, err := s.conn.XchgSysData(s.cycleBuffer, s.cacheLine)
	if err != nil {
		return err
	}
	s.cycleBuffer, s.cacheLine = max(s.cycleBuffer, rc), max(s.cacheLine, rl)
	// perftest sends its page size, or the 2 MiB huge page with
	// --use_hugepages; the buffer is at least this big per QP and half, so a
	// larger value would let the peer size our memory.
	if s.cycleBuffer <= 0 || s.cycleBuffer > maxCycleBuffer || s.cacheLine <= 0 || s.cacheLine > s.cycleBuffer {
		return fmt.Errorf("%w sent cycle buffer %d, cache line %d (at most %d)", ErrPeer, rc, rl, maxCycleBuffer)
	}

	// check_mtu: ours (the -m request or the port's), then the smaller of the two.
	cur := localMTU(p, s.dev)
	if m, _ := verbs.MTUFromBytes(p.MTU); p.MTU != 0 && m > port.ActiveMTU {
		fmt.Fprintf(s.out, "Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", port.ActiveMTU)
	}
	rm, err := s.conn.XchgMTU(int(cur))
	if err != nil {
		return err
	}
	if r := verbs.MTU(rm); r.Valid() && r < cur {
		cur = r
	}
	s.mtu = cur
	if err := p.fitUD(cur.Bytes(), s.errw); err != nil {
		return err
	}

	// check_link: outstanding reads and inline size.
	s.outReads = 1
	if p.Test.Verb == VerbRead || p.Test.Verb == VerbAtomic {
		maxR := s.dev.Query().MaxQPRdAtom
		s.outReads = p.OutReads
		if s.outReads > maxR {
			fmt.Fprintf(s.out, "%s Number of outstanding reads is above max = %d\n Changing to that max value\n", resultLine, maxR)
			s.outReads = maxR
		} else if s.outReads <= 0 {
			s.outReads = maxR
		}
	}
	s.inline = p.Inline
	if s.inline < 0 {
		s.inline = 0
		if p.Test.Kind == Lat {
			switch {
			case p.Test.Verb == VerbWrite:
				s.inline = defInlineWrite
			case p.Test.Verb == VerbSend && p.Conn == ConnUD:
				s.inline = defInlineUD
			case p.Test.Verb == VerbSend:
				s.inline = defInlineSend
			}
		}
	}
	if err := s.createBase(); err != nil {
		return err
	}
	if p.RDMACM {
		if err := s.connectCM(); err != nil {
			return err
		}
	} else if err := s.createQPs(); err != nil {
		return err
	}
	// set_up_connection.
	s.my = make([]Dest, p.QPs)
	s.rem = make([]Dest, p.QPs)
	for i, qp := range s.qps {
		s.my[i] = Dest{OutReads: uint16(s.outReads), QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff,
			RKey: s.mrOf(i).RKey(), VAddr: s.addr(s.recvOff(i)), GID: s.gid}
	}
	return nil
}

// createBase is ctx_init but the QPs: memory, PD, MR, CQs.
func (s *session) createBase() error {
	p := s.p
	s.buffSize = max(p.Size, uint64(s.cycleBuffer))
	var err error
	size := 2 * uint64(p.QPs) * s.buffSize
	if p.Conn == ConnUD {
		size += uint64(s.cacheLine) // room for the GRH before the last receive
	}
	switch {
	case p.Mmap != "":
		if s.buf, err = mapFile(p.Mmap, int64(p.MmapOffset), int(size)); err != nil {
			return err
		}
		s.fileMapped = true
		fmt.Fprintf(s.out, "allocated mmap buffer of size %d at %p\n", size, unsafe.SliceData(s.buf))
	case p.HugePages:
		if s.buf, err = verbs.MapHugeBuffer(int(size)); err != nil {
			return fmt.Errorf("failed to allocate hugepages. Please configure hugepages: %w", err)
		}
	default:
		if s.buf, err = s.dev.MapBuffer(int(size)); err != nil {
			return err
		}
	}
	// perftest's create_single_mr: random bytes, zeros for write_lat (whose
	// polling watches the last byte change); a file's bytes stay its own.
	if p.Mmap == "" && (p.Test.Verb != VerbWrite || p.Test.Kind != Lat) {
		var seed [32]byte
		binary.LittleEndian.PutUint64(seed[:], rand.Uint64())
		_, _ = rand.NewChaCha8(seed).Read(s.buf)
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	regions := [][]byte{s.buf}
	if p.MRPerQP {
		regions = regions[:0]
		for i := range p.QPs {
			// UD's GRH room at the end goes with every region.
			end := min(s.recvOff(i)+s.buffSize+uint64(s.cacheLine), uint64(len(s.buf)))
			regions = append(regions, s.buf[s.sendOff(i):end])
		}
	}
	for _, r := range regions {
		m, err := s.pd.RegMR(r, 0, acc)
		if err != nil {
			return err
		}
		s.mrs = append(s.mrs, m)
	}
	scqe := p.TxDepth * p.QPs
	rcqe := p.RxDepth * p.QPs
	var o verbs.CQOptions
	if p.UseEvent {
		s.ch = verbs.NewCompChannel()
		o.Channel = s.ch
	}
	if s.scq, err = s.dev.CreateCQ(max(scqe, 1), o); err != nil {
		return err
	}
	if s.rcq, err = s.dev.CreateCQ(max(rcqe, 1), o); err != nil {
		return err
	}
	if p.UseEvent {
		// As perftest's main, once before the test; idle re-arms.
		if err := s.scq.ReqNotify(false); err != nil {
			return fmt.Errorf("couldn't request CQ notification: %w", err)
		}
		if err := s.rcq.ReqNotify(false); err != nil {
			return fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	// perftest's srq_exists: the SRQ is made where receives are posted.
	if p.UseSRQ && (p.Test.Kind == Lat || p.Server() || p.Duplex) {
		if s.srq, err = s.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(p.RxDepth), MaxSGE: 1}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %w", err)
		}
	}
	return nil
}

// qpInitAttr is the test's QP: its type, its depths, one SGE, the inline size.
func (s *session) qpInitAttr() verbs.QPInitAttr {
	p := s.p
	return verbs.QPInitAttr{Type: p.Conn.qpType(), SendCQ: s.scq, RecvCQ: s.rcq, SRQ: s.srq,
		Cap: verbs.QPCap{MaxSendWR: uint32(p.TxDepth), MaxRecvWR: uint32(p.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInlineData: uint32(s.inline)}}
}

// createQPs is ctx_init's QPs, moved to INIT with the access the test needs.
func (s *session) createQPs() error {
	var access uint32
	switch s.p.Test.Verb {
	case VerbAtomic:
		access = verbs.QPAccessRemoteAtomic
	case VerbRead:
		access = verbs.QPAccessRemoteRead
	case VerbWrite:
		access = verbs.QPAccessRemoteWrite
	case VerbSend:
		access = verbs.QPAccessRemoteWrite | verbs.QPAccessLocalWrite
	}
	for range s.p.QPs {
		qp, err := s.pd.CreateQP(s.qpInitAttr())
		if err != nil {
			return err
		}
		s.qps = append(s.qps, qp)
		a := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSInit, PKeyIndex: 0, Port: 1, AccessFlags: access, QKey: defQKey}}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
		if s.p.Conn == ConnUD {
			mask ^= verbs.AttrAccessFlags | verbs.AttrQKey
		}
		if err := qp.ModifySync(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP to INIT: %w", err)
		}
	}
	return nil
}

// connect is ctx_connect: RTR towards the peer's QP, and RTS on the sides that
// send (latency tests, the client, both when bidirectional). UD QPs have no
// peer in their state: the sending sides get an address handle instead.
func (s *session) connect() error {
	p := s.p
	if p.RDMACM {
		return nil // rdma_cm connected them
	}
	sends := p.Test.Kind == Lat || !p.Server() || p.Duplex
	for i, qp := range s.qps {
		my, rem := &s.my[i], &s.rem[i]
		if verbs.GID(rem.GID).IsIPv4Mapped() != s.gid.IsIPv4Mapped() {
			return errors.New("found incompatibility issue with GID types: try a different IP version (-x)")
		}
		av := verbs.AV{DGID: rem.GID, SGIDIndex: uint8(s.gidIndex), HopLimit: 0xFF, TrafficClass: uint8(p.TClass), Port: 1}
		a := verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSRTR, PathMTU: s.mtu, DestQPN: rem.QPN, RQPSN: wire.PSN(rem.PSN),
			MaxDestRdAtomic: uint8(my.OutReads), MinRNRTimer: minRNRTimer}, AV: av}
		mask := verbs.AttrState
		switch p.Conn {
		case ConnRC:
			mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMinRNRTimer | verbs.AttrMaxDestRdAtomic
		case ConnUC:
			mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		}
		if err := qp.ModifySync(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP %#x to RTR: %w", qp.QPN(), err)
		}
		if !sends {
			continue
		}
		a = verbs.QPAttr{Attr: verbs.QPBaseAttr{State: verbs.QPSRTS, SQPSN: wire.PSN(my.PSN), Timeout: uint8(p.QPTimeout),
			RetryCnt: retryCount, RNRRetry: rnrRetry, MaxRdAtomic: uint8(rem.OutReads)}}
		mask = verbs.AttrState | verbs.AttrSQPSN
		if p.Conn == ConnRC {
			mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		}
		if err := qp.ModifySync(&a, mask); err != nil {
			return fmt.Errorf("failed to modify QP %#x to RTS: %w", qp.QPN(), err)
		}
		if p.Conn == ConnUD {
			ah, err := s.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("failed to create AH for UD: %w", err)
			}
			s.ud = append(s.ud, udPeer{ah: ah, qpn: rem.QPN, qkey: defQKey})
		}
	}
	return nil
}

// close releases the resources in reverse order; the device is the caller's.
func (s *session) close() {
	counts.spinYields.Add(s.spin.Yields())
	s.destroyAHs()
	s.closeCM()
	for _, qp := range s.qps {
		_ = qp.Destroy().Wait()
	}
	if s.srq != nil {
		_ = s.srq.Destroy().Wait()
	}
	for _, m := range s.mrs {
		_ = m.Dereg().Wait()
	}
	if s.scq != nil {
		_ = s.scq.Destroy().Wait()
	}
	if s.rcq != nil {
		_ = s.rcq.Destroy().Wait()
	}
	if s.pd != nil {
		_ = s.pd.Dealloc().Wait()
	}
	if s.ch != nil {
		_ = s.ch.Close()
	}
}

func (s *session) destroyAHs() {
	for _, u := range s.ud {
		if u.ah != nil {
			_ = u.ah.Destroy().Wait()
		}
	}
	s.ud = nil
}

// unmap frees the memory once the device is closed (no engine holds a slice).
func (s *session) unmap() {
	switch {
	case s.buf == nil:
	case s.fileMapped:
		_ = unix.Munmap(s.buf)
	default:
		_ = verbs.UnmapBuffer(s.buf)
	}
	s.buf = nil
}

// mapFile is pp_init_mmap: n bytes of the file at offset, shared, as the
// test's buffer. A file shorter than that is refused: touching a shared
// mapping past its end would kill the process (SIGBUS).
func mapFile(name string, offset int64, n int) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("unable to open '%s': %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("unable to open '%s': %w", name, err)
	}
	if fi.Mode().IsRegular() && fi.Size() < offset+int64(n) {
		return nil, fmt.Errorf("unable to mmap '%s': %d bytes from offset %d, the file has %d", name, n, offset, fi.Size())
	}
	b, err := unix.Mmap(int(f.Fd()), offset, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("unable to mmap '%s': %w", name, err)
	}
	return b, nil
}

// shakeAll is the per-QP handshake loop.
func (s *session) shakeAll() error {
	for i := range s.my {
		if err := s.shake(i); err != nil {
			return err
		}
	}
	return nil
}

// shake is QP i's handshake: the peer's address and keys for it, checked
// against the connection's peer when p.PeerGIDIsConnPeer.
func (s *session) shake(i int) error {
	d, err := s.conn.HandShake(&s.my[i], false)
	if err != nil {
		return err
	}
	if s.p.PeerGIDIsConnPeer {
		gid, peer := netip.AddrFrom16(d.GID).Unmap(), s.conn.peerAddr()
		if !peer.IsValid() || gid != peer {
			return fmt.Errorf("%w (%v) announced GID %v for QP %d: not its own address", ErrPeer, s.conn.peer(), gid, i)
		}
	}
	s.rem[i] = d
	return nil
}

// sync is a handshake on QP 0, the barrier perftest puts between phases. long
// marks one that waits for the other side's measurement.
func (s *session) sync(long bool) error {
	_, err := s.conn.HandShake(&s.my[0], long)
	s.syncedAt = time.Now()
	return err
}

// printDests prints the local, then (after the second handshake) the remote
// address lines.
func (s *session) printLocal() {
	for i := range s.my {
		PrintDest(s.out, "local", s.destVerb(), &s.my[i])
	}
}

// destVerb is the verb whose format the address lines take: over rdma_cm
// always SEND's (no keys), as perftest's comm parameters say SEND then.
func (s *session) destVerb() Verb {
	if s.p.CommRDMACM {
		return VerbSend
	}
	return s.p.Test.Verb
}

func (s *session) shakeAndPrintRemote() error {
	for i := range s.my {
		if err := s.shake(i); err != nil {
			return err
		}
		PrintDest(s.out, "remote", s.destVerb(), &s.rem[i])
	}
	return nil
}

// closeConnection is ctx_close_connection: a last handshake, then close.
func (s *session) closeConnection() error {
	if err := s.sync(true); err != nil {
		return err
	}
	return s.conn.Close()
}

// aborted returns why the run was stopped.
func (s *session) aborted() error {
	if err := s.ctxErr(); err != nil {
		return err
	}
	if s.peerGone.Load() {
		return fmt.Errorf("%w (%v) closed the connection during the test", ErrPeer, s.conn.peer())
	}
	return errors.New("test stopped")
}

// watch runs fn while a watcher notices the peer leaving (it sets peerGone,
// which the measurement loops check whenever they find nothing to do).
func (s *session) watch(fn func() error) error {
	stopWatch := s.conn.WatchPeer(&s.peerGone)
	if s.ch != nil {
		// A loop asleep on the channel (-e) wakes when the run must end.
		ctx, cancel := context.WithCancel(s.ctx)
		s.haltCtx = ctx
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for !s.halted() {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
			cancel()
		}()
		defer func() { cancel(); <-done }()
	}
	err := fn()
	stopWatch()
	return err
}

// idle is what a loop does when a poll found nothing: yield the processor, or
// with -e sleep on the completion channel until one of cqs has a completion.
// The CQs are re-armed and looked at again first, so that a completion pushed
// before the arm is not slept through (ibv_req_notify_cq(3)).
func (s *session) idle(cqs ...*verbs.CQ) {
	if s.ch == nil {
		runtime.Gosched()
		return
	}
	for _, c := range cqs {
		_ = c.ReqNotify(false)
	}
	// Counted as it arms, not as it sleeps: with the engines ahead of this
	// thread a completion may be there each time it looks again (a local
	// atomic_lat -e slept on none in one run of 100 iterations), and a channel
	// that never fired would hang the test anyway.
	counts.events.Add(1)
	for _, c := range cqs {
		if c.Len() > 0 {
			return
		}
	}
	ctx := s.haltCtx
	if ctx == nil {
		ctx = s.ctx
	}
	if c, err := s.ch.GetEvent(ctx); err == nil {
		c.AckEvents(1)
	}
}

// counts are what the package's tests read to see an option at work: the
// times -e armed its CQs to sleep on the channel, the lists -l and
// --recv_post_list posted, the receives posted to an SRQ, write_lat's memory
// spins that ran the engine (--busy-poll), and the yields of the loops' own
// spins (on memory, on a full send queue; internal/spin).
var counts struct {
	events, sendLists, recvLists, srqRecvs, memDrives, spinYields atomic.Uint64
}

// halted reports whether the measurement must end early.
func (s *session) halted() bool { return s.stop.Load() || s.peerGone.Load() }

// dial and listen open the exchange's TCP connection.
