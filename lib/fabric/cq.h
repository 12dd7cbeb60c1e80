/* Completion queues (fi_cq(3)).
 *
 * A CQ reports completed operations of the endpoints bound to it in one of
 * four formats, and failed ones in a separate error queue: when the next
 * entry is an error, read() returns -FI_EAVAIL and readerr() returns it.
 * With manual progress, reading a CQ is what moves the bound endpoints'
 * operations forward. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#include "env/errors.h"
#include "fabric/domain.h"
#include "fabric/fid.h"

namespace shunt::fabric {

struct fid_wait;

/** CQ attributes (fi_cq_attr). */
struct cq_attr {
    std::size_t size = 0;              ///< entries; 0: provider default
    std::uint64_t flags = 0;           ///< FI_AFFINITY (signaling_vector is a CPU)
    cq_format format = FI_CQ_FORMAT_UNSPEC; ///< UNSPEC: FI_CQ_FORMAT_CONTEXT
    fabric::wait_obj wait_obj = FI_WAIT_NONE;  ///< NONE (no sread), UNSPEC, FD (fd via control FI_GETWAIT)
    int signaling_vector = 0;
    cq_wait_cond wait_cond = FI_CQ_COND_NONE; ///< THRESHOLD: sread's cond is a count
    fid_wait *wait_set = nullptr;
};

/** FI_CQ_FORMAT_CONTEXT entry. */
struct cq_entry {
    void *op_context;
};
/** FI_CQ_FORMAT_MSG entry. */
struct cq_msg_entry {
    void *op_context;
    std::uint64_t flags; ///< FI_SEND/FI_RECV/FI_RMA/FI_READ/FI_WRITE/FI_MSG/FI_TAGGED/... FI_MULTI_RECV
    std::size_t len;     ///< bytes received (receives)
};
/** FI_CQ_FORMAT_DATA entry. */
struct cq_data_entry {
    void *op_context;
    std::uint64_t flags;
    std::size_t len;
    void *buf;           ///< where the data was placed (multi-recv)
    std::uint64_t data;  ///< remote CQ data when flags has FI_REMOTE_CQ_DATA
};
/** FI_CQ_FORMAT_TAGGED entry. */
struct cq_tagged_entry {
    void *op_context;
    std::uint64_t flags;
    std::size_t len;
    void *buf;
    std::uint64_t data;
    std::uint64_t tag;
};
/** Error entry (fi_cq_err_entry). */
struct cq_err_entry {
    void *op_context;    ///< operation context, or the endpoint's context if none
    std::uint64_t flags;
    std::size_t len;
    void *buf;
    std::uint64_t data;
    std::uint64_t tag;
    std::size_t olen;    ///< bytes that did not fit (FI_ETRUNC)
    int err;             ///< positive error code: FI_ETRUNC, FI_ECANCELED, FI_EACCES...
    int prov_errno;
    void *err_data;      ///< provider data; caller's buffer if err_data_size > 0 on input
    std::size_t err_data_size;
    fi_addr_t src_addr;  ///< FI_SOURCE_ERR: source of an unknown sender
};

/** CQ operations (libfabric struct fi_ops_cq). */
struct ops_cq {
    std::size_t size = sizeof(ops_cq);
    ssize_t (*read)(fid_cq *cq, void *buf, std::size_t count) = detail::nosys<ssize_t>;
    ssize_t (*readfrom)(fid_cq *cq, void *buf, std::size_t count, fi_addr_t *src_addr) = detail::nosys<ssize_t>;
    ssize_t (*readerr)(fid_cq *cq, cq_err_entry *buf, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*sread)(fid_cq *cq, void *buf, std::size_t count, const void *cond, int timeout) = detail::nosys<ssize_t>;
    ssize_t (*sreadfrom)(fid_cq *cq, void *buf, std::size_t count, fi_addr_t *src_addr, const void *cond,
                         int timeout) = detail::nosys<ssize_t>;
    int (*signal)(fid_cq *cq) = detail::nosys<int>;
    const char *(*strerror)(fid_cq *cq, int prov_errno, const void *err_data, char *buf, std::size_t len) =
        detail::unknown_error;
};

/** A completion queue (libfabric struct fid_cq). */
struct fid_cq {
    struct fid fid;
    const ops_cq *ops = nullptr;
};

/** Open a CQ (fi_cq_open).
 *  @param attr size/format/wait object; null is refused.
 *  @param cq out: written on success only.
 *  @return 0; -FI_EINVAL null arguments, unknown format, wait_cond
 *  THRESHOLD without a wait object, FI_WAIT_SET without a wait set of the
 *  domain's fabric (fabric/poll.h); -FI_ENOSYS wait object not supported
 *  (FI_WAIT_MUTEX_COND, FI_WAIT_POLLFD); -FI_ENOMEM. */
[[nodiscard]] int cq_open(fid_domain *domain, cq_attr *attr, fid_cq **cq, void *context);

/** Read up to @p count completions in the CQ's format (fi_cq_read).
 *  @return number read (> 0); -FI_EAGAIN none; -FI_EAVAIL the next entry is
 *  an error (readerr); -FI_EINVAL null cq or buf with count > 0. */
[[nodiscard]] inline ssize_t cq_read(fid_cq *cq, void *buf, std::size_t count)
{
    if (!cq) [[unlikely]]
        return -FI_EINVAL;
    return cq->ops->read(cq, buf, count);
}
/** As cq_read() and the source address of each entry (FI_ADDR_NOTAVAIL when
 *  unknown) in @p src_addr (fi_cq_readfrom). */
[[nodiscard]] inline ssize_t cq_readfrom(fid_cq *cq, void *buf, std::size_t count, fi_addr_t *src_addr)
{
    if (!cq) [[unlikely]]
        return -FI_EINVAL;
    return cq->ops->readfrom(cq, buf, count, src_addr);
}
/** Read one error entry (fi_cq_readerr).
 *  @param flags 0, or FI_PEEK to leave it in the queue.
 *  @return 1; -FI_EAGAIN no error entry; -FI_EINVAL null arguments. */
[[nodiscard]] inline ssize_t cq_readerr(fid_cq *cq, cq_err_entry *buf, std::uint64_t flags)
{
    if (!cq) [[unlikely]]
        return -FI_EINVAL;
    return cq->ops->readerr(cq, buf, flags);
}
/** Blocking read (fi_cq_sread): wait until an entry (or @p cond entries
 *  with FI_CQ_COND_THRESHOLD) is available, @p timeout ms pass (-1: no
 *  limit) or cq_signal() is called.
 *  @return as cq_read(); -FI_EAGAIN timeout or signalled; -FI_ENOSYS the CQ
 *  has no wait object (FI_WAIT_NONE). */
[[nodiscard]] inline ssize_t cq_sread(fid_cq *cq, void *buf, std::size_t count, const void *cond, int timeout)
{
    if (!cq) [[unlikely]]
        return -FI_EINVAL;
    return cq->ops->sread(cq, buf, count, cond, timeout);
}
/** Blocking readfrom (fi_cq_sreadfrom). As cq_sread(). */
[[nodiscard]] inline ssize_t cq_sreadfrom(fid_cq *cq, void *buf, std::size_t count, fi_addr_t *src_addr,
                                          const void *cond, int timeout)
{
    if (!cq) [[unlikely]]
        return -FI_EINVAL;
    return cq->ops->sreadfrom(cq, buf, count, src_addr, cond, timeout);
}
/** Wake a thread blocked in cq_sread() (fi_cq_signal). @return 0; -FI_EINVAL. */
[[nodiscard]] inline int cq_signal(fid_cq *cq)
{
    if (!cq) [[unlikely]]
        return -FI_EINVAL;
    return cq->ops->signal(cq);
}
/** Text for an error entry's prov_errno (fi_cq_strerror). Never null. */
const char *cq_strerror(fid_cq *cq, int prov_errno, const void *err_data, char *buf, std::size_t len);

/** Bytes of one entry of @p format (0 for an unknown format). */
std::size_t cq_entry_size(cq_format format) noexcept;

} // namespace shunt::fabric
