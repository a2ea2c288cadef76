/* The rest of libibverbs' public calls: the rate conversions (IBTA's static
 * rates), and the verbs xrnic's device does not offer, which fail as
 * libibverbs' do when a provider lacks them (EOPNOTSUPP) rather than being
 * missing symbols that stop a program at load. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>

#include "internal.h"

/* The static rates: each enum value's multiple of 2.5 Gbit/s (the SDR-era
 * rates ibv_rate_to_mult knows; -1 for the others) and its Mbit/s, as columns
 * so that one search serves each direction. */
enum { MULT, MBPS };
static const struct {
	enum ibv_rate rate;
	int v[2];
} rates[] = {
	{IBV_RATE_2_5_GBPS, {1, 2500}},       {IBV_RATE_5_GBPS, {2, 5000}},         {IBV_RATE_10_GBPS, {4, 10000}},
	{IBV_RATE_20_GBPS, {8, 20000}},       {IBV_RATE_30_GBPS, {12, 30000}},      {IBV_RATE_40_GBPS, {16, 40000}},
	{IBV_RATE_60_GBPS, {24, 60000}},      {IBV_RATE_80_GBPS, {32, 80000}},      {IBV_RATE_120_GBPS, {48, 120000}},
	{IBV_RATE_14_GBPS, {-1, 14062}},      {IBV_RATE_56_GBPS, {-1, 56250}},      {IBV_RATE_112_GBPS, {-1, 112500}},
	{IBV_RATE_168_GBPS, {-1, 168750}},    {IBV_RATE_25_GBPS, {-1, 25781}},      {IBV_RATE_100_GBPS, {-1, 103125}},
	{IBV_RATE_200_GBPS, {-1, 206250}},    {IBV_RATE_300_GBPS, {-1, 309375}},    {IBV_RATE_28_GBPS, {-1, 28125}},
	{IBV_RATE_50_GBPS, {-1, 53125}},      {IBV_RATE_400_GBPS, {-1, 425000}},    {IBV_RATE_600_GBPS, {-1, 637500}},
	{IBV_RATE_800_GBPS, {-1, 850000}},    {IBV_RATE_1200_GBPS, {-1, 1275000}},
};

#define NRATES (sizeof(rates) / sizeof(rates[0]))

/* rate's value in column col, or -1 for a rate not in the table. */
static int by_rate(enum ibv_rate rate, int col)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == rate)
			return rates[i].v[col];
	return -1;
}

/* The rate whose column col holds v, or IBV_RATE_MAX; v > 0, as -1 marks a
 * rate with no multiple rather than a value to find. */
static enum ibv_rate by_value(int col, int v)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].v[col] == v && v > 0)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

XR_EXPORT int ibv_rate_to_mult(enum ibv_rate rate) { return by_rate(rate, MULT); }

XR_EXPORT enum ibv_rate mult_to_ibv_rate(int mult) { return by_value(MULT, mult); }

XR_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate) { return by_rate(rate, MBPS); }

XR_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps) { return by_value(MBPS, mbps); }

/* A fork's child gets private copies of registered memory (mem.c), as the
 * kernel copies pinned pages: ibv_fork_init is not needed. */
XR_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

/* No kernel device, so no kernel index. */
XR_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	(void)device;
	return -1;
}

XR_EXPORT struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

/* The table of the port's GIDs, entry by entry as _ibv_query_gid_ex reads
 * them; the empty ones left out, as libibverbs leaves them. */
XR_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries, size_t max,
				       uint32_t flags, size_t size)
{
	struct ibv_port_attr pa;
	size_t n = 0;
	if (flags || size < sizeof(*entries) || ibv_query_port(ctx, 1, &pa))
		return -EINVAL;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		int err = _ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0, sizeof(e));
		if (err == ENODATA)
			continue;
		if (err)
			return -err;
		if (n == max)
			return -EINVAL;
		*(struct ibv_gid_entry *)((char *)entries + n * size) = e;
		n++;
	}
	return (ssize_t)n;
}

XR_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq, (void)cqe;
	return EOPNOTSUPP;
}

XR_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr, (void)flags, (void)pd, (void)addr, (void)length, (void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

XR_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
					   int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

/* Enhanced connection establishment: a device without it (rxe) answers
 * EOPNOTSUPP. */
XR_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

XR_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

/* No ordering promise beyond the IBTA's: 0, as libibverbs answers for a
 * provider that does not say. */
XR_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp, (void)op, (void)flags;
	return 0;
}

/* The port's one P_Key, the default full-member 0xFFFF, at index 0
 * (ibv_query_pkey). */
XR_EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	__be16 p0;
	if (ibv_query_pkey(ctx, port, 0, &p0))
		return -1;
	if (p0 != pkey) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}

/* Sharing objects between processes by their kernel handles: there are no
 * kernel handles here. */
XR_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

XR_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t handle)
{
	(void)ctx, (void)handle;
	errno = EOPNOTSUPP;
	return NULL;
}

XR_EXPORT void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }

XR_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
	(void)pd, (void)handle;
	errno = EOPNOTSUPP;
	return NULL;
}

XR_EXPORT void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }

XR_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t handle)
{
	(void)ctx, (void)handle;
	errno = EOPNOTSUPP;
	return NULL;
}

XR_EXPORT void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }
