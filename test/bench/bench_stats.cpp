// Cost of the statistics written on the fast path (env/stats_fp.h): a
// counter add, a histogram record, the io hooks with a block and with
// telemetry off (nullptr), and what a reader pays for one block. Run with
// --benchmark_repetitions=N for median and spread; under callgrind
// (valgrind --tool=callgrind --toggle-collect='*BM_*') for instruction
// counts that do not depend on the machine's load.
#include "env/stats.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>

using namespace shunt::env;

namespace {

struct sink {
    stats::counter c;
    stats::histogram h;
};

} // namespace

static void BM_counter_add(benchmark::State &state)
{
    stats::counter c;
    for (auto _ : state) {
        c.add();
        benchmark::ClobberMemory();
    }
    benchmark::DoNotOptimize(c.get());
}
BENCHMARK(BM_counter_add);

// The baseline the counter is compared with: a plain integer in memory.
static void BM_plain_add(benchmark::State &state)
{
    std::uint64_t c = 0;
    for (auto _ : state) {
        c++;
        benchmark::DoNotOptimize(c);
        benchmark::ClobberMemory();
    }
}
BENCHMARK(BM_plain_add);

static void BM_shared_counter_add(benchmark::State &state)
{
    stats::shared_counter c;
    for (auto _ : state)
        c.add();
    benchmark::DoNotOptimize(c.get());
}
BENCHMARK(BM_shared_counter_add);

// Values spread over many buckets (latencies of 200 ns .. 40 us in cycles).
static void BM_histogram_record(benchmark::State &state)
{
    auto s = std::make_unique<sink>();
    std::uint64_t v = 600;
    for (auto _ : state) {
        s->h.record(v);
        v = (v * 2862933555777941757ull + 3037000493ull) >> 50 | 600; // cheap pseudo-random spread
        benchmark::ClobberMemory();
    }
    benchmark::DoNotOptimize(s->h.sum());
}
BENCHMARK(BM_histogram_record);

// One message's worth of hooks: tx, rx, depth, and a completion latency.
static inline void io_hooks_loop(benchmark::State &state, stats::io_stats *s)
{
    std::uint64_t depth = 0;
    for (auto _ : state) {
        const std::uint64_t t = stats::stamp(s);
        stats::on_tx(s, 64);
        stats::on_depth(s, ++depth & 63);
        stats::on_rx(s, 64);
        stats::on_complete(s, t);
        benchmark::ClobberMemory();
    }
}

// The hooks with a block.
static void BM_io_hooks(benchmark::State &state)
{
    stats::io_block io;
    if (io.open("bench.io") != 0 || !io.get()) {
        state.SkipWithError("no io block (SHUNT_TELEMETRY=0?)");
        return;
    }
    io_hooks_loop(state, io.get());
}
BENCHMARK(BM_io_hooks);

// The same with telemetry off: every hook sees nullptr.
static void BM_io_hooks_off(benchmark::State &state)
{
    stats::io_stats *s = nullptr;
    benchmark::DoNotOptimize(s); // the compiler may not assume nullptr
    io_hooks_loop(state, s);
}
BENCHMARK(BM_io_hooks_off);

// A reader: one io block read out through the registry (off the fast path).
static void BM_read_io_block(benchmark::State &state)
{
    stats::io_block io;
    if (io.open("bench.read") != 0 || !io.get()) {
        state.SkipWithError("no io block (SHUNT_TELEMETRY=0?)");
        return;
    }
    stats::block_snapshot b;
    for (auto _ : state) {
        int rc = stats::read("bench.read", b);
        benchmark::DoNotOptimize(rc);
    }
}
BENCHMARK(BM_read_io_block);

BENCHMARK_MAIN();
