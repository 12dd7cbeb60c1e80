/* Utility providers: stacked on a core provider to add what it lacks
 * (reliable datagrams over connections, or over unreliable datagrams...),
 * named "core;util" like libfabric's "verbs;rxm".
 *
 * For every usable core provider, getinfo asks the utility which hints to
 * give the core (info_to_core), asks the core, and turns each core answer
 * into what the stack offers (info_to_util); the answers carry
 * fabric_attr->prov_name "core;util". fabric_open() of such a name calls
 * the utility's fabric() with the core provider record, and the utility
 * opens whatever core objects it needs through the ordinary API. */
#pragma once

#include <cstddef>
#include <cstdint>

#include "fabric/provider.h"

namespace shunt::fabric {

/** A utility provider. */
struct util_provider {
    std::size_t size = sizeof(util_provider);
    std::uint32_t abi_version = SHUNT_PROVIDER_ABI;
    const char *name = nullptr;  ///< "rxm"
    std::uint32_t version = 0;
    /** Endpoint types the utility offers on top of a core (FI_EP_* bit set:
     *  1u << FI_EP_RDM ...). getinfo skips it for hints asking other types. */
    std::uint32_t ep_types = 0;
    /** Hints to pass to the core for the user's @p hints (may be null).
     *  @return 0 and *core_hints (owned by the caller, freeinfo; null = no
     *  hints); -FI_ENODATA the utility cannot serve these hints. */
    int (*info_to_core)(std::uint32_t version, const info *hints, info **core_hints) = nullptr;
    /** What the stack offers on top of one core answer.
     *  @return 0 and *util_info (one or a list, caller owns); -FI_ENODATA
     *  nothing for this core info. */
    int (*info_to_util)(std::uint32_t version, const info *hints, const info *core_info, info **util_info) = nullptr;
    /** Open the stacked fabric over @p core. */
    int (*fabric)(const provider *core, fabric_attr *attr, fid_fabric **fabric, void *context) = nullptr;
    void (*cleanup)() = nullptr;
};

/** Register a utility provider (setup only). As register_provider(). */
[[nodiscard]] int register_util_provider(const util_provider *prov);

/** Static registrar for utility providers. */
struct util_provider_registrar {
    explicit util_provider_registrar(const util_provider *prov) noexcept;
};

#define SHUNT_REGISTER_UTIL_PROVIDER(prov) \
    static const ::shunt::fabric::util_provider_registrar SHUNT_PROV_CAT(shunt_util_registrar_, __LINE__){&(prov)}

/** Split "core;util" into its parts. @return true if @p name has exactly
 *  one ';' with non-empty parts (written to @p core / @p util). */
bool split_stacked_name(const char *name, char *core, std::size_t core_len, char *util, std::size_t util_len);

} // namespace shunt::fabric
