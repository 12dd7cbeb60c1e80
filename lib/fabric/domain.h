/* Access domains (fi_domain(3)): the objects of one provider instance.
 * Creation of endpoints, CQs, counters, AVs and MRs goes through the domain;
 * the user calls are in endpoint.h, cq.h, cntr.h, av.h and mr.h. */
#pragma once

#include <cstdint>
#include <sys/uio.h>

#include "fabric/fid.h"
#include "fabric/info.h"

namespace shunt::fabric {

struct fid_domain;
struct fid_av;
struct av_attr;
struct fid_cq;
struct cq_attr;
struct fid_ep;
struct fid_cntr;
struct cntr_attr;
struct fid_stx;
struct fid_mr;
struct mr_attr;
struct fid_poll;
struct poll_attr;

/** Result of query_atomic (fi_atomic_attr). */
struct atomic_attr {
    std::size_t count; ///< max number of elements in one operation
    std::size_t size;  ///< bytes of one element
};

/** Flags of query_atomic. */
inline constexpr std::uint64_t FI_FETCH_ATOMIC = 1ULL << 58;
inline constexpr std::uint64_t FI_COMPARE_ATOMIC = 1ULL << 59;

/** Domain operations (libfabric struct fi_ops_domain). */
struct ops_domain {
    std::size_t size = sizeof(ops_domain);
    int (*av_open)(fid_domain *domain, av_attr *attr, fid_av **av, void *context) = detail::nosys<int>;
    int (*cq_open)(fid_domain *domain, cq_attr *attr, fid_cq **cq, void *context) = detail::nosys<int>;
    int (*endpoint)(fid_domain *domain, info *info, fid_ep **ep, void *context) = detail::nosys<int>;
    int (*scalable_ep)(fid_domain *domain, info *info, fid_ep **sep, void *context) = detail::nosys<int>;
    int (*cntr_open)(fid_domain *domain, cntr_attr *attr, fid_cntr **cntr, void *context) = detail::nosys<int>;
    int (*poll_open)(fid_domain *domain, poll_attr *attr, fid_poll **pollset) = detail::nosys<int>;
    int (*stx_ctx)(fid_domain *domain, tx_attr *attr, fid_stx **stx, void *context) = detail::nosys<int>;
    int (*srx_ctx)(fid_domain *domain, rx_attr *attr, fid_ep **rx_ep, void *context) = detail::nosys<int>;
    int (*query_atomic)(fid_domain *domain, datatype dt, op o, atomic_attr *attr, std::uint64_t flags) =
        detail::nosys<int>;
    int (*endpoint2)(fid_domain *domain, info *info, fid_ep **ep, std::uint64_t flags, void *context) =
        detail::nosys<int>;
};

/** Memory registration operations (libfabric struct fi_ops_mr); the fid
 *  is the domain (or an endpoint when FI_MR_ENDPOINT). */
struct ops_mr {
    std::size_t size = sizeof(ops_mr);
    int (*reg)(fid *f, const void *buf, std::size_t len, std::uint64_t access, std::uint64_t offset,
               std::uint64_t requested_key, std::uint64_t flags, fid_mr **mr, void *context) = detail::nosys<int>;
    int (*regv)(fid *f, const iovec *iov, std::size_t count, std::uint64_t access, std::uint64_t offset,
                std::uint64_t requested_key, std::uint64_t flags, fid_mr **mr, void *context) = detail::nosys<int>;
    int (*regattr)(fid *f, const mr_attr *attr, std::uint64_t flags, fid_mr **mr) = detail::nosys<int>;
};

/** An access domain (libfabric struct fid_domain). */
struct fid_domain {
    struct fid fid;
    const ops_domain *ops = nullptr;
    const ops_mr *mr = nullptr;
};

/** Bind a domain to an EQ for asynchronous events (fi_domain_bind).
 *  @return 0; -FI_EINVAL null/closed objects or @p f not an EQ. */
[[nodiscard]] int domain_bind(fid_domain *domain, fid *f, std::uint64_t flags);

/** Which datatype/operation pairs the domain can do atomically
 *  (fi_query_atomic).
 *  @param flags 0, FI_FETCH_ATOMIC or FI_COMPARE_ATOMIC (which family).
 *  @param attr out: element count limit and element size; written on success.
 *  @return 0 supported; -FI_EOPNOTSUPP not supported; -FI_EINVAL null
 *  argument, unknown datatype/op or bad flags. */
[[nodiscard]] int query_atomic(fid_domain *domain, datatype dt, op o, atomic_attr *attr, std::uint64_t flags);

} // namespace shunt::fabric
