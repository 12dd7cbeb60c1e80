/* For provider writers: the generic memory region and key table.
 * A target validates incoming RMA/atomic requests with mr_verify(). */
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>
#include <sys/uio.h>

#include "fabric/api.h"
#include "fabric/util/domain.h"

namespace shunt::fabric::util {

struct cntr_obj;
struct ep_core;

struct mr_obj {
    fid_mr mr;                         ///< first: the public object
    domain_obj *domain = nullptr;
    std::vector<iovec> iov;
    std::uint64_t access = 0;
    std::uint64_t offset = 0;
    std::uint64_t key = 0;             ///< the key (also in mr.key once enabled)
    std::uint64_t flags = 0;
    bool enabled = false;
    ep_core *ep = nullptr;             ///< FI_MR_ENDPOINT binding
    cntr_obj *cntr = nullptr;          ///< remote-write counter (FI_REMOTE_WRITE bind)
    void *prov = nullptr;
};

/** Check a remote access: region @p key covers [addr, addr+len) with the
 *  @p access rights (FI_REMOTE_READ / FI_REMOTE_WRITE).
 *  @param ptr out: local address of addr. @param mr out (may be null).
 *  @return 0; -FI_EKEYREJECTED unknown or disabled key; -FI_EACCES access
 *  not granted; -FI_EINVAL range outside the region. */
int mr_verify(domain_obj *d, std::uint64_t key, std::uint64_t addr, std::size_t len, std::uint64_t access,
              void **ptr, mr_obj **mr = nullptr) noexcept;

/** The endpoint core of an endpoint fid (defined with the endpoint base). */
ep_core *ep_core_of(fid *f);

/** Endpoint close: unbind regions bound to it. */
void mr_unbind_ep(domain_obj *d, ep_core *ep);

} // namespace shunt::fabric::util
