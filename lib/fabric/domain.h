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

namespace stub {
int av_open(fid_domain *, av_attr *, fid_av **, void *);
int cq_open(fid_domain *, cq_attr *, fid_cq **, void *);
int endpoint(fid_domain *, info *, fid_ep **, void *);
int scalable_ep(fid_domain *, info *, fid_ep **, void *);
int cntr_open(fid_domain *, cntr_attr *, fid_cntr **, void *);
int poll_open(fid_domain *, poll_attr *, fid_poll **);
int stx_ctx(fid_domain *, tx_attr *, fid_stx **, void *);
int srx_ctx(fid_domain *, rx_attr *, fid_ep **, void *);
int query_atomic(fid_domain *, datatype, op, atomic_attr *, std::uint64_t);
int endpoint2(fid_domain *, info *, fid_ep **, std::uint64_t, void *);
int mr_reg(fid *, const void *, std::size_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, fid_mr **,
           void *);
int mr_regv(fid *, const iovec *, std::size_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t,
            fid_mr **, void *);
int mr_regattr(fid *, const mr_attr *, std::uint64_t, fid_mr **);
} // namespace stub

/** Domain operations (libfabric struct fi_ops_domain). */
struct ops_domain {
    std::size_t size = sizeof(ops_domain);
    int (*av_open)(fid_domain *domain, av_attr *attr, fid_av **av, void *context) = stub::av_open;
    int (*cq_open)(fid_domain *domain, cq_attr *attr, fid_cq **cq, void *context) = stub::cq_open;
    int (*endpoint)(fid_domain *domain, info *info, fid_ep **ep, void *context) = stub::endpoint;
    int (*scalable_ep)(fid_domain *domain, info *info, fid_ep **sep, void *context) = stub::scalable_ep;
    int (*cntr_open)(fid_domain *domain, cntr_attr *attr, fid_cntr **cntr, void *context) = stub::cntr_open;
    int (*poll_open)(fid_domain *domain, poll_attr *attr, fid_poll **pollset) = stub::poll_open;
    int (*stx_ctx)(fid_domain *domain, tx_attr *attr, fid_stx **stx, void *context) = stub::stx_ctx;
    int (*srx_ctx)(fid_domain *domain, rx_attr *attr, fid_ep **rx_ep, void *context) = stub::srx_ctx;
    int (*query_atomic)(fid_domain *domain, datatype dt, op o, atomic_attr *attr, std::uint64_t flags) =
        stub::query_atomic;
    int (*endpoint2)(fid_domain *domain, info *info, fid_ep **ep, std::uint64_t flags, void *context) =
        stub::endpoint2;
};

/** Memory registration operations (libfabric struct fi_ops_mr); the fid
 *  is the domain (or an endpoint when FI_MR_ENDPOINT). */
struct ops_mr {
    std::size_t size = sizeof(ops_mr);
    int (*reg)(fid *f, const void *buf, std::size_t len, std::uint64_t access, std::uint64_t offset,
               std::uint64_t requested_key, std::uint64_t flags, fid_mr **mr, void *context) = stub::mr_reg;
    int (*regv)(fid *f, const iovec *iov, std::size_t count, std::uint64_t access, std::uint64_t offset,
                std::uint64_t requested_key, std::uint64_t flags, fid_mr **mr, void *context) = stub::mr_regv;
    int (*regattr)(fid *f, const mr_attr *attr, std::uint64_t flags, fid_mr **mr) = stub::mr_regattr;
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
