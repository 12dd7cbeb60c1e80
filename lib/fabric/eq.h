/* Event queues (fi_eq(3)): connection management and other asynchronous
 * events (FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN, FI_NOTIFY, errors).
 * Like a CQ, an error event makes eq_read() return -FI_EAVAIL and is read
 * with eq_readerr(). */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#include "env/errors.h"
#include "fabric/fabric.h"
#include "fabric/fid.h"
#include "fabric/info.h"

namespace shunt::fabric {

struct fid_wait;

/** EQ attributes (fi_eq_attr). */
struct eq_attr {
    std::size_t size = 0;                     ///< entries; 0: provider default
    std::uint64_t flags = 0;                  ///< FI_WRITE: eq_write() allowed
    fabric::wait_obj wait_obj = FI_WAIT_NONE; ///< NONE (no eq_sread), UNSPEC, FD
    int signaling_vector = 0;
    fid_wait *wait_set = nullptr;
};

/** Generic event (fi_eq_entry): FI_NOTIFY, FI_MR_COMPLETE, FI_AV_COMPLETE... */
struct eq_entry {
    fid_t fid;
    void *context;
    std::uint64_t data;
};

/** Connection management event (fi_eq_cm_entry): FI_CONNREQ, FI_CONNECTED,
 *  FI_SHUTDOWN. CM data follows the fixed part; read with a buffer of
 *  sizeof(eq_cm_entry) + FI_OPT_CM_DATA_SIZE bytes to receive it. For
 *  FI_CONNREQ, @p info is a new info the reader owns (freeinfo) whose handle
 *  identifies the request for accept/reject. */
struct eq_cm_entry {
    fid_t fid;
    fabric::info *info;
    // CM data follows (libfabric's flexible member `data[]`, which C++ cannot
    // embed in a larger struct): see eq_cm_data().
};

/** The CM data that follows an eq_cm_entry in an eq_read buffer. */
inline std::uint8_t *eq_cm_data(eq_cm_entry *e) { return reinterpret_cast<std::uint8_t *>(e + 1); }

/** Error event (fi_eq_err_entry). For a rejected connect(): err is
 *  FI_ECONNREFUSED, fid the endpoint, err_data the reject's CM data. */
struct eq_err_entry {
    fid_t fid;
    void *context;
    std::uint64_t data;
    int err;            ///< positive error code
    int prov_errno;
    void *err_data;     ///< valid until the next readerr on this EQ
    std::size_t err_data_size;
};

/** EQ operations (libfabric struct fi_ops_eq). */
struct ops_eq {
    std::size_t size = sizeof(ops_eq);
    ssize_t (*read)(fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, std::uint64_t flags) =
        detail::nosys<ssize_t>;
    ssize_t (*readerr)(fid_eq *eq, eq_err_entry *buf, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*write)(fid_eq *eq, std::uint32_t event, const void *buf, std::size_t len, std::uint64_t flags) =
        detail::nosys<ssize_t>;
    ssize_t (*sread)(fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, int timeout,
                     std::uint64_t flags) = detail::nosys<ssize_t>;
    const char *(*strerror)(fid_eq *eq, int prov_errno, const void *err_data, char *buf, std::size_t len) =
        detail::unknown_error;
};

/** An event queue (libfabric struct fid_eq). */
struct fid_eq {
    struct fid fid;
    const ops_eq *ops = nullptr;
};

/** Open an EQ on a fabric (fi_eq_open).
 *  @return 0; -FI_EINVAL null arguments, FI_WAIT_SET without a wait set
 *  of this fabric (fabric/poll.h); -FI_ENOSYS unsupported wait object;
 *  -FI_ENOMEM. */
[[nodiscard]] int eq_open(fid_fabric *fabric, eq_attr *attr, fid_eq **eq, void *context);

/** Read one event (fi_eq_read).
 *  @param event out: the event type. @param buf, len event data buffer.
 *  @param flags 0 or FI_PEEK.
 *  @return bytes of event data written; -FI_EAGAIN no event; -FI_EAVAIL an
 *  error event is next (eq_readerr); -FI_ETOOSMALL @p len cannot hold the
 *  event (it stays queued); -FI_EINVAL null arguments. */
[[nodiscard]] ssize_t eq_read(fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, std::uint64_t flags);
/** Read one error event (fi_eq_readerr). @param flags 0 or FI_PEEK.
 *  @return sizeof(eq_err_entry); -FI_EAGAIN none; -FI_EINVAL null. */
[[nodiscard]] ssize_t eq_readerr(fid_eq *eq, eq_err_entry *buf, std::uint64_t flags);
/** Insert a user event (fi_eq_write); the EQ must be opened with FI_WRITE.
 *  @param flags 0, or FI_EQ_ERROR_FLAG to insert an error event (buf is
 *  then an eq_err_entry).
 *  @return @p len; -FI_EINVAL null, EQ without FI_WRITE, len too large;
 *  -FI_EAGAIN queue full. */
[[nodiscard]] ssize_t eq_write(fid_eq *eq, std::uint32_t event, const void *buf, std::size_t len,
                               std::uint64_t flags);
/** Blocking read (fi_eq_sread). @param timeout ms, -1 no limit.
 *  @return as eq_read(); -FI_EAGAIN timeout; -FI_ENOSYS no wait object. */
[[nodiscard]] ssize_t eq_sread(fid_eq *eq, std::uint32_t *event, void *buf, std::size_t len, int timeout,
                               std::uint64_t flags);
/** Text for an error event's prov_errno (fi_eq_strerror). Never null. */
const char *eq_strerror(fid_eq *eq, int prov_errno, const void *err_data, char *buf, std::size_t len);

/** eq_write flag: the event written is an error event (buf is an eq_err_entry). */
inline constexpr std::uint64_t FI_EQ_ERROR_FLAG = 1ULL << 63;

} // namespace shunt::fabric
