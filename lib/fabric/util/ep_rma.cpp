// Endpoint base: the generic RMA and atomic calls (checks, then the
// provider's transmit hook).
#include "env/errors.h"
#include "fabric/util/ep.h"

namespace shunt::fabric::util {

int ep_check_op_flags(const ep_core *c, bool tx, std::uint64_t f);

namespace {

constexpr std::uint64_t rma_ok = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE |
                                 FI_DELIVERY_COMPLETE | FI_MORE | FI_FENCE | FI_REMOTE_CQ_DATA;

ssize_t post_rma(fid_ep *e, bool write, const iovec *iov, void **desc, std::size_t count, fi_addr_t dest,
                 const rma_iov *rma, std::size_t rma_count, std::uint64_t data, std::uint64_t flags, void *ctx,
                 bool inject)
{
    ep_core *c = core_of(e);
    if (!ep_ready(c)) [[unlikely]]
        return -FI_EOPBADSTATE;
    if (!(c->caps & FI_RMA) || !(c->caps & (write ? FI_WRITE : FI_READ))) [[unlikely]]
        return -FI_EOPNOTSUPP;
    if (flags & ~rma_ok) [[unlikely]] {
        int rc = ep_check_op_flags(c, true, flags);
        return rc ? rc : -FI_EBADFLAGS;
    }
    if (flags & (FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE) & ~c->supported_op_flags)
        [[unlikely]]
        return -FI_EOPNOTSUPP;
    // FI_INJECT and FI_REMOTE_CQ_DATA apply to writes (fi_rma(3)): a read
    // has no outbound buffer to give back and carries no data to the target.
    if (!write)
        flags &= ~(FI_INJECT | FI_REMOTE_CQ_DATA);
    if (count > c->iov_limit || rma_count == 0 || rma_count > c->rma_iov_limit || !rma || (!iov && count)) [[unlikely]]
        return -FI_EINVAL;
    std::size_t len = 0, rlen = 0;
    for (std::size_t i = 0; i < count; i++) {
        if (!iov[i].iov_base && iov[i].iov_len)
            return -FI_EINVAL;
        if (__builtin_add_overflow(len, iov[i].iov_len, &len)) [[unlikely]]
            return -FI_EINVAL;
    }
    for (std::size_t i = 0; i < rma_count; i++)
        if (__builtin_add_overflow(rlen, rma[i].len, &rlen)) [[unlikely]]
            return -FI_EINVAL;
    if (len != rlen) [[unlikely]]
        return -FI_EINVAL;
    if (len > c->max_size[2]) [[unlikely]]
        return -FI_EMSGSIZE;
    if ((inject || (flags & FI_INJECT)) && len > c->inject_max[2]) [[unlikely]]
        return -FI_EMSGSIZE;
    if ((flags & FI_REMOTE_CQ_DATA) && !c->cq_data_size) [[unlikely]]
        return -FI_EINVAL;
    av_entry *peer = nullptr;
    if (c->av) {
        peer = av_get(c->av, dest);
        if (!peer) [[unlikely]]
            return -FI_EINVAL;
    }
    tx_req r{};
    r.kind = write ? tx_req::write : tx_req::read;
    r.iov = iov;
    r.desc = desc;
    r.count = count;
    r.len = len;
    r.dest = dest;
    r.peer = peer;
    r.data = data;
    r.flags = flags;
    r.context = ctx;
    r.rma = rma;
    r.rma_count = rma_count;
    return c->hooks->transmit(c, r);
}

ssize_t r_read(fid_ep *e, void *buf, std::size_t len, void *desc, fi_addr_t src, std::uint64_t addr,
               std::uint64_t key, void *ctx)
{
    iovec v{buf, len};
    rma_iov r{addr, len, key};
    return post_rma(e, false, &v, &desc, 1, src, &r, 1, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t r_readv(fid_ep *e, const iovec *iov, void **desc, std::size_t count, fi_addr_t src, std::uint64_t addr,
                std::uint64_t key, void *ctx)
{
    std::size_t len = 0;
    for (std::size_t i = 0; i < count && iov; i++)
        len += iov[i].iov_len;
    rma_iov r{addr, len, key};
    return post_rma(e, false, iov, desc, count, src, &r, 1, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t r_readmsg(fid_ep *e, const msg_rma *m, std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    return post_rma(e, false, m->msg_iov, m->desc, m->iov_count, m->addr, m->rma_iov, m->rma_iov_count, m->data,
                    flags | to_handle(e)->tx_comp_force, m->context, false);
}
ssize_t r_write(fid_ep *e, const void *buf, std::size_t len, void *desc, fi_addr_t dest, std::uint64_t addr,
                std::uint64_t key, void *ctx)
{
    iovec v{const_cast<void *>(buf), len};
    rma_iov r{addr, len, key};
    return post_rma(e, true, &v, &desc, 1, dest, &r, 1, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t r_writev(fid_ep *e, const iovec *iov, void **desc, std::size_t count, fi_addr_t dest, std::uint64_t addr,
                 std::uint64_t key, void *ctx)
{
    std::size_t len = 0;
    for (std::size_t i = 0; i < count && iov; i++)
        len += iov[i].iov_len;
    rma_iov r{addr, len, key};
    return post_rma(e, true, iov, desc, count, dest, &r, 1, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t r_writemsg(fid_ep *e, const msg_rma *m, std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    return post_rma(e, true, m->msg_iov, m->desc, m->iov_count, m->addr, m->rma_iov, m->rma_iov_count, m->data,
                    flags | to_handle(e)->tx_comp_force, m->context, false);
}
ssize_t r_inject(fid_ep *e, const void *buf, std::size_t len, fi_addr_t dest, std::uint64_t addr, std::uint64_t key)
{
    iovec v{const_cast<void *>(buf), len};
    rma_iov r{addr, len, key};
    return post_rma(e, true, &v, nullptr, 1, dest, &r, 1, 0, (to_handle(e)->tx_op_flags | FI_INJECT) & ~FI_COMPLETION,
                    nullptr, true);
}
ssize_t r_writedata(fid_ep *e, const void *buf, std::size_t len, void *desc, std::uint64_t data, fi_addr_t dest,
                    std::uint64_t addr, std::uint64_t key, void *ctx)
{
    iovec v{const_cast<void *>(buf), len};
    rma_iov r{addr, len, key};
    return post_rma(e, true, &v, &desc, 1, dest, &r, 1, data, to_handle(e)->tx_default | FI_REMOTE_CQ_DATA, ctx,
                    false);
}
ssize_t r_injectdata(fid_ep *e, const void *buf, std::size_t len, std::uint64_t data, fi_addr_t dest,
                     std::uint64_t addr, std::uint64_t key)
{
    iovec v{const_cast<void *>(buf), len};
    rma_iov r{addr, len, key};
    return post_rma(e, true, &v, nullptr, 1, dest, &r, 1, data,
                    ((to_handle(e)->tx_op_flags | FI_INJECT) & ~FI_COMPLETION) | FI_REMOTE_CQ_DATA, nullptr, true);
}

// ---- atomics ----

int valid(ep_core *c, tx_req::kind_t kind, datatype dt, op o, std::size_t *count)
{
    if (int(dt) < 0 || dt >= FI_DATATYPE_LAST || int(o) < 0 || o >= FI_ATOMIC_OP_LAST)
        return -FI_EINVAL;
    bool is_cmp = o >= FI_CSWAP && o <= FI_MSWAP;
    if (kind == tx_req::compare_atomic ? !is_cmp : is_cmp)
        return -FI_EOPNOTSUPP;
    if (kind == tx_req::atomic && o == FI_ATOMIC_READ)
        return -FI_EOPNOTSUPP;
    if (!c->domain->hooks || !c->domain->hooks->query_atomic)
        return -FI_EOPNOTSUPP;
    atomic_attr a{};
    std::uint64_t fl = kind == tx_req::fetch_atomic ? FI_FETCH_ATOMIC
                       : kind == tx_req::compare_atomic ? FI_COMPARE_ATOMIC
                                                         : 0;
    int rc = c->domain->hooks->query_atomic(c->domain, dt, o, &a, fl);
    if (rc)
        return rc;
    if (count)
        *count = a.count;
    return 0;
}

ssize_t post_atomic(fid_ep *e, tx_req::kind_t kind, const ioc *iov, void **desc, std::size_t count, fi_addr_t dest,
                    const rma_ioc *rma, std::size_t rma_count, datatype dt, op o, const ioc *res,
                    std::size_t res_count, const ioc *cmp, std::size_t cmp_count, std::uint64_t data,
                    std::uint64_t flags, void *ctx, bool inject)
{
    ep_core *c = core_of(e);
    if (!ep_ready(c)) [[unlikely]]
        return -FI_EOPBADSTATE;
    bool needs_read = kind != tx_req::atomic;
    if (!(c->caps & FI_ATOMIC) || !(c->caps & FI_WRITE) || (needs_read && !(c->caps & FI_READ))) [[unlikely]]
        return -FI_EOPNOTSUPP;
    if (flags & ~(rma_ok)) [[unlikely]] {
        int rc = ep_check_op_flags(c, true, flags);
        return rc ? rc : -FI_EBADFLAGS;
    }
    std::size_t max_count = 0;
    if (int rc = valid(c, kind, dt, o, &max_count); rc) [[unlikely]]
        return rc;
    if (count == 0 || count > 4 || rma_count != 1 || !rma || !iov) [[unlikely]]
        return -FI_EINVAL;
    // Element vectors as byte iovecs for the provider (at most 4 entries).
    iovec v[4], rv[4], cv[4];
    std::size_t esize = datatype_size(dt), elems = 0;
    for (std::size_t i = 0; i < count; i++) {
        if (!iov[i].addr && iov[i].count && o != FI_ATOMIC_READ)
            return -FI_EINVAL;
        if (iov[i].count > max_count) [[unlikely]] // nor can the sum or the bytes wrap
            return -FI_EINVAL;
        v[i] = iovec{iov[i].addr, iov[i].count * esize};
        elems += iov[i].count;
    }
    if (elems == 0 || elems > max_count || elems != rma[0].count) [[unlikely]]
        return -FI_EINVAL; // zero elements: nothing to do, and nothing may change at the target
    if (elems * esize > c->max_size[3]) [[unlikely]]
        return -FI_EMSGSIZE;
    if ((inject || (flags & FI_INJECT)) && elems * esize > c->inject_max[3]) [[unlikely]]
        return -FI_EMSGSIZE;
    std::size_t relems = 0, celems = 0;
    if (res_count > 4 || cmp_count > 4)
        return -FI_EINVAL;
    if ((res_count && !res) || (cmp_count && !cmp)) [[unlikely]]
        return -FI_EINVAL;
    for (std::size_t i = 0; i < res_count; i++) {
        if (!res[i].addr && res[i].count) [[unlikely]]
            return -FI_EINVAL; // a fetch must have somewhere to put the value
        if (res[i].count > max_count) [[unlikely]]
            return -FI_EINVAL;
        rv[i] = iovec{res[i].addr, res[i].count * esize};
        relems += res[i].count;
    }
    for (std::size_t i = 0; i < cmp_count; i++) {
        if (!cmp[i].addr && cmp[i].count) [[unlikely]]
            return -FI_EINVAL;
        if (cmp[i].count > max_count) [[unlikely]]
            return -FI_EINVAL;
        cv[i] = iovec{cmp[i].addr, cmp[i].count * esize};
        celems += cmp[i].count;
    }
    if (needs_read && relems != elems)
        return -FI_EINVAL;
    if (kind == tx_req::compare_atomic && celems != elems)
        return -FI_EINVAL;
    av_entry *peer = nullptr;
    if (c->av) {
        peer = av_get(c->av, dest);
        if (!peer) [[unlikely]]
            return -FI_EINVAL;
    }
    rma_iov r{rma[0].addr, elems * esize, rma[0].key};
    tx_req q{};
    q.kind = kind;
    q.iov = v;
    q.desc = desc;
    q.count = count;
    q.len = elems * esize;
    q.dest = dest;
    q.peer = peer;
    q.data = data;
    q.flags = flags;
    q.context = ctx;
    q.rma = &r;
    q.rma_count = 1;
    q.dt = dt;
    q.aop = o;
    q.result = rv;
    q.result_count = res_count;
    q.compare = cv;
    q.compare_count = cmp_count;
    return c->hooks->transmit(c, q);
}

ssize_t a_write(fid_ep *e, const void *buf, std::size_t count, void *desc, fi_addr_t dest, std::uint64_t addr,
                std::uint64_t key, datatype dt, op o, void *ctx)
{
    ioc v{const_cast<void *>(buf), count};
    rma_ioc r{addr, count, key};
    return post_atomic(e, tx_req::atomic, &v, &desc, 1, dest, &r, 1, dt, o, nullptr, 0, nullptr, 0, 0,
                       to_handle(e)->tx_default, ctx, false);
}
ssize_t a_writev(fid_ep *e, const ioc *iov, void **desc, std::size_t count, fi_addr_t dest, std::uint64_t addr,
                 std::uint64_t key, datatype dt, op o, void *ctx)
{
    std::size_t n = 0;
    for (std::size_t i = 0; i < count && iov; i++)
        n += iov[i].count;
    rma_ioc r{addr, n, key};
    return post_atomic(e, tx_req::atomic, iov, desc, count, dest, &r, 1, dt, o, nullptr, 0, nullptr, 0, 0,
                       to_handle(e)->tx_default, ctx, false);
}
ssize_t a_writemsg(fid_ep *e, const msg_atomic *m, std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    return post_atomic(e, tx_req::atomic, m->msg_iov, m->desc, m->iov_count, m->addr, m->rma_iov, m->rma_iov_count,
                       m->datatype, m->op, nullptr, 0, nullptr, 0, m->data, flags | to_handle(e)->tx_comp_force,
                       m->context, false);
}
ssize_t a_inject(fid_ep *e, const void *buf, std::size_t count, fi_addr_t dest, std::uint64_t addr,
                 std::uint64_t key, datatype dt, op o)
{
    ioc v{const_cast<void *>(buf), count};
    rma_ioc r{addr, count, key};
    return post_atomic(e, tx_req::atomic, &v, nullptr, 1, dest, &r, 1, dt, o, nullptr, 0, nullptr, 0, 0,
                       (to_handle(e)->tx_op_flags | FI_INJECT) & ~FI_COMPLETION, nullptr, true);
}
ssize_t a_readwrite(fid_ep *e, const void *buf, std::size_t count, void *desc, void *result, void *,
                    fi_addr_t dest, std::uint64_t addr, std::uint64_t key, datatype dt, op o, void *ctx)
{
    ioc v{const_cast<void *>(buf), count};
    ioc res{result, count};
    rma_ioc r{addr, count, key};
    return post_atomic(e, tx_req::fetch_atomic, &v, &desc, 1, dest, &r, 1, dt, o, &res, 1, nullptr, 0, 0,
                       to_handle(e)->tx_default, ctx, false);
}
ssize_t a_readwritev(fid_ep *e, const ioc *iov, void **desc, std::size_t count, ioc *resultv, void **,
                     std::size_t result_count, fi_addr_t dest, std::uint64_t addr, std::uint64_t key, datatype dt,
                     op o, void *ctx)
{
    std::size_t n = 0;
    for (std::size_t i = 0; i < count && iov; i++)
        n += iov[i].count;
    rma_ioc r{addr, n, key};
    return post_atomic(e, tx_req::fetch_atomic, iov, desc, count, dest, &r, 1, dt, o, resultv, result_count, nullptr,
                       0, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t a_readwritemsg(fid_ep *e, const msg_atomic *m, ioc *resultv, void **, std::size_t result_count,
                       std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    return post_atomic(e, tx_req::fetch_atomic, m->msg_iov, m->desc, m->iov_count, m->addr, m->rma_iov,
                       m->rma_iov_count, m->datatype, m->op, resultv, result_count, nullptr, 0, m->data,
                       flags | to_handle(e)->tx_comp_force, m->context, false);
}
ssize_t a_compwrite(fid_ep *e, const void *buf, std::size_t count, void *desc, const void *compare, void *,
                    void *result, void *, fi_addr_t dest, std::uint64_t addr, std::uint64_t key, datatype dt, op o,
                    void *ctx)
{
    ioc v{const_cast<void *>(buf), count};
    ioc res{result, count};
    ioc cmp{const_cast<void *>(compare), count};
    rma_ioc r{addr, count, key};
    return post_atomic(e, tx_req::compare_atomic, &v, &desc, 1, dest, &r, 1, dt, o, &res, 1, &cmp, 1, 0,
                       to_handle(e)->tx_default, ctx, false);
}
ssize_t a_compwritev(fid_ep *e, const ioc *iov, void **desc, std::size_t count, const ioc *comparev, void **,
                     std::size_t compare_count, ioc *resultv, void **, std::size_t result_count, fi_addr_t dest,
                     std::uint64_t addr, std::uint64_t key, datatype dt, op o, void *ctx)
{
    std::size_t n = 0;
    for (std::size_t i = 0; i < count && iov; i++)
        n += iov[i].count;
    rma_ioc r{addr, n, key};
    return post_atomic(e, tx_req::compare_atomic, iov, desc, count, dest, &r, 1, dt, o, resultv, result_count,
                       comparev, compare_count, 0, to_handle(e)->tx_default, ctx, false);
}
ssize_t a_compwritemsg(fid_ep *e, const msg_atomic *m, const ioc *comparev, void **, std::size_t compare_count,
                       ioc *resultv, void **, std::size_t result_count, std::uint64_t flags)
{
    if (!m) [[unlikely]] // the C++ wrappers check it; the libfabric shim calls this directly
        return -FI_EINVAL;
    return post_atomic(e, tx_req::compare_atomic, m->msg_iov, m->desc, m->iov_count, m->addr, m->rma_iov,
                       m->rma_iov_count, m->datatype, m->op, resultv, result_count, comparev, compare_count, m->data,
                       flags | to_handle(e)->tx_comp_force, m->context, false);
}
int a_writevalid(fid_ep *e, datatype dt, op o, std::size_t *count)
{
    return valid(core_of(e), tx_req::atomic, dt, o, count);
}
int a_readwritevalid(fid_ep *e, datatype dt, op o, std::size_t *count)
{
    return valid(core_of(e), tx_req::fetch_atomic, dt, o, count);
}
int a_compwritevalid(fid_ep *e, datatype dt, op o, std::size_t *count)
{
    return valid(core_of(e), tx_req::compare_atomic, dt, o, count);
}

} // namespace

const ops_rma ep_rma_ops{.read = r_read,
                         .readv = r_readv,
                         .readmsg = r_readmsg,
                         .write = r_write,
                         .writev = r_writev,
                         .writemsg = r_writemsg,
                         .inject = r_inject,
                         .writedata = r_writedata,
                         .injectdata = r_injectdata};
const ops_atomic ep_atomic_ops{.write = a_write,
                               .writev = a_writev,
                               .writemsg = a_writemsg,
                               .inject = a_inject,
                               .readwrite = a_readwrite,
                               .readwritev = a_readwritev,
                               .readwritemsg = a_readwritemsg,
                               .compwrite = a_compwrite,
                               .compwritev = a_compwritev,
                               .compwritemsg = a_compwritemsg,
                               .writevalid = a_writevalid,
                               .readwritevalid = a_readwritevalid,
                               .compwritevalid = a_compwritevalid};

} // namespace shunt::fabric::util
