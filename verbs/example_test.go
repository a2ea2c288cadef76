package verbs_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/verbs"
)

// Two devices, register memory, connect two RC QPs, one RDMA WRITE. The devices sit
// on an in-memory link here; on a real interface open them with
// verbs.Open(verbs.Options{Interface: "veth0"}) and exchange QPN, PSN, GID, rkey and
// address out of band (bench does it over TCP, as perftest does).
func Example() {
	la, lb, _ := link.NewMemoryPair(link.MemoryOptions{})
	defer la.Close()
	defer lb.Close()
	type side struct {
		dev *verbs.Device
		pd  *verbs.PD
		cq  *verbs.CQ
		mr  *verbs.MR
		qp  *verbs.QP
		buf []byte
		gid netdev.GID
	}
	open := func(l link.Link, ip string) *side {
		s := &side{gid: netdev.GIDFromAddr(netip.MustParseAddr(ip)), buf: make([]byte, 4096)}
		s.dev, _ = verbs.Open(verbs.Options{Link: l, GIDs: []netdev.GID{s.gid}})
		s.pd, _ = s.dev.AllocPD()
		s.cq, _ = s.dev.CreateCQ(64, verbs.CQOptions{})
		s.mr, _ = s.pd.RegMR(s.buf, 0, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		s.qp, _ = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return s
	}
	// Release in the reverse order: QP, CQ, MR, PD, then the device.
	release := func(s *side) {
		s.qp.Destroy().Wait()
		s.cq.Destroy().Wait()
		s.mr.Dereg()
		s.pd.Dealloc()
		s.dev.Close()
	}
	a, b := open(la, "192.0.2.11"), open(lb, "192.0.2.12")
	defer release(a)
	defer release(b)

	// RESET -> INIT -> RTR -> RTS, as ibv_rc_pingpong does.
	connect := func(s, peer *side, sq, rq verbs.PSN) error {
		init := verbs.QPAttr{}
		init.State, init.Port, init.AccessFlags = verbs.QPSInit, 1, verbs.QPAccessRemoteWrite
		if err := s.qp.ModifySync(&init, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			return err
		}
		rtr := verbs.QPAttr{AV: verbs.AV{DGID: peer.gid}}
		rtr.State, rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = verbs.QPSRTR, verbs.MTU1024, peer.qp.QPN(), rq
		rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 1, 12
		if err := s.qp.ModifySync(&rtr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|
			verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
			return err
		}
		rts := verbs.QPAttr{}
		rts.State, rts.SQPSN, rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = verbs.QPSRTS, sq, 14, 7, 7, 1
		return s.qp.ModifySync(&rts, verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|
			verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
	}
	if err := connect(a, b, 100, 200); err != nil {
		fmt.Println(err)
		return
	}
	if err := connect(b, a, 200, 100); err != nil {
		fmt.Println(err)
		return
	}

	msg := copy(a.buf, "hello, RDMA")
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: a.mr.Addr(), Length: uint32(msg), LKey: a.mr.LKey()}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	if err != nil {
		fmt.Println(err)
		return
	}
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(10 * time.Second); a.cq.Poll(wc) == 0; {
		if time.Now().After(deadline) {
			fmt.Println("no completion")
			return
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println(wc[0].Status, wc[0].Opcode)
	fmt.Printf("%s\n", b.buf[:msg])
	// Output:
	// success rdma-write
	// hello, RDMA
}
