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
    const char *choices = nullptr; ///< string tunables: the accepted values, '|' separated (null: any)
    /** Further check after the type's (null: none): 0 if @p value is
     *  acceptable, else -FI_EINVAL with @p accepted saying what is. */
    int (*validate)(const std::string &value, std::string &accepted) = nullptr;

    /** The raw value: the environment's if set, else the default. */
    std::string value() const;
    /** True if the environment sets it. */
    bool is_set() const;
    /** Integer value. @return 0 and sets @p out; -FI_EINVAL if not an integer. */
    [[nodiscard]] int as_int(std::int64_t &out) const;
    /** Boolean value (1/0, yes/no, true/false, on/off). @return 0 or -FI_EINVAL. */
    [[nodiscard]] int as_bool(bool &out) const;
    /** Is the value acceptable for the type (integer, boolean, a CPU list of
     *  this process, one of `choices`)? @return 0, or -FI_EINVAL (or
     *  -FI_ENODEV: a CPU outside the affinity) and sets @p accepted to what
     *  would be accepted. The default always is. */
    [[nodiscard]] int check(std::string &accepted) const;
};

/** Check every tunable the environment sets (tunable::check). @return 0, or
 *  the first failure's code with @p why naming the variable, its value and
 *  the accepted values. init() fails with it, so a bad SHUNT_* value makes
 *  the first use of any layer fail. */
[[nodiscard]] int check_tunables(std::string &why);

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
/** A tunable with a check of its own (tunable::validate) after the type's. */
#define SHUNT_TUNABLE_CHECKED(var, name, type, defval, help, layer, fn)                                   \
    const ::shunt::env::tunable var{name, ::shunt::env::tunable_type::type, defval, help, layer, nullptr, fn}; \
    static const ::shunt::env::tunable_registrar SHUNT_TUNABLE_CAT(var##_registrar_, __LINE__){&var}
/** A string tunable with a fixed set of values, e.g. "auto|required|off". */
#define SHUNT_TUNABLE_CHOICES(var, name, choices, defval, help, layer)                                 \
    const ::shunt::env::tunable var{name, ::shunt::env::tunable_type::string, defval, help, layer, choices}; \
    static const ::shunt::env::tunable_registrar SHUNT_TUNABLE_CAT(var##_registrar_, __LINE__){&var}
