/* drivers/mlx5: the hardware back end. Objects are created with verbs;
 * mlx5dv_init_obj hands out the queue buffers, doorbell records and the
 * BlueFlame register, after which the fast path posts and polls them itself
 * (ibv_post_send / ibv_poll_cq are never called on these queues). State
 * changes and memory keys stay on verbs (ibv_modify_qp, ibv_reg_mr).
 *
 * No ConnectX is present on the machines this was written on: this file is
 * compiled and reviewed against rdma-core 44, not run. */
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include <infiniband/verbs.h>

#include "env/log.h"
#include "env/tunable.h"
#include "mlx5.h"
#include "mlx5_autoconf.h"

namespace shunt::drv::mlx5 {

SHUNT_LOG_COMPONENT(mlx5_hw_log, "mlx5");

SHUNT_TUNABLE(t_gid_index, "SHUNT_MLX5_GID_INDEX", integer, "-1",
              "mlx5 driver (hardware): GID table index of the port's address; -1: the first RoCE v2 "
              "IPv4 GID on Ethernet ports, index 0 on InfiniBand",
              "mlx5");
SHUNT_TUNABLE(t_port, "SHUNT_MLX5_PORT", integer, "1", "mlx5 driver (hardware): port number used", "mlx5");

namespace {

int neg_errno(int e) { return e > 0 ? -e : -FI_EOTHER; }

/** vq access flags → verbs (same values for the bits verbs has). */
int ibv_access(unsigned a)
{
    return static_cast<int>(a & (vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                                 vq::ACCESS_REMOTE_ATOMIC | vq::ACCESS_MW_BIND));
}

ibv_qp_type ibv_type(vq::qp_type t)
{
    switch (t) {
    case vq::qp_type::uc: return IBV_QPT_UC;
    case vq::qp_type::ud: return IBV_QPT_UD;
    case vq::qp_type::raw_packet: return IBV_QPT_RAW_PACKET;
    default: return IBV_QPT_RC;
    }
}

ibv_qp_state ibv_state(vq::qp_state s)
{
    switch (s) {
    case vq::qp_state::init: return IBV_QPS_INIT;
    case vq::qp_state::rtr: return IBV_QPS_RTR;
    case vq::qp_state::rts: return IBV_QPS_RTS;
    case vq::qp_state::err: return IBV_QPS_ERR;
    default: return IBV_QPS_RESET;
    }
}

std::uint32_t mtu_bytes(ibv_mtu m) { return 128u << static_cast<unsigned>(m); }

/** Header bytes a TSO WQE may inline: what Shunt's RAW_PACKET WQE sizing
 *  reserves (an Ethernet + IPv6 + TCP header with options fits). */
constexpr std::uint32_t max_tso_header = 256;

struct hw_qp {
    ibv_qp *qp = nullptr;
    vq::qp_type type = vq::qp_type::rc;
    ibv_flow *flow = nullptr; ///< RAW_PACKET: the steering rule that feeds its receive queue
};

/** A flow rule of one Ethernet spec: the spec right after the attribute,
 *  as ibv_create_flow reads them (no padding between: checked). */
struct eth_flow {
    ibv_flow_attr attr;
    ibv_flow_spec_eth eth;
};
static_assert(offsetof(eth_flow, eth) == sizeof(ibv_flow_attr) &&
              sizeof(eth_flow) == sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_eth));

/** The port's MAC from its default GID (index 0: the link-local address
 *  RoCE derives from the MAC as an EUI-64). @return false when it is not one. */
bool mac_of_gid(const ibv_gid &g, std::uint8_t mac[6])
{
    const std::uint8_t *r = g.raw;
    if (r[0] != 0xfe || r[1] != 0x80 || r[11] != 0xff || r[12] != 0xfe)
        return false;
    mac[0] = r[8] ^ 0x02;
    mac[1] = r[9];
    mac[2] = r[10];
    mac[3] = r[13];
    mac[4] = r[14];
    mac[5] = r[15];
    return true;
}

class verbs_backend final : public backend {
public:
    ibv_context *ctx = nullptr;
    ibv_device_attr_ex dattr{};
    ibv_port_attr pattr{};
    ibv_gid gid{};
    int gid_index = 0;
    std::uint8_t port = 1;

    ~verbs_backend() override
    {
        if (ctx)
            ibv_close_device(ctx);
    }
    const char *name() const noexcept override { return "verbs"; }

    void query(vq::device_attr *out) override
    {
        const ibv_device_attr &d = dattr.orig_attr;
        vq::device_attr a;
        a.max_qp = static_cast<std::uint32_t>(d.max_qp);
        a.max_qp_wr = static_cast<std::uint32_t>(d.max_qp_wr);
        a.max_sge = static_cast<std::uint32_t>(d.max_sge);
        a.max_inline_data = 256; // granted per QP by rdma-core from the WQE size; create_qp fails above it
        a.max_cq = static_cast<std::uint32_t>(d.max_cq);
        a.max_cqe = static_cast<std::uint32_t>(d.max_cqe);
        a.max_mr = static_cast<std::uint32_t>(d.max_mr);
        a.max_mr_size = d.max_mr_size;
        a.max_mw = static_cast<std::uint32_t>(d.max_mw);
        a.max_srq = static_cast<std::uint32_t>(d.max_srq);
        a.max_srq_wr = static_cast<std::uint32_t>(d.max_srq_wr);
        a.max_msg_sz = pattr.max_msg_sz;
        a.ud_mtu = mtu_bytes(pattr.active_mtu);
        a.ud_grh = true; // verbs reserves the 40-byte GRH area at the start of every UD receive
        // TSO: RAW_PACKET on an Ethernet port whose device offers LSO. The
        // header a TSO WQE inlines is the driver's limit (the WQE holds it).
        const bool tso = pattr.link_layer == IBV_LINK_LAYER_ETHERNET && dattr.tso_caps.max_tso > 0 &&
                         (dattr.tso_caps.supported_qpts & (1u << IBV_QPT_RAW_PACKET));
        a.max_tso_hdr = tso ? max_tso_header : 0;
        a.atomics_global = d.atomic_cap == IBV_ATOMIC_GLOB;
        a.host_local = false; // a ConnectX reaches other hosts
        std::uint64_t atomics = d.atomic_cap != IBV_ATOMIC_NONE
                                    ? (vq::OPS_ATOMIC_CMP_AND_SWP | vq::OPS_ATOMIC_FETCH_AND_ADD)
                                    : 0;
        std::uint64_t mw = d.max_mw ? (vq::OPS_BIND_MW | vq::OPS_LOCAL_INV) : 0;
        a.ops[static_cast<unsigned>(vq::qp_type::rc)] = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM |
            vq::OPS_SEND_WITH_INV | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_WRITE_WITH_IMM | vq::OPS_RDMA_READ |
            atomics | mw;
        a.ops[static_cast<unsigned>(vq::qp_type::uc)] = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM |
            vq::OPS_SEND_WITH_INV | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_WRITE_WITH_IMM | mw;
        a.ops[static_cast<unsigned>(vq::qp_type::ud)] = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM;
        if (pattr.link_layer == IBV_LINK_LAYER_ETHERNET)
            a.ops[static_cast<unsigned>(vq::qp_type::raw_packet)] = vq::OPS_SEND | (tso ? vq::OPS_TSO : 0);
        *out = a;
    }

    void address(vq::dev_addr *out) override
    {
        vq::dev_addr a{};
        std::memcpy(a.raw, gid.raw, 16);
        std::uint16_t lid = be16(pattr.lid);
        std::memcpy(a.raw + 16, &lid, 2);
        a.raw[18] = port;
        a.raw[19] = static_cast<std::uint8_t>(gid_index);
        a.len = 20;
        *out = a;
    }

    int alloc_pd(void **h) override
    {
        ibv_pd *p = ibv_alloc_pd(ctx);
        if (!p)
            return neg_errno(errno);
        *h = p;
        return 0;
    }
    int dealloc_pd(void *h) override
    {
        int e = ibv_dealloc_pd(static_cast<ibv_pd *>(h));
        return e ? neg_errno(e) : 0;
    }

    int reg_mr(void *pd, void *addr, std::size_t len, unsigned access, std::uint32_t *lkey, std::uint32_t *rkey,
               void **h) override
    {
        ibv_mr *m = ibv_reg_mr(static_cast<ibv_pd *>(pd), addr, len, ibv_access(access));
        if (!m)
            return neg_errno(errno);
        *lkey = m->lkey;
        *rkey = m->rkey;
        *h = m;
        return 0;
    }
    int dereg_mr(void *h) override
    {
        int e = ibv_dereg_mr(static_cast<ibv_mr *>(h));
        return e ? neg_errno(e) : 0;
    }

    int alloc_mw(void *pd, std::uint32_t *rkey, void **h) override
    {
        ibv_mw *w = ibv_alloc_mw(static_cast<ibv_pd *>(pd), IBV_MW_TYPE_2);
        if (!w)
            return neg_errno(errno);
        *rkey = w->rkey;
        *h = w;
        return 0;
    }
    int dealloc_mw(void *h) override
    {
        int e = ibv_dealloc_mw(static_cast<ibv_mw *>(h));
        return e ? neg_errno(e) : 0;
    }

    int create_cq(std::uint32_t cqe, cq_view *out, void **h) override
    {
        ibv_cq *cq = ibv_create_cq(ctx, static_cast<int>(cqe - 1), nullptr, nullptr, 0);
        if (!cq)
            return neg_errno(errno);
        mlx5dv_cq dv{};
        mlx5dv_obj obj{};
        obj.cq.in = cq;
        obj.cq.out = &dv;
        int e = mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ);
        if (e) {
            ibv_destroy_cq(cq);
            return neg_errno(e);
        }
        out->buf = static_cast<std::uint8_t *>(dv.buf);
        out->cqe_cnt = dv.cqe_cnt;
        out->cqe_size = dv.cqe_size;
        out->dbrec = reinterpret_cast<volatile std::uint32_t *>(dv.dbrec);
        out->uar = static_cast<std::uint8_t *>(dv.cq_uar);
        out->cqn = dv.cqn;
        *h = cq;
        return 0;
    }
    int destroy_cq(void *h) override
    {
        int e = ibv_destroy_cq(static_cast<ibv_cq *>(h));
        return e ? neg_errno(e) : 0;
    }

    int create_srq(void *pd, std::uint32_t wqe_cnt, std::uint32_t max_sge, rq_view *out, std::uint32_t *srqn,
                   void **h) override
    {
        ibv_srq_init_attr ia{};
        ia.attr.max_wr = wqe_cnt - 1;
        ia.attr.max_sge = max_sge;
        ibv_srq *s = ibv_create_srq(static_cast<ibv_pd *>(pd), &ia);
        if (!s)
            return neg_errno(errno);
        mlx5dv_srq dv{};
        mlx5dv_obj obj{};
        obj.srq.in = s;
        obj.srq.out = &dv;
        int e = mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ);
        if (e) {
            ibv_destroy_srq(s);
            return neg_errno(e);
        }
        out->buf = static_cast<std::uint8_t *>(dv.buf);
        out->wqe_cnt = dv.tail + 1; // rdma-core: head 0, tail max - 1
        out->stride = dv.stride;
        out->dbrec = reinterpret_cast<volatile std::uint32_t *>(dv.dbrec);
        *srqn = dv.srqn;
        *h = s;
        return 0;
    }
    int destroy_srq(void *h) override
    {
        int e = ibv_destroy_srq(static_cast<ibv_srq *>(h));
        return e ? neg_errno(e) : 0;
    }

    int create_qp(const qp_request &r, qp_created *out, void **h) override
    {
        ibv_qp_init_attr_ex ia{};
        ia.qp_type = ibv_type(r.type);
        ia.send_cq = static_cast<ibv_cq *>(r.send_cq);
        ia.recv_cq = static_cast<ibv_cq *>(r.recv_cq);
        ia.srq = static_cast<ibv_srq *>(r.srq);
        ia.cap.max_send_wr = r.max_send_wr;
        ia.cap.max_recv_wr = r.srq ? 0 : r.max_recv_wr;
        ia.cap.max_send_sge = r.max_send_sge;
        ia.cap.max_recv_sge = r.srq ? 0 : r.max_recv_sge;
        ia.cap.max_inline_data = r.max_inline;
        ia.sq_sig_all = r.sig_all ? 1 : 0;
        ia.pd = static_cast<ibv_pd *>(r.pd);
        ia.comp_mask = IBV_QP_INIT_ATTR_PD;
        if (r.max_tso_header) { // rdma-core sizes the SQ for the inlined header (RAW_PACKET only)
            ia.comp_mask |= IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
            ia.max_tso_header = static_cast<std::uint16_t>(r.max_tso_header);
        }
        ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
        if (!qp)
            return neg_errno(errno);
        mlx5dv_qp dv{};
        mlx5dv_obj obj{};
        obj.qp.in = qp;
        obj.qp.out = &dv;
        int e = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP);
        if (e || dv.sq.stride != wqe_bb) {
            ibv_destroy_qp(qp);
            return e ? neg_errno(e) : -FI_EOTHER;
        }
        out->sq.buf = static_cast<std::uint8_t *>(dv.sq.buf);
        out->sq.wqe_cnt = dv.sq.wqe_cnt;
        out->sq.dbrec = reinterpret_cast<volatile std::uint32_t *>(dv.dbrec);
        out->sq.bf_reg = static_cast<std::uint8_t *>(dv.bf.reg);
        out->sq.bf_size = dv.bf.size;
        out->rq.buf = static_cast<std::uint8_t *>(dv.rq.buf);
        out->rq.wqe_cnt = dv.rq.wqe_cnt;
        out->rq.stride = dv.rq.stride;
        out->rq.dbrec = reinterpret_cast<volatile std::uint32_t *>(dv.dbrec);
        out->qpn = qp->qp_num;
        out->max_inline = ia.cap.max_inline_data;
        // Inlining the L2 header is always allowed; devices that require it
        // (ConnectX-4 Lx, or a vport in L2 inline mode) accept nothing less.
        out->eth_min_inline = r.type == vq::qp_type::raw_packet ? eth_l2_inline : 0;
        out->bf_wc = true;
        auto *hq = new (std::nothrow) hw_qp{qp, r.type};
        if (!hq) {
            ibv_destroy_qp(qp);
            return -FI_ENOMEM;
        }
        *h = hq;
        return 0;
    }
    int destroy_qp(void *h) override
    {
        auto *hq = static_cast<hw_qp *>(h);
        if (hq->flow && ibv_destroy_flow(hq->flow) == 0)
            hq->flow = nullptr;
        int e = ibv_destroy_qp(hq->qp);
        if (e)
            return neg_errno(e);
        delete hq;
        return 0;
    }

    int modify_qp(void *h, const vq::qp_attr &a, unsigned mask, vq::qp_state cur) override
    {
        auto *hq = static_cast<hw_qp *>(h);
        vq::qp_state to = (mask & vq::QP_ATTR_STATE) ? a.state : cur;
        ibv_qp_attr x{};
        int m = IBV_QP_STATE;
        x.qp_state = ibv_state(to);
        bool conn = hq->type == vq::qp_type::rc || hq->type == vq::qp_type::uc;
        bool rc = hq->type == vq::qp_type::rc;
        if (to == vq::qp_state::init && cur == vq::qp_state::reset) {
            x.port_num = port;
            m |= IBV_QP_PORT;
            if (hq->type != vq::qp_type::raw_packet) {
                x.pkey_index = a.pkey_index;
                m |= IBV_QP_PKEY_INDEX;
            }
            if (conn) {
                x.qp_access_flags = ibv_access(a.qp_access_flags & ~vq::ACCESS_LOCAL_WRITE) ;
                m |= IBV_QP_ACCESS_FLAGS;
            }
            if (hq->type == vq::qp_type::ud) {
                x.qkey = a.qkey;
                m |= IBV_QP_QKEY;
            }
        } else if (to == vq::qp_state::rtr && conn) {
            x.path_mtu = (mask & vq::QP_ATTR_PATH_MTU) ? static_cast<ibv_mtu>(a.path_mtu) : pattr.active_mtu;
            x.dest_qp_num = a.dest_qp_num;
            x.rq_psn = a.rq_psn;
            if (a.dest.len < 20)
                return -FI_EINVAL;
            x.ah_attr.is_global = 1;
            std::memcpy(x.ah_attr.grh.dgid.raw, a.dest.raw, 16);
            x.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid_index);
            x.ah_attr.grh.hop_limit = 64;
            std::uint16_t lid;
            std::memcpy(&lid, a.dest.raw + 16, 2);
            x.ah_attr.dlid = be16toh(lid);
            x.ah_attr.port_num = port;
            m |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
            if (rc) {
                x.max_dest_rd_atomic = (mask & vq::QP_ATTR_MAX_DEST_RD_ATOMIC) ? a.max_dest_rd_atomic : 16;
                x.min_rnr_timer = (mask & vq::QP_ATTR_MIN_RNR_TIMER) ? a.min_rnr_timer : 12;
                m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
            }
        } else if (to == vq::qp_state::rts && cur == vq::qp_state::rtr && hq->type != vq::qp_type::raw_packet) {
            x.sq_psn = a.sq_psn;
            m |= IBV_QP_SQ_PSN;
            if (rc) {
                x.timeout = (mask & vq::QP_ATTR_TIMEOUT) ? a.timeout : 14;
                x.retry_cnt = (mask & vq::QP_ATTR_RETRY_CNT) ? a.retry_cnt : 7;
                x.rnr_retry = (mask & vq::QP_ATTR_RNR_RETRY) ? a.rnr_retry : 7;
                x.max_rd_atomic = (mask & vq::QP_ATTR_MAX_QP_RD_ATOMIC) ? a.max_rd_atomic : 16;
                m |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
            }
        } else if (to == cur && conn && (mask & vq::QP_ATTR_ACCESS_FLAGS)) {
            x.qp_access_flags = ibv_access(a.qp_access_flags & ~vq::ACCESS_LOCAL_WRITE);
            m |= IBV_QP_ACCESS_FLAGS;
        }
        int e = ibv_modify_qp(hq->qp, &x, m);
        if (e)
            return neg_errno(e);
        if (hq->type == vq::qp_type::raw_packet)
            return raw_steering(*hq, to);
        return 0;
    }

    /** A RAW_PACKET QP receives only what a steering rule sends it: from RTR
     *  on, the frames addressed to the port's MAC (the model delivers those
     *  to every RAW_PACKET QP of the port alike); none in RESET or ERR. */
    int raw_steering(hw_qp &hq, vq::qp_state to)
    {
        const bool want = to == vq::qp_state::rtr || to == vq::qp_state::rts;
        if (!want && hq.flow) {
            if (int e = ibv_destroy_flow(hq.flow))
                return neg_errno(e);
            hq.flow = nullptr;
        }
        if (!want || hq.flow)
            return 0;
        ibv_gid g0{};
        std::uint8_t mac[6];
        if (ibv_query_gid(ctx, port, 0, &g0) || !mac_of_gid(g0, mac)) {
            SHUNT_LOG(mlx5_hw_log, warning, "port %u: no MAC in GID 0; RAW_PACKET QP %u receives nothing",
                      static_cast<unsigned>(port), hq.qp->qp_num);
            return 0;
        }
        eth_flow f{};
        f.attr.type = IBV_FLOW_ATTR_NORMAL;
        f.attr.size = sizeof f;
        f.attr.num_of_specs = 1;
        f.attr.port = port;
        f.eth.type = IBV_FLOW_SPEC_ETH;
        f.eth.size = sizeof f.eth;
        std::memcpy(f.eth.val.dst_mac, mac, 6);
        std::memset(f.eth.mask.dst_mac, 0xff, 6);
        hq.flow = ibv_create_flow(hq.qp, &f.attr);
        if (!hq.flow)
            return neg_errno(errno);
        return 0;
    }

    int create_ah(void *pd, const vq::dev_addr &dest, mlx5_wqe_av *av, void **h) override
    {
        if (dest.len < 20)
            return -FI_EINVAL;
        ibv_ah_attr aa{};
        aa.is_global = 1;
        std::memcpy(aa.grh.dgid.raw, dest.raw, 16);
        aa.grh.sgid_index = static_cast<std::uint8_t>(gid_index);
        aa.grh.hop_limit = 64;
        std::uint16_t lid;
        std::memcpy(&lid, dest.raw + 16, 2);
        aa.dlid = be16toh(lid);
        aa.port_num = port;
        ibv_ah *ah = ibv_create_ah(static_cast<ibv_pd *>(pd), &aa);
        if (!ah)
            return neg_errno(errno);
        mlx5dv_ah dv{};
        mlx5dv_obj obj{};
        obj.ah.in = ah;
        obj.ah.out = &dv;
        int e = mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH);
        if (e) {
            ibv_destroy_ah(ah);
            return neg_errno(e);
        }
        std::memcpy(av, dv.av, sizeof *av);
        *h = ah;
        return 0;
    }
    int destroy_ah(void *h) override
    {
        int e = ibv_destroy_ah(static_cast<ibv_ah *>(h));
        return e ? neg_errno(e) : 0;
    }
};

/** The mlx5 devices of the verbs device list, in order. */
int mlx5_devices(ibv_device **list, int n, ibv_device **out, int max)
{
    int k = 0;
    for (int i = 0; i < n && k < max; i++)
        if (mlx5dv_is_supported(list[i]))
            out[k++] = list[i];
    return k;
}

int pick_gid(ibv_context *ctx, std::uint8_t port, const ibv_port_attr &pa)
{
    std::int64_t want = -1;
    if (t_gid_index.as_int(want) == 0 && want >= 0)
        return static_cast<int>(want);
    if (pa.link_layer != IBV_LINK_LAYER_ETHERNET)
        return 0;
#if SHUNT_MLX5_HAVE_QUERY_GID_EX
    for (int i = 0; i < pa.gid_tbl_len; i++) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(i), &e, 0) != 0)
            continue;
        bool v4 = e.gid.global.subnet_prefix == 0 &&
                  (be64toh(e.gid.global.interface_id) >> 32) == 0x0000ffffull;
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && v4)
            return i;
    }
#else
    (void)ctx;
    (void)port;
#endif
    return 0;
}

} // namespace

std::vector<std::string> verbs_probe(const char **why)
{
    std::vector<std::string> names;
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        *why = "ibv_get_device_list failed (no RDMA subsystem in this kernel?)";
        return names;
    }
    ibv_device *mlx[16];
    int k = mlx5_devices(list, n, mlx, 16);
    try {
        for (int i = 0; i < k; i++)
            names.emplace_back(ibv_get_device_name(mlx[i]));
    } catch (...) {
        *why = "out of memory";
        names.clear();
    }
    if (k == 0)
        *why = n ? "verbs has devices, but none is a ConnectX (mlx5)" : "verbs lists no RDMA device";
    ibv_free_device_list(list);
    return names;
}

std::unique_ptr<backend> make_verbs_backend(int index)
{
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        return nullptr;
    ibv_device *mlx[16];
    int k = mlx5_devices(list, n, mlx, 16);
    std::unique_ptr<verbs_backend> b;
    if (index < k) {
        ibv_context *ctx = ibv_open_device(mlx[index]);
        if (!ctx)
            SHUNT_LOG(mlx5_hw_log, error, "ibv_open_device(%s): %s", ibv_get_device_name(mlx[index]),
                      std::strerror(errno));
        else {
            b.reset(new (std::nothrow) verbs_backend);
            if (b) {
                b->ctx = ctx;
                std::int64_t p = 1;
                if (t_port.as_int(p) == 0 && p >= 1 && p <= 255)
                    b->port = static_cast<std::uint8_t>(p);
                if (ibv_query_device_ex(ctx, nullptr, &b->dattr) || ibv_query_port(ctx, b->port, &b->pattr)) {
                    SHUNT_LOG(mlx5_hw_log, error, "cannot query %s", ibv_get_device_name(mlx[index]));
                    b.reset();
                } else {
                    b->gid_index = pick_gid(ctx, b->port, b->pattr);
                    if (ibv_query_gid(ctx, b->port, b->gid_index, &b->gid)) {
                        SHUNT_LOG(mlx5_hw_log, error, "cannot read GID %d of %s", b->gid_index,
                                  ibv_get_device_name(mlx[index]));
                        b.reset();
                    }
                }
            } else {
                ibv_close_device(ctx);
            }
        }
    }
    ibv_free_device_list(list);
    return b;
}

} // namespace shunt::drv::mlx5
