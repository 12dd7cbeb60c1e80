/* Compiler helpers shared by every layer. */
#pragma once

#include <cstddef>

#define SHUNT_CACHE_LINE 64
#define SHUNT_COLD [[gnu::cold, gnu::noinline]]
#define SHUNT_ALWAYS_INLINE [[gnu::always_inline]] inline

namespace shunt {
inline constexpr std::size_t cache_line = SHUNT_CACHE_LINE;
} // namespace shunt
