/* cqnonblock: a completion channel's fd is the process's, as libibverbs'
 * is. Blocking by default; with O_NONBLOCK set on it, ibv_get_cq_event with
 * no event fails at once with EAGAIN, returns an event once poll(2) says the
 * fd is readable, and leaves the fd unreadable after it (an epoll loop is not
 * woken again for an event it has taken); with two CQs fired it stays
 * readable until both events are taken. Events come from work requests
 * flushed on an RC QP in ERR. On xrnic's library against a daemon (XRNIC_ATTACH). Prints
 * "ok". */
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "test.h"

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, ms) == 1;
}

int main(void)
{
	struct ibv_context *ctx = open_device();
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_comp_channel *ch = ctx ? ibv_create_comp_channel(ctx) : NULL;
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	char *buf = malloc(4096);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr || !cq)
		FAIL("setup");
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fl >= 0 && !(fl & O_NONBLOCK)); /* blocking, as libibverbs' */
	CHECK(!fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK));

	struct ibv_cq *got;
	void *cctx;
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &got, &cctx) == -1 && errno == EAGAIN);

	struct ibv_qp *qp = qp_in_err(pd, cq, cq);
	CHECK(qp);
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	for (int round = 0; round < 3; round++) {
		CHECK(!ibv_req_notify_cq(cq, 0));
		struct ibv_send_wr w = {.wr_id = round, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					.send_flags = IBV_SEND_SIGNALED},
				   *bad;
		CHECK(!ibv_post_send(qp, &w, &bad));
		if (!readable(ch->fd, 10000))
			FAIL("round %d: the channel's fd never became readable", round);
		CHECK(!ibv_get_cq_event(ch, &got, &cctx) && got == cq);
		ibv_ack_cq_events(cq, 1);
		if (readable(ch->fd, 0))
			FAIL("round %d: the fd is readable after its event was taken", round);
		errno = 0;
		CHECK(ibv_get_cq_event(ch, &got, &cctx) == -1 && errno == EAGAIN);
		struct ibv_wc wc;
		CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id == (uint64_t)round && wc.status == IBV_WC_WR_FLUSH_ERR);
	}
	CHECK(!ibv_destroy_qp(qp));

	/* Two CQs of the channel fire: the fd stays readable until both events
	 * are taken, one a call. */
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 16, NULL, ch, 0);
	CHECK(cq2);
	qp = qp_in_err(pd, cq, cq2);
	CHECK(qp);
	CHECK(!ibv_req_notify_cq(cq, 0) && !ibv_req_notify_cq(cq2, 0));
	struct ibv_recv_wr rw = {.wr_id = 9, .sg_list = &s, .num_sge = 1}, *rbad;
	struct ibv_send_wr sw = {.wr_id = 8, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	CHECK(!ibv_post_recv(qp, &rw, &rbad) && !ibv_post_send(qp, &sw, &sbad));
	struct ibv_wc wc;
	int got1 = 0, got2 = 0;
	for (int i = 0; i < 10000 && !(got1 && got2); i++) {
		got1 += ibv_poll_cq(cq, 1, &wc) == 1;
		got2 += ibv_poll_cq(cq2, 1, &wc) == 1;
		usleep(1000);
	}
	CHECK(got1 && got2);
	usleep(50000); /* the events' bytes follow the completions */
	struct ibv_cq *first, *second;
	CHECK(readable(ch->fd, 0));
	CHECK(!ibv_get_cq_event(ch, &first, &cctx));
	if (!readable(ch->fd, 0))
		FAIL("the fd is unreadable with the second CQ's event still to take");
	CHECK(!ibv_get_cq_event(ch, &second, &cctx) && second != first);
	CHECK(!readable(ch->fd, 0));
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &got, &cctx) == -1 && errno == EAGAIN);
	ibv_ack_cq_events(cq, 1);
	ibv_ack_cq_events(cq2, 1);
	CHECK(!ibv_destroy_qp(qp));
	CHECK(!ibv_destroy_cq(cq2));
	CHECK(!ibv_destroy_cq(cq));
	CHECK(!ibv_destroy_comp_channel(ch));
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	printf("ok\n");
	return 0;
}
