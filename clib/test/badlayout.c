/* badlayout: a daemon's reply whose rings do not fit their mapping (a
 * mangling proxy in cmd/xrnic's TestCLibraryBadLayout changes one) fails the
 * create with EPROTO, and the object the daemon made is destroyed again; the
 * library never writes past a mapping. The argument names what is mangled:
 * cq, srq, or a QP's (any other). */
#include <string.h>
#include "test.h"

int main(int argc, char **argv)
{
	if (argc != 2)
		FAIL("usage: badlayout cq|srq|qp...");
	const char *what = argv[1];
	struct ibv_context *ctx = open_device();
	CHECK(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	if (!strcmp(what, "cq")) {
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		CHECK(ch);
		errno = 0;
		CHECK(!ibv_create_cq(ctx, 16, NULL, ch, 0) && errno == EPROTO);
		CHECK(ibv_destroy_comp_channel(ch) == 0); /* EBUSY if the daemon kept the CQ */
	} else if (!strcmp(what, "srq")) {
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 2}};
		errno = 0;
		CHECK(!ibv_create_srq(pd, &sa) && errno == EPROTO);
	} else {
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		CHECK(cq);
		struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2}};
		errno = 0;
		CHECK(!ibv_create_qp(pd, &qa) && errno == EPROTO);
		CHECK(ibv_destroy_cq(cq) == 0); /* EBUSY if the daemon kept the QP */
	}
	CHECK(ibv_dealloc_pd(pd) == 0); /* EBUSY if the daemon kept the QP or SRQ */
	CHECK(ibv_close_device(ctx) == 0);
	printf("ok\n");
	return 0;
}
