/* querysrq: ibv_query_srq is the daemon's SRQ (QUERY_SRQ), as rxe_query_srq
 * answers: max_wr and max_sge as created, srq_limit the limit armed, and 0
 * once IBV_EVENT_SRQ_LIMIT_REACHED fired. Two RC QPs of the process, looped
 * back through the device's own GID; the receiving one takes its receives
 * from the SRQ. On xrnic's library against a daemon (XRNIC_ATTACH); prints
 * "ok". */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static int to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest, .rq_psn = 1,
				 .max_dest_rd_atomic = 1, .min_rnr_timer = 1,
				 .ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .hop_limit = 64}}};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 1, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				 .max_rd_atomic = 1};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

int main(void)
{
	struct ibv_context *ctx = open_device();
	CHECK(ctx);
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	char *buf = aligned_alloc(4096, 4096);
	CHECK(buf);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 2}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq);
	struct ibv_srq_attr attr;
	CHECK(ibv_query_srq(srq, &attr) == 0);
	if (attr.max_wr != sa.attr.max_wr || attr.max_wr < 8 || attr.max_sge != 2 || attr.srq_limit != 0)
		FAIL("new SRQ: max_wr %u (created %u), max_sge %u, srq_limit %u", attr.max_wr, sa.attr.max_wr,
		     attr.max_sge, attr.srq_limit);

	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *snd = ibv_create_qp(pd, &qa);
	qa.srq = srq;
	struct ibv_qp *rcv = ibv_create_qp(pd, &qa);
	CHECK(snd && rcv);
	CHECK(!to_rts(snd, rcv->qp_num, gid) && !to_rts(rcv, snd->qp_num, gid));

	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 1024 * (i + 1), .length = 1024, .lkey = mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 10 + i, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0);
	}
	attr = (struct ibv_srq_attr){.srq_limit = 2};
	CHECK(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT) == 0);
	CHECK(ibv_query_srq(srq, &attr) == 0);
	if (attr.srq_limit != 2)
		FAIL("armed: srq_limit %u, want 2", attr.srq_limit);

	/* One receive taken of two: below the limit, which fires and disarms. */
	strcpy(buf, "below the limit");
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 16, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	CHECK(ibv_post_send(snd, &wr, &bad) == 0);
	struct ibv_wc wc[2];
	int n = 0;
	for (int spins = 0; n < 2 && spins < 20000000; spins++) {
		int r = ibv_poll_cq(cq, 2 - n, wc + n);
		CHECK(r >= 0);
		n += r;
	}
	if (n != 2)
		FAIL("%d completions of the send and its receive, want 2", n);
	for (int i = 0; i < 2; i++)
		if (wc[i].status != IBV_WC_SUCCESS)
			FAIL("completion %llu: %s", (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ev;
	for (;;) {
		if (poll(&p, 1, 20000) != 1)
			FAIL("no IBV_EVENT_SRQ_LIMIT_REACHED");
		CHECK(ibv_get_async_event(ctx, &ev) == 0);
		enum ibv_event_type t = ev.event_type;
		ibv_ack_async_event(&ev);
		if (t == IBV_EVENT_SRQ_LIMIT_REACHED)
			break;
	}
	CHECK(ibv_query_srq(srq, &attr) == 0);
	if (attr.srq_limit != 0 || attr.max_wr != sa.attr.max_wr || attr.max_sge != 2)
		FAIL("fired: srq_limit %u (want 0), max_wr %u, max_sge %u", attr.srq_limit, attr.max_wr, attr.max_sge);

	CHECK(ibv_destroy_qp(rcv) == 0 && ibv_destroy_qp(snd) == 0);
	CHECK(ibv_destroy_srq(srq) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	free(buf);
	printf("ok\n");
	return 0;
}
