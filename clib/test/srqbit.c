/* srqbit: the REQ says whether the connecting ID's QP takes its receives from
 * an SRQ, whatever the caller's rdma_conn_param.srq: librdmacm's rdma_connect
 * passes id->qp->srq != NULL for an ID with a QP. Two programs on port 7996:
 *   server PEER: a synchronous listener; the request's param.conn.srq must
 *     be 1; it rejects it.
 *   client PEER: rdma_create_ep with a QP on an SRQ, rdma_connect with a
 *     param whose srq is 0; the server's REJ ends it.
 * On xrnic's library against a daemon (XRNIC_ATTACH). Each prints "ok". */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include "test.h"

int main(int argc, char **argv)
{
	if (argc != 3)
		FAIL("usage: srqbit server|client PEER");
	int srv = !strcmp(argv[1], "server");
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP, .ai_flags = srv ? RAI_PASSIVE : 0}, *res;
	CHECK(!rdma_getaddrinfo(argv[2], "7996", &hints, &res));
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 2, .max_send_sge = 1}};
	struct rdma_cm_id *id;
	if (srv) {
		CHECK(!rdma_create_ep(&id, res, NULL, NULL));
		CHECK(!rdma_listen(id, 1));
		printf("listening\n");
		fflush(stdout);
		struct rdma_cm_id *req;
		CHECK(!rdma_get_request(id, &req));
		if (!req->event->param.conn.srq)
			FAIL("the request's srq is 0; the peer's QP has an SRQ");
		CHECK(!rdma_reject(req, NULL, 0));
		rdma_destroy_ep(req);
	} else {
		CHECK(!rdma_create_ep(&id, res, NULL, NULL));
		struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
		CHECK(pd);
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
		qa.srq = ibv_create_srq(pd, &sa);
		CHECK(qa.srq);
		CHECK(!rdma_create_qp(id, pd, &qa));
		struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7};
		CHECK(rdma_connect(id, &p) == -1 && errno == ECONNREFUSED);
		rdma_destroy_qp(id);
		CHECK(!ibv_destroy_srq(qa.srq));
		CHECK(!ibv_dealloc_pd(pd));
	}
	rdma_destroy_ep(id);
	rdma_freeaddrinfo(res);
	printf("ok\n");
	return 0;
}
