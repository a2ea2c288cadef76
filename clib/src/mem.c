/* Registered memory. The daemon reaches a region through a memfd it maps
 * (docs/attach.md, "Memory"), and a program registers whatever it allocated.
 * So the library keeps one memfd per process, the arena, whose file offset
 * is the virtual address (sparse: only the pages moved into it take memory).
 * At registration the region's pages that do not yet come from the arena move
 * there: their contents are copied into the arena and the arena is mapped
 * over the same addresses (MAP_FIXED, same protection), which the program
 * goes on using as before. Every region is then the arena at offset = its
 * address, whatever other regions it overlaps. A page moved stays moved, and
 * its arena page lives until the process exits. A fork's child gets private
 * copies of them (fork_child), as of any memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define ARENA_SIZE (1ULL << 47) /* the user half of x86-64's and arm64's address space */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int arena = -1;
static ino_t arena_ino;

/* fork_child gives the child of a fork private copies of the pages moved into
 * the arena: shared, the parent would see the child's writes to its heap and
 * stack there (ibv_fork_init(3): fork must not corrupt data). One mapping at
 * a time, /proc/self/maps read again after each change. Registered at the
 * arena's first opening, under mu. */
static void fork_child(void)
{
	for (;;) {
		FILE *f = fopen("/proc/self/maps", "re");
		if (!f)
			break;
		unsigned long lo = 0, hi = 0, off, ino;
		char perms[8], line[512];
		int found = 0;
		while (!found && fgets(line, sizeof(line), f))
			found = sscanf(line, "%lx-%lx %7s %lx %*s %lu", &lo, &hi, perms, &off, &ino) == 5 &&
				ino == (unsigned long)arena_ino && off == lo;
		fclose(f);
		if (!found)
			break;
		int prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
			   (perms[2] == 'x' ? PROT_EXEC : 0);
		size_t n = hi - lo;
		void *tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (tmp == MAP_FAILED)
			break;
		mprotect((void *)lo, n, prot | PROT_READ);
		memcpy(tmp, (void *)lo, n);
		mprotect(tmp, n, prot);
		if (mremap(tmp, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)lo) == MAP_FAILED) {
			munmap(tmp, n);
			break;
		}
	}
	/* The child's registrations go to an arena of its own, not into the
	 * parent's pages at the same addresses. */
	close(arena);
	arena = -1;
	pthread_mutex_unlock(&mu);
}

static void fork_prepare(void) { pthread_mutex_lock(&mu); }

static void fork_parent(void) { pthread_mutex_unlock(&mu); }

static int open_arena(void)
{
	struct stat st;
	int f = memfd_create("xrnic-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0)
		return errno;
	/* Sealed against shrinking, as the daemon requires: a file shrunk under
	 * its mapping would fault it. */
	if (ftruncate(f, ARENA_SIZE) < 0 || fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
	    fstat(f, &st) < 0) {
		int err = errno;
		close(f);
		return err;
	}
	arena = f;
	arena_ino = st.st_ino;
	/* Once: a child inherits the handlers, and reopens an arena after
	 * fork_child closed its parent's; twice registered, fork_prepare
	 * would lock mu twice at its next fork. */
	static int handlers;
	if (!handlers && !pthread_atfork(fork_prepare, fork_parent, fork_child))
		handlers = 1;
	return 0;
}

/* move_pages moves [start, end), mapped with prot, into the arena. */
static int move_pages(uintptr_t start, uintptr_t end, int prot)
{
	size_t n = end - start;
	void *tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, arena, (off_t)start);
	if (tmp == MAP_FAILED)
		return errno;
	memcpy(tmp, (void *)start, n);
	void *at = mmap((void *)start, n, prot, MAP_SHARED | MAP_FIXED, arena, (off_t)start);
	int err = at == MAP_FAILED ? errno : 0;
	munmap(tmp, n);
	return err;
}

/* cover moves every page of [start, end) that is not the arena's yet, after
 * checking in /proc/self/maps that each is mapped and readable: an address
 * the process does not have is EFAULT, as the kernel's registration
 * answers. */
static int cover(uintptr_t start, uintptr_t end)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return errno;
	struct vma {
		uintptr_t lo, hi;
		int prot, ours;
	} v[64];
	int n = 0, err = 0;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off, ino;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s %lx %*s %lu", &lo, &hi, perms, &off, &ino) != 5 || hi <= start || lo >= end)
			continue;
		if (n == (int)(sizeof(v) / sizeof(v[0]))) {
			err = ENOMEM; /* a region over that many mappings */
			break;
		}
		int prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
			   (perms[2] == 'x' ? PROT_EXEC : 0);
		v[n++] = (struct vma){lo, hi, prot, ino == (unsigned long)arena_ino && off == lo};
	}
	fclose(f);
	if (err)
		return err;
	uintptr_t at = start;
	for (int i = 0; i < n && at < end; i++) {
		if (v[i].lo > at || !(v[i].prot & PROT_READ))
			return EFAULT;
		uintptr_t hi = v[i].hi < end ? v[i].hi : end;
		if (!v[i].ours && (err = move_pages(at, hi, v[i].prot)))
			return err;
		at = hi;
	}
	return at < end ? EFAULT : 0;
}

/* xr_mem_fd returns, in *fd and *off, the memfd and offset that hold
 * [addr, addr+len), moving its pages into the arena if need be. The
 * descriptor stays the library's. */
int xr_mem_fd(void *addr, size_t len, int *fd, uint64_t *off)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)addr;
	if (len == 0 || a + len < a || a + len > ARENA_SIZE)
		return a + len > ARENA_SIZE ? EFAULT : EINVAL;
	uintptr_t start = a & ~(page - 1), end = (a + len + page - 1) & ~(page - 1);
	pthread_mutex_lock(&mu);
	int err = arena < 0 ? open_arena() : 0;
	if (!err)
		err = cover(start, end);
	pthread_mutex_unlock(&mu);
	if (err)
		return err;
	*fd = arena;
	*off = a;
	return 0;
}
