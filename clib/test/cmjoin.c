/* cmjoin: rdma_join_multicast, rdma_join_multicast_ex and
 * rdma_leave_multicast as librdmacm over Linux: the errnos (EINVAL before a
 * bind and for a TCP ID, cma_join_multicast; librdmacm's checks of the _ex
 * attributes; EADDRNOTAVAIL for a group not joined), MULTICAST_JOIN's
 * param.ud (ucma_copy_ud_event: the IPv4-mapped MGID, qp_num 0xFFFFFF,
 * RDMA_UDP_QKEY, private_data the join's context), the ID's QP attached
 * (ibv_destroy_qp: EBUSY) but not for a send-only join, MULTICAST_ERROR with
 * status -1 when the attach fails (ucma_process_join). On xrnic's library
 * against a daemon (XRNIC_ATTACH); argv[1] is its address; prints "ok". */
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <string.h>

#include "test.h"

static int get(struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_event **ev)
{
	if (rdma_get_cm_event(ch, ev))
		return -1;
	if ((*ev)->event != want) {
		printf("event %s (status %d), want %s\n", rdma_event_str((*ev)->event), (*ev)->status,
		       rdma_event_str(want));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		FAIL("usage: cmjoin ADDR");
	struct sockaddr_in src = {.sin_family = AF_INET}, grp = {.sin_family = AF_INET}, uni;
	CHECK(inet_pton(AF_INET, argv[1], &src.sin_addr) == 1);
	CHECK(inet_pton(AF_INET, "239.1.2.4", &grp.sin_addr) == 1);
	uni = src;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *id, *tcp;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0);
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&src) == 0);
	CHECK(rdma_create_id(ch, &tcp, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(tcp, (struct sockaddr *)&src) == 0);
	CHECK(rdma_join_multicast(tcp, (struct sockaddr *)&grp, NULL) == -1 && errno == EINVAL);
	CHECK(rdma_destroy_id(tcp) == 0);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&grp) == -1 && errno == EADDRNOTAVAIL);

	struct rdma_cm_join_mc_attr_ex ex = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS, .addr = (struct sockaddr *)&grp};
	CHECK(rdma_join_multicast_ex(id, &ex, NULL) == -1 && errno == EINVAL);
	ex.comp_mask |= RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	ex.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	CHECK(rdma_join_multicast_ex(id, &ex, NULL) == -1 && errno == EINVAL);
	ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED;
	CHECK(rdma_join_multicast_ex(id, &ex, NULL) == -1 && errno == ENOTSUP);

	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	CHECK(rdma_create_qp(id, NULL, &qa) == 0);
	int ctx1, ctx2, ctx3;
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&grp, &ctx1) == 0);
	struct rdma_cm_event *ev;
	CHECK(get(ch, RDMA_CM_EVENT_MULTICAST_JOIN, &ev) == 0);
	union ibv_gid mgid = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 239, 1, 2, 4}};
	struct rdma_ud_param *u = &ev->param.ud;
	if (ev->id != id || ev->status || u->private_data != &ctx1 || u->qp_num != 0xffffff || u->qkey != 0x01234567 ||
	    !u->ah_attr.is_global || memcmp(u->ah_attr.grh.dgid.raw, mgid.raw, 16))
		FAIL("MULTICAST_JOIN: status %d private_data %p (want %p) qp_num %#x qkey %#x global %d", ev->status,
		     u->private_data, (void *)&ctx1, u->qp_num, u->qkey, u->ah_attr.is_global);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(ibv_destroy_qp(id->qp) == EBUSY); /* attached */

	/* Send-only: a join, and no attach. */
	ex = (struct rdma_cm_join_mc_attr_ex){.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					      .join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
					      .addr = (struct sockaddr *)&grp};
	CHECK(rdma_join_multicast_ex(id, &ex, &ctx2) == 0);
	CHECK(get(ch, RDMA_CM_EVENT_MULTICAST_JOIN, &ev) == 0);
	CHECK(ev->param.ud.private_data == &ctx2);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&grp) == 0); /* the send-only join, the latest */
	CHECK(ibv_destroy_qp(id->qp) == EBUSY);			     /* still the first's */
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&grp) == 0);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&grp) == -1 && errno == EADDRNOTAVAIL);

	/* A unicast address: joined, but the QP's attach fails. */
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&uni, &ctx3) == 0);
	CHECK(get(ch, RDMA_CM_EVENT_MULTICAST_ERROR, &ev) == 0);
	CHECK(ev->status == -1 && ev->param.ud.private_data == &ctx3);
	CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&uni) == 0);

	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
