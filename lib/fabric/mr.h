/* Memory registration (fi_mr(3)).
 *
 * A region grants access rights on a buffer: local ones (FI_SEND, FI_RECV,
 * FI_READ, FI_WRITE) for use as a descriptor (mr_desc) in transfers, remote
 * ones (FI_REMOTE_READ, FI_REMOTE_WRITE) for peers' RMA and atomics, which
 * name it by its key (mr_key). The domain's mr_mode says what the
 * application must do: FI_MR_LOCAL - pass descriptors for local buffers;
 * FI_MR_VIRT_ADDR - remote addresses are virtual addresses, else offsets;
 * FI_MR_PROV_KEY - the provider picks keys (requested_key ignored);
 * FI_MR_ENDPOINT - bind the region to an endpoint (mr_bind) and enable it
 * (mr_enable) before use; FI_MR_ALLOCATED - only allocated memory. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/uio.h>

#include "fabric/domain.h"
#include "fabric/fid.h"

namespace shunt::fabric {

/** A memory region (libfabric struct fid_mr). */
struct fid_mr {
    struct fid fid;
    void *mem_desc = nullptr;  ///< local descriptor (mr_desc)
    std::uint64_t key = 0;     ///< remote key (mr_key)
};

/** Registration attributes (fi_mr_attr). */
struct mr_attr {
    const iovec *mr_iov = nullptr;
    std::size_t iov_count = 0;
    std::uint64_t access = 0;        ///< FI_SEND|FI_RECV|FI_READ|FI_WRITE|FI_REMOTE_READ|FI_REMOTE_WRITE
    std::uint64_t offset = 0;        ///< first address peers use, when not FI_MR_VIRT_ADDR
    std::uint64_t requested_key = 0; ///< ignored with FI_MR_PROV_KEY
    void *context = nullptr;
    std::size_t auth_key_size = 0;
    std::uint8_t *auth_key = nullptr;
    hmem_iface iface = FI_HMEM_SYSTEM; ///< only FI_HMEM_SYSTEM is supported
    std::uint64_t device = 0;
    void *hmem_data = nullptr;
    std::size_t page_size = 0;
    const fid_mr *base_mr = nullptr;
    std::size_t sub_mr_cnt = 0;
};

/** Access bits a region can carry. */
inline constexpr std::uint64_t FI_MR_ACCESS_MASK = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                                                   FI_REMOTE_WRITE;

/** Register @p len bytes at @p buf (fi_mr_reg).
 *  @param domain the domain (its fid); @param access FI_MR_ACCESS_MASK bits
 *    (0 means all local and remote rights);
 *  @param offset, requested_key see mr_attr; @param flags 0 or FI_RMA_EVENT.
 *  @param mr out: written on success only.
 *  @return 0; -FI_EINVAL null domain/mr, null buf with len > 0, unknown
 *  access bits; -FI_ENOKEY requested key in use (no FI_MR_PROV_KEY);
 *  -FI_EBADFLAGS unknown flags; -FI_ENOMEM. */
[[nodiscard]] int mr_reg(fid_domain *domain, const void *buf, std::size_t len, std::uint64_t access,
                         std::uint64_t offset, std::uint64_t requested_key, std::uint64_t flags, fid_mr **mr,
                         void *context);
/** Register an iovec (fi_mr_regv); @p count <= domain_attr::mr_iov_limit
 *  (else -FI_EINVAL). Otherwise as mr_reg(). */
[[nodiscard]] int mr_regv(fid_domain *domain, const iovec *iov, std::size_t count, std::uint64_t access,
                          std::uint64_t offset, std::uint64_t requested_key, std::uint64_t flags, fid_mr **mr,
                          void *context);
/** Register from attributes (fi_mr_regattr). -FI_EOPNOTSUPP for an iface
 *  other than FI_HMEM_SYSTEM. Otherwise as mr_regv(). */
[[nodiscard]] int mr_regattr(fid_domain *domain, const mr_attr *attr, std::uint64_t flags, fid_mr **mr);

/** Local descriptor of a region (fi_mr_desc); null for null. */
inline void *mr_desc(fid_mr *mr) { return mr ? mr->mem_desc : nullptr; }
/** Remote key of a region (fi_mr_key); FI_KEY_NOTAVAIL for null or for a
 *  region that must be enabled first (FI_MR_ENDPOINT) and is not. */
std::uint64_t mr_key(fid_mr *mr);

/** Bind a region to an endpoint or counter (fi_mr_bind), for FI_MR_ENDPOINT
 *  domains (endpoint) or remote-access counting (counter, FI_REMOTE_WRITE).
 *  @return 0; -FI_EINVAL null/closed or wrong class; -FI_EOPBADSTATE region
 *  already enabled. */
[[nodiscard]] int mr_bind(fid_mr *mr, fid *bfid, std::uint64_t flags);
/** Enable a region after mr_bind (fi_mr_enable). @return 0; -FI_EINVAL;
 *  -FI_EOPBADSTATE FI_MR_ENDPOINT region not bound to an endpoint. */
[[nodiscard]] int mr_enable(fid_mr *mr);

} // namespace shunt::fabric
