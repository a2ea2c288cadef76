/* notify: rdma_notify reaches the daemon's ID (CM_NOTIFY), with the kernel's
 * errnos (ib_cm_notify, cm_establish): IBV_EVENT_COMM_EST on a connection
 * established already is -1/EISCONN; on a request not yet accepted, an ID
 * with no connection and a listener -1/EINVAL; other events -1/EINVAL
 * (IBV_EVENT_PATH_MIG: no alternate path).
 *   server LOCAL: a synchronous listener on port 7997 takes one connection;
 *     its checks done, it SENDs one byte, and waits for the client's
 *     disconnect.
 *   client PEER: connects to it; its checks done, it waits for that byte
 *     before it disconnects (each side checks a connection the other has not
 *     yet begun to end: a DREQ first made the server's EISCONN an EINVAL).
 * On xrnic's library against a daemon (XRNIC_ATTACH). Each prints "ok". */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <string.h>
#include "test.h"

/* want fails unless rdma_notify(id, ev) is -1 with errno e. */
#define WANT(id, ev, e, what)                                                                          \
	do {                                                                                           \
		errno = 0;                                                                             \
		int r_ = rdma_notify(id, ev);                                                          \
		if (r_ != -1 || errno != (e))                                                          \
			FAIL("rdma_notify(%s) on %s: %d, errno %d, want -1, errno %d", #ev, what, r_, \
			     errno, e);                                                                \
	} while (0)

static struct ibv_qp_init_attr qattr(void)
{
	return (struct ibv_qp_init_attr){.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
}

static int server(const char *local)
{
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP}, *res;
	CHECK(!rdma_getaddrinfo(local, "7997", &hints, &res));
	struct ibv_qp_init_attr qa = qattr();
	struct rdma_cm_id *l, *id;
	CHECK(!rdma_create_ep(&l, res, NULL, &qa));
	CHECK(!rdma_listen(l, 1));
	printf("listening\n");
	fflush(stdout);
	WANT(l, IBV_EVENT_COMM_EST, EINVAL, "a listener");
	CHECK(!rdma_get_request(l, &id));
	static char done = 'd';
	struct ibv_mr *mr = rdma_reg_msgs(id, &done, 1);
	CHECK(mr);
	WANT(id, IBV_EVENT_COMM_EST, EINVAL, "a request not accepted");
	CHECK(!rdma_accept(id, NULL)); /* synchronous: returns established */
	WANT(id, IBV_EVENT_COMM_EST, EISCONN, "an accepted connection");
	WANT(id, IBV_EVENT_PATH_MIG, EINVAL, "an accepted connection");
	WANT(id, IBV_EVENT_QP_FATAL, EINVAL, "an accepted connection");
	WANT(id, (enum ibv_event_type)260, EINVAL, "an accepted connection"); /* 4 + 256: not COMM_EST */
	struct ibv_wc wc;
	CHECK(!rdma_post_send(id, NULL, &done, 1, mr, IBV_SEND_SIGNALED));
	CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS);
	/* Wait for the client's disconnect, so that its checks ran. */
	struct rdma_cm_event *ev;
	CHECK(!rdma_get_cm_event(id->channel, &ev));
	if (ev->event != RDMA_CM_EVENT_DISCONNECTED)
		FAIL("event %s, want DISCONNECTED", rdma_event_str(ev->event));
	rdma_ack_cm_event(ev);
	rdma_disconnect(id);
	CHECK(!rdma_dereg_mr(mr));
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	rdma_freeaddrinfo(res);
	return 0;
}

static int client(const char *peer)
{
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(7997)};
	CHECK(inet_pton(AF_INET, peer, &dst.sin_addr) == 1);
	struct rdma_cm_id *id, *idle;
	CHECK(!rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP)); /* synchronous */
	CHECK(!rdma_create_id(NULL, &idle, NULL, RDMA_PS_TCP));
	WANT(idle, IBV_EVENT_COMM_EST, EINVAL, "an idle ID");
	CHECK(!rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	WANT(id, IBV_EVENT_COMM_EST, EINVAL, "a resolved ID");
	CHECK(!rdma_resolve_route(id, 2000));
	struct ibv_qp_init_attr qa = qattr();
	CHECK(!rdma_create_qp(id, NULL, &qa));
	static char done;
	struct ibv_mr *mr = rdma_reg_msgs(id, &done, 1);
	CHECK(mr && !rdma_post_recv(id, NULL, &done, 1, mr));
	CHECK(!rdma_connect(id, NULL));
	WANT(id, IBV_EVENT_COMM_EST, EISCONN, "a connected ID");
	WANT(id, IBV_EVENT_PATH_MIG, EINVAL, "a connected ID");
	struct ibv_wc wc;
	CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS && done == 'd'); /* the server's checks ran */
	CHECK(!rdma_disconnect(id));
	CHECK(!rdma_dereg_mr(mr));
	rdma_destroy_qp(id);
	CHECK(!rdma_destroy_id(id));
	CHECK(!rdma_destroy_id(idle));
	return 0;
}

int main(int argc, char **argv)
{
	int r = -1;
	if (argc == 3 && !strcmp(argv[1], "server"))
		r = server(argv[2]);
	else if (argc == 3 && !strcmp(argv[1], "client"))
		r = client(argv[2]);
	if (r < 0)
		FAIL("usage: notify server LOCAL | client PEER");
	if (r)
		return r;
	printf("ok\n");
	return 0;
}
