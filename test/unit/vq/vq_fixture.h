// Helpers for the vq unit tests: one shm context with a PD, CQs and QPs,
// and RC/UC/UD pairs connected inside this process (loopback).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "env/errors.h"
#include "vq/vq.h"

namespace shunt::test {

namespace vq = shunt::vq;

/** Poll @p cq until @p n completions arrived (bounded: fails after @p ms). */
inline std::vector<vq::wc> poll_n(vq::cq *cq, std::size_t n, int ms = 5000)
{
    std::vector<vq::wc> got;
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    vq::wc w[16];
    while (got.size() < n) {
        int k = vq::poll_cq(cq, 16, w);
        EXPECT_GE(k, 0);
        if (k < 0)
            break;
        for (int i = 0; i < k; i++)
            got.push_back(w[i]);
        if (k == 0) {
            if (std::chrono::steady_clock::now() > end) {
                ADD_FAILURE() << "timed out waiting for " << n << " completions, got " << got.size();
                break;
            }
            std::this_thread::yield();
        }
    }
    return got;
}

/** Poll a few times and return whatever arrived (for "nothing happens" checks). */
inline std::vector<vq::wc> drain(vq::cq *cq, int rounds = 200)
{
    std::vector<vq::wc> got;
    vq::wc w[16];
    for (int r = 0; r < rounds; r++) {
        int k = vq::poll_cq(cq, 16, w);
        for (int i = 0; i < k; i++)
            got.push_back(w[i]);
        std::this_thread::yield();
    }
    return got;
}

/** An open shm context with one PD. */
struct vq_env {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;

    vq_env()
    {
        vq::device *d = vq::find_device("shm0");
        EXPECT_NE(d, nullptr);
        if (!d)
            return;
        EXPECT_EQ(vq::open_device(d, &ctx), 0);
        if (ctx) {
            EXPECT_EQ(vq::alloc_pd(ctx, &pd), 0);
        }
    }
    ~vq_env()
    {
        if (pd) {
            EXPECT_EQ(vq::dealloc_pd(pd), 0);
        }
        if (ctx) {
            EXPECT_EQ(vq::close_device(ctx), 0);
        }
    }
    vq::cq *cq(int n = 256)
    {
        vq::cq_init_attr a;
        a.cqe = n;
        vq::cq *c = nullptr;
        EXPECT_EQ(vq::create_cq(ctx, &a, &c), 0);
        return c;
    }
};

inline constexpr unsigned all_remote = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;

/** Move @p q to RTS, connected (RC/UC) to @p peer in context @p peer_addr,
 *  allowing the remote operations @p access as a responder (the default is
 *  none, as in verbs; ~0u: leave the access flags unset). */
inline int connect_qp(vq::qp *q, const vq::qp_addr &peer, unsigned access = all_remote)
{
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    a.qp_access_flags = access;
    int rc = vq::modify_qp(q, &a, vq::QP_ATTR_STATE | (access == ~0u ? 0 : vq::QP_ATTR_ACCESS_FLAGS));
    if (rc)
        return rc;
    a.state = vq::qp_state::rtr;
    a.dest = peer.dev;
    a.dest_qp_num = peer.qpn;
    unsigned mask = vq::QP_ATTR_STATE;
    if (q->type != vq::qp_type::ud)
        mask |= vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN;
    rc = vq::modify_qp(q, &a, mask);
    if (rc)
        return rc;
    a.state = vq::qp_state::rts;
    return vq::modify_qp(q, &a, vq::QP_ATTR_STATE);
}

/** Two QPs of one context connected to each other, with their own CQs. */
struct qp_pair {
    vq_env &e;
    vq::cq *cq_a = nullptr, *cq_b = nullptr;
    vq::qp *a = nullptr, *b = nullptr;

    qp_pair(vq_env &env, vq::qp_type t = vq::qp_type::rc, std::uint64_t ops = vq::OPS_ALL & ~vq::OPS_TSO,
            vq::qp_cap cap = {}, bool sig_all = false)
        : e(env)
    {
        cq_a = e.cq();
        cq_b = e.cq();
        vq::qp_init_attr ia;
        ia.type = t;
        ia.send_cq = ia.recv_cq = cq_a;
        ia.send_ops_flags = ops & vq::ops_allowed(t);
        ia.cap = cap;
        ia.sq_sig_all = sig_all;
        EXPECT_EQ(vq::create_qp(e.pd, &ia, &a), 0);
        ia.send_cq = ia.recv_cq = cq_b;
        EXPECT_EQ(vq::create_qp(e.pd, &ia, &b), 0);
        if (a && b) {
            EXPECT_EQ(connect_qp(a, vq::get_qp_addr(b)), 0);
            EXPECT_EQ(connect_qp(b, vq::get_qp_addr(a)), 0);
        }
    }
    ~qp_pair()
    {
        if (a) {
            EXPECT_EQ(vq::destroy_qp(a), 0);
        }
        if (b) {
            EXPECT_EQ(vq::destroy_qp(b), 0);
        }
        if (cq_a) {
            EXPECT_EQ(vq::destroy_cq(cq_a), 0);
        }
        if (cq_b) {
            EXPECT_EQ(vq::destroy_cq(cq_b), 0);
        }
    }
};

/** A registered buffer. */
struct reg_buf {
    std::vector<std::uint8_t> bytes;
    vq::mr *mr = nullptr;
    reg_buf(vq::pd *pd, std::size_t n, unsigned access = vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE |
                                                         vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC)
        : bytes(n)
    {
        EXPECT_EQ(vq::reg_mr(pd, bytes.data(), n, access, &mr), 0);
    }
    ~reg_buf()
    {
        if (mr) {
            EXPECT_EQ(vq::dereg_mr(mr), 0);
        }
    }
    std::uint64_t addr(std::size_t off = 0) { return reinterpret_cast<std::uint64_t>(bytes.data() + off); }
};

} // namespace shunt::test
