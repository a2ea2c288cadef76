/* spin: a thread that polls an empty CQ yields its CPU on one poll in
 * XR_SPIN_EVERY (8), for the daemon's engine thread (internal/spin). On
 * xrnic's library against a daemon (XRNIC_ATTACH). The program's own
 * sched_yield, exported with -rdynamic, counts the library's calls. Prints
 * "ok". */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <sched.h>
#include <stdio.h>
#include "test.h"

static int yields;

int sched_yield(void)
{
	yields++;
	return 0;
}

int main(void)
{
	struct ibv_context *ctx = open_device();
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		return printf("FAIL: no CQ\n"), 1;
	struct ibv_wc wc[4];
	for (int i = 0; i < 3 * 8; i++)
		if (ibv_poll_cq(cq, 4, wc) != 0)
			return printf("FAIL: an empty CQ polled a completion\n"), 1;
	if (yields != 3)
		return printf("FAIL: 24 empty polls yielded %d times, want 3\n", yields), 1;
	ibv_destroy_cq(cq);
	ibv_close_device(ctx);
	printf("ok\n");
	return 0;
}
