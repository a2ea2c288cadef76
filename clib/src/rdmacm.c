/* librdmacm on the daemon's connection manager (docs/attach.md, "The
 * connection manager"): the daemon's rdma_cm runs the IDs, as the kernel's
 * rdma_ucm runs librdmacm's, and each event channel is a socket of its own.
 * What librdmacm does in the process is done here: an ID's QP goes through
 * INIT, RTR and RTS with rdma_init_qp_attr's attributes, a CONNECT_RESPONSE
 * for an ID with a QP is completed in rdma_get_cm_event (RTR, RTS,
 * rdma_establish) and reported as ESTABLISHED, and the QP goes to ERR on
 * REJECTED, UNREACHABLE and rdma_disconnect.
 *
 * The IDs of a process live on one device, the first that libibverbs lists
 * (its daemon's session holds them and the QPs they name): id->verbs, and
 * id->pd the device's PD, as librdmacm gives an ID with its device
 * (ucma_get_device). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h" /* XR_EXPORT, and conv.c's conversions, linked in here too */

/* libibverbs' (xrnic's): a request on the context's session. */
int xrnic_call(struct ibv_context *ctx, uint32_t op, const void *req, uint32_t reqlen, void *rep, uint32_t replen,
	       int *rfd);

#define UDP_QKEY 0x01234567 /* RDMA_UDP_QKEY */

/* A stashed event: one read from a channel its ID has left (see
 * rdma_get_cm_event), kept for the channel the ID is on now. */
struct xr_stashed {
	struct xr_stashed *next;
	size_t len;
	uint8_t msg[];
};

struct xr_chan {
	struct rdma_event_channel ch;
	uint32_t handle;
	struct xr_stashed *stash, **tail; /* under mu */
};

struct xr_id {
	struct rdma_cm_id id;
	uint32_t handle;
	/* own is the channel made for an ID created without one: the ID is
	 * synchronous (librdmacm's sync), each call that starts an event
	 * waits for it (complete). */
	struct xr_chan *own;
	struct ibv_qp_init_attr *qp_init_attr; /* a passive endpoint's, for rdma_get_request */
	struct ibv_sa_path_rec path;
	/* reported counts the events rdma_get_cm_event returned of this ID (a
	 * request's, of its listener), completed those acked: rdma_destroy_id
	 * waits for the two to meet, as librdmacm's does (under mu). */
	unsigned reported, completed;
	struct xr_mc *mcs; /* its joins, newest first (under mu) */
	uint32_t mc_seq;
	struct xr_id *next;
};

/* xr_mc is a multicast join (librdmacm's struct cma_multicast): uid names
 * it in the daemon's events. */
struct xr_mc {
	struct xr_mc *next;
	uint32_t uid;
	uint32_t join_flags;
	void *context;
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	uint16_t mlid;
};

struct xr_event {
	struct rdma_cm_event ev;
	struct xr_id *of; /* the ID it counts against (reported) */
	uint8_t private_data[256];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t acked = PTHREAD_COND_INITIALIZER; /* an xr_id's completed grew */
static struct ibv_context *dev;	   /* the CM's device */
static struct ibv_pd *default_pd;   /* librdmacm's per-device PD (cma_dev->pd): an ID's id->pd */
static struct ibv_device **devlist; /* kept open for rdma_get_devices */
static struct xr_id *ids;	   /* by handle, for events */

static int fail(int err)
{
	errno = err;
	return -1;
}

/* device opens the first device, once. */
static struct ibv_context *device(void)
{
	pthread_mutex_lock(&mu);
	if (!dev) {
		int n = 0;
		devlist = ibv_get_device_list(&n);
		if (devlist && n > 0)
			dev = ibv_open_device(devlist[0]);
	}
	struct ibv_context *d = dev;
	pthread_mutex_unlock(&mu);
	if (!d)
		errno = ENODEV;
	return d;
}

static int call(uint32_t op, const void *req, uint32_t reqlen, void *rep, uint32_t replen, int *rfd)
{
	struct ibv_context *d = device();
	if (!d)
		return -1;
	int err = xrnic_call(d, op, req, reqlen, rep, replen, rfd);
	return err ? fail(err) : 0;
}

static struct xr_id *xid(struct rdma_cm_id *id) { return (struct xr_id *)id; }

/* event_errno is the errno a synchronous call reports for a failed event:
 * ECONNREFUSED for a rejection, else its status's magnitude (librdmacm's). */
static int event_errno(const struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return ECONNREFUSED;
	return ev->status < 0 ? -ev->status : ev->status;
}

/* complete is librdmacm's synchronous mode (ucma_complete): on an ID made
 * without a channel, a call that started an event waits for it on the ID's
 * own channel and keeps it in id->event (acked by the next such wait or by
 * rdma_destroy_id); its status is the call's errno, ECONNREFUSED for a
 * rejection. The event's type is not looked at, as librdmacm's is not. */
static int complete(struct rdma_cm_id *id)
{
	if (!xid(id)->own)
		return 0;
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (rdma_get_cm_event(id->channel, &id->event))
		return -1;
	return id->event->status ? fail(event_errno(id->event)) : 0;
}

/* device_pd is the device's PD, made once (librdmacm's cma_dev->pd): every
 * ID's id->pd until a QP of another PD is made on it. */
static struct ibv_pd *device_pd(void)
{
	if (!device())
		return NULL;
	pthread_mutex_lock(&mu);
	if (!default_pd)
		default_pd = ibv_alloc_pd(dev); /* failing, it sets errno */
	struct ibv_pd *pd = default_pd;
	pthread_mutex_unlock(&mu);
	return pd;
}

/* pd_of is the PD a QP made without one takes: the ID's. */
static struct ibv_pd *pd_of(struct rdma_cm_id *id) { return id->pd ? id->pd : device_pd(); }

/* stashed is a copy of the message msg (an event), NULL if out of memory
 * (the event is lost then, as one past a full queue is). */
static struct xr_stashed *stashed(const uint8_t *msg, size_t len)
{
	struct xr_stashed *st = malloc(sizeof(*st) + len);
	if (st) {
		st->next = NULL;
		st->len = len;
		memcpy(st->msg, msg, len);
	}
	return st;
}

/* append_locked queues st on channel c; the caller holds mu. */
static void append_locked(struct xr_chan *c, struct xr_stashed *st)
{
	*c->tail = st;
	c->tail = &st->next;
}

/* stash keeps a copy of the message msg (an event) for channel c. */
static void stash(struct rdma_event_channel *c, const uint8_t *msg, size_t len)
{
	struct xr_stashed *st = stashed(msg, len);
	if (!st)
		return;
	pthread_mutex_lock(&mu);
	append_locked((struct xr_chan *)c, st);
	pthread_mutex_unlock(&mu);
}

/* unstash takes channel c's first stashed message into buf; its length, or 0
 * if none. */
static size_t unstash(struct rdma_event_channel *c, uint8_t *buf, size_t size)
{
	struct xr_chan *xc = (struct xr_chan *)c;
	size_t n = 0;
	pthread_mutex_lock(&mu);
	struct xr_stashed *st = xc->stash;
	if (st) {
		if (!(xc->stash = st->next))
			xc->tail = &xc->stash;
		n = st->len < size ? st->len : size;
		memcpy(buf, st->msg, n);
	}
	pthread_mutex_unlock(&mu);
	free(st);
	return n;
}

/* find_locked is the ID of handle, or NULL; the caller holds mu. */
static struct xr_id *find_locked(uint32_t handle)
{
	struct xr_id *x;
	for (x = ids; x && x->handle != handle; x = x->next)
		;
	return x;
}

/* report is the ID of handle with one more event reported, or NULL: found and
 * counted at once, so that a rdma_destroy_id running meanwhile either has not
 * untracked it yet and waits for the event's ack, or has, and the event is
 * dropped; the ID is never freed under the event. */
static struct xr_id *report(uint32_t handle)
{
	pthread_mutex_lock(&mu);
	struct xr_id *x = find_locked(handle);
	if (x)
		x->reported++;
	pthread_mutex_unlock(&mu);
	return x;
}

/* complete_event acks one event reported of x. */
static void complete_event(struct xr_id *x)
{
	pthread_mutex_lock(&mu);
	x->completed++;
	pthread_cond_broadcast(&acked);
	pthread_mutex_unlock(&mu);
}

static void track(struct xr_id *x)
{
	pthread_mutex_lock(&mu);
	x->next = ids;
	ids = x;
	pthread_mutex_unlock(&mu);
}

static void untrack(struct xr_id *x)
{
	pthread_mutex_lock(&mu);
	for (struct xr_id **p = &ids; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
	pthread_mutex_unlock(&mu);
}

/* event_of reads the event message msg of n bytes: 0 if it is not one. */
static int event_of(const uint8_t *msg, ssize_t n, struct xrnic_cm_event *w)
{
	struct xrnic_hdr h;
	if ((size_t)n != sizeof(h) + sizeof(*w))
		return 0;
	memcpy(&h, msg, sizeof(h));
	memcpy(w, msg + sizeof(h), sizeof(*w));
	return h.op == XRNIC_OP_CM_EVENT && h.len == sizeof(*w);
}

/* stash_home stashes the event message msg, read from channel c, on its ID's
 * own channel, and returns 1, when the ID is synchronous and migrated off c
 * after the daemon sent the event (a synchronous listener's request, moved to
 * a channel of its own): the library's next wait for it looks there first
 * (the kernel's ucma_migrate_id moves an ID's pending events along). Found and
 * stashed under mu at once: a rdma_destroy_id meanwhile cannot free the
 * channel in between. An asynchronous ID's event stays on c (0): a stash on
 * its channel would not show on that channel's fd, nor wake a thread waiting
 * in it. */
static int stash_home(struct rdma_event_channel *c, const struct xrnic_cm_event *w, const uint8_t *msg, size_t len)
{
	if (w->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return 0;
	struct xr_stashed *st = NULL;
	for (;;) {
		pthread_mutex_lock(&mu);
		struct xr_id *x = find_locked(w->id);
		struct xr_chan *own = x && x->own && &x->own->ch != c ? x->own : NULL;
		if (own && st)
			append_locked(own, st);
		pthread_mutex_unlock(&mu);
		if (!own) {
			free(st);
			return 0;
		}
		if (st || !(st = stashed(msg, len)))
			return 1; /* stashed, or lost for want of memory */
		/* The copy is made outside the lock, once a stash is wanted; the
		 * ID is looked up again with it in hand. */
	}
}

/* take_own hands what a synchronous ID's own channel holds, stashed or in its
 * socket (that ID's events alone), to channel to, when the ID moves there:
 * not lost with the channel. They wait for to's next rdma_get_cm_event; to's
 * fd does not show them, as no stash does. */
static void take_own(struct rdma_event_channel *own, struct rdma_event_channel *to)
{
	uint8_t buf[XRNIC_MAX_MESSAGE];
	size_t n;
	while ((n = unstash(own, buf, sizeof(buf))))
		stash(to, buf, n);
	ssize_t r;
	while ((r = recv(own->fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		stash(to, buf, (size_t)r);
}

/* Addresses. */

static int wire_addr(struct xrnic_sockaddr *w, const struct sockaddr *sa)
{
	memset(w, 0, sizeof(*w));
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		memcpy(w->ip, &in->sin_addr, 4);
		w->port = ntohs(in->sin_port);
		w->family = 4;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		memcpy(w->ip, &in6->sin6_addr, 16);
		w->port = ntohs(in6->sin6_port);
		w->family = 6;
	} else {
		return EAFNOSUPPORT;
	}
	return 0;
}

static void sock_addr(struct sockaddr_storage *ss, const struct xrnic_sockaddr *w)
{
	memset(ss, 0, sizeof(*ss));
	if (w->family == 4) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		memcpy(&in->sin_addr, w->ip, 4);
		in->sin_port = htons(w->port);
	} else if (w->family == 6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		in6->sin6_family = AF_INET6;
		memcpy(&in6->sin6_addr, w->ip, 16);
		in6->sin6_port = htons(w->port);
	}
}

static socklen_t addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* addr_eq compares two group addresses, ports aside (ucma_addrcmp). */
static int addr_eq(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* Event channels. */

XR_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct xrnic_handle_rep r;
	int fd;
	struct xr_chan *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (call(XRNIC_OP_CM_CREATE_CHANNEL, NULL, 0, &r, sizeof(r), &fd)) {
		free(c);
		return NULL;
	}
	c->ch.fd = fd;
	c->handle = r.handle;
	c->tail = &c->stash;
	return &c->ch;
}

XR_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct xr_chan *c = (struct xr_chan *)channel;
	struct xrnic_destroy req = {.kind = XRNIC_KIND_CM_CHANNEL, .handle = c->handle};
	call(XRNIC_OP_DESTROY, &req, sizeof(req), NULL, 0, NULL);
	close(channel->fd);
	for (struct xr_stashed *st = c->stash, *next; st; st = next) {
		next = st->next;
		free(st);
	}
	free(c);
}

/* IDs. */

static struct xr_id *new_id(uint32_t handle, struct rdma_event_channel *ch, void *context, enum rdma_port_space ps)
{
	struct xr_id *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->handle = handle;
	x->id.verbs = dev;
	pthread_mutex_lock(&mu);
	x->id.pd = default_pd; /* made before the first ID (rdma_create_id) */
	pthread_mutex_unlock(&mu);
	x->id.channel = ch;
	x->id.context = context;
	x->id.ps = ps;
	x->id.port_num = 1;
	x->id.qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	x->id.route.path_rec = &x->path;
	track(x);
	return x;
}

XR_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			     enum rdma_port_space ps)
{
	struct xr_chan *own = NULL;
	/* An ID with its device has the device's PD (librdmacm's
	 * ucma_get_device): UCX's rdmacm transport makes its QPs on id->pd,
	 * and reads id->pd->context. */
	if (!device_pd())
		return -1;
	if (!channel) { /* synchronous: a channel of the ID's own */
		if (!(channel = rdma_create_event_channel()))
			return -1;
		own = (struct xr_chan *)channel;
	}
	struct xrnic_cm_id_req req = {.id = ((struct xr_chan *)channel)->handle, .arg = ps};
	struct xrnic_handle_rep r;
	if (call(XRNIC_OP_CM_CREATE_ID, &req, sizeof(req), &r, sizeof(r), NULL)) {
		if (own)
			rdma_destroy_event_channel(channel);
		return -1;
	}
	struct xr_id *x = new_id(r.handle, channel, context, ps);
	if (!x) {
		struct xrnic_destroy d = {.kind = XRNIC_KIND_CM_ID, .handle = r.handle};
		call(XRNIC_OP_DESTROY, &d, sizeof(d), NULL, 0, NULL);
		if (own)
			rdma_destroy_event_channel(channel);
		return fail(ENOMEM);
	}
	x->own = own;
	*id = &x->id;
	return 0;
}

XR_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct xr_id *x = xid(id);
	struct xrnic_destroy req = {.kind = XRNIC_KIND_CM_ID, .handle = x->handle};
	if (call(XRNIC_OP_DESTROY, &req, sizeof(req), NULL, 0, NULL))
		return -1;
	untrack(x);
	if (id->event)
		rdma_ack_cm_event(id->event);
	/* librdmacm's: the events reported of the ID are acked first. */
	pthread_mutex_lock(&mu);
	while (x->completed < x->reported)
		pthread_cond_wait(&acked, &mu);
	pthread_mutex_unlock(&mu);
	if (x->own)
		rdma_destroy_event_channel(&x->own->ch);
	while (x->mcs) { /* the daemon's ID left them (cma_leave_mc_groups) */
		struct xr_mc *mc = x->mcs;
		x->mcs = mc->next;
		free(mc);
	}
	free(x->qp_init_attr);
	free(x);
	return 0;
}

/* rdma_migrate_id: a NULL channel makes the ID synchronous, on a channel of
 * its own; a synchronous ID moved to a channel is synchronous no more, and its
 * own channel goes (librdmacm's). */
XR_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct xr_id *x = xid(id);
	struct xr_chan *own = NULL;
	if (!channel) {
		if (x->own)
			return fail(EINVAL);
		if (!(channel = rdma_create_event_channel()))
			return -1;
		own = (struct xr_chan *)channel;
	}
	struct xrnic_cm_id_req req = {.id = x->handle, .arg = ((struct xr_chan *)channel)->handle};
	if (call(XRNIC_OP_CM_MIGRATE_ID, &req, sizeof(req), NULL, 0, NULL)) {
		if (own)
			rdma_destroy_event_channel(channel);
		return -1;
	}
	struct xr_chan *was = x->own;
	pthread_mutex_lock(&mu); /* stash_home reads them */
	id->channel = channel;
	x->own = own;
	pthread_mutex_unlock(&mu);
	if (was) {
		if (id->event) {
			rdma_ack_cm_event(id->event);
			id->event = NULL;
		}
		take_own(&was->ch, channel);
		rdma_destroy_event_channel(&was->ch);
	}
	return 0;
}

XR_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct xrnic_cm_addr req = {.id = xid(id)->handle};
	int err = wire_addr(&req.src, addr);
	if (err)
		return fail(err);
	struct xrnic_sockaddr bound;
	if (call(XRNIC_OP_CM_BIND_ADDR, &req, sizeof(req), &bound, sizeof(bound), NULL))
		return -1;
	memcpy(&id->route.addr.src_storage, addr, addr_len(addr));
	/* rdma_bind_addr(3): for port 0 the rdma_cm chose one, at bind
	 * (cma_alloc_any_port), which rdma_get_src_port returns. sin_port and
	 * sin6_port lie at the same offset. */
	id->route.addr.src_sin.sin_port = htons(bound.port);
	return 0;
}

XR_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)
{
	struct xrnic_cm_addr req = {.id = xid(id)->handle};
	(void)timeout_ms;
	int err = wire_addr(&req.src, src);
	if (!err)
		err = dst ? wire_addr(&req.dst, dst) : EINVAL;
	if (err)
		return fail(err);
	if (call(XRNIC_OP_CM_RESOLVE_ADDR, &req, sizeof(req), NULL, 0, NULL))
		return -1;
	memcpy(&id->route.addr.dst_storage, dst, addr_len(dst));
	return complete(id);
}

static int simple(struct rdma_cm_id *id, uint32_t op, uint32_t arg)
{
	struct xrnic_cm_id_req req = {.id = xid(id)->handle, .arg = arg};
	return call(op, &req, sizeof(req), NULL, 0, NULL);
}

XR_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	(void)timeout_ms;
	if (simple(id, XRNIC_OP_CM_RESOLVE_ROUTE, 0))
		return -1;
	return complete(id);
}

XR_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct xrnic_cm_id_req req = {.id = xid(id)->handle, .arg = backlog < 0 ? 0 : (uint32_t)backlog};
	struct xrnic_sockaddr bound;
	if (call(XRNIC_OP_CM_LISTEN, &req, sizeof(req), &bound, sizeof(bound), NULL))
		return -1;
	/* The port bound (rdma_bind_addr's), as the daemon has it. */
	id->route.addr.src_sin.sin_port = htons(bound.port);
	return 0;
}

XR_EXPORT int rdma_establish(struct rdma_cm_id *id) { return simple(id, XRNIC_OP_CM_ESTABLISH, 0); }

/* rdma_notify: the QP's event to the daemon's ID (CM_NOTIFY), whose errnos
 * are the kernel's: IBV_EVENT_COMM_EST establishes a passive ID whose RTU has
 * not come, and ESTABLISHED follows (cm_establish); EISCONN when established,
 * EINVAL otherwise and for other events (ib_cm_notify). */
XR_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	return simple(id, XRNIC_OP_CM_NOTIFY, (uint32_t)event);
}

/* rdma_join_multicast2 is librdmacm's: the join is the ID's (newest first)
 * and the daemon's ID joins (CM_JOIN_MCAST, cma_join_multicast's errnos);
 * MULTICAST_JOIN follows, whose processing attaches the ID's QP. */
static int join(struct rdma_cm_id *id, struct sockaddr *addr, uint32_t flags, void *context)
{
	struct xr_id *x = xid(id);
	struct xrnic_cm_join req = {.id = x->handle};
	int err = addr ? wire_addr(&req.addr, addr) : EINVAL;
	if (err)
		return fail(err == EAFNOSUPPORT ? EINVAL : err); /* ucma_addrlen: 0 */
	struct xr_mc *mc = calloc(1, sizeof(*mc));
	if (!mc)
		return fail(ENOMEM);
	mc->context = context;
	mc->join_flags = flags;
	memcpy(&mc->addr, addr, addr_len(addr));
	pthread_mutex_lock(&mu);
	mc->uid = req.uid = ++x->mc_seq;
	mc->next = x->mcs;
	x->mcs = mc;
	pthread_mutex_unlock(&mu);
	if (call(XRNIC_OP_CM_JOIN_MCAST, &req, sizeof(req), NULL, 0, NULL)) {
		int e = errno;
		pthread_mutex_lock(&mu);
		for (struct xr_mc **p = &x->mcs; *p; p = &(*p)->next)
			if (*p == mc) {
				*p = mc->next;
				break;
			}
		pthread_mutex_unlock(&mu);
		free(mc);
		return fail(e);
	}
	return complete(id);
}

XR_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return join(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

/* rdma_join_multicast_ex: librdmacm's checks of the attributes. A send-only
 * member's QP is not attached. */
XR_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *a, void *context)
{
	if (a->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return fail(ENOTSUP);
	if (!(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
		return fail(EINVAL);
	if (!(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) || a->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return fail(EINVAL);
	return join(id, a->addr, a->join_flags, context);
}

/* rdma_leave_multicast: the ID's latest join of addr (EADDRNOTAVAIL if none)
 * goes; its QP is detached, the detach's error ignored, and the daemon's ID
 * leaves (CM_LEAVE_MCAST), as librdmacm's. */
XR_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct xr_id *x = xid(id);
	struct xrnic_cm_join req = {.id = x->handle};
	int err = addr ? wire_addr(&req.addr, addr) : EINVAL;
	if (err)
		return fail(err == EAFNOSUPPORT ? EINVAL : err);
	pthread_mutex_lock(&mu);
	struct xr_mc **p, *mc;
	for (p = &x->mcs; *p && !addr_eq((struct sockaddr *)&(*p)->addr, addr); p = &(*p)->next)
		;
	mc = *p;
	if (mc)
		*p = mc->next;
	pthread_mutex_unlock(&mu);
	if (!mc)
		return fail(EADDRNOTAVAIL);
	req.uid = mc->uid; /* the daemon leaves this join, as librdmacm leaves by the join */
	if (id->qp && mc->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		ibv_detach_mcast(id->qp, &mc->mgid, mc->mlid);
	free(mc);
	return call(XRNIC_OP_CM_LEAVE_MCAST, &req, sizeof(req), NULL, 0, NULL);
}

XR_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask)
{
	struct xrnic_cm_id_req req = {.id = xid(id)->handle, .arg = attr->qp_state};
	struct xrnic_cm_init_qp_attr_rep r;
	if (call(XRNIC_OP_CM_INIT_QP_ATTR, &req, sizeof(req), &r, sizeof(r), NULL))
		return -1;
	xr_ibv_qp_attr(attr, &r.attr);
	if (!attr->ah_attr.port_num)
		attr->ah_attr.port_num = 1; /* the device's one port */
	*mask = (int)r.mask;
	return 0;
}

/* modify moves the ID's QP to state with the daemon's attributes; depth
 * and resources, when not negative, override the read depths (librdmacm's
 * ucma_modify_qp_rtr and _rts take the consumer's). */
static int modify(struct rdma_cm_id *id, enum ibv_qp_state state, int resources, int depth)
{
	struct ibv_qp_attr a = {.qp_state = state};
	int mask, err;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -1;
	if (state == IBV_QPS_RTR && resources >= 0)
		a.max_dest_rd_atomic = (uint8_t)resources;
	if (state == IBV_QPS_RTS && depth >= 0)
		a.max_rd_atomic = (uint8_t)depth;
	if ((err = ibv_modify_qp(id->qp, &a, mask)))
		return fail(err);
	return 0;
}

static void qp_to_err(struct rdma_cm_id *id)
{
	if (id->qp) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
		ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
	}
}

/* destroy_cqs frees the CQs and channels rdma_create_qp made for the ID
 * (librdmacm's ucma_destroy_cqs), keeping errno. */
static void destroy_cqs(struct rdma_cm_id *id)
{
	int e = errno;
	if (id->recv_cq)
		ibv_destroy_cq(id->recv_cq);
	if (id->recv_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	if (id->send_cq)
		ibv_destroy_cq(id->send_cq);
	if (id->send_cq_channel)
		ibv_destroy_comp_channel(id->send_cq_channel);
	id->recv_cq = id->send_cq = NULL;
	id->recv_cq_channel = id->send_cq_channel = NULL;
	errno = e;
}

/* create_qp is rdma_create_qp; a QP of the work request API (ibv_wr_*) when
 * ops, with send_ops. */
static int create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr, int ops, uint64_t send_ops)
{
	if (id->qp)
		return fail(EINVAL);
	if (!pd && !(pd = pd_of(id)))
		return -1;
	attr->qp_type = id->qp_type;
	if (!attr->srq)
		attr->srq = id->srq; /* rdma_create_srq's, if any */
	/* Without CQs of the consumer's, the ID's own (librdmacm's
	 * ucma_create_cqs). */
	if (!attr->send_cq || !attr->recv_cq) {
		if (!id->recv_cq) {
			id->recv_cq_channel = ibv_create_comp_channel(pd->context);
			id->recv_cq = id->recv_cq_channel ? ibv_create_cq(pd->context, attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1,
									  id, id->recv_cq_channel, 0)
							  : NULL;
			id->send_cq_channel = ibv_create_comp_channel(pd->context);
			id->send_cq = id->send_cq_channel ? ibv_create_cq(pd->context, attr->cap.max_send_wr ? attr->cap.max_send_wr : 1,
									  id, id->send_cq_channel, 0)
							  : NULL;
			if (!id->recv_cq || !id->send_cq) {
				destroy_cqs(id); /* a retry starts afresh */
				return -1;
			}
		}
		if (!attr->send_cq)
			attr->send_cq = id->send_cq;
		if (!attr->recv_cq)
			attr->recv_cq = id->recv_cq;
	}
	struct ibv_qp *qp;
	if (ops) {
		struct ibv_qp_init_attr_ex ax = {.qp_context = attr->qp_context, .send_cq = attr->send_cq,
						 .recv_cq = attr->recv_cq, .srq = attr->srq, .cap = attr->cap,
						 .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all,
						 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
						 .pd = pd, .send_ops_flags = send_ops};
		if ((qp = ibv_create_qp_ex(pd->context, &ax)))
			attr->cap = ax.cap;
	} else {
		qp = ibv_create_qp(pd, attr);
	}
	if (!qp) {
		destroy_cqs(id);
		return -1;
	}
	id->qp = qp;
	int err = modify(id, IBV_QPS_INIT, -1, -1);
	if (!err && id->qp_type == IBV_QPT_UD) {
		err = modify(id, IBV_QPS_RTR, -1, -1);
		if (!err)
			err = modify(id, IBV_QPS_RTS, -1, -1);
	}
	if (err) {
		int e = errno;
		ibv_destroy_qp(qp);
		id->qp = NULL;
		destroy_cqs(id);
		return fail(e);
	}
	id->pd = pd;
	return 0;
}

XR_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return create_qp(id, pd, attr, 0, 0);
}

XR_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr a = {.qp_context = attr->qp_context, .send_cq = attr->send_cq, .recv_cq = attr->recv_cq,
				     .srq = attr->srq, .cap = attr->cap, .qp_type = attr->qp_type,
				     .sq_sig_all = attr->sq_sig_all};
	if (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return fail(ENOSYS);
	int err = create_qp(id, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL, &a,
			    (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0, attr->send_ops_flags);
	if (!err)
		attr->cap = a.cap;
	return err;
}

/* rdma_create_srq: an SRQ of the ID, on pd or the ID's, which the QP
 * rdma_create_qp makes then takes its receives from, and rdma_post_recv
 * posts to (rdma_verbs.h). Basic SRQs only: xrnic has no XRC. */
XR_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (id->srq)
		return fail(EINVAL);
	if (!pd && !(pd = pd_of(id)))
		return -1;
	struct ibv_srq *srq = ibv_create_srq(pd, attr);
	if (!srq)
		return -1;
	if (!id->pd)
		id->pd = pd;
	id->srq = srq;
	return 0;
}

XR_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return fail(EINVAL);
	if (attr->srq_type != IBV_SRQT_BASIC || attr->comp_mask & ~(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD))
		return fail(EOPNOTSUPP);
	struct ibv_srq_init_attr a = {.srq_context = attr->srq_context, .attr = attr->attr};
	int err = rdma_create_srq(id, (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : NULL, &a);
	if (!err)
		attr->attr = a.attr;
	return err;
}

XR_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

XR_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(id); /* the ID's own, if rdma_create_qp made them */
}

static int conn(struct rdma_cm_id *id, uint32_t op, struct rdma_conn_param *p)
{
	struct xrnic_cm_conn req = {.id = xid(id)->handle};
	if (p) {
		if (p->private_data_len > sizeof(req.param.private_data))
			return fail(EINVAL);
		req.param.qp_num = p->qp_num;
		req.param.responder_resources = p->responder_resources;
		req.param.initiator_depth = p->initiator_depth;
		req.param.flow_control = p->flow_control;
		req.param.retry_count = p->retry_count;
		req.param.rnr_retry_count = p->rnr_retry_count;
		req.param.srq = p->srq;
		req.param.private_data_len = p->private_data_len;
		if (p->private_data_len)
			memcpy(req.param.private_data, p->private_data, p->private_data_len);
	} else { /* librdmacm's defaults */
		req.param.responder_resources = req.param.initiator_depth = 1;
		req.param.retry_count = req.param.rnr_retry_count = 7;
	}
	if (id->qp) {
		req.param.qp_num = id->qp->qp_num; /* the daemon checks it is ours */
		/* The QP says whether it has an SRQ, not the caller's param
		 * (librdmacm's rdma_connect and rdma_accept). */
		req.param.srq = id->qp->srq != NULL;
	}
	if (id->qp_type == IBV_QPT_UD)
		req.param.qkey = UDP_QKEY;
	return call(op, &req, sizeof(req), NULL, 0, NULL);
}

XR_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	if (conn(id, XRNIC_OP_CM_CONNECT, p))
		return -1;
	return complete(id); /* ESTABLISHED, made in rdma_get_cm_event */
}

XR_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	/* librdmacm's rdma_accept: an RC ID's QP to RTR and RTS first. */
	if (id->qp && id->qp_type != IBV_QPT_UD) {
		int res = p ? p->responder_resources : 1, depth = p ? p->initiator_depth : 1;
		if (modify(id, IBV_QPS_RTR, res, -1) || modify(id, IBV_QPS_RTS, -1, depth)) {
			int e = errno;
			rdma_reject(id, NULL, 0);
			return fail(e);
		}
	}
	if (conn(id, XRNIC_OP_CM_ACCEPT, p))
		return -1;
	if (id->qp_type == IBV_QPT_UD && xid(id)->own) {
		/* No event follows a UD accept (librdmacm). */
		if (id->event) {
			rdma_ack_cm_event(id->event);
			id->event = NULL;
		}
		return 0;
	}
	return complete(id);
}

XR_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t len)
{
	struct rdma_conn_param p = {.private_data = private_data, .private_data_len = len};
	struct xrnic_cm_conn req = {.id = xid(id)->handle};
	if (len > sizeof(req.param.private_data))
		return fail(EINVAL);
	req.param.private_data_len = len;
	if (len)
		memcpy(req.param.private_data, p.private_data, len);
	return call(XRNIC_OP_CM_REJECT, &req, sizeof(req), NULL, 0, NULL);
}

XR_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	qp_to_err(id); /* its posted work requests complete, flushed */
	if (simple(id, XRNIC_OP_CM_DISCONNECT, 0))
		return -1;
	return complete(id); /* DISCONNECTED */
}

/* rdma_set_option: the daemon's ID takes TOS, REUSEADDR and AFONLY, with the
 * kernel's sizes (ucma_set_option_id: a u8 TOS, an int flag, else EINVAL);
 * other options are ENOSYS, as the kernel has them for a device it does not
 * know them for. */
XR_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	uint32_t v;
	if (level != RDMA_OPTION_ID)
		return fail(ENOSYS);
	switch (optname) {
	case RDMA_OPTION_ID_TOS:
		if (!optval || optlen != sizeof(uint8_t))
			return fail(EINVAL);
		v = *(uint8_t *)optval;
		break;
	case RDMA_OPTION_ID_REUSEADDR:
	case RDMA_OPTION_ID_AFONLY:
		if (!optval || optlen != sizeof(int))
			return fail(EINVAL);
		v = *(int *)optval ? 1 : 0;
		break;
	default:
		return fail(ENOSYS);
	}
	struct xrnic_cm_option req = {.id = xid(id)->handle, .option = (uint32_t)optname, .value = v};
	return call(XRNIC_OP_CM_SET_OPTION, &req, sizeof(req), NULL, 0, NULL);
}

XR_EXPORT uint16_t rdma_get_src_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.src_addr;
	return sa->sa_family == AF_INET6 ? id->route.addr.src_sin6.sin6_port : id->route.addr.src_sin.sin_port;
}

XR_EXPORT uint16_t rdma_get_dst_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.dst_addr;
	return sa->sa_family == AF_INET6 ? id->route.addr.dst_sin6.sin6_port : id->route.addr.dst_sin.sin_port;
}

/* Events: one datagram each on the channel's socket. */

static void fill_route(struct xr_id *x, const struct xrnic_cm_event *w)
{
	struct sockaddr_storage ss;
	if (w->src.family) {
		sock_addr(&ss, &w->src);
		memcpy(&x->id.route.addr.src_storage, &ss, sizeof(ss));
	}
	if (w->dst.family) {
		sock_addr(&ss, &w->dst);
		memcpy(&x->id.route.addr.dst_storage, &ss, sizeof(ss));
	}
	/* The path of RoCE's route: the GIDs of the addresses. */
	struct ibv_sa_path_rec *p = &x->path;
	const struct xrnic_sockaddr *a[2] = {&w->src, &w->dst};
	union ibv_gid *g[2] = {&p->sgid, &p->dgid};
	for (int i = 0; i < 2; i++) {
		if (a[i]->family == 4)
			xr_v4gid(g[i], a[i]->ip);
		else if (a[i]->family == 6)
			memcpy(g[i]->raw, a[i]->ip, 16);
	}
	p->pkey = htons(0xffff);
	p->hop_limit = 64;
	x->id.route.num_paths = 1;
}

/* daemon_gone reports whether the device's control socket has hung up. */
static int daemon_gone(void)
{
	struct pollfd p = {.fd = dev ? dev->cmd_fd : -1, .events = POLLIN};
	return !dev || (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)));
}

/* process_join is librdmacm's for MULTICAST_JOIN and MULTICAST_ERROR: the
 * join's context in param.ud.private_data, and for a join the ID's QP
 * attached to the group unless the join is send-only (ucma_process_join);
 * if that fails the event is MULTICAST_ERROR, status -1. -1 when the join
 * (uid) is gone: the event is dropped. */
static int process_join(struct xr_id *x, struct rdma_cm_event *ev, uint32_t uid)
{
	pthread_mutex_lock(&mu);
	struct xr_mc *mc;
	for (mc = x->mcs; mc && mc->uid != uid; mc = mc->next)
		;
	if (mc) {
		ev->param.ud.private_data = mc->context;
		ev->param.ud.private_data_len = 0;
		if (ev->event == RDMA_CM_EVENT_MULTICAST_JOIN) {
			mc->mgid = ev->param.ud.ah_attr.grh.dgid;
			mc->mlid = ev->param.ud.ah_attr.dlid;
		}
	}
	union ibv_gid mgid = mc ? mc->mgid : (union ibv_gid){0};
	uint16_t mlid = mc ? mc->mlid : 0;
	int attach = mc && ev->event == RDMA_CM_EVENT_MULTICAST_JOIN && x->id.qp &&
		     mc->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	pthread_mutex_unlock(&mu);
	if (!mc)
		return -1;
	if (attach) {
		int err = ibv_attach_mcast(x->id.qp, &mgid, mlid);
		if (err) {
			errno = err;
			ev->status = -1;
			ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
		}
	}
	return 0;
}

XR_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	uint8_t buf[XRNIC_MAX_MESSAGE];
	struct xrnic_cm_event w;
	for (;;) {
		ssize_t n = (ssize_t)unstash(channel, buf, sizeof(buf));
		if (!n)
			n = recv(channel->fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1; /* EAGAIN for a non-blocking channel, as librdmacm */
		if (n == 0) {
			if (daemon_gone())
				return fail(ENODEV);
			/* The process destroyed the channel while this thread
			 * waited on it: librdmacm's read stays blocked in the
			 * kernel then (the close does not wake it), and so does
			 * this one. rping's threads rely on it. */
			for (;;)
				pause();
		}
		if (!event_of(buf, n, &w))
			continue;
		if (stash_home(channel, &w, buf, (size_t)n))
			continue;
		/* A request counts against its listener, as librdmacm's. */
		int req = w.event == RDMA_CM_EVENT_CONNECT_REQUEST;
		struct xr_id *of = report(req ? w.listen_id : w.id), *x = of, *l = NULL;
		if (!of)
			continue; /* its ID (a request's listener) was destroyed */
		if (req) {
			l = of;
			x = new_id(w.id, l->id.channel, l->id.context, l->id.ps);
			if (!x) {
				complete_event(of);
				return fail(ENOMEM);
			}
			/* A synchronous listener's requests are synchronous IDs, on
			 * channels of their own (ucma_process_conn_req; failing, it
			 * reads on). */
			if (l->own && rdma_migrate_id(&x->id, NULL)) {
				rdma_reject(&x->id, NULL, 0);
				rdma_destroy_id(&x->id);
				complete_event(of);
				continue;
			}
		}
		struct xr_event *e = calloc(1, sizeof(*e));
		if (!e) {
			complete_event(of);
			return fail(ENOMEM);
		}
		e->of = of;
		fill_route(x, &w);
		e->ev.id = &x->id;
		e->ev.listen_id = l ? &l->id : NULL;
		e->ev.event = w.event;
		e->ev.status = w.status;
		uint32_t plen = w.param.private_data_len < sizeof(w.param.private_data) ? w.param.private_data_len
											 : sizeof(w.param.private_data);
		memcpy(e->private_data, w.param.private_data, plen);
		if (x->id.ps == RDMA_PS_UDP) {
			struct rdma_ud_param *u = &e->ev.param.ud;
			u->private_data = plen ? e->private_data : NULL;
			u->private_data_len = (uint8_t)plen;
			u->qp_num = w.param.qp_num;
			u->qkey = w.param.qkey;
			xr_ibv_av(&u->ah_attr, &w.ah_attr);
			u->ah_attr.port_num = 1;
		} else {
			struct rdma_conn_param *c = &e->ev.param.conn;
			c->private_data = plen ? e->private_data : NULL;
			c->private_data_len = (uint8_t)plen;
			c->responder_resources = w.param.responder_resources;
			c->initiator_depth = w.param.initiator_depth;
			c->flow_control = w.param.flow_control;
			c->retry_count = w.param.retry_count;
			c->rnr_retry_count = w.param.rnr_retry_count;
			c->srq = w.param.srq;
			c->qp_num = w.param.qp_num;
		}
		switch (e->ev.event) {
		case RDMA_CM_EVENT_MULTICAST_JOIN:
		case RDMA_CM_EVENT_MULTICAST_ERROR:
			if (process_join(x, &e->ev, w.listen_id)) { /* left meanwhile */
				complete_event(of);
				free(e);
				continue;
			}
			break;
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			/* librdmacm's ucma_process_conn_resp, for an ID with a QP. */
			if (x->id.qp) {
				if (modify(&x->id, IBV_QPS_RTR, -1, -1) || modify(&x->id, IBV_QPS_RTS, -1, -1) ||
				    rdma_establish(&x->id)) {
					qp_to_err(&x->id);
					rdma_reject(&x->id, NULL, 0);
					e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
					e->ev.status = -1;
				} else {
					e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
				}
			}
			break;
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_CONNECT_ERROR:
			qp_to_err(&x->id);
			break;
		default:
			break;
		}
		*event = &e->ev;
		return 0;
	}
}

XR_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return fail(EINVAL); /* librdmacm's */
	struct xr_event *e = (struct xr_event *)event;
	complete_event(e->of);
	free(e);
	return 0;
}

XR_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	 "RDMA_CM_EVENT_ADDR_ERROR",	   "RDMA_CM_EVENT_ROUTE_RESOLVED",
		"RDMA_CM_EVENT_ROUTE_ERROR",	 "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	 "RDMA_CM_EVENT_UNREACHABLE",	   "RDMA_CM_EVENT_REJECTED",
		"RDMA_CM_EVENT_ESTABLISHED",	 "RDMA_CM_EVENT_DISCONNECTED",	   "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
		"RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

/* Devices and addresses. */

XR_EXPORT struct ibv_context **rdma_get_devices(int *num)
{
	struct ibv_context **list = calloc(2, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = device();
	if (num)
		*num = list[0] ? 1 : 0;
	return list;
}

XR_EXPORT void rdma_free_devices(struct ibv_context **list) { free(list); }

/* The endpoint calls (rdma_create_ep(3), rdma_get_request(3)): synchronous
 * IDs, as librdmacm's. */

XR_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct xr_id *l = xid(listen);
	if (!l->own)
		return fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	int err = 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED || ev->status)
		err = event_errno(ev);
	else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = EINVAL;
	else if (l->qp_init_attr) {
		struct ibv_qp_init_attr a = *l->qp_init_attr;
		if (rdma_create_qp(ev->id, listen->pd, &a))
			err = errno;
	}
	if (err) {
		listen->event = ev; /* acked by the next call, as librdmacm's */
		return fail(err);
	}
	*id = ev->id;
	(*id)->event = ev;
	return 0;
}

XR_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	rdma_destroy_id(id); /* frees a passive endpoint's qp_init_attr */
}

XR_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm;
	if (!res)
		return fail(EINVAL);
	if (rdma_create_id(NULL, &cm, NULL, res->ai_port_space))
		return -1;
	if (res->ai_flags & RAI_PASSIVE) {
		/* Bound, not listening; its requests' QPs take qp_init_attr
		 * (ucma_passive_ep). */
		if (rdma_bind_addr(cm, res->ai_src_addr))
			goto err;
		if (pd)
			cm->pd = pd;
		if (qp_init_attr) {
			struct xr_id *x = xid(cm);
			if (!(x->qp_init_attr = malloc(sizeof(*qp_init_attr)))) {
				errno = ENOMEM;
				goto err;
			}
			*x->qp_init_attr = *qp_init_attr;
			x->qp_init_attr->qp_type = res->ai_qp_type;
		}
	} else {
		if (rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000) || rdma_resolve_route(cm, 2000))
			goto err;
		if (qp_init_attr) {
			qp_init_attr->qp_type = res->ai_qp_type;
			if (rdma_create_qp(cm, pd, qp_init_attr))
				goto err;
		}
	}
	*id = cm;
	return 0;
err:;
	int e = errno;
	rdma_destroy_ep(cm);
	return fail(e);
}

XR_EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			       struct rdma_addrinfo **res)
{
	struct addrinfo h = {.ai_socktype = SOCK_STREAM}, *ai;
	int passive = hints && (hints->ai_flags & RAI_PASSIVE);
	if (hints) {
		h.ai_family = hints->ai_family;
		if (hints->ai_flags & RAI_NUMERICHOST)
			h.ai_flags |= AI_NUMERICHOST;
	}
	if (passive)
		h.ai_flags |= AI_PASSIVE;
	int err = getaddrinfo(node, service, &h, &ai);
	if (err)
		return fail(err == EAI_SYSTEM ? errno : ENODEV);
	struct rdma_addrinfo *first = NULL, **tail = &first;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		struct rdma_addrinfo *r = calloc(1, sizeof(*r));
		struct sockaddr *sa = malloc(a->ai_addrlen);
		if (!r || !sa) {
			free(r);
			free(sa);
			break;
		}
		memcpy(sa, a->ai_addr, a->ai_addrlen);
		r->ai_flags = hints ? hints->ai_flags : 0;
		r->ai_family = a->ai_family;
		r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
		r->ai_qp_type = r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
		if (passive) {
			r->ai_src_addr = sa;
			r->ai_src_len = a->ai_addrlen;
		} else {
			r->ai_dst_addr = sa;
			r->ai_dst_len = a->ai_addrlen;
		}
		*tail = r;
		tail = &r->ai_next;
	}
	freeaddrinfo(ai);
	if (!first)
		return fail(ENOMEM);
	*res = first;
	return 0;
}

XR_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = next;
	}
}
