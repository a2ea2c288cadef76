/* forkmem: a fork's child writes to its copy of registered memory, and of the
 * heap around it, without the parent seeing it (ibv_fork_init(3): fork must
 * not corrupt the parent's data), and reads there what the parent had. On
 * xrnic's library against a daemon (XRNIC_ATTACH). Prints "ok". */
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
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	printf("ok\n");
	return 0;
}
