// Objects opened from a domain: CQs, counters, AVs, memory regions (and the
// domain's own ops). CQ and counter reads are on the data path: fwd<> slots
// (fwd.h) that forward the application's buffer to Shunt untouched (same
// entry layouts, see abi.cpp).
#include "ofi/fwd.h"

#include <new>

namespace shunt::ofi {

namespace {

inline domain_w *dw(::fid_domain *d) { return reinterpret_cast<domain_w *>(d); }

// ---- completion queues ----

// The 1.17 error entry is shorter than Shunt's (no src_addr): read into a
// Shunt entry and copy the common fields. Error path only.
ssize_t cq_readerr(::fid_cq *cq, ::fi_cq_err_entry *buf, std::uint64_t flags)
{
    if (!buf)
        return -FI_EINVAL;
    auto *w = reinterpret_cast<cq_w *>(cq);
    sf::cq_err_entry e{};
    if (w->api_version >= FI_VERSION(1, 5)) {
        // Since 1.5 a caller may lend its own buffer for err_data.
        e.err_data = buf->err_data;
        e.err_data_size = buf->err_data_size;
    }
    ssize_t n = sf::cq_readerr(w->sh, &e, flags);
    if (n < 0)
        return n;
    buf->op_context = e.op_context;
    buf->flags = e.flags;
    buf->len = e.len;
    buf->buf = e.buf;
    buf->data = e.data;
    buf->tag = e.tag;
    buf->olen = e.olen;
    buf->err = e.err;
    buf->prov_errno = e.prov_errno;
    buf->err_data = e.err_data;
    buf->err_data_size = e.err_data_size;
    return n;
}

int cq_signal(::fid_cq *cq) { return sf::cq_signal(shunt_of(cq)); }

const char *cq_strerror(::fid_cq *cq, int prov_errno, const void *err_data, char *buf, std::size_t len)
{
    return sf::cq_strerror(shunt_of(cq), prov_errno, err_data, buf, len);
}

int cq_close(::fid *f) { return close_wrapper<cq_w>(f); }

constinit ::fi_ops_cq g_cq_ops = {
    .size = sizeof(::fi_ops_cq),
    .read = fwd<&sf::fid_cq::ops, &sf::ops_cq::read>,
    .readfrom = fwd<&sf::fid_cq::ops, &sf::ops_cq::readfrom>,
    .readerr = cq_readerr,
    .sread = fwd<&sf::fid_cq::ops, &sf::ops_cq::sread>,
    .sreadfrom = fwd<&sf::fid_cq::ops, &sf::ops_cq::sreadfrom>,
    .signal = cq_signal,
    .strerror = cq_strerror,
};

// ---- counters ----

int cntr_close(::fid *f) { return close_wrapper<cntr_w>(f); }

constinit ::fi_ops_cntr g_cntr_ops = {
    .size = sizeof(::fi_ops_cntr),
    .read = fwd<&sf::fid_cntr::ops, &sf::ops_cntr::read>,
    .readerr = fwd<&sf::fid_cntr::ops, &sf::ops_cntr::readerr>,
    .add = fwd<&sf::fid_cntr::ops, &sf::ops_cntr::add>,
    .set = fwd<&sf::fid_cntr::ops, &sf::ops_cntr::set>,
    .wait = fwd<&sf::fid_cntr::ops, &sf::ops_cntr::wait>,
    .adderr = fwd<&sf::fid_cntr::ops, &sf::ops_cntr::adderr>,
    .seterr = fwd<&sf::fid_cntr::ops, &sf::ops_cntr::seterr>,
};

// ---- address vectors ----

inline sf::fid_av *sh_av(::fid_av *av) { return reinterpret_cast<av_w *>(av)->sh; }

int av_insert(::fid_av *av, const void *addr, std::size_t count, ::fi_addr_t *fi_addr, std::uint64_t flags,
              void *context)
{
    return sf::av_insert(sh_av(av), addr, count, fi_addr, flags, context);
}
int av_insertsvc(::fid_av *av, const char *node, const char *service, ::fi_addr_t *fi_addr, std::uint64_t flags,
                 void *context)
{
    return sf::av_insertsvc(sh_av(av), node, service, fi_addr, flags, context);
}
int av_insertsym(::fid_av *av, const char *node, std::size_t nodecnt, const char *service, std::size_t svccnt,
                 ::fi_addr_t *fi_addr, std::uint64_t flags, void *context)
{
    return sf::av_insertsym(sh_av(av), node, nodecnt, service, svccnt, fi_addr, flags, context);
}
int av_remove(::fid_av *av, ::fi_addr_t *fi_addr, std::size_t count, std::uint64_t flags)
{
    return sf::av_remove(sh_av(av), fi_addr, count, flags);
}
int av_lookup(::fid_av *av, ::fi_addr_t fi_addr, void *addr, std::size_t *addrlen)
{
    return sf::av_lookup(sh_av(av), fi_addr, addr, addrlen);
}
const char *av_straddr(::fid_av *av, const void *addr, char *buf, std::size_t *len)
{
    return sf::av_straddr(sh_av(av), addr, buf, len);
}
int av_set(::fid_av *, ::fi_av_set_attr *, ::fid_av_set **, void *)
{
    return -FI_ENOSYS; // AV sets (collectives) are not part of Shunt
}

int av_close(::fid *f) { return close_wrapper<av_w>(f); }

::fi_ops_av g_av_ops = {
    sizeof(::fi_ops_av), av_insert, av_insertsvc, av_insertsym, av_remove, av_lookup, av_straddr, av_set,
};

// ---- memory regions ----

void mr_refresh(mr_w *w)
{
    w->lf.mem_desc = w->sh->mem_desc;
    w->lf.key = sf::mr_key(w->sh);
}

int mr_close(::fid *f) { return close_wrapper<mr_w>(f); }

int mr_control(::fid *f, int command, void *arg)
{
    auto *w = reinterpret_cast<mr_w *>(f);
    int rc = fid_control(f, command, arg);
    if (rc == 0 && (command == FI_ENABLE || command == FI_REFRESH))
        mr_refresh(w); // FI_MR_ENDPOINT regions get their key when enabled
    return rc;
}

int mr_bind(::fid *f, ::fid *bfid, std::uint64_t flags)
{
    auto *w = reinterpret_cast<mr_w *>(f);
    sf::fid *b = to_shunt(bfid);
    if (!b)
        return -FI_EINVAL;
    return sf::mr_bind(w->sh, b, flags);
}

int wrap_mr(sf::fid_mr *sh, void *context, ::fid_mr **mr)
{
    auto *w = new (std::nothrow) mr_w{};
    if (!w) {
        (void)sf::close(&sh->fid);
        return -FI_ENOMEM;
    }
    w->sh = sh;
    w->lf.fid.fclass = FI_CLASS_MR;
    w->lf.fid.context = context;
    w->lf.fid.ops = &g_mr_fi_ops;
    mr_refresh(w);
    return publish(w, mr);
}

// fi_mr_reg and friends take the domain's fid (or an endpoint's, FI_MR_ENDPOINT
// providers in 2.x); Shunt's ops_mr takes the Shunt fid the same way. The
// Shunt domain behind @p f, or null when @p f is not one of our domains.
sf::fid_domain *mr_domain(::fid *f)
{
    sf::fid *s = to_shunt(f);
    return s && s->fclass == FI_CLASS_DOMAIN ? reinterpret_cast<sf::fid_domain *>(s) : nullptr;
}

int mr_reg(::fid *f, const void *buf, std::size_t len, std::uint64_t access, std::uint64_t offset,
           std::uint64_t requested_key, std::uint64_t flags, ::fid_mr **mr, void *context)
{
    sf::fid_domain *d = mr_domain(f);
    if (!d || !mr)
        return -FI_EINVAL;
    sf::fid_mr *sh = nullptr;
    int rc = sf::mr_reg(d, buf, len, access, offset, requested_key, flags, &sh, context);
    if (rc)
        return rc;
    return wrap_mr(sh, context, mr);
}

int mr_regv(::fid *f, const ::iovec *iov, std::size_t count, std::uint64_t access, std::uint64_t offset,
            std::uint64_t requested_key, std::uint64_t flags, ::fid_mr **mr, void *context)
{
    sf::fid_domain *d = mr_domain(f);
    if (!d || !mr)
        return -FI_EINVAL;
    sf::fid_mr *sh = nullptr;
    int rc = sf::mr_regv(d, iov, count, access, offset, requested_key, flags, &sh, context);
    if (rc)
        return rc;
    return wrap_mr(sh, context, mr);
}

int mr_regattr(::fid *f, const ::fi_mr_attr *attr, std::uint64_t flags, ::fid_mr **mr)
{
    sf::fid_domain *d = mr_domain(f);
    if (!d || !attr || !mr)
        return -FI_EINVAL;
    sf::mr_attr sa;
    sa.mr_iov = attr->mr_iov;
    sa.iov_count = attr->iov_count;
    sa.access = attr->access;
    sa.offset = attr->offset;
    sa.requested_key = attr->requested_key;
    sa.context = attr->context;
    sa.auth_key_size = attr->auth_key_size;
    sa.auth_key = attr->auth_key;
    sa.iface = static_cast<sf::hmem_iface>(attr->iface);
    sa.device = attr->device.reserved;
    sf::fid_mr *sh = nullptr;
    int rc = sf::mr_regattr(d, &sa, flags, &sh);
    if (rc)
        return rc;
    return wrap_mr(sh, attr->context, mr);
}

// ---- the domain itself ----

int domain_close(::fid *f) { return close_wrapper<domain_w>(f); }

// ---- poll sets: members are our CQs and counters; fi_poll returns the
// contexts the application opened them with, which Shunt keeps ----

int poll_run(::fid_poll *p, void **context, int count)
{
    return sf::poll(reinterpret_cast<poll_w *>(p)->sh, context, count);
}

int poll_member(::fid_poll *p, ::fid *event_fid, std::uint64_t flags, bool add)
{
    sf::fid *m = to_shunt(event_fid);
    if (!m)
        return -FI_EINVAL;
    auto *w = reinterpret_cast<poll_w *>(p);
    return add ? sf::poll_add(w->sh, m, flags) : sf::poll_del(w->sh, m, flags);
}

int poll_add(::fid_poll *p, ::fid *f, std::uint64_t flags) { return poll_member(p, f, flags, true); }
int poll_del(::fid_poll *p, ::fid *f, std::uint64_t flags) { return poll_member(p, f, flags, false); }
int poll_close(::fid *f) { return close_wrapper<poll_w>(f); }

::fi_ops_poll g_poll_ops = {sizeof(::fi_ops_poll), poll_run, poll_add, poll_del};

int poll_open(::fid_domain *domain, ::fi_poll_attr *attr, ::fid_poll **pollset)
{
    if (!domain || !pollset)
        return -FI_EINVAL;
    sf::poll_attr sa;
    if (attr)
        sa.flags = attr->flags;
    return open_wrapped<poll_w>(pollset, nullptr, FI_CLASS_POLL, &g_poll_fi_ops, &g_poll_ops,
                                [&](poll_w *w) { return sf::poll_open(dw(domain)->sh, &sa, &w->sh); });
}

int query_atomic(::fid_domain *domain, ::fi_datatype dt, ::fi_op op, ::fi_atomic_attr *attr, std::uint64_t flags)
{
    return sf::query_atomic(dw(domain)->sh, static_cast<sf::datatype>(dt), static_cast<sf::op>(op),
                            reinterpret_cast<sf::atomic_attr *>(attr), flags);
}

int query_collective(::fid_domain *, ::fi_collective_op, ::fi_collective_attr *, std::uint64_t)
{
    return -FI_ENOSYS; // no collectives in Shunt
}

} // namespace

::fi_ops g_cq_fi_ops = {sizeof(::fi_ops), cq_close, fid_bind, fid_control, fid_ops_open, fid_tostr, fid_ops_set};
::fi_ops g_cntr_fi_ops = {sizeof(::fi_ops), cntr_close, fid_bind, fid_control, fid_ops_open, fid_tostr,
                          fid_ops_set};
::fi_ops g_av_fi_ops = {sizeof(::fi_ops), av_close, fid_bind, fid_control, fid_ops_open, fid_tostr, fid_ops_set};
::fi_ops g_mr_fi_ops = {sizeof(::fi_ops), mr_close, mr_bind, mr_control, fid_ops_open, fid_tostr, fid_ops_set};
::fi_ops g_domain_fi_ops = {sizeof(::fi_ops), domain_close, fid_bind, fid_control, fid_ops_open, fid_tostr,
                            fid_ops_set};
::fi_ops g_poll_fi_ops = {sizeof(::fi_ops), poll_close, fid_bind, fid_control, fid_ops_open, fid_tostr, fid_ops_set};

::fi_ops_domain g_domain_ops = {
    sizeof(::fi_ops_domain), av_open, cq_open, endpoint, scalable_ep, cntr_open, poll_open, stx_ctx, srx_ctx,
    query_atomic, query_collective, endpoint2,
};
::fi_ops_mr g_domain_mr_ops = {sizeof(::fi_ops_mr), mr_reg, mr_regv, mr_regattr};

int cq_open(::fid_domain *domain, ::fi_cq_attr *attr, ::fid_cq **cq, void *context)
{
    if (!domain || !attr || !cq)
        return -FI_EINVAL;
    sf::cq_attr sa;
    if (int rc = shunt_wait_set(attr->wait_set, &sa.wait_set); rc)
        return rc;
    sa.size = attr->size;
    sa.flags = attr->flags;
    sa.format = static_cast<sf::cq_format>(attr->format);
    sa.wait_obj = static_cast<sf::wait_obj>(attr->wait_obj);
    sa.signaling_vector = attr->signaling_vector;
    sa.wait_cond = static_cast<sf::cq_wait_cond>(attr->wait_cond);
    return open_wrapped<cq_w>(cq, context, FI_CLASS_CQ, &g_cq_fi_ops, &g_cq_ops, [&](cq_w *w) {
        w->api_version = dw(domain)->api_version;
        return sf::cq_open(dw(domain)->sh, &sa, &w->sh, context);
    });
}

int cntr_open(::fid_domain *domain, ::fi_cntr_attr *attr, ::fid_cntr **cntr, void *context)
{
    if (!domain || !cntr)
        return -FI_EINVAL;
    sf::cntr_attr sa;
    if (attr) {
        if (int rc = shunt_wait_set(attr->wait_set, &sa.wait_set); rc)
            return rc;
        sa.events = static_cast<sf::cntr_events>(attr->events);
        sa.wait_obj = static_cast<sf::wait_obj>(attr->wait_obj);
        sa.flags = attr->flags;
    }
    return open_wrapped<cntr_w>(cntr, context, FI_CLASS_CNTR, &g_cntr_fi_ops, &g_cntr_ops,
                                [&](cntr_w *w) { return sf::cntr_open(dw(domain)->sh, &sa, &w->sh, context); });
}

int av_open(::fid_domain *domain, ::fi_av_attr *attr, ::fid_av **av, void *context)
{
    if (!domain || !attr || !av)
        return -FI_EINVAL;
    sf::av_attr sa;
    sa.type = static_cast<sf::av_type>(attr->type);
    sa.rx_ctx_bits = attr->rx_ctx_bits;
    sa.count = attr->count;
    sa.ep_per_node = attr->ep_per_node;
    sa.name = attr->name;
    sa.map_addr = attr->map_addr;
    sa.flags = attr->flags;
    return open_wrapped<av_w>(av, context, FI_CLASS_AV, &g_av_fi_ops, &g_av_ops,
                              [&](av_w *w) { return sf::av_open(dw(domain)->sh, &sa, &w->sh, context); });
}

} // namespace shunt::ofi
