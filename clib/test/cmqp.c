/* cmqp: rdma_create_qp without CQs of the caller's makes the ID's own (two
 * CQs and two completion channels, as librdmacm's ucma_create_cqs), and
 * rdma_destroy_qp frees them: 50 cycles leave no descriptor open. argv[1]:
 * a local IPv4 address of the device. A bound ID has its device's PD in
 * id->pd, as librdmacm's (ucma_get_device; UCX makes QPs on it). On xrnic's
 * library against a daemon (XRNIC_ATTACH). rdma_create_qp_ex takes
 * send_ops_flags. Prints "ok". */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include "test.h"

int main(int argc, char **argv)
{
	if (argc != 2)
		FAIL("usage: cmqp IPV4");
	struct sockaddr_in sa = {.sin_family = AF_INET};
	if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1)
		FAIL("address");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		FAIL("event channel");
	int before = -1;
	for (int i = 0; i < 50; i++) {
		struct rdma_cm_id *id;
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			FAIL("create_id");
		if (rdma_bind_addr(id, (struct sockaddr *)&sa))
			FAIL("bind_addr %s", argv[1]);
		if (!id->pd || id->pd->context != id->verbs)
			FAIL("a bound ID has no PD of its device");
		struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
		if (!pd)
			FAIL("alloc_pd");
		struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
		if (rdma_create_qp(id, pd, &qa))
			FAIL("create_qp");
		if (!id->send_cq || !id->recv_cq || !id->send_cq_channel || !id->recv_cq_channel)
			FAIL("rdma_create_qp made no CQs of the ID's own");
		rdma_destroy_qp(id);
		if (id->send_cq || id->recv_cq || id->send_cq_channel || id->recv_cq_channel)
			FAIL("rdma_destroy_qp left the ID's CQs");
		if (ibv_dealloc_pd(pd))
			FAIL("dealloc_pd");
		if (rdma_destroy_id(id))
			FAIL("destroy_id");
		if (i == 0)
			before = open_fds();
	}
	int after = open_fds();
	if (after != before)
		FAIL("%d descriptors open after 49 more cycles, %d after the first", after, before);

	/* rdma_create_qp_ex with send_ops_flags: a QP of the work request API
	 * (ibv_qp_to_qp_ex), granted caps returned; send_ops its type lacks fail. */
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_bind_addr(id, (struct sockaddr *)&sa))
		FAIL("create_id, bind_addr");
	struct ibv_qp_init_attr_ex ax = {.qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .send_ops_flags = IBV_QP_EX_WITH_BIND_MW};
	if (!rdma_create_qp_ex(id, &ax) || errno != EOPNOTSUPP || id->qp)
		FAIL("rdma_create_qp_ex with IBV_QP_EX_WITH_BIND_MW: errno %d", errno);
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	if (rdma_create_qp_ex(id, &ax))
		FAIL("rdma_create_qp_ex: errno %d", errno);
	if (!ibv_qp_to_qp_ex(id->qp) || ax.cap.max_send_wr < 4)
		FAIL("rdma_create_qp_ex made no extended QP (max_send_wr %u)", ax.cap.max_send_wr);
	rdma_destroy_qp(id);
	if (rdma_destroy_id(id))
		FAIL("destroy_id");
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
