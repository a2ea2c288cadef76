package verbs

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"

	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/mad"
)

// The GSI agent: the device's QP1 and the connection manager that runs on it (in
// Linux, ib_mad's GSI agent and ib_cm's port). It starts with the first CM call
// and stops with the device.
type gsi struct {
	d   *Device
	cm  *cm.CM
	pd  *PD
	cq  *CQ
	qp  *QP
	mr  *MR
	buf []byte

	mu    sync.Mutex
	free  []int // free send slots
	ahs   map[ahKey]*AH
	wcs   [32]WC
	recvs [gsiRecvs]RecvWR
	sges  [gsiRecvs]SGE
}

type ahKey struct {
	sgid uint8
	dgid GID
}

const (
	gsiRecvs   = 64
	gsiSends   = 64
	gsiRecvLen = 40 + mad.Size // the GRH area, then the MAD
	gsiMaxAHs  = 1024          // address handles kept for peers; past it the cache starts over
)

// CMCounters returns the counters of the device's CM, if it runs.
func (d *Device) CMCounters() (cm.Counters, bool) {
	d.gsiMu.Lock()
	defer d.gsiMu.Unlock()
	if d.gsi == nil {
		return cm.Counters{}, false
	}
	return d.gsi.cm.Counters(), true
}

// CM returns the device's connection manager, starting it and QP1 on first use
// (rdma_cm and ndk's connectors call it) on an in-process device. The CA GUID is the EUI-64 of the
// interface's MAC, as rxe's node GUID. cfg tunes a CM that is not started yet
// (its Transport and CAGUID are the device's); later calls ignore it.
// The CM stops when the device closes, after its clients' Remove.
func (d *Device) CM(cfg cm.Config) (*cm.CM, error) {
	if d.b != nil { // the daemon's CM: verbs/rdmacm reaches it through Backend (rdmacm.AttachedCM)
		return nil, errAttached("the CM through verbs")
	}
	d.gsiMu.Lock()
	defer d.gsiMu.Unlock()
	if d.gsi != nil {
		return d.gsi.cm, nil
	}
	if d.closing {
		return nil, fmt.Errorf("verbs: %s is closing: %w", d.name, ErrClosed)
	}
	g, err := startGSI(d, cfg)
	if err != nil {
		return nil, err
	}
	d.gsi = g
	return g.cm, nil
}

func startGSI(d *Device, cfg cm.Config) (_ *gsi, err error) {
	g := &gsi{d: d, ahs: map[ahKey]*AH{}}
	defer func() {
		if err != nil {
			g.stop()
		}
	}()
	// The CM first: QP1's completion handler hands it MADs as soon as
	// receives are posted.
	cfg.Transport = g
	if cfg.CAGUID == 0 {
		cfg.CAGUID = d.NodeGUID()
	}
	if g.cm, err = cm.New(cfg); err != nil {
		return nil, err
	}
	if g.pd, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if g.cq, err = d.CreateCQ(gsiRecvs+gsiSends, CQOptions{Handler: g.onCQ}); err != nil {
		return nil, err
	}
	g.qp, err = g.pd.CreateQP(QPInitAttr{Type: GSI, SendCQ: g.cq, RecvCQ: g.cq,
		Cap: QPCap{MaxSendWR: gsiSends, MaxRecvWR: gsiRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		a    QPBaseAttr
		mask AttrMask
	}{
		{QPBaseAttr{State: QPSInit, QKey: mad.QP1QKey}, AttrState | AttrPKeyIndex | AttrQKey},
		{QPBaseAttr{State: QPSRTR}, AttrState},
		{QPBaseAttr{State: QPSRTS}, AttrState | AttrSQPSN},
	} {
		if err = g.qp.Modify(&QPAttr{Attr: s.a}, s.mask).Wait(); err != nil {
			return nil, err
		}
	}
	if g.buf, err = MapBuffer(gsiRecvs*gsiRecvLen + gsiSends*mad.Size); err != nil {
		return nil, err
	}
	if g.mr, err = g.pd.RegMR(g.buf, 0, AccessLocalWrite|AccessZeroBased); err != nil {
		return nil, err
	}
	for i := range gsiSends {
		g.free = append(g.free, i)
	}
	for i := range gsiRecvs {
		if err = g.postRecv(i); err != nil {
			return nil, err
		}
	}
	if err = g.cq.ReqNotify(false); err != nil {
		return nil, err
	}
	return g, nil
}

// NodeGUID is the device's node GUID (ibv_query_device's node_guid), rxe's:
// the EUI-64 of the interface's MAC (addrconf_addr_eui48), e.g.
// 52:54:00:c0:02:0b → 0x505400fffec0020b. Computed once.
func (d *Device) NodeGUID() uint64 {
	if d.b != nil {
		return d.b.NodeGUID()
	}
	d.guidOnce.Do(func() { d.guid = nodeGUID(d) })
	return d.guid
}

func nodeGUID(d *Device) uint64 {
	mac := d.link.Info().MAC
	if len(mac) != 6 { // a memory link: a random locally administered MAC
		mac = make([]byte, 6)
		rand.Read(mac)
		mac[0] = mac[0]&^1 | 2
	}
	b := [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return binary.BigEndian.Uint64(b[:])
}

func (g *gsi) postRecv(i int) error {
	off := uint64(i * gsiRecvLen)
	g.sges[i] = g.mr.SGE(off, gsiRecvLen)
	g.recvs[i] = RecvWR{WRID: uint64(i), SGL: g.sges[i : i+1]}
	_, err := g.qp.PostRecv(g.recvs[i : i+1])
	return err
}

// SendMAD implements cm.Transport: a UD SEND to QP1 of the port at dst, with
// QP1's Q_Key (IBTA 13.5.3). A MAD that finds no free slot or no route is lost,
// as on the wire; the CM's retransmission covers it.
func (g *gsi) SendMAD(src, dst GID, b []byte) error { return g.send(src, dst, 1, b) }

// send is SendMAD to QP qpn of the port at dst.
func (g *gsi) send(src, dst GID, qpn uint32, b []byte) error {
	sgid := -1
	for i, gid := range g.d.GIDs() {
		if gid == src {
			sgid = i
			break
		}
	}
	if sgid < 0 {
		return fmt.Errorf("verbs: GSI: source GID %v is not the port's: %w", src, ErrInvalid)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	key := ahKey{uint8(sgid), dst}
	ah := g.ahs[key]
	if ah == nil {
		if len(g.ahs) >= gsiMaxAHs {
			for k, a := range g.ahs {
				a.Destroy()
				delete(g.ahs, k)
			}
		}
		var err error
		if ah, err = g.pd.CreateAH(AV{DGID: dst, SGIDIndex: uint8(sgid)}); err != nil {
			return err
		}
		g.ahs[key] = ah
	}
	if len(g.free) == 0 {
		return fmt.Errorf("verbs: GSI: every send slot is in flight: %w", ErrQueueFull)
	}
	slot := g.free[len(g.free)-1]
	off := gsiRecvs*gsiRecvLen + slot*mad.Size
	copy(g.buf[off:off+mad.Size], b)
	sge := [1]SGE{g.mr.SGE(uint64(off), mad.Size)}
	wr := [1]SendWR{{WRID: gsiSendTag | uint64(slot), Opcode: WRSend, Flags: SendSignaled, SGL: sge[:],
		AH: ah, RemoteQPN: qpn, RemoteQKey: mad.QP1QKey}}
	if _, err := g.qp.PostSend(wr[:]); err != nil {
		return err
	}
	g.free = g.free[:len(g.free)-1]
	return nil
}

const gsiSendTag = 1 << 32

// onCQ runs on the CQ's dispatcher: receives go to the CM (with the addresses
// from the GRH area), sends free their slot.
func (g *gsi) onCQ(c *CQ) {
	for {
		n := c.Poll(g.wcs[:])
		if n == 0 {
			if c.ReqNotify(false) != nil {
				return
			}
			if n = c.Poll(g.wcs[:]); n == 0 {
				return
			}
		}
		for i := range n {
			g.complete(&g.wcs[i])
		}
	}
}

func (g *gsi) complete(wc *WC) {
	if wc.WRID&gsiSendTag != 0 {
		g.mu.Lock()
		g.free = append(g.free, int(wc.WRID&^gsiSendTag))
		g.mu.Unlock()
		return
	}
	i := int(wc.WRID)
	if wc.Status != WCSuccess {
		return // flushed: the QP is going away
	}
	b := g.buf[i*gsiRecvLen : (i+1)*gsiRecvLen]
	if wc.ByteLen >= gsiRecvLen {
		src, dst := grhAddrs(b[:40])
		var resp [mad.Size]byte
		if mad.UnmatchedResponse(b[40:], resp[:]) {
			// A Get or Set no agent takes: ib_mad answers it, to the QP it
			// came from (agent_send_response), so that the asker hears
			// "unsupported" rather than waiting out its timeout. Lost if no
			// send slot is free, as on the wire.
			_ = g.send(dst, src, wc.SrcQP, resp[:])
		} else {
			g.cm.Receive(src, dst, b[40:])
		}
	} else {
		g.cm.Receive(GID{}, GID{}, b[40:40+max(0, int(wc.ByteLen)-40)]) // counted as malformed
	}
	g.postRecv(i)
}

// grhAddrs reads the source and destination GIDs from a UD receive's GRH area:
// the IPv6 header, or the IPv4 header in its last 20 bytes (rxe, RoCEv2).
func grhAddrs(grh []byte) (src, dst GID) {
	if grh[0]>>4 == 6 {
		return GID(grh[8:24]), GID(grh[24:40])
	}
	ip := grh[20:]
	return GIDFromAddr(netip.AddrFrom4([4]byte(ip[12:16]))), GIDFromAddr(netip.AddrFrom4([4]byte(ip[16:20])))
}

// stop closes the CM, then QP1 and its resources.
func (g *gsi) stop() {
	if g.cm != nil {
		g.cm.Close()
	}
	if g.qp != nil {
		g.qp.Destroy().Wait()
	}
	g.mu.Lock()
	for k, a := range g.ahs {
		a.Destroy().Wait()
		delete(g.ahs, k)
	}
	g.mu.Unlock()
	if g.mr != nil {
		g.mr.Dereg().Wait()
	}
	if g.cq != nil {
		g.cq.Destroy().Wait()
	}
	if g.pd != nil {
		g.pd.Dealloc().Wait()
	}
	if g.buf != nil {
		UnmapBuffer(g.buf)
	}
}
