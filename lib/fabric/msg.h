/* Message transfers (fi_msg(3)): send and receive on active endpoints.
 *
 * Parameters common to the calls of this file:
 *  ep       enabled active endpoint (or tx/rx context, alias, shared rx ctx).
 *  buf,len  data buffer; len <= ep_attr::max_msg_size (FI_OPT_MAX_MSG_SIZE).
 *  iov,desc,count  scatter/gather list of count <= iov_limit entries and
 *           their MR descriptors (mr_desc()); desc may be null unless the
 *           domain's mr_mode has FI_MR_LOCAL.
 *  dest_addr / src_addr  AV address of the peer (FI_ADDR_UNSPEC for any
 *           source; ignored on connected endpoints).
 *  data     remote CQ data (FI_REMOTE_CQ_DATA), cq_data_size bytes.
 *  context  user context returned in the completion (struct context /
 *           context2 when FI_CONTEXT / FI_CONTEXT2 mode).
 *  flags    operation flags of the *msg forms; they replace the endpoint's
 *           default op_flags (FI_COMPLETION, FI_INJECT, FI_INJECT_COMPLETE,
 *           FI_TRANSMIT_COMPLETE, FI_DELIVERY_COMPLETE, FI_COMMIT_COMPLETE,
 *           FI_MULTI_RECV, FI_REMOTE_CQ_DATA, FI_MORE, FI_FENCE).
 *
 * Return values (every call): 0 posted (the buffer of an inject call, or of
 * a call with FI_INJECT, is the caller's again at return); -FI_EAGAIN
 * queue full: drive progress (read the CQ) and retry; -FI_EOPBADSTATE
 * endpoint not enabled (or disabled by a critical error); -FI_EINVAL null
 * endpoint or bad argument (null buffer with len > 0, count > iov_limit,
 * bad address); -FI_EMSGSIZE len above the limit, or above inject_size for
 * inject calls / FI_INJECT; -FI_EBADFLAGS unknown flags; -FI_EOPNOTSUPP the
 * endpoint lacks the capability (FI_MSG and FI_SEND/FI_RECV) or the
 * completion level (FI_COMMIT_COMPLETE); -FI_ENOCQ none bound. Errors that
 * cannot be seen at the call (no matching receive at a DGRAM peer, remote
 * failures) come back as CQ error entries. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <sys/uio.h>

#include "env/errors.h"
#include "fabric/endpoint.h"

namespace shunt::fabric {

/** Argument of sendmsg/recvmsg (fi_msg). */
struct msg {
    const iovec *msg_iov = nullptr;
    void **desc = nullptr;
    std::size_t iov_count = 0;
    fi_addr_t addr = 0;
    void *context = nullptr;
    std::uint64_t data = 0;
};

/** Message operations (libfabric struct fi_ops_msg). */
struct ops_msg {
    std::size_t size = sizeof(ops_msg);
    ssize_t (*recv)(fid_ep *ep, void *buf, std::size_t len, void *desc, fi_addr_t src, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*recvv)(fid_ep *ep, const iovec *iov, void **desc, std::size_t count, fi_addr_t src, void *ctx) =
        detail::nosys<ssize_t>;
    ssize_t (*recvmsg)(fid_ep *ep, const msg *m, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*send)(fid_ep *ep, const void *buf, std::size_t len, void *desc, fi_addr_t dest, void *ctx) =
        detail::nosys<ssize_t>;
    ssize_t (*sendv)(fid_ep *ep, const iovec *iov, void **desc, std::size_t count, fi_addr_t dest, void *ctx) =
        detail::nosys<ssize_t>;
    ssize_t (*sendmsg)(fid_ep *ep, const msg *m, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*inject)(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest) = detail::nosys<ssize_t>;
    ssize_t (*senddata)(fid_ep *ep, const void *buf, std::size_t len, void *desc, std::uint64_t data,
                        fi_addr_t dest, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*injectdata)(fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data, fi_addr_t dest) =
        detail::nosys<ssize_t>;
};

/** Post a receive buffer (fi_recv). */
[[nodiscard]] inline ssize_t recv(fid_ep *ep, void *buf, std::size_t len, void *desc, fi_addr_t src_addr,
                                  void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->recv(ep, buf, len, desc, src_addr, context);
}
/** Post a scatter receive (fi_recvv). */
[[nodiscard]] inline ssize_t recvv(fid_ep *ep, const iovec *iov, void **desc, std::size_t count,
                                   fi_addr_t src_addr, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->recvv(ep, iov, desc, count, src_addr, context);
}
/** Post a receive described by @p m with @p flags (fi_recvmsg); FI_MULTI_RECV
 *  posts one buffer for many messages (see FI_OPT_MIN_MULTI_RECV). */
[[nodiscard]] inline ssize_t recvmsg(fid_ep *ep, const msg *m, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->recvmsg(ep, m, flags);
}
/** Send a message (fi_send). */
[[nodiscard]] inline ssize_t send(fid_ep *ep, const void *buf, std::size_t len, void *desc, fi_addr_t dest_addr,
                                  void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->send(ep, buf, len, desc, dest_addr, context);
}
/** Send a gathered message (fi_sendv). */
[[nodiscard]] inline ssize_t sendv(fid_ep *ep, const iovec *iov, void **desc, std::size_t count,
                                   fi_addr_t dest_addr, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->sendv(ep, iov, desc, count, dest_addr, context);
}
/** Send with explicit flags (fi_sendmsg). */
[[nodiscard]] inline ssize_t sendmsg(fid_ep *ep, const msg *m, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->sendmsg(ep, m, flags);
}
/** Send @p len <= inject_size bytes with no completion; the buffer is free
 *  at return (fi_inject). Errors still produce a CQ error entry. */
[[nodiscard]] inline ssize_t inject(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest_addr)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->inject(ep, buf, len, dest_addr);
}
/** Send with remote CQ data (fi_senddata). */
[[nodiscard]] inline ssize_t senddata(fid_ep *ep, const void *buf, std::size_t len, void *desc, std::uint64_t data,
                                      fi_addr_t dest_addr, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->senddata(ep, buf, len, desc, data, dest_addr, context);
}
/** Inject with remote CQ data (fi_injectdata). */
[[nodiscard]] inline ssize_t injectdata(fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data,
                                        fi_addr_t dest_addr)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->msg->injectdata(ep, buf, len, data, dest_addr);
}

} // namespace shunt::fabric
