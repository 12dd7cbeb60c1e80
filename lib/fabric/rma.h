/* RMA (fi_rma(3)): read and write remote registered memory. Parameters,
 * return values and errors are those of msg.h, plus:
 *  addr    remote address: an offset into the region when the domain's
 *          mr_mode lacks FI_MR_VIRT_ADDR, else the target's virtual address.
 *  key     the remote region's key (mr_key() at the target).
 *  rma_iov, rma_iov_count  remote segments (<= tx_attr::rma_iov_limit).
 * The endpoint needs FI_RMA with FI_READ / FI_WRITE; the target's region
 * needs FI_REMOTE_READ / FI_REMOTE_WRITE access. A bad key, range or
 * access right at the target comes back as a CQ error entry (-FI_EACCES /
 * FI_EKEYREJECTED style codes in cq_err_entry::err), never as corruption.
 * writedata / FI_REMOTE_CQ_DATA also generate a completion at the target's
 * receive CQ carrying @p data (consuming no posted receive unless the
 * provider needs FI_RX_CQ_DATA mode). */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <sys/uio.h>

#include "env/errors.h"
#include "fabric/endpoint.h"

namespace shunt::fabric {

/** One remote segment (fi_rma_iov). */
struct rma_iov {
    std::uint64_t addr = 0;
    std::size_t len = 0;
    std::uint64_t key = 0;
};

/** Argument of readmsg/writemsg (fi_msg_rma). */
struct msg_rma {
    const iovec *msg_iov = nullptr;
    void **desc = nullptr;
    std::size_t iov_count = 0;
    fi_addr_t addr = 0;
    const fabric::rma_iov *rma_iov = nullptr;
    std::size_t rma_iov_count = 0;
    void *context = nullptr;
    std::uint64_t data = 0;
};

/** RMA operations (libfabric struct fi_ops_rma). */
struct ops_rma {
    std::size_t size = sizeof(ops_rma);
    ssize_t (*read)(fid_ep *ep, void *buf, std::size_t len, void *desc, fi_addr_t src, std::uint64_t addr,
                    std::uint64_t key, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*readv)(fid_ep *ep, const iovec *iov, void **desc, std::size_t count, fi_addr_t src,
                     std::uint64_t addr, std::uint64_t key, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*readmsg)(fid_ep *ep, const msg_rma *m, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*write)(fid_ep *ep, const void *buf, std::size_t len, void *desc, fi_addr_t dest, std::uint64_t addr,
                     std::uint64_t key, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*writev)(fid_ep *ep, const iovec *iov, void **desc, std::size_t count, fi_addr_t dest,
                      std::uint64_t addr, std::uint64_t key, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*writemsg)(fid_ep *ep, const msg_rma *m, std::uint64_t flags) = detail::nosys<ssize_t>;
    ssize_t (*inject)(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest, std::uint64_t addr,
                      std::uint64_t key) = detail::nosys<ssize_t>;
    ssize_t (*writedata)(fid_ep *ep, const void *buf, std::size_t len, void *desc, std::uint64_t data,
                         fi_addr_t dest, std::uint64_t addr, std::uint64_t key, void *ctx) = detail::nosys<ssize_t>;
    ssize_t (*injectdata)(fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data, fi_addr_t dest,
                          std::uint64_t addr, std::uint64_t key) = detail::nosys<ssize_t>;
};

/** Read remote memory into @p buf (fi_read). */
[[nodiscard]] inline ssize_t read(fid_ep *ep, void *buf, std::size_t len, void *desc, fi_addr_t src_addr,
                                  std::uint64_t addr, std::uint64_t key, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->read(ep, buf, len, desc, src_addr, addr, key, context);
}
/** Read into a scatter list (fi_readv). */
[[nodiscard]] inline ssize_t readv(fid_ep *ep, const iovec *iov, void **desc, std::size_t count,
                                   fi_addr_t src_addr, std::uint64_t addr, std::uint64_t key, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->readv(ep, iov, desc, count, src_addr, addr, key, context);
}
/** Read with flags and remote segments (fi_readmsg). */
[[nodiscard]] inline ssize_t readmsg(fid_ep *ep, const msg_rma *m, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->readmsg(ep, m, flags);
}
/** Write @p buf to remote memory (fi_write). */
[[nodiscard]] inline ssize_t write(fid_ep *ep, const void *buf, std::size_t len, void *desc, fi_addr_t dest_addr,
                                   std::uint64_t addr, std::uint64_t key, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->write(ep, buf, len, desc, dest_addr, addr, key, context);
}
/** Write a gather list (fi_writev). */
[[nodiscard]] inline ssize_t writev(fid_ep *ep, const iovec *iov, void **desc, std::size_t count,
                                    fi_addr_t dest_addr, std::uint64_t addr, std::uint64_t key, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->writev(ep, iov, desc, count, dest_addr, addr, key, context);
}
/** Write with flags and remote segments (fi_writemsg). */
[[nodiscard]] inline ssize_t writemsg(fid_ep *ep, const msg_rma *m, std::uint64_t flags)
{
    if (!ep || !m) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->writemsg(ep, m, flags);
}
/** Write <= inject_size bytes, no completion, buffer free at return (fi_inject_write). */
[[nodiscard]] inline ssize_t inject_write(fid_ep *ep, const void *buf, std::size_t len, fi_addr_t dest_addr,
                                          std::uint64_t addr, std::uint64_t key)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->inject(ep, buf, len, dest_addr, addr, key);
}
/** Write with remote CQ data (fi_writedata). */
[[nodiscard]] inline ssize_t writedata(fid_ep *ep, const void *buf, std::size_t len, void *desc, std::uint64_t data,
                                       fi_addr_t dest_addr, std::uint64_t addr, std::uint64_t key, void *context)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->writedata(ep, buf, len, desc, data, dest_addr, addr, key, context);
}
/** Inject-write with remote CQ data (fi_inject_writedata). */
[[nodiscard]] inline ssize_t inject_writedata(fid_ep *ep, const void *buf, std::size_t len, std::uint64_t data,
                                              fi_addr_t dest_addr, std::uint64_t addr, std::uint64_t key)
{
    if (!ep) [[unlikely]]
        return -FI_EINVAL;
    return ep->rma->injectdata(ep, buf, len, data, dest_addr, addr, key);
}

} // namespace shunt::fabric
