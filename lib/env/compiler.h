/* Compiler helpers shared by every layer. */
#pragma once

#include <cstddef>

#define SHUNT_CACHE_LINE 64
#define SHUNT_COLD [[gnu::cold, gnu::noinline]]
#define SHUNT_ALWAYS_INLINE [[gnu::always_inline]] inline

/* SHUNT_TSAN: 1 in a ThreadSanitizer build, whichever compiler (gcc says
 * __SANITIZE_THREAD__, clang __has_feature(thread_sanitizer)). */
#if defined(__SANITIZE_THREAD__)
#define SHUNT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHUNT_TSAN 1
#endif
#endif
#ifndef SHUNT_TSAN
#define SHUNT_TSAN 0
#endif

namespace shunt {
inline constexpr std::size_t cache_line = SHUNT_CACHE_LINE;
} // namespace shunt
