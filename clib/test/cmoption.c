/* cmoption: rdma_set_option reaches the daemon's ID.
 *   ports LOCAL: rdma_bind_addr takes its port (cma_get_port): a second bind of
 *     the address and port fails EADDRINUSE, and of the wildcard address
 *     EADDRNOTAVAIL; with RDMA_OPTION_ID_REUSEADDR set on both IDs, two bind
 *     one port, though neither may listen while the other holds it
 *     (cma_listen); REUSEADDR is cleared only before bind (EINVAL after);
 *     port 0 has its port at bind (rdma_get_src_port); a destroyed ID's port
 *     is free again. Bad sizes are EINVAL, unknown options ENOSYS.
 *   server LOCAL TOS: a synchronous listener on port 7996; its request's QP,
 *     once connected, has the traffic class the client's REQ carried.
 *   client PEER TOS: connects with RDMA_OPTION_ID_TOS set to TOS (as
 *     perftest's --tos with -R does); its QP has that traffic class, the
 *     IPv4 TOS of its packets.
 * On xrnic's library against a daemon (XRNIC_ATTACH). Each prints "ok". */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test.h"

static int reuse(struct rdma_cm_id *id, int on)
{
	return rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof(on));
}

static int ports(const char *local)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(7995)}, any = sa;
	any.sin_addr.s_addr = htonl(INADDR_ANY);
	CHECK(inet_pton(AF_INET, local, &sa.sin_addr) == 1);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *a, *b, *c;
	CHECK(!rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) && !rdma_create_id(ch, &b, NULL, RDMA_PS_TCP));

	/* Without REUSEADDR: the second bind fails, and leaves the ID idle. */
	CHECK(!rdma_bind_addr(a, (struct sockaddr *)&sa));
	if (!rdma_bind_addr(b, (struct sockaddr *)&sa) || errno != EADDRINUSE)
		FAIL("second bind of %s:7995 without REUSEADDR: errno %d, want EADDRINUSE", local, errno);
	if (!rdma_bind_addr(b, (struct sockaddr *)&any) || errno != EADDRNOTAVAIL)
		FAIL("bind of 0.0.0.0:7995 beside %s:7995: errno %d, want EADDRNOTAVAIL", local, errno);
	CHECK(!rdma_destroy_id(a));
	CHECK(!rdma_bind_addr(b, (struct sockaddr *)&sa)); /* a's port went with it */
	CHECK(!rdma_destroy_id(b));

	/* With REUSEADDR on both: one address and port, two IDs. */
	CHECK(!rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) && !rdma_create_id(ch, &b, NULL, RDMA_PS_TCP));
	CHECK(!reuse(a, 1) && !reuse(b, 1));
	CHECK(!rdma_bind_addr(a, (struct sockaddr *)&sa));
	if (rdma_bind_addr(b, (struct sockaddr *)&sa))
		FAIL("second bind of %s:7995 with REUSEADDR on both: errno %d", local, errno);
	if (!reuse(a, 0) || errno != EINVAL)
		FAIL("REUSEADDR cleared on a bound ID: errno %d, want EINVAL", errno);
	if (!rdma_listen(a, 1) || errno != EADDRINUSE)
		FAIL("listen on a port another ID shares: errno %d, want EADDRINUSE", errno);
	CHECK(!rdma_destroy_id(b));
	CHECK(!rdma_listen(a, 1));
	CHECK(!rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) && !reuse(c, 1));
	if (!rdma_bind_addr(c, (struct sockaddr *)&sa) || errno != EADDRINUSE)
		FAIL("REUSEADDR bind beside a listener: errno %d, want EADDRINUSE", errno);
	CHECK(!rdma_destroy_id(a));

	/* Port 0: the port is chosen at bind. */
	sa.sin_port = 0;
	CHECK(!rdma_bind_addr(c, (struct sockaddr *)&sa));
	if (!rdma_get_src_port(c))
		FAIL("bound to %s port 0: rdma_get_src_port is 0 before listen", local);
	CHECK(!rdma_destroy_id(c));

	CHECK(!rdma_create_id(ch, &a, NULL, RDMA_PS_TCP));
	uint8_t tos = 32;
	int on = 1;
	if (!rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &on, sizeof(on)) || errno != EINVAL)
		FAIL("TOS of an int's size: errno %d, want EINVAL", errno);
	CHECK(!rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)));
	CHECK(!rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof(on)));
	if (!rdma_set_option(a, RDMA_OPTION_ID, 99, &on, sizeof(on)) || errno != ENOSYS)
		FAIL("an unknown option: errno %d, want ENOSYS", errno);
	CHECK(!rdma_destroy_id(a));
	rdma_destroy_event_channel(ch);
	return 0;
}

/* traffic_class is the QP's AV's, as the daemon has it. */
static int traffic_class(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	if (ibv_query_qp(qp, &attr, IBV_QP_AV, &init))
		return -1;
	return attr.ah_attr.grh.traffic_class;
}

static struct ibv_qp_init_attr qattr(void)
{
	return (struct ibv_qp_init_attr){.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
}

static int server(const char *local, int tos)
{
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP}, *res;
	CHECK(!rdma_getaddrinfo(local, "7996", &hints, &res));
	struct ibv_qp_init_attr qa = qattr();
	struct rdma_cm_id *l, *id;
	CHECK(!rdma_create_ep(&l, res, NULL, &qa));
	CHECK(!rdma_listen(l, 1));
	printf("listening\n");
	fflush(stdout);
	CHECK(!rdma_get_request(l, &id));
	CHECK(!rdma_accept(id, NULL));
	int tc = traffic_class(id->qp);
	if (tc != tos)
		FAIL("the accepted QP's traffic class is %d, the client's TOS %d", tc, tos);
	rdma_disconnect(id);
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	rdma_freeaddrinfo(res);
	return 0;
}

static int client(const char *peer, int tos)
{
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(7996)};
	CHECK(inet_pton(AF_INET, peer, &dst.sin_addr) == 1);
	struct rdma_cm_id *id;
	CHECK(!rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP)); /* synchronous */
	uint8_t t = (uint8_t)tos;
	CHECK(!rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &t, sizeof(t)));
	CHECK(!rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	CHECK(!rdma_resolve_route(id, 2000));
	struct ibv_qp_init_attr qa = qattr();
	CHECK(!rdma_create_qp(id, NULL, &qa));
	CHECK(!rdma_connect(id, NULL));
	int tc = traffic_class(id->qp);
	if (tc != tos)
		FAIL("the connected QP's traffic class is %d, its TOS %d", tc, tos);
	rdma_disconnect(id);
	rdma_destroy_qp(id);
	CHECK(!rdma_destroy_id(id));
	return 0;
}

int main(int argc, char **argv)
{
	int r = -1;
	if (argc == 3 && !strcmp(argv[1], "ports"))
		r = ports(argv[2]);
	else if (argc == 4 && !strcmp(argv[1], "server"))
		r = server(argv[2], atoi(argv[3]));
	else if (argc == 4 && !strcmp(argv[1], "client"))
		r = client(argv[2], atoi(argv[3]));
	if (r < 0)
		FAIL("usage: cmoption ports LOCAL | server LOCAL TOS | client PEER TOS");
	if (r)
		return r;
	printf("ok\n");
	return 0;
}
