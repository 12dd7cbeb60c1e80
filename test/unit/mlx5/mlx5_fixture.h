// unit-mlx5: two model ports in this process, stepped by hand (no device
// thread), so a test sees the queues exactly as the driver left them and
// decides when the device runs.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "mlx5.h"
#include "model/model.h"
#include "vq/vq.h"

namespace shunt::test {

namespace vq = shunt::vq;
namespace mlx5 = shunt::drv::mlx5;
namespace model = shunt::drv::mlx5::model;

/** One modelled port: context, PD, a CQ per QP, registered memory. */
struct mport_ctx {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    std::vector<vq::cq *> cqs;
    std::vector<vq::qp *> qps;
    std::vector<vq::srq *> srqs;
    std::vector<vq::mr *> mrs;
    std::vector<vq::mw *> mws;
    std::vector<vq::ah *> ahs;
    std::vector<void *> mem;
    vq::td *td = nullptr;

    void open()
    {
        setenv("SHUNT_MLX5_MODEL", "1", 1);
        vq::device *d = vq::find_device("mlx5_model0");
        ASSERT_NE(d, nullptr) << "no mlx5_model0 device";
        ASSERT_EQ(vq::open_device(d, &ctx), 0);
        ASSERT_EQ(vq::alloc_pd(ctx, &pd), 0);
        ASSERT_EQ(vq::alloc_td(ctx, &td), 0);
    }
    void close()
    {
        for (auto *q : qps)
            EXPECT_EQ(vq::destroy_qp(q), 0);
        for (auto *s : srqs)
            EXPECT_EQ(vq::destroy_srq(s), 0);
        for (auto *c : cqs)
            EXPECT_EQ(vq::destroy_cq(c), 0);
        for (auto *a : ahs)
            EXPECT_EQ(vq::destroy_ah(a), 0);
        for (auto *w : mws)
            EXPECT_EQ(vq::dealloc_mw(w), 0);
        for (auto *m : mrs)
            EXPECT_EQ(vq::dereg_mr(m), 0);
        for (void *p : mem)
            std::free(p);
        if (td) {
            EXPECT_EQ(vq::dealloc_td(td), 0);
        }
        if (pd) {
            EXPECT_EQ(vq::dealloc_pd(pd), 0);
        }
        if (ctx) {
            EXPECT_EQ(vq::close_device(ctx), 0);
        }
        *this = mport_ctx{};
    }
    /** Registered, zeroed (or patterned) memory. */
    vq::mr *reg(std::size_t n, unsigned access = vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE |
                                                 vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC |
                                                 vq::ACCESS_MW_BIND,
                std::uint8_t fill = 0)
    {
        void *p = std::aligned_alloc(4096, (n + 4095) & ~std::size_t{4095});
        std::memset(p, fill, n);
        mem.push_back(p);
        vq::mr *m = nullptr;
        EXPECT_EQ(vq::reg_mr(pd, p, n, access, &m), 0);
        mrs.push_back(m);
        return m;
    }
    /** An address handle towards the port of context @p dest. */
    vq::ah *ah_to(const vq::context *dest)
    {
        vq::ah_attr aa;
        aa.dest = dest->addr;
        vq::ah *a = nullptr;
        EXPECT_EQ(vq::create_ah(pd, &aa, &a), 0);
        if (a)
            ahs.push_back(a);
        return a;
    }
    vq::cq *cq(int n = 64)
    {
        vq::cq_init_attr a;
        a.cqe = n;
        a.single_threaded = true;
        vq::cq *c = nullptr;
        EXPECT_EQ(vq::create_cq(ctx, &a, &c), 0);
        cqs.push_back(c);
        return c;
    }
    vq::qp *qp(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap = {}, vq::cq *c = nullptr, bool sig_all = false,
               vq::srq *srq = nullptr, bool use_td = true)
    {
        vq::qp_init_attr ia;
        ia.type = t;
        ia.send_cq = ia.recv_cq = c ? c : cq();
        ia.send_ops_flags = ops;
        ia.cap = cap;
        ia.sq_sig_all = sig_all;
        ia.srq = srq;
        ia.td = use_td ? td : nullptr;
        vq::qp *q = nullptr;
        EXPECT_EQ(vq::create_qp(pd, &ia, &q), 0);
        if (q)
            qps.push_back(q);
        return q;
    }
};

inline mlx5::mlx5_qp *mq(vq::qp *q) { return static_cast<mlx5::mlx5_qp *>(q); }
/** The BlueFlame half the last doorbell of @p q went to. */
inline std::uint8_t *last_bf_half(vq::qp *q)
{
    const mlx5::send_state &s = mq(q)->sq;
    return reinterpret_cast<std::uint8_t *>(reinterpret_cast<std::uintptr_t>(s.bf_cur) ^ s.bf_size);
}
inline mlx5::mlx5_cq *mc(vq::cq *c) { return static_cast<mlx5::mlx5_cq *>(c); }

/** The SQ bytes at basic block @p bb, @p n bytes, across the ring's end. */
inline std::vector<std::uint8_t> sq_bytes(vq::qp *q, std::uint32_t bb, std::size_t n)
{
    const mlx5::sq_view &v = mq(q)->sqv;
    std::vector<std::uint8_t> out(n);
    std::size_t qb = static_cast<std::size_t>(v.wqe_cnt) * 64;
    for (std::size_t i = 0; i < n; i++)
        out[i] = v.buf[(static_cast<std::size_t>(bb & (v.wqe_cnt - 1)) * 64 + i) % qb];
    return out;
}

inline std::string hex(const std::uint8_t *p, std::size_t n)
{
    static const char d[] = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < n; i++) {
        s += d[p[i] >> 4];
        s += d[p[i] & 15];
        if (i % 16 == 15)
            s += '\n';
        else if (i % 4 == 3)
            s += ' ';
    }
    return s;
}

#define EXPECT_BYTES_EQ(got, want, n)                                                                     \
    EXPECT_EQ(std::memcmp((got), (want), (n)), 0)                                                         \
        << "got:\n" << hex(reinterpret_cast<const std::uint8_t *>(got), (n)) << "\nwant:\n"              \
        << hex(reinterpret_cast<const std::uint8_t *>(want), (n))

/** Two stepped ports A and B. */
class Mlx5Model : public ::testing::Test {
protected:
    mport_ctx A, B;
    model::options opt;

    virtual void configure(model::options &o) { (void)o; }
    void SetUp() override
    {
        opt.threaded = false;
        opt.strict = true;
        configure(opt);
        model::set_options(opt);
        A.open();
        B.open();
    }
    void TearDown() override
    {
        A.close();
        B.close();
        model::reset_options();
    }
    /** Run both devices until neither has work. */
    void run()
    {
        for (int i = 0; i < 10000; i++)
            if (model::step(A.ctx) + model::step(B.ctx) == 0)
                return;
    }
    /** Run until @p pred, bounded in time (retransmit timers need real time). */
    template <class P>
    bool run_until(P pred, int ms = 5000)
    {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        while (!pred()) {
            run();
            if (std::chrono::steady_clock::now() > end)
                return pred();
        }
        return true;
    }
    /** INIT/RTR/RTS of @p a towards @p b (RC/UC) or with @p qkey (UD/RAW). */
    void connect(vq::qp *a, vq::qp *b, std::uint32_t qkey = 0x11, unsigned extra_mask = 0,
                 const vq::qp_attr *extra = nullptr)
    {
        vq::qp_attr at = extra ? *extra : vq::qp_attr{};
        at.state = vq::qp_state::init;
        unsigned m = vq::QP_ATTR_STATE;
        if (a->type == vq::qp_type::ud) {
            at.qkey = qkey;
            m |= vq::QP_ATTR_QKEY;
        } else if (a->type != vq::qp_type::raw_packet) {
            at.qp_access_flags = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;
            m |= vq::QP_ATTR_ACCESS_FLAGS;
        }
        ASSERT_EQ(vq::modify_qp(a, &at, m), 0);
        at.state = vq::qp_state::rtr;
        m = vq::QP_ATTR_STATE;
        if (b) {
            at.dest = b->ctx->addr;
            at.dest_qp_num = b->qp_num;
            m |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
        }
        ASSERT_EQ(vq::modify_qp(a, &at, m | (extra_mask & ~vq::QP_ATTR_ACCESS_FLAGS)), 0);
        at.state = vq::qp_state::rts;
        ASSERT_EQ(vq::modify_qp(a, &at, vq::QP_ATTR_STATE | (extra_mask & ~vq::QP_ATTR_ACCESS_FLAGS)), 0);
    }
    /** Poll exactly one completion (after running the devices). */
    vq::wc one(vq::cq *c, int ms = 5000)
    {
        vq::wc w{};
        int n = 0;
        run_until([&] { return (n = vq::poll_cq(c, 1, &w)) != 0; }, ms);
        EXPECT_EQ(n, 1) << "no completion";
        return w;
    }
    std::vector<vq::wc> drain(vq::cq *c)
    {
        run();
        std::vector<vq::wc> out;
        vq::wc w[16];
        int n;
        while ((n = vq::poll_cq(c, 16, w)) > 0)
            out.insert(out.end(), w, w + n);
        return out;
    }
    model::stats stats(mport_ctx &p)
    {
        model::stats s;
        EXPECT_EQ(model::get_stats(p.ctx, &s), 0);
        return s;
    }
};

} // namespace shunt::test
