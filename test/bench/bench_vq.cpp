// Google Benchmark: the vq posting and polling path on the shm driver, in one
// process (a loopback RC pair: the same code as between processes, without
// the cache-line transfer). Reports cycles and, where perf counters are
// available, instructions per operation.
#include <benchmark/benchmark.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "env/errors.h"
#include "env/tsc.h"
#include "vq/vq.h"

using namespace shunt;

namespace {

/** Counts user-space instructions of this thread (-1 when not permitted). */
struct instr_counter {
    int fd = -1;
    instr_counter()
    {
        perf_event_attr a{};
        a.type = PERF_TYPE_HARDWARE;
        a.size = sizeof a;
        a.config = PERF_COUNT_HW_INSTRUCTIONS;
        a.disabled = 1;
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        fd = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
    }
    ~instr_counter()
    {
        if (fd >= 0)
            close(fd);
    }
    void start()
    {
        if (fd >= 0) {
            ioctl(fd, PERF_EVENT_IOC_RESET, 0);
            ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
        }
    }
    long long stop()
    {
        long long v = -1;
        if (fd >= 0) {
            ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
            if (read(fd, &v, sizeof v) != sizeof v)
                v = -1;
        }
        return v;
    }
};

struct loopback {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::td *td = nullptr;
    vq::cq *cq_a = nullptr, *cq_b = nullptr;
    vq::qp *a = nullptr, *b = nullptr;
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(1 << 20);
    vq::mr *mr = nullptr;

    loopback()
    {
        if (vq::open_device(vq::find_device("shm0"), &ctx) || vq::alloc_pd(ctx, &pd) || vq::alloc_td(ctx, &td))
            std::abort();
        vq::cq_init_attr ca;
        ca.cqe = 4096;
        ca.single_threaded = true;
        if (vq::create_cq(ctx, &ca, &cq_a) || vq::create_cq(ctx, &ca, &cq_b))
            std::abort();
        vq::qp_init_attr ia;
        ia.send_cq = ia.recv_cq = cq_a;
        ia.td = td;
        ia.cap.max_send_wr = 1024;
        ia.cap.max_recv_wr = 1024;
        if (vq::create_qp(pd, &ia, &a))
            std::abort();
        ia.send_cq = ia.recv_cq = cq_b;
        if (vq::create_qp(pd, &ia, &b))
            std::abort();
        if (vq::reg_mr(pd, buf.data(), buf.size(), vq::ACCESS_LOCAL_WRITE, &mr))
            std::abort();
        connect(a, b);
        connect(b, a);
        for (int i = 0; i < 1024; i++)
            if (vq::post_recv(b, 0, addr(), 64, mr->lkey))
                std::abort();
    }
    ~loopback()
    {
        int bad = vq::dereg_mr(mr) | vq::destroy_qp(a) | vq::destroy_qp(b) | vq::destroy_cq(cq_a) |
                  vq::destroy_cq(cq_b) | vq::dealloc_td(td) | vq::dealloc_pd(pd) | vq::close_device(ctx);
        if (bad)
            std::fprintf(stderr, "teardown failed\n");
    }
    static void connect(vq::qp *q, vq::qp *peer)
    {
        vq::qp_attr at;
        vq::qp_addr pa = vq::get_qp_addr(peer);
        at.state = vq::qp_state::init;
        int rc = vq::modify_qp(q, &at, vq::QP_ATTR_STATE);
        at.state = vq::qp_state::rtr;
        at.dest = pa.dev;
        at.dest_qp_num = pa.qpn;
        rc |= vq::modify_qp(q, &at, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN);
        at.state = vq::qp_state::rts;
        rc |= vq::modify_qp(q, &at, vq::QP_ATTR_STATE);
        if (rc)
            std::abort();
    }
    std::uint64_t addr() { return reinterpret_cast<std::uint64_t>(buf.data()); }
};

void report(benchmark::State &st, std::uint64_t cycles, long long instr, std::int64_t ops)
{
    st.counters["cycles/op"] = static_cast<double>(cycles) / static_cast<double>(ops);
    if (instr >= 0)
        st.counters["instr/op"] = static_cast<double>(instr) / static_cast<double>(ops);
}

/** One 8-byte inline send, posted, received and polled, receive re-posted. */
void BM_PostPollInlineSend(benchmark::State &st)
{
    loopback lb;
    instr_counter ic;
    std::uint64_t payload = 0x1122334455667788ull;
    vq::wc w;
    std::int64_t ops = 0;
    ic.start();
    std::uint64_t t0 = env::tsc::now();
    for (auto _ : st) {
        if (vq::post_send(lb.a, 1, &payload, 8, 0, vq::WR_INLINE))
            std::abort();
        while (vq::poll_cq(lb.cq_b, 1, &w) == 0) {
        }
        benchmark::DoNotOptimize(w);
        if (vq::post_recv(lb.b, 0, lb.addr(), 64, lb.mr->lkey))
            std::abort();
        ops++;
    }
    std::uint64_t t1 = env::tsc::now();
    report(st, t1 - t0, ic.stop(), ops);
}
BENCHMARK(BM_PostPollInlineSend);

/** The session API for one inline send (wr_start / send / inline / complete). */
void BM_SessionInlineSend(benchmark::State &st)
{
    loopback lb;
    std::uint64_t payload = 1;
    vq::wc w;
    std::int64_t ops = 0;
    std::uint64_t t0 = env::tsc::now();
    for (auto _ : st) {
        vq::wr_start(lb.a);
        lb.a->wr_id = 1;
        lb.a->wr_flags = 0;
        vq::wr_send(lb.a);
        vq::wr_set_inline_data(lb.a, &payload, 8);
        if (vq::wr_complete(lb.a))
            std::abort();
        while (vq::poll_cq(lb.cq_b, 1, &w) == 0) {
        }
        if (vq::post_recv(lb.b, 0, lb.addr(), 64, lb.mr->lkey))
            std::abort();
        ops++;
    }
    report(st, env::tsc::now() - t0, -1, ops);
}
BENCHMARK(BM_SessionInlineSend);

/** A batch of 32 inline sends in one session, then 32 completions polled. */
void BM_Batch32InlineSend(benchmark::State &st)
{
    loopback lb;
    instr_counter ic;
    std::uint64_t payload = 2;
    vq::wc w[32];
    std::int64_t ops = 0;
    ic.start();
    std::uint64_t t0 = env::tsc::now();
    for (auto _ : st) {
        vq::wr_start(lb.a);
        for (int i = 0; i < 32; i++) {
            lb.a->wr_id = static_cast<std::uint64_t>(i);
            lb.a->wr_flags = 0;
            vq::wr_send(lb.a);
            vq::wr_set_inline_data(lb.a, &payload, 8);
        }
        if (vq::wr_complete(lb.a))
            std::abort();
        int got = 0;
        while (got < 32)
            got += vq::poll_cq(lb.cq_b, 32 - got, w);
        benchmark::DoNotOptimize(w);
        for (int i = 0; i < 32; i++)
            if (vq::post_recv(lb.b, 0, lb.addr(), 64, lb.mr->lkey))
                std::abort();
        ops += 32;
    }
    report(st, env::tsc::now() - t0, ic.stop(), ops);
    st.SetItemsProcessed(ops);
}
BENCHMARK(BM_Batch32InlineSend);

/** Create and destroy an RC QP as the fabric provider makes one for a new
 *  connection (1024 send entries, lent receives, the device's whole inline
 *  size, five send SGEs), taken to INIT: the setup cost a first message to
 *  a new peer waits for. */
void BM_CreateRcQp(benchmark::State &st)
{
    loopback lb;
    vq::device_attr da;
    if (vq::query_device(lb.ctx, &da)) {
        st.SkipWithError("query_device");
        return;
    }
    vq::qp_init_attr ia;
    ia.send_cq = ia.recv_cq = lb.cq_a;
    ia.td = lb.td;
    ia.send_ops_flags = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ;
    ia.cap.max_send_wr = 1024;
    ia.cap.max_recv_wr = 0;
    ia.cap.max_send_sge = 5;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = da.max_inline_data;
    ia.lend_recv = da.lend_qp_types & (1u << static_cast<unsigned>(vq::qp_type::rc));
    for (auto _ : st) {
        vq::qp *q = nullptr;
        if (vq::create_qp(lb.pd, &ia, &q))
            std::abort();
        vq::qp_attr at;
        at.state = vq::qp_state::init;
        if (vq::modify_qp(q, &at, vq::QP_ATTR_STATE) || vq::destroy_qp(q))
            std::abort();
    }
}
BENCHMARK(BM_CreateRcQp);

} // namespace

BENCHMARK_MAIN();
