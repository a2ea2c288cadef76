/* cmdestroy: rdma_destroy_id waits until the events rdma_get_cm_event returned
 * of the ID are acked, as librdmacm's does (rdma_destroy_id(3) asks that they
 * be): an event's ID stays valid until its ack, whatever another thread does.
 * Acking no event is EINVAL. argv[1]: an IPv4 address to resolve. On xrnic's
 * library against a daemon (XRNIC_ATTACH). Prints "ok". */
#include <arpa/inet.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <unistd.h>
#include "test.h"

static struct rdma_cm_id *id;
static int destroyed; /* atomic */

static void *destroy(void *arg)
{
	(void)arg;
	if (!rdma_destroy_id(id))
		__atomic_store_n(&destroyed, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		FAIL("usage: cmdestroy IPV4");
	struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(7999)};
	CHECK(inet_pton(AF_INET, argv[1], &peer.sin_addr) == 1);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	CHECK(!rdma_resolve_addr(id, NULL, (struct sockaddr *)&peer, 2000));
	struct rdma_cm_event *ev;
	CHECK(!rdma_get_cm_event(ch, &ev) && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id);
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, destroy, NULL));
	usleep(300 * 1000);
	if (__atomic_load_n(&destroyed, __ATOMIC_SEQ_CST))
		FAIL("rdma_destroy_id returned with an event of the ID not acked");
	CHECK(ev->id == id && ev->id->channel == ch); /* still the ID's */
	CHECK(!rdma_ack_cm_event(ev));
	CHECK(!pthread_join(t, NULL));
	if (!__atomic_load_n(&destroyed, __ATOMIC_SEQ_CST))
		FAIL("rdma_destroy_id failed");
	rdma_destroy_event_channel(ch);
	errno = 0;
	CHECK(rdma_ack_cm_event(NULL) == -1 && errno == EINVAL); /* librdmacm's */
	printf("ok\n");
	return 0;
}
