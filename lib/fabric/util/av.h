/* For provider writers: the generic address vector.
 *
 * Entries live in fixed chunks that never move, so the data path can look
 * an address up without a lock while inserts happen elsewhere. FI_AV_TABLE
 * addresses are indices 0, 1, 2...; FI_AV_MAP addresses are index + 1 (0 is
 * never valid). Removed slots are not reused. */
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "fabric/api.h"
#include "fabric/util/domain.h"

namespace shunt::fabric::util {

inline constexpr std::size_t av_addr_max = 64;    ///< largest provider address
inline constexpr std::size_t av_chunk_bits = 8;
inline constexpr std::size_t av_chunk = std::size_t(1) << av_chunk_bits;
inline constexpr std::size_t av_max_chunks = 4096; ///< 1 Mi addresses

struct av_entry {
    std::atomic<bool> used{false};
    std::uint8_t addr[av_addr_max];
    void *prov = nullptr;                 ///< provider peer state (domain_hooks::av_insert)
    std::size_t index = 0;
};

struct av_obj {
    fid_av av;                            ///< first: the public object
    domain_obj *domain = nullptr;
    av_type type = FI_AV_TABLE;
    int rx_ctx_bits = 0;
    std::uint64_t rx_mask = ~0ULL;        ///< bits of fi_addr_t naming the address
    std::size_t addrlen = 0;              ///< bytes of a stored (binary) address
    /** The domain's addr_format is FI_ADDR_STR: inserts take an array of
     *  strings, lookup and straddr give text; entries are stored binary. */
    bool str = false;
    av_entry *chunks[av_max_chunks] = {};
    std::atomic<std::size_t> count{0};    ///< slots handed out
    std::mutex mu;                        ///< inserts and removes
    std::atomic<int> refs{0};             ///< endpoints bound
};

inline av_obj *to_av(fid_av *a) { return reinterpret_cast<av_obj *>(a); }

/** Generic av_open for ops_domain::av_open. */
int av_open(fid_domain *domain, av_attr *attr, fid_av **av, void *context);

/** The entry @p a names, or null (bad, removed, FI_ADDR_NOTAVAIL). Fast path. */
inline av_entry *av_get(av_obj *av, fi_addr_t a) noexcept
{
    a &= av->rx_mask;
    if (av->type == FI_AV_MAP) {
        if (a == 0) [[unlikely]]
            return nullptr;
        a -= 1;
    }
    if (a >= av->count.load(std::memory_order_acquire)) [[unlikely]]
        return nullptr;
    av_entry *e = &av->chunks[a >> av_chunk_bits][a & (av_chunk - 1)];
    return e->used.load(std::memory_order_acquire) ? e : nullptr;
}

/** The fi_addr_t of an entry. */
inline fi_addr_t av_addr_of(const av_obj *av, const av_entry *e) noexcept
{
    return av->type == FI_AV_MAP ? e->index + 1 : e->index;
}

/** Reverse lookup: the fi_addr_t holding address bytes @p addr, or
 *  FI_ADDR_NOTAVAIL (for FI_SOURCE on receive; linear, providers cache). */
fi_addr_t av_reverse(av_obj *av, const void *addr) noexcept;

} // namespace shunt::fabric::util
