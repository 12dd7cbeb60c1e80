/* Front end of the verbs-queue layer: argument checks common to every driver,
 * then dispatch to the context's ops table. */
#include <cstdio>
#include <mutex>

#include "env/log.h"
#include "env/stats.h"
#include "vq/driver.h"

namespace shunt::vq {

SHUNT_LOG_COMPONENT(vq_log, "vq");

namespace {

/** Objects open through this front end, per kind: the "vq.objects"
 *  statistics block. Setup calls only, from any thread (atomic adds). */
struct object_counts {
    env::stats::shared_counter contexts, pds, mrs, mws, bufs, tds, ahs, cqs, srqs, qps;
};
object_counts counts;

#define OBJ_FIELD(n, help) SHUNT_STATS_FIELD(object_counts, n, gauge, none, help)
const env::stats::field object_fields[] = {
    OBJ_FIELD(contexts, "device contexts open"), OBJ_FIELD(pds, "protection domains"),
    OBJ_FIELD(mrs, "memory regions registered"), OBJ_FIELD(mws, "memory windows"),
    OBJ_FIELD(bufs, "driver buffers (alloc_buf)"), OBJ_FIELD(tds, "thread domains"),
    OBJ_FIELD(ahs, "address handles"), OBJ_FIELD(cqs, "completion queues"),
    OBJ_FIELD(srqs, "shared receive queues"), OBJ_FIELD(qps, "queue pairs"),
};
#undef OBJ_FIELD
const env::stats::schema object_schema{"vq.objects", object_fields, sizeof object_fields / sizeof object_fields[0]};

/** @p rc of a call that creates one object: counted when it succeeded. */
int created(int rc, env::stats::shared_counter &c)
{
    if (rc == 0)
        c.add();
    return rc;
}
int destroyed(int rc, env::stats::shared_counter &c)
{
    if (rc == 0)
        c.sub();
    return rc;
}

/** Register "vq.objects" once, at the first open_device(). */
void publish_object_counts()
{
    static env::stats::registration reg;
    static std::once_flag once;
    std::call_once(once, [] {
        if (reg.open("vq.objects", object_schema, &counts) != 0)
            SHUNT_LOG(vq_log, info, "no vq.objects statistics block");
    });
}

} // namespace

const char *wc_status_str(wc_status s) noexcept
{
    static const char *const names[] = {
        "success", "loc_len_err", "loc_qp_op_err", "loc_eec_op_err", "loc_prot_err",
        "wr_flush_err", "mw_bind_err", "bad_resp_err", "loc_access_err", "rem_inv_req_err",
        "rem_access_err", "rem_op_err", "retry_exc_err", "rnr_retry_exc_err",
        "loc_rdd_viol_err", "rem_inv_rd_req_err", "rem_abort_err", "inv_eecn_err",
        "inv_eec_state_err", "fatal_err", "resp_timeout_err", "general_err",
    };
    auto i = static_cast<std::uint32_t>(s);
    return i < sizeof(names) / sizeof(names[0]) ? names[i] : "unknown";
}

int open_device(device *dev, context **out)
{
    if (!dev || !out || !dev->drv)
        return -FI_EINVAL;
    publish_object_counts();
    context *c = nullptr;
    int rc = dev->drv->open(dev, &c);
    if (rc < 0)
        return rc;
    if (!c || !c->ops || c->ops->size < sizeof(context_ops)) {
        SHUNT_LOG(vq_log, error, "driver %s returned a malformed context", dev->drv->name);
        return -FI_EOTHER;
    }
    c->dev = dev;
    *out = c;
    counts.contexts.add();
    return 0;
}

int close_device(context *ctx)
{
    if (!ctx)
        return -FI_EINVAL;
    return destroyed(ctx->ops->close(ctx), counts.contexts);
}

int query_device(context *ctx, device_attr *out)
{
    if (!ctx || !out)
        return -FI_EINVAL;
    return ctx->ops->query_device(ctx, out);
}

int alloc_pd(context *ctx, pd **out)
{
    if (!ctx || !out)
        return -FI_EINVAL;
    return created(ctx->ops->alloc_pd(ctx, out), counts.pds);
}

int dealloc_pd(pd *p)
{
    if (!p)
        return -FI_EINVAL;
    return destroyed(p->ctx->ops->dealloc_pd(p), counts.pds);
}

int reg_mr(pd *p, void *addr, std::size_t length, unsigned access, mr **out)
{
    if (!p || !addr || !out || length == 0 || (access & ~ACCESS_ALL))
        return -FI_EINVAL;
    if (std::uintptr_t end; __builtin_add_overflow(reinterpret_cast<std::uintptr_t>(addr), length, &end))
        return -FI_EINVAL; // past the end of the address space: no memory there
    if ((access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) && !(access & ACCESS_LOCAL_WRITE))
        return -FI_EINVAL;
    return created(p->ctx->ops->reg_mr(p, addr, length, access, out), counts.mrs);
}

int dereg_mr(mr *m)
{
    if (!m)
        return -FI_EINVAL;
    return destroyed(m->ctx->ops->dereg_mr(m), counts.mrs);
}

int alloc_mw(pd *p, mw_type type, mw **out)
{
    if (!p || !out)
        return -FI_EINVAL;
    if (type == mw_type::type1)
        return -FI_EOPNOTSUPP;
    if (type != mw_type::type2)
        return -FI_EINVAL;
    return created(p->ctx->ops->alloc_mw(p, type, out), counts.mws);
}

int dealloc_mw(mw *w)
{
    if (!w)
        return -FI_EINVAL;
    return destroyed(w->ctx->ops->dealloc_mw(w), counts.mws);
}

int alloc_buf(context *ctx, std::size_t size, void **out)
{
    if (!ctx || !out || size == 0)
        return -FI_EINVAL;
    return created(ctx->ops->alloc_buf(ctx, size, out), counts.bufs);
}

int free_buf(context *ctx, void *buf)
{
    if (!ctx || !buf)
        return -FI_EINVAL;
    return destroyed(ctx->ops->free_buf(ctx, buf), counts.bufs);
}

int alloc_td(context *ctx, td **out)
{
    if (!ctx || !out)
        return -FI_EINVAL;
    return created(ctx->ops->alloc_td(ctx, out), counts.tds);
}

int dealloc_td(td *t)
{
    if (!t)
        return -FI_EINVAL;
    return destroyed(t->ctx->ops->dealloc_td(t), counts.tds);
}

int create_ah(pd *p, const ah_attr *attr, ah **out)
{
    if (!p || !attr || !out || attr->dest.len == 0 || attr->dest.len > sizeof(attr->dest.raw))
        return -FI_EINVAL;
    return created(p->ctx->ops->create_ah(p, attr, out), counts.ahs);
}

int destroy_ah(ah *a)
{
    if (!a)
        return -FI_EINVAL;
    return destroyed(a->ctx->ops->destroy_ah(a), counts.ahs);
}

int create_cq(context *ctx, const cq_init_attr *attr, cq **out)
{
    if (!ctx || !attr || !out || attr->cqe <= 0)
        return -FI_EINVAL;
    return created(ctx->ops->create_cq(ctx, attr, out), counts.cqs);
}

int destroy_cq(cq *c)
{
    if (!c)
        return -FI_EINVAL;
    return destroyed(c->ctx->ops->destroy_cq(c), counts.cqs);
}

int create_srq(pd *p, const srq_init_attr *attr, srq **out)
{
    if (!p || !attr || !out || attr->max_wr == 0)
        return -FI_EINVAL;
    return created(p->ctx->ops->create_srq(p, attr, out), counts.srqs);
}

int destroy_srq(srq *s)
{
    if (!s)
        return -FI_EINVAL;
    return destroyed(s->ctx->ops->destroy_srq(s), counts.srqs);
}

int create_qp(pd *p, const qp_init_attr *attr, qp **out)
{
    if (!p || !attr || !out || !attr->send_cq || !attr->recv_cq)
        return -FI_EINVAL;
    context *ctx = p->ctx;
    if (attr->send_cq->ctx != ctx || attr->recv_cq->ctx != ctx ||
        (attr->srq && attr->srq->ctx != ctx) || (attr->td && attr->td->ctx != ctx))
        return -FI_EINVAL;
    auto t = static_cast<unsigned>(attr->type);
    if (t >= num_qp_types)
        return -FI_EINVAL;
    if (attr->send_ops_flags & ~OPS_ALL) {
        SHUNT_LOG(vq_log, info, "create_qp: unknown send_ops_flags bits %#llx",
                  static_cast<unsigned long long>(attr->send_ops_flags & ~OPS_ALL));
        return -FI_EINVAL;
    }
    std::uint64_t allowed = ops_allowed(attr->type);
    if (allowed == 0)
        return -FI_EINVAL; // not a QP type that posts sends (xrc_recv) or unknown
    if (attr->send_ops_flags & ~allowed) {
        SHUNT_LOG(vq_log, info, "create_qp: operations %#llx not allowed on this QP type",
                  static_cast<unsigned long long>(attr->send_ops_flags & ~allowed));
        return -FI_EINVAL;
    }
    device_attr da;
    int rc = ctx->ops->query_device(ctx, &da);
    if (rc < 0)
        return rc;
    if (da.ops[t] == 0)
        return -FI_EOPNOTSUPP;
    if (attr->send_ops_flags & ~da.ops[t])
        return -FI_EOPNOTSUPP;
    if (attr->lend_recv) {
        if (attr->srq)
            return -FI_EINVAL; // lent receives post nothing: there is no receive queue to share
        if (!(da.lend_qp_types & (1u << t)))
            return -FI_EOPNOTSUPP;
    }
    rc = created(ctx->ops->create_qp(p, attr, out), counts.qps);
    if (rc == 0 && *out && !(*out)->post_send_imm_inline_fn)
        (*out)->post_send_imm_inline_fn = session_send_imm_inline; // a driver without qp_stubs
    if (rc == 0 && *out && !(*out)->poll_lent_fn)
        (*out)->poll_lent_fn = poll_lent_unsupported;
    if (rc == 0 && *out && !(*out)->post_send_imm_hdr_inline_fn)
        (*out)->post_send_imm_hdr_inline_fn = list_send_imm_hdr_inline;
    return rc;
}

int destroy_qp(qp *q)
{
    if (!q)
        return -FI_EINVAL;
    return destroyed(q->ctx->ops->destroy_qp(q), counts.qps);
}

int modify_qp(qp *q, const qp_attr *attr, unsigned attr_mask)
{
    if (!q || !attr)
        return -FI_EINVAL;
    if ((attr_mask & QP_ATTR_AV) && (attr->dest.len == 0 || attr->dest.len > sizeof(attr->dest.raw)))
        return -FI_EINVAL;
    return q->ctx->ops->modify_qp(q, attr, attr_mask);
}

int query_qp(qp *q, qp_attr *out)
{
    if (!q || !out)
        return -FI_EINVAL;
    return q->ctx->ops->query_qp(q, out);
}

int check_dest_qp(context *ctx, const qp_addr *dest, qp_type type)
{
    if (!ctx || !dest || dest->dev.len == 0 || dest->dev.len > sizeof(dest->dev.raw) ||
        (type != qp_type::rc && type != qp_type::uc))
        return -FI_EINVAL;
    return ctx->ops->check_dest_qp(ctx, dest, type);
}

qp_state get_qp_state(const qp *q) noexcept
{
    if (!q || !q->ctx->ops->qp_state_of)
        return qp_state::err;
    return q->ctx->ops->qp_state_of(q);
}

qp_addr get_qp_addr(const qp *q) noexcept
{
    qp_addr a{};
    if (q) {
        a.dev = q->ctx->addr;
        a.qpn = q->qp_num;
    }
    return a;
}

std::string dev_addr_str(const dev_addr &a)
{
    std::string s;
    std::size_t n = a.len <= sizeof(a.raw) ? a.len : sizeof(a.raw);
    bool printable = n > 0;
    for (std::size_t i = 0; i < n; i++)
        if (a.raw[i] < 0x20 || a.raw[i] > 0x7e)
            printable = false;
    if (printable)
        return std::string(reinterpret_cast<const char *>(a.raw), n);
    char b[3];
    for (std::size_t i = 0; i < n; i++) {
        std::snprintf(b, sizeof b, "%02x", a.raw[i]);
        s += b;
    }
    return s;
}

} // namespace shunt::vq
