/* The hot path on the shared rings (docs/attach.md, "Rings"): posting and
 * polling make no system call, except the doorbell when the daemon sleeps. */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "internal.h"

/* xr_publish commits k entries and wakes the daemon if it asked to be. */
void xr_publish(struct xr_conn *c, struct xrnic_ring *r, uint32_t k)
{
	if (!k)
		return;
	xrnic_ring_commit(r, k);
	if (xrnic_ring_need_wakeup(r))
		xr_ring_bell(c);
}

static struct xr_conn *conn_of(struct ibv_context *ctx) { return &xr_ctx(ctx)->conn; }

/* xr_put_sges writes n SGEs in the protocol's layout from tail on (the
 * entry's tail, sized for the queue's SGE limit, which the caller checked). */
void xr_put_sges(uint8_t *tail, const struct ibv_sge *sgl, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct xrnic_sge x = {.addr = sgl[i].addr, .length = sgl[i].length, .lkey = sgl[i].lkey};
		memcpy(tail + i * sizeof(x), &x, sizeof(x));
	}
}

/* put_send writes one work request into entry e; an error is libibverbs'
 * errno for the request. Inline data are copied from the SGEs now, as the
 * verbs' IBV_SEND_INLINE allows the buffers to be reused at once. */
static int put_send(struct xr_qp *q, uint8_t *e, const struct ibv_send_wr *wr)
{
	struct xrnic_send_wqe w = {.wr_id = wr->wr_id, .opcode = wr->opcode, .send_flags = wr->send_flags};
	memcpy(w.imm, &wr->imm_data, 4); /* imm_data in network order, or invalidate_rkey: as in memory */
	if (wr->num_sge < 0)
		return EINVAL;
	switch (wr->opcode) {
	case IBV_WR_ATOMIC_WRITE: /* ibv_send_wr has no field for its data; the WR API has (wr.c) */
		return EINVAL;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w.remote_addr = wr->wr.atomic.remote_addr;
		w.rkey = wr->wr.atomic.rkey;
		w.compare_add = wr->wr.atomic.compare_add;
		w.swap = wr->wr.atomic.swap;
		break;
	default:
		if (q->qp.qp_type == IBV_QPT_UD) {
			if (!wr->wr.ud.ah)
				return EINVAL;
			w.ah = wr->wr.ud.ah->handle;
			w.remote_qpn = wr->wr.ud.remote_qpn;
			w.remote_qkey = wr->wr.ud.remote_qkey;
		} else {
			w.remote_addr = wr->wr.rdma.remote_addr;
			w.rkey = wr->wr.rdma.rkey;
		}
	}
	uint8_t *tail = e + sizeof(w);
	if (wr->send_flags & IBV_SEND_INLINE) {
		uint32_t n = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			const struct ibv_sge *s = &wr->sg_list[i];
			if (s->length > q->cap.max_inline_data - n)
				return EINVAL;
			memcpy(tail + n, (void *)(uintptr_t)s->addr, s->length);
			n += s->length;
		}
		w.num_sge = n;
	} else {
		if ((uint32_t)wr->num_sge > q->cap.max_send_sge)
			return EINVAL;
		xr_put_sges(tail, wr->sg_list, wr->num_sge);
		w.num_sge = wr->num_sge;
	}
	memcpy(e, &w, sizeof(w));
	return 0;
}

int xr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct xr_qp *q = container_of(qp, struct xr_qp, qp);
	int err = 0;
	uint32_t k = 0;
	if (qp->state < IBV_QPS_RTS) { /* as rxe: a send queue not yet running takes nothing */
		*bad = wr;
		return EINVAL;
	}
	pthread_spin_lock(&q->sqlock);
	int64_t room = xrnic_ring_free(&q->sq);
	for (; wr; wr = wr->next, k++) {
		if (room <= (int64_t)k) {
			err = room < 0 ? EIO : ENOMEM; /* a full queue is ENOMEM, as libibverbs' */
			break;
		}
		if ((err = put_send(q, xrnic_ring_entry(&q->sq, q->sq.own + k), wr)))
			break;
	}
	xr_publish(conn_of(qp->context), &q->sq, k);
	pthread_spin_unlock(&q->sqlock);
	if (err)
		*bad = wr;
	return err;
}

static int post_recv(struct xr_conn *c, struct xrnic_ring *r, pthread_spinlock_t *lock, uint32_t max_sge,
		     struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int err = 0;
	uint32_t k = 0;
	pthread_spin_lock(lock);
	int64_t room = xrnic_ring_free(r);
	for (; wr; wr = wr->next, k++) {
		if (room <= (int64_t)k) {
			err = room < 0 ? EIO : ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge) {
			err = EINVAL;
			break;
		}
		uint8_t *e = xrnic_ring_entry(r, r->own + k);
		struct xrnic_recv_wqe w = {.wr_id = wr->wr_id, .num_sge = wr->num_sge};
		memcpy(e, &w, sizeof(w));
		xr_put_sges(e + sizeof(w), wr->sg_list, wr->num_sge);
	}
	xr_publish(c, r, k);
	pthread_spin_unlock(lock);
	if (err)
		*bad = wr;
	return err;
}

int xr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct xr_qp *q = container_of(qp, struct xr_qp, qp);
	if (!q->rq.n || qp->state == IBV_QPS_RESET) { /* an SRQ's receives; or RESET, as rxe refuses */
		*bad = wr;
		return EINVAL;
	}
	return post_recv(conn_of(qp->context), &q->rq, &q->rqlock, q->cap.max_recv_sge, wr, bad);
}

int xr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct xr_srq *s = container_of(srq, struct xr_srq, srq);
	return post_recv(conn_of(srq->context), &s->ring, &s->lock, s->max_sge, wr, bad);
}

int xr_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct xr_cq *q = container_of(cq, struct xr_cq, cq);
	pthread_spin_lock(&q->lock);
	int64_t avail = xrnic_ring_avail(&q->ring);
	if (avail < 0) {
		pthread_spin_unlock(&q->lock);
		return -1; /* the daemon wrote an impossible index */
	}
	int k = avail < n ? (int)avail : n;
	for (int i = 0; i < k; i++) {
		struct xrnic_cqe e;
		memcpy(&e, xrnic_ring_entry(&q->ring, q->ring.own + i), sizeof(e));
		struct ibv_wc *w = &wc[i];
		w->wr_id = e.wr_id;
		w->status = e.status;
		w->opcode = e.opcode;
		w->vendor_err = e.vendor_err;
		w->byte_len = e.byte_len;
		memcpy(&w->imm_data, e.imm, 4);
		w->qp_num = e.qp_num;
		w->src_qp = e.src_qp;
		w->wc_flags = e.wc_flags;
		w->pkey_index = e.pkey_index;
		w->slid = e.slid;
		w->sl = e.sl;
		w->dlid_path_bits = e.dlid_path_bits;
	}
	if (k)
		xrnic_ring_release(&q->ring, k);
	pthread_spin_unlock(&q->lock);
	xr_polled(k);
	return k;
}

/* xr_polled counts a thread's run of empty CQ polls: every XR_SPIN_EVERY-th
 * yields its CPU, for the daemon's engine is a thread, not rxe's softirq,
 * and one woken on this CPU may otherwise wait for the next tick
 * (internal/spin). */
void xr_polled(int got)
{
	static __thread unsigned empty;
	if (got)
		empty = 0;
	else if (++empty % XR_SPIN_EVERY == 0)
		sched_yield();
}

int xr_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct xr_cq *q = container_of(cq, struct xr_cq, cq);
	__atomic_store_n(&q->ring.hdr->arm, solicited_only ? XRNIC_ARM_SOLICITED : XRNIC_ARM_NEXT, __ATOMIC_RELEASE);
	/* The daemon may sleep with completions waiting for room: it looks. */
	xr_ring_bell(conn_of(cq->context));
	return 0;
}
