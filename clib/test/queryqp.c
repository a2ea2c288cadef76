/* queryqp: ibv_query_qp fills init_attr with the attributes the QP was
 * created with (ibv_query_qp(3)), sq_sig_all among them. On xrnic's library
 * against a daemon (XRNIC_ATTACH). Prints "ok". */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include "test.h"

int main(void)
{
	struct ibv_context *ctx = open_device();
	CHECK(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(scq && rcq);
	for (int sig = 0; sig < 2; sig++) {
		struct ibv_qp_init_attr ia = {.qp_context = &ia, .send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
					      .sq_sig_all = sig,
					      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
		struct ibv_qp *qp = ibv_create_qp(pd, &ia);
		CHECK(qp);
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr got;
		memset(&got, 0xee, sizeof(got));
		CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_CAP, &got) == 0);
		CHECK(got.qp_context == &ia && got.send_cq == scq && got.recv_cq == rcq && !got.srq);
		CHECK(got.qp_type == IBV_QPT_RC && !memcmp(&got.cap, &ia.cap, sizeof(got.cap)));
		if (got.sq_sig_all != sig)
			FAIL("init_attr.sq_sig_all %d, created with %d", got.sq_sig_all, sig);
		CHECK(ibv_destroy_qp(qp) == 0);
	}
	CHECK(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	printf("ok\n");
	return 0;
}
