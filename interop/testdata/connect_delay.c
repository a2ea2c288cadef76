/*
 * connect_delay.so: rdma_connect(3), 250 ms late. LD_PRELOADed into
 * Debian's perftest when it connects over rdma_cm (-R): the host's, through
 * xrnic's library, to the guest, and the guest's (built here: host and guest
 * are both bookworm) to xrnic.
 *
 * With -R, perftest's server listens twice: for the parameter exchange, then,
 * once the exchange is over, for the test's QPs. Its client sends the second
 * REQ 1-4 ms after the exchange; the server sometimes listens later (the
 * emulated guest, or on a loaded host xrnic's side, descheduled), and rejects
 * the REQ (invalid service ID). perftest 4.5+0.17's retry
 * then runs on the nodes it has just freed (rdma_cm_client_connection after
 * rdma_cm_destroy_cma) and crashes; upstream fixed it in 3d9d8d0, and waits
 * 100 ms between tries. This gives the server that time before the first try.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <rdma/rdma_cma.h>

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	static int (*real)(struct rdma_cm_id *, struct rdma_conn_param *);
	struct timespec ts = { 0, 250 * 1000 * 1000 };

	if (!real)
		real = (int (*)(struct rdma_cm_id *, struct rdma_conn_param *))dlsym(RTLD_NEXT, "rdma_connect");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	static int said;
	if (!said++)
		fputs("connect_delay: rdma_connect 250 ms late\n", stderr);
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	return real(id, param);
}
