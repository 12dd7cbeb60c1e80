/* rdma-core's own mlx5 send and poll code (Debian 12's libmlx5.a, rdma-core
 * 44) driven without a device, for callgrind: an RC QP, its CQ and its
 * BlueFlame register are initialised by hand as mlx5_create_qp and
 * mlx5_create_cq would leave them on a ConnectX (thread-domain style: no
 * locks), and this program plays the device by writing one requester CQE
 * per WQE. Measured (each in its own function, like test/bench's
 * mlx5-callgrind):
 *
 *   rc_measure_wr       ibv_wr_start, ibv_wr_send, ibv_wr_set_inline_data
 *                       (8 bytes), ibv_wr_complete: the extended post API
 *   rc_measure_post     ibv_post_send of the same, IBV_SEND_INLINE
 *   rc_measure_poll     ibv_poll_cq(cq, 1, &wc) of its completion (after
 *                       the ibv_wr_* sends)
 *   rc_measure_poll_ex  ibv_start_poll, ibv_wc_read_opcode, ibv_end_poll of
 *                       it on the extended CQ (after the ibv_post_send sends)
 *
 * Built against the rdma-core v44.0 source tree's private headers (the
 * struct layouts the archive was compiled with) by run.sh; not part of
 * Shunt's build. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The static archive's symbols carry rdma-core's version prefix. */
#define mlx5_qp_fill_wr_pfns rdmacore44_0_mlx5_qp_fill_wr_pfns
#define mlx5_post_send rdmacore44_0_mlx5_post_send
#define mlx5_poll_cq_v1 rdmacore44_0_mlx5_poll_cq_v1
#define mlx5_cq_fill_pfns rdmacore44_0_mlx5_cq_fill_pfns
#include "mlx5.h"

enum { SQ_BBS = 256, CQES = 1024, QPN = 0x1234, UIDX = 7 };

static struct mlx5_context ctx;
static struct mlx5_qp qp;
static struct mlx5_cq cq;
static struct mlx5_bf bf;
static uint64_t wrid[SQ_BBS];
static unsigned wqe_head[SQ_BBS];
static uint32_t wr_data[SQ_BBS];
static __be32 qp_db[2], cq_db[2];
static struct mlx5_resource *uidx_page[MLX5_UIDX_TABLE_MASK + 1];
static void *sq_buf, *cq_buf, *bf_page;
static unsigned dev_ci; /* the "device's" CQ producer index */
static char msg[8] = "8 bytes";

static void setup(void)
{
	if (posix_memalign(&sq_buf, 4096, SQ_BBS * 64) || posix_memalign(&cq_buf, 4096, CQES * 64) ||
	    posix_memalign(&bf_page, 4096, 4096))
		abort();
	memset(sq_buf, 0, SQ_BBS * 64);
	memset(bf_page, 0, 4096);
	/* mlx5_alloc_cq_buf: every CQE invalid, owned by hardware. */
	for (int i = 0; i < CQES; i++) {
		struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)((char *)cq_buf + i * 64);
		memset(c, 0, 64);
		c->op_own = MLX5_CQE_INVALID << 4;
	}

	ctx.cqe_version = MLX5_CQE_VERSION_V1; /* what ConnectX-4 and later negotiate */
	ctx.uidx_table[UIDX >> MLX5_UIDX_TABLE_SHIFT].table = uidx_page;
	ctx.uidx_table[UIDX >> MLX5_UIDX_TABLE_SHIFT].refcnt = 1;

	struct ibv_context *ibctx = &ctx.ibv_ctx.context;
	cq.verbs_cq.cq.context = ibctx;
	cq.verbs_cq.cq.cqe = CQES - 1;
	cq.buf_a.buf = cq_buf;
	cq.active_buf = &cq.buf_a;
	cq.cqe_sz = 64;
	cq.dbrec = cq_db;
	cq.lock.need_lock = 0; /* single-threaded CQ */
	/* ibv_create_cq_ex with IBV_CREATE_CQ_ATTR_SINGLE_THREADED, no extra wc fields. */
	cq.flags = MLX5_CQ_FLAGS_EXTENDED | MLX5_CQ_FLAGS_SINGLE_THREADED;
	struct ibv_cq_init_attr_ex cattr = {.cqe = CQES - 1, .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
	if (mlx5_cq_fill_pfns(&cq, &cattr, &ctx))
		abort();

	bf.reg = (char *)bf_page + 0x800;
	bf.buf_size = 256;
	bf.uuarn = 1; /* a BlueFlame register, not the shared doorbell-only one */
	bf.need_lock = 0;

	struct ibv_qp *ib = &qp.verbs_qp.qp;
	ib->context = ibctx;
	ib->qp_num = QPN;
	ib->qp_type = IBV_QPT_RC;
	ib->state = IBV_QPS_RTS;
	ib->send_cq = &cq.verbs_cq.cq;
	ib->recv_cq = &cq.verbs_cq.cq;
	qp.ibv_qp = ib;
	qp.rsc.type = MLX5_RSC_TYPE_QP;
	qp.rsc.rsn = UIDX;
	uidx_page[UIDX & MLX5_UIDX_TABLE_MASK] = &qp.rsc;
	qp.max_inline_data = 64;
	qp.bf = &bf;
	qp.sq_start = sq_buf;
	qp.sq.wrid = wrid;
	qp.sq.wqe_head = wqe_head;
	qp.sq.wr_data = wr_data;
	qp.sq.wqe_cnt = SQ_BBS;
	qp.sq.max_post = SQ_BBS;
	qp.sq.max_gs = 1;
	qp.sq.qp_state_max_gs = 1; /* RTS */
	qp.sq.wqe_shift = 6;
	qp.sq.qend = (char *)sq_buf + SQ_BBS * 64;
	qp.sq.lock.need_lock = 0; /* thread domain */
	qp.db = qp_db;

	struct ibv_qp_init_attr_ex attr = {
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND,
	};
	if (mlx5_qp_fill_wr_pfns(&qp, &attr, NULL))
		abort();
}

/* The device: check the WQE the doorbell names, write its requester CQE. */
static int device_complete(unsigned wqe_idx)
{
	const struct mlx5_wqe_ctrl_seg *c = (const void *)((char *)sq_buf + (wqe_idx & (SQ_BBS - 1)) * 64);
	const struct mlx5_wqe_inl_data_seg *inl = (const void *)(c + 1);
	if ((be32toh(c->opmod_idx_opcode) & 0xff) != MLX5_OPCODE_SEND ||
	    (be32toh(c->opmod_idx_opcode) >> 8 & 0xffff) != (wqe_idx & 0xffff) ||
	    be32toh(c->qpn_ds) != (QPN << 8 | 2) || !(c->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) ||
	    be32toh(inl->byte_count) != (MLX5_INLINE_SEG | 8) || memcmp(inl + 1, msg, 8) ||
	    memcmp(bf.reg + (bf.offset ^ bf.buf_size), c, 64)) {
		fprintf(stderr, "WQE %u is not an 8-byte inline signaled SEND, or not BlueFlamed whole\n", wqe_idx);
		return -1;
	}
	struct mlx5_cqe64 *e = (struct mlx5_cqe64 *)((char *)cq_buf + (dev_ci & (CQES - 1)) * 64);
	memset(e, 0, 63);
	e->wqe_counter = htobe16(wqe_idx & 0xffff);
	e->sop_drop_qpn = htobe32(MLX5_OPCODE_SEND << 24 | QPN);
	e->srqn_uidx = htobe32(UIDX);
	__atomic_store_n(&e->op_own, MLX5_CQE_REQ << 4 | ((dev_ci / CQES) & 1), __ATOMIC_RELEASE);
	dev_ci++;
	return 0;
}

__attribute__((noinline)) int rc_measure_wr(struct ibv_qp_ex *q, uint64_t id)
{
	ibv_wr_start(q);
	q->wr_id = id;
	q->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(q);
	ibv_wr_set_inline_data(q, msg, 8);
	return ibv_wr_complete(q);
}

__attribute__((noinline)) int rc_measure_post(struct ibv_qp *q, uint64_t id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)msg, .length = 8};
	struct ibv_send_wr wr = {
		.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad;
	/* ibv_post_send's inline body: the provider's function through ops. */
	return mlx5_post_send(q, &wr, &bad);
}

__attribute__((noinline)) int rc_measure_poll(struct ibv_cq *c, struct ibv_wc *wc)
{
	/* ibv_poll_cq's inline body calls context->ops.poll_cq: mlx5_poll_cq_v1 for CQE version 1. */
	return mlx5_poll_cq_v1(c, 1, wc);
}

__attribute__((noinline)) int rc_measure_poll_ex(struct ibv_cq_ex *c, struct ibv_wc *wc)
{
	struct ibv_poll_cq_attr attr = {};
	if (ibv_start_poll(c, &attr))
		return 0;
	wc->wr_id = c->wr_id;
	wc->status = c->status;
	wc->opcode = ibv_wc_read_opcode(c);
	ibv_end_poll(c);
	return 1;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 10000, ok = 0;
	setup();
	for (int pass = 0; pass < 2; pass++) {
		for (long i = 0; i < n; i++) {
			unsigned pi = qp.sq.cur_post;
			int rc = pass ? rc_measure_post(qp.ibv_qp, i) : rc_measure_wr(&qp.verbs_qp.qp_ex, i);
			if (rc || device_complete(pi))
				return 1;
			struct ibv_wc wc;
			int got = pass ? rc_measure_poll_ex(&cq.verbs_cq.cq_ex, &wc) : rc_measure_poll(&cq.verbs_cq.cq, &wc);
			if (!pass && wc.qp_num != QPN)
				got = 0;
			if (got == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == (uint64_t)i)
				ok++;
		}
	}
	printf("%ld of %ld sends completed in order\n", ok, 2 * n);
	return ok == 2 * n ? 0 : 1;
}
