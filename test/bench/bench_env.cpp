// lib/env microbenchmarks. One BENCHMARK per function; more are added here
// by other parts of lib/env (pools), each in its own section.
#include "env/tsc.h"

#include <benchmark/benchmark.h>

#include <cstdint>

using namespace shunt::env;

// --- TSC -------------------------------------------------------------------

static void BM_tsc_now(benchmark::State &state)
{
    for (auto _ : state) {
        std::uint64_t t = tsc::now();
        benchmark::DoNotOptimize(t);
    }
}
BENCHMARK(BM_tsc_now);

static void BM_tsc_now_ordered(benchmark::State &state)
{
    for (auto _ : state) {
        std::uint64_t t = tsc::now_ordered();
        benchmark::DoNotOptimize(t);
    }
}
BENCHMARK(BM_tsc_now_ordered);

// Cost of timing an interval: two reads and the subtraction.
static void BM_tsc_interval(benchmark::State &state)
{
    for (auto _ : state) {
        std::uint64_t a = tsc::now_ordered();
        std::uint64_t b = tsc::now_ordered();
        benchmark::DoNotOptimize(b - a);
    }
}
BENCHMARK(BM_tsc_interval);

BENCHMARK_MAIN();
