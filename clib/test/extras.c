/* extras: the public calls beyond the everyday verbs, present and answering
 * as libibverbs' do: the rate conversions, the port's width and speed (run on
 * veth), the GID table, the P_Key index, ibv_reg_mr_iova, ibv_query_srq, and
 * the verbs the device lacks failing with EOPNOTSUPP (not a missing symbol). */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

int main(void)
{
	CHECK(ibv_rate_to_mult(IBV_RATE_10_GBPS) == 4 && mult_to_ibv_rate(4) == IBV_RATE_10_GBPS);
	CHECK(ibv_rate_to_mult(IBV_RATE_MAX) == -1 && mult_to_ibv_rate(3) == IBV_RATE_MAX);
	CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125 && mbps_to_ibv_rate(103125) == IBV_RATE_100_GBPS);
	CHECK(ibv_rate_to_mbps(IBV_RATE_MAX) == -1 && mbps_to_ibv_rate(1) == IBV_RATE_MAX);
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);

	struct ibv_context *ctx = open_device();
	CHECK(ctx);
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0);
	/* veth's 10000 Mb/s, as rxe's ib_get_eth_speed maps it: 1X FDR10. */
	CHECK(pa.active_width == 1 && pa.active_speed == 8);
	/* The GID table: the valid entries, each as ibv_query_gid reads it. */
	struct ibv_gid_entry t[8];
	ssize_t n = ibv_query_gid_table(ctx, t, 8, 0);
	CHECK(n > 0);
	for (ssize_t i = 0; i < n; i++) {
		union ibv_gid g;
		CHECK(ibv_query_gid(ctx, 1, (int)t[i].gid_index, &g) == 0);
		CHECK(memcmp(&g, &t[i].gid, sizeof(g)) == 0 && t[i].port_num == 1 &&
		      t[i].gid_type == IBV_GID_TYPE_ROCE_V2);
	}
	CHECK(ibv_query_gid_table(ctx, t, (size_t)n - 1, 0) < 0); /* too small */

	CHECK(ibv_get_pkey_index(ctx, 1, htons(0xffff)) == 0);
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0x8001)) == -1);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	char *buf = aligned_alloc(4096, 4096);
	CHECK(buf);
	struct ibv_mr *mr = ibv_reg_mr_iova(pd, buf, 4096, 0x10000, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && mr->addr == buf);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT);
	CHECK(ibv_dereg_mr(mr) == 0);

	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq);
	CHECK(ibv_resize_cq(cq, 32) == EOPNOTSUPP);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq);
	struct ibv_srq_attr attr;
	CHECK(ibv_query_srq(srq, &attr) == 0 && attr.max_wr == sa.attr.max_wr && attr.max_sge == 1 && attr.srq_limit == 0);
	struct ibv_qp *qp = qp_in_err(pd, cq, cq);
	CHECK(qp);
	struct ibv_ece ece = {0};
	CHECK(ibv_query_ece(qp, &ece) == EOPNOTSUPP && ibv_set_ece(qp, &ece) == EOPNOTSUPP);
	CHECK(ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0) == 0);
	CHECK(!ibv_import_pd(ctx, 1) && errno == EOPNOTSUPP);

	CHECK(ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_srq(srq) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	free(buf);
	printf("ok\n");
	return 0;
}
