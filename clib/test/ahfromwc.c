/* ahfromwc: ibv_init_ah_from_wc reads the GRH area of a UD receive as
 * libibverbs does: over IPv4 (RoCEv2) its last 20 bytes are the IPv4 header
 * and the GIDs are the IPv4-mapped addresses; over IPv6 it is a GRH. The
 * destination must be one of the device's GIDs (the source GID index).
 * On xrnic's library against a daemon (XRNIC_ATTACH). Prints "ok". */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include "test.h"

int main(void)
{
	struct ibv_context *ctx = open_device();
	if (!ctx)
		FAIL("no device");
	/* The device's IPv4-mapped GID and its index. */
	int v4 = -1;
	union ibv_gid g;
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	for (int i = 0; i < 16 && v4 < 0; i++)
		if (!ibv_query_gid(ctx, 1, i, &g) && !memcmp(g.raw, mapped, 12))
			v4 = i;
	if (v4 < 0)
		FAIL("no IPv4-mapped GID");
	struct ibv_grh grh;
	uint8_t *ip = (uint8_t *)&grh + 20;
	memset(&grh, 0, sizeof(grh));
	ip[0] = 0x45;
	ip[1] = 0x68; /* TOS */
	ip[8] = 64;
	ip[9] = 17;
	const uint8_t peer[4] = {10, 1, 2, 3};
	memcpy(ip + 12, peer, 4);
	memcpy(ip + 16, &g.raw[12], 4);
	struct ibv_wc wc = {.wc_flags = IBV_WC_GRH};
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &a))
		FAIL("IPv4: ibv_init_ah_from_wc failed");
	union ibv_gid want = {.raw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3}};
	if (!a.is_global || memcmp(&a.grh.dgid, &want, 16) || a.grh.sgid_index != v4 || a.grh.traffic_class != 0x68)
		FAIL("IPv4: dgid, sgid_index %d (want %d) or traffic class %#x", a.grh.sgid_index, v4, a.grh.traffic_class);
	/* IPv6: a GRH proper, to our GID at index v4 (any of ours will do). */
	memset(&grh, 0, sizeof(grh));
	grh.version_tclass_flow = htobe32(6u << 28 | 0x12u << 20 | 0xabcde);
	memcpy(&grh.sgid, &want, 16);
	grh.sgid.raw[0] = 0xfe; /* not a mapped address */
	grh.dgid = g;
	if (ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &a))
		FAIL("IPv6: ibv_init_ah_from_wc failed");
	if (memcmp(&a.grh.dgid, &grh.sgid, 16) || a.grh.sgid_index != v4 || a.grh.flow_label != 0xabcde ||
	    a.grh.traffic_class != 0x12)
		FAIL("IPv6: the attributes");
	ibv_close_device(ctx);
	printf("ok\n");
	return 0;
}
