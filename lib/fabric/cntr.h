/* Completion counters (fi_cntr(3)): a success count and an error count,
 * incremented by the operations of the endpoints bound to them (see
 * ep_bind flags FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ,
 * FI_REMOTE_WRITE). */
#pragma once

#include <cstdint>

#include "env/errors.h"
#include "fabric/domain.h"
#include "fabric/fid.h"

namespace shunt::fabric {

struct fid_wait;

/** Counter attributes (fi_cntr_attr). */
struct cntr_attr {
    cntr_events events = FI_CNTR_EVENTS_COMP; ///< COMP: count operations
    fabric::wait_obj wait_obj = FI_WAIT_NONE; ///< NONE (no cntr_wait), UNSPEC, FD
    fid_wait *wait_set = nullptr;
    std::uint64_t flags = 0;
};

/** Counter operations (libfabric struct fi_ops_cntr). */
struct ops_cntr {
    std::size_t size = sizeof(ops_cntr);
    std::uint64_t (*read)(fid_cntr *cntr) = detail::zero<std::uint64_t>;
    std::uint64_t (*readerr)(fid_cntr *cntr) = detail::zero<std::uint64_t>;
    int (*add)(fid_cntr *cntr, std::uint64_t value) = detail::nosys<int>;
    int (*set)(fid_cntr *cntr, std::uint64_t value) = detail::nosys<int>;
    int (*wait)(fid_cntr *cntr, std::uint64_t threshold, int timeout) = detail::nosys<int>;
    int (*adderr)(fid_cntr *cntr, std::uint64_t value) = detail::nosys<int>;
    int (*seterr)(fid_cntr *cntr, std::uint64_t value) = detail::nosys<int>;
};

/** A counter (libfabric struct fid_cntr). */
struct fid_cntr {
    struct fid fid;
    const ops_cntr *ops = nullptr;
};

/** Open a counter (fi_cntr_open).
 *  @param attr null: defaults (FI_CNTR_EVENTS_COMP, FI_WAIT_NONE).
 *  @return 0; -FI_EINVAL null domain/cntr, unknown events value,
 *  FI_WAIT_SET without a wait set of the domain's fabric (fabric/poll.h);
 *  -FI_ENOSYS unsupported wait object; -FI_ENOMEM. */
[[nodiscard]] int cntr_open(fid_domain *domain, cntr_attr *attr, fid_cntr **cntr, void *context);

/** Success count (fi_cntr_read); drives manual progress. 0 for a null counter. */
inline std::uint64_t cntr_read(fid_cntr *cntr) { return cntr ? cntr->ops->read(cntr) : 0; }
/** Error count (fi_cntr_readerr). 0 for a null counter. */
inline std::uint64_t cntr_readerr(fid_cntr *cntr) { return cntr ? cntr->ops->readerr(cntr) : 0; }
/** Add to the success count (fi_cntr_add). @return 0; -FI_EINVAL null. */
[[nodiscard]] inline int cntr_add(fid_cntr *cntr, std::uint64_t value)
{
    return cntr ? cntr->ops->add(cntr, value) : -FI_EINVAL;
}
/** Set the success count (fi_cntr_set). @return 0; -FI_EINVAL null. */
[[nodiscard]] inline int cntr_set(fid_cntr *cntr, std::uint64_t value)
{
    return cntr ? cntr->ops->set(cntr, value) : -FI_EINVAL;
}
/** Add to the error count (fi_cntr_adderr). @return 0; -FI_EINVAL null. */
[[nodiscard]] inline int cntr_adderr(fid_cntr *cntr, std::uint64_t value)
{
    return cntr ? cntr->ops->adderr(cntr, value) : -FI_EINVAL;
}
/** Set the error count (fi_cntr_seterr). @return 0; -FI_EINVAL null. */
[[nodiscard]] inline int cntr_seterr(fid_cntr *cntr, std::uint64_t value)
{
    return cntr ? cntr->ops->seterr(cntr, value) : -FI_EINVAL;
}
/** Wait until the success count reaches @p threshold (fi_cntr_wait).
 *  @param timeout ms, -1 for no limit.
 *  @return 0 reached; -FI_ETIMEDOUT timeout; -FI_EAVAIL the error count
 *  changed while waiting; -FI_ENOSYS counter has no wait object
 *  (FI_WAIT_NONE); -FI_EINVAL null. */
[[nodiscard]] inline int cntr_wait(fid_cntr *cntr, std::uint64_t threshold, int timeout)
{
    return cntr ? cntr->ops->wait(cntr, threshold, timeout) : -FI_EINVAL;
}

} // namespace shunt::fabric
