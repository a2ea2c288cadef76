/* ring_peer: the C side of nic/shm's cross-language tests (TestCLayout,
 * TestCRing). It prints the structs' layout, or acts as the producer of a send
 * ring or the consumer of a CQ ring in a memfd the Go test passes as fd 3. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "xrnic/attach.h"

#define S(t) printf("%s %zu\n", #t, sizeof(struct t))
#define F(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(struct t, f))

static void layout(void)
{
	printf("version %d\n", XRNIC_ATTACH_VERSION);
	printf("max_message %d\n", XRNIC_MAX_MESSAGE);
	printf("max_fds %d\n", XRNIC_MAX_FDS);
	S(xrnic_hdr);
	S(xrnic_hello_req);
	S(xrnic_hello_rep);
	S(xrnic_device);
	S(xrnic_port);
	S(xrnic_gid_req);
	S(xrnic_gid_rep);
	S(xrnic_handle_rep);
	S(xrnic_reg_mr);
	S(xrnic_reg_mr_rep);
	S(xrnic_create_cq);
	S(xrnic_create_cq_rep);
	S(xrnic_create_qp);
	S(xrnic_create_qp_rep);
	S(xrnic_av);
	S(xrnic_qp_attr);
	S(xrnic_modify_qp);
	S(xrnic_create_ah);
	S(xrnic_destroy);
	S(xrnic_mcast);
	S(xrnic_event);
	S(xrnic_create_srq);
	S(xrnic_create_srq_rep);
	S(xrnic_modify_srq);
	S(xrnic_query_srq_rep);
	S(xrnic_sockaddr);
	S(xrnic_conn_param);
	S(xrnic_cm_id_req);
	S(xrnic_cm_join);
	S(xrnic_cm_addr);
	S(xrnic_cm_conn);
	S(xrnic_cm_option);
	S(xrnic_cm_init_qp_attr_rep);
	S(xrnic_cm_event);
	S(xrnic_ring_hdr);
	S(xrnic_sge);
	S(xrnic_send_wqe);
	S(xrnic_recv_wqe);
	S(xrnic_cqe);
	F(xrnic_device, fw_ver);
	F(xrnic_qp_attr, pkey_index);
	F(xrnic_qp_attr, sq_draining);
	F(xrnic_qp_attr, ah_attr);
	F(xrnic_conn_param, private_data);
	F(xrnic_cm_event, param);
	F(xrnic_cm_event, ah_attr);
	F(xrnic_mcast, qp);
	F(xrnic_mcast, mlid);
	F(xrnic_port, active_width);
	F(xrnic_port, active_speed);
	printf("op_cm_leave_mcast %d\n", XRNIC_OP_CM_LEAVE_MCAST);
	F(xrnic_ring_hdr, cons);
	F(xrnic_ring_hdr, flags);
	F(xrnic_ring_hdr, arm);
	F(xrnic_ring_hdr, events);
	F(xrnic_send_wqe, imm);
	F(xrnic_send_wqe, num_sge);
	F(xrnic_send_wqe, remote_addr);
	F(xrnic_send_wqe, ah);
	F(xrnic_send_wqe, compare_add);
	F(xrnic_send_wqe, swap);
	F(xrnic_cqe, imm);
	F(xrnic_cqe, qp_num);
	F(xrnic_cqe, wc_flags);
	F(xrnic_cqe, pkey_index);
	F(xrnic_cqe, sl);
	F(xrnic_cqe, dlid_path_bits);
}

static void *map(const char *len)
{
	void *m = mmap(NULL, strtoul(len, NULL, 0), PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return m;
}

/* produce MEMLEN OFF ENTRIES ESIZE COUNT: COUNT send WQEs of one SGE each. */
static int produce(char **a)
{
	uint8_t *mem = map(a[0]);
	struct xrnic_ring r;
	xrnic_ring_init(&r, mem + strtoul(a[1], NULL, 0), strtoul(a[2], NULL, 0), strtoul(a[3], NULL, 0), 1);
	uint32_t count = strtoul(a[4], NULL, 0);
	for (uint32_t i = 0; i < count;) {
		int64_t free = xrnic_ring_free(&r);
		if (free < 0) {
			fprintf(stderr, "corrupted ring\n");
			return 1;
		}
		if (free == 0)
			continue;
		struct xrnic_send_wqe w = {
			.wr_id = i, .opcode = i % 11, .send_flags = 2, .imm = {i & 0xff, 1, 2, 3}, .num_sge = 1,
			.remote_addr = (uint64_t)i << 20, .rkey = 0xabc00 + i, .ah = 7, .remote_qpn = 0x11,
			.remote_qkey = 0x22, .compare_add = ~(uint64_t)i, .swap = (uint64_t)i * 3,
		};
		struct xrnic_sge s = {.addr = 0x1000 + i, .length = i * 3, .lkey = 0x77};
		uint8_t *e = xrnic_ring_entry(&r, r.own);
		memcpy(e, &w, sizeof w);
		memcpy(e + sizeof w, &s, sizeof s);
		xrnic_ring_commit(&r, 1);
		i++;
	}
	return 0;
}

/* consume MEMLEN OFF ENTRIES COUNT: COUNT completions, checked. */
static int consume(char **a)
{
	uint8_t *mem = map(a[0]);
	struct xrnic_ring r;
	xrnic_ring_init(&r, mem + strtoul(a[1], NULL, 0), strtoul(a[2], NULL, 0), sizeof(struct xrnic_cqe), 0);
	uint32_t count = strtoul(a[3], NULL, 0);
	for (uint32_t i = 0; i < count;) {
		int64_t avail = xrnic_ring_avail(&r);
		if (avail < 0) {
			fprintf(stderr, "corrupted ring\n");
			return 1;
		}
		if (avail == 0)
			continue;
		struct xrnic_cqe c;
		memcpy(&c, xrnic_ring_entry(&r, r.own), sizeof c);
		xrnic_ring_release(&r, 1);
		if (c.wr_id != i || c.status != i % 22 || c.opcode != 128 + i % 2 || c.byte_len != i * 7 ||
		    c.imm[0] != 1 || c.imm[3] != (i & 0xff) || c.qp_num != 0x11 || c.src_qp != i ||
		    c.wc_flags != 3 || c.pkey_index != 9 || c.sl != 4 || c.dlid_path_bits != 5) {
			fprintf(stderr, "completion %u: wr_id %llu status %u opcode %u byte_len %u\n", i,
				(unsigned long long)c.wr_id, c.status, c.opcode, c.byte_len);
			return 1;
		}
		i++;
	}
	printf("ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "layout") == 0) {
		layout();
		return 0;
	}
	if (argc == 7 && strcmp(argv[1], "produce") == 0)
		return produce(argv + 2);
	if (argc == 6 && strcmp(argv[1], "consume") == 0)
		return consume(argv + 2);
	fprintf(stderr, "usage: ring_peer layout | produce MEMLEN OFF ENTRIES ESIZE COUNT | consume MEMLEN OFF ENTRIES COUNT\n");
	return 2;
}
