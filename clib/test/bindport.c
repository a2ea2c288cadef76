/* bindport: an ID bound to port 0 has a port of the rdma_cm's choosing, which
 * rdma_get_src_port returns (rdma_bind_addr(3)), once it listens: on a local
 * address and on the wildcard address. argv[1]: a local IPv4 address of the
 * device. On xrnic's library against a daemon
 * (XRNIC_ATTACH). Prints "ok". */
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include "test.h"

int main(int argc, char **argv)
{
	if (argc != 2)
		FAIL("usage: bindport IPV4");
	struct sockaddr_in sa = {.sin_family = AF_INET}, any = {.sin_family = AF_INET};
	if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1)
		FAIL("address");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *id, *wild;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&sa) == 0);
	CHECK(rdma_listen(id, 1) == 0);
	if (!rdma_get_src_port(id))
		FAIL("listening on %s port 0: rdma_get_src_port is 0", argv[1]);
	CHECK(rdma_create_id(ch, &wild, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(wild, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(wild, 1) == 0);
	if (!rdma_get_src_port(wild))
		FAIL("listening on 0.0.0.0 port 0: rdma_get_src_port is 0");
	CHECK(rdma_destroy_id(wild) == 0);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
