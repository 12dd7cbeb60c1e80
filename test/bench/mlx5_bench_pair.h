// Two mlx5 model ports in this process with an RC QP pair (thread domain,
// single-threaded CQs), stepped by hand: the driver's posting and polling
// cost without a device thread competing for the CPU. For bench-mlx5 and
// mlx5-callgrind.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "model/model.h"
#include "vq/vq.h"

namespace shunt::bench {

namespace vq = shunt::vq;
namespace model = shunt::drv::mlx5::model;

struct mlx5_pair {
    struct side {
        vq::context *ctx = nullptr;
        vq::pd *pd = nullptr;
        vq::td *td = nullptr;
        vq::cq *cq = nullptr;
        vq::qp *qp = nullptr;
        vq::mr *mr = nullptr;
        void *buf = nullptr;
    } a, b;
    std::uint32_t recvs = 0; ///< receives posted at b, not yet consumed

    [[noreturn]] static void die(const char *what, int rc)
    {
        std::fprintf(stderr, "mlx5 bench: %s failed: %d\n", what, rc);
        std::exit(1);
    }
    static void check(int rc, const char *what)
    {
        if (rc)
            die(what, rc);
    }
    void open(side &s)
    {
        vq::device *d = vq::find_device("mlx5_model0");
        if (!d)
            die("find_device(mlx5_model0)", -1);
        check(vq::open_device(d, &s.ctx), "open_device");
        check(vq::alloc_pd(s.ctx, &s.pd), "alloc_pd");
        check(vq::alloc_td(s.ctx, &s.td), "alloc_td");
        vq::cq_init_attr ca;
        ca.cqe = 1024;
        ca.single_threaded = true;
        check(vq::create_cq(s.ctx, &ca, &s.cq), "create_cq");
        vq::qp_init_attr ia;
        ia.type = vq::qp_type::rc;
        ia.send_cq = ia.recv_cq = s.cq;
        ia.td = s.td;
        ia.cap.max_send_wr = 256;
        ia.cap.max_recv_wr = 512;
        ia.cap.max_inline_data = 64;
        check(vq::create_qp(s.pd, &ia, &s.qp), "create_qp");
        s.buf = std::aligned_alloc(4096, 1 << 16);
        std::memset(s.buf, 1, 1 << 16);
        check(vq::reg_mr(s.pd, s.buf, 1 << 16, vq::ACCESS_LOCAL_WRITE, &s.mr), "reg_mr");
    }
    static void connect(side &x, side &y)
    {
        vq::qp_attr at;
        at.state = vq::qp_state::init;
        check(vq::modify_qp(x.qp, &at, vq::QP_ATTR_STATE), "INIT");
        at.state = vq::qp_state::rtr;
        at.dest = y.ctx->addr;
        at.dest_qp_num = y.qp->qp_num;
        check(vq::modify_qp(x.qp, &at, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN), "RTR");
        at.state = vq::qp_state::rts;
        check(vq::modify_qp(x.qp, &at, vq::QP_ATTR_STATE), "RTS");
    }
    mlx5_pair()
    {
        setenv("SHUNT_MLX5_MODEL", "1", 1);
        model::options o;
        o.threaded = false;
        model::set_options(o);
        open(a);
        open(b);
        connect(a, b);
        connect(b, a);
        refill();
    }
    ~mlx5_pair()
    {
        for (side *s : {&a, &b}) {
            (void)vq::destroy_qp(s->qp);
            (void)vq::destroy_cq(s->cq);
            (void)vq::dereg_mr(s->mr);
            (void)vq::dealloc_td(s->td);
            (void)vq::dealloc_pd(s->pd);
            (void)vq::close_device(s->ctx);
            std::free(s->buf);
        }
        model::reset_options();
    }
    /** Keep receives posted at b. */
    void refill()
    {
        while (recvs < 500) {
            check(vq::post_recv(b.qp, 0, reinterpret_cast<std::uint64_t>(b.buf), 64, b.mr->lkey), "post_recv");
            recvs++;
        }
    }
    /** Run both devices, drain b's receives and @p keep_a completions at a. */
    void settle(bool drain_a = true)
    {
        while (model::step(a.ctx) + model::step(b.ctx)) {
        }
        vq::wc w[64];
        int n;
        while ((n = vq::poll_cq(b.cq, 64, w)) > 0)
            recvs -= static_cast<std::uint32_t>(n);
        if (drain_a)
            while (vq::poll_cq(a.cq, 64, w) > 0) {
            }
        refill();
    }
};

} // namespace shunt::bench
