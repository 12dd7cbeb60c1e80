/* Poll sets and wait sets (libfabric's fi_poll(3)).
 *
 * libfabric 2.x removed them; Shunt keeps them for the applications written
 * against 1.x that use them (the libfabric shim, lib/ofi, forwards to these).
 *
 * A poll set groups CQs and counters of one domain: poll() drives their
 * progress and returns the contexts of those that have something to read. A
 * wait set groups the CQs, counters and EQs opened on it (their attributes'
 * wait_obj FI_WAIT_SET and wait_set): wait() blocks until one of them has
 * something to read, on one wait object for all of them.
 *
 * "Has something to read": a CQ that is not empty (completions or errors);
 * an EQ that is not empty; a counter whose success or error count changed
 * since the last poll() / wait() reported it, or since the application last
 * called cntr_set(), cntr_add(), cntr_seterr() or cntr_adderr() on it. */
#pragma once

#include <cstddef>
#include <cstdint>

#include "env/errors.h"
#include "fabric/fid.h"

namespace shunt::fabric {

struct fid_fabric;
struct fid_domain;
struct fid_wait;
struct fid_poll;

/** Wait set attributes (fi_wait_attr). */
struct wait_attr {
    /** FI_WAIT_UNSPEC or FI_WAIT_FD (one eventfd, FI_GETWAIT gives it), or
     *  FI_WAIT_YIELD (no wait object: wait() yields between checks). */
    fabric::wait_obj wait_obj = FI_WAIT_UNSPEC;
    std::uint64_t flags = 0; ///< reserved, 0
};

/** Wait set operations (libfabric struct fi_ops_wait). */
struct ops_wait {
    std::size_t size = sizeof(ops_wait);
    int (*wait)(fid_wait *waitset, int timeout) = detail::nosys<int>;
};

/** A wait set (libfabric struct fid_wait). */
struct fid_wait {
    struct fid fid;
    const ops_wait *ops = nullptr;
};

/** Poll set attributes (fi_poll_attr). */
struct poll_attr {
    std::uint64_t flags = 0; ///< reserved, 0
};

/** Poll set operations (libfabric struct fi_ops_poll). */
struct ops_poll {
    std::size_t size = sizeof(ops_poll);
    int (*poll)(fid_poll *pollset, void **context, int count) = detail::nosys<int>;
    int (*poll_add)(fid_poll *pollset, fid *event_fid, std::uint64_t flags) = detail::nosys<int>;
    int (*poll_del)(fid_poll *pollset, fid *event_fid, std::uint64_t flags) = detail::nosys<int>;
};

/** A poll set (libfabric struct fid_poll). */
struct fid_poll {
    struct fid fid;
    const ops_poll *ops = nullptr;
};

/** Open a wait set on @p fabric (fi_wait_open). CQs, counters and EQs of
 *  the fabric's domains join it when opened with wait_obj FI_WAIT_SET and
 *  wait_set = the set; it cannot close while they are open (-FI_EBUSY).
 *  control(FI_GETWAIT, int *) gives its file descriptor (FI_WAIT_FD /
 *  FI_WAIT_UNSPEC), control(FI_GETWAITOBJ, wait_obj *) its kind.
 *  @return 0; -FI_EINVAL null or closed fabric, null @p attr or @p waitset,
 *  non-zero flags, a wait object other than FI_WAIT_UNSPEC, FI_WAIT_FD,
 *  FI_WAIT_YIELD (FI_WAIT_MUTEX_COND, FI_WAIT_POLLFD: -FI_ENOSYS);
 *  -FI_ENOSYS the provider has no wait sets; -FI_ENOMEM. */
[[nodiscard]] int wait_open(fid_fabric *fabric, wait_attr *attr, fid_wait **waitset);

/** Block until an object of the set has something to read (fi_wait); with
 *  manual progress the wait drives the objects' endpoints.
 *  @param timeout ms, -1 without limit, 0 to check only.
 *  @return 0 something to read; -FI_ETIMEDOUT; -FI_EINVAL null or closed. */
[[nodiscard]] int wait(fid_wait *waitset, int timeout);

/** Open a poll set on @p domain (fi_poll_open); @p attr may be null.
 *  @return 0; -FI_EINVAL null or closed domain, null @p pollset, non-zero
 *  flags; -FI_ENOSYS the provider has no poll sets; -FI_ENOMEM. */
[[nodiscard]] int poll_open(fid_domain *domain, poll_attr *attr, fid_poll **pollset);

/** Add a CQ or counter of the poll set's domain (fi_poll_add); it cannot
 *  close while in the set (-FI_EBUSY). Adding a member again changes nothing.
 *  @return 0; -FI_EINVAL null or closed objects, not a CQ or counter, or of
 *  another domain; -FI_EBADFLAGS non-zero flags; -FI_ENOMEM. */
[[nodiscard]] int poll_add(fid_poll *pollset, fid *event_fid, std::uint64_t flags);

/** Remove a CQ or counter (fi_poll_del); one that is not in the set is no
 *  error (as in libfabric).
 *  @return 0; -FI_EINVAL null or closed objects; -FI_EBADFLAGS non-zero flags. */
[[nodiscard]] int poll_del(fid_poll *pollset, fid *event_fid, std::uint64_t flags);

/** Progress every member and write the contexts of those with something to
 *  read into @p context, at most @p count (fi_poll). A CQ is reported until
 *  it is read empty; a counter once per change.
 *  @return the number of contexts written, 0 none; -FI_EINVAL null or
 *  closed set, @p count < 0, null @p context with @p count > 0. */
[[nodiscard]] int poll(fid_poll *pollset, void **context, int count);

} // namespace shunt::fabric
