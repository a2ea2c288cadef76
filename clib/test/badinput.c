/* badinput: a program that passes libibverbs bad pointers, wrong handles and
 * too many SGEs, on xrnic's library against a daemon (XRNIC_ATTACH). Each
 * call must fail with the errno libibverbs returns, and the program must
 * neither crash nor hang; the daemon must go on serving it. Prints "ok". */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "test.h"

int main(void)
{
	struct ibv_context *ctx = open_device();
	CHECK(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	long page = sysconf(_SC_PAGESIZE);

	/* Memory the process does not have: EFAULT. */
	errno = 0;
	CHECK(!ibv_reg_mr(pd, (void *)16, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT);
	char *gone = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, page);
	errno = 0;
	CHECK(!ibv_reg_mr(pd, gone, page, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT);
	/* Remote write without local write: EINVAL, as the verbs require. */
	char *buf = aligned_alloc(page, 4 * page);
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, page, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4 * page, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);

	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 2}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp);
	/* A CQ of another process's, by handle: the daemon knows none. */
	struct ibv_cq fake = *cq;
	fake.handle = 0xdead;
	struct ibv_qp_init_attr bad = ia;
	bad.send_cq = &fake;
	errno = 0;
	CHECK(!ibv_create_qp(pd, &bad) && errno == EINVAL);

	/* Posting to a QP in RESET: EINVAL, as rxe. */
	struct ibv_sge one = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_recv_wr r0 = {.wr_id = 0, .sg_list = &one, .num_sge = 1}, *rb0 = NULL;
	CHECK(ibv_post_recv(qp, &r0, &rb0) == EINVAL && rb0 == &r0);
	struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				   .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
	CHECK(ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
	/* A send queue not yet in RTS: EINVAL. */
	struct ibv_send_wr s0 = {.wr_id = 0, .sg_list = &one, .num_sge = 1, .opcode = IBV_WR_SEND}, *sb0 = NULL;
	CHECK(ibv_post_send(qp, &s0, &sb0) == EINVAL && sb0 == &s0);
	/* Too many SGEs: EINVAL, bad_wr the request. */
	struct ibv_sge sg[3] = {{(uintptr_t)buf, 8, mr->lkey}, {(uintptr_t)buf, 8, mr->lkey}, {(uintptr_t)buf, 8, mr->lkey}};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = sg, .num_sge = 3}, *rbad = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == EINVAL && rbad == &rwr);
	/* A full receive queue: ENOMEM, the rest not posted. */
	struct ibv_recv_wr many[16];
	for (int i = 0; i < 16; i++)
		many[i] = (struct ibv_recv_wr){.wr_id = (uint64_t)i, .sg_list = sg, .num_sge = 1,
					       .next = i < 15 ? &many[i + 1] : NULL};
	rbad = NULL;
	CHECK(ibv_post_recv(qp, &many[0], &rbad) == ENOMEM && rbad && rbad != &many[0]);

	/* A transition the QP's state does not allow: EINVAL. */
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_SQD};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL);
	/* A PD with children: EBUSY. */
	CHECK(ibv_dealloc_pd(pd) == EBUSY);
	/* A port that does not exist. */
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 2, &pa) != 0);
	/* ibv_query_gid(3), ibv_query_pkey(3) and ibv_init_ah_from_wc(3) return
	 * -1 on error, errno set (not an errno, as most verbs). */
	union ibv_gid gid;
	__be16 pkey;
	errno = 0;
	CHECK(ibv_query_gid(ctx, 2, 0, &gid) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(ibv_query_pkey(ctx, 1, 1, &pkey) == -1 && errno == EINVAL);
	static const uint8_t other[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 1, [15] = 1}; /* 2001:db8:1::1: none of ours */
	struct ibv_grh grh = {.version_tclass_flow = htobe32(6u << 28)};
	memcpy(grh.dgid.raw, other, sizeof(other));
	struct ibv_wc wc = {.wc_flags = IBV_WC_GRH};
	struct ibv_ah_attr aa;
	errno = 0;
	CHECK(ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &aa) == -1 && errno == EINVAL);

	/* The daemon still serves: objects go in order. */
	CHECK(ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	printf("ok\n");
	return 0;
}
