/* The control socket (docs/attach.md, "The socket"): one request and its
 * reply at a time, descriptors with SCM_RIGHTS. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static int send_msg(int fd, const void *msg, size_t len, int sendfd)
{
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (sendfd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &sendfd, sizeof(int));
	}
	for (;;) {
		ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n >= 0)
			return (size_t)n == len ? 0 : EIO;
		if (errno != EINTR)
			return errno;
	}
}

/* recv_msg reads one datagram; its descriptors go to fds (the rest closed). */
static ssize_t recv_msg(int fd, void *buf, size_t len, int *fds, int nfds, int *got)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int) * XRNIC_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	ssize_t n;
	do {
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (got)
		*got = 0;
	if (n < 0)
		return -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < k; i++) {
			int f;
			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (got && *got < nfds)
				fds[(*got)++] = f;
			else
				close(f);
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		errno = EPROTO;
		return -1;
	}
	return n;
}

int xr_call(struct xr_conn *c, uint32_t op, const void *req, uint32_t reqlen, void *rep, uint32_t replen,
	    int sendfd, int *rfds, int nrfds, int *got)
{
	uint8_t msg[XRNIC_MAX_MESSAGE];
	struct xrnic_hdr h;
	int err, n = 0;
	if (reqlen > sizeof(msg) - sizeof(h))
		return EINVAL;
	pthread_mutex_lock(&c->mu);
	if (++c->seq == 0)
		c->seq = 1;
	h = (struct xrnic_hdr){.op = op, .seq = c->seq, .len = reqlen};
	memcpy(msg, &h, sizeof(h));
	if (reqlen)
		memcpy(msg + sizeof(h), req, reqlen);
	err = send_msg(c->fd, msg, sizeof(h) + reqlen, sendfd);
	while (!err) {
		ssize_t k = recv_msg(c->fd, msg, sizeof(msg), rfds, nrfds, &n);
		if (k < 0) {
			err = errno;
			break;
		}
		if (k == 0) {
			err = ECONNRESET; /* the daemon is gone */
			break;
		}
		if ((size_t)k < sizeof(h)) {
			err = EPROTO;
			break;
		}
		memcpy(&h, msg, sizeof(h));
		if (h.seq == 0) { /* an event: a CM event (librdmacm's) */
			for (int i = 0; i < n; i++)
				close(rfds[i]);
			continue;
		}
		if (h.seq != c->seq || h.op != op || h.len != (uint32_t)k - sizeof(h)) {
			err = EPROTO;
		} else if (h.status) {
			err = h.status;
		} else if (h.len != replen) {
			err = EPROTO;
		} else if (replen) {
			memcpy(rep, msg + sizeof(h), replen);
		}
		break;
	}
	pthread_mutex_unlock(&c->mu);
	if (err) {
		for (int i = 0; i < n; i++)
			close(rfds[i]);
		n = 0;
	}
	if (got)
		*got = n;
	else
		for (int i = 0; i < n; i++)
			close(rfds[i]);
	return err;
}

int xr_dial(const char *path, struct xr_conn *c)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct xrnic_hello_req req = {.version = XRNIC_ATTACH_VERSION};
	struct xrnic_hello_rep rep;
	int fds[2], got, err;
	memset(c, 0, sizeof(*c));
	c->bell = c->async = -1;
	if (strlen(path) >= sizeof(sa.sun_path))
		return ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return errno;
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = errno;
		close(c->fd);
		return err;
	}
	pthread_mutex_init(&c->mu, NULL);
	err = xr_call(c, XRNIC_OP_HELLO, &req, sizeof(req), &rep, sizeof(rep), -1, fds, 2, &got);
	if (!err && got != 2) {
		for (int i = 0; i < got; i++)
			close(fds[i]);
		err = EPROTO;
	}
	if (err) {
		close(c->fd);
		pthread_mutex_destroy(&c->mu);
		return err;
	}
	c->bell = fds[0];
	c->async = fds[1];
	c->guid = rep.node_guid;
	memcpy(c->name, rep.name, sizeof(rep.name));
	c->name[sizeof(rep.name)] = 0;
	return 0;
}

void xr_hangup(struct xr_conn *c)
{
	close(c->fd);
	close(c->bell);
	close(c->async);
	pthread_mutex_destroy(&c->mu);
}

int xr_destroy(struct xr_conn *c, uint32_t kind, uint32_t handle)
{
	struct xrnic_destroy req = {.kind = kind, .handle = handle};
	return xr_call(c, XRNIC_OP_DESTROY, &req, sizeof(req), NULL, 0, -1, NULL, 0, NULL);
}

/* xr_ring_bell writes the doorbell, a pipe's write end. With the daemon gone
 * (its read end closed) the write fails with EPIPE and raises SIGPIPE, which
 * would kill the program where an eventfd's write never did: the thread
 * blocks SIGPIPE around it (unless it has already) and takes the one it
 * raised. The doorbell rings only when the daemon's engine sleeps. */
void xr_ring_bell(struct xr_conn *c)
{
	uint64_t one = 1;
	sigset_t pipe, old;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, &old);
	ssize_t n = write(c->bell, &one, sizeof(one)); /* EAGAIN: full, the daemon will look */
	if (n < 0 && errno == EPIPE && !sigismember(&old, SIGPIPE)) {
		struct timespec now = {0, 0};
		int e = errno;
		while (sigtimedwait(&pipe, NULL, &now) < 0 && errno == EINTR)
			;
		errno = e;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}
