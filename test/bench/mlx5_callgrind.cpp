// mlx5-callgrind: N rounds of {post one 8-byte inline RC send with its
// doorbell; run the model; poll its completion}, then N rounds of the same
// send through the session calls (wr_start, wr_send, wr_set_inline_data,
// wr_complete), with each measured call in its own function so that
// callgrind counts exactly them:
//
//   valgrind --tool=callgrind --collect-atstart=no
//     --toggle-collect="*mlx5_measure_*" build-cg/test/bench/mlx5-callgrind 10000
//
// (callgrind_annotate --inclusive=yes: each function's instructions / N).
#include <cstdio>
#include <cstdlib>

#include "mlx5_bench_pair.h"

namespace vq = shunt::vq;

[[gnu::noinline]] int mlx5_measure_post(vq::qp *q, std::uint64_t id, const void *msg)
{
    return vq::post_send(q, id, msg, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED);
}

[[gnu::noinline]] int mlx5_measure_poll(vq::cq *c, vq::wc *w)
{
    return vq::poll_cq(c, 1, w);
}

[[gnu::noinline]] int mlx5_measure_session(vq::qp *q, std::uint64_t id, const void *msg)
{
    vq::wr_start(q);
    q->wr_id = id;
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_inline_data(q, msg, 8);
    return vq::wr_complete(q);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 10000;
    // Under valgrind DPDK's EAL cannot reserve its hugepage address space;
    // the model needs none (SHUNT_HUGEPAGES=off, unless the caller chose).
    setenv("SHUNT_HUGEPAGES", "off", 0);
    shunt::bench::mlx5_pair p;
    long ok = 0;
    for (long i = 0; i < n; i++) {
        if (mlx5_measure_post(p.a.qp, static_cast<std::uint64_t>(i), p.a.buf) != 0)
            return 1;
        p.settle(false);
        vq::wc w;
        if (mlx5_measure_poll(p.a.cq, &w) == 1 && w.status == vq::wc_status::success &&
            w.wr_id == static_cast<std::uint64_t>(i))
            ok++;
    }
    for (long i = 0; i < n; i++) {
        if (mlx5_measure_session(p.a.qp, static_cast<std::uint64_t>(n + i), p.a.buf) != 0)
            return 1;
        p.settle(false);
        vq::wc w;
        if (vq::poll_cq(p.a.cq, 1, &w) == 1 && w.status == vq::wc_status::success &&
            w.wr_id == static_cast<std::uint64_t>(n + i))
            ok++;
    }
    std::printf("%ld of %ld sends completed in order\n", ok, 2 * n);
    return ok == 2 * n ? 0 : 1;
}
