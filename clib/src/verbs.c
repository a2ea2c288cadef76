/* libibverbs' API on the xrnic daemon: each control verb is a request on the
 * control socket (docs/attach.md); the hot path is in ring.c. Errors follow
 * libibverbs: functions returning int return an errno, those returning a
 * pointer return NULL with errno set. */
#define _GNU_SOURCE
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static int set_errno(int err)
{
	errno = err;
	return err;
}

/* fail is the error of the verbs that return -1 and set errno
 * (ibv_query_gid(3), ibv_query_pkey(3), ibv_init_ah_from_wc(3)). */
static int fail(int err)
{
	errno = err;
	return -1;
}

/* track keeps an object for its async events; untrack forgets it. */
static void track(struct xr_context *x, uint32_t kind, uint32_t handle, void *ptr)
{
	struct xr_obj *o = malloc(sizeof(*o));
	if (!o)
		return; /* its events will name no object */
	*o = (struct xr_obj){.kind = kind, .handle = handle, .ptr = ptr};
	pthread_mutex_lock(&x->chmu);
	o->next = x->objs;
	x->objs = o;
	pthread_mutex_unlock(&x->chmu);
}

static void untrack(struct xr_context *x, void *ptr)
{
	pthread_mutex_lock(&x->chmu);
	for (struct xr_obj **p = &x->objs; *p; p = &(*p)->next)
		if ((*p)->ptr == ptr) {
			struct xr_obj *o = *p;
			*p = o->next;
			free(o);
			break;
		}
	pthread_mutex_unlock(&x->chmu);
}

static void *lookup(struct xr_context *x, uint32_t kind, uint32_t handle)
{
	void *ptr = NULL;
	pthread_mutex_lock(&x->chmu);
	for (struct xr_obj *o = x->objs; o && !ptr; o = o->next)
		if (o->kind == kind && o->handle == handle)
			ptr = o->ptr;
	pthread_mutex_unlock(&x->chmu);
	return ptr;
}

/* Devices: the daemons' attach sockets. XRNIC_ATTACH names them (a
 * colon-separated list, as `xrnic exec` sets it); else every socket in
 * /run/xrnic. */

static pthread_mutex_t devmu = PTHREAD_MUTEX_INITIALIZER;
static struct xr_device **known; /* kept for the process's life, as rdma-core keeps its devices */
static int nknown;

static struct xr_device *device_for(const char *sock)
{
	for (int i = 0; i < nknown; i++)
		if (!strcmp(known[i]->sock, sock))
			return known[i];
	struct xr_conn c;
	if (strlen(sock) >= sizeof(known[0]->sock) || xr_dial(sock, &c))
		return NULL;
	struct xr_device *d = calloc(1, sizeof(*d));
	struct xr_device **k = realloc(known, (nknown + 1) * sizeof(*k));
	if (!d || !k) {
		free(d);
		if (k)
			known = k;
		xr_hangup(&c);
		return NULL;
	}
	known = k;
	strcpy(d->sock, sock);
	d->guid = c.guid;
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB; /* RoCE: IB transport on an Ethernet link layer */
	snprintf(d->dev.name, sizeof(d->dev.name), "%s", c.name);
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", nknown);
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s", sock);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", c.name);
	xr_hangup(&c);
	known[nknown++] = d;
	return d;
}

XR_EXPORT struct ibv_device **(ibv_get_device_list)(int *num)
{
	struct ibv_device **list = calloc(64 + 1, sizeof(*list));
	int n = 0;
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&devmu);
	const char *env = getenv("XRNIC_ATTACH");
	if (env && *env) {
		char *s = strdup(env), *save = NULL;
		for (char *p = s ? strtok_r(s, ":", &save) : NULL; p && n < 64; p = strtok_r(NULL, ":", &save)) {
			struct xr_device *d = device_for(p);
			if (d)
				list[n++] = &d->dev;
		}
		free(s);
	} else {
		DIR *dir = opendir("/run/xrnic");
		struct dirent *de;
		while (dir && (de = readdir(dir)) && n < 64) {
			size_t l = strlen(de->d_name);
			char path[108];
			if (l < 8 || strcmp(de->d_name + l - 7, ".attach"))
				continue;
			if (snprintf(path, sizeof(path), "/run/xrnic/%s", de->d_name) >= (int)sizeof(path))
				continue;
			struct xr_device *d = device_for(path);
			if (d)
				list[n++] = &d->dev;
		}
		if (dir)
			closedir(dir);
	}
	pthread_mutex_unlock(&devmu);
	if (num)
		*num = n;
	return list;
}

XR_EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

XR_EXPORT const char *ibv_get_device_name(struct ibv_device *dev) { return dev->name; }

XR_EXPORT __be64 ibv_get_device_guid(struct ibv_device *dev)
{
	return htobe64(container_of(dev, struct xr_device, dev)->guid);
}

static int xr_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);
static struct ibv_qp *xr_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a);
static struct ibv_cq_ex *xr_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a);

XR_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	struct xr_device *d = container_of(dev, struct xr_device, dev);
	struct xr_context *x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	int err = xr_dial(d->sock, &x->conn);
	if (err) {
		free(x);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&x->chmu, NULL);
	struct ibv_context *c = &x->vctx.context;
	c->device = dev;
	c->cmd_fd = x->conn.fd;
	c->async_fd = x->conn.async;
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->ops.post_send = xr_post_send;
	c->ops.post_recv = xr_post_recv;
	c->ops.post_srq_recv = xr_post_srq_recv;
	c->ops.poll_cq = xr_poll_cq;
	c->ops.req_notify_cq = xr_req_notify_cq;
	/* The extended context: its ops are NULL but query_port, create_qp_ex
	 * and create_cq_ex, and the headers' inline verbs fall back or answer
	 * EOPNOTSUPP. */
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	x->vctx.sz = sizeof(x->vctx);
	x->vctx.query_port = xr_query_port_ex;
	x->vctx.create_qp_ex = xr_create_qp_ex;
	x->vctx.create_cq_ex = xr_create_cq_ex;
	return c;
}

XR_EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct xr_context *x = xr_ctx(ctx);
	xr_hangup(&x->conn); /* the daemon frees what is left, as uverbs at close */
	while (x->objs) {
		struct xr_obj *o = x->objs;
		x->objs = o->next;
		free(o);
	}
	pthread_mutex_destroy(&ctx->mutex);
	pthread_mutex_destroy(&x->chmu);
	free(x);
	return 0;
}

/* Queries. */

XR_EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	struct xrnic_device r;
	int err = xr_call(&xr_ctx(ctx)->conn, XRNIC_OP_QUERY_DEVICE, NULL, 0, &r, sizeof(r), -1, NULL, 0, NULL);
	if (err)
		return set_errno(err);
	memset(a, 0, sizeof(*a));
	memcpy(a->fw_ver, r.fw_ver, sizeof(r.fw_ver));
	a->fw_ver[sizeof(r.fw_ver) - 1] = 0;
	a->node_guid = a->sys_image_guid = htobe64(r.node_guid);
	a->max_mr_size = r.max_mr_size;
	a->page_size_cap = r.page_size_cap;
	a->vendor_id = r.vendor_id;
	a->vendor_part_id = r.vendor_part_id;
	a->hw_ver = r.hw_ver;
	a->max_qp = r.max_qp;
	a->max_qp_wr = r.max_qp_wr;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_N_NOTIFY_CQ |
			      IBV_DEVICE_SYS_IMAGE_GUID;
	a->max_sge = a->max_sge_rd = r.max_sge;
	a->max_cq = r.max_cq;
	a->max_cqe = r.max_cqe;
	a->max_mr = r.max_mr;
	a->max_pd = r.max_pd;
	a->max_qp_rd_atom = a->max_res_rd_atom = r.max_qp_rd_atom;
	a->max_qp_init_rd_atom = r.max_qp_init_rd_atom;
	a->atomic_cap = r.atomic_cap;
	a->max_ah = r.max_ah;
	a->max_srq = r.max_srq;
	a->max_srq_wr = r.max_srq_wr;
	a->max_srq_sge = r.max_srq_sge;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
	return 0;
}

static int xr_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr a;
	struct xrnic_port r;
	if (port != 1)
		return set_errno(EINVAL);
	int err = xr_call(&xr_ctx(ctx)->conn, XRNIC_OP_QUERY_PORT, NULL, 0, &r, sizeof(r), -1, NULL, 0, NULL);
	if (err)
		return set_errno(err);
	memset(&a, 0, sizeof(a));
	a.state = r.state;
	a.max_mtu = r.max_mtu;
	a.active_mtu = r.active_mtu;
	a.gid_tbl_len = r.gid_tbl_len;
	a.max_msg_sz = r.max_msg_sz;
	a.port_cap_flags = IBV_PORT_CM_SUP; /* as rxe's */
	a.pkey_tbl_len = 1;
	a.max_vl_num = 1;
	a.active_width = r.active_width; /* the link's ethtool speed, as rxe's */
	a.active_speed = r.active_speed;
	a.phys_state = r.state == IBV_PORT_ACTIVE ? 5 : 3; /* LinkUp, Disabled */
	a.link_layer = IBV_LINK_LAYER_ETHERNET;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

XR_EXPORT int(ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	/* The compat struct is ibv_port_attr up to link_layer: what every
	 * header's inline ibv_query_port passes at least. */
	return xr_query_port_ex(ctx, port, (struct ibv_port_attr *)attr, offsetof(struct ibv_port_attr, link_layer) + 1);
}

XR_EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct xrnic_gid_req req = {.index = (uint32_t)index};
	struct xrnic_gid_rep r;
	if (port != 1 || index < 0)
		return fail(EINVAL);
	int err = xr_call(&xr_ctx(ctx)->conn, XRNIC_OP_QUERY_GID, &req, sizeof(req), &r, sizeof(r), -1, NULL, 0, NULL);
	if (err) {
		/* An index the port has no address for reads as zeros, as the
		 * kernel's table of an unused entry. */
		memset(gid, 0, sizeof(*gid));
		return 0;
	}
	memcpy(gid->raw, r.gid, 16);
	return 0;
}

XR_EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
				uint32_t flags, size_t size)
{
	struct ibv_gid_entry x = {.gid_index = index, .port_num = port, .gid_type = IBV_GID_TYPE_ROCE_V2};
	struct xrnic_gid_req req = {.index = index};
	struct xrnic_gid_rep r;
	if (flags || port != 1 || size < sizeof(x))
		return EINVAL;
	int err = xr_call(&xr_ctx(ctx)->conn, XRNIC_OP_QUERY_GID, &req, sizeof(req), &r, sizeof(r), -1, NULL, 0, NULL);
	if (err)
		return ENODATA; /* an empty entry, as libibverbs reports it */
	memcpy(x.gid.raw, r.gid, 16);
	memcpy(e, &x, sizeof(x));
	return 0;
}

/* ibv_query_gid_type is rdma-core's private verb (driver.h) that perftest
 * calls to tell RoCE v2 from v1: ours are all v2 (1). */
XR_EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
	(void)ctx;
	(void)index;
	if (port != 1)
		return EINVAL;
	*type = 1;
	return 0;
}

XR_EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	(void)ctx;
	if (port != 1 || index != 0)
		return fail(EINVAL);
	*pkey = htobe16(0xffff);
	return 0;
}

/* Protection domains and memory regions. */

XR_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct xrnic_handle_rep r;
	struct xr_pd *p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	int err = xr_call(&xr_ctx(ctx)->conn, XRNIC_OP_ALLOC_PD, NULL, 0, &r, sizeof(r), -1, NULL, 0, NULL);
	if (err) {
		free(p);
		errno = err;
		return NULL;
	}
	p->pd.context = ctx;
	p->pd.handle = r.handle;
	return &p->pd;
}

XR_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int err = xr_destroy(&xr_ctx(pd->context)->conn, XRNIC_KIND_PD, pd->handle);
	if (err)
		return set_errno(err);
	free(container_of(pd, struct xr_pd, pd));
	return 0;
}

XR_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
	struct xrnic_reg_mr req = {.addr = iova, .length = len, .pd = pd->handle, .access = access};
	struct xrnic_reg_mr_rep r;
	int fd, err;
	access &= ~IBV_ACCESS_OPTIONAL_RANGE; /* optional: ignored, as a device may */
	req.access = access;
	if ((err = xr_mem_fd(addr, len, &fd, &req.file_off))) {
		errno = err;
		return NULL;
	}
	struct xr_mr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	err = xr_call(&xr_ctx(pd->context)->conn, XRNIC_OP_REG_MR, &req, sizeof(req), &r, sizeof(r), fd, NULL, 0, NULL);
	if (err) {
		free(m);
		errno = err;
		return NULL;
	}
	m->mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = len, .handle = r.handle,
				.lkey = r.lkey, .rkey = r.rkey};
	return &m->mr;
}

XR_EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, (uintptr_t)addr, access);
}

XR_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int err = xr_destroy(&xr_ctx(mr->context)->conn, XRNIC_KIND_MR, mr->handle);
	if (err)
		return set_errno(err);
	free(container_of(mr, struct xr_mr, mr));
	return 0;
}

/* Completion channels and CQs. */

XR_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct xrnic_handle_rep r;
	int fd, got;
	struct xr_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	int err = xr_call(&xr_ctx(ctx)->conn, XRNIC_OP_CREATE_COMP_CHANNEL, NULL, 0, &r, sizeof(r), -1, &fd, 1, &got);
	if (!err && got != 1)
		err = EPROTO;
	if (err) {
		free(ch);
		errno = err;
		return NULL;
	}
	ch->ch.context = ctx;
	ch->ch.fd = fd;
	ch->handle = r.handle;
	return &ch->ch;
}

XR_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct xr_channel *ch = container_of(channel, struct xr_channel, ch);
	int err = xr_destroy(&xr_ctx(channel->context)->conn, XRNIC_KIND_COMP_CHANNEL, ch->handle);
	if (err)
		return set_errno(err);
	close(channel->fd);
	free(ch);
	return 0;
}

/* map_fd maps a ring's memfd (the reply's descriptor), which it closes. A
 * file that is shorter than len, or could shrink (no F_SEAL_SHRINK, which the
 * daemon sets), is refused (EPROTO): a mapping past its end faults. */
static void *map_fd(int fd, size_t len)
{
	struct stat st;
	void *p = MAP_FAILED;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		errno = EPROTO;
		goto out;
	}
	if (fstat(fd, &st) != 0)
		goto out;
	if (len == 0 || st.st_size < 0 || (uint64_t)st.st_size < len) {
		errno = EPROTO;
		goto out;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
out:
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* create_mapped is a create whose reply carries the memfd of the object's
 * rings: it maps len_of(rep) bytes of it into *mem, and checks that the
 * reply's rings fit there (fits), or, failing, destroys the new object (each
 * such reply starts with its handle). It returns 0 or an errno: EPROTO for a
 * reply whose rings would have us write past the mapping. */
static int create_mapped(struct xr_conn *c, uint32_t op, uint32_t kind, const void *req, uint32_t reqlen, void *rep,
			 uint32_t replen, size_t (*len_of)(const void *), int (*fits)(const void *, size_t), void **mem,
			 size_t *len)
{
	int fd = -1, got = 0;
	int err = xr_call(c, op, req, reqlen, rep, replen, -1, &fd, 1, &got);
	if (err)
		return err;
	uint32_t handle;
	memcpy(&handle, rep, sizeof(handle));
	*len = len_of(rep);
	if (got != 1) {
		err = EPROTO;
	} else if (!(*mem = map_fd(fd, *len))) {
		err = errno;
	} else if (!fits(rep, *len)) {
		munmap(*mem, *len);
		err = EPROTO;
	}
	if (err)
		xr_destroy(c, kind, handle);
	return err;
}

static size_t cq_len(const void *rep)
{
	return XRNIC_RING_HEADER + (size_t)((const struct xrnic_create_cq_rep *)rep)->entries * sizeof(struct xrnic_cqe);
}

static int cq_fits(const void *rep, size_t len)
{
	const struct xrnic_create_cq_rep *r = rep;
	return xrnic_ring_fits(0, r->entries, sizeof(struct xrnic_cqe), sizeof(struct xrnic_cqe), len);
}

static size_t qp_len(const void *rep) { return ((const struct xrnic_create_qp_rep *)rep)->mem_len; }

/* The entries must hold what the QP's caps let a post write into them. */
static int qp_fits(const void *rep, size_t len)
{
	const struct xrnic_create_qp_rep *r = rep;
	uint64_t sges = (uint64_t)r->max_send_sge * sizeof(struct xrnic_sge);
	uint64_t sq_min = sizeof(struct xrnic_send_wqe) + (sges > r->max_inline_data ? sges : r->max_inline_data);
	uint64_t rq_min = sizeof(struct xrnic_recv_wqe) + (uint64_t)r->max_recv_sge * sizeof(struct xrnic_sge);
	if (!xrnic_ring_fits(r->sq_off, r->sq_entries, r->sq_entry_size, sq_min, len))
		return 0;
	if (r->rq_entries == 0)
		return 1; /* on an SRQ */
	if (!xrnic_ring_fits(r->rq_off, r->rq_entries, r->rq_entry_size, rq_min, len))
		return 0;
	/* The two rings do not overlap. */
	uint64_t sq_end = r->sq_off + XRNIC_RING_HEADER + (uint64_t)r->sq_entries * r->sq_entry_size;
	uint64_t rq_end = r->rq_off + XRNIC_RING_HEADER + (uint64_t)r->rq_entries * r->rq_entry_size;
	return r->rq_off >= sq_end || r->sq_off >= rq_end;
}

static size_t srq_len(const void *rep) { return ((const struct xrnic_create_srq_rep *)rep)->mem_len; }

static int srq_fits(const void *rep, size_t len)
{
	const struct xrnic_create_srq_rep *r = rep;
	uint64_t min = sizeof(struct xrnic_recv_wqe) + (uint64_t)r->max_sge * sizeof(struct xrnic_sge);
	return xrnic_ring_fits(0, r->entries, r->entry_size, min, len);
}

/* create_cq makes a CQ; ex: one of the polling API (ibv_create_cq_ex). */
static struct xr_cq *create_cq(struct ibv_context *ctx, uint32_t cqe, void *cq_context,
			       struct ibv_comp_channel *channel, int ex)
{
	struct xr_context *x = xr_ctx(ctx);
	struct xrnic_create_cq req = {.cqe = cqe};
	struct xrnic_create_cq_rep r;
	struct xr_channel *ch = channel ? container_of(channel, struct xr_channel, ch) : NULL;
	if (ch)
		req.channel = ch->handle;
	struct xr_cq *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	int err = create_mapped(&x->conn, XRNIC_OP_CREATE_CQ, XRNIC_KIND_CQ, &req, sizeof(req), &r, sizeof(r), cq_len, cq_fits,
				&q->mem, &q->memlen);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	xrnic_ring_init(&q->ring, q->mem, r.entries, sizeof(struct xrnic_cqe), 0);
	pthread_spin_init(&q->lock, PTHREAD_PROCESS_PRIVATE);
	q->cq.context = ctx;
	q->cq.channel = channel;
	q->cq.cq_context = cq_context;
	q->cq.handle = r.handle;
	q->cq.cqe = r.entries;
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	if (ex)
		xr_init_cq_ex(q);
	track(x, XRNIC_KIND_CQ, r.handle, &q->cq);
	if (ch) {
		pthread_mutex_lock(&x->chmu);
		q->ch = ch;
		q->seen = __atomic_load_n(&q->ring.hdr->events, __ATOMIC_ACQUIRE);
		q->next = ch->cqs;
		ch->cqs = q;
		pthread_mutex_unlock(&x->chmu);
	}
	return q;
}

XR_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	(void)comp_vector;
	struct xr_cq *q = create_cq(ctx, cqe < 0 ? 0 : (uint32_t)cqe, cq_context, channel, 0);
	return q ? &q->cq : NULL;
}

/* xr_create_cq_ex is the context's create_cq_ex (ibv_create_cq_ex): rxe's
 * wc_flags, and the flags that are hints (the CQ locks anyway, and the
 * daemon counts its overruns anyway); a parent domain, or anything else, is
 * EOPNOTSUPP. */
static struct ibv_cq_ex *xr_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	if (a->wc_flags & ~(uint64_t)XR_WC_EX_FLAGS || a->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS ||
	    ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     a->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct xr_cq *q = create_cq(ctx, a->cqe, a->cq_context, a->channel, 1);
	return q ? &q->cqx : NULL;
}

XR_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct xr_context *x = xr_ctx(cq->context);
	struct xr_cq *q = container_of(cq, struct xr_cq, cq);
	int err = xr_destroy(&x->conn, XRNIC_KIND_CQ, cq->handle);
	if (err)
		return set_errno(err);
	untrack(x, cq);
	if (q->ch) {
		pthread_mutex_lock(&x->chmu);
		for (struct xr_cq **p = &q->ch->cqs; *p; p = &(*p)->next)
			if (*p == q) {
				*p = q->next;
				break;
			}
		pthread_mutex_unlock(&x->chmu);
	}
	/* ibv_get_cq_event(3): destroying a CQ waits for every event it
	 * returned to be acknowledged; an event thread may still hold it. */
	pthread_mutex_lock(&cq->mutex);
	while (cq->comp_events_completed != q->reported)
		pthread_cond_wait(&cq->cond, &cq->mutex);
	pthread_mutex_unlock(&cq->mutex);
	munmap(q->mem, q->memlen);
	pthread_spin_destroy(&q->lock);
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(q);
	return 0;
}

/* fired finds a CQ of the channel whose events count moved since it was last
 * returned (docs/attach.md, "Notification"), counts the event it returns
 * (ibv_destroy_cq waits for its ack) and reads its context, all while the CQ
 * is on the channel's list: a destroy takes it off first. */
static struct xr_cq *fired(struct xr_context *x, struct xr_channel *ch, void **ctx)
{
	struct xr_cq *hit = NULL;
	pthread_mutex_lock(&x->chmu);
	for (struct xr_cq *q = ch->cqs; q && !hit; q = q->next) {
		uint32_t ev = __atomic_load_n(&q->ring.hdr->events, __ATOMIC_ACQUIRE);
		if (ev != q->seen) {
			q->seen = ev;
			hit = q;
		}
	}
	if (hit) {
		pthread_mutex_lock(&hit->cq.mutex);
		hit->reported++;
		pthread_mutex_unlock(&hit->cq.mutex);
		*ctx = hit->cq.cq_context;
	}
	pthread_mutex_unlock(&x->chmu);
	return hit;
}

/* ibv_get_cq_event's wait. The channel's fd is the read end of a pipe the
 * daemon writes a byte to per event, the process's alone (its O_NONBLOCK is
 * the process's, not shared with the daemon). A CQ that fired is looked for
 * first; failing one, a byte is read, blocking as libibverbs' read of the fd
 * does, or with O_NONBLOCK failing with EAGAIN (and a signal fails the wait
 * with EINTR, as libibverbs' does). One byte a read, so that several threads
 * waiting on a channel each wake for an event of their own. With O_NONBLOCK
 * the event returned takes its byte: the fd stays readable while events
 * wait, and is not after the last (an epoll loop is woken once for each). */
XR_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct xr_channel *ch = container_of(channel, struct xr_channel, ch);
	struct xr_context *x = xr_ctx(channel->context);
	int fl = fcntl(channel->fd, F_GETFL);
	if (fl < 0)
		return -1;
	char b;
	for (;;) {
		struct xr_cq *q = fired(x, ch, cq_context);
		if (q) {
			if (fl & O_NONBLOCK) {
				ssize_t n = read(channel->fd, &b, 1); /* EAGAIN: not written yet */
				(void)n;
			}
			*cq = &q->cq;
			return 0;
		}
		ssize_t n = read(channel->fd, &b, 1);
		if (n == 0)
			errno = EIO; /* the daemon closed the channel's pipe */
		if (n <= 0)
			return -1;
	}
}

XR_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* Queue pairs and shared receive queues. */

/* create_qp makes a QP; ex: one of the work request API (ibv_qp_to_qp_ex). */
static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a, int ex)
{
	struct xr_context *x = xr_ctx(pd->context);
	struct xrnic_create_qp req = {.pd = pd->handle, .qp_type = a->qp_type, .sq_sig_all = a->sq_sig_all != 0,
				      .max_send_wr = a->cap.max_send_wr, .max_recv_wr = a->cap.max_recv_wr,
				      .max_send_sge = a->cap.max_send_sge, .max_recv_sge = a->cap.max_recv_sge,
				      .max_inline_data = a->cap.max_inline_data};
	struct xrnic_create_qp_rep r;
	if (!a->send_cq || !a->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	req.send_cq = a->send_cq->handle;
	req.recv_cq = a->recv_cq->handle;
	if (a->srq)
		req.srq = a->srq->handle;
	struct xr_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	int err = create_mapped(&x->conn, XRNIC_OP_CREATE_QP, XRNIC_KIND_QP, &req, sizeof(req), &r, sizeof(r), qp_len, qp_fits,
				&q->mem, &q->memlen);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	xrnic_ring_init(&q->sq, (uint8_t *)q->mem + r.sq_off, r.sq_entries, r.sq_entry_size, 1);
	if (r.rq_entries)
		xrnic_ring_init(&q->rq, (uint8_t *)q->mem + r.rq_off, r.rq_entries, r.rq_entry_size, 1);
	pthread_spin_init(&q->sqlock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&q->rqlock, PTHREAD_PROCESS_PRIVATE);
	q->cap = (struct ibv_qp_cap){.max_send_wr = r.max_send_wr, .max_recv_wr = r.max_recv_wr,
				     .max_send_sge = r.max_send_sge, .max_recv_sge = r.max_recv_sge,
				     .max_inline_data = r.max_inline_data};
	a->cap = q->cap; /* what was granted, as libibverbs returns it */
	q->sq_sig_all = a->sq_sig_all;
	q->qp = (struct ibv_qp){.context = pd->context, .qp_context = a->qp_context, .pd = pd, .send_cq = a->send_cq,
				.recv_cq = a->recv_cq, .srq = a->srq, .handle = r.handle, .qp_num = r.qpn,
				.state = IBV_QPS_RESET, .qp_type = a->qp_type};
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	if (ex)
		xr_init_qp_ex(q);
	track(x, XRNIC_KIND_QP, r.handle, &q->qp);
	return &q->qp;
}

XR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) { return create_qp(pd, a, 0); }

/* xr_create_qp_ex is the context's create_qp_ex (ibv_create_qp_ex): a PD's
 * QP, with the work request API when send_ops_flags asks for it; send_ops
 * the QP type does not take, and any create_flags, are EOPNOTSUPP, as
 * rxe's. */
static struct ibv_qp *xr_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	int ops = (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (a->comp_mask & ~known || (ops && a->send_ops_flags & ~xr_send_ops(a->qp_type)) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || a->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	/* ibv_qp_init_attr_ex begins with ibv_qp_init_attr's members. */
	return create_qp(a->pd, (struct ibv_qp_init_attr *)a, ops);
}

XR_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct xrnic_modify_qp req = {.handle = qp->handle, .mask = (uint32_t)mask};
	xr_wire_qp_attr(&req.attr, attr);
	int err = xr_call(&xr_ctx(qp->context)->conn, XRNIC_OP_MODIFY_QP, &req, sizeof(req), NULL, 0, -1, NULL, 0, NULL);
	if (err)
		return set_errno(err);
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

XR_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct xrnic_destroy req = {.kind = XRNIC_KIND_QP, .handle = qp->handle};
	struct xrnic_qp_attr r;
	(void)mask; /* every attribute is returned */
	int err = xr_call(&xr_ctx(qp->context)->conn, XRNIC_OP_QUERY_QP, &req, sizeof(req), &r, sizeof(r), -1, NULL, 0,
			  NULL);
	if (err)
		return set_errno(err);
	xr_ibv_qp_attr(attr, &r);
	if (init) {
		struct xr_qp *q = container_of(qp, struct xr_qp, qp);
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = q->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sq_sig_all;
	}
	qp->state = attr->qp_state;
	return 0;
}

XR_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct xr_qp *q = container_of(qp, struct xr_qp, qp);
	int err = xr_destroy(&xr_ctx(qp->context)->conn, XRNIC_KIND_QP, qp->handle);
	if (err)
		return set_errno(err);
	untrack(xr_ctx(qp->context), qp);
	munmap(q->mem, q->memlen);
	pthread_spin_destroy(&q->sqlock);
	pthread_spin_destroy(&q->rqlock);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(q);
	return 0;
}

XR_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	struct xr_context *x = xr_ctx(pd->context);
	struct xrnic_create_srq req = {.pd = pd->handle, .max_wr = a->attr.max_wr, .max_sge = a->attr.max_sge,
				       .srq_limit = a->attr.srq_limit};
	struct xrnic_create_srq_rep r;
	struct xr_srq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	int err = create_mapped(&x->conn, XRNIC_OP_CREATE_SRQ, XRNIC_KIND_SRQ, &req, sizeof(req), &r, sizeof(r), srq_len, srq_fits,
				&s->mem, &s->memlen);
	if (err) {
		free(s);
		errno = err;
		return NULL;
	}
	xrnic_ring_init(&s->ring, s->mem, r.entries, r.entry_size, 1);
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	s->max_sge = r.max_sge;
	a->attr.max_wr = r.max_wr;
	a->attr.max_sge = r.max_sge;
	s->srq = (struct ibv_srq){.context = pd->context, .srq_context = a->srq_context, .pd = pd, .handle = r.handle};
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	track(x, XRNIC_KIND_SRQ, r.handle, &s->srq);
	return &s->srq;
}

XR_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct xrnic_modify_srq req = {.handle = srq->handle, .mask = (uint32_t)mask, .max_wr = attr->max_wr,
				       .srq_limit = attr->srq_limit};
	int err = xr_call(&xr_ctx(srq->context)->conn, XRNIC_OP_MODIFY_SRQ, &req, sizeof(req), NULL, 0, -1, NULL, 0, NULL);
	return err ? set_errno(err) : 0;
}

/* ibv_query_srq: the daemon's SRQ (QUERY_SRQ); srq_limit is the limit
 * armed, 0 once its event fired (rxe_query_srq). */
XR_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct xrnic_destroy req = {.kind = XRNIC_KIND_SRQ, .handle = srq->handle};
	struct xrnic_query_srq_rep r;
	int err = xr_call(&xr_ctx(srq->context)->conn, XRNIC_OP_QUERY_SRQ, &req, sizeof(req), &r, sizeof(r), -1, NULL,
			  0, NULL);
	if (err)
		return set_errno(err);
	attr->max_wr = r.max_wr;
	attr->max_sge = r.max_sge;
	attr->srq_limit = r.srq_limit;
	return 0;
}

XR_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct xr_srq *s = container_of(srq, struct xr_srq, srq);
	int err = xr_destroy(&xr_ctx(srq->context)->conn, XRNIC_KIND_SRQ, srq->handle);
	if (err)
		return set_errno(err);
	untrack(xr_ctx(srq->context), srq);
	munmap(s->mem, s->memlen);
	pthread_spin_destroy(&s->lock);
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(s);
	return 0;
}

/* Address handles. */

XR_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct xrnic_create_ah req = {.pd = pd->handle};
	struct xrnic_handle_rep r;
	xr_wire_av(&req.av, attr);
	struct xr_ah *ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	int err = xr_call(&xr_ctx(pd->context)->conn, XRNIC_OP_CREATE_AH, &req, sizeof(req), &r, sizeof(r), -1, NULL, 0,
			  NULL);
	if (err) {
		free(ah);
		errno = err;
		return NULL;
	}
	ah->ah = (struct ibv_ah){.context = pd->context, .pd = pd, .handle = r.handle};
	return &ah->ah;
}

XR_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	int err = xr_destroy(&xr_ctx(ah->context)->conn, XRNIC_KIND_AH, ah->handle);
	if (err)
		return set_errno(err);
	free(container_of(ah, struct xr_ah, ah));
	return 0;
}

/* ibv_init_ah_from_wc: the reply's address from a UD receive's GRH, which
 * the receive buffer's first 40 bytes hold (RoCE: always there). Over IPv4
 * (RoCEv2) they hold the IPv4 header in their last 20 bytes, as rxe and
 * libibverbs lay it out; the GIDs are then the IPv4-mapped addresses. */
XR_EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
				  struct ibv_ah_attr *attr)
{
	(void)wc;
	memset(attr, 0, sizeof(*attr));
	attr->is_global = 1;
	attr->port_num = port;
	attr->grh.hop_limit = 0xff;
	union ibv_gid dgid; /* ours, that the peer wrote to */
	const uint8_t *ip4 = (const uint8_t *)grh + 20;
	if (be32toh(grh->version_tclass_flow) >> 28 != 6 && ip4[0] == 0x45) {
		xr_v4gid(&attr->grh.dgid, ip4 + 12);
		xr_v4gid(&dgid, ip4 + 16);
		attr->grh.traffic_class = ip4[1];
	} else {
		attr->grh.dgid = grh->sgid;
		dgid = grh->dgid;
		attr->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xfffff;
		attr->grh.traffic_class = (be32toh(grh->version_tclass_flow) >> 20) & 0xff;
	}
	/* The source GID index: ours that the peer wrote to. */
	union ibv_gid g;
	for (int i = 0; i < 16; i++)
		if (!ibv_query_gid(ctx, port, i, &g) && !memcmp(&g, &dgid, sizeof(g))) {
			attr->grh.sgid_index = i;
			return 0;
		}
	return fail(EINVAL);
}

XR_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

/* Asynchronous events: datagrams on the async socket (async_fd). */

XR_EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct xr_context *x = xr_ctx(ctx);
	uint8_t buf[XRNIC_MAX_MESSAGE];
	struct xrnic_hdr h;
	struct xrnic_event ev;
	for (;;) {
		ssize_t n = recv(x->conn.async, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0) { /* the daemon is gone: the device's fatal event */
			memset(event, 0, sizeof(*event));
			event->event_type = IBV_EVENT_DEVICE_FATAL;
			return 0;
		}
		if ((size_t)n != sizeof(h) + sizeof(ev))
			continue;
		memcpy(&h, buf, sizeof(h));
		memcpy(&ev, buf + sizeof(h), sizeof(ev));
		if (h.op != XRNIC_OP_EVENT || h.len != sizeof(ev))
			continue;
		memset(event, 0, sizeof(*event));
		event->event_type = ev.type;
		/* The object's pointer, by its handle: one destroyed meanwhile
		 * leaves the event without it. */
		switch (ev.kind) {
		case XRNIC_KIND_CQ:
			event->element.cq = lookup(x, ev.kind, ev.handle);
			break;
		case XRNIC_KIND_QP:
			event->element.qp = lookup(x, ev.kind, ev.handle);
			break;
		case XRNIC_KIND_SRQ:
			event->element.srq = lookup(x, ev.kind, ev.handle);
			break;
		default:
			event->element.port_num = 1;
		}
		return 0;
	}
}

XR_EXPORT void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }

/* ibv_attach_mcast, ibv_detach_mcast: the daemon's QP joins or leaves the
 * group (ATTACH_MCAST, DETACH_MCAST), with ib_uverbs_attach_mcast's errnos:
 * EINVAL for a QP not UD, a GID not multicast, a detach of a group not
 * attached; mlid is ignored on RoCE. */
static int mcast(struct ibv_qp *qp, uint32_t op, const union ibv_gid *gid, uint16_t lid)
{
	struct xrnic_mcast req = {.qp = qp->handle, .mlid = lid};
	memcpy(req.gid, gid->raw, sizeof(req.gid));
	int err = xr_call(&xr_ctx(qp->context)->conn, op, &req, sizeof(req), NULL, 0, -1, NULL, 0, NULL);
	return err ? set_errno(err) : 0;
}

XR_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, XRNIC_OP_ATTACH_MCAST, gid, lid);
}

XR_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, XRNIC_OP_DETACH_MCAST, gid, lid);
}

/* What xrnic does not do. */

XR_EXPORT int ibv_fork_init(void) { return 0; }

XR_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}

XR_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}

XR_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	(void)dir, (void)file, (void)buf, (void)size;
	return -1; /* no sysfs device: the daemon's device is not the kernel's */
}

XR_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr, uint8_t eth_mac[6],
					  uint16_t *vid)
{
	(void)ctx, (void)attr, (void)eth_mac, (void)vid;
	return EOPNOTSUPP;
}

XR_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct xr_qp *q = container_of(qp, struct xr_qp, qp);
	return q->qpx.wr_start ? &q->qpx : NULL; /* as libibverbs: only a QP made with send_ops_flags (xr_init_qp_ex) */
}

/* xrnic_call is a request on the context's session, for xrnic's librdmacm
 * (its CM IDs live in the session that holds the QPs they name). rfd, when
 * not NULL, receives the reply's descriptor. Version XRNIC_PRIVATE_1. */
XR_EXPORT int xrnic_call(struct ibv_context *ctx, uint32_t op, const void *req, uint32_t reqlen, void *rep,
			 uint32_t replen, int *rfd)
{
	int got = 0;
	int err = xr_call(&xr_ctx(ctx)->conn, op, req, reqlen, rep, replen, -1, rfd, rfd ? 1 : 0, rfd ? &got : NULL);
	if (!err && rfd && got != 1)
		err = EPROTO;
	return err;
}
