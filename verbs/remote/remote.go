// Package remote is the Go client of the xrnic daemon's attach protocol
// (package attach, docs/attach.md): a process attaches to the device a daemon
// owns and gets PDs, MRs, CQs, QPs and AHs as it would in-process, with the
// data path on shared-memory rings (posting and polling make no system call
// while the daemon is busy).
//
// Memory a process registers must be shared with the daemon: MapBuffer
// returns such memory (a sealed memfd); RegMR refuses a buffer it did not
// come from.
package remote

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/conv"
	"github.com/xrnic/xrnic/nic/shm"
	"github.com/xrnic/xrnic/verbs"
)

// Errors. A reply's errno comes back wrapped in the verbs sentinel that names
// it, and as the syscall.Errno itself.
var (
	ErrNotShared = errors.New("remote: buffer not from MapBuffer")

	// The post-time errors, made once: posting allocates nothing.
	errInline  = fmt.Errorf("%w: more inline bytes than the QP takes", verbs.ErrInvalid)
	errSGEs    = fmt.Errorf("%w: more SGEs than the queue takes", verbs.ErrInvalid)
	errSRQPost = fmt.Errorf("%w: the QP's receives come from its SRQ", verbs.ErrInvalid)
	errAH      = fmt.Errorf("%w: an AH of another device", verbs.ErrInvalid)
	errCQ      = fmt.Errorf("%w: a CQ or SRQ of another device", verbs.ErrInvalid)
)

// Device is a process's attachment to a daemon's device. Its methods are safe
// for concurrent use; the objects state their own contracts. A goroutine of
// its own reads the control socket: replies go to the call waiting for them,
// CM events to their queue. Asynchronous events wait on the async socket
// (AsyncFD) until read: GetAsyncEvent, Events or SetEventHandler.
type Device struct {
	c     *net.UnixConn
	async *net.UnixConn // the async event socket: GetAsyncEvent, Events or SetEventHandler read it
	bell  int           // the doorbell: a write end of a pipe the daemon reads
	name  string
	guid  uint64

	mu      sync.Mutex // one request at a time
	seq     uint32
	replies chan reply    // from the reader to the call waiting
	done    chan struct{} // closed when the reader stops
	closing sync.Once

	evWG  sync.WaitGroup // the event handlers' goroutines
	evMu  sync.Mutex
	err   error // why the reader stopped (the socket broke, a protocol error, Close)
	cmEvs []*attach.CMEventMsg
	cmIDs map[uint32]*CMID // by handle
	cmNew chan struct{}    // a CM event was queued (capacity 1)

	// What the process's objects hold here (ring mappings, channel
	// eventfds): Close releases what their Destroy did not.
	ownMu sync.Mutex
	owned map[io.Closer]struct{}
}

// reply is a reply as the reader hands it over: the payload copied, the
// descriptors the caller's.
type reply struct {
	h   attach.Header
	p   []byte
	fds []int
}

func (d *Device) own(c io.Closer) {
	d.ownMu.Lock()
	d.owned[c] = struct{}{}
	d.ownMu.Unlock()
}

// disown closes c, which Close no longer needs to.
func (d *Device) disown(c io.Closer) error {
	d.ownMu.Lock()
	delete(d.owned, c)
	d.ownMu.Unlock()
	return c.Close()
}

// SocketFor is where the daemon on iface listens for attachments by default
// (xrnic --attach).
func SocketFor(iface string) string { return "/run/xrnic/" + iface + ".attach" }

// Dial attaches to the daemon listening on path.
func Dial(path string) (*Device, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("remote: attaching to %s: %w", path, err)
	}
	d := &Device{c: c, bell: -1, owned: map[io.Closer]struct{}{}, replies: make(chan reply, 1),
		done: make(chan struct{}), cmNew: make(chan struct{}, 1)}
	go d.reader()
	var rep attach.HelloRep
	fds, err := d.call(attach.OpHello, &attach.HelloReq{Version: attach.Version}, &rep)
	if err == nil && len(fds) != 2 {
		attach.CloseFDs(fds)
		err = fmt.Errorf("%w: HELLO with %d descriptors", attach.ErrProtocol, len(fds))
	}
	if err == nil {
		d.bell = fds[0]
		d.async, err = unixConn(fds[1], "xrnic-async")
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("remote: attaching to %s: %w", path, err)
	}
	d.guid = rep.NodeGUID
	d.name = cstr(rep.Name[:])
	return d, nil
}

// reader reads the socket until it breaks or Close closes it.
func (d *Device) reader() {
	buf, oob := make([]byte, attach.MaxMessage), make([]byte, attach.OOBSpace)
	err := func() error {
		for {
			m, fds, err := attach.Recv(d.c, buf, oob)
			if err != nil {
				return err
			}
			h, p, err := attach.DecodeHeader(m)
			if err != nil {
				attach.CloseFDs(fds)
				return err
			}
			if h.Seq == 0 && h.Op == attach.OpCMEvent {
				attach.CloseFDs(fds)
				if err := d.cmEventMsg(p); err != nil {
					return err
				}
				continue
			}
			select {
			case d.replies <- reply{h, append([]byte(nil), p...), fds}:
			default: // nobody asked
				attach.CloseFDs(fds)
				return fmt.Errorf("%w: a reply to no request (%v/%d)", attach.ErrProtocol, h.Op, h.Seq)
			}
		}
	}()
	d.evMu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.evMu.Unlock()
	close(d.done)
}

func (d *Device) readErr() error {
	d.evMu.Lock()
	defer d.evMu.Unlock()
	return d.err
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Name is the daemon's device name; NodeGUID its node GUID.
func (d *Device) Name() string     { return d.name }
func (d *Device) NodeGUID() uint64 { return d.guid }

// Close detaches: the daemon frees everything the process held (as when it
// exits). The process's mappings of its rings stay until the objects are
// garbage; do not use them after Close.
func (d *Device) Close() error {
	var err error
	d.closing.Do(func() {
		d.evMu.Lock()
		if d.err == nil {
			d.err = fmt.Errorf("remote: device closed: %w", verbs.ErrClosed)
		}
		d.evMu.Unlock()
		err = d.c.Close()
		if d.async != nil {
			d.async.Close()
		}
		<-d.done
		d.evWG.Wait()
		d.mu.Lock() // no call is between its request and its reply
		if d.bell >= 0 {
			unix.Close(d.bell)
			d.bell = -1
		}
		d.mu.Unlock()
		d.ownMu.Lock()
		for c := range d.owned {
			c.Close()
		}
		d.owned = map[io.Closer]struct{}{}
		d.ownMu.Unlock()
	})
	return err
}

// call sends one request and reads its reply into rep (a payload pointer or
// nil); events read on the way are kept for Events. The reply's descriptors
// are the caller's.
func (d *Device) call(op attach.Op, req, rep any, fds ...int) ([]int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.done:
		return nil, d.readErr()
	default:
	}
	d.seq++
	if d.seq == 0 {
		d.seq = 1
	}
	msg, err := attach.Encode(nil, op, d.seq, 0, req)
	if err != nil {
		return nil, err
	}
	if err := attach.Send(d.c, msg, fds...); err != nil {
		d.c.Close() // the reader stops
		return nil, err
	}
	var r reply
	select {
	case r = <-d.replies:
	case <-d.done:
		return nil, d.readErr()
	}
	if r.h.Seq != d.seq || r.h.Op != op {
		attach.CloseFDs(r.fds)
		d.c.Close()
		return nil, fmt.Errorf("%w: reply %v/%d to %v/%d", attach.ErrProtocol, r.h.Op, r.h.Seq, op, d.seq)
	}
	if r.h.Status != 0 {
		attach.CloseFDs(r.fds)
		return nil, errnoErr(op, syscall.Errno(r.h.Status))
	}
	if rep != nil {
		if err := attach.DecodePayload(r.p, rep); err != nil {
			attach.CloseFDs(r.fds)
			return nil, err
		}
	} else if len(r.p) != 0 {
		attach.CloseFDs(r.fds)
		return nil, fmt.Errorf("%w: %d bytes in %v's reply", attach.ErrProtocol, len(r.p), op)
	}
	return r.fds, nil
}

// AsyncFD is the async event socket's descriptor (libibverbs' async_fd): it
// polls readable while an event waits, and GetAsyncEvent reads one. The
// Device keeps it; do not close it.
func (d *Device) AsyncFD() int {
	fd := -1
	if rc, err := d.async.SyscallConn(); err == nil {
		rc.Control(func(f uintptr) { fd = int(f) })
	}
	return fd
}

// GetAsyncEvent waits for the next asynchronous event (ibv_get_async_event),
// until one comes or the Device closes.
func (d *Device) GetAsyncEvent() (attach.EventMsg, error) {
	var buf [attach.MaxMessage]byte
	n, err := d.async.Read(buf[:])
	if err != nil {
		if d.readErr() != nil {
			err = d.readErr()
		}
		return attach.EventMsg{}, err
	}
	return decodeEvent(buf[:n])
}

// decodeEvent decodes an async socket's datagram.
func decodeEvent(m []byte) (attach.EventMsg, error) {
	var ev attach.EventMsg
	h, p, err := attach.DecodeHeader(m)
	if err == nil && h.Op != attach.OpEvent {
		err = fmt.Errorf("%w: %v on the async socket", attach.ErrProtocol, h.Op)
	}
	if err == nil {
		err = attach.DecodePayload(p, &ev)
	}
	return ev, err
}

// cmEventMsg keeps a CM event for GetCMEvent.
func (d *Device) cmEventMsg(p []byte) error {
	ev := new(attach.CMEventMsg)
	if err := attach.DecodePayload(p, ev); err != nil {
		return err
	}
	d.evMu.Lock()
	d.cmEvs = append(d.cmEvs, ev)
	d.evMu.Unlock()
	select {
	case d.cmNew <- struct{}{}:
	default:
	}
	return nil
}

// errnoErr wraps a reply's errno in the verbs sentinel for it.
func errnoErr(op attach.Op, e syscall.Errno) error {
	return fmt.Errorf("remote: %v: %w (%w)", op, attach.Sentinel(e), e)
}

// SetEventHandler hands the asynchronous events to h, one at a time on a
// goroutine of the Device's that reads the async socket until Close. Set it
// once; GetAsyncEvent and Events then find nothing.
func (d *Device) SetEventHandler(h func(attach.EventMsg)) {
	d.evWG.Add(1)
	go func() {
		defer d.evWG.Done()
		for {
			ev, err := d.GetAsyncEvent()
			if errors.Is(err, attach.ErrProtocol) {
				d.c.Close() // the daemon broke the protocol: detach
				return
			}
			if err != nil {
				return
			}
			h(ev)
		}
	}()
}

// Events returns the asynchronous events waiting on the async socket,
// without waiting.
func (d *Device) Events() []attach.EventMsg {
	rc, err := d.async.SyscallConn()
	if err != nil {
		return nil
	}
	var evs []attach.EventMsg
	var buf [attach.MaxMessage]byte
	rc.Read(func(fd uintptr) bool {
		for {
			n, _, _, _, err := unix.Recvmsg(int(fd), buf[:], nil, unix.MSG_DONTWAIT)
			if err != nil || n == 0 {
				return true // none left: do not wait
			}
			if ev, err := decodeEvent(buf[:n]); err == nil {
				evs = append(evs, ev)
			}
		}
	})
	return evs
}

// Query returns the device's attributes (ibv_query_device).
func (d *Device) Query() (attach.DeviceRep, error) {
	var r attach.DeviceRep
	_, err := d.call(attach.OpQueryDevice, nil, &r)
	return r, err
}

// QueryPort returns the port's attributes (ibv_query_port).
func (d *Device) QueryPort() (attach.PortRep, error) {
	var r attach.PortRep
	_, err := d.call(attach.OpQueryPort, nil, &r)
	return r, err
}

// QueryGID returns GID index i (ibv_query_gid).
func (d *Device) QueryGID(i int) (verbs.GID, error) {
	var r attach.GIDRep
	_, err := d.call(attach.OpQueryGID, &attach.GIDReq{Index: uint32(i)}, &r)
	return verbs.GID(r.GID), err
}

func (d *Device) destroy(kind, h uint32) error {
	_, err := d.call(attach.OpDestroy, &attach.DestroyReq{Kind: kind, Handle: h}, nil)
	return err
}

// ring rings the doorbell: the daemon set RingNeedWakeup on a ring this
// process produced into.
func (d *Device) ring() {
	var one = [8]byte{1}
	_, _ = unix.Write(d.bell, one[:])
}

// PD is a protection domain.
type PD struct {
	d *Device
	h uint32
}

// AllocPD allocates a PD (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	var r attach.HandleRep
	if _, err := d.call(attach.OpAllocPD, nil, &r); err != nil {
		return nil, err
	}
	return &PD{d: d, h: r.Handle}, nil
}

// Dealloc frees the PD (ibv_dealloc_pd): EBUSY (ErrBusy) while it has
// children.
func (p *PD) Dealloc() error { return p.d.destroy(attach.KindPD, p.h) }

// MapBuffer returns n bytes of memory the daemon can share (shm.Buffer: a
// sealed memfd mapped here): the memory RegMR takes. verbs.MapBuffer gives
// the same.
func MapBuffer(n int) ([]byte, error) { return shm.Buffer(n) }

// UnmapBuffer unmaps a buffer from MapBuffer. A region registered over it
// stays valid in the daemon (which has its own mapping) until deregistered.
func UnmapBuffer(b []byte) error { return shm.FreeBuffer(b) }

// bufferOf finds the memfd under b and b's offset in it.
func bufferOf(b []byte) (*shm.Region, uint64, error) {
	r, off, err := shm.BufferOf(b)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrNotShared, err)
	}
	return r, off, nil
}

// MR is a registered memory region. Its keys are plain values; Dereg is safe
// from any goroutine.
type MR struct {
	pd         *PD
	h          uint32
	lkey, rkey uint32
	addr       uint64
	n          int
}

// RegMR registers b, which must lie in a buffer from MapBuffer, with its own
// address as the IOVA (ibv_reg_mr).
func (p *PD) RegMR(b []byte, access verbs.Access) (*MR, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", verbs.ErrInvalid)
	}
	return p.regMR(b, uint64(uintptr(unsafe.Pointer(&b[0]))), access)
}

func (p *PD) regMR(b []byte, iova uint64, access verbs.Access) (*MR, error) {
	r, off, err := bufferOf(b)
	if err != nil {
		return nil, err
	}
	var rep attach.RegMRRep
	req := attach.RegMRReq{Addr: iova, Length: uint64(len(b)), FileOff: off, PD: p.h, Access: uint32(access)}
	if _, err := p.d.call(attach.OpRegMR, &req, &rep, r.FD()); err != nil {
		return nil, err
	}
	return &MR{pd: p, h: rep.Handle, lkey: rep.LKey, rkey: rep.RKey, addr: iova, n: len(b)}, nil
}

func (m *MR) LKey() uint32 { return m.lkey }
func (m *MR) RKey() uint32 { return m.rkey }
func (m *MR) Addr() uint64 { return m.addr }

// SGE is the SGE of length bytes at offset off in the region.
func (m *MR) SGE(off uint64, length uint32) verbs.SGE {
	return verbs.SGE{Addr: m.addr + off, Length: length, LKey: m.lkey}
}

// Dereg deregisters the region (ibv_dereg_mr).
func (m *MR) Dereg() error { return m.pd.d.destroy(attach.KindMR, m.h) }

// AH is an address handle (UD destinations).
type AH struct {
	pd *PD
	h  uint32
}

// CreateAH creates an address handle (ibv_create_ah).
func (p *PD) CreateAH(av verbs.AV) (*AH, error) {
	var rep attach.HandleRep
	req := attach.CreateAHReq{PD: p.h, AV: conv.WireAV(av)}
	if _, err := p.d.call(attach.OpCreateAH, &req, &rep); err != nil {
		return nil, err
	}
	return &AH{pd: p, h: rep.Handle}, nil
}

// Destroy destroys the address handle (ibv_destroy_ah).
func (a *AH) Destroy() error { return a.pd.d.destroy(attach.KindAH, a.h) }

// mapRing maps a ring memfd the daemon sent.
func (d *Device) mapRing(fds []int, size int) (*shm.Region, error) {
	if len(fds) != 1 {
		attach.CloseFDs(fds)
		return nil, fmt.Errorf("%w: %d descriptors for a ring", attach.ErrProtocol, len(fds))
	}
	r, err := shm.Map(fds[0], 0, size)
	if err == nil {
		d.own(r)
	}
	return r, err
}

// unixConn makes a connection of a socket descriptor, which it takes.
func unixConn(fd int, name string) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%w: %s is not a Unix socket", attach.ErrProtocol, name)
	}
	return uc, nil
}
