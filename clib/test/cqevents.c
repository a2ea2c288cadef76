/* cqevents: ibv_destroy_cq waits for every completion event ibv_get_cq_event
 * returned to be acknowledged (ibv_get_cq_event(3)), so an event thread that
 * still handles its CQ finds it alive. An RC QP in ERR flushes a posted SEND:
 * the completion fires the armed CQ's event; the event thread takes it, then
 * polls and acks 300 ms later, while the main thread destroys the QP and the
 * CQ. On xrnic's library against a daemon (XRNIC_ATTACH). Prints "ok". */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "test.h"

static struct ibv_comp_channel *ch;
static volatile int got, acked;
static int polled = -1;

static void *events(void *arg)
{
	(void)arg;
	struct ibv_cq *cq;
	void *cctx;
	if (ibv_get_cq_event(ch, &cq, &cctx))
		return NULL;
	got = 1;
	usleep(300000); /* handling the event */
	struct ibv_wc wc;
	polled = ibv_poll_cq(cq, 1, &wc);
	acked = 1;
	ibv_ack_cq_events(cq, 1);
	return NULL;
}

int main(void)
{
	struct ibv_context *ctx = open_device();
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	ch = ctx ? ibv_create_comp_channel(ctx) : NULL;
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	char *buf = malloc(4096);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr || !cq)
		FAIL("setup");
	struct ibv_qp *qp = qp_in_err(pd, cq, cq);
	if (!qp)
		FAIL("an RC QP in ERR");
	pthread_t t;
	pthread_create(&t, NULL, events, NULL);
	if (ibv_req_notify_cq(cq, 0))
		FAIL("req_notify");
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	if (ibv_post_send(qp, &w, &bad))
		FAIL("post_send");
	while (!got)
		usleep(1000);
	if (ibv_destroy_qp(qp))
		FAIL("destroy_qp");
	if (ibv_destroy_cq(cq))
		FAIL("destroy_cq");
	if (!acked)
		FAIL("ibv_destroy_cq returned before the event it returned was acknowledged");
	pthread_join(t, NULL);
	if (polled != 1)
		FAIL("the event thread polled %d completions, want the flushed SEND", polled);
	ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	printf("ok\n");
	return 0;
}
