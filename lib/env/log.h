/* Logging with a level per component.
 *
 * SHUNT_LOG_LEVEL sets levels: "info" for all, or "env:debug,vq:warning,info".
 * Messages go to stderr prefixed with "shunt <component> <level>:".
 * SHUNT_DEBUG() compiles to nothing in release builds (NDEBUG): it is the only
 * form allowed near a fast path, and only outside it. */
#pragma once

#include <cstdarg>
#include <string>

namespace shunt::env::log {

enum class level : int { none = 0, error = 1, warning = 2, notice = 3, info = 4, debug = 5 };

/** A component's logging handle; define one per component with SHUNT_LOG_COMPONENT. */
struct component {
    const char *name;
    level current;
    explicit component(const char *n) noexcept;
};

/** Set levels from a spec string (the SHUNT_LOG_LEVEL syntax).
 *  @return 0, or -FI_EINVAL for an unknown level name (nothing is changed). */
[[nodiscard]] int set_levels(const std::string &spec);
/** Parse one level name ("error", "warning", ..., or a digit 0-5).
 *  @return 0 and sets @p out; -FI_EINVAL otherwise. */
[[nodiscard]] int parse_level(const std::string &name, level &out);

[[gnu::format(printf, 3, 4), gnu::cold]] void emit(const component &c, level l, const char *fmt, ...) noexcept;

} // namespace shunt::env::log

/** Declare a logging component object named @p var with printable name @p name. */
#define SHUNT_LOG_COMPONENT(var, name) ::shunt::env::log::component var{name}

#define SHUNT_LOG(comp, lvl, ...)                                                      \
    do {                                                                               \
        if ((comp).current >= ::shunt::env::log::level::lvl)                           \
            ::shunt::env::log::emit((comp), ::shunt::env::log::level::lvl, __VA_ARGS__); \
    } while (0)

#ifdef NDEBUG
#define SHUNT_DEBUG(comp, ...) do { } while (0)
#else
#define SHUNT_DEBUG(comp, ...) SHUNT_LOG(comp, debug, __VA_ARGS__)
#endif
