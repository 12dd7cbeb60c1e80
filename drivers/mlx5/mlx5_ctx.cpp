/* drivers/mlx5: the driver object, its devices (ConnectX ports found by
 * verbs, and model devices when SHUNT_MLX5_MODEL asks for them), and the
 * setup calls of a context. Setup turns requests into queue geometry, asks
 * the back end for the queues and keeps the driver-side bookkeeping. */
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "env/log.h"
#include "env/tunable.h"
#include "mlx5.h"
#include "model/model.h"

namespace shunt::drv::mlx5 {

SHUNT_LOG_COMPONENT(mlx5_log, "mlx5");

SHUNT_TUNABLE(t_model, "SHUNT_MLX5_MODEL", integer, "0",
              "mlx5 driver: number of software model devices offered (mlx5_model0..); 0: none", "mlx5");

namespace {

/* ---------------- Devices ---------------- */

struct mlx5_device : vq::device {
    std::string name_s, desc_s;
    bool model = false;
    int index = 0; ///< verbs device index, or model index
};

/** The devices probe() found, alive until the process exits (vq keeps pointers to them). */
std::vector<std::unique_ptr<mlx5_device>> &devices()
{
    static std::vector<std::unique_ptr<mlx5_device>> d;
    return d;
}

std::string &status_line()
{
    static std::string s;
    return s;
}

const char *status()
{
    return status_line().empty() ? nullptr : status_line().c_str();
}

int probe(std::vector<vq::device *> &out)
{
    const char *why = nullptr;
    std::vector<std::string> names = verbs_probe(&why);
    const int n = static_cast<int>(names.size());
    if (n == 0) {
        SHUNT_LOG(mlx5_log, info, "no ConnectX device: %s", why ? why : "none found");
        status_line() = std::string("no ConnectX device: ") + (why ? why : "none found");
    } else {
        status_line() = std::to_string(n) + " ConnectX device(s)";
    }
    // Setup path: allocation failures become -FI_ENOMEM, never an exception.
    auto add = [](std::string name, std::string desc, bool model, int index) noexcept {
        try {
            auto d = std::make_unique<mlx5_device>();
            d->name_s = std::move(name);
            d->desc_s = std::move(desc);
            d->model = model;
            d->index = index;
            devices().push_back(std::move(d));
            return 0;
        } catch (...) {
            return -FI_ENOMEM;
        }
    };
    for (int i = 0; i < n; i++) {
        const std::string &nm = names[static_cast<std::size_t>(i)];
        if (int rc = add(nm, "ConnectX through rdma-core mlx5dv (" + nm + ")", false, i))
            return rc;
    }
    std::int64_t nm = 0;
    if (t_model.as_int(nm) < 0 || nm < 0 || nm > 8) {
        SHUNT_LOG(mlx5_log, warning, "SHUNT_MLX5_MODEL must be 0..8: no model device");
        nm = 0;
    }
    for (int i = 0; i < nm; i++)
        if (int rc = add("mlx5_model" + std::to_string(i),
                         "software model of a ConnectX port (mlx5 WQEs, CQEs and doorbells; its wire reaches "
                         "model ports of this host; not a NIC)",
                         true, i))
            return rc;
    status_line() += nm ? "; " + std::to_string(nm) + " model device(s) (SHUNT_MLX5_MODEL)"
                        : "; no model device (SHUNT_MLX5_MODEL=N offers N)";
    for (auto &d : devices()) {
        d->name = d->name_s.c_str();
        d->description = d->desc_s.c_str();
        out.push_back(d.get());
    }
    return 0;
}

extern const vq::context_ops mlx5_ops;

int open(vq::device *vd, vq::context **out)
{
    auto *d = static_cast<mlx5_device *>(vd);
    auto *c = new (std::nothrow) mlx5_ctx;
    if (!c)
        return -FI_ENOMEM;
    if (d->model) {
        int rc = model::make_backend(d->index, &c->be);
        if (rc < 0) {
            delete c;
            return rc;
        }
    } else {
        c->be = make_verbs_backend(d->index);
        if (!c->be) {
            delete c;
            return -FI_ENODEV;
        }
    }
    c->be->query(&c->attr);
    c->be->address(&c->addr);
    c->ops = &mlx5_ops;
    *out = c;
    return 0;
}

/* ---------------- Helpers ---------------- */

std::uint32_t pow2(std::uint64_t v)
{
    std::uint64_t p = 1;
    while (p < v)
        p <<= 1;
    return static_cast<std::uint32_t>(p);
}
unsigned log2u(std::uint32_t v)
{
    unsigned l = 0;
    while ((1u << l) < v)
        l++;
    return l;
}
std::uint32_t align_up(std::uint32_t v, std::uint32_t a) { return (v + a - 1) & ~(a - 1); }

/* ---------------- Context ---------------- */

int ctx_close(vq::context *vc)
{
    auto *c = to_ctx(vc);
    {
        std::lock_guard<std::mutex> g(c->lock);
        if (c->nobj > 0)
            return -FI_EBUSY;
    }
    delete c;
    return 0;
}

int query_device(vq::context *vc, vq::device_attr *out)
{
    *out = to_ctx(vc)->attr;
    return 0;
}

int alloc_pd(vq::context *vc, vq::pd **out)
{
    auto *c = to_ctx(vc);
    auto *p = new (std::nothrow) mlx5_pd;
    if (!p)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->alloc_pd(&p->h);
    if (rc < 0) {
        delete p;
        return rc;
    }
    p->ctx = c;
    c->nobj++;
    *out = p;
    return 0;
}

int dealloc_pd(vq::pd *vp)
{
    auto *p = static_cast<mlx5_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    if (p->refs > 0)
        return -FI_EBUSY;
    int rc = c->be->dealloc_pd(p->h);
    if (rc < 0)
        return rc;
    c->nobj--;
    delete p;
    return 0;
}

int reg_mr(vq::pd *vp, void *addr, std::size_t len, unsigned access, vq::mr **out)
{
    auto *p = static_cast<mlx5_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    if (len > c->attr.max_mr_size)
        return -FI_EMSGSIZE;
    auto *m = new (std::nothrow) mlx5_mr;
    if (!m)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->reg_mr(p->h, addr, len, access, &m->lkey, &m->rkey, &m->h);
    if (rc < 0) {
        delete m;
        return rc;
    }
    m->ctx = c;
    m->pd = p;
    m->addr = addr;
    m->length = len;
    m->access = access;
    p->refs++;
    c->nobj++;
    *out = m;
    return 0;
}

int dereg_mr(vq::mr *vm)
{
    auto *m = static_cast<mlx5_mr *>(vm);
    auto *c = to_ctx(m->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->dereg_mr(m->h);
    if (rc < 0)
        return rc;
    static_cast<mlx5_pd *>(m->pd)->refs--;
    c->nobj--;
    delete m;
    return 0;
}

int alloc_mw(vq::pd *vp, vq::mw_type, vq::mw **out)
{
    auto *p = static_cast<mlx5_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    auto *w = new (std::nothrow) mlx5_mw;
    if (!w)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->alloc_mw(p->h, &w->rkey, &w->h);
    if (rc < 0) {
        delete w;
        return rc;
    }
    w->ctx = c;
    w->pd = p;
    p->refs++;
    c->nobj++;
    *out = w;
    return 0;
}

int dealloc_mw(vq::mw *vw)
{
    auto *w = static_cast<mlx5_mw *>(vw);
    auto *c = to_ctx(w->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->dealloc_mw(w->h);
    if (rc < 0)
        return rc;
    static_cast<mlx5_pd *>(w->pd)->refs--;
    c->nobj--;
    delete w;
    return 0;
}

/** Memory a peer reaches without a copy: on a ConnectX that is any
 *  registered memory (the device DMAs it), so plain page-aligned memory. */
int alloc_buf(vq::context *vc, std::size_t size, void **out)
{
    auto *c = to_ctx(vc);
    std::size_t n = (size + 4095) & ~std::size_t{4095};
    if (n < size)
        return -FI_EINVAL;
    void *p = std::aligned_alloc(4096, n);
    if (!p)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    try {
        c->bufs.push_back(p);
    } catch (...) {
        std::free(p);
        return -FI_ENOMEM;
    }
    c->nobj++;
    *out = p;
    return 0;
}

int free_buf(vq::context *vc, void *buf)
{
    auto *c = to_ctx(vc);
    std::lock_guard<std::mutex> g(c->lock);
    for (auto it = c->bufs.begin(); it != c->bufs.end(); ++it)
        if (*it == buf) {
            c->bufs.erase(it);
            c->nobj--;
            std::free(buf);
            return 0;
        }
    return -FI_EINVAL;
}

int alloc_td(vq::context *vc, vq::td **out)
{
    auto *c = to_ctx(vc);
    auto *t = new (std::nothrow) mlx5_td;
    if (!t)
        return -FI_ENOMEM;
    t->ctx = c;
    std::lock_guard<std::mutex> g(c->lock);
    c->nobj++;
    *out = t;
    return 0;
}

int dealloc_td(vq::td *t)
{
    auto *c = to_ctx(t->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    if (static_cast<mlx5_td *>(t)->refs > 0)
        return -FI_EBUSY;
    c->nobj--;
    delete static_cast<mlx5_td *>(t);
    return 0;
}

int create_ah(vq::pd *vp, const vq::ah_attr *attr, vq::ah **out)
{
    auto *p = static_cast<mlx5_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    auto *a = new (std::nothrow) mlx5_ah;
    if (!a)
        return -FI_ENOMEM;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->create_ah(p->h, attr->dest, &a->av, &a->h);
    if (rc < 0) {
        delete a;
        return rc;
    }
    a->ctx = c;
    a->pd = p;
    a->dest = attr->dest;
    p->refs++;
    c->nobj++;
    *out = a;
    return 0;
}

int destroy_ah(vq::ah *va)
{
    auto *a = static_cast<mlx5_ah *>(va);
    auto *c = to_ctx(a->ctx);
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->destroy_ah(a->h);
    if (rc < 0)
        return rc;
    static_cast<mlx5_pd *>(a->pd)->refs--;
    c->nobj--;
    delete a;
    return 0;
}

/* ---------------- CQ ---------------- */

int create_cq(vq::context *vc, const vq::cq_init_attr *attr, vq::cq **out)
{
    auto *c = to_ctx(vc);
    if (static_cast<std::uint32_t>(attr->cqe) > c->attr.max_cqe)
        return -FI_EMSGSIZE;
    auto *q = new (std::nothrow) mlx5_cq;
    if (!q)
        return -FI_ENOMEM;
    std::uint32_t n = pow2(static_cast<std::uint64_t>(attr->cqe) + 1); // rdma-core: align_queue_size(cqe + 1)
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->create_cq(n, &q->view, &q->h);
    if (rc < 0) {
        delete q;
        return rc;
    }
    q->ctx = c;
    q->mctx = c;
    q->cqe = static_cast<int>(q->view.cqe_cnt - 1);
    q->single_threaded = attr->single_threaded;
    q->entries = q->view.buf;
    q->buf = q->view.buf + (q->view.cqe_size - sizeof(mlx5_cqe64));
    q->mask = q->view.cqe_cnt - 1;
    q->owner_shift = log2u(q->view.cqe_cnt);
    q->cqe_shift = log2u(q->view.cqe_size);
    q->dbrec = q->view.dbrec;
    install_cq_ops(q);
    c->nobj++;
    *out = q;
    return 0;
}

int destroy_cq(vq::cq *vq_)
{
    auto *q = static_cast<mlx5_cq *>(vq_);
    auto *c = q->mctx;
    std::lock_guard<std::mutex> g(c->lock);
    if (q->refs > 0)
        return -FI_EBUSY;
    int rc = c->be->destroy_cq(q->h);
    if (rc < 0)
        return rc;
    c->nobj--;
    delete q;
    return 0;
}

/* ---------------- SRQ ---------------- */

int create_srq(vq::pd *vp, const vq::srq_init_attr *attr, vq::srq **out)
{
    auto *p = static_cast<mlx5_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    std::uint32_t max_sge = attr->max_sge ? attr->max_sge : 1;
    if (attr->max_wr > c->attr.max_srq_wr || max_sge > c->attr.max_sge)
        return -FI_EMSGSIZE;
    auto *s = new (std::nothrow) mlx5_srq;
    if (!s)
        return -FI_ENOMEM;
    // rdma-core mlx5_create_srq: next segment + data segments, at least 32
    // bytes, a power of two; one WQE more than asked (the list's end).
    std::uint32_t cnt = pow2(static_cast<std::uint64_t>(attr->max_wr) + 1);
    rq_view v;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->create_srq(p->h, cnt, max_sge, &v, &s->srqn, &s->h);
    if (rc < 0) {
        delete s;
        return rc;
    }
    cnt = v.wqe_cnt; // what the device made (hardware: rdma-core's sizing)
    s->rq.wrid = new (std::nothrow) std::uint64_t[cnt]();
    if (!s->rq.wrid) {
        (void)c->be->destroy_srq(s->h);
        delete s;
        return -FI_ENOMEM;
    }
    s->rq.buf = v.buf;
    s->rq.mask = cnt - 1;
    s->rq.stride_shift = log2u(v.stride);
    s->rq.max_sge = (v.stride - 16) / 16;
    s->rq.limit_sge = std::min(s->rq.max_sge, c->attr.max_sge);
    s->rq.max_post = cnt - 1;
    s->rq.dbrec = v.dbrec;
    dbrec_store(&s->rq.dbrec[0], 0); // the record's high half stays 0 (dbrec_store_counter)
    s->ctx = c;
    s->pd = p;
    s->mctx = c;
    s->max_wr = cnt - 1;
    s->max_sge = s->rq.limit_sge;
    init_srq(s);
    p->refs++;
    c->nobj++;
    *out = s;
    return 0;
}

int destroy_srq(vq::srq *vs)
{
    auto *s = static_cast<mlx5_srq *>(vs);
    auto *c = s->mctx;
    std::lock_guard<std::mutex> g(c->lock);
    if (s->refs > 0)
        return -FI_EBUSY;
    int rc = c->be->destroy_srq(s->h);
    if (rc < 0)
        return rc;
    static_cast<mlx5_pd *>(s->pd)->refs--;
    delete[] s->rq.wrid;
    c->nobj--;
    delete s;
    return 0;
}

/* ---------------- QP ---------------- */

/** The largest UMR WQE (bind_mw): ctrl + UMR ctrl + mkey context + one KLM padded to 64. */
constexpr std::uint32_t umr_wqe_bytes = sizeof(mlx5_wqe_ctrl_seg) + sizeof(mlx5_wqe_umr_ctrl_seg) +
                                        sizeof(mlx5_wqe_mkey_context_seg) + 64;
static_assert(umr_wqe_bytes == 192);

/** The largest send queue: what the 16-bit WQE counter indexes. */
constexpr std::uint32_t max_sq_bbs = 65536;

/** Bytes of fixed segments before the data of the largest WQE of a type. */
std::uint32_t sq_overhead(vq::qp_type t, std::uint64_t ops, std::uint32_t tso_hdr)
{
    switch (t) {
    case vq::qp_type::ud: return 16 + 48;
    case vq::qp_type::uc: return 16 + 16;
    case vq::qp_type::raw_packet:
        return 16 + ((ops & vq::OPS_TSO) ? align_up(14 + tso_hdr, 16) : 32);
    default:
        return 16 + 32; // raddr + atomic
    }
}

void free_qp(mlx5_qp *q)
{
    delete[] q->sq.meta;
    delete[] q->sq.binds;
    delete[] q->sq.bind_undo;
    delete[] q->rq.wrid;
    delete q;
}

int create_qp(vq::pd *vp, const vq::qp_init_attr *attr, vq::qp **out)
{
    auto *p = static_cast<mlx5_pd *>(vp);
    auto *c = to_ctx(p->ctx);
    const vq::device_attr &da = c->attr;
    vq::qp_cap cap = attr->cap;
    if (!cap.max_send_wr)
        cap.max_send_wr = 256;
    if (!cap.max_recv_wr)
        cap.max_recv_wr = 256;
    if (!cap.max_send_sge)
        cap.max_send_sge = 1;
    if (!cap.max_recv_sge)
        cap.max_recv_sge = 1;
    if (cap.max_send_wr > da.max_qp_wr || cap.max_recv_wr > da.max_qp_wr || cap.max_send_sge > da.max_sge ||
        cap.max_recv_sge > da.max_sge || cap.max_inline_data > da.max_inline_data)
        return -FI_EMSGSIZE;
    // A TSO WQE inlines the whole header: the device's limit, when the QP sends TSO.
    const std::uint32_t tso_hdr = (attr->send_ops_flags & vq::OPS_TSO) ? da.max_tso_hdr : 0;
    std::uint32_t over = sq_overhead(attr->type, attr->send_ops_flags, tso_hdr);
    std::uint32_t data = std::max(cap.max_send_sge * 16, align_up(4 + cap.max_inline_data, 16));
    std::uint32_t wqe_size = align_up(over + data, wqe_bb);
    // bind_mw and local_inv are UMR WQEs: ctrl, UMR ctrl, mkey context and a
    // KLM, 192 bytes (rdma-core counts them in its RC/UC sq_overhead too).
    if (attr->send_ops_flags & (vq::OPS_BIND_MW | vq::OPS_LOCAL_INV))
        wqe_size = std::max(wqe_size, umr_wqe_bytes);
    if (wqe_size > max_wqe_ds * octo + octo) // 1024: the largest WQE a ds of 63 covers, rounded to a BB
        return -FI_EMSGSIZE;
    std::uint32_t bbs = wqe_size / wqe_bb;
    std::uint32_t sq_cnt = pow2(static_cast<std::uint64_t>(cap.max_send_wr) * bbs);
    if (sq_cnt > max_sq_bbs)
        return -FI_EMSGSIZE;
    std::uint32_t granted_inline = std::min(wqe_size - over - 4, da.max_inline_data);
    if (granted_inline < cap.max_inline_data)
        granted_inline = cap.max_inline_data;
    auto *msrq = static_cast<mlx5_srq *>(attr->srq);
    std::uint32_t rq_stride = pow2(std::max<std::uint32_t>(16, 16 * cap.max_recv_sge));
    std::uint32_t rq_cnt = msrq ? 0 : pow2(cap.max_recv_wr);

    auto *q = new (std::nothrow) mlx5_qp;
    if (!q)
        return -FI_ENOMEM;
    qp_request rq;
    rq.type = attr->type;
    rq.send_cq = static_cast<mlx5_cq *>(attr->send_cq)->h;
    rq.recv_cq = static_cast<mlx5_cq *>(attr->recv_cq)->h;
    rq.srq = msrq ? msrq->h : nullptr;
    rq.pd = p->h;
    rq.sq_wqe_cnt = sq_cnt;
    rq.rq_wqe_cnt = rq_cnt;
    rq.rq_stride = rq_stride;
    // A ring of 2^16 BBs is never filled whole: its 16-bit WQE counter could
    // not tell full from empty.
    rq.max_send_wr = (sq_cnt < max_sq_bbs ? sq_cnt : sq_cnt - 1) / bbs;
    rq.max_recv_wr = rq_cnt;
    rq.max_send_sge = std::min<std::uint32_t>((wqe_size - over) / 16, da.max_sge);
    rq.max_recv_sge = rq_stride / 16;
    rq.max_inline = granted_inline;
    rq.max_tso_header = tso_hdr;
    rq.sig_all = attr->sq_sig_all;
    qp_created cr;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->create_qp(rq, &cr, &q->h);
    if (rc < 0) {
        delete q;
        return rc;
    }
    q->ctx = c;
    q->mctx = c;
    q->pd = p;
    q->send_cq = attr->send_cq;
    q->recv_cq = attr->recv_cq;
    q->srq = attr->srq;
    q->msrq = msrq;
    q->type = attr->type;
    q->has_td = attr->td != nullptr;
    q->sq_sig_all = attr->sq_sig_all;
    q->send_ops_flags = attr->send_ops_flags;
    q->qp_num = cr.qpn;
    q->sqv = cr.sq;
    q->rqv = cr.rq;
    // What the device made holds at least max_post WQEs of the largest size
    // (the hardware sizes its SQ itself: count from its wqe_cnt).
    const std::uint32_t max_post =
        std::min(rq.max_send_wr, (cr.sq.wqe_cnt < max_sq_bbs ? cr.sq.wqe_cnt : cr.sq.wqe_cnt - 1) / bbs);
    if (max_post < cap.max_send_wr) {
        (void)c->be->destroy_qp(q->h);
        delete q;
        return -FI_EMSGSIZE;
    }
    q->cap.max_send_wr = max_post;
    q->cap.max_recv_wr = msrq ? 0 : rq_cnt;
    q->cap.max_send_sge = rq.max_send_sge;
    q->cap.max_recv_sge = msrq ? 0 : std::min(rq.max_recv_sge, da.max_sge);
    q->cap.max_inline_data = cr.max_inline;
    send_state &s = q->sq;
    s.buf = cr.sq.buf;
    s.qend = cr.sq.buf + static_cast<std::size_t>(cr.sq.wqe_cnt) * wqe_bb;
    s.mask = cr.sq.wqe_cnt - 1;
    s.meta_off_mask = s.mask << wqe_meta_shift;
    s.max_post = max_post;
    s.qpn_be = be32(cr.qpn << 8);
    s.dbrec = cr.sq.dbrec;
    s.bf_reg = cr.sq.bf_reg;
    s.bf_size = cr.sq.bf_size;
    s.max_inline = cr.max_inline;
    s.max_sge = q->cap.max_send_sge;
    s.eth_min_inline = cr.eth_min_inline;
    s.max_msg = attr->type == vq::qp_type::ud ? da.ud_mtu : da.max_msg_sz;
    s.max_tso_header = tso_hdr;
    s.allowed_flags = vq::WR_FENCE | vq::WR_SIGNALED | vq::WR_SOLICITED | vq::WR_INLINE |
                      (attr->type == vq::qp_type::raw_packet ? vq::WR_IP_CSUM : 0);
    s.meta = new (std::nothrow) wqe_meta[cr.sq.wqe_cnt]();
    if (attr->send_ops_flags & vq::OPS_BIND_MW) {
        s.max_bind = s.max_post;
        s.binds = new (std::nothrow) send_state::bind[s.max_bind]();
        s.bind_undo = new (std::nothrow) send_state::undo[cr.sq.wqe_cnt]();
    }
    if (!msrq) {
        q->rq.buf = cr.rq.buf;
        q->rq.mask = cr.rq.wqe_cnt - 1;
        q->rq.stride_shift = log2u(cr.rq.stride);
        q->rq.max_sge = cr.rq.stride / 16;
        q->rq.limit_sge = q->cap.max_recv_sge;
        q->rq.max_post = cr.rq.wqe_cnt;
        q->rq.dbrec = cr.rq.dbrec;
        q->rq.wrid = new (std::nothrow) std::uint64_t[cr.rq.wqe_cnt]();
    }
    bool oom = !s.meta || (s.max_bind && (!s.binds || !s.bind_undo)) ||
               (!msrq && !q->rq.wrid);
    if (oom || c->qps.set(cr.qpn, q) < 0) {
        (void)c->be->destroy_qp(q->h);
        free_qp(q);
        return -FI_ENOMEM;
    }
    reset_qp_queues(q);
    static_cast<mlx5_cq *>(attr->send_cq)->refs++;
    static_cast<mlx5_cq *>(attr->recv_cq)->refs++;
    if (msrq)
        msrq->refs++;
    if (attr->td)
        static_cast<mlx5_td *>(attr->td)->refs++;
    q->mtd = static_cast<mlx5_td *>(attr->td);
    p->refs++;
    c->nobj++;
    // Statistics are not worth failing a QP for: without a block (telemetry
    // off, or the registry refused) the hooks do nothing.
    if ((rc = q->io_blk.open(std::string("mlx5.") + (c->dev && c->dev->name ? c->dev->name : "dev") + ".qp." +
                             std::to_string(q->qp_num))))
        SHUNT_LOG(mlx5_log, warning, "QP %#x: no statistics block (%s)", q->qp_num, shunt::strerror(rc));
    q->sq.io = q->rx_io = q->io_blk.get();
    install_qp_ops(q); // after sq.io: the single-call send is chosen with or without statistics
    *out = q;
    return 0;
}

int destroy_qp(vq::qp *vqp)
{
    auto *q = static_cast<mlx5_qp *>(vqp);
    auto *c = q->mctx;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->destroy_qp(q->h);
    if (rc < 0)
        return rc;
    auto *scq = static_cast<mlx5_cq *>(q->send_cq);
    auto *rcq = static_cast<mlx5_cq *>(q->recv_cq);
    cq_clean(rcq, q->qp_num, q->msrq);
    if (scq != rcq)
        cq_clean(scq, q->qp_num, nullptr);
    (void)c->qps.set(q->qp_num, nullptr);
    scq->refs--;
    rcq->refs--;
    if (q->msrq)
        q->msrq->refs--;
    if (q->mtd)
        q->mtd->refs--;
    static_cast<mlx5_pd *>(q->pd)->refs--;
    c->nobj--;
    free_qp(q);
    return 0;
}

bool transition_ok(vq::qp_state from, vq::qp_state to)
{
    using st = vq::qp_state;
    if (to == st::err || to == st::reset)
        return true;
    return (from == st::reset && to == st::init) || (from == st::init && (to == st::init || to == st::rtr)) ||
           (from == st::rtr && to == st::rts) || (from == st::rts && to == st::rts);
}

int modify_qp(vq::qp *vqp, const vq::qp_attr *a, unsigned mask)
{
    auto *q = static_cast<mlx5_qp *>(vqp);
    auto *c = q->mctx;
    auto cur = static_cast<vq::qp_state>(q->state.load(std::memory_order_relaxed));
    vq::qp_state to = (mask & vq::QP_ATTR_STATE) ? a->state : cur;
    if (to != vq::qp_state::reset && to != vq::qp_state::init && to != vq::qp_state::rtr &&
        to != vq::qp_state::rts && to != vq::qp_state::err)
        return -FI_EINVAL;
    if (!transition_ok(cur, to))
        return -FI_EINVAL;
    bool connected = q->type == vq::qp_type::rc || q->type == vq::qp_type::uc;
    if (cur == vq::qp_state::init && to == vq::qp_state::rtr && connected &&
        (mask & (vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN)) != (vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN))
        return -FI_EINVAL;
    std::lock_guard<std::mutex> g(c->lock);
    int rc = c->be->modify_qp(q->h, *a, mask, cur);
    if (rc < 0)
        return rc;
    if (mask & vq::QP_ATTR_ACCESS_FLAGS)
        q->attr.qp_access_flags = a->qp_access_flags;
    if (mask & vq::QP_ATTR_QKEY)
        q->attr.qkey = a->qkey;
    if (mask & vq::QP_ATTR_AV)
        q->attr.dest = a->dest;
    if (mask & vq::QP_ATTR_DEST_QPN)
        q->attr.dest_qp_num = a->dest_qp_num;
    if (mask & vq::QP_ATTR_SQ_PSN)
        q->attr.sq_psn = a->sq_psn;
    if (mask & vq::QP_ATTR_RQ_PSN)
        q->attr.rq_psn = a->rq_psn;
    if (mask & vq::QP_ATTR_PATH_MTU)
        q->attr.path_mtu = a->path_mtu;
    if (mask & vq::QP_ATTR_TIMEOUT)
        q->attr.timeout = a->timeout;
    if (mask & vq::QP_ATTR_RETRY_CNT)
        q->attr.retry_cnt = a->retry_cnt;
    if (mask & vq::QP_ATTR_RNR_RETRY)
        q->attr.rnr_retry = a->rnr_retry;
    if (mask & vq::QP_ATTR_MIN_RNR_TIMER)
        q->attr.min_rnr_timer = a->min_rnr_timer;
    if (to == vq::qp_state::reset) {
        // rdma-core mlx5_modify_qp to RESET: drop the QP's CQEs, restart the indices.
        q->lock.lock();
        cq_clean(static_cast<mlx5_cq *>(q->recv_cq), q->qp_num, q->msrq);
        if (q->send_cq != q->recv_cq)
            cq_clean(static_cast<mlx5_cq *>(q->send_cq), q->qp_num, nullptr);
        reset_qp_queues(q);
        q->lock.unlock();
    }
    if (to == vq::qp_state::rtr && q->type == vq::qp_type::raw_packet && !q->msrq) {
        // RAW_PACKET receives posted before RTR become visible now (rdma-core mlx5_modify_qp).
        udma_to_device_barrier();
        dbrec_store_counter(&q->rq.dbrec[0], static_cast<std::uint16_t>(q->rq.head));
    }
    q->attr.state = to;
    q->sq.not_ready = to != vq::qp_state::rts && to != vq::qp_state::err;
    q->sq.fast_credits = 0; // the single-call send looks at the new state
    q->state.store(static_cast<std::uint8_t>(to), std::memory_order_release);
    return 0;
}

int query_qp(vq::qp *vqp, vq::qp_attr *out)
{
    auto *q = static_cast<mlx5_qp *>(vqp);
    std::lock_guard<std::mutex> g(q->mctx->lock);
    *out = q->attr;
    out->state = static_cast<vq::qp_state>(q->state.load(std::memory_order_relaxed));
    return 0;
}

vq::qp_state qp_state_of(const vq::qp *vqp)
{
    return static_cast<vq::qp_state>(static_cast<const mlx5_qp *>(vqp)->state.load(std::memory_order_acquire));
}

const vq::context_ops mlx5_ops = [] {
    vq::context_ops o;
    o.close = ctx_close;
    o.query_device = query_device;
    o.alloc_pd = alloc_pd;
    o.dealloc_pd = dealloc_pd;
    o.reg_mr = reg_mr;
    o.dereg_mr = dereg_mr;
    o.alloc_mw = alloc_mw;
    o.dealloc_mw = dealloc_mw;
    o.alloc_buf = alloc_buf;
    o.free_buf = free_buf;
    o.alloc_td = alloc_td;
    o.dealloc_td = dealloc_td;
    o.create_ah = create_ah;
    o.destroy_ah = destroy_ah;
    o.create_cq = create_cq;
    o.destroy_cq = destroy_cq;
    o.create_srq = create_srq;
    o.destroy_srq = destroy_srq;
    o.create_qp = create_qp;
    o.destroy_qp = destroy_qp;
    o.modify_qp = modify_qp;
    o.query_qp = query_qp;
    o.qp_state_of = qp_state_of;
    return o;
}();

} // namespace

/* ---------------- QP table ---------------- */

int qp_table::set(std::uint32_t qpn, mlx5_qp *q)
{
    unsigned t = (qpn >> shift) & ((1u << (24 - shift)) - 1);
    if (!top[t]) {
        if (!q)
            return 0;
        top[t] = new (std::nothrow) mlx5_qp *[1u << shift]();
        if (!top[t])
            return -FI_ENOMEM;
    }
    top[t][qpn & mask] = q;
    return 0;
}

qp_table::~qp_table()
{
    for (auto *l : top)
        delete[] l;
}

} // namespace shunt::drv::mlx5

SHUNT_VQ_DRIVER_WITH_STATUS(mlx5, shunt::drv::mlx5::probe, shunt::drv::mlx5::open, shunt::drv::mlx5::status);
