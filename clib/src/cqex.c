/* The polling API of extended CQs (ibv_create_cq_ex(3)): ibv_start_poll
 * takes the CQ's lock and reads the oldest completion, ibv_next_poll the one
 * after it, ibv_end_poll gives the entries read back to the daemon and
 * unlocks; the readers return the current completion's fields. ENOENT when
 * there is none, as rxe's (after which start_poll holds no lock). Each entry
 * is copied once from the ring the daemon writes. */
#include <errno.h>
#include <string.h>

#include "internal.h"

static struct xr_cq *cx(struct ibv_cq_ex *c) { return container_of(c, struct xr_cq, cqx); }

/* take reads the entry cur past the consumer index, if the ring holds it. */
static int take(struct xr_cq *q)
{
	int64_t avail = xrnic_ring_avail(&q->ring);
	if (avail < 0)
		return EIO; /* the daemon wrote an impossible index */
	if (avail <= (int64_t)q->cur)
		return ENOENT;
	memcpy(&q->wc, xrnic_ring_entry(&q->ring, q->ring.own + q->cur), sizeof(q->wc));
	q->cqx.status = q->wc.status;
	q->cqx.wr_id = q->wc.wr_id;
	return 0;
}

static int start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	struct xr_cq *q = cx(c);
	if (attr && attr->comp_mask) /* none known; rxe reads no attr at all, so NULL is one */
		return errno = EINVAL;
	pthread_spin_lock(&q->lock);
	q->cur = 0;
	int err = take(q);
	if (err)
		pthread_spin_unlock(&q->lock);
	xr_polled(!err);
	return err ? (errno = err) : 0;
}

static int next_poll(struct ibv_cq_ex *c)
{
	struct xr_cq *q = cx(c);
	q->cur++;
	int err = take(q);
	if (err)
		q->cur--; /* the last entry read stays current: end_poll releases it */
	return err ? (errno = err) : 0;
}

static void end_poll(struct ibv_cq_ex *c)
{
	struct xr_cq *q = cx(c);
	xrnic_ring_release(&q->ring, q->cur + 1);
	pthread_spin_unlock(&q->lock);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *c) { return cx(c)->wc.opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex *c) { return cx(c)->wc.vendor_err; }
static uint32_t read_byte_len(struct ibv_cq_ex *c) { return cx(c)->wc.byte_len; }
static uint32_t read_qp_num(struct ibv_cq_ex *c) { return cx(c)->wc.qp_num; }
static uint32_t read_src_qp(struct ibv_cq_ex *c) { return cx(c)->wc.src_qp; }
static unsigned int read_wc_flags(struct ibv_cq_ex *c) { return cx(c)->wc.wc_flags; }
static uint32_t read_slid(struct ibv_cq_ex *c) { return cx(c)->wc.slid; }
static uint8_t read_sl(struct ibv_cq_ex *c) { return cx(c)->wc.sl; }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *c) { return cx(c)->wc.dlid_path_bits; }

static __be32 read_imm_data(struct ibv_cq_ex *c)
{
	__be32 imm;
	memcpy(&imm, cx(c)->wc.imm, 4); /* network order, as ibv_wc's */
	return imm;
}

void xr_init_cq_ex(struct xr_cq *q)
{
	struct ibv_cq_ex *c = &q->cqx;
	c->start_poll = start_poll;
	c->next_poll = next_poll;
	c->end_poll = end_poll;
	c->read_opcode = read_opcode;
	c->read_vendor_err = read_vendor_err;
	c->read_byte_len = read_byte_len;
	c->read_imm_data = read_imm_data;
	c->read_qp_num = read_qp_num;
	c->read_src_qp = read_src_qp;
	c->read_wc_flags = read_wc_flags;
	c->read_slid = read_slid;
	c->read_sl = read_sl;
	c->read_dlid_path_bits = read_dlid_path_bits;
}
