/* test.h: what clib/test's programs share. Each runs on xrnic's library
 * against a daemon (XRNIC_ATTACH), prints "ok" when it passes, and prints
 * "FAIL..." and exits 1 when it does not (cmd/xrnic's TestCLibrary). */
#ifndef XRNIC_CLIB_TEST_H
#define XRNIC_CLIB_TEST_H

#include <dirent.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>

/* FAIL returns 1 from main after printing why. */
#define FAIL(...) return printf("FAIL: " __VA_ARGS__), printf("\n"), 1

/* CHECK fails main with the condition's text and errno unless c holds. */
#define CHECK(c)                                                                       \
	do {                                                                           \
		if (!(c)) {                                                            \
			printf("FAIL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, #c, errno); \
			return 1;                                                      \
		}                                                                      \
	} while (0)

/* open_device opens the one device the daemon serves; NULL if there is not
 * exactly one or it does not open. */
static inline struct ibv_context *open_device(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	struct ibv_context *ctx = n == 1 ? ibv_open_device(list[0]) : NULL;
	ibv_free_device_list(list);
	return ctx;
}

/* qp_in_err makes an RC QP on the CQs and moves it through INIT to ERR, where
 * each work request posted completes at once, flushed: a source of
 * completions (and events) without a peer. NULL if a step fails. */
static inline struct ibv_qp *qp_in_err(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr qa = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp)
		return NULL;
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		goto err;
	at = (struct ibv_qp_attr){.qp_state = IBV_QPS_ERR};
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		goto err;
	return qp;
err:
	ibv_destroy_qp(qp);
	return NULL;
}

/* open_fds counts the process's open descriptors (-1 if it cannot). */
static inline int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

#endif
