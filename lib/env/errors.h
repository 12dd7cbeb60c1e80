/* Error codes of every Shunt layer: libfabric's FI_* codes, by value.
 *
 * Calls return 0 (or a count) on success and a negated code on failure, e.g.
 * -FI_EAGAIN. Values below FI_ERRNO_OFFSET equal the Linux errno values, as in
 * libfabric, so an errno can be returned as -errno directly. */
#pragma once

#include <cerrno>

namespace shunt {

inline constexpr int FI_SUCCESS = 0;
inline constexpr int FI_EPERM = EPERM;
inline constexpr int FI_ENOENT = ENOENT;
inline constexpr int FI_EINTR = EINTR;
inline constexpr int FI_EIO = EIO;
inline constexpr int FI_E2BIG = E2BIG;
inline constexpr int FI_EBADF = EBADF;
inline constexpr int FI_EAGAIN = EAGAIN;
inline constexpr int FI_ENOMEM = ENOMEM;
inline constexpr int FI_EACCES = EACCES;
inline constexpr int FI_EFAULT = EFAULT;
inline constexpr int FI_EBUSY = EBUSY;
inline constexpr int FI_EEXIST = EEXIST;
inline constexpr int FI_ENODEV = ENODEV;
inline constexpr int FI_EINVAL = EINVAL;
inline constexpr int FI_EMFILE = EMFILE;
inline constexpr int FI_ENOSPC = ENOSPC;
inline constexpr int FI_ENOSYS = ENOSYS;
inline constexpr int FI_EWOULDBLOCK = EWOULDBLOCK;
inline constexpr int FI_ENOMSG = ENOMSG;
inline constexpr int FI_ENODATA = ENODATA;
inline constexpr int FI_EOVERFLOW = EOVERFLOW;
inline constexpr int FI_EMSGSIZE = EMSGSIZE;
inline constexpr int FI_ENOPROTOOPT = ENOPROTOOPT;
inline constexpr int FI_EOPNOTSUPP = EOPNOTSUPP;
inline constexpr int FI_EADDRINUSE = EADDRINUSE;
inline constexpr int FI_EADDRNOTAVAIL = EADDRNOTAVAIL;
inline constexpr int FI_ENETDOWN = ENETDOWN;
inline constexpr int FI_ENETUNREACH = ENETUNREACH;
inline constexpr int FI_ECONNABORTED = ECONNABORTED;
inline constexpr int FI_ECONNRESET = ECONNRESET;
inline constexpr int FI_ENOBUFS = ENOBUFS;
inline constexpr int FI_EISCONN = EISCONN;
inline constexpr int FI_ENOTCONN = ENOTCONN;
inline constexpr int FI_ESHUTDOWN = ESHUTDOWN;
inline constexpr int FI_ETIMEDOUT = ETIMEDOUT;
inline constexpr int FI_ECONNREFUSED = ECONNREFUSED;
inline constexpr int FI_EHOSTDOWN = EHOSTDOWN;
inline constexpr int FI_EHOSTUNREACH = EHOSTUNREACH;
inline constexpr int FI_EALREADY = EALREADY;
inline constexpr int FI_EINPROGRESS = EINPROGRESS;
inline constexpr int FI_EREMOTEIO = EREMOTEIO;
inline constexpr int FI_ECANCELED = ECANCELED;
inline constexpr int FI_EKEYREJECTED = EKEYREJECTED;

inline constexpr int FI_ERRNO_OFFSET = 256;
inline constexpr int FI_EOTHER = 256;      ///< unspecified error
inline constexpr int FI_ETOOSMALL = 257;   ///< provided buffer is too small
inline constexpr int FI_EOPBADSTATE = 258; ///< operation not permitted in current state
inline constexpr int FI_EAVAIL = 259;      ///< error available (read the error queue)
inline constexpr int FI_EBADFLAGS = 260;   ///< flags not supported
inline constexpr int FI_ENOEQ = 261;       ///< missing or unavailable event queue
inline constexpr int FI_EDOMAIN = 262;     ///< invalid resource domain
inline constexpr int FI_ENOCQ = 263;       ///< missing or unavailable completion queue
inline constexpr int FI_ECRC = 264;        ///< CRC error
inline constexpr int FI_ETRUNC = 265;      ///< truncation error
inline constexpr int FI_ENOKEY = 266;      ///< required key not available
inline constexpr int FI_ENOAV = 267;       ///< missing or unavailable address vector
inline constexpr int FI_EOVERRUN = 268;    ///< queue has been overrun
inline constexpr int FI_ENORX = 269;       ///< receiver not ready, no receive buffers

/** Text for an error code, positive or negative (libfabric's fi_strerror).
 *  @return a static string; never null. */
const char *strerror(int code) noexcept;

} // namespace shunt
