// Pool fast path: env::pool get/put, single and bulk(32), next to raw
// rte_mempool calls to show what the out-of-line wrapper costs.
// Single-threaded, pinned to one CPU; the environment starts once (its
// options come from the SHUNT_* variables).
#include "env/env.h"
#include "env/mempool.h"

#include <benchmark/benchmark.h>
#include <rte_mempool.h>

#include <sched.h>

#include <cstdio>
#include <cstdlib>

using namespace shunt::env;

namespace {

constexpr unsigned bulk = 32;

pool &bench_pool(bool cached)
{
    static pool with_cache, without_cache;
    pool &p = cached ? with_cache : without_cache;
    if (!p.valid() && p.create(cached ? "bench_cached" : "bench_ring", 8191, 64, cached ? 256 : 0) != 0) {
        std::fprintf(stderr, "bench-pool: cannot create the pool\n");
        std::exit(1);
    }
    return p;
}

void BM_PoolGetPut(benchmark::State &st)
{
    pool &p = bench_pool(st.range(0) != 0);
    for (auto _ : st) {
        void *o;
        if (p.get(o) != 0)
            st.SkipWithError("pool empty");
        benchmark::DoNotOptimize(o);
        p.put(o);
    }
    st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_PoolGetPut)->ArgName("cache")->Arg(1)->Arg(0);

void BM_PoolGetPutBulk32(benchmark::State &st)
{
    pool &p = bench_pool(st.range(0) != 0);
    void *objs[bulk];
    for (auto _ : st) {
        if (p.get_bulk(objs, bulk) != 0)
            st.SkipWithError("pool empty");
        benchmark::DoNotOptimize(objs);
        p.put_bulk(objs, bulk);
    }
    st.SetItemsProcessed(st.iterations() * bulk);
}
BENCHMARK(BM_PoolGetPutBulk32)->ArgName("cache")->Arg(1)->Arg(0);

// The same through DPDK's inline calls, for the wrapper's overhead.
void BM_RteMempoolGetPut(benchmark::State &st)
{
    rte_mempool *mp = bench_pool(true).raw();
    for (auto _ : st) {
        void *o;
        if (rte_mempool_get(mp, &o) != 0)
            st.SkipWithError("pool empty");
        benchmark::DoNotOptimize(o);
        rte_mempool_put(mp, o);
    }
    st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_RteMempoolGetPut);

void BM_RteMempoolGetPutBulk32(benchmark::State &st)
{
    rte_mempool *mp = bench_pool(true).raw();
    void *objs[bulk];
    for (auto _ : st) {
        if (rte_mempool_get_bulk(mp, objs, bulk) != 0)
            st.SkipWithError("pool empty");
        benchmark::DoNotOptimize(objs);
        rte_mempool_put_bulk(mp, objs, bulk);
    }
    st.SetItemsProcessed(st.iterations() * bulk);
}
BENCHMARK(BM_RteMempoolGetPutBulk32);

} // namespace

int main(int argc, char **argv)
{
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 1;
    if (ensure_init() != 0) {
        std::fprintf(stderr, "bench-pool: env::init failed\n");
        return 1;
    }
    // Pin to the last usable CPU (the main lcore floats otherwise).
    const state &s = current();
    if (!s.cpus.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(s.cpus.back(), &set);
        sched_setaffinity(0, sizeof set, &set);
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
