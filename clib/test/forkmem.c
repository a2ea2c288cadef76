/* forkmem: a fork's child writes to its copy of registered memory, and of the
 * heap around it, without the parent seeing it (ibv_fork_init(3): fork must
 * not corrupt the parent's data), and reads there what the parent had. On
 * xrnic's library against a daemon (XRNIC_ATTACH). A child that registers
 * memory itself can fork in turn. Prints "ok". */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test.h"

int main(void)
{
	struct ibv_context *ctx = open_device();
	CHECK(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	char *buf = malloc(100), *near = malloc(100); /* near: likely on buf's page, not registered */
	CHECK(buf && near);
	strcpy(buf, "parent");
	strcpy(near, "parent");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 100, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int same = !strcmp(buf, "parent") && !strcmp(near, "parent");
		strcpy(buf, "child");
		strcpy(near, "child");
		_exit(same ? 0 : 1);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("the child did not read the parent's data");
	if (strcmp(buf, "parent") || strcmp(near, "parent"))
		FAIL("the child's writes reached the parent: buf %s, near %s", buf, near);
	/* A child that registers memory of its own (its own arena) forks in turn:
	 * the library's fork handlers run once, not once per arena opened. */
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		alarm(20); /* a fork that hangs is killed */
		struct ibv_context *cctx = open_device();
		struct ibv_pd *cpd = cctx ? ibv_alloc_pd(cctx) : NULL;
		char *cbuf = malloc(100);
		if (!cpd || !cbuf || !ibv_reg_mr(cpd, cbuf, 100, IBV_ACCESS_LOCAL_WRITE))
			_exit(2);
		pid_t g = fork();
		if (g == 0)
			_exit(0);
		int gst;
		_exit(g > 0 && waitpid(g, &gst, 0) == g && WIFEXITED(gst) && !WEXITSTATUS(gst) ? 0 : 3);
	}
	CHECK(waitpid(pid, &st, 0) == pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("a child that registered memory could not fork: status %#x", st);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	printf("ok\n");
	return 0;
}
