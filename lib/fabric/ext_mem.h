/* Provider extension: memory that peers reach without a system call.
 * Opened by name with open_ops() on a domain:
 *
 *     const shunt::fabric::ops_mem *mem;
 *     int rc = open_ops(&domain->fid, FI_SHUNT_MEM_OPS_1, 0, (void **)&mem, nullptr);
 *     void *buf;
 *     rc = mem->alloc(domain, 1 << 20, &buf);   // then mr_reg(domain, buf, ...) as usual
 *
 * -FI_ENOSYS means the provider has no such memory. On the vq provider over
 * drivers/shm the memory lies in the domain's shared segment (vq alloc_buf):
 * RMA and atomics into regions registered over it, and rendezvous sends
 * from it, are plain memory copies (or CPU atomics) by the peer, with no
 * system call and no work by the owner's progress; regions over private
 * memory are reached through the owner's progress or cross-memory attach
 * (doc/guides/fabric.md, "RMA"). The segment's size is the driver's
 * (SHUNT_SHM_SEGMENT_MB), shared with its receive rings. */
#pragma once

#include <cstddef>

#include "fabric/domain.h"

namespace shunt::fabric {

/** Name of version 1 of the shared-memory extension. */
inline constexpr const char *FI_SHUNT_MEM_OPS_1 = "shunt_mem_v1";

/** Shared-memory extension operations (version 1). */
struct ops_mem {
    std::size_t size = sizeof(ops_mem);
    /** Allocate @p len bytes of memory peers of this domain reach directly.
     *  @return 0 and *buf (64-byte aligned); -FI_EINVAL null
     *  argument or len 0; -FI_ENOMEM none left; -FI_EOPNOTSUPP the domain's
     *  device has no such memory. */
    int (*alloc)(fid_domain *domain, std::size_t len, void **buf) = detail::nosys<int>;
    /** Free memory from alloc (every region over it must be closed first).
     *  @return 0; -FI_EINVAL not from alloc of this domain; -FI_EBUSY a
     *  region still covers it. */
    int (*free)(fid_domain *domain, void *buf) = detail::nosys<int>;
};

} // namespace shunt::fabric
