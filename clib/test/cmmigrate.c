/* cmmigrate: events the daemon sent for an ID before it moved to another
 * channel go with it, as the kernel's ucma_migrate_id moves an ID's pending
 * events. Three programs on port 7997:
 *   server PEER: a synchronous listener (rdma_create_ep) that waits 2 s, so
 *     that the first client's request and then its REJ (the client destroyed
 *     its ID) both wait on the listener's channel. rdma_get_request takes the
 *     request; the REJ goes with the request's ID to its own channel, and the
 *     next rdma_get_request takes the second client's request instead of
 *     failing ECONNREFUSED. It accepts that one and disconnects.
 *   gone PEER: connects asynchronously and destroys its ID at once.
 *   stay PEER: connects synchronously, waits for the server's DREQ on its own
 *     channel, then moves the ID to an asynchronous channel: the DISCONNECTED
 *     waiting on its own channel is the next event there.
 *   asyncsrv PEER: see asyncsrv.
 * On xrnic's library against a daemon (XRNIC_ATTACH). Each prints "ok". */
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "test.h"

static struct ibv_qp_init_attr qattr(void)
{
	return (struct ibv_qp_init_attr){.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
}

static int server(const char *peer)
{
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP}, *res;
	CHECK(!rdma_getaddrinfo(peer, "7997", &hints, &res));
	struct ibv_qp_init_attr qa = qattr();
	struct rdma_cm_id *l, *id1, *id2;
	CHECK(!rdma_create_ep(&l, res, NULL, &qa));
	CHECK(!rdma_listen(l, 4));
	printf("listening\n");
	fflush(stdout);
	sleep(2);
	CHECK(!rdma_get_request(l, &id1));
	int r = rdma_accept(id1, NULL); /* its client is gone */
	printf("accept of the gone client's request: %d\n", r);
	CHECK(!rdma_get_request(l, &id2));
	CHECK(!rdma_accept(id2, NULL));
	/* The REJ is id1's: taken by its accept, or waiting on its channel. */
	struct rdma_cm_event *ev = id1->event;
	if (!ev || ev->event != RDMA_CM_EVENT_REJECTED) {
		CHECK(!fcntl(id1->channel->fd, F_SETFL, O_NONBLOCK));
		CHECK(!rdma_get_cm_event(id1->channel, &ev) && ev->event == RDMA_CM_EVENT_REJECTED && ev->id == id1);
		rdma_ack_cm_event(ev);
	}
	CHECK(!rdma_disconnect(id2));
	rdma_destroy_ep(id2);
	rdma_destroy_ep(id1);
	rdma_destroy_ep(l);
	rdma_freeaddrinfo(res);
	return 0;
}

/* active_ep is a synchronous endpoint with a QP, its address and route
 * resolved to PEER's port 7997 (rdma_create_ep); NULL if that fails. */
static struct rdma_cm_id *active_ep(const char *peer)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res;
	if (rdma_getaddrinfo(peer, "7997", &hints, &res))
		return NULL;
	struct ibv_qp_init_attr qa = qattr();
	struct rdma_cm_id *id;
	int r = rdma_create_ep(&id, res, NULL, &qa);
	rdma_freeaddrinfo(res);
	return r ? NULL : id;
}

static int gone(const char *peer)
{
	struct rdma_cm_id *id = active_ep(peer);
	CHECK(id);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && !rdma_migrate_id(id, ch)); /* asynchronous: connect returns at once */
	CHECK(!rdma_connect(id, NULL));
	usleep(300000); /* the REQ is there */
	rdma_destroy_ep(id); /* REJ */
	rdma_destroy_event_channel(ch);
	return 0;
}

static int stay(const char *peer)
{
	struct rdma_cm_id *id = active_ep(peer);
	CHECK(id);
	CHECK(!rdma_connect(id, NULL));
	struct pollfd p = {.fd = id->channel->fd, .events = POLLIN};
	if (poll(&p, 1, 20000) != 1)
		FAIL("no DISCONNECTED on the ID's own channel");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch && !rdma_migrate_id(id, ch));
	CHECK(!fcntl(ch->fd, F_SETFL, O_NONBLOCK));
	struct rdma_cm_event *ev;
	CHECK(!rdma_get_cm_event(ch, &ev) && ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->id == id);
	rdma_ack_cm_event(ev);
	CHECK(!rdma_disconnect(id)); /* the DREP */
	rdma_destroy_ep(id);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* asyncsrv: an asynchronous listener whose request's ID moves to another
 * channel keeps the events still waiting on its own: the REJ of the gone
 * client's ID, sent before the migration, still shows on the listener's fd
 * (the library moves no asynchronous ID's events: a stash would not). */
static int asyncsrv(const char *peer)
{
	struct rdma_event_channel *a = rdma_create_event_channel(), *b = rdma_create_event_channel();
	CHECK(a && b);
	struct rdma_cm_id *l, *id1;
	CHECK(!rdma_create_id(a, &l, NULL, RDMA_PS_TCP));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(7997)};
	CHECK(inet_pton(AF_INET, peer, &sa.sin_addr) == 1);
	CHECK(!rdma_bind_addr(l, (struct sockaddr *)&sa) && !rdma_listen(l, 4));
	printf("listening\n");
	fflush(stdout);
	sleep(2);
	struct rdma_cm_event *ev;
	CHECK(!rdma_get_cm_event(a, &ev) && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST);
	id1 = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(!rdma_migrate_id(id1, b));
	struct pollfd p = {.fd = a->fd, .events = POLLIN};
	if (poll(&p, 1, 2000) != 1)
		FAIL("the listener's channel shows nothing after its request's ID moved");
	CHECK(!rdma_get_cm_event(a, &ev) && ev->event == RDMA_CM_EVENT_REJECTED && ev->id == id1);
	rdma_ack_cm_event(ev);
	CHECK(!rdma_destroy_id(id1) && !rdma_destroy_id(l));
	rdma_destroy_event_channel(b);
	rdma_destroy_event_channel(a);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		FAIL("usage: cmmigrate server|asyncsrv|gone|stay PEER_IPV4");
	int r = !strcmp(argv[1], "server")	? server(argv[2])
		: !strcmp(argv[1], "asyncsrv") ? asyncsrv(argv[2])
		: !strcmp(argv[1], "gone") ? gone(argv[2])
		: !strcmp(argv[1], "stay") ? stay(argv[2])
					    : -1;
	if (r)
		FAIL("%s", argv[1]);
	printf("ok\n");
	return 0;
}
