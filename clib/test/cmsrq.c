/* cmsrq: an ID's own SRQ (rdma_create_srq): the QP rdma_create_qp makes on
 * the ID takes its receives from it, and rdma_post_recv posts to it. Two
 * programs on port 7997:
 *   server PEER: a synchronous listener; on the request's ID an SRQ, then a
 *     QP made without one, which must have the ID's; a receive posted with
 *     rdma_post_recv; accept; the client's SEND arrives through the SRQ.
 *     rdma_create_srq again on the same ID fails EINVAL; rdma_create_srq_ex
 *     of an XRC SRQ fails EOPNOTSUPP.
 *   client PEER: rdma_create_ep with a QP, connect, one SEND.
 * On xrnic's library against a daemon (XRNIC_ATTACH). Each prints "ok". */
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <string.h>
#include "test.h"

static char buf[64];

int main(int argc, char **argv)
{
	if (argc != 3)
		FAIL("usage: cmsrq server|client PEER");
	int srv = !strcmp(argv[1], "server");
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP, .ai_flags = srv ? RAI_PASSIVE : 0}, *res;
	CHECK(!rdma_getaddrinfo(argv[2], "7997", &hints, &res));
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
				      .sq_sig_all = 1};
	struct rdma_cm_id *id;
	struct ibv_wc wc;
	if (srv) {
		CHECK(!rdma_create_ep(&id, res, NULL, NULL));
		CHECK(!rdma_listen(id, 1));
		printf("listening\n");
		fflush(stdout);
		struct rdma_cm_id *req;
		CHECK(!rdma_get_request(id, &req));
		CHECK(req->pd && req->pd->context == req->verbs); /* a request's ID has its device's PD */
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
		CHECK(!rdma_create_srq(req, NULL, &sa));
		CHECK(req->srq && req->pd);
		CHECK(rdma_create_srq(req, NULL, &sa) == -1 && errno == EINVAL);
		struct ibv_srq_init_attr_ex xa = {.attr = {.max_wr = 4, .max_sge = 1},
						  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE,
						  .srq_type = IBV_SRQT_XRC};
		CHECK(rdma_create_srq_ex(req, &xa) == -1 && errno == EOPNOTSUPP);
		CHECK(!rdma_create_qp(req, NULL, &qa));
		if (req->qp->srq != req->srq)
			FAIL("the ID's QP does not take its receives from the ID's SRQ");
		struct ibv_mr *mr = rdma_reg_msgs(req, buf, sizeof(buf));
		CHECK(mr);
		CHECK(!rdma_post_recv(req, NULL, buf, sizeof(buf), mr));
		CHECK(!rdma_accept(req, NULL));
		CHECK(rdma_get_recv_comp(req, &wc) == 1);
		if (wc.status != IBV_WC_SUCCESS || wc.byte_len != 12 || strcmp(buf, "through srq"))
			FAIL("receive: status %d, %u bytes, %.12s", wc.status, wc.byte_len, buf);
		rdma_disconnect(req);
		rdma_dereg_mr(mr);
		rdma_destroy_ep(req); /* the QP, then the ID's SRQ */
	} else {
		CHECK(!rdma_create_ep(&id, res, NULL, &qa));
		strcpy(buf, "through srq");
		struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
		CHECK(mr);
		CHECK(!rdma_connect(id, NULL));
		CHECK(!rdma_post_send(id, NULL, buf, 12, mr, 0));
		CHECK(rdma_get_send_comp(id, &wc) == 1);
		if (wc.status != IBV_WC_SUCCESS)
			FAIL("send: status %d", wc.status);
		rdma_disconnect(id);
		rdma_dereg_mr(mr);
	}
	rdma_destroy_ep(id);
	rdma_freeaddrinfo(res);
	printf("ok\n");
	return 0;
}
