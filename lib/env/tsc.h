/* Time-stamp counter: cheap cycle timestamps and their conversion to ns. */
#pragma once

#include <cstdint>
#include <string>
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

/** The identity of this host's TSC, for one-way latency from timestamps:
 *  the kernel's boot id (/proc/sys/kernel/random/boot_id), when the TSC is
 *  invariant (constant_tsc and nonstop_tsc in /proc/cpuinfo: one rate on
 *  every core, counting in every C-state). Two processes with the same
 *  identity read one clock. "" with @p why when the TSC is no such clock. */
std::string clock_id(std::string &why);

} // namespace shunt::env::tsc
