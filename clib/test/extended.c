/* extended: the work request API of extended QPs (ibv_wr_post(3)) and the
 * polling API of extended CQs (ibv_create_cq_ex(3)). Two RC QPs of the one
 * device, connected to each other through its own GID, take one posting of
 * every operation RC has (builders and setters of each kind; ATOMIC_WRITE
 * only this way: ibv_post_send refuses it); an aborted
 * posting, and one that fails (inline data past max_inline_data, more WRs
 * than the queue holds, a setter before any builder, a QP not in RTS), post
 * nothing, and wr_complete returns rxe's errno; UD sends with
 * wr_set_ud_addr. ibv_create_qp_ex refuses send_ops its QP type lacks
 * (EOPNOTSUPP) and a missing PD (EINVAL); ibv_qp_to_qp_ex is NULL for a QP
 * made without send_ops_flags. Every completion is read with ibv_start_poll,
 * ibv_next_poll and the readers, and some with ibv_poll_cq on the same CQ
 * between; ibv_create_cq_ex refuses wc_flags rxe lacks and a parent domain
 * (EOPNOTSUPP). On xrnic's library against a daemon (XRNIC_ATTACH); prints
 * "ok". */
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "test.h"

#define RC_OPS                                                                                                      \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |                          \
	 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static struct ibv_qp *make(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type t,
			   uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {.send_cq = cq, .recv_cq = cq, .qp_type = t,
					.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2,
						.max_inline_data = 64},
					.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					.pd = pd, .send_ops_flags = ops};
	return ibv_create_qp_ex(ctx, &a);
}

/* rc_up takes an RC QP to RTS, to dqpn at the device's own GID. */
static int rc_up(struct ibv_qp *qp, uint32_t dqpn, const union ibv_gid *gid, enum ibv_mtu mtu)
{
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = dqpn,
				  .max_dest_rd_atomic = 4, .min_rnr_timer = 12,
				  .ah_attr = {.is_global = 1, .grh = {.dgid = *gid, .sgid_index = 1, .hop_limit = 1},
					      .port_num = 1}};
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				  .max_rd_atomic = 4};
	return ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int ud_up(struct ibv_qp *qp)
{
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		return -1;
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
	return ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* next waits up to 5 s for the CQ's next completion of qpn; 0 on success.
 * Completions of other QPs wait in held. It reads with the extended CQ's
 * polling API: a run of start_poll and next_poll takes up to 3 entries, the
 * readers filling an ibv_wc each; every other call takes one with
 * ibv_poll_cq, the same CQ's ordinary poll. */
static struct ibv_wc held[64];
static int nheld;

static int poll_ex(struct ibv_cq_ex *cq)
{
	static int calls;
	if (++calls % 2 == 0) {
		int n = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, held + nheld);
		nheld += n > 0 ? n : 0;
		return n;
	}
	struct ibv_poll_cq_attr pa = {0};
	int err = ibv_start_poll(cq, &pa);
	if (err == ENOENT)
		return 0;
	if (err)
		return -1;
	int n = 0;
	do {
		struct ibv_wc *w = &held[nheld++];
		*w = (struct ibv_wc){.wr_id = cq->wr_id, .status = cq->status, .opcode = ibv_wc_read_opcode(cq),
				     .vendor_err = ibv_wc_read_vendor_err(cq), .byte_len = ibv_wc_read_byte_len(cq),
				     .imm_data = ibv_wc_read_imm_data(cq), .qp_num = ibv_wc_read_qp_num(cq),
				     .src_qp = ibv_wc_read_src_qp(cq), .wc_flags = ibv_wc_read_wc_flags(cq),
				     .slid = ibv_wc_read_slid(cq), .sl = ibv_wc_read_sl(cq),
				     .dlid_path_bits = ibv_wc_read_dlid_path_bits(cq)};
		n++;
	} while (n < 3 && nheld < 64 && !(err = ibv_next_poll(cq)));
	ibv_end_poll(cq);
	return err && err != ENOENT ? -1 : n;
}

static int next(struct ibv_cq_ex *cq, uint32_t qpn, struct ibv_wc *wc)
{
	struct timespec end, now;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += 5;
	for (;;) {
		for (int i = 0; i < nheld; i++) {
			if (held[i].qp_num == qpn) {
				*wc = held[i];
				memmove(&held[i], &held[i + 1], (nheld - i - 1) * sizeof(held[0]));
				nheld--;
				return 0;
			}
		}
		int n = poll_ex(cq);
		if (n < 0)
			return -1;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!n && (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec > end.tv_nsec)))
			return -1;
	}
}

#define EXPECT(cq, qpn, id, op)                                                                             \
	do {                                                                                                \
		CHECK(!next(cq, qpn, &wc));                                                                 \
		if (wc.status != IBV_WC_SUCCESS || wc.wr_id != (id) || wc.opcode != (op))                   \
			FAIL("line %d: wr_id %llu status %d opcode %d; want wr_id %llu opcode %d", __LINE__, \
			     (unsigned long long)wc.wr_id, wc.status, wc.opcode, (unsigned long long)(id), op); \
	} while (0)

int main(void)
{
	struct ibv_context *ctx = open_device();
	CHECK(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	/* What ibv_create_cq_ex refuses; an empty CQ's start_poll. */
	struct ibv_cq_init_attr_ex ca = {.cqe = 128, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP);
	ca = (struct ibv_cq_init_attr_ex){.cqe = 128, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pd};
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP);
	ca = (struct ibv_cq_init_attr_ex){.cqe = 128, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_DLID_PATH_BITS,
					  .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS, .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	CHECK(cq && ibv_cq_ex_to_cq(cq)->cqe >= 128);
	struct ibv_poll_cq_attr none = {0};
	CHECK(ibv_start_poll(cq, &none) == ENOENT && ibv_start_poll(cq, NULL) == ENOENT); /* rxe reads no attr */
	struct ibv_poll_cq_attr unknown = {.comp_mask = 1};
	CHECK(ibv_start_poll(cq, &unknown) == EINVAL);
	struct ibv_cq *plaincq = ibv_cq_ex_to_cq(cq); /* the send and receive CQ of every QP here */
	static uint8_t buf[1 << 16];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr);
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, 1, &gid));
	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(ctx, 1, &pa));
	uint64_t base = (uintptr_t)buf;
	struct ibv_wc wc;

	/* What ibv_create_qp_ex refuses, and a plain QP's qp_ex. */
	errno = 0;
	CHECK(!make(ctx, pd, plaincq, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE) && errno == EOPNOTSUPP);
	errno = 0;
	CHECK(!make(ctx, pd, plaincq, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ) && errno == EOPNOTSUPP);
	errno = 0;
	CHECK(!make(ctx, pd, plaincq, IBV_QPT_UC, IBV_QP_EX_WITH_LOCAL_INV) && errno == EOPNOTSUPP);
	struct ibv_qp_init_attr_ex cf = {.send_cq = plaincq, .recv_cq = plaincq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS, .pd = pd};
	struct ibv_qp *noflags = ibv_create_qp_ex(ctx, &cf); /* create_flags 0: none asked */
	CHECK(noflags && !ibv_qp_to_qp_ex(noflags) && !ibv_destroy_qp(noflags));
	cf.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &cf) && errno == EOPNOTSUPP);
	errno = 0;
	CHECK(!make(ctx, pd, plaincq, IBV_QPT_RC, IBV_QP_EX_WITH_BIND_MW) && errno == EOPNOTSUPP);
	struct ibv_qp_init_attr_ex nopd = {.send_cq = plaincq, .recv_cq = plaincq, .qp_type = IBV_QPT_RC,
					   .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
					   .comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .send_ops_flags = IBV_QP_EX_WITH_SEND};
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &nopd) && errno == EINVAL);
	struct ibv_qp_init_attr pqa = {.send_cq = plaincq, .recv_cq = plaincq, .qp_type = IBV_QPT_RC,
				       .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *plain = ibv_create_qp(pd, &pqa);
	CHECK(plain && !ibv_qp_to_qp_ex(plain));
	CHECK(!ibv_destroy_qp(plain));

	struct ibv_qp *a = make(ctx, pd, plaincq, IBV_QPT_RC, RC_OPS), *b = make(ctx, pd, plaincq, IBV_QPT_RC, RC_OPS);
	CHECK(a && b);
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	CHECK(ax && &ax->qp_base == a);

	/* Not in RTS: the posting fails, as ibv_post_send does. */
	ibv_wr_start(ax);
	ax->wr_id = 99;
	ibv_wr_send(ax);
	CHECK(ibv_wr_complete(ax) == EINVAL);

	CHECK(!rc_up(a, b->qp_num, &gid, pa.active_mtu) && !rc_up(b, a->qp_num, &gid, pa.active_mtu));
	for (int i = 0; i < 16; i++) {
		struct ibv_sge s = {.addr = base + 0x8000 + i * 256, .length = 256, .lkey = mr->lkey};
		struct ibv_recv_wr r = {.wr_id = 1000 + i, .sg_list = &s, .num_sge = 1}, *bad;
		CHECK(!ibv_post_recv(b, &r, &bad));
	}

	/* One posting of each operation. The regions: 0x0000 A's sources, 0x1000
	 * the WRITE's target, 0x2000 the READ's source, 0x3000 the READ's
	 * target, 0x4000 the atomics' word and results, 0x5000 the inline WRITE's
	 * target, 0x8000 B's receives. */
	for (int i = 0; i < 4096; i++) {
		buf[i] = (uint8_t)(i * 7 + 1);
		buf[0x2000 + i] = (uint8_t)(i * 13 + 5);
	}
	uint64_t word = 40;
	memcpy(buf + 0x4000, &word, 8);
	ibv_wr_start(ax);
	ax->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE; /* INLINE is the setters' to say: ignored */
	ax->wr_id = 1;
	ibv_wr_rdma_write(ax, mr->rkey, base + 0x1000);
	ibv_wr_set_sge(ax, mr->lkey, base, 4096);
	ax->wr_id = 2;
	ibv_wr_rdma_write_imm(ax, mr->rkey, base + 0x5000, htobe32(0x1234));
	ibv_wr_set_inline_data(ax, "inline!", 7);
	ax->wr_id = 3;
	ibv_wr_send_imm(ax, htobe32(77));
	struct ibv_sge two[2] = {{.addr = base + 10, .length = 20, .lkey = mr->lkey},
				 {.addr = base + 100, .length = 30, .lkey = mr->lkey}};
	ibv_wr_set_sge_list(ax, 2, two);
	ax->wr_id = 4;
	ibv_wr_rdma_read(ax, mr->rkey, base + 0x2000);
	ibv_wr_set_sge(ax, mr->lkey, base + 0x3000, 4096);
	ax->wr_id = 5;
	ibv_wr_atomic_fetch_add(ax, mr->rkey, base + 0x4000, 2);
	ibv_wr_set_sge(ax, mr->lkey, base + 0x4010, 8);
	ax->wr_id = 6;
	ibv_wr_atomic_cmp_swp(ax, mr->rkey, base + 0x4000, 42, 7);
	ibv_wr_set_sge(ax, mr->lkey, base + 0x4018, 8);
	ax->wr_id = 7;
	ibv_wr_send(ax);
	struct ibv_data_buf parts[2] = {{.addr = "hello, ", .length = 7}, {.addr = "world", .length = 5}};
	ibv_wr_set_inline_data_list(ax, 2, parts);
	ax->wr_id = 8;
	ibv_wr_atomic_write(ax, mr->rkey, base + 0x4020, "8 bytes!");
	CHECK(ibv_wr_complete(ax) == 0);
	EXPECT(cq, a->qp_num, 1, IBV_WC_RDMA_WRITE);
	EXPECT(cq, a->qp_num, 2, IBV_WC_RDMA_WRITE);
	EXPECT(cq, a->qp_num, 3, IBV_WC_SEND);
	EXPECT(cq, a->qp_num, 4, IBV_WC_RDMA_READ);
	EXPECT(cq, a->qp_num, 5, IBV_WC_FETCH_ADD);
	EXPECT(cq, a->qp_num, 6, IBV_WC_COMP_SWAP);
	EXPECT(cq, a->qp_num, 7, IBV_WC_SEND);
	EXPECT(cq, a->qp_num, 8, IBV_WC_ATOMIC_WRITE);
	EXPECT(cq, b->qp_num, 1000, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0x1234);
	EXPECT(cq, b->qp_num, 1001, IBV_WC_RECV);
	CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 77 && wc.byte_len == 50);
	CHECK(!memcmp(buf + 0x8100, buf + 10, 20) && !memcmp(buf + 0x8100 + 20, buf + 100, 30));
	EXPECT(cq, b->qp_num, 1002, IBV_WC_RECV);
	CHECK(wc.byte_len == 12 && !memcmp(buf + 0x8200, "hello, world", 12));
	CHECK(!memcmp(buf + 0x1000, buf, 4096));
	CHECK(!memcmp(buf + 0x5000, "inline!", 7));
	CHECK(!memcmp(buf + 0x3000, buf + 0x2000, 4096));
	uint64_t got[3];
	memcpy(got, buf + 0x4000, 8);
	memcpy(got + 1, buf + 0x4010, 16);
	CHECK(got[1] == 40 && got[2] == 42 && got[0] == 7); /* 40+2=42, then 42 swapped for 7 */
	CHECK(!memcmp(buf + 0x4020, "8 bytes!", 8));
	/* ibv_post_send has no field for an ATOMIC_WRITE's data. */
	struct ibv_send_wr aw = {.wr_id = 9, .opcode = IBV_WR_ATOMIC_WRITE, .wr.rdma = {.remote_addr = base + 0x4020,
									      .rkey = mr->rkey}},
			   *awbad;
	CHECK(ibv_post_send(a, &aw, &awbad) == EINVAL && awbad == &aw);

	/* Postings that post nothing; each is followed by a SEND that must be
	 * the next completion on both sides. */
	uint64_t sentinel = 10;
#define SENTINEL()                                                  \
	do {                                                        \
		ibv_wr_start(ax);                                   \
		ax->wr_id = sentinel;                               \
		ax->wr_flags = IBV_SEND_SIGNALED;                   \
		ibv_wr_send(ax);                                    \
		ibv_wr_set_inline_data(ax, "s", 1);                 \
		CHECK(ibv_wr_complete(ax) == 0);                    \
		EXPECT(cq, a->qp_num, sentinel, IBV_WC_SEND);       \
		CHECK(!next(cq, b->qp_num, &wc));                   \
		CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 1); \
		sentinel++;                                         \
	} while (0)
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_start(ax); /* aborted */
	ax->wr_id = 500;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, "aborted", 7);
	ibv_wr_abort(ax);
	SENTINEL();
	ibv_wr_start(ax); /* a good WR, then inline data past the limit */
	ax->wr_id = 501;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, "good", 4);
	ax->wr_id = 502;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, buf, 4096);
	CHECK(ibv_wr_complete(ax) == ENOSPC);
	SENTINEL();
	ibv_wr_start(ax); /* more WRs than the queue holds */
	for (int i = 0; i < 1000; i++) {
		ax->wr_id = 600 + i;
		ibv_wr_send(ax);
		ibv_wr_set_inline_data(ax, "x", 1);
	}
	CHECK(ibv_wr_complete(ax) == ENOSPC);
	SENTINEL();
	ibv_wr_start(ax); /* a setter before any builder */
	ibv_wr_set_inline_data(ax, "x", 1);
	CHECK(ibv_wr_complete(ax) == EINVAL);
	SENTINEL();
	ibv_wr_start(ax); /* more SGEs than max_send_sge */
	ax->wr_id = 700;
	ibv_wr_send(ax);
	struct ibv_sge three[3] = {two[0], two[1], two[0]};
	ibv_wr_set_sge_list(ax, 3, three);
	CHECK(ibv_wr_complete(ax) == ENOSPC);
	SENTINEL();
	ibv_wr_start(ax); /* an operation xrnic's ring cannot carry */
	ax->wr_id = 701;
	ibv_wr_bind_mw(ax, NULL, 0, NULL);
	CHECK(ibv_wr_complete(ax) == EOPNOTSUPP);
	SENTINEL();
	ibv_wr_start(ax); /* two data setters: the last holds */
	ax->wr_id = 702;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, "inline", 6);
	ibv_wr_set_sge(ax, mr->lkey, base + 10, 3);
	CHECK(ibv_wr_complete(ax) == 0);
	EXPECT(cq, a->qp_num, 702, IBV_WC_SEND);
	CHECK(!next(cq, b->qp_num, &wc));
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 3 && !memcmp(buf + 0x8000 + (wc.wr_id - 1000) * 256, buf + 10, 3));

	/* UD: a send to the other QP through an AH of the device's own GID. */
	struct ibv_qp *ua = make(ctx, pd, plaincq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
	struct ibv_qp *ub = make(ctx, pd, plaincq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
	CHECK(ua && ub && !ud_up(ua) && !ud_up(ub));
	struct ibv_ah_attr aa = {.is_global = 1, .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 1}, .port_num = 1};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah);
	struct ibv_sge us = {.addr = base + 0x9000, .length = 40 + 64, .lkey = mr->lkey};
	struct ibv_recv_wr ur = {.wr_id = 2000, .sg_list = &us, .num_sge = 1}, *ubad;
	CHECK(!ibv_post_recv(ub, &ur, &ubad));
	struct ibv_qp_ex *uax = ibv_qp_to_qp_ex(ua);
	CHECK(uax);
	ibv_wr_start(uax);
	uax->wr_id = 20;
	uax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(uax, htobe32(5));
	ibv_wr_set_ud_addr(uax, ah, ub->qp_num, 0x11111111);
	ibv_wr_set_sge(uax, mr->lkey, base, 64);
	CHECK(ibv_wr_complete(uax) == 0);
	ibv_wr_start(uax); /* no AH */
	ibv_wr_send(uax);
	ibv_wr_set_ud_addr(uax, NULL, ub->qp_num, 0x11111111);
	CHECK(ibv_wr_complete(uax) == EINVAL);
	EXPECT(cq, ua->qp_num, 20, IBV_WC_SEND);
	EXPECT(cq, ub->qp_num, 2000, IBV_WC_RECV);
	CHECK(wc.byte_len == 40 + 64 && wc.src_qp == ua->qp_num && be32toh(wc.imm_data) == 5);
	CHECK(!memcmp(buf + 0x9000 + 40, buf, 64));

	CHECK(ibv_start_poll(cq, &none) == ENOENT); /* every completion taken (B's receives left flush at destroy) */
	CHECK(!ibv_destroy_ah(ah));
	CHECK(!ibv_destroy_qp(ua) && !ibv_destroy_qp(ub));
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b));
	CHECK(!ibv_dereg_mr(mr));
	CHECK(!ibv_destroy_cq(plaincq));
	CHECK(!ibv_dealloc_pd(pd));
	CHECK(!ibv_close_device(ctx));
	printf("ok\n");
	return 0;
}
