/* Time-stamp counter: cheap cycle timestamps and their conversion to ns. */
#pragma once

#include <cstdint>
#include <x86intrin.h>

namespace shunt::env::tsc {

/** Read the TSC (not serialising: for intervals of many instructions). */
inline std::uint64_t now() noexcept { return __rdtsc(); }

/** Read the TSC after all earlier instructions have executed (rdtscp). */
inline std::uint64_t now_ordered() noexcept
{
    unsigned aux;
    return __rdtscp(&aux);
}

/** TSC frequency in Hz, calibrated once against CLOCK_MONOTONIC_RAW (about
 *  20 ms on the first call; thread safe). */
std::uint64_t hz() noexcept;

/** Convert a cycle count to nanoseconds. */
inline double to_ns(std::uint64_t cycles) noexcept
{
    return static_cast<double>(cycles) * 1e9 / static_cast<double>(hz());
}

/** Cycles in @p ns nanoseconds. */
inline std::uint64_t from_ns(std::uint64_t ns) noexcept
{
    return static_cast<std::uint64_t>(static_cast<double>(ns) * static_cast<double>(hz()) / 1e9);
}

} // namespace shunt::env::tsc
