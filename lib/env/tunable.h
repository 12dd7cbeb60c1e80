/* Tunables: every environment variable Shunt reads, declared once.
 *
 * Each layer declares its tunables with SHUNT_TUNABLE at namespace scope; the
 * table is what `shunt-info --env` prints. Environment variables are API:
 * renaming one is a breaking change. */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shunt::env {

enum class tunable_type { string, integer, boolean, list };

/** One declared tunable. */
struct tunable {
    const char *name;     ///< environment variable, e.g. "SHUNT_LCORES"
    tunable_type type;
    const char *defval;   ///< default, as text ("" for none)
    const char *help;     ///< one line
    const char *layer;    ///< "env", "vq", "fabric", a driver or provider name

    /** The raw value: the environment's if set, else the default. */
    std::string value() const;
    /** True if the environment sets it. */
    bool is_set() const;
    /** Integer value. @return 0 and sets @p out; -FI_EINVAL if not an integer. */
    [[nodiscard]] int as_int(std::int64_t &out) const;
    /** Boolean value (1/0, yes/no, true/false, on/off). @return 0 or -FI_EINVAL. */
    [[nodiscard]] int as_bool(bool &out) const;
};

/** Registers a tunable in the global table (static registrar). */
struct tunable_registrar {
    explicit tunable_registrar(const tunable *t) noexcept;
};

/** Every declared tunable, sorted by name. */
std::vector<const tunable *> tunables();
/** Look up by name. @return the tunable or nullptr. */
const tunable *find_tunable(const std::string &name);

} // namespace shunt::env

#define SHUNT_TUNABLE_CAT2(a, b) a##b
#define SHUNT_TUNABLE_CAT(a, b) SHUNT_TUNABLE_CAT2(a, b)
/** Declare tunable @p var (a const shunt::env::tunable) and register it. */
#define SHUNT_TUNABLE(var, name, type, defval, help, layer)                                  \
    const ::shunt::env::tunable var{name, ::shunt::env::tunable_type::type, defval, help, layer}; \
    static const ::shunt::env::tunable_registrar SHUNT_TUNABLE_CAT(var##_registrar_, __LINE__){&var}
