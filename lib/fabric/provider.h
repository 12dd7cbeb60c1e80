/* The provider interface and registry.
 *
 * A provider implements the objects of this API for one kind of transport.
 * It describes itself with a `provider` record and is found in three ways:
 *  - built in: defined with SHUNT_FABRIC_PROVIDER in a library under
 *    providers/, which puts it on the generated built-in list (so that a
 *    static link keeps it) and registers it when its library is loaded;
 *  - registered: a record passed to register_provider() or to a static
 *    registrar object (SHUNT_REGISTER_PROVIDER);
 *  - external: a shared object in a directory of SHUNT_PROVIDER_PATH
 *    (colon separated; files named libshunt-<name>.so or any *.so) exporting
 *    `extern "C" const shunt::fabric::provider *shunt_provider_ini()`.
 *    A plugin that fails to load, lacks the symbol, returns null, or whose
 *    abi_version/size/name does not fit is logged and skipped, never fatal.
 * SHUNT_PROVIDER filters them with libfabric's FI_PROVIDER syntax: a comma
 * separated list of names to use ("shm,mlx5;rxm"), or "^" first to exclude
 * the listed names ("^shm"). Names compare without case. A stacked
 * provider "core;util" matches an entry "core;util" exactly, or an entry
 * "util" (every stack of that utility), as FI_PROVIDER does.
 *
 * Utility providers (stacked on a core provider) are in util_provider.h. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fabric/fabric.h"
#include "fabric/info.h"

namespace shunt::fabric {

/** ABI of the provider interface: a plugin built for another value is
 *  refused. Raised on any incompatible change of a struct or ops table. */
inline constexpr std::uint32_t SHUNT_PROVIDER_ABI = 1;

/** Name of the entry symbol of an external provider. */
inline constexpr const char *SHUNT_PROVIDER_ENTRY = "shunt_provider_ini";

/** A provider (libfabric struct fi_provider). */
struct provider {
    std::size_t size = sizeof(provider);         ///< checked: >= the fields read
    std::uint32_t abi_version = SHUNT_PROVIDER_ABI;
    const char *name = nullptr;                  ///< "shm"; no ';' (core providers)
    std::uint32_t version = 0;                   ///< provider's own version, FI_VERSION(major, minor)
    std::uint32_t fi_version = FI_API_VERSION;   ///< API version implemented
    /** Answer getinfo for this provider: a list of infos (allocated with
     *  allocinfo/dupinfo; the registry sets fabric_attr->prov_name,
     *  prov_version and api_version on them). Same contract as getinfo(). */
    int (*getinfo)(std::uint32_t version, const char *node, const char *service, std::uint64_t flags,
                   const info *hints, info **out) = nullptr;
    /** Open a fabric of this provider (attr->name chooses which). */
    int (*fabric)(fabric_attr *attr, fid_fabric **fabric, void *context) = nullptr;
    /** Called once when the registry is torn down (may be null). */
    void (*cleanup)() = nullptr;
    /** Other names the provider answers to, comma separated (may be null):
     *  SHUNT_PROVIDER, hints' prov_name and fabric_attr->prov_name select
     *  it by any of them; getinfo answers carry `name`. For a provider
     *  renamed with its users' settings kept working. Read only when `size`
     *  covers it. */
    const char *aliases = nullptr;
};

/** Register a provider. Setup only; the record must outlive the registry.
 *  @return 0; -FI_EINVAL null, missing name/getinfo/fabric, ';' in the
 *  name, wrong abi_version or size; -FI_EALREADY a provider of that name is
 *  registered (the first one stays). */
[[nodiscard]] int register_provider(const provider *prov);

/** Static registrar: registers at load time. */
struct provider_registrar {
    explicit provider_registrar(const provider *prov) noexcept;
};

/** Define and register a built-in provider record, as SHUNT_VQ_DRIVER does
 *  for drivers; use it once at global scope in the provider's library:
 *  SHUNT_FABRIC_PROVIDER(vq, .version = FI_VERSION(1, 0), .getinfo = ...,
 *  .fabric = ...). The arguments after the name initialise the remaining
 *  fields of `provider` by designator, in declaration order. The record,
 *  shunt_fabric_provider_<name>, is constant-initialised: the built-in list
 *  that providers/meson.build generates references it (so static links and
 *  --as-needed keep the provider) and registers it as built in; the static
 *  registrar registers it when the library is loaded some other way. */
#define SHUNT_FABRIC_PROVIDER(id, ...)                                                      \
    extern const ::shunt::fabric::provider shunt_fabric_provider_##id;                       \
    constinit const ::shunt::fabric::provider shunt_fabric_provider_##id{.name = #id,        \
                                                                        __VA_ARGS__};        \
    static const ::shunt::fabric::provider_registrar shunt_fabric_registrar_##id{            \
        &shunt_fabric_provider_##id}

#define SHUNT_PROV_CAT2(a, b) a##b
#define SHUNT_PROV_CAT(a, b) SHUNT_PROV_CAT2(a, b)
/** Register provider record @p prov (an lvalue) when the library loads. */
#define SHUNT_REGISTER_PROVIDER(prov) \
    static const ::shunt::fabric::provider_registrar SHUNT_PROV_CAT(shunt_prov_registrar_, __LINE__){&(prov)}

/** Where a registered provider came from and whether it is usable. */
struct provider_status {
    std::string name;
    std::string aliases;  ///< the record's aliases ("" if none)
    std::uint32_t version = 0;
    std::string origin;   ///< "builtin", "registrar", a plugin path, or "stacked"
    bool usable = false;  ///< false: rejected or filtered (see note)
    std::string note;     ///< why not usable, or "excluded by SHUNT_PROVIDER"
};

/** Every provider the registry knows, including rejected plugins, in
 *  search order (for shunt-info and tests). Loads plugins on first use. */
std::vector<provider_status> providers();

/** The usable provider named @p name (a core name or an alias), after
 *  SHUNT_PROVIDER filtering; null if none. */
const provider *find_provider(const char *name);

/** Reload: forget external plugins and filtering and rescan
 *  SHUNT_PROVIDER_PATH and SHUNT_PROVIDER (tests; not thread safe with
 *  concurrent getinfo). Built-in and registered providers stay. */
void rescan_providers();

/** Does @p name pass the filter @p spec (FI_PROVIDER syntax; empty = all)? */
bool provider_filter_match(const char *spec, const char *name);

} // namespace shunt::fabric
