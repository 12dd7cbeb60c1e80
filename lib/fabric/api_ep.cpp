// Setup calls on domains and endpoints: argument and handle checks, then
// dispatch through the object's ops table; new objects enter the live table.
#include "env/errors.h"
#include "fabric/api.h"
#include "fabric/detail/live.h"

namespace shunt::fabric {

using detail::live_is;

namespace {

bool is_ep(const fid_ep *ep)
{
    return ep && live_is(&ep->fid, FI_CLASS_EP, FI_CLASS_RX_CTX, FI_CLASS_TX_CTX, FI_CLASS_SRX_CTX);
}

template <class T>
int registered(int rc, T **obj)
{
    if (rc == 0 && obj && *obj)
        detail::live_add(&(*obj)->fid);
    return rc;
}

// ops_ep of an endpoint-like object (ep, sep, contexts, pep, stx: each has
// its ops_ep right after the fid).
const ops_ep *ep_ops(fid *f) { return reinterpret_cast<fid_pep *>(f)->ops; }

} // namespace

int domain_open(fid_fabric *fabric, info *info, fid_domain **dom, void *context)
{
    if (!live_is(fabric ? &fabric->fid : nullptr, FI_CLASS_FABRIC) || !info || !dom)
        return -FI_EINVAL;
    fid_domain *d = nullptr;
    int rc = registered(fabric->ops->domain(fabric, info, &d, context), &d);
    if (rc == 0)
        *dom = d;
    return rc;
}

int domain_open2(fid_fabric *fabric, info *info, fid_domain **dom, std::uint64_t flags, void *context)
{
    if (!live_is(fabric ? &fabric->fid : nullptr, FI_CLASS_FABRIC) || !info || !dom)
        return -FI_EINVAL;
    if (flags == 0)
        return domain_open(fabric, info, dom, context);
    fid_domain *d = nullptr;
    int rc = registered(fabric->ops->domain2(fabric, info, &d, flags, context), &d);
    if (rc == -FI_ENOSYS)
        return -FI_EBADFLAGS;
    if (rc == 0)
        *dom = d;
    return rc;
}

int domain_bind(fid_domain *domain, fid *f, std::uint64_t flags)
{
    if (!live_is(domain ? &domain->fid : nullptr, FI_CLASS_DOMAIN) || !live_is(f, FI_CLASS_EQ))
        return -FI_EINVAL;
    return domain->fid.ops->bind(&domain->fid, f, flags);
}

int query_atomic(fid_domain *domain, datatype dt, op o, atomic_attr *attr, std::uint64_t flags)
{
    if (!live_is(domain ? &domain->fid : nullptr, FI_CLASS_DOMAIN) || !attr || int(dt) < 0 ||
        dt >= FI_DATATYPE_LAST || int(o) < 0 || o >= FI_ATOMIC_OP_LAST)
        return -FI_EINVAL;
    if (flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) || (flags & FI_FETCH_ATOMIC && flags & FI_COMPARE_ATOMIC))
        return -FI_EINVAL;
    return domain->ops->query_atomic(domain, dt, o, attr, flags);
}

int endpoint(fid_domain *domain, info *info, fid_ep **ep, void *context)
{
    if (!live_is(domain ? &domain->fid : nullptr, FI_CLASS_DOMAIN) || !info || !ep)
        return -FI_EINVAL;
    fid_ep *e = nullptr;
    int rc = registered(domain->ops->endpoint(domain, info, &e, context), &e);
    if (rc == 0)
        *ep = e;
    return rc;
}

int endpoint2(fid_domain *domain, info *info, fid_ep **ep, std::uint64_t flags, void *context)
{
    if (flags == 0)
        return endpoint(domain, info, ep, context);
    if (!live_is(domain ? &domain->fid : nullptr, FI_CLASS_DOMAIN) || !info || !ep)
        return -FI_EINVAL;
    fid_ep *e = nullptr;
    int rc = registered(domain->ops->endpoint2(domain, info, &e, flags, context), &e);
    if (rc == -FI_ENOSYS)
        return -FI_EBADFLAGS;
    if (rc == 0)
        *ep = e;
    return rc;
}

int scalable_ep(fid_domain *domain, info *info, fid_ep **sep, void *context)
{
    if (!live_is(domain ? &domain->fid : nullptr, FI_CLASS_DOMAIN) || !info || !sep)
        return -FI_EINVAL;
    fid_ep *e = nullptr;
    int rc = registered(domain->ops->scalable_ep(domain, info, &e, context), &e);
    if (rc == -FI_ENOSYS)
        return -FI_EOPNOTSUPP;
    if (rc == 0)
        *sep = e;
    return rc;
}

int passive_ep(fid_fabric *fabric, info *info, fid_pep **pep, void *context)
{
    if (!live_is(fabric ? &fabric->fid : nullptr, FI_CLASS_FABRIC) || !info || !pep)
        return -FI_EINVAL;
    if (info->ep_attr && info->ep_attr->type != FI_EP_MSG && info->ep_attr->type != FI_EP_UNSPEC)
        return -FI_EINVAL;
    fid_pep *p = nullptr;
    int rc = registered(fabric->ops->passive_ep(fabric, info, &p, context), &p);
    if (rc == -FI_ENOSYS)
        return -FI_EOPNOTSUPP;
    if (rc == 0)
        *pep = p;
    return rc;
}

int ep_bind(fid_ep *ep, fid *bfid, std::uint64_t flags)
{
    if (!ep || !live_is(&ep->fid, FI_CLASS_EP, FI_CLASS_RX_CTX, FI_CLASS_TX_CTX, FI_CLASS_SRX_CTX) ||
        !live_is(bfid))
        return -FI_EINVAL;
    return ep->fid.ops->bind(&ep->fid, bfid, flags);
}

int scalable_ep_bind(fid_ep *sep, fid *bfid, std::uint64_t flags)
{
    if (!sep || !live_is(&sep->fid, FI_CLASS_SEP) || !live_is(bfid))
        return -FI_EINVAL;
    return sep->fid.ops->bind(&sep->fid, bfid, flags);
}

int pep_bind(fid_pep *pep, fid *bfid, std::uint64_t flags)
{
    if (!pep || !live_is(&pep->fid, FI_CLASS_PEP) || !live_is(bfid))
        return -FI_EINVAL;
    return pep->fid.ops->bind(&pep->fid, bfid, flags);
}

int enable(fid_ep *ep)
{
    if (!ep || !live_is(&ep->fid, FI_CLASS_EP, FI_CLASS_SEP, FI_CLASS_RX_CTX, FI_CLASS_TX_CTX))
        return -FI_EINVAL;
    return ep->fid.ops->control(&ep->fid, FI_ENABLE, nullptr);
}

ssize_t cancel(fid_ep *ep, void *context)
{
    if (!is_ep(ep))
        return -FI_EINVAL;
    return ep->ops->cancel(&ep->fid, context);
}

int ep_alias(fid_ep *ep, fid_ep **alias_ep, std::uint64_t flags)
{
    if (!is_ep(ep) || !alias_ep)
        return -FI_EINVAL;
    if (!(flags & FI_TRANSMIT) == !(flags & FI_RECV))
        return -FI_EINVAL;
    fid *a = nullptr;
    alias arg{&a, flags};
    int rc = ep->fid.ops->control(&ep->fid, FI_ALIAS, &arg);
    if (rc)
        return rc;
    detail::live_add(a);
    *alias_ep = reinterpret_cast<fid_ep *>(a);
    return 0;
}

int getopt(fid *f, int level, int optname, void *optval, std::size_t *optlen)
{
    if (!live_is(f, FI_CLASS_EP, FI_CLASS_PEP, FI_CLASS_SEP, FI_CLASS_SRX_CTX) &&
        !live_is(f, FI_CLASS_RX_CTX, FI_CLASS_TX_CTX))
        return -FI_EINVAL;
    if (!optval || !optlen)
        return -FI_EINVAL;
    return ep_ops(f)->getopt(f, level, optname, optval, optlen);
}

int setopt(fid *f, int level, int optname, const void *optval, std::size_t optlen)
{
    if (!live_is(f, FI_CLASS_EP, FI_CLASS_PEP, FI_CLASS_SEP, FI_CLASS_SRX_CTX) &&
        !live_is(f, FI_CLASS_RX_CTX, FI_CLASS_TX_CTX))
        return -FI_EINVAL;
    if (!optval)
        return -FI_EINVAL;
    return ep_ops(f)->setopt(f, level, optname, optval, optlen);
}

int tx_context(fid_ep *sep, int index, tx_attr *attr, fid_ep **tx_ep, void *context)
{
    if (!sep || !live_is(&sep->fid, FI_CLASS_SEP) || !tx_ep || index < 0)
        return -FI_EINVAL;
    fid_ep *e = nullptr;
    int rc = registered(sep->ops->tx_ctx(sep, index, attr, &e, context), &e);
    if (rc == 0)
        *tx_ep = e;
    return rc;
}

int rx_context(fid_ep *sep, int index, rx_attr *attr, fid_ep **rx_ep, void *context)
{
    if (!sep || !live_is(&sep->fid, FI_CLASS_SEP) || !rx_ep || index < 0)
        return -FI_EINVAL;
    fid_ep *e = nullptr;
    int rc = registered(sep->ops->rx_ctx(sep, index, attr, &e, context), &e);
    if (rc == 0)
        *rx_ep = e;
    return rc;
}

int stx_context(fid_domain *domain, tx_attr *attr, fid_stx **stx, void *context)
{
    if (!live_is(domain ? &domain->fid : nullptr, FI_CLASS_DOMAIN) || !stx)
        return -FI_EINVAL;
    fid_stx *s = nullptr;
    int rc = registered(domain->ops->stx_ctx(domain, attr, &s, context), &s);
    if (rc == -FI_ENOSYS)
        return -FI_EOPNOTSUPP;
    if (rc == 0)
        *stx = s;
    return rc;
}

int srx_context(fid_domain *domain, rx_attr *attr, fid_ep **rx_ep, void *context)
{
    if (!live_is(domain ? &domain->fid : nullptr, FI_CLASS_DOMAIN) || !rx_ep)
        return -FI_EINVAL;
    fid_ep *e = nullptr;
    int rc = registered(domain->ops->srx_ctx(domain, attr, &e, context), &e);
    if (rc == -FI_ENOSYS)
        return -FI_EOPNOTSUPP;
    if (rc == 0)
        *rx_ep = e;
    return rc;
}

ssize_t rx_size_left(fid_ep *ep)
{
    if (!is_ep(ep))
        return -FI_EINVAL;
    return ep->ops->rx_size_left(ep);
}

ssize_t tx_size_left(fid_ep *ep)
{
    if (!is_ep(ep))
        return -FI_EINVAL;
    return ep->ops->tx_size_left(ep);
}

// ---- CM ----
int setname(fid *f, void *addr, std::size_t addrlen)
{
    if (!live_is(f, FI_CLASS_EP, FI_CLASS_PEP, FI_CLASS_SEP) || !addr || !addrlen)
        return -FI_EINVAL;
    return reinterpret_cast<fid_pep *>(f)->cm->setname(f, addr, addrlen);
}

int getname(fid *f, void *addr, std::size_t *addrlen)
{
    if (!live_is(f, FI_CLASS_EP, FI_CLASS_PEP, FI_CLASS_SEP) || !addrlen || (!addr && *addrlen))
        return -FI_EINVAL;
    return reinterpret_cast<fid_pep *>(f)->cm->getname(f, addr, addrlen);
}

int getpeer(fid_ep *ep, void *addr, std::size_t *addrlen)
{
    if (!is_ep(ep) || !addrlen || (!addr && *addrlen))
        return -FI_EINVAL;
    return ep->cm->getpeer(ep, addr, addrlen);
}

int listen(fid_pep *pep)
{
    if (!pep || !live_is(&pep->fid, FI_CLASS_PEP))
        return -FI_EINVAL;
    return pep->cm->listen(pep);
}

int connect(fid_ep *ep, const void *addr, const void *param, std::size_t paramlen)
{
    if (!is_ep(ep) || !addr || (!param && paramlen))
        return -FI_EINVAL;
    return ep->cm->connect(ep, addr, param, paramlen);
}

int accept(fid_ep *ep, const void *param, std::size_t paramlen)
{
    if (!is_ep(ep) || (!param && paramlen))
        return -FI_EINVAL;
    return ep->cm->accept(ep, param, paramlen);
}

int reject(fid_pep *pep, fid_t handle, const void *param, std::size_t paramlen)
{
    if (!pep || !live_is(&pep->fid, FI_CLASS_PEP) || !handle || (!param && paramlen))
        return -FI_EINVAL;
    return pep->cm->reject(pep, handle, param, paramlen);
}

int shutdown(fid_ep *ep, std::uint64_t flags)
{
    if (!is_ep(ep))
        return -FI_EINVAL;
    return ep->cm->shutdown(ep, flags);
}

} // namespace shunt::fabric
