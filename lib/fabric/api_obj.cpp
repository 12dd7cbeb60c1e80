// Setup calls on CQs, counters, AVs, EQs and MRs: handle checks, dispatch,
// and the live table.
#include <cstring>

#include "env/errors.h"
#include "fabric/api.h"
#include "fabric/detail/live.h"

namespace shunt::fabric {

using detail::live_is;

namespace {
template <class T>
int registered(int rc, T **obj)
{
    if (rc == 0 && obj && *obj)
        detail::live_add(&(*obj)->fid);
    return rc;
}
bool dom_ok(fid_domain *d) { return d && live_is(&d->fid, FI_CLASS_DOMAIN); }
} // namespace

std::size_t cq_entry_size(cq_format format) noexcept
{
    switch (format) {
    case FI_CQ_FORMAT_UNSPEC:
    case FI_CQ_FORMAT_CONTEXT: return sizeof(cq_entry);
    case FI_CQ_FORMAT_MSG: return sizeof(cq_msg_entry);
    case FI_CQ_FORMAT_DATA: return sizeof(cq_data_entry);
    case FI_CQ_FORMAT_TAGGED: return sizeof(cq_tagged_entry);
    }
    return 0;
}

std::size_t datatype_size(datatype dt) noexcept
{
    switch (dt) {
    case FI_INT8:
    case FI_UINT8: return 1;
    case FI_INT16:
    case FI_UINT16: return 2;
    case FI_INT32:
    case FI_UINT32:
    case FI_FLOAT: return 4;
    case FI_INT64:
    case FI_UINT64:
    case FI_DOUBLE:
    case FI_FLOAT_COMPLEX: return 8;
    case FI_DOUBLE_COMPLEX: return 16;
    case FI_LONG_DOUBLE: return sizeof(long double);
    case FI_LONG_DOUBLE_COMPLEX: return 2 * sizeof(long double);
    case FI_INT128:
    case FI_UINT128: return 16;
    default: return 0;
    }
}

int cq_open(fid_domain *domain, cq_attr *attr, fid_cq **cq, void *context)
{
    if (!dom_ok(domain) || !attr || !cq)
        return -FI_EINVAL;
    fid_cq *c = nullptr;
    int rc = registered(domain->ops->cq_open(domain, attr, &c, context), &c);
    if (rc == 0)
        *cq = c;
    return rc;
}

const char *cq_strerror(fid_cq *cq, int prov_errno, const void *err_data, char *buf, std::size_t len)
{
    if (!cq || !live_is(&cq->fid, FI_CLASS_CQ))
        return shunt::strerror(prov_errno);
    const char *s = cq->ops->strerror(cq, prov_errno, err_data, buf, len);
    return s ? s : shunt::strerror(prov_errno);
}

int cntr_open(fid_domain *domain, cntr_attr *attr, fid_cntr **cntr, void *context)
{
    if (!dom_ok(domain) || !cntr)
        return -FI_EINVAL;
    cntr_attr def{};
    fid_cntr *c = nullptr;
    int rc = registered(domain->ops->cntr_open(domain, attr ? attr : &def, &c, context), &c);
    if (rc == 0)
        *cntr = c;
    return rc;
}

int av_open(fid_domain *domain, av_attr *attr, fid_av **av, void *context)
{
    if (!dom_ok(domain) || !attr || !av)
        return -FI_EINVAL;
    fid_av *a = nullptr;
    int rc = registered(domain->ops->av_open(domain, attr, &a, context), &a);
    if (rc == 0)
        *av = a;
    return rc;
}

#define AV_CHECK(av) \
    if (!(av) || !live_is(&(av)->fid, FI_CLASS_AV)) \
    return -FI_EINVAL

int av_insert(fid_av *av, const void *addr, std::size_t count, fi_addr_t *fi_addr, std::uint64_t flags,
              void *context)
{
    AV_CHECK(av);
    if (!addr && count)
        return -FI_EINVAL;
    return av->ops->insert(av, addr, count, fi_addr, flags, context);
}

int av_insertsvc(fid_av *av, const char *node, const char *service, fi_addr_t *fi_addr, std::uint64_t flags,
                 void *context)
{
    AV_CHECK(av);
    if (!node && !service)
        return -FI_EINVAL;
    return av->ops->insertsvc(av, node, service, fi_addr, flags, context);
}

int av_insertsym(fid_av *av, const char *node, std::size_t nodecnt, const char *service, std::size_t svccnt,
                 fi_addr_t *fi_addr, std::uint64_t flags, void *context)
{
    AV_CHECK(av);
    if (!node || !service || !nodecnt || !svccnt)
        return -FI_EINVAL;
    return av->ops->insertsym(av, node, nodecnt, service, svccnt, fi_addr, flags, context);
}

int av_remove(fid_av *av, fi_addr_t *fi_addr, std::size_t count, std::uint64_t flags)
{
    AV_CHECK(av);
    if (!fi_addr && count)
        return -FI_EINVAL;
    return av->ops->remove(av, fi_addr, count, flags);
}

int av_lookup(fid_av *av, fi_addr_t fi_addr, void *addr, std::size_t *addrlen)
{
    AV_CHECK(av);
    if (!addrlen || (!addr && *addrlen))
        return -FI_EINVAL;
    return av->ops->lookup(av, fi_addr, addr, addrlen);
}

const char *av_straddr(fid_av *av, const void *addr, char *buf, std::size_t *len)
{
    if (!av || !live_is(&av->fid, FI_CLASS_AV) || !addr || !buf || !len)
        return nullptr;
    return av->ops->straddr(av, addr, buf, len);
}

int eq_open(fid_fabric *fabric, eq_attr *attr, fid_eq **eq, void *context)
{
    if (!fabric || !live_is(&fabric->fid, FI_CLASS_FABRIC) || !attr || !eq)
        return -FI_EINVAL;
    fid_eq *e = nullptr;
    int rc = registered(fabric->ops->eq_open(fabric, attr, &e, context), &e);
    if (rc == 0)
        *eq = e;
    return rc;
}

#define EQ_CHECK(eq) \
    if (!(eq) || !live_is(&(eq)->fid, FI_CLASS_EQ)) \
    return -FI_EINVAL

ssize_t eq_read(fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, std::uint64_t flags)
{
    EQ_CHECK(eq);
    if (!event || (!buf && len))
        return -FI_EINVAL;
    return eq->ops->read(eq, event, buf, len, flags);
}

ssize_t eq_readerr(fid_eq *eq, eq_err_entry *buf, std::uint64_t flags)
{
    EQ_CHECK(eq);
    if (!buf)
        return -FI_EINVAL;
    return eq->ops->readerr(eq, buf, flags);
}

ssize_t eq_write(fid_eq *eq, std::uint32_t event, const void *buf, std::size_t len, std::uint64_t flags)
{
    EQ_CHECK(eq);
    if (!buf && len)
        return -FI_EINVAL;
    return eq->ops->write(eq, event, buf, len, flags);
}

ssize_t eq_sread(fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, int timeout, std::uint64_t flags)
{
    EQ_CHECK(eq);
    if (!event || (!buf && len))
        return -FI_EINVAL;
    return eq->ops->sread(eq, event, buf, len, timeout, flags);
}

const char *eq_strerror(fid_eq *eq, int prov_errno, const void *err_data, char *buf, std::size_t len)
{
    if (!eq || !live_is(&eq->fid, FI_CLASS_EQ))
        return shunt::strerror(prov_errno);
    const char *s = eq->ops->strerror(eq, prov_errno, err_data, buf, len);
    return s ? s : shunt::strerror(prov_errno);
}

int mr_reg(fid_domain *domain, const void *buf, std::size_t len, std::uint64_t access, std::uint64_t offset,
           std::uint64_t requested_key, std::uint64_t flags, fid_mr **mr, void *context)
{
    if (!dom_ok(domain) || !mr || (!buf && len))
        return -FI_EINVAL;
    fid_mr *m = nullptr;
    int rc = registered(domain->mr->reg(&domain->fid, buf, len, access, offset, requested_key, flags, &m, context),
                        &m);
    if (rc == 0)
        *mr = m;
    return rc;
}

int mr_regv(fid_domain *domain, const iovec *iov, std::size_t count, std::uint64_t access, std::uint64_t offset,
            std::uint64_t requested_key, std::uint64_t flags, fid_mr **mr, void *context)
{
    if (!dom_ok(domain) || !mr || (!iov && count))
        return -FI_EINVAL;
    fid_mr *m = nullptr;
    int rc = registered(
        domain->mr->regv(&domain->fid, iov, count, access, offset, requested_key, flags, &m, context), &m);
    if (rc == 0)
        *mr = m;
    return rc;
}

int mr_regattr(fid_domain *domain, const mr_attr *attr, std::uint64_t flags, fid_mr **mr)
{
    if (!dom_ok(domain) || !mr || !attr)
        return -FI_EINVAL;
    fid_mr *m = nullptr;
    int rc = registered(domain->mr->regattr(&domain->fid, attr, flags, &m), &m);
    if (rc == 0)
        *mr = m;
    return rc;
}

int mr_bind(fid_mr *mr, fid *bfid, std::uint64_t flags)
{
    if (!mr || !live_is(&mr->fid, FI_CLASS_MR) || !live_is(bfid, FI_CLASS_EP, FI_CLASS_CNTR))
        return -FI_EINVAL;
    return mr->fid.ops->bind(&mr->fid, bfid, flags);
}

int mr_enable(fid_mr *mr)
{
    if (!mr || !live_is(&mr->fid, FI_CLASS_MR))
        return -FI_EINVAL;
    return mr->fid.ops->control(&mr->fid, FI_ENABLE, nullptr);
}

int trywait(fid_fabric *fabric, fid **fids, int count)
{
    if (!fabric || !live_is(&fabric->fid, FI_CLASS_FABRIC) || !fids || count <= 0)
        return -FI_EINVAL;
    for (int i = 0; i < count; i++)
        if (!live_is(fids[i], FI_CLASS_CQ, FI_CLASS_CNTR, FI_CLASS_EQ, FI_CLASS_WAIT))
            return -FI_EINVAL;
    return fabric->ops->trywait(fabric, fids, count);
}

// ---- poll sets and wait sets (fabric/poll.h) ----

int wait_open(fid_fabric *fabric, wait_attr *attr, fid_wait **waitset)
{
    if (!fabric || !live_is(&fabric->fid, FI_CLASS_FABRIC) || !attr || !waitset)
        return -FI_EINVAL;
    if (!SHUNT_OPS_HAS(fabric->ops, ops_fabric, wait_open))
        return -FI_ENOSYS;
    fid_wait *w = nullptr;
    int rc = registered(fabric->ops->wait_open(fabric, attr, &w), &w);
    if (rc == 0)
        *waitset = w;
    return rc;
}

int wait(fid_wait *waitset, int timeout)
{
    if (!waitset || !live_is(&waitset->fid, FI_CLASS_WAIT))
        return -FI_EINVAL;
    return waitset->ops->wait(waitset, timeout);
}

int poll_open(fid_domain *domain, poll_attr *attr, fid_poll **pollset)
{
    if (!dom_ok(domain) || !pollset)
        return -FI_EINVAL;
    poll_attr def{};
    fid_poll *p = nullptr;
    int rc = registered(domain->ops->poll_open(domain, attr ? attr : &def, &p), &p);
    if (rc == 0)
        *pollset = p;
    return rc;
}

#define POLL_CHECK(p) \
    if (!(p) || !live_is(&(p)->fid, FI_CLASS_POLL)) \
    return -FI_EINVAL

int poll_add(fid_poll *pollset, fid *event_fid, std::uint64_t flags)
{
    POLL_CHECK(pollset);
    if (!live_is(event_fid, FI_CLASS_CQ, FI_CLASS_CNTR))
        return -FI_EINVAL;
    return pollset->ops->poll_add(pollset, event_fid, flags);
}

int poll_del(fid_poll *pollset, fid *event_fid, std::uint64_t flags)
{
    POLL_CHECK(pollset);
    if (!live_is(event_fid, FI_CLASS_CQ, FI_CLASS_CNTR))
        return -FI_EINVAL;
    return pollset->ops->poll_del(pollset, event_fid, flags);
}

int poll(fid_poll *pollset, void **context, int count)
{
    POLL_CHECK(pollset);
    if (count < 0 || (!context && count > 0))
        return -FI_EINVAL;
    return pollset->ops->poll(pollset, context, count);
}

} // namespace shunt::fabric

namespace shunt::fabric {
std::uint64_t mr_key(fid_mr *mr)
{
    if (!mr || !detail::live_is(&mr->fid, FI_CLASS_MR))
        return FI_KEY_NOTAVAIL;
    return mr->key;
}
} // namespace shunt::fabric
