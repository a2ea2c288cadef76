/* Registered memory. The daemon reaches a region through a memfd it maps
 * (docs/attach.md, "Memory"), and a program registers whatever it allocated.
 * So at registration the pages that hold the region move into a memfd of
 * their own: its contents are copied there and the memfd is mapped over the
 * same addresses (MAP_FIXED), which the program goes on using as before. The
 * pages stay there after deregistration; a later region inside them reuses
 * the memfd. A region that covers moved pages only in part is refused
 * (EINVAL): moving the rest would split it across two memfds. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct moved {
	uintptr_t start, end; /* page-aligned */
	int fd;		      /* the memfd, whose offset 0 is start */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct moved *moved;
static size_t nmoved, capmoved;

/* still_ours reports whether [m->start, m->end) is still mapped from m's
 * memfd: the program may have unmapped it since (free of a large block) and
 * mapped something else there. */
static int still_ours(const struct moved *m)
{
	struct stat st;
	if (fstat(m->fd, &st) < 0)
		return 0;
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	char line[512];
	uintptr_t covered = m->start;
	while (covered < m->end && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, ino;
		if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &lo, &hi, &ino) != 3)
			continue;
		if (lo <= covered && covered < hi) {
			if (ino != (unsigned long)st.st_ino)
				break;
			covered = hi;
		}
	}
	fclose(f);
	return covered >= m->end;
}

static int move_pages(uintptr_t start, uintptr_t end, int *fd)
{
	size_t n = end - start;
	int f = memfd_create("xrnic-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0)
		return errno;
	if (ftruncate(f, n) < 0 || fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int err = errno;
		close(f);
		return err;
	}
	void *tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (tmp == MAP_FAILED) {
		int err = errno;
		close(f);
		return err;
	}
	memcpy(tmp, (void *)start, n);
	void *at = mmap((void *)start, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, f, 0);
	int err = at == MAP_FAILED ? errno : 0;
	munmap(tmp, n);
	if (err) {
		close(f);
		return err;
	}
	*fd = f;
	return 0;
}

/* xr_mem_fd returns, in *fd and *off, the memfd and offset that hold
 * [addr, addr+len), moving its pages into one if need be. The descriptor
 * stays the library's. */
int xr_mem_fd(void *addr, size_t len, int *fd, uint64_t *off)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)addr;
	if (len == 0 || a + len < a)
		return EINVAL;
	uintptr_t start = a & ~(page - 1), end = (a + len + page - 1) & ~(page - 1);
	int err = 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nmoved; i++) {
		struct moved *m = &moved[i];
		if (start >= m->end || m->start >= end)
			continue;
		if (!still_ours(m)) { /* forget it */
			close(m->fd);
			moved[i--] = moved[--nmoved];
			continue;
		}
		if (start >= m->start && end <= m->end) {
			*fd = m->fd;
			*off = a - m->start;
			goto out;
		}
		err = EINVAL; /* in part */
		goto out;
	}
	if (nmoved == capmoved) {
		size_t c = capmoved ? 2 * capmoved : 16;
		struct moved *p = realloc(moved, c * sizeof(*p));
		if (!p) {
			err = ENOMEM;
			goto out;
		}
		moved = p;
		capmoved = c;
	}
	if ((err = move_pages(start, end, fd)) == 0) {
		moved[nmoved++] = (struct moved){start, end, *fd};
		*off = a - start;
	}
out:
	pthread_mutex_unlock(&mu);
	return err;
}
