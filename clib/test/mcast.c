/* mcast: ibv_attach_mcast and ibv_detach_mcast through the daemon
 * (ATTACH_MCAST, DETACH_MCAST). "recv GROUP" attaches a UD QP to the IPv4
 * group's GID (IPv4-mapped), prints "ready", and waits for a send to the
 * group; "send GROUP" sends to it (DestQPN 0xFFFFFF) a while. The receiver
 * checks ib_uverbs_attach_mcast's errnos: EINVAL for an RC QP, a unicast GID
 * and a detach of a group not attached; EBUSY for the destroy of an attached
 * QP (uverbs_free_qp). On xrnic's library against a daemon (XRNIC_ATTACH);
 * prints "ok". */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define QKEY 0x11140

static int ud_up(struct ibv_qp *qp, int rts)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	if (!rts)
		return 0;
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 1};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		FAIL("usage: mcast recv|send GROUP");
	int recv = !strcmp(argv[1], "recv");
	union ibv_gid mgid = {.raw = {[10] = 0xff, [11] = 0xff}};
	CHECK(inet_pton(AF_INET, argv[2], &mgid.raw[12]) == 1);

	struct ibv_context *ctx = open_device();
	CHECK(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	char *buf = aligned_alloc(4096, 4096);
	CHECK(buf);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp);
	CHECK(ud_up(qp, !recv) == 0);
	struct ibv_wc wc;
	time_t end = time(NULL) + 30;

	if (!recv) {
		/* The source: the port's IPv4 GID, of the group's family. */
		union ibv_gid g;
		int sgid = 0;
		while (!ibv_query_gid(ctx, 1, sgid, &g) && memcmp(g.raw, mgid.raw, 12))
			sgid++;
		CHECK(!memcmp(g.raw, mgid.raw, 12));
		struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
					 .grh = {.dgid = mgid, .sgid_index = sgid, .hop_limit = 1}};
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);
		CHECK(ah);
		strcpy(buf, "to the group");
		/* UD: a send may go before the receiver attached; the test
		 * ends the sender once the receiver got one. */
		for (int i = 0; i < 600; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 13, .lkey = mr->lkey};
			struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED,
						 .wr.ud = {.ah = ah, .remote_qpn = 0xffffff, .remote_qkey = QKEY}},
					   *bad;
			CHECK(ibv_post_send(qp, &wr, &bad) == 0);
			int n;
			while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && time(NULL) < end)
				;
			CHECK(n == 1 && wc.status == IBV_WC_SUCCESS);
			usleep(50000);
		}
		CHECK(ibv_destroy_ah(ah) == 0);
		printf("ok\n");
		return 0;
	}

	struct ibv_qp_init_attr ra = qa;
	ra.qp_type = IBV_QPT_RC;
	struct ibv_qp *rc = ibv_create_qp(pd, &ra);
	CHECK(rc);
	CHECK(ibv_attach_mcast(rc, &mgid, 0) == EINVAL);
	union ibv_gid uni;
	CHECK(ibv_query_gid(ctx, 1, 0, &uni) == 0);
	CHECK(ibv_attach_mcast(qp, &uni, 0) == EINVAL);
	CHECK(ibv_attach_mcast(qp, &mgid, 0) == 0);
	CHECK(ibv_attach_mcast(qp, &mgid, 0) == 0); /* again: no error */
	union ibv_gid other = mgid;
	other.raw[15] ^= 1;
	CHECK(ibv_detach_mcast(qp, &other, 0) == EINVAL);
	CHECK(ibv_destroy_qp(qp) == EBUSY);

	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 4096, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0);
	printf("ready\n");
	fflush(stdout);
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && time(NULL) < end)
		usleep(1000);
	CHECK(n == 1);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 7 || wc.byte_len != 40 + 13 || !(wc.wc_flags & IBV_WC_GRH) ||
	    strcmp(buf + 40, "to the group"))
		FAIL("receive: status %d wr_id %llu byte_len %u flags %#x data %.13s", wc.status,
		     (unsigned long long)wc.wr_id, wc.byte_len, wc.wc_flags, buf + 40);
	CHECK(ibv_detach_mcast(qp, &mgid, 0) == 0);
	CHECK(ibv_detach_mcast(qp, &mgid, 0) == EINVAL);
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_qp(rc) == 0);
	printf("ok\n");
	return 0;
}
