/* libibverbs' structs to the protocol's and back. The protocol's numbers are
 * libibverbs' own (docs/attach.md): states, MTUs, masks and flags copy. */
#include <string.h>

#include "internal.h"

void xr_wire_av(struct xrnic_av *w, const struct ibv_ah_attr *a)
{
	memset(w, 0, sizeof(*w));
	memcpy(w->dgid, a->grh.dgid.raw, 16);
	w->flow_label = a->grh.flow_label;
	w->sgid_index = a->grh.sgid_index;
	w->hop_limit = a->grh.hop_limit;
	w->traffic_class = a->grh.traffic_class;
	w->port_num = a->port_num;
}

/* xr_ibv_av: RoCE's address vectors are global (a GRH), as rxe reports them. */
void xr_ibv_av(struct ibv_ah_attr *a, const struct xrnic_av *w)
{
	memset(a, 0, sizeof(*a));
	memcpy(a->grh.dgid.raw, w->dgid, 16);
	a->grh.flow_label = w->flow_label;
	a->grh.sgid_index = w->sgid_index;
	a->grh.hop_limit = w->hop_limit;
	a->grh.traffic_class = w->traffic_class;
	a->port_num = w->port_num;
	a->is_global = 1;
}

void xr_wire_qp_attr(struct xrnic_qp_attr *w, const struct ibv_qp_attr *a)
{
	memset(w, 0, sizeof(*w));
	w->qkey = a->qkey;
	w->rq_psn = a->rq_psn;
	w->sq_psn = a->sq_psn;
	w->dest_qp_num = a->dest_qp_num;
	w->qp_access_flags = a->qp_access_flags;
	w->max_send_wr = a->cap.max_send_wr;
	w->max_recv_wr = a->cap.max_recv_wr;
	w->max_send_sge = a->cap.max_send_sge;
	w->max_recv_sge = a->cap.max_recv_sge;
	w->max_inline_data = a->cap.max_inline_data;
	w->pkey_index = a->pkey_index;
	w->qp_state = a->qp_state;
	w->cur_qp_state = a->cur_qp_state;
	w->path_mtu = a->path_mtu;
	w->path_mig_state = a->path_mig_state;
	w->port_num = a->port_num;
	w->timeout = a->timeout;
	w->retry_cnt = a->retry_cnt;
	w->rnr_retry = a->rnr_retry;
	w->min_rnr_timer = a->min_rnr_timer;
	w->max_rd_atomic = a->max_rd_atomic;
	w->max_dest_rd_atomic = a->max_dest_rd_atomic;
	w->sq_draining = a->en_sqd_async_notify;
	xr_wire_av(&w->ah_attr, &a->ah_attr);
}

void xr_ibv_qp_attr(struct ibv_qp_attr *a, const struct xrnic_qp_attr *w)
{
	memset(a, 0, sizeof(*a));
	a->qkey = w->qkey;
	a->rq_psn = w->rq_psn;
	a->sq_psn = w->sq_psn;
	a->dest_qp_num = w->dest_qp_num;
	a->qp_access_flags = w->qp_access_flags;
	a->cap.max_send_wr = w->max_send_wr;
	a->cap.max_recv_wr = w->max_recv_wr;
	a->cap.max_send_sge = w->max_send_sge;
	a->cap.max_recv_sge = w->max_recv_sge;
	a->cap.max_inline_data = w->max_inline_data;
	a->pkey_index = w->pkey_index;
	a->qp_state = w->qp_state;
	a->cur_qp_state = w->cur_qp_state;
	a->path_mtu = w->path_mtu;
	a->path_mig_state = w->path_mig_state;
	a->port_num = w->port_num;
	a->timeout = w->timeout;
	a->retry_cnt = w->retry_cnt;
	a->rnr_retry = w->rnr_retry;
	a->min_rnr_timer = w->min_rnr_timer;
	a->max_rd_atomic = w->max_rd_atomic;
	a->max_dest_rd_atomic = w->max_dest_rd_atomic;
	a->en_sqd_async_notify = w->sq_draining;
	xr_ibv_av(&a->ah_attr, &w->ah_attr);
}

void xr_v4gid(union ibv_gid *g, const uint8_t *a)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	memcpy(&g->raw[12], a, 4);
}
