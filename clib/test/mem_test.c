/* mem_test: clib's registered-memory arena (src/mem.c) on its own. Exits 0
 * when every check holds, else prints the first that failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../src/internal.h"

#define CHECK(c)                                                                                                       \
	do {                                                                                                           \
		if (!(c)) {                                                                                            \
			printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);                                            \
			return 1;                                                                                      \
		}                                                                                                      \
	} while (0)

/* through maps the arena at the region's offset, as the daemon does, and
 * checks both views are one memory. */
static int through(int fd, uint64_t off, char *p, size_t n)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t base = off & ~(uint64_t)(page - 1);
	size_t span = (off + n - base + page - 1) & ~(size_t)(page - 1);
	char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)base);
	CHECK(m != MAP_FAILED);
	char *q = m + (off - base);
	CHECK(memcmp(q, p, n) == 0);
	q[0] ^= 0x5a; /* the daemon's write */
	CHECK(p[0] == (char)(q[0]));
	q[0] ^= 0x5a;
	p[n - 1] ^= 0x33; /* the program's */
	CHECK(q[n - 1] == p[n - 1]);
	munmap(m, span);
	return 0;
}

int main(void)
{
	int fd, fd2;
	uint64_t off, off2;
	long page = sysconf(_SC_PAGESIZE);

	/* A heap block with neighbours: its contents and theirs survive. */
	char *before = malloc(64), *b = malloc(10000), *after = malloc(64);
	strcpy(before, "before");
	strcpy(after, "after");
	for (int i = 0; i < 10000; i++)
		b[i] = (char)i;
	CHECK(xr_mem_fd(b, 10000, &fd, &off) == 0);
	CHECK(off == (uint64_t)(uintptr_t)b);
	CHECK(strcmp(before, "before") == 0 && strcmp(after, "after") == 0);
	for (int i = 0; i < 10000; i++)
		CHECK(b[i] == (char)i);
	CHECK(through(fd, off, b, 10000) == 0);

	/* A region over part of a moved one and part of fresh pages (two
	 * fields of one struct across a page boundary, as rping's). */
	char *big = aligned_alloc(page, 4 * page);
	memset(big, 7, 4 * page);
	CHECK(xr_mem_fd(big + page - 8, 16, &fd, &off) == 0);
	CHECK(xr_mem_fd(big + 2 * page - 8, page, &fd2, &off2) == 0);
	CHECK(xr_mem_fd(big, 4 * page, &fd2, &off2) == 0);
	CHECK(fd2 == fd && off2 == (uint64_t)(uintptr_t)big);
	CHECK(through(fd, off2, big, 4 * page) == 0);

	/* Addresses the process does not have: EFAULT, no fault. */
	char *gone = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(gone != MAP_FAILED);
	munmap(gone + page, page);
	CHECK(xr_mem_fd(gone, 2 * page, &fd, &off) == EFAULT);
	CHECK(xr_mem_fd((void *)16, 8, &fd, &off) == EFAULT);
	CHECK(xr_mem_fd(b, 0, &fd, &off) == EINVAL);

	/* A read-only mapping stays read-only. */
	char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(ro != MAP_FAILED);
	CHECK(xr_mem_fd(ro, 100, &fd, &off) == 0);
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[512];
	int seen = 0;
	while (maps && fgets(line, sizeof(line), maps)) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= (uintptr_t)ro && (uintptr_t)ro < hi)
			seen = perms[0] == 'r' && perms[1] == '-';
	}
	if (maps)
		fclose(maps);
	CHECK(seen);
	printf("ok\n");
	return 0;
}
