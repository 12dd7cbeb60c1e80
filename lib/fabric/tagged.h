/* Tagged messages (fi_tagged(3)). Parameters, return values and errors are
 * those of msg.h, plus:
 *  tag     the message tag (mem_tag_format: FI_TAG_BITS - any 64 bits the
 *          provider does not reserve; FI_TAG_MPI - tag_mpi(tag, payload);
 *          FI_TAG_CCL - a payload identifier matched exactly).
 *  ignore  receive only: bits of the tag that do not take part in matching
 *          (FI_MPI_IGNORE_TAG / FI_MPI_IGNORE_PAYLOAD for FI_TAG_MPI; must
 *          be 0 for FI_TAG_CCL, else -FI_EINVAL).
 * A receive matches a message when ((msg_tag ^ tag) & ~ignore) == 0 and the
 * source matches (FI_ADDR_UNSPEC: any, with FI_DIRECTED_RECV /
 * FI_TAGGED_DIRECTED_RECV). Messages that arrive before a matching receive
 * is posted are kept as unexpected messages and matched in order later.
 * trecvmsg also takes FI_PEEK, FI_CLAIM and FI_DISCARD. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <sys/uio.h>

#include "env/errors.h"
#include "fabric/endpoint.h"

namespace shunt::fabric {

/** Argument of tsendmsg/trecvmsg (fi_msg_tagged). */
struct msg_tagged {
    const iovec *msg_iov = nullptr;
    void **desc = nullptr;
    std::size_t iov_count = 0;
    fi_addr_t addr = 0;
    std::uint64_t tag = 0;
    std::uint64_t ignore = 0;
    void *context = nullptr;
    std::uint64_t data = 0;
};

/** Tagged operations (libfabric struct fi_ops_tagged). */
struct ops_tagged {
    std::size_t size = sizeof(ops_tagged);
    ssize_t (*recv)(fid_ep *ep, void *buf, std::size_t len, void *desc, fi_addr_t src, std::uint64_t tag,
                    std::uint64_t ignore, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*recvv)(fid_ep *ep, const iovec *iov, void **desc, std::size_t count, fi_addr_t src,
                     std::uint64_t tag, std::uint64_t ignore, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*recvmsg)(fid_ep *ep, const msg_tagged *m, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*send)(fid_ep *ep, const void *buf, std::size_t len, void *desc, fi_addr_t dest, std::uint64_t tag,
                    void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*sendv)(fid_ep *ep, const iovec *iov, void **desc, std::size_t count, fi_addr_t dest,
                     std::uint64_t tag, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*sendmsg)(fid_ep *ep, const msg_tagged *m, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*inject)(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest, std::uint64_t tag) =
        detail::nosys<ssize_t>;
    ssize_t (*senddata)(fid_ep *ep, const void *buf, std::size_t len, void *desc, std::uint64_t data,
                        fi_addr_t dest, std::uint64_t tag, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*injectdata)(fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data, fi_addr_t dest,
                          std::uint64_t tag) = detail::nosys<ssize_t>;
};

/** Post a tagged receive (fi_trecv). */
[[nodiscard]] inline ssize_t trecv(fid_ep *ep, void *buf, std::size_t len, void *desc, fi_addr_t src_addr,
                                   std::uint64_t tag, std::uint64_t ignore, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->recv(ep, buf, len, desc, src_addr, tag, ignore, context);
}
/** Post a tagged scatter receive (fi_trecvv). */
[[nodiscard]] inline ssize_t trecvv(fid_ep *ep, const iovec *iov, void **desc, std::size_t count,
                                    fi_addr_t src_addr, std::uint64_t tag, std::uint64_t ignore, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->recvv(ep, iov, desc, count, src_addr, tag, ignore, context);
}
/** Post a tagged receive with flags (fi_trecvmsg; FI_PEEK, FI_CLAIM, FI_DISCARD). */
[[nodiscard]] inline ssize_t trecvmsg(fid_ep *ep, const msg_tagged *m, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->recvmsg(ep, m, flags);
}
/** Send a tagged message (fi_tsend). */
[[nodiscard]] inline ssize_t tsend(fid_ep *ep, const void *buf, std::size_t len, void *desc, fi_addr_t dest_addr,
                                   std::uint64_t tag, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->send(ep, buf, len, desc, dest_addr, tag, context);
}
/** Send a gathered tagged message (fi_tsendv). */
[[nodiscard]] inline ssize_t tsendv(fid_ep *ep, const iovec *iov, void **desc, std::size_t count,
                                    fi_addr_t dest_addr, std::uint64_t tag, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->sendv(ep, iov, desc, count, dest_addr, tag, context);
}
/** Send a tagged message with flags (fi_tsendmsg). */
[[nodiscard]] inline ssize_t tsendmsg(fid_ep *ep, const msg_tagged *m, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->sendmsg(ep, m, flags);
}
/** Inject a tagged message (fi_tinject): no completion, buffer free at return. */
[[nodiscard]] inline ssize_t tinject(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest_addr,
                                     std::uint64_t tag)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->inject(ep, buf, len, dest_addr, tag);
}
/** Tagged send with remote CQ data (fi_tsenddata). */
[[nodiscard]] inline ssize_t tsenddata(fid_ep *ep, const void *buf, std::size_t len, void *desc,
                                       std::uint64_t data, fi_addr_t dest_addr, std::uint64_t tag, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->senddata(ep, buf, len, desc, data, dest_addr, tag, context);
}
/** Tagged inject with remote CQ data (fi_tinjectdata). */
[[nodiscard]] inline ssize_t tinjectdata(fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data,
                                         fi_addr_t dest_addr, std::uint64_t tag)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->tagged->injectdata(ep, buf, len, data, dest_addr, tag);
}

} // namespace shunt::fabric
