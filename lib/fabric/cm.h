/* Connection management (fi_cm(3)) for FI_EP_MSG endpoints, and address
 * queries for every endpoint.
 *
 * Flow: the server opens a passive endpoint, binds an EQ (pep_bind) and
 * calls listen(); a client's connect() produces an FI_CONNREQ event on that
 * EQ whose eq_cm_entry::info (info->handle = the request) is used to open
 * the accepting endpoint; accept() or reject() answers. Both sides then see
 * FI_CONNECTED (or the client an error event with FI_ECONNREFUSED after a
 * reject, carrying the reject's data). shutdown() ends the connection and
 * the peer sees FI_SHUTDOWN. connect() and accept() enable the endpoint if
 * it is not enabled yet. CM data: at most FI_OPT_CM_DATA_SIZE bytes
 * (getopt), delivered in the peer's event. */
#pragma once

#include <cstddef>
#include <cstdint>

#include "env/errors.h"
#include "fabric/endpoint.h"

namespace shunt::fabric {

/** CM operations (libfabric struct fi_ops_cm). */
struct ops_cm {
    std::size_t size = sizeof(ops_cm);
    int (*setname)(fid *f, void *addr, std::size_t addrlen) = detail::nosys<int>;
    int (*getname)(fid *f, void *addr, std::size_t *addrlen) = detail::nosys<int>;
    int (*getpeer)(fid_ep *ep, void *addr, std::size_t *addrlen) = detail::nosys<int>;
    int (*connect)(fid_ep *ep, const void *addr, const void *param, std::size_t paramlen) = detail::nosys<int>;
    int (*listen)(fid_pep *pep) = detail::nosys<int>;
    int (*accept)(fid_ep *ep, const void *param, std::size_t paramlen) = detail::nosys<int>;
    int (*reject)(fid_pep *pep, fid_t handle, const void *param, std::size_t paramlen) = detail::nosys<int>;
    int (*shutdown)(fid_ep *ep, std::uint64_t flags) = detail::nosys<int>;
};

/** Set the local address of an endpoint before enable (fi_setname).
 *  @return 0; -FI_EINVAL null or bad length; -FI_EOPBADSTATE already
 *  enabled; -FI_EADDRINUSE address taken; -FI_ENOSYS not supported. */
[[nodiscard]] int setname(fid *f, void *addr, std::size_t addrlen);

/** Local address of an endpoint or passive endpoint (fi_getname).
 *  @param addrlen in: buffer size; out: address size.
 *  @return 0; -FI_ETOOSMALL buffer too small (*addrlen set to the size
 *  needed, nothing else written); -FI_EINVAL null arguments. */
[[nodiscard]] int getname(fid *f, void *addr, std::size_t *addrlen);

/** Address of the connected peer (fi_getpeer).
 *  @return 0; -FI_ETOOSMALL as getname(); -FI_ENOTCONN not connected. */
[[nodiscard]] int getpeer(fid_ep *ep, void *addr, std::size_t *addrlen);

/** Start listening for connection requests (fi_listen).
 *  @return 0; -FI_ENOEQ no EQ bound; -FI_EOPBADSTATE already listening. */
[[nodiscard]] int listen(fid_pep *pep);

/** Request a connection to the passive endpoint at @p addr (fi_connect).
 *  @param param, paramlen CM data (<= FI_OPT_CM_DATA_SIZE).
 *  @return 0 request sent (the outcome is an EQ event); -FI_EINVAL null
 *  ep/addr or paramlen too large; -FI_ENOEQ no EQ bound; -FI_EISCONN
 *  already connected or connecting; -FI_ECONNREFUSED nobody listens there;
 *  -FI_ENOCQ/-FI_ENOAV as enable(). */
[[nodiscard]] int connect(fid_ep *ep, const void *addr, const void *param, std::size_t paramlen);

/** Accept the connection request the endpoint was opened for (fi_accept).
 *  @return 0; -FI_EINVAL paramlen too large or the endpoint was not opened
 *  from a connection request; -FI_ECONNABORTED the client went away. */
[[nodiscard]] int accept(fid_ep *ep, const void *param, std::size_t paramlen);

/** Reject connection request @p handle (eq_cm_entry::info->handle) (fi_reject).
 *  @return 0; -FI_EINVAL unknown handle or paramlen too large. */
[[nodiscard]] int reject(fid_pep *pep, fid_t handle, const void *param, std::size_t paramlen);

/** Close the connection (fi_shutdown); the peer gets FI_SHUTDOWN.
 *  @param flags 0. @return 0; -FI_ENOTCONN not connected. */
[[nodiscard]] int shutdown(fid_ep *ep, std::uint64_t flags);

} // namespace shunt::fabric
