// RC data path tests over a memory link: SEND and RDMA WRITE, single- and
// multi-packet, byte for byte and completion field by field.

package engine

import (
	"testing"

	"github.com/xrnic/xrnic/nic/cq"
	"github.com/xrnic/xrnic/nic/qpattr"
)

func TestRCSend(t *testing.T) {
	for _, mtu := range []qpattr.MTU{qpattr.MTU256, qpattr.MTU1024, qpattr.MTU4096} {
		for _, size := range []int{0, 1, 255, 256, 257, 3000, 4096, 10000, 65536} {
			t.Run(name("mtu%d/%d", mtu.Bytes(), size), func(t *testing.T) {
				_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{mtu: mtu})
				fill(a.buf[:size], 3)
				recv(t, b, 7, 100, uint32(size)+16)
				send(t, a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, uint32(size))}})
				checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 1, Status: cq.Success, Opcode: cq.Send, ByteLen: uint32(size), QPN: a.qp.QPN()})
				checkWC(t, pollOne(t, b.cq), cq.WC{WRID: 7, Status: cq.Success, Opcode: cq.Recv, ByteLen: uint32(size), QPN: b.qp.QPN()})
				checkBytes(t, "received", b.buf[100:100+size], a.buf[:size])
			})
		}
	}
}

func TestRCWrite(t *testing.T) {
	for _, mtu := range []qpattr.MTU{qpattr.MTU256, qpattr.MTU1024, qpattr.MTU4096} {
		for _, size := range []int{0, 1, 1024, 1025, 3000, 65536, 300000} {
			t.Run(name("mtu%d/%d", mtu.Bytes(), size), func(t *testing.T) {
				_, a, b := rcPair(t, pairOpts{}, nodeOpts{}, connOpts{mtu: mtu})
				fill(a.buf[:size], 5)
				send(t, a, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, uint32(size))},
					RemoteAddr: b.mr.Addr() + 512, RKey: b.mr.RKey()})
				checkWC(t, pollOne(t, a.cq), cq.WC{WRID: 2, Status: cq.Success, Opcode: cq.RDMAWrite, ByteLen: uint32(size), QPN: a.qp.QPN()})
				checkBytes(t, "written", b.buf[512:512+size], a.buf[:size])
				noMore(t, b.cq)
			})
		}
	}
}
