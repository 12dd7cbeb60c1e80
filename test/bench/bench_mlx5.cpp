// Google Benchmark: the mlx5 driver's cost to post one 8-byte inline RC send
// with its doorbell, and to poll one completion, over the software model
// (stepped outside the timed region). The model is a device, not a NIC: these
// are the driver's instructions, not a hardware latency.
#include <benchmark/benchmark.h>

#include "mlx5_bench_pair.h"

namespace {

using shunt::bench::mlx5_pair;
namespace vq = shunt::vq;

mlx5_pair &pair()
{
    static mlx5_pair p;
    return p;
}

/** post_send(WR_INLINE) of 8 bytes: ctrl + inline segment, doorbell record, BlueFlame copy. */
void BM_Mlx5PostSendInline8(benchmark::State &st)
{
    mlx5_pair &p = pair();
    const auto *msg = static_cast<const std::uint8_t *>(p.a.buf);
    std::uint64_t i = 0;
    for (auto _ : st) {
        unsigned flags = vq::WR_INLINE | ((++i & 63) == 0 ? vq::WR_SIGNALED : 0);
        int rc = vq::post_send(p.a.qp, i, msg, 8, 0, flags);
        benchmark::DoNotOptimize(rc);
        if ((i & 63) == 0) {
            st.PauseTiming();
            p.settle();
            st.ResumeTiming();
        }
    }
}
BENCHMARK(BM_Mlx5PostSendInline8);

/** The same request through the session calls (wr_start .. wr_complete). */
void BM_Mlx5SessionSendInline8(benchmark::State &st)
{
    mlx5_pair &p = pair();
    const auto *msg = static_cast<const std::uint8_t *>(p.a.buf);
    vq::qp *q = p.a.qp;
    std::uint64_t i = 0;
    for (auto _ : st) {
        vq::wr_start(q);
        q->wr_id = ++i;
        q->wr_flags = (i & 63) == 0 ? vq::WR_SIGNALED : 0;
        vq::wr_send(q);
        vq::wr_set_inline_data(q, msg, 8);
        int rc = vq::wr_complete(q);
        benchmark::DoNotOptimize(rc);
        if ((i & 63) == 0) {
            st.PauseTiming();
            p.settle();
            st.ResumeTiming();
        }
    }
}
BENCHMARK(BM_Mlx5SessionSendInline8);

/** poll_cq of one send completion (CQE ready: owner bit, WQE counter, wr_id). */
void BM_Mlx5PollOne(benchmark::State &st)
{
    mlx5_pair &p = pair();
    const auto *msg = static_cast<const std::uint8_t *>(p.a.buf);
    std::uint64_t i = 0;
    int ready = 0;
    for (auto _ : st) {
        if (ready == 0) {
            st.PauseTiming();
            p.settle();
            for (int k = 0; k < 64; k++)
                if (vq::post_send(p.a.qp, k, msg, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED) == 0)
                    ready++;
            p.settle(false);
            st.ResumeTiming();
        }
        vq::wc w;
        int n = vq::poll_cq(p.a.cq, 1, &w);
        benchmark::DoNotOptimize(w);
        ready -= n;
        i++;
    }
}
BENCHMARK(BM_Mlx5PollOne);

} // namespace

BENCHMARK_MAIN();
