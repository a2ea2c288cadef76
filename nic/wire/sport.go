// RoCEv2 UDP source port selection, as Linux does it.

package wire

// RoCEv2 UDP source ports. The destination port is always 4791; the source port
// carries entropy for ECMP and RSS, and must stay constant for a flow so that its
// packets are not reordered. Linux uses two schemes, both seen in the golden
// captures:
//
//   - A connected QP (RC, UC) that is given a GRH address vector takes
//     rdma_get_udp_sport(flow_label, qpn, dest_qpn) when it is modified
//     (rxe_verbs.c rxe_modify_qp; include/rdma/ib_verbs.h). With flow label 0 the
//     label is derived from the two QPNs, symmetrically, so both directions of a
//     connection use the same port.
//     A QP connected by the RDMA CM has a flow label already: cma.c
//     cma_get_roce_udp_flow_label hashes the CM's port numbers (CMFlowLabel), and
//     the passive side takes the same label from the REQ's primary path.
//   - Any other QP keeps the port rxe_qp.c gives it at creation:
//     0xC000 + hash_32(qpn, 14). UD QPs and the GSI QP1 (CM MADs) send from it.
//
// (shared/pcaps/README.md describes every QP's port as 0xC000 + hash_32(QPN, 14);
// that holds for UD and QP1 only. Its example, 49441 for QPN 0x11, is
// UDPSport(0, 0x11, 0x11) of two QPs that both have number 0x11.)

// SportMin is the lowest RoCEv2 source port (IB_ROCE_UDP_ENCAP_VALID_PORT_MIN);
// the 14-bit hash fills 0xC000..0xFFFF.
const SportMin = 0xC000

// FlowLabel is rdma_calc_flow_label: fold the 48-bit product of the two QPNs into
// a 20-bit IPv6 flow label. It is symmetric in lqpn and rqpn.
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// FlowLabelToUDPSport is rdma_flow_label_to_udp_sport: fold a 20-bit flow label into
// 14 bits above SportMin.
func FlowLabelToUDPSport(fl uint32) uint16 {
	low, high := fl&0x03FFF, fl&0xFC000
	low ^= high >> 14
	return uint16(low | SportMin)
}

// UDPSport is rdma_get_udp_sport: the source port of a connected QP with flow label
// fl (0 when the address vector has none) between QPNs lqpn and rqpn.
func UDPSport(fl, lqpn, rqpn uint32) uint16 {
	if fl == 0 {
		fl = FlowLabel(lqpn, rqpn)
	}
	return FlowLabelToUDPSport(fl)
}

// CMFlowLabel is the flow label the RDMA CM gives a RoCEv2 connection when the
// application set none (drivers/infiniband/core/cma.c cma_get_roce_udp_flow_label):
// the active side's CM source port times 31 plus the destination (service) port.
// The REQ carries it as the primary flow label.
func CMFlowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & 0xFFFFF
}

// QPSport is the source port rxe gives a QP at creation (rxe_qp.c:
// RXE_ROCE_V2_SPORT + (hash_32(qpn, 14) & 0x3fff)), which UD and GSI QPs keep.
func QPSport(qpn uint32) uint16 {
	return uint16(SportMin + hash32(qpn, 14)&0x3FFF)
}

// hash32 is the kernel's hash_32 (include/linux/hash.h): multiply by
// GOLDEN_RATIO_32 and keep the top bits.
func hash32(v uint32, bits uint) uint32 { return v * 0x61C88647 >> (32 - bits) }
