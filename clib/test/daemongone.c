/* daemongone: a program whose daemon goes away lives on: its doorbell, a
 * pipe whose read end was the daemon's, fails with EPIPE and no SIGPIPE
 * kills it (an eventfd's write never raised one). It rings the doorbell
 * (ibv_req_notify_cq does each time) every 20 ms for 10 s while the test
 * stops the daemon. On xrnic's library against a daemon (XRNIC_ATTACH).
 * Prints "ready", then "ok". */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <unistd.h>
#include "test.h"

int main(void)
{
	struct ibv_context *ctx = open_device();
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		FAIL("setup");
	printf("ready\n");
	fflush(stdout);
	for (int i = 0; i < 500; i++) {
		ibv_req_notify_cq(cq, 0);
		usleep(20000);
	}
	printf("ok\n");
	return 0;
}
