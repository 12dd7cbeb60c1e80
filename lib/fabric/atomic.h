/* Atomics (fi_atomic(3)): operations on typed elements of remote
 * registered memory, done atomically with respect to other atomics of the
 * same domain. Parameters, return values and errors are those of rma.h, plus:
 *  count     number of elements (not bytes) of @p datatype; at most
 *            atomic_attr::count from the valid-op queries.
 *  datatype  element type (FI_INT8 ... FI_UINT64, FI_FLOAT, FI_DOUBLE ...).
 *  op        the operation: atomic() takes FI_MIN..FI_BXOR, FI_ATOMIC_WRITE;
 *            fetch_atomic() also FI_ATOMIC_READ and returns the old value
 *            in @p result; compare_atomic() takes FI_CSWAP* and FI_MSWAP
 *            with @p compare. A pair the provider cannot do: -FI_EOPNOTSUPP
 *            (check with atomicvalid() and friends or query_atomic()).
 * The endpoint needs FI_ATOMIC (with FI_WRITE, and FI_READ for fetch and
 * compare); the target region FI_REMOTE_WRITE (and FI_REMOTE_READ). */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#include "env/errors.h"
#include "fabric/endpoint.h"

namespace shunt::fabric {

/** Local element vector (fi_ioc). */
struct ioc {
    void *addr = nullptr;
    std::size_t count = 0;
};

/** Remote element vector (fi_rma_ioc). */
struct rma_ioc {
    std::uint64_t addr = 0;
    std::size_t count = 0;
    std::uint64_t key = 0;
};

/** Argument of the *msg forms (fi_msg_atomic). */
struct msg_atomic {
    const ioc *msg_iov = nullptr;
    void **desc = nullptr;
    std::size_t iov_count = 0;
    fi_addr_t addr = 0;
    const rma_ioc *rma_iov = nullptr;
    std::size_t rma_iov_count = 0;
    fabric::datatype datatype = FI_INT8;
    fabric::op op = FI_MIN;
    void *context = nullptr;
    std::uint64_t data = 0;
};

/** Atomic operations (libfabric struct fi_ops_atomic). */
struct ops_atomic {
    std::size_t size = sizeof(ops_atomic);
    ssize_t (*write)(fid_ep *ep, const void *buf, std::size_t count, void *desc, fi_addr_t dest, std::uint64_t addr,
                     std::uint64_t key, datatype dt, op o, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*writev)(fid_ep *ep, const ioc *iov, void **desc, std::size_t count, fi_addr_t dest,
                      std::uint64_t addr, std::uint64_t key, datatype dt, op o, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*writemsg)(fid_ep *ep, const msg_atomic *m, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*inject)(fid_ep *ep, const void *buf, std::size_t count, fi_addr_t dest, std::uint64_t addr,
                      std::uint64_t key, datatype dt, op o) = detail::nosys<ssize_t>;
    ssize_t (*readwrite)(fid_ep *ep, const void *buf, std::size_t count, void *desc, void *result,
                         void *result_desc, fi_addr_t dest, std::uint64_t addr, std::uint64_t key, datatype dt,
                         op o, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*readwritev)(fid_ep *ep, const ioc *iov, void **desc, std::size_t count, ioc *resultv,
                          void **result_desc, std::size_t result_count, fi_addr_t dest, std::uint64_t addr,
                          std::uint64_t key, datatype dt, op o, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*readwritemsg)(fid_ep *ep, const msg_atomic *m, ioc *resultv, void **result_desc,
                            std::size_t result_count, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*compwrite)(fid_ep *ep, const void *buf, std::size_t count, void *desc, const void *compare,
                         void *compare_desc, void *result, void *result_desc, fi_addr_t dest, std::uint64_t addr,
                         std::uint64_t key, datatype dt, op o, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*compwritev)(fid_ep *ep, const ioc *iov, void **desc, std::size_t count, const ioc *comparev,
                          void **compare_desc, std::size_t compare_count, ioc *resultv, void **result_desc,
                          std::size_t result_count, fi_addr_t dest, std::uint64_t addr, std::uint64_t key,
                          datatype dt, op o, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*compwritemsg)(fid_ep *ep, const msg_atomic *m, const ioc *comparev, void **compare_desc,
                            std::size_t compare_count, ioc *resultv, void **result_desc, std::size_t result_count,
                            std::uint64_t flags) = detail::nosys<ssize_t>;
    int (*writevalid)(fid_ep *ep, datatype dt, op o, std::size_t *count) = detail::opnotsupp<int>;
    int (*readwritevalid)(fid_ep *ep, datatype dt, op o, std::size_t *count) = detail::opnotsupp<int>;
    int (*compwritevalid)(fid_ep *ep, datatype dt, op o, std::size_t *count) = detail::opnotsupp<int>;
};

/** Atomic update of remote elements with @p buf (fi_atomic). */
[[nodiscard]] inline ssize_t atomic(fid_ep *ep, const void *buf, std::size_t count, void *desc, fi_addr_t dest_addr,
                                    std::uint64_t addr, std::uint64_t key, datatype dt, op o, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->write(ep, buf, count, desc, dest_addr, addr, key, dt, o, context);
}
/** Vector form of atomic() (fi_atomicv). */
[[nodiscard]] inline ssize_t atomicv(fid_ep *ep, const ioc *iov, void **desc, std::size_t count,
                                     fi_addr_t dest_addr, std::uint64_t addr, std::uint64_t key, datatype dt, op o,
                                     void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->writev(ep, iov, desc, count, dest_addr, addr, key, dt, o, context);
}
/** Message form of atomic() (fi_atomicmsg). */
[[nodiscard]] inline ssize_t atomicmsg(fid_ep *ep, const msg_atomic *m, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->writemsg(ep, m, flags);
}
/** Inject form of atomic(): no completion, buffer free at return (fi_inject_atomic). */
[[nodiscard]] inline ssize_t inject_atomic(fid_ep *ep, const void *buf, std::size_t count, fi_addr_t dest_addr,
                                           std::uint64_t addr, std::uint64_t key, datatype dt, op o)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->inject(ep, buf, count, dest_addr, addr, key, dt, o);
}
/** Atomic update returning the previous values in @p result (fi_fetch_atomic). */
[[nodiscard]] inline ssize_t fetch_atomic(fid_ep *ep, const void *buf, std::size_t count, void *desc, void *result,
                                          void *result_desc, fi_addr_t dest_addr, std::uint64_t addr,
                                          std::uint64_t key, datatype dt, op o, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->readwrite(ep, buf, count, desc, result, result_desc, dest_addr, addr, key, dt, o, context);
}
/** Vector form of fetch_atomic() (fi_fetch_atomicv). */
[[nodiscard]] inline ssize_t fetch_atomicv(fid_ep *ep, const ioc *iov, void **desc, std::size_t count,
                                           ioc *resultv, void **result_desc, std::size_t result_count,
                                           fi_addr_t dest_addr, std::uint64_t addr, std::uint64_t key, datatype dt,
                                           op o, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->readwritev(ep, iov, desc, count, resultv, result_desc, result_count, dest_addr, addr, key,
                                  dt, o, context);
}
/** Message form of fetch_atomic() (fi_fetch_atomicmsg). */
[[nodiscard]] inline ssize_t fetch_atomicmsg(fid_ep *ep, const msg_atomic *m, ioc *resultv, void **result_desc,
                                             std::size_t result_count, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->readwritemsg(ep, m, resultv, result_desc, result_count, flags);
}
/** Compare-and-swap family; old values in @p result (fi_compare_atomic). */
[[nodiscard]] inline ssize_t compare_atomic(fid_ep *ep, const void *buf, std::size_t count, void *desc,
                                            const void *compare, void *compare_desc, void *result,
                                            void *result_desc, fi_addr_t dest_addr, std::uint64_t addr,
                                            std::uint64_t key, datatype dt, op o, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->compwrite(ep, buf, count, desc, compare, compare_desc, result, result_desc, dest_addr, addr,
                                 key, dt, o, context);
}
/** Vector form of compare_atomic() (fi_compare_atomicv). */
[[nodiscard]] inline ssize_t compare_atomicv(fid_ep *ep, const ioc *iov, void **desc, std::size_t count,
                                             const ioc *comparev, void **compare_desc, std::size_t compare_count,
                                             ioc *resultv, void **result_desc, std::size_t result_count,
                                             fi_addr_t dest_addr, std::uint64_t addr, std::uint64_t key,
                                             datatype dt, op o, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->compwritev(ep, iov, desc, count, comparev, compare_desc, compare_count, resultv,
                                  result_desc, result_count, dest_addr, addr, key, dt, o, context);
}
/** Message form of compare_atomic() (fi_compare_atomicmsg). */
[[nodiscard]] inline ssize_t compare_atomicmsg(fid_ep *ep, const msg_atomic *m, const ioc *comparev,
                                               void **compare_desc, std::size_t compare_count, ioc *resultv,
                                               void **result_desc, std::size_t result_count, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->compwritemsg(ep, m, comparev, compare_desc, compare_count, resultv, result_desc,
                                    result_count, flags);
}
/** Is @p o on @p dt supported by atomic()? (fi_atomicvalid)
 *  @param count out: max elements per operation, written on success.
 *  @return 0 supported; -FI_EOPNOTSUPP not; -FI_EINVAL null arguments. */
[[nodiscard]] inline int atomicvalid(fid_ep *ep, datatype dt, op o, std::size_t *count)
{
    if (!ep || !count) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->writevalid(ep, dt, o, count);
}
/** As atomicvalid() for fetch_atomic() (fi_fetch_atomicvalid). */
[[nodiscard]] inline int fetch_atomicvalid(fid_ep *ep, datatype dt, op o, std::size_t *count)
{
    if (!ep || !count) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->readwritevalid(ep, dt, o, count);
}
/** As atomicvalid() for compare_atomic() (fi_compare_atomicvalid). */
[[nodiscard]] inline int compare_atomicvalid(fid_ep *ep, datatype dt, op o, std::size_t *count)
{
    if (!ep || !count) [[unlikely]]
        return -FI_EINVAL;
    return ep->atomic->compwritevalid(ep, dt, o, count);
}

/** Size in bytes of one element of @p dt, 0 for an unknown datatype. */
std::size_t datatype_size(datatype dt) noexcept;

} // namespace shunt::fabric
