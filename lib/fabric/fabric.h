/* The fabric object (fi_fabric(3)): the root of a provider's objects.
 *
 * Calls documented in libfabric's fi_fabric(3), fi_domain(3), fi_eq(3) and
 * fi_poll(3) (trywait). fi_X is spelled shunt::fabric::X except where the
 * name is taken by a namespace or type (fi_fabric -> fabric_open, fi_domain
 * -> domain_open). */
#pragma once

#include <cstdint>

#include "fabric/fid.h"
#include "fabric/info.h"

namespace shunt::fabric {

struct fid_domain;
struct fid_pep;
struct fid_eq;
struct eq_attr;
struct fid_fabric;
struct fid_wait;
struct wait_attr;

/** Fabric operations (libfabric struct fi_ops_fabric). */
struct ops_fabric {
    std::size_t size = sizeof(ops_fabric);
    int (*domain)(fid_fabric *fabric, info *info, fid_domain **dom, void *context) = detail::nosys<int>;
    int (*passive_ep)(fid_fabric *fabric, info *info, fid_pep **pep, void *context) = detail::nosys<int>;
    int (*eq_open)(fid_fabric *fabric, eq_attr *attr, fid_eq **eq, void *context) = detail::nosys<int>;
    int (*trywait)(fid_fabric *fabric, fid **fids, int count) = detail::nosys<int>;
    int (*domain2)(fid_fabric *fabric, info *info, fid_domain **dom, std::uint64_t flags, void *context) =
        detail::nosys<int>;
    /** Wait sets (fabric/poll.h); added after the first version of the table. */
    int (*wait_open)(fid_fabric *fabric, wait_attr *attr, fid_wait **waitset) = detail::nosys<int>;
};

/** A fabric (libfabric struct fid_fabric). */
struct fid_fabric {
    struct fid fid;
    const ops_fabric *ops = nullptr;
    std::uint32_t api_version = 0;
};

/** Open the fabric described by @p attr (fi_fabric).
 *  @param attr a fabric_attr from getinfo (prov_name selects the provider,
 *    "core;util" for a stacked one; name selects the fabric).
 *  @param fabric out: the fabric, written on success only.
 *  @param context user context stored in fid.context.
 *  @return 0; -FI_EINVAL null argument or attr without prov_name;
 *  -FI_ENODATA no such provider or fabric name; -FI_ENOMEM. */
[[nodiscard]] int fabric_open(fabric_attr *attr, fid_fabric **fabric, void *context);

/** Open a domain of @p fabric (fi_domain); @p info from getinfo.
 *  @param dom out: written on success only.
 *  @return 0; -FI_EINVAL null or closed fabric, null info/dom; -FI_ENODATA
 *  info names another domain or provider; -FI_ENOMEM. */
[[nodiscard]] int domain_open(fid_fabric *fabric, info *info, fid_domain **dom, void *context);

/** fi_domain2: domain_open with flags (FI_PEER...). Unknown flags: -FI_EBADFLAGS. */
[[nodiscard]] int domain_open2(fid_fabric *fabric, info *info, fid_domain **dom, std::uint64_t flags,
                               void *context);

/** Check whether it is safe to block on the native wait objects of @p fids
 *  (fi_trywait): every CQ, counter or EQ listed must have no unread entry,
 *  and every wait set listed no member with something to read (fabric/poll.h).
 *  @param count number of entries of @p fids.
 *  @return 0 safe to wait; -FI_EAGAIN an object has entries (read them
 *  first); -FI_EINVAL null/closed argument, count <= 0, or an object with no
 *  wait object (FI_WAIT_NONE). */
[[nodiscard]] int trywait(fid_fabric *fabric, fid **fids, int count);

} // namespace shunt::fabric
