/* Address vectors (fi_av(3)): tables of peer addresses that data transfer
 * calls name with an fi_addr_t.
 *
 * FI_AV_TABLE gives fi_addr_t values 0, 1, 2... in insertion order (slots of
 * removed addresses are not reused until the AV is closed); FI_AV_MAP gives
 * opaque values. Either way insert() writes FI_ADDR_NOTAVAIL for an address
 * it could not insert, and the AV's domain owns the translation. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#include "env/errors.h"
#include "fabric/domain.h"
#include "fabric/fid.h"

namespace shunt::fabric {

/** AV attributes (fi_av_attr). */
struct av_attr {
    av_type type = FI_AV_UNSPEC;  ///< UNSPEC: the domain's av_type
    int rx_ctx_bits = 0;          ///< bits of fi_addr_t naming an rx context (FI_NAMED_RX_CTX)
    std::size_t count = 0;        ///< expected number of addresses (hint)
    std::size_t ep_per_node = 0;
    const char *name = nullptr;   ///< shared named AV (not supported: -FI_ENOSYS)
    void *map_addr = nullptr;
    std::uint64_t flags = 0;      ///< FI_EVENT (async inserts), FI_READ, FI_SYMMETRIC
};

/** AV flags. */
inline constexpr std::uint64_t FI_SYMMETRIC = 1ULL << 59;
inline constexpr std::uint64_t FI_SYNC_ERR = 1ULL << 58;

/** AV operations (libfabric struct fi_ops_av). */
struct ops_av {
    std::size_t size = sizeof(ops_av);
    int (*insert)(fid_av *av, const void *addr, std::size_t count, fi_addr_t *fi_addr, std::uint64_t flags,
                  void *context) = detail::nosys<int>;
    int (*insertsvc)(fid_av *av, const char *node, const char *service, fi_addr_t *fi_addr, std::uint64_t flags,
                     void *context) = detail::nosys<int>;
    int (*insertsym)(fid_av *av, const char *node, std::size_t nodecnt, const char *service, std::size_t svccnt,
                     fi_addr_t *fi_addr, std::uint64_t flags, void *context) = detail::nosys<int>;
    int (*remove)(fid_av *av, fi_addr_t *fi_addr, std::size_t count, std::uint64_t flags) = detail::nosys<int>;
    int (*lookup)(fid_av *av, fi_addr_t fi_addr, void *addr, std::size_t *addrlen) = detail::nosys<int>;
    const char *(*straddr)(fid_av *av, const void *addr, char *buf, std::size_t *len) = detail::zero<const char *>;
};

/** An address vector (libfabric struct fid_av). */
struct fid_av {
    struct fid fid;
    const ops_av *ops = nullptr;
};

/** Open an AV (fi_av_open).
 *  @return 0; -FI_EINVAL null arguments, unknown type, rx_ctx_bits out of
 *  range; -FI_ENOSYS named (shared) AVs; -FI_ENOMEM. */
[[nodiscard]] int av_open(fid_domain *domain, av_attr *attr, fid_av **av, void *context);

/** Insert @p count addresses in the provider's address format (fi_av_insert).
 *  @param fi_addr out: one fi_addr_t per address (FI_ADDR_NOTAVAIL for a
 *    failed one); may be null for FI_AV_TABLE.
 *  @return number inserted; -FI_EINVAL null av, null addr with count > 0,
 *  unknown flags. With FI_SYNC_ERR, a failed address's error goes to
 *  @p context as an int array. */
[[nodiscard]] int av_insert(fid_av *av, const void *addr, std::size_t count, fi_addr_t *fi_addr, std::uint64_t flags,
                            void *context);
/** Insert one address given as node and service strings (fi_av_insertsvc).
 *  @return 1 inserted; 0 not (fi_addr set to FI_ADDR_NOTAVAIL); -FI_EINVAL. */
[[nodiscard]] int av_insertsvc(fid_av *av, const char *node, const char *service, fi_addr_t *fi_addr,
                               std::uint64_t flags, void *context);
/** Insert @p nodecnt x @p svccnt addresses formed by incrementing the
 *  numeric suffix of @p node and the number @p service (fi_av_insertsym).
 *  @return number inserted; -FI_EINVAL. */
[[nodiscard]] int av_insertsym(fid_av *av, const char *node, std::size_t nodecnt, const char *service,
                               std::size_t svccnt, fi_addr_t *fi_addr, std::uint64_t flags, void *context);
/** Remove addresses (fi_av_remove); later transfers to them fail.
 *  @return 0; -FI_EINVAL null or an address not in the AV (the others are
 *  still removed). */
[[nodiscard]] int av_remove(fid_av *av, fi_addr_t *fi_addr, std::size_t count, std::uint64_t flags);
/** The address stored for @p fi_addr (fi_av_lookup).
 *  @param addrlen in: buffer size; out: address size (set even when the
 *  buffer is too small, in which case a truncated copy is written as the
 *  spec allows). @return 0; -FI_EINVAL null or unknown fi_addr
 *  (FI_ADDR_NOTAVAIL, removed); -FI_ETOOSMALL is not used. */
[[nodiscard]] int av_lookup(fid_av *av, fi_addr_t fi_addr, void *addr, std::size_t *addrlen);
/** Printable form of an address in the AV's format (fi_av_straddr).
 *  @param len in: size of @p buf; out: size the full string needs (with NUL).
 *  @return @p buf (truncated when too small); null on null arguments. */
const char *av_straddr(fid_av *av, const void *addr, char *buf, std::size_t *len);

/** fi_addr_t that targets receive context @p rx_index of @p fi_addr (fi_rx_addr). */
constexpr fi_addr_t rx_addr(fi_addr_t fi_addr, int rx_index, int rx_ctx_bits)
{
    return fi_addr_t(rx_index) << (64 - rx_ctx_bits) | fi_addr;
}

} // namespace shunt::fabric
