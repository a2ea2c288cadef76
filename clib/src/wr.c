/* The work request API of extended QPs (ibv_wr_post(3)): between
 * ibv_wr_start and ibv_wr_complete, each builder fills the next entry of the
 * send ring in place and the setters complete the entry it took; complete
 * publishes them all with one doorbell, or none when a call failed, and
 * returns that call's errno (the man page: "the entire posting will be
 * aborted"). The errnos are rxe's: ENOSPC for a full queue or too much data,
 * EINVAL for a QP not yet in RTS (as its ibv_post_send). The daemon checks
 * every entry again when it takes it, as it does ibv_post_send's. */
#include <errno.h>
#include <string.h>

#include "internal.h"

/* What the QP types take, as the engine executes them (nic/engine/wr.go): RC
 * all of rxe's but MW binds (which xrnic's ring has no fields for) and FLUSH
 * (which Debian's headers lack); UC writes and sends, neither invalidating
 * nor binding; UD sends. */
#define XR_UD_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)
#define XR_UC_OPS (XR_UD_OPS | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
#define XR_RC_OPS                                                                                                \
	(XR_UC_OPS | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |                              \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_LOCAL_INV |           \
	 IBV_QP_EX_WITH_SEND_WITH_INV)

uint64_t xr_send_ops(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC:
		return XR_RC_OPS;
	case IBV_QPT_UC:
		return XR_UC_OPS;
	case IBV_QPT_UD:
		return XR_UD_OPS;
	default:
		return 0;
	}
}

static struct xr_qp *qx(struct ibv_qp_ex *x) { return container_of(x, struct xr_qp, qpx); }

static void wr_start(struct ibv_qp_ex *x)
{
	struct xr_qp *q = qx(x);
	pthread_spin_lock(&q->sqlock);
	q->cur = q->sq.own;
	q->err = x->qp_base.state < IBV_QPS_RTS ? EINVAL : 0;
}

static int wr_complete(struct ibv_qp_ex *x)
{
	struct xr_qp *q = qx(x);
	int err = q->err;
	if (!err)
		xr_publish(&xr_ctx(x->qp_base.context)->conn, &q->sq, q->cur - q->sq.own);
	pthread_spin_unlock(&q->sqlock);
	return err;
}

static void wr_abort(struct ibv_qp_ex *x) { pthread_spin_unlock(&qx(x)->sqlock); }

/* build takes the next entry for a work request of opcode, its header filled
 * from the QP's wr_id and wr_flags (IBV_SEND_INLINE is the inline setters');
 * NULL after a failure. */
static uint8_t *build(struct ibv_qp_ex *x, uint32_t opcode, struct xrnic_send_wqe *w)
{
	struct xr_qp *q = qx(x);
	if (q->err)
		return NULL;
	int64_t room = xrnic_ring_free(&q->sq);
	if (room <= (int64_t)(q->cur - q->sq.own)) {
		q->err = room < 0 ? EIO : ENOSPC;
		return NULL;
	}
	*w = (struct xrnic_send_wqe){.wr_id = x->wr_id, .opcode = opcode, .send_flags = x->wr_flags & ~IBV_SEND_INLINE};
	return xrnic_ring_entry(&q->sq, q->cur++);
}

/* last is the entry the latest builder took (NULL after a failure), its
 * header in *w; put writes the header back. */
static uint8_t *last(struct ibv_qp_ex *x, struct xrnic_send_wqe *w)
{
	struct xr_qp *q = qx(x);
	if (q->err)
		return NULL;
	if (q->cur == q->sq.own) { /* a setter before any builder */
		q->err = EINVAL;
		return NULL;
	}
	uint8_t *e = xrnic_ring_entry(&q->sq, q->cur - 1);
	memcpy(w, e, sizeof(*w));
	return e;
}

static void put(uint8_t *e, const struct xrnic_send_wqe *w) { memcpy(e, w, sizeof(*w)); }

/* op builds a WR of opcode with its remote address and key, its four bytes
 * of imm (immediate data in network order, or an rkey to invalidate in host
 * order, as ibv_send_wr's union holds them; NULL: none) and its atomic
 * operands. */
static void op(struct ibv_qp_ex *x, uint32_t opcode, uint32_t rkey, uint64_t addr, const void *imm, uint64_t cmp_add,
	       uint64_t swap)
{
	struct xrnic_send_wqe w;
	uint8_t *e = build(x, opcode, &w);
	if (!e)
		return;
	w.rkey = rkey;
	w.remote_addr = addr;
	if (imm)
		memcpy(w.imm, imm, 4);
	w.compare_add = cmp_add;
	w.swap = swap;
	put(e, &w);
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	op(x, IBV_WR_RDMA_WRITE, rkey, addr, NULL, 0, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	op(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, &imm, 0, 0);
}

static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	op(x, IBV_WR_RDMA_READ, rkey, addr, NULL, 0, 0);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	op(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, NULL, compare, swap);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	op(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, NULL, add, 0);
}

/* wr_atomic_write's 8 bytes go in the entry's swap, as given (docs/attach.md). */
static void wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *data)
{
	uint64_t v;
	memcpy(&v, data, 8);
	op(x, IBV_WR_ATOMIC_WRITE, rkey, addr, NULL, 0, v);
}

static void wr_send(struct ibv_qp_ex *x) { op(x, IBV_WR_SEND, 0, 0, NULL, 0, 0); }

static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm) { op(x, IBV_WR_SEND_WITH_IMM, 0, 0, &imm, 0, 0); }

static void wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey) { op(x, IBV_WR_SEND_WITH_INV, 0, 0, &rkey, 0, 0); }

static void wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey) { op(x, IBV_WR_LOCAL_INV, 0, 0, &rkey, 0, 0); }

static void wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct xrnic_send_wqe w;
	uint8_t *e = last(x, &w);
	if (!e)
		return;
	if (!ah) {
		qx(x)->err = EINVAL;
		return;
	}
	w.ah = ah->handle;
	w.remote_qpn = qpn;
	w.remote_qkey = qkey;
	put(e, &w);
}

static void wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sgl)
{
	struct xr_qp *q = qx(x);
	struct xrnic_send_wqe w;
	uint8_t *e = last(x, &w);
	if (!e)
		return;
	if (n > q->cap.max_send_sge) {
		q->err = ENOSPC;
		return;
	}
	xr_put_sges(e + sizeof(w), sgl, n);
	w.num_sge = n;
	w.send_flags &= ~IBV_SEND_INLINE; /* after an inline setter on the same WR: the last one holds */
	put(e, &w);
}

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};
	wr_set_sge_list(x, length ? 1 : 0, &s); /* a 0-byte SGE is none, as rxe's */
}

/* The inline setters copy the data now; the entry's tail holds up to the
 * QP's max_inline_data (the daemon sized it so). */
static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *bufs)
{
	struct xr_qp *q = qx(x);
	struct xrnic_send_wqe w;
	uint8_t *e = last(x, &w);
	if (!e)
		return;
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		if (bufs[i].length > q->cap.max_inline_data - len) {
			q->err = ENOSPC;
			return;
		}
		memcpy(e + sizeof(w) + len, bufs[i].addr, bufs[i].length);
		len += bufs[i].length;
	}
	w.num_sge = len;
	w.send_flags |= IBV_SEND_INLINE;
	put(e, &w);
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	wr_set_inline_data_list(x, 1, &b);
}

/* The operations xrnic has no ring fields for fail the posting, rather than
 * leave a NULL pointer to call. */
static void unsupported(struct ibv_qp_ex *x)
{
	struct xr_qp *q = qx(x);
	if (!q->err)
		q->err = EOPNOTSUPP;
}

static void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	(void)mw, (void)rkey, (void)info;
	unsupported(x);
}

static void wr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr, (void)hdr_sz, (void)mss;
	unsupported(x);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	(void)srqn;
	unsupported(x);
}

void xr_init_qp_ex(struct xr_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_local_inv = wr_local_inv;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_atomic_write = wr_atomic_write;
}
