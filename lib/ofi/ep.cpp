// Endpoints (active, scalable, contexts, shared contexts, passive): opening,
// binding, control, options and connection management. The data-transfer
// ops tables are in ep_data.cpp.
#include "ofi/fwd.h"

#include <new>

namespace shunt::ofi {

extern ::fi_ops_msg g_msg_ops;
extern ::fi_ops_tagged g_tagged_ops;
extern ::fi_ops_rma g_rma_ops;
extern ::fi_ops_atomic g_atomic_ops;
extern ::fi_ops_collective g_collective_ops;

namespace {

inline ep_w *ew(::fid_ep *ep) { return reinterpret_cast<ep_w *>(ep); }
inline domain_w *dw(::fid_domain *d) { return reinterpret_cast<domain_w *>(d); }

// ---- fid ops of endpoints ----

int ep_close(::fid *f) { return close_wrapper<ep_w>(f); }

int ep_control(::fid *f, int command, void *arg)
{
    auto *w = reinterpret_cast<ep_w *>(f);
    if (command != FI_ALIAS)
        return fid_control(f, command, arg);
    auto *a = static_cast<struct ::fi_alias *>(arg);
    if (!a || !a->fid)
        return -FI_EINVAL;
    auto *nw = new (std::nothrow) ep_w{};
    if (!nw)
        return -FI_ENOMEM;
    sf::fid *sh_alias = nullptr;
    sf::alias sa{&sh_alias, a->flags};
    int rc = sf::control(&w->sh->fid, FI_ALIAS, &sa);
    if (rc) {
        delete nw;
        return rc;
    }
    ep_wrap(nw, reinterpret_cast<sf::fid_ep *>(sh_alias), w->lf.fid.context, w->api_version);
    ::fid_ep *alias = nullptr;
    if ((rc = publish(nw, &alias)))
        return rc;
    *a->fid = &alias->fid;
    return 0;
}

// ---- fi_ops_ep ----

ssize_t ep_cancel(::fid *f, void *context)
{
    sf::fid *s = to_shunt(f);
    if (!s)
        return -FI_EINVAL;
    if (s->fclass == FI_CLASS_PEP || s->fclass == FI_CLASS_STX_CTX)
        return -FI_ENOSYS;
    return sf::cancel(reinterpret_cast<sf::fid_ep *>(s), context);
}

int ep_getopt(::fid *f, int level, int optname, void *optval, std::size_t *optlen)
{
    sf::fid *s = to_shunt(f);
    if (!s)
        return -FI_EINVAL;
    return sf::getopt(s, level, optname, optval, optlen);
}

int ep_setopt(::fid *f, int level, int optname, const void *optval, std::size_t optlen)
{
    sf::fid *s = to_shunt(f);
    if (!s)
        return -FI_EINVAL;
    return sf::setopt(s, level, optname, optval, optlen);
}

template <bool Tx>
int ep_ctx(::fid_ep *sep, int index, void *attr, ::fid_ep **ctx_ep, void *context)
{
    if (!sep || !ctx_ep)
        return -FI_EINVAL;
    auto *w = ew(sep);
    auto *nw = new (std::nothrow) ep_w{};
    if (!nw)
        return -FI_ENOMEM;
    sf::fid_ep *sh = nullptr;
    int rc;
    if constexpr (Tx) {
        sf::tx_attr sa;
        auto *la = static_cast<::fi_tx_attr *>(attr);
        if (la)
            tx_attr_to_shunt(la, &sa);
        rc = sf::tx_context(w->sh, index, la ? &sa : nullptr, &sh, context);
        if (rc == 0 && la)
            tx_attr_to_lf(&sa, la);
    } else {
        sf::rx_attr sa;
        auto *la = static_cast<::fi_rx_attr *>(attr);
        if (la)
            rx_attr_to_shunt(la, &sa);
        rc = sf::rx_context(w->sh, index, la ? &sa : nullptr, &sh, context);
        if (rc == 0 && la)
            rx_attr_to_lf(&sa, la);
    }
    if (rc) {
        delete nw;
        return rc;
    }
    ep_wrap(nw, sh, context, w->api_version);
    return publish(nw, ctx_ep);
}

int ep_tx_ctx(::fid_ep *sep, int index, ::fi_tx_attr *attr, ::fid_ep **tx_ep, void *context)
{
    return ep_ctx<true>(sep, index, attr, tx_ep, context);
}

int ep_rx_ctx(::fid_ep *sep, int index, ::fi_rx_attr *attr, ::fid_ep **rx_ep, void *context)
{
    return ep_ctx<false>(sep, index, attr, rx_ep, context);
}

// fi_rx_size_left / fi_tx_size_left are deprecated in the spec; forwarded as they are.
constinit ::fi_ops_ep g_ep_ops = {
    .size = sizeof(::fi_ops_ep),
    .cancel = ep_cancel,
    .getopt = ep_getopt,
    .setopt = ep_setopt,
    .tx_ctx = ep_tx_ctx,
    .rx_ctx = ep_rx_ctx,
    .rx_size_left = fwd<&sf::fid_ep::ops, &sf::ops_ep::rx_size_left>,
    .tx_size_left = fwd<&sf::fid_ep::ops, &sf::ops_ep::tx_size_left>,
};

// ---- connection management ----

int cm_setname(::fid *f, void *addr, std::size_t addrlen)
{
    sf::fid *s = to_shunt(f);
    return s ? sf::setname(s, addr, addrlen) : -FI_EINVAL;
}

int cm_getname(::fid *f, void *addr, std::size_t *addrlen)
{
    sf::fid *s = to_shunt(f);
    return s ? sf::getname(s, addr, addrlen) : -FI_EINVAL;
}

int cm_getpeer(::fid_ep *ep, void *addr, std::size_t *addrlen)
{
    return sf::getpeer(ew(ep)->sh, addr, addrlen);
}

int cm_connect(::fid_ep *ep, const void *addr, const void *param, std::size_t paramlen)
{
    return sf::connect(ew(ep)->sh, addr, param, paramlen);
}

int cm_listen(::fid_pep *pep) { return sf::listen(reinterpret_cast<pep_w *>(pep)->sh); }

int cm_accept(::fid_ep *ep, const void *param, std::size_t paramlen)
{
    return sf::accept(ew(ep)->sh, param, paramlen);
}

int cm_reject(::fid_pep *pep, ::fid_t handle, const void *param, std::size_t paramlen)
{
    if (!handle)
        return -FI_EINVAL;
    // The handle of a FI_CONNREQ event is the Shunt connection request itself.
    sf::fid *h = handle->fclass == FI_CLASS_CONNREQ ? reinterpret_cast<sf::fid *>(handle) : to_shunt(handle);
    if (!h)
        return -FI_EINVAL;
    return sf::reject(reinterpret_cast<pep_w *>(pep)->sh, h, param, paramlen);
}

int cm_shutdown(::fid_ep *ep, std::uint64_t flags) { return sf::shutdown(ew(ep)->sh, flags); }

int cm_join(::fid_ep *, const void *, std::uint64_t, ::fid_mc **, void *)
{
    return -FI_ENOSYS; // multicast groups are not part of Shunt
}

// Passive endpoints have no peer, connect, accept or shutdown; active ones
// do not listen or reject.
int pep_no_getpeer(::fid_ep *, void *, std::size_t *) { return -FI_ENOSYS; }
int pep_no_connect(::fid_ep *, const void *, const void *, std::size_t) { return -FI_ENOSYS; }
int pep_no_accept(::fid_ep *, const void *, std::size_t) { return -FI_ENOSYS; }
int pep_no_shutdown(::fid_ep *, std::uint64_t) { return -FI_ENOSYS; }
int ep_no_listen(::fid_pep *) { return -FI_ENOSYS; }
int ep_no_reject(::fid_pep *, ::fid_t, const void *, std::size_t) { return -FI_ENOSYS; }

::fi_ops_cm g_cm_ops = {
    sizeof(::fi_ops_cm), cm_setname, cm_getname,   cm_getpeer, cm_connect, ep_no_listen,
    cm_accept,           ep_no_reject, cm_shutdown, cm_join,
};
::fi_ops_cm g_pep_cm_ops = {
    sizeof(::fi_ops_cm), cm_setname, cm_getname, pep_no_getpeer,  pep_no_connect, cm_listen,
    pep_no_accept,       cm_reject,  pep_no_shutdown, cm_join,
};

// ---- passive endpoints and shared transmit contexts ----

int pep_close(::fid *f) { return close_wrapper<pep_w>(f); }
int stx_close(::fid *f) { return close_wrapper<stx_w>(f); }

ssize_t no_cancel(::fid *, void *) { return -FI_ENOSYS; }
int no_ctx(::fid_ep *, int, ::fi_tx_attr *, ::fid_ep **, void *) { return -FI_ENOSYS; }
int no_rx_ctx(::fid_ep *, int, ::fi_rx_attr *, ::fid_ep **, void *) { return -FI_ENOSYS; }
ssize_t no_size_left(::fid_ep *) { return -FI_ENOSYS; }

::fi_ops_ep g_pep_ops = {
    sizeof(::fi_ops_ep), no_cancel, ep_getopt, ep_setopt, no_ctx, no_rx_ctx, no_size_left, no_size_left,
};
::fi_ops_ep g_stx_ops = {
    sizeof(::fi_ops_ep), no_cancel, ep_getopt, ep_setopt, no_ctx, no_rx_ctx, no_size_left, no_size_left,
};

int wrap_new_ep(domain_w *d, sf::fid_ep *sh, ep_w *w, void *context, ::fid_ep **ep)
{
    ep_wrap(w, sh, context, d->api_version);
    return publish(w, ep);
}

// fi_endpoint, fi_endpoint2 and fi_scalable_ep differ only in the Shunt call:
// @p open(shunt domain, shunt info, &shunt endpoint) opens the endpoint.
template <class Open>
int open_ep(::fid_domain *domain, ::fi_info *info, ::fid_ep **ep, void *context, Open open)
{
    if (!domain || !info || !ep)
        return -FI_EINVAL;
    domain_w *d = dw(domain);
    sf::info *si = nullptr;
    int rc = info_to_shunt_for(d->fab, info, d->api_version, &si);
    if (rc)
        return rc;
    auto *w = new (std::nothrow) ep_w{};
    if (!w) {
        sf::freeinfo(si);
        return -FI_ENOMEM;
    }
    sf::fid_ep *sh = nullptr;
    rc = open(d->sh, si, &sh);
    sf::freeinfo(si);
    if (rc) {
        delete w;
        return rc;
    }
    return wrap_new_ep(d, sh, w, context, ep);
}

} // namespace

::fi_ops g_ep_fi_ops = {sizeof(::fi_ops), ep_close, fid_bind, ep_control, fid_ops_open, fid_tostr, fid_ops_set};
::fi_ops g_pep_fi_ops = {sizeof(::fi_ops), pep_close, fid_bind, fid_control, fid_ops_open, fid_tostr, fid_ops_set};
::fi_ops g_stx_fi_ops = {sizeof(::fi_ops), stx_close, fid_bind, fid_control, fid_ops_open, fid_tostr, fid_ops_set};

void ep_wrap(ep_w *w, sf::fid_ep *sh, void *context, std::uint32_t api_version) noexcept
{
    w->sh = sh;
    w->api_version = api_version;
    w->lf.fid.fclass = sh->fid.fclass;
    w->lf.fid.context = context;
    w->lf.fid.ops = &g_ep_fi_ops;
    w->lf.ops = &g_ep_ops;
    w->lf.cm = &g_cm_ops;
    w->lf.msg = &g_msg_ops;
    w->lf.rma = &g_rma_ops;
    w->lf.tagged = &g_tagged_ops;
    w->lf.atomic = &g_atomic_ops;
    w->lf.collective = &g_collective_ops;
}

void pep_wrap(pep_w *w, sf::fid_pep *sh, void *context, std::uint32_t api_version) noexcept
{
    w->sh = sh;
    w->api_version = api_version;
    w->lf.fid.fclass = FI_CLASS_PEP;
    w->lf.fid.context = context;
    w->lf.fid.ops = &g_pep_fi_ops;
    w->lf.ops = &g_pep_ops;
    w->lf.cm = &g_pep_cm_ops;
}

int endpoint(::fid_domain *domain, ::fi_info *info, ::fid_ep **ep, void *context)
{
    return open_ep(domain, info, ep, context, [context](sf::fid_domain *d, sf::info *si, sf::fid_ep **sh) {
        return sf::endpoint(d, si, sh, context);
    });
}

int endpoint2(::fid_domain *domain, ::fi_info *info, ::fid_ep **ep, std::uint64_t flags, void *context)
{
    return open_ep(domain, info, ep, context, [flags, context](sf::fid_domain *d, sf::info *si, sf::fid_ep **sh) {
        return sf::endpoint2(d, si, sh, flags, context);
    });
}

int scalable_ep(::fid_domain *domain, ::fi_info *info, ::fid_ep **sep, void *context)
{
    return open_ep(domain, info, sep, context, [context](sf::fid_domain *d, sf::info *si, sf::fid_ep **sh) {
        return sf::scalable_ep(d, si, sh, context);
    });
}

int srx_ctx(::fid_domain *domain, ::fi_rx_attr *attr, ::fid_ep **rx_ep, void *context)
{
    if (!domain || !rx_ep)
        return -FI_EINVAL;
    domain_w *d = dw(domain);
    sf::rx_attr sa;
    if (attr)
        rx_attr_to_shunt(attr, &sa);
    auto *w = new (std::nothrow) ep_w{};
    if (!w)
        return -FI_ENOMEM;
    sf::fid_ep *sh = nullptr;
    int rc = sf::srx_context(d->sh, attr ? &sa : nullptr, &sh, context);
    if (rc) {
        delete w;
        return rc;
    }
    if (attr)
        rx_attr_to_lf(&sa, attr);
    return wrap_new_ep(d, sh, w, context, rx_ep);
}

int stx_ctx(::fid_domain *domain, ::fi_tx_attr *attr, ::fid_stx **stx, void *context)
{
    if (!domain || !stx)
        return -FI_EINVAL;
    domain_w *d = dw(domain);
    sf::tx_attr sa;
    if (attr)
        tx_attr_to_shunt(attr, &sa);
    return open_wrapped<stx_w>(stx, context, FI_CLASS_STX_CTX, &g_stx_fi_ops, &g_stx_ops, [&](stx_w *w) {
        int rc = sf::stx_context(d->sh, attr ? &sa : nullptr, &w->sh, context);
        if (rc == 0 && attr)
            tx_attr_to_lf(&sa, attr);
        return rc;
    });
}

int passive_ep(::fid_fabric *fabric, ::fi_info *info, ::fid_pep **pep, void *context)
{
    if (!fabric || !info || !pep)
        return -FI_EINVAL;
    auto *fab = reinterpret_cast<fabric_w *>(fabric);
    sf::info *si = nullptr;
    int rc = info_to_shunt_for(fab, info, fab->lf.api_version, &si);
    if (rc)
        return rc;
    auto *w = new (std::nothrow) pep_w{};
    if (!w) {
        sf::freeinfo(si);
        return -FI_ENOMEM;
    }
    rc = sf::passive_ep(fab->sh, si, &w->sh, context);
    sf::freeinfo(si);
    if (rc) {
        delete w;
        return rc;
    }
    pep_wrap(w, w->sh, context, fab->lf.api_version);
    return publish(w, pep);
}

} // namespace shunt::ofi
