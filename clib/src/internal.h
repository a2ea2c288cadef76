/* xrnic's libibverbs: what its files share. Written from the public
 * libibverbs ABI (Debian's libibverbs-dev headers) and docs/attach.md; no code
 * of rdma-core's. */
#ifndef XRNIC_INTERNAL_H
#define XRNIC_INTERNAL_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "xrnic/attach.h"

#define XR_EXPORT __attribute__((visibility("default")))
/* A run of empty CQ polls between yields of the CPU: internal/spin's Every. */
#define XR_SPIN_EVERY 8
#define container_of(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

/* A session with a daemon: the control socket, one request at a time. */
struct xr_conn {
	int fd;    /* control socket */
	int bell;  /* doorbell: a write end of a pipe the daemon reads */
	int async; /* async event socket (ibv_context.async_fd) */
	uint32_t seq;
	pthread_mutex_t mu;
	uint64_t guid;
	char name[33];
};

int xr_dial(const char *path, struct xr_conn *c);
void xr_hangup(struct xr_conn *c);
/* xr_call sends a request and reads its reply. It returns 0 or a positive
 * errno (the daemon's, or the socket's). sendfd < 0: none. rfds receives up
 * to nrfds descriptors; the count is in *got (NULL: none expected). */
int xr_call(struct xr_conn *c, uint32_t op, const void *req, uint32_t reqlen, void *rep, uint32_t replen,
	    int sendfd, int *rfds, int nrfds, int *got);
int xr_destroy(struct xr_conn *c, uint32_t kind, uint32_t handle);
void xr_ring_bell(struct xr_conn *c);

/* The devices: one per daemon socket found. */
struct xr_device {
	struct ibv_device dev;
	char sock[108];
	uint64_t guid;
};

/* An object the daemon may name in an async event. */
struct xr_obj {
	uint32_t kind, handle;
	void *ptr;
	struct xr_obj *next;
};

struct xr_context {
	struct verbs_context vctx; /* its ibv_context is the last member */
	struct xr_conn conn;
	pthread_mutex_t chmu; /* the channels' CQ lists, and objs */
	struct xr_obj *objs;  /* CQs, QPs and SRQs, for their events */
};

static inline struct xr_context *xr_ctx(struct ibv_context *c)
{
	return container_of(c, struct xr_context, vctx.context);
}

struct xr_pd {
	struct ibv_pd pd;
};

struct xr_mr {
	struct ibv_mr mr;
};

struct xr_cq;

struct xr_channel {
	struct ibv_comp_channel ch;
	uint32_t handle;
	struct xr_cq *cqs; /* the channel's CQs, by xr_cq.next */
};

struct xr_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx; /* begins with ibv_cq's members; valid when ex */
	};
	struct xrnic_ring ring;
	void *mem;
	size_t memlen;
	pthread_spinlock_t lock;
	struct xr_channel *ch;
	struct xr_cq *next;
	uint32_t seen;	  /* ring events at the last get_cq_event that returned it */
	uint32_t corrupt; /* the daemon's index was impossible */
	uint32_t reported; /* events get_cq_event returned (cq.mutex): destroy waits for their acks */
	/* Between ibv_start_poll and ibv_end_poll, under lock (cqex.c): the
	 * current entry, cur entries past the ring's consumer index, read once. */
	uint32_t cur;
	struct xrnic_cqe wc;
};

struct xr_srq {
	struct ibv_srq srq;
	struct xrnic_ring ring;
	pthread_spinlock_t lock;
	void *mem;
	size_t memlen;
	uint32_t max_sge;
};

struct xr_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx; /* begins with its ibv_qp; valid when ex */
	};
	struct xrnic_ring sq, rq; /* rq.n 0 with an SRQ */
	pthread_spinlock_t sqlock, rqlock;
	void *mem;
	size_t memlen;
	struct ibv_qp_cap cap;
	int sq_sig_all; /* ibv_query_qp(3): init_attr returns it */
	/* Between ibv_wr_start and ibv_wr_complete or ibv_wr_abort, under sqlock
	 * (wr.c): the entries built so far end at cur; err is the first failure. */
	uint32_t cur;
	int err;
};

struct xr_ah {
	struct ibv_ah ah;
};

/* Registered memory: moved into memfds (mem.c). */
int xr_mem_fd(void *addr, size_t len, int *fd, uint64_t *off);

/* Conversions between libibverbs' structs and the protocol's (conv.c). */
void xr_wire_av(struct xrnic_av *w, const struct ibv_ah_attr *a);
void xr_ibv_av(struct ibv_ah_attr *a, const struct xrnic_av *w);
void xr_wire_qp_attr(struct xrnic_qp_attr *w, const struct ibv_qp_attr *a);
void xr_ibv_qp_attr(struct ibv_qp_attr *a, const struct xrnic_qp_attr *w);
/* xr_v4gid writes the IPv4-mapped GID (::ffff:a.b.c.d) of a 4-byte address. */
void xr_v4gid(union ibv_gid *g, const uint8_t *a);

/* The hot path (ring.c). */
int xr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int xr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int xr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int xr_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int xr_req_notify_cq(struct ibv_cq *cq, int solicited_only);
void xr_publish(struct xr_conn *c, struct xrnic_ring *r, uint32_t k);
void xr_put_sges(uint8_t *tail, const struct ibv_sge *sgl, size_t n);
void xr_polled(int got);

/* The work request API of extended QPs (wr.c): send_ops the QP type allows,
 * and the QP's builders and setters. */
uint64_t xr_send_ops(enum ibv_qp_type t);
void xr_init_qp_ex(struct xr_qp *q);
/* The polling API of extended CQs (cqex.c): the wc_flags xrnic fills (rxe's),
 * and a CQ's start_poll, next_poll, end_poll and readers. */
#define XR_WC_EX_FLAGS                                                                                          \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |         \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)
void xr_init_cq_ex(struct xr_cq *q);

#endif
