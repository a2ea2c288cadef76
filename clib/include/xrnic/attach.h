/* The attach protocol of the xrnic daemon, version 6: docs/attach.md in C.
 * Little-endian, natural alignment (no packed structs). Written from the
 * protocol's document; nic/shm's TestCLayout holds it to the Go side. */
#ifndef XRNIC_ATTACH_H
#define XRNIC_ATTACH_H

#include <stdint.h>

#define XRNIC_ATTACH_VERSION 6
#define XRNIC_MAX_MESSAGE 1024
#define XRNIC_MAX_FDS 2

enum xrnic_op {
	XRNIC_OP_HELLO = 1,
	XRNIC_OP_QUERY_DEVICE,
	XRNIC_OP_QUERY_PORT,
	XRNIC_OP_QUERY_GID,
	XRNIC_OP_ALLOC_PD,
	XRNIC_OP_REG_MR,
	XRNIC_OP_CREATE_COMP_CHANNEL,
	XRNIC_OP_CREATE_CQ,
	XRNIC_OP_CREATE_QP,
	XRNIC_OP_MODIFY_QP,
	XRNIC_OP_QUERY_QP,
	XRNIC_OP_CREATE_AH,
	XRNIC_OP_DESTROY,
	XRNIC_OP_EVENT,
	XRNIC_OP_CREATE_SRQ,
	XRNIC_OP_MODIFY_SRQ,
	XRNIC_OP_CM_CREATE_ID,
	XRNIC_OP_CM_BIND_ADDR,
	XRNIC_OP_CM_RESOLVE_ADDR,
	XRNIC_OP_CM_RESOLVE_ROUTE,
	XRNIC_OP_CM_LISTEN,
	XRNIC_OP_CM_CONNECT,
	XRNIC_OP_CM_ACCEPT,
	XRNIC_OP_CM_REJECT,
	XRNIC_OP_CM_DISCONNECT,
	XRNIC_OP_CM_ESTABLISH,
	XRNIC_OP_CM_INIT_QP_ATTR,
	XRNIC_OP_CM_EVENT,
	XRNIC_OP_CM_CREATE_CHANNEL,
	XRNIC_OP_CM_MIGRATE_ID,
	XRNIC_OP_CM_SET_OPTION,
	XRNIC_OP_CM_NOTIFY,
	XRNIC_OP_QUERY_SRQ,
	XRNIC_OP_ATTACH_MCAST,
	XRNIC_OP_DETACH_MCAST,
	XRNIC_OP_CM_JOIN_MCAST,
	XRNIC_OP_CM_LEAVE_MCAST,
};

enum xrnic_kind {
	XRNIC_KIND_PD = 1,
	XRNIC_KIND_MR,
	XRNIC_KIND_COMP_CHANNEL,
	XRNIC_KIND_CQ,
	XRNIC_KIND_QP,
	XRNIC_KIND_AH,
	XRNIC_KIND_SRQ,
	XRNIC_KIND_CM_ID,
	XRNIC_KIND_CM_CHANNEL,
};

struct xrnic_hdr {
	uint32_t op, seq;
	int32_t status;
	uint32_t len;
};

struct xrnic_hello_req { uint32_t version, pad; };
struct xrnic_hello_rep { uint32_t version, pad; uint64_t node_guid; char name[32]; };
struct xrnic_device {
	uint64_t node_guid, max_mr_size, page_size_cap;
	uint32_t vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, max_sge, max_cq, max_cqe, max_mr,
		max_pd, max_qp_rd_atom, max_qp_init_rd_atom, max_ah, max_srq, max_srq_wr, max_srq_sge,
		max_inline, atomic_cap;
	char fw_ver[32];
};
struct xrnic_port {
	uint32_t state, max_mtu, active_mtu, gid_tbl_len, max_msg_sz;
	uint8_t active_width, active_speed; /* ibv_port_attr's */
	uint16_t pad;
};
struct xrnic_gid_req { uint32_t index, pad; };
struct xrnic_gid_rep { uint8_t gid[16]; };
struct xrnic_handle_rep { uint32_t handle, pad; };
struct xrnic_reg_mr { uint64_t addr, length, file_off; uint32_t pd, access; };
struct xrnic_reg_mr_rep { uint32_t handle, lkey, rkey, pad; };
struct xrnic_create_cq { uint32_t cqe, channel; };
struct xrnic_create_cq_rep { uint32_t handle, cqn, entries, pad; };
struct xrnic_create_qp {
	uint32_t pd, qp_type, send_cq, recv_cq, srq, sq_sig_all, max_send_wr, max_recv_wr, max_send_sge,
		max_recv_sge, max_inline_data, pad;
};
struct xrnic_create_qp_rep {
	uint32_t handle, qpn, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
		sq_entries, sq_entry_size, sq_off, rq_entries, rq_entry_size, rq_off, mem_len;
};
struct xrnic_av {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, port_num;
};
struct xrnic_qp_attr {
	uint32_t qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, max_send_wr, max_recv_wr,
		max_send_sge, max_recv_sge, max_inline_data;
	uint16_t pkey_index;
	uint8_t qp_state, cur_qp_state, path_mtu, path_mig_state, port_num, timeout, retry_cnt, rnr_retry,
		min_rnr_timer, max_rd_atomic, max_dest_rd_atomic, sq_draining, pad[2];
	struct xrnic_av ah_attr;
};
struct xrnic_modify_qp { uint32_t handle, mask; struct xrnic_qp_attr attr; };
struct xrnic_create_ah { uint32_t pd, pad; struct xrnic_av av; };
struct xrnic_destroy { uint32_t kind, handle; };
struct xrnic_mcast { uint8_t gid[16]; uint32_t qp; uint16_t mlid, pad; };
struct xrnic_event { uint32_t type, kind, handle, pad; };
struct xrnic_create_srq { uint32_t pd, max_wr, max_sge, srq_limit; };
struct xrnic_create_srq_rep { uint32_t handle, max_wr, max_sge, entries, entry_size, mem_len; };
struct xrnic_modify_srq { uint32_t handle, mask, max_wr, srq_limit; };
struct xrnic_query_srq_rep { uint32_t max_wr, max_sge, srq_limit, pad; };
struct xrnic_sockaddr { uint8_t ip[16]; uint16_t port, family; uint32_t pad; };
struct xrnic_conn_param {
	uint32_t qp_num, qkey, private_data_len;
	uint8_t responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq,
		pad[2];
	uint8_t private_data[196];
};
struct xrnic_cm_id_req { uint32_t id, arg; };
struct xrnic_cm_join { uint32_t id, uid; struct xrnic_sockaddr addr; };
struct xrnic_cm_addr { uint32_t id, pad; struct xrnic_sockaddr src, dst; };
struct xrnic_cm_conn { uint32_t id, qp; struct xrnic_conn_param param; };
struct xrnic_cm_option { uint32_t id, option /* RDMA_OPTION_ID_* */, value, pad; };
struct xrnic_cm_init_qp_attr_rep { uint32_t mask, pad; struct xrnic_qp_attr attr; };
struct xrnic_cm_event {
	uint32_t event, id, listen_id;
	int32_t status;
	struct xrnic_sockaddr src, dst;
	struct xrnic_conn_param param;
	struct xrnic_av ah_attr;
};

/* Rings: a 256-byte header, then the entries. Each side keeps its own index
 * privately and publishes it with a release store; the other side's is read
 * with an acquire load and is untrusted (prod - cons above entries is a
 * corrupted ring). */
#define XRNIC_RING_HEADER 256
#define XRNIC_RING_NEED_WAKEUP 1u
#define XRNIC_ARM_NEXT 1u
#define XRNIC_ARM_SOLICITED 2u

struct xrnic_ring_hdr {
	uint32_t prod;
	uint8_t pad0[60];
	uint32_t cons;
	uint8_t pad1[60];
	uint32_t flags;
	uint8_t pad2[60];
	uint32_t arm, events;
	uint8_t pad3[56];
};

struct xrnic_ring {
	struct xrnic_ring_hdr *hdr;
	uint8_t *entries;
	uint32_t n, esize, own; /* own: this side's index */
};

static inline void xrnic_ring_init(struct xrnic_ring *r, void *mem, uint32_t n, uint32_t esize, int producer)
{
	r->hdr = mem;
	r->entries = (uint8_t *)mem + XRNIC_RING_HEADER;
	r->n = n;
	r->esize = esize;
	r->own = __atomic_load_n(producer ? &r->hdr->prod : &r->hdr->cons, __ATOMIC_ACQUIRE);
}

/* xrnic_ring_fits checks a ring's layout, as the daemon's reply gives it,
 * before it is used: n a power of two up to 2^24, esize a multiple of 8 of at
 * least min bytes, off 64-aligned, and the whole ring within len bytes. */
static inline int xrnic_ring_fits(uint64_t off, uint32_t n, uint32_t esize, uint64_t min, uint64_t len)
{
	if (n == 0 || (n & (n - 1)) || n > (1u << 24) || esize < min || esize % 8 || off % 64)
		return 0;
	return off <= len && len - off >= XRNIC_RING_HEADER + (uint64_t)n * esize;
}

static inline void *xrnic_ring_entry(struct xrnic_ring *r, uint32_t i)
{
	return r->entries + (uint64_t)(i & (r->n - 1)) * r->esize;
}

/* Producer: free entries, or -1 for a corrupted ring. */
static inline int64_t xrnic_ring_free(struct xrnic_ring *r)
{
	uint32_t used = r->own - __atomic_load_n(&r->hdr->cons, __ATOMIC_ACQUIRE);
	return used > r->n ? -1 : (int64_t)(r->n - used);
}

static inline void xrnic_ring_commit(struct xrnic_ring *r, uint32_t k)
{
	r->own += k;
	__atomic_store_n(&r->hdr->prod, r->own, __ATOMIC_RELEASE);
}

/* Consumer: entries to read, or -1 for a corrupted ring. */
static inline int64_t xrnic_ring_avail(struct xrnic_ring *r)
{
	uint32_t avail = __atomic_load_n(&r->hdr->prod, __ATOMIC_ACQUIRE) - r->own;
	return avail > r->n ? -1 : (int64_t)avail;
}

static inline void xrnic_ring_release(struct xrnic_ring *r, uint32_t k)
{
	r->own += k;
	__atomic_store_n(&r->hdr->cons, r->own, __ATOMIC_RELEASE);
}

/* Producer, after a commit: whether to ring the doorbell. The full fence
 * orders the store of prod before the load of flags: the daemon stores flags
 * and then loads prod (both sequentially consistent), and without it each
 * side could miss the other's store and the daemon would sleep on a posted
 * entry. */
static inline int xrnic_ring_need_wakeup(struct xrnic_ring *r)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return (__atomic_load_n(&r->hdr->flags, __ATOMIC_RELAXED) & XRNIC_RING_NEED_WAKEUP) != 0;
}

/* Entries. */
struct xrnic_sge { uint64_t addr; uint32_t length, lkey; };
struct xrnic_send_wqe {
	uint64_t wr_id;
	uint32_t opcode, send_flags;
	uint8_t imm[4];
	uint32_t num_sge;
	uint64_t remote_addr;
	uint32_t rkey, ah, remote_qpn, remote_qkey;
	uint64_t compare_add, swap;
	/* then num_sge struct xrnic_sge, or the inline data */
};
struct xrnic_recv_wqe { uint64_t wr_id; uint32_t num_sge, pad; /* then the SGEs */ };
struct xrnic_cqe {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len;
	uint8_t imm[4];
	uint32_t qp_num, src_qp, wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits, pad[18];
};

#endif
