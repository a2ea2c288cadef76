package remote

import (
	"context"
	"net/netip"

	"github.com/xrnic/xrnic/nic/attach"
	"github.com/xrnic/xrnic/nic/attach/conv"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// CMID is an rdma_cm ID the daemon runs for the process (struct rdma_cm_id
// over rdma_ucm). It has no QP of its own: Connect and Accept name the
// process's QP, which it moves through INIT, RTR and RTS with InitQPAttr's
// attributes, as librdmacm does. Safe for concurrent use.
type CMID struct {
	d *Device
	h uint32
}

// CMEvent is struct rdma_cm_event. A plain value.
type CMEvent struct {
	Type   rdmacm.EventType
	ID     *CMID
	Listen *CMID // CONNECT_REQUEST: the listener (ID is the new one)
	Status int
	// Src and Dst are the ID's addresses (rdma_get_local_addr,
	// rdma_get_peer_addr).
	Src, Dst netip.AddrPort
	Param    rdmacm.ConnParam
	UD       rdmacm.UDParam // UD IDs
	MC       uint32         // MULTICAST_JOIN, MULTICAST_ERROR: the join's uid
}

// CreateCMID makes an ID in port space ps (rdma_create_id).
func (d *Device) CreateCMID(ps rdmacm.PortSpace) (*CMID, error) {
	var rep attach.HandleRep
	if _, err := d.call(attach.OpCMCreateID, &attach.CMIDReq{Arg: uint32(ps)}, &rep); err != nil {
		return nil, err
	}
	return d.cmID(rep.Handle), nil
}

// cmID is the CMID of a handle, made the first time it is seen.
func (d *Device) cmID(h uint32) *CMID {
	if h == 0 {
		return nil
	}
	d.evMu.Lock()
	defer d.evMu.Unlock()
	if d.cmIDs == nil {
		d.cmIDs = map[uint32]*CMID{}
	}
	id := d.cmIDs[h]
	if id == nil {
		id = &CMID{d: d, h: h}
		d.cmIDs[h] = id
	}
	return id
}

func (id *CMID) simple(op attach.Op, arg uint32) error {
	_, err := id.d.call(op, &attach.CMIDReq{ID: id.h, Arg: arg}, nil)
	return err
}

// BindAddr binds the ID to a local address (rdma_bind_addr) and returns it:
// for port 0, with the port the daemon's rdma_cm reserved (rdma_get_src_port).
// A port bound already fails with EADDRINUSE (EADDRNOTAVAIL when either
// address is unspecified) unless both IDs set OptionReuseAddr.
func (id *CMID) BindAddr(a netip.AddrPort) (netip.AddrPort, error) {
	var bound attach.SockAddr
	if _, err := id.d.call(attach.OpCMBindAddr, &attach.CMAddrReq{ID: id.h, Src: attach.MakeSockAddr(a)}, &bound); err != nil {
		return netip.AddrPort{}, err
	}
	return bound.AddrPort()
}

// SetOption is rdma_set_option at level RDMA_OPTION_ID: the daemon's ID
// takes the TOS, REUSEADDR or AFONLY (rdmacm.ID.SetOption's rules).
func (id *CMID) SetOption(opt rdmacm.Option, value uint32) error {
	_, err := id.d.call(attach.OpCMSetOption, &attach.CMOptionReq{ID: id.h, Option: uint32(opt), Value: value}, nil)
	return err
}

// ResolveAddr resolves dst from src (rdma_resolve_addr); ADDR_RESOLVED or
// ADDR_ERROR follows.
func (id *CMID) ResolveAddr(src netip.Addr, dst netip.AddrPort) error {
	_, err := id.d.call(attach.OpCMResolveAddr, &attach.CMAddrReq{ID: id.h,
		Src: attach.MakeSockAddr(netip.AddrPortFrom(src, 0)), Dst: attach.MakeSockAddr(dst)}, nil)
	return err
}

// ResolveRoute resolves the route (rdma_resolve_route).
func (id *CMID) ResolveRoute() error { return id.simple(attach.OpCMResolveRoute, 0) }

// Listen listens on the bound address (rdma_listen).
func (id *CMID) Listen(backlog int) error {
	var bound attach.SockAddr
	_, err := id.d.call(attach.OpCMListen, &attach.CMIDReq{ID: id.h, Arg: uint32(max(backlog, 0))}, &bound)
	return err
}

// Disconnect sends a DREQ (rdma_disconnect); the process moves its QP to
// ERR itself.
func (id *CMID) Disconnect() error { return id.simple(attach.OpCMDisconnect, 0) }

// Establish answers a CONNECT_RESPONSE (rdma_establish).
func (id *CMID) Establish() error { return id.simple(attach.OpCMEstablish, 0) }

// Notify passes the QP's event ev to the daemon's ID (rdma_notify):
// rdmacm.ID.Notify's rules, EISCONN and EINVAL its errors.
func (id *CMID) Notify(ev verbs.EventType) error { return id.simple(attach.OpCMNotify, uint32(ev)) }

// JoinMulticast joins the group addr (rdma_join_multicast): the daemon's
// ID joins, and MULTICAST_JOIN, naming the join by uid, follows. The
// process attaches its QP itself (ucma_process_join).
func (id *CMID) JoinMulticast(addr netip.Addr, uid uint32) error {
	return id.mcast(attach.OpCMJoinMcast, addr, uid)
}

// LeaveMulticast leaves the join of group addr named uid
// (rdma_leave_multicast).
func (id *CMID) LeaveMulticast(addr netip.Addr, uid uint32) error {
	return id.mcast(attach.OpCMLeaveMcast, addr, uid)
}

func (id *CMID) mcast(op attach.Op, addr netip.Addr, uid uint32) error {
	_, err := id.d.call(op, &attach.CMJoinReq{ID: id.h, UID: uid, Addr: attach.MakeSockAddr(netip.AddrPortFrom(addr, 0))}, nil)
	return err
}

// Destroy destroys the ID (rdma_destroy_id).
func (id *CMID) Destroy() error {
	err := id.d.destroy(attach.KindCMID, id.h)
	if err == nil {
		id.d.evMu.Lock()
		delete(id.d.cmIDs, id.h)
		id.d.evMu.Unlock()
	}
	return err
}

func (id *CMID) conn(op attach.Op, qp *QP, p rdmacm.ConnParam) error {
	param, err := conv.WireConnParam(p)
	if err != nil {
		return err
	}
	req := attach.CMConnReq{ID: id.h, Param: param}
	if qp != nil {
		req.QP = qp.h
	}
	_, err = id.d.call(op, &req, nil)
	return err
}

// Connect sends a REQ for qp (rdma_connect).
func (id *CMID) Connect(qp *QP, p rdmacm.ConnParam) error { return id.conn(attach.OpCMConnect, qp, p) }

// Accept answers a CONNECT_REQUEST with a REP for qp (rdma_accept).
func (id *CMID) Accept(qp *QP, p rdmacm.ConnParam) error { return id.conn(attach.OpCMAccept, qp, p) }

// Reject answers a CONNECT_REQUEST with a REJ (rdma_reject).
func (id *CMID) Reject(private []byte) error {
	return id.conn(attach.OpCMReject, nil, rdmacm.ConnParam{PrivateData: private})
}

// InitQPAttr gives the attributes and mask that move the process's QP to
// state for this connection (rdma_init_qp_attr).
func (id *CMID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.AttrMask, error) {
	var rep attach.CMInitQPAttrRep
	if _, err := id.d.call(attach.OpCMInitQPAttr, &attach.CMIDReq{ID: id.h, Arg: uint32(state)}, &rep); err != nil {
		return verbs.QPAttr{}, 0, err
	}
	return conv.VerbsQPAttr(&rep.Attr), verbs.AttrMask(rep.Mask), nil
}

// GetCMEvent waits for the next CM event of the process's IDs
// (rdma_get_cm_event).
func (d *Device) GetCMEvent(ctx context.Context) (*CMEvent, error) {
	for {
		d.evMu.Lock()
		var m *attach.CMEventMsg
		if len(d.cmEvs) > 0 {
			m = d.cmEvs[0]
			d.cmEvs = d.cmEvs[1:]
		}
		d.evMu.Unlock()
		if m != nil {
			return d.cmEvent(m), nil
		}
		select {
		case <-d.cmNew:
		case <-d.done:
			return nil, d.readErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// SetCMEventHandler hands the CM events to h, one at a time on a goroutine of
// the Device's (until Close), instead of keeping them for GetCMEvent; the
// events already kept go first. Set it once.
func (d *Device) SetCMEventHandler(h func(*CMEvent)) {
	d.evWG.Add(1)
	go func() {
		defer d.evWG.Done()
		for {
			ev, err := d.GetCMEvent(context.Background()) // ends with the connection
			if err != nil {
				return
			}
			h(ev)
		}
	}()
}

func (d *Device) cmEvent(m *attach.CMEventMsg) *CMEvent {
	ev := &CMEvent{Type: rdmacm.EventType(m.Type), ID: d.cmID(m.ID), Status: int(m.Status)}
	if ev.Type == rdmacm.EventMulticastJoin || ev.Type == rdmacm.EventMulticastError {
		ev.MC = m.Listen // the join's uid
	} else {
		ev.Listen = d.cmID(m.Listen)
	}
	ev.Src, _ = m.Src.AddrPort()
	ev.Dst, _ = m.Dst.AddrPort()
	ev.Param, _ = conv.VerbsConnParam(&m.Param) // the daemon's length is bounded by the field: cut, not refused
	ev.UD = rdmacm.UDParam{PrivateData: ev.Param.PrivateData, QPN: m.Param.QPN, QKey: m.Param.QKey, AV: conv.VerbsAV(m.AV)}
	return ev
}
