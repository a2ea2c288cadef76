/* cmsync: librdmacm's synchronous mode, an ID created without a channel
 * (rdma_create_id(3), rdma_create_ep(3)): each call that starts an event
 * returns once the event came, keeps it in id->event, and fails with its
 * status (a rejection: ECONNREFUSED). A QP made without a PD takes the
 * device's default one; its CQs' context is the ID (rdma_get_send_comp
 * asserts it). rdma_get_request wants a synchronous listener; a synchronous
 * ID moved to a channel is asynchronous after. 20 endpoints made and
 * destroyed leave no descriptor open. argv[1], argv[2]: this device's IPv4
 * address and a peer's, where nothing listens on port 7999. On xrnic's
 * library against a daemon (XRNIC_ATTACH). Prints "ok". */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include "test.h"

int main(int argc, char **argv)
{
	if (argc != 3)
		FAIL("usage: cmsync LOCAL_IPV4 PEER_IPV4");
	struct sockaddr_in local = {.sin_family = AF_INET}, peer = {.sin_family = AF_INET, .sin_port = htons(7999)};
	CHECK(inet_pton(AF_INET, argv[1], &local.sin_addr) == 1 && inet_pton(AF_INET, argv[2], &peer.sin_addr) == 1);
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res;
	CHECK(!rdma_getaddrinfo(argv[2], "7999", &hints, &res));
	int before = -1;
	for (int i = 0; i < 20; i++) {
		struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
					      .sq_sig_all = 1};
		struct rdma_cm_id *id;
		/* Address and route resolved within the call. */
		CHECK(!rdma_create_ep(&id, res, NULL, &qa));
		CHECK(id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
		CHECK(id->qp && id->pd && id->send_cq && id->send_cq->cq_context == id);
		CHECK(qa.qp_type == IBV_QPT_RC);
		/* Nobody listens: the peer's CM rejects, and the call says so. */
		errno = 0;
		CHECK(rdma_connect(id, NULL) == -1 && errno == ECONNREFUSED);
		CHECK(id->event && id->event->event == RDMA_CM_EVENT_REJECTED);
		errno = 0;
		CHECK(rdma_migrate_id(id, NULL) == -1 && errno == EINVAL);
		rdma_destroy_ep(id);
		if (i == 0)
			before = open_fds();
	}
	int after = open_fds();
	if (after != before)
		FAIL("%d descriptors open after 19 more endpoints, %d after the first", after, before);
	rdma_freeaddrinfo(res);

	/* rdma_create_id without a channel, step by step. */
	struct rdma_cm_id *id;
	CHECK(!rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP));
	CHECK(!rdma_resolve_addr(id, NULL, (struct sockaddr *)&peer, 2000));
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED);
	/* Moved to a channel: asynchronous, the next event comes there. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && !rdma_migrate_id(id, ch));
	CHECK(!id->event);
	CHECK(!rdma_resolve_route(id, 2000));
	struct rdma_cm_event *ev;
	CHECK(!rdma_get_cm_event(ch, &ev) && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED && ev->id == id);
	rdma_ack_cm_event(ev);
	CHECK(!rdma_destroy_id(id));

	/* rdma_get_request takes a synchronous listener only. */
	struct rdma_cm_id *l;
	CHECK(!rdma_create_id(ch, &l, NULL, RDMA_PS_TCP));
	local.sin_port = htons(7998);
	CHECK(!rdma_bind_addr(l, (struct sockaddr *)&local) && !rdma_listen(l, 1));
	errno = 0;
	CHECK(rdma_get_request(l, &id) == -1 && errno == EINVAL);
	CHECK(!rdma_destroy_id(l));
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
