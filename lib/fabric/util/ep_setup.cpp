// Endpoint base: creation, binding, enable, close, shared and scalable
// contexts (the rules of fi_endpoint(3) every provider shares).
#include <algorithm>
#include <new>

#include "env/errors.h"
#include "env/log.h"
#include "fabric/detail/live.h"
#include "fabric/util/ep.h"
#include "fabric/util/mr.h"

namespace shunt::fabric {
extern env::log::component fabric_log;
}

namespace shunt::fabric::util {

void ep_recompute(ep_handle *h); // ep_opts.cpp

namespace {

bool connectionless(ep_type t) { return t == FI_EP_RDM || t == FI_EP_DGRAM; }

constexpr std::uint64_t cntr_flags = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

/** The progress hook of a bound endpoint: registered only for one whose
 *  hooks have a progress (bind_cq, bind_cntr, the EQ bind). */
void progress_fn(void *arg)
{
    auto *c = static_cast<ep_core *>(arg);
    if (c->state.load(std::memory_order_relaxed) == ep_state::enabled)
        c->hooks->progress(c);
}

int bind_cq(ep_core *c, cq_obj *cq, std::uint64_t flags)
{
    if (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION))
        return -FI_EBADFLAGS;
    if (!(flags & (FI_TRANSMIT | FI_RECV)))
        return -FI_EINVAL; // FI_SELECTIVE_COMPLETION must be OR-ed with a direction
    if (c->fclass == FI_CLASS_SEP || c->fclass == FI_CLASS_SRX_CTX)
        return -FI_EINVAL;
    if ((c->fclass == FI_CLASS_TX_CTX && (flags & FI_RECV)) || (c->fclass == FI_CLASS_RX_CTX && (flags & FI_TRANSMIT)))
        return -FI_EINVAL;
    if ((flags & FI_TRANSMIT && c->tx_cq) || (flags & FI_RECV && c->rx_cq))
        return -FI_EBUSY;
    bool sel = flags & FI_SELECTIVE_COMPLETION;
    if (flags & FI_TRANSMIT) {
        c->tx_cq = cq;
        c->tx_selective = sel;
        cq->refs.fetch_add(1);
    }
    if (flags & FI_RECV) {
        c->rx_cq = cq;
        c->rx_selective = sel;
        cq->refs.fetch_add(1);
    }
    if (c->hooks && c->hooks->progress) {
        cq_remove_progress(cq, c);
        cq_add_progress(cq, progress_hook{progress_fn, c});
    }
    return 0;
}

int bind_cntr(ep_core *c, cntr_obj *n, std::uint64_t flags)
{
    if (!flags || (flags & ~cntr_flags))
        return -FI_EBADFLAGS;
    if ((flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) && !(c->caps & FI_RMA_EVENT))
        return -FI_EOPNOTSUPP;
    struct {
        std::uint64_t bit;
        cntr_obj **slot;
    } map[] = {{FI_SEND, &c->c_send}, {FI_RECV, &c->c_recv}, {FI_READ, &c->c_read},
               {FI_WRITE, &c->c_write}, {FI_REMOTE_READ, &c->c_rread}, {FI_REMOTE_WRITE, &c->c_rwrite}};
    for (auto &m : map)
        if ((flags & m.bit) && *m.slot)
            return -FI_EBUSY;
    for (auto &m : map)
        if (flags & m.bit) {
            *m.slot = n;
            n->refs.fetch_add(1);
        }
    if (c->hooks && c->hooks->progress) {
        cntr_remove_progress(n, c);
        cntr_add_progress(n, progress_hook{progress_fn, c});
    }
    return 0;
}

void unbind_all(ep_core *c)
{
    for (cq_obj *cq : {c->tx_cq, c->rx_cq})
        if (cq) {
            cq_remove_progress(cq, c);
            cq->refs.fetch_sub(1);
        }
    for (cntr_obj *n : {c->c_send, c->c_recv, c->c_read, c->c_write, c->c_rread, c->c_rwrite})
        if (n) {
            cntr_remove_progress(n, c);
            n->refs.fetch_sub(1);
        }
    if (c->av && !c->av_inherited)
        c->av->refs.fetch_sub(1);
    if (c->eq) {
        eq_remove_progress(c->eq, c);
        c->eq->refs.fetch_sub(1);
    }
    if (c->stx)
        c->stx->refs.fetch_sub(1);
    if (c->srx)
        c->srx->bound_to_srx.fetch_sub(1);
}

// Messages @p c received into a shared receive context that no receive took
// yet go with it (close and critical errors discard without completions).
void drop_received(ep_core *c)
{
    if (!c->srx) {
        c->rx->clear();
        return;
    }
    guard g(c->rx->lock);
    c->rx->drop_owned(c);
}


} // namespace

ep_core *ep_core_of(fid *f) { return reinterpret_cast<ep_handle *>(f)->core; }

int ep_bind_generic(fid *f, fid *b, std::uint64_t flags)
{
    ep_core *c = ep_core_of(f);
    bool enabled = c->state.load() != ep_state::disabled;
    switch (b->fclass) {
    case FI_CLASS_CQ: {
        cq_obj *cq = reinterpret_cast<cq_obj *>(b);
        if (cq->domain != c->domain)
            return -FI_EDOMAIN;
        if (enabled)
            return -FI_EOPBADSTATE;
        return bind_cq(c, cq, flags);
    }
    case FI_CLASS_CNTR: {
        cntr_obj *n = reinterpret_cast<cntr_obj *>(b);
        if (n->domain != c->domain)
            return -FI_EDOMAIN;
        if (enabled)
            return -FI_EOPBADSTATE;
        if (c->fclass == FI_CLASS_SEP || c->fclass == FI_CLASS_SRX_CTX)
            return -FI_EINVAL;
        return bind_cntr(c, n, flags);
    }
    case FI_CLASS_AV: {
        av_obj *av = reinterpret_cast<av_obj *>(b);
        if (av->domain != c->domain)
            return -FI_EDOMAIN;
        if (flags)
            return -FI_EBADFLAGS;
        if (!connectionless(c->type))
            return -FI_EINVAL;
        if (enabled)
            return -FI_EOPBADSTATE;
        if (c->av)
            return -FI_EBUSY; // connectionless endpoints take exactly one AV
        c->av = av;
        av->refs.fetch_add(1);
        return 0;
    }
    case FI_CLASS_EQ: {
        eq_obj *eq = reinterpret_cast<eq_obj *>(b);
        if (eq->fabric != c->domain->fabric)
            return -FI_EDOMAIN;
        if (flags)
            return -FI_EBADFLAGS;
        if (c->eq)
            return -FI_EBUSY;
        c->eq = eq;
        eq->refs.fetch_add(1);
        if (c->hooks && c->hooks->progress)
            eq_add_progress(eq, progress_hook{progress_fn, c});
        return 0;
    }
    case FI_CLASS_STX_CTX: {
        stx_obj *s = reinterpret_cast<stx_obj *>(b);
        if (s->domain != c->domain)
            return -FI_EDOMAIN;
        if (enabled)
            return -FI_EOPBADSTATE;
        if (!c->info->ep_attr || c->info->ep_attr->tx_ctx_cnt != FI_SHARED_CONTEXT)
            return -FI_EINVAL;
        if (c->stx)
            return -FI_EBUSY;
        c->stx = s;
        s->refs.fetch_add(1);
        return 0;
    }
    case FI_CLASS_SRX_CTX: {
        ep_core *s = ep_core_of(b);
        if (s->domain != c->domain)
            return -FI_EDOMAIN;
        if (enabled)
            return -FI_EOPBADSTATE;
        if (!c->info->ep_attr || c->info->ep_attr->rx_ctx_cnt != FI_SHARED_CONTEXT)
            return -FI_EINVAL;
        if (c->srx)
            return -FI_EBUSY;
        c->srx = s;
        c->rx = &s->own_rx;
        s->bound_to_srx.fetch_add(1);
        return 0;
    }
    case FI_CLASS_MR:
        return b->ops->bind(b, f, flags);
    default:
        return -FI_ENOSYS;
    }
}

int ep_enable(ep_core *c)
{
    ep_state st = c->state.load();
    if (st == ep_state::enabled)
        return 0;
    if (st == ep_state::failed) {
        // Re-enable after a critical error: the provider decides.
        if (!c->hooks || !c->hooks->enable)
            return -FI_EOPBADSTATE;
        int rc = c->hooks->enable(c);
        if (rc)
            return rc;
        c->state.store(ep_state::enabled);
        return 0;
    }
    if (c->fclass == FI_CLASS_SRX_CTX)
        return 0;
    bool tx = (c->fclass == FI_CLASS_EP || c->fclass == FI_CLASS_TX_CTX) &&
              (c->caps & (FI_SEND | FI_READ | FI_WRITE));
    bool rx = (c->fclass == FI_CLASS_EP || c->fclass == FI_CLASS_RX_CTX) && (c->caps & FI_RECV);
    if (c->fclass != FI_CLASS_SEP) {
        // Completions of every direction that can generate them need a CQ,
        // even with FI_SELECTIVE_COMPLETION: errors are always reported.
        if (tx && !c->tx_cq)
            return -FI_ENOCQ;
        if (rx && !c->rx_cq)
            return -FI_ENOCQ;
    }
    if (connectionless(c->type) && !c->av && !(c->sep && c->sep->av))
        return -FI_ENOAV;
    if (c->type == FI_EP_MSG && !c->eq && c->fclass == FI_CLASS_EP)
        return -FI_ENOEQ;
    if (c->info->ep_attr && c->info->ep_attr->tx_ctx_cnt == FI_SHARED_CONTEXT && !c->stx && tx)
        return -FI_EINVAL;
    if (c->info->ep_attr && c->info->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT && !c->srx && rx)
        return -FI_EINVAL;
    if (c->sep && !c->av) {
        c->av = c->sep->av; // contexts inherit the scalable endpoint's AV (the sep holds the reference)
        c->av_inherited = true;
    }
    if (c->rx == &c->own_rx && c->own_rx.pool.empty()) {
        std::size_t depth = c->info->rx_attr && c->info->rx_attr->size ? c->info->rx_attr->size : 256;
        if (int rc = c->own_rx.init(depth); rc)
            return rc;
    }
    // Connected endpoints have one peer: source addresses are ignored.
    bool connless = connectionless(c->type);
    c->rx->directed_msg = connless && (c->caps & FI_DIRECTED_RECV);
    c->rx->directed_tagged = connless && (c->caps & (FI_DIRECTED_RECV | FI_TAGGED_DIRECTED_RECV));
    c->rx->lock.enable(c->domain->mt || c->srx);
    c->inc_send = cntr_inc_for(c->c_send);
    c->inc_recv = cntr_inc_for(c->c_recv);
    c->inc_read = cntr_inc_for(c->c_read);
    c->inc_write = cntr_inc_for(c->c_write);
    c->inc_rread = cntr_inc_for(c->c_rread);
    c->inc_rwrite = cntr_inc_for(c->c_rwrite);
    if (c->hooks && c->hooks->enable)
        if (int rc = c->hooks->enable(c); rc)
            return rc;
    ep_recompute(c->main);
    c->state.store(ep_state::enabled, std::memory_order_release);
    return 0;
}

void ep_fail(ep_core *c, int err)
{
    c->state.store(ep_state::failed);
    drop_received(c);
    if (c->eq) {
        eq_err_entry e{};
        e.fid = &c->main->ep.fid;
        e.context = c->main->ep.fid.context;
        e.err = err;
        (void)eq_post_err(c->eq, e);
    }
}

int ep_close_generic(fid *f)
{
    ep_handle *h = reinterpret_cast<ep_handle *>(f);
    ep_core *c = h->core;
    if (h->parent) {
        c->aliases.fetch_sub(1);
        delete h;
        return 0;
    }
    if (c->aliases.load())
        return -FI_EBUSY; // every alias must be closed first
    if (c->open_ctx.load())
        return -FI_EBUSY; // scalable endpoint with open contexts
    if (c->bound_to_srx.load())
        return -FI_EBUSY;
    // Stop progress first: once the hooks are off the CQs, counters and EQ
    // (their removal waits for a running pass), nothing calls into the
    // provider's state that close frees.
    c->state.store(ep_state::disabled);
    unbind_all(c);
    mr_unbind_ep(c->domain, c);
    if (c->hooks && c->hooks->close)
        c->hooks->close(c);
    if (c->srx)
        drop_received(c); // after the provider stopped delivering
    if (c->sep) {
        auto &v = c->fclass == FI_CLASS_TX_CTX ? c->sep->tx_ctx : c->sep->rx_ctx;
        for (auto &p : v)
            if (p == h)
                p = nullptr;
        c->sep->open_ctx.fetch_sub(1);
    }
    c->own_rx.clear();
    c->domain->refs.fetch_sub(1);
    freeinfo(c->info);
    delete c;
    delete h;
    return 0;
}

int ep_create(domain_obj *d, const info *in, std::size_t fclass, const ep_hooks *hooks, const ep_tables &t,
              void *context, ep_handle **out)
{
    if (!d || !in || !out)
        return -FI_EINVAL;
    if (in->ep_attr && d->info && d->info->ep_attr && d->info->ep_attr->type != FI_EP_UNSPEC &&
        in->ep_attr->type != FI_EP_UNSPEC && in->ep_attr->type != d->info->ep_attr->type)
        return -FI_EOPNOTSUPP;
    std::uint64_t dom_caps = d->info ? d->info->caps : ~0ULL;
    if (in->caps & ~dom_caps & FI_PRIMARY_CAPS)
        return -FI_EOPNOTSUPP;
    auto *c = new (std::nothrow) ep_core;
    auto *h = new (std::nothrow) ep_handle;
    info *copy = dupinfo(in);
    if (!c || !h || !copy) {
        delete c;
        delete h;
        freeinfo(copy);
        return -FI_ENOMEM;
    }
    c->domain = d;
    c->info = copy;
    c->hooks = hooks;
    c->fclass = fclass;
    c->type = copy->ep_attr && copy->ep_attr->type != FI_EP_UNSPEC
                  ? copy->ep_attr->type
                  : (d->info && d->info->ep_attr ? d->info->ep_attr->type : FI_EP_RDM);
    c->caps = copy->caps ? copy->caps : dom_caps;
    if (!(c->caps & (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
        c->caps |= FI_SEND | FI_RECV | ((c->caps & (FI_RMA | FI_ATOMIC)) ? FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE : 0);
    if (fclass == FI_CLASS_TX_CTX)
        c->caps &= ~(FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE);
    if (fclass == FI_CLASS_RX_CTX || fclass == FI_CLASS_SRX_CTX)
        c->caps &= ~(FI_SEND | FI_READ | FI_WRITE);
    const info *lim = d->info ? d->info : copy;
    c->max_msg_size = copy->ep_attr && copy->ep_attr->max_msg_size ? copy->ep_attr->max_msg_size
                                                                     : (lim->ep_attr ? lim->ep_attr->max_msg_size : 0);
    c->inject_size = copy->tx_attr ? copy->tx_attr->inject_size : 0;
    c->iov_limit = copy->tx_attr && copy->tx_attr->iov_limit ? copy->tx_attr->iov_limit : 1;
    c->rma_iov_limit = copy->tx_attr && copy->tx_attr->rma_iov_limit ? copy->tx_attr->rma_iov_limit : 1;
    c->cq_data_size = copy->domain_attr ? copy->domain_attr->cq_data_size : 0;
    if (copy->ep_attr && copy->ep_attr->mem_tag_format == FI_TAG_CCL)
        c->tag_unignorable = ~0ULL;
    for (int i = 0; i < 4; i++) {
        c->max_size[i] = c->max_msg_size;
        c->inject_max[i] = c->inject_size;
    }
    c->tx_lock.enable(d->thread == FI_THREAD_SAFE || d->data_progress == FI_PROGRESS_AUTO);
    c->main = h;
    std::size_t ntx = copy->ep_attr ? copy->ep_attr->tx_ctx_cnt : 0;
    std::size_t nrx = copy->ep_attr ? copy->ep_attr->rx_ctx_cnt : 0;
    if (fclass == FI_CLASS_SEP) {
        c->tx_ctx.assign(ntx && ntx != FI_SHARED_CONTEXT ? ntx : 1, nullptr);
        c->rx_ctx.assign(nrx && nrx != FI_SHARED_CONTEXT ? nrx : 1, nullptr);
    }
    h->core = c;
    h->ep.fid.fclass = fclass;
    h->ep.fid.context = context;
    h->ep.fid.ops = t.fid;
    h->ep.ops = t.ep;
    static const ops_cm no_cm{};
    h->ep.cm = t.cm ? t.cm : &no_cm;
    h->ep.msg = t.msg;
    h->ep.tagged = t.tagged;
    h->ep.rma = t.rma;
    h->ep.atomic = t.atomic;
    h->tx_op_flags = copy->tx_attr ? copy->tx_attr->op_flags : 0;
    h->rx_op_flags = copy->rx_attr ? copy->rx_attr->op_flags : 0;
    ep_recompute(h);
    d->refs.fetch_add(1);
    *out = h;
    return 0;
}

// ---- scalable endpoint contexts ----
namespace {

int open_ctx(fid_ep *sep, int index, bool tx, void *attr, fid_ep **out, void *context)
{
    ep_core *s = core_of(sep);
    if (s->fclass != FI_CLASS_SEP)
        return -FI_EINVAL;
    auto &v = tx ? s->tx_ctx : s->rx_ctx;
    if (index < 0 || std::size_t(index) >= v.size())
        return -FI_EINVAL;
    if (v[std::size_t(index)])
        return -FI_EBUSY;
    info *ci = dupinfo(s->info);
    if (!ci)
        return -FI_ENOMEM;
    if (tx && attr) {
        auto *a = static_cast<tx_attr *>(attr);
        if (a->caps && (a->caps & ~s->caps & FI_PRIMARY_CAPS)) {
            freeinfo(ci);
            return -FI_EINVAL;
        }
        if (a->caps)
            ci->caps = a->caps | (s->caps & FI_SECONDARY_CAPS);
        if (a->op_flags)
            ci->tx_attr->op_flags = a->op_flags;
    } else if (!tx && attr) {
        auto *a = static_cast<rx_attr *>(attr);
        if (a->caps && (a->caps & ~s->caps & FI_PRIMARY_CAPS)) {
            freeinfo(ci);
            return -FI_EINVAL;
        }
        if (a->caps)
            ci->caps = a->caps | (s->caps & FI_SECONDARY_CAPS);
        if (a->op_flags)
            ci->rx_attr->op_flags = a->op_flags;
    }
    ep_tables t;
    ep_handle *sh = to_handle(sep);
    t.fid = sh->ep.fid.ops;
    t.ep = sh->ep.ops;
    t.cm = sh->ep.cm;
    t.msg = sh->ep.msg;
    t.tagged = sh->ep.tagged;
    t.rma = sh->ep.rma;
    t.atomic = sh->ep.atomic;
    ep_handle *h = nullptr;
    int rc = ep_create(s->domain, ci, tx ? FI_CLASS_TX_CTX : FI_CLASS_RX_CTX, s->hooks, t, context, &h);
    freeinfo(ci);
    if (rc)
        return rc;
    h->core->sep = s;
    h->core->ctx_index = std::uint32_t(index);
    h->core->type = s->type;
    // What the provider set up on the scalable endpoint after creating it
    // holds for its contexts too (they do not pass through its open).
    h->core->supported_op_flags = s->supported_op_flags;
    v[std::size_t(index)] = h;
    s->open_ctx.fetch_add(1);
    if (tx && attr)
        *static_cast<tx_attr *>(attr) = *h->core->info->tx_attr;
    if (!tx && attr)
        *static_cast<rx_attr *>(attr) = *h->core->info->rx_attr;
    *out = &h->ep;
    return 0;
}

} // namespace

int ep_tx_ctx(fid_ep *sep, int index, tx_attr *attr, fid_ep **out, void *context)
{
    return open_ctx(sep, index, true, attr, out, context);
}

int ep_rx_ctx(fid_ep *sep, int index, rx_attr *attr, fid_ep **out, void *context)
{
    return open_ctx(sep, index, false, attr, out, context);
}

// ---- shared contexts (domain level) ----
namespace {

int stx_close(fid *f)
{
    stx_obj *s = reinterpret_cast<stx_obj *>(f);
    if (s->refs.load())
        return -FI_EBUSY;
    s->domain->refs.fetch_sub(1);
    delete s;
    return 0;
}
constexpr ops_fid stx_fid_ops{.close = stx_close};
const ops_ep stx_ep_ops{};

const ep_hooks srx_hooks{};

} // namespace

int stx_open(fid_domain *domain, tx_attr *attr, fid_stx **out, void *context)
{
    domain_obj *d = to_domain(domain);
    if (!out)
        return -FI_EINVAL;
    auto *s = new (std::nothrow) stx_obj;
    if (!s)
        return -FI_ENOMEM;
    s->domain = d;
    if (attr)
        s->attr = *attr;
    else if (d->info && d->info->tx_attr)
        s->attr = *d->info->tx_attr;
    s->stx.fid.fclass = FI_CLASS_STX_CTX;
    s->stx.fid.context = context;
    s->stx.fid.ops = &stx_fid_ops;
    s->stx.ops = &stx_ep_ops;
    d->refs.fetch_add(1);
    *out = &s->stx;
    return 0;
}

int srx_open(fid_domain *domain, rx_attr *attr, fid_ep **out, void *context)
{
    domain_obj *d = to_domain(domain);
    if (!out || !d->info)
        return -FI_EINVAL;
    info *ci = dupinfo(d->info);
    if (!ci)
        return -FI_ENOMEM;
    if (attr) {
        if (attr->caps)
            ci->caps = attr->caps;
        if (attr->size)
            ci->rx_attr->size = attr->size;
        ci->rx_attr->op_flags = attr->op_flags;
    }
    ep_handle *h = nullptr;
    ep_tables t;
    int rc = ep_create(d, ci, FI_CLASS_SRX_CTX, &srx_hooks, t, context, &h);
    freeinfo(ci);
    if (rc)
        return rc;
    ep_core *c = h->core;
    std::size_t depth = c->info->rx_attr && c->info->rx_attr->size ? c->info->rx_attr->size : 256;
    if ((rc = c->own_rx.init(depth))) {
        (void)ep_close_generic(&h->ep.fid);
        return rc;
    }
    c->own_rx.lock.enable(true);
    c->own_rx.directed_msg = c->caps & FI_DIRECTED_RECV;
    c->own_rx.directed_tagged = c->caps & (FI_DIRECTED_RECV | FI_TAGGED_DIRECTED_RECV);
    c->state.store(ep_state::enabled);
    if (attr)
        *attr = *c->info->rx_attr;
    *out = &h->ep;
    return 0;
}

} // namespace shunt::fabric::util
