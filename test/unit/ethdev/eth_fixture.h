// Helpers for the ethdev driver tests: endpoints on the cross-wired net_ring
// port pairs the driver creates in this process (SHUNT_ETHDEV_RING_PAIRS=4:
// net_ring_pair0a <-> net_ring_pair0b, net_ring_pair1a <-> net_ring_pair1b,
// pair2 for the tests of ports with two queue pairs, pair3 for loopback),
// QP set-up, bounded waits, a frame decoder independent of the driver, and an
// in-process forwarder with impairments between the two pairs.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <thread>
#include <vector>

#include "env/errors.h"
#include "frame_check.h"
#include "ethdev/ethdev_ext.h"
#include "vq/vq.h"

namespace shunt::test {

namespace vq = shunt::vq;
namespace eth = shunt::drv::ethdev;

inline constexpr const char *dev0a = "net_ring_pair0a";
inline constexpr const char *dev0b = "net_ring_pair0b";
inline constexpr const char *dev1a = "net_ring_pair1a";
inline constexpr const char *dev1b = "net_ring_pair1b";
inline constexpr const char *dev2a = "net_ring_pair2a"; ///< two queue pairs: MultiQueue tests
inline constexpr const char *dev2b = "net_ring_pair2b";

/** The device @p name (the ring pairs are created on first use). */
inline vq::device *device(const char *name)
{
    static bool once = [] {
        setenv("SHUNT_ETHDEV_RING_PAIRS", "4", 0);
        return true;
    }();
    (void)once;
    return vq::find_device(name);
}

inline std::uint64_t counter(const char *dev, unsigned c)
{
    eth::port_counters pc{};
    EXPECT_EQ(eth::query_counters(device(dev), &pc), 0);
    return pc.drv[c];
}

/** One context on a device: PD, a CQ, a registered buffer. */
struct ep {
    vq::context *ctx = nullptr;
    vq::pd *pd = nullptr;
    vq::cq *cq = nullptr;
    vq::mr *mr = nullptr;
    std::uint8_t *buf = nullptr;
    std::size_t size = 0;
    std::vector<vq::qp *> qps;
    std::vector<vq::ah *> ahs;
    std::deque<vq::wc> wcs;
    bool up = false;

    /** Opens the context and sets up the rest; a step that fails is a test
     *  failure and leaves the rest unset: check ok() before using it (a
     *  context or its memory can run out, as under hugepage exhaustion). */
    explicit ep(const char *dev, std::size_t bytes = 4u << 20, bool single_threaded = false)
    {
        vq::device *d = device(dev);
        if (!d) {
            ADD_FAILURE() << "no device " << dev;
            return;
        }
        if (int rc = vq::open_device(d, &ctx); rc != 0) {
            ctx = nullptr;
            ADD_FAILURE() << "open_device(" << dev << "): " << shunt::strerror(rc);
            return;
        }
        if (int rc = vq::alloc_pd(ctx, &pd); rc != 0) {
            pd = nullptr;
            ADD_FAILURE() << "alloc_pd on " << dev << ": " << shunt::strerror(rc);
            return;
        }
        vq::cq_init_attr ca;
        ca.cqe = 8192;
        ca.single_threaded = single_threaded;
        if (int rc = vq::create_cq(ctx, &ca, &cq); rc != 0) {
            cq = nullptr;
            ADD_FAILURE() << "create_cq on " << dev << ": " << shunt::strerror(rc);
            return;
        }
        size = bytes;
        buf = static_cast<std::uint8_t *>(std::aligned_alloc(64, (bytes + 63) & ~std::size_t{63}));
        if (!buf) {
            ADD_FAILURE() << "no memory for a " << bytes << "-byte buffer";
            return;
        }
        std::memset(buf, 0, bytes);
        if (int rc = vq::reg_mr(pd, buf, bytes,
                                vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ |
                                    vq::ACCESS_REMOTE_ATOMIC | vq::ACCESS_MW_BIND | vq::ACCESS_FLUSH_GLOBAL,
                                &mr);
            rc != 0) {
            mr = nullptr;
            ADD_FAILURE() << "reg_mr on " << dev << ": " << shunt::strerror(rc);
            return;
        }
        up = true;
    }
    /** Every step of the set-up succeeded. */
    bool ok() const { return up; }
    ~ep()
    {
        for (auto *q : qps)
            EXPECT_EQ(vq::destroy_qp(q), 0);
        for (auto *a : ahs)
            EXPECT_EQ(vq::destroy_ah(a), 0);
        if (mr) {
            EXPECT_EQ(vq::dereg_mr(mr), 0);
        }
        if (cq) {
            EXPECT_EQ(vq::destroy_cq(cq), 0);
        }
        if (pd) {
            EXPECT_EQ(vq::dealloc_pd(pd), 0);
        }
        if (ctx) {
            EXPECT_EQ(vq::close_device(ctx), 0);
        }
        std::free(buf);
    }
    ep(const ep &) = delete;
    ep &operator=(const ep &) = delete;

    vq::qp *qp(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap = {}, vq::td *td = nullptr)
    {
        vq::qp_init_attr ia;
        ia.type = t;
        ia.send_cq = ia.recv_cq = cq;
        ia.send_ops_flags = ops;
        if (cap.max_send_sge == 0)
            cap.max_send_sge = 4;
        if (cap.max_recv_sge == 0)
            cap.max_recv_sge = 4;
        ia.cap = cap;
        ia.td = td;
        vq::qp *q = nullptr;
        if (!up)
            return nullptr; // the set-up failed (reported)
        int rc = vq::create_qp(pd, &ia, &q);
        EXPECT_EQ(rc, 0) << "create_qp";
        if (rc == 0)
            qps.push_back(q);
        return q;
    }
    std::uint64_t at(std::size_t off) const { return reinterpret_cast<std::uint64_t>(buf + off); }
    int recv(vq::qp *q, std::uint64_t id, std::size_t off, std::uint32_t len)
    {
        return vq::post_recv(q, id, at(off), len, mr->lkey);
    }
    /** Poll once into wcs. */
    int pump()
    {
        vq::wc w[32];
        int k = vq::poll_cq(cq, 32, w);
        EXPECT_GE(k, 0);
        for (int i = 0; i < k; i++)
            wcs.push_back(w[i]);
        return k > 0 ? k : 0;
    }
};

/** Poll every endpoint until @p e has @p n completions (fails after @p ms). */
inline std::vector<vq::wc> wait_wcs(ep &e, std::size_t n, std::vector<ep *> others = {}, int ms = 10000)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (e.wcs.size() < n) {
        int got = e.pump();
        for (ep *o : others)
            got += o->pump();
        if (!got) {
            if (std::chrono::steady_clock::now() > end) {
                ADD_FAILURE() << "timed out after " << ms << " ms waiting for " << n << " completions, got "
                              << e.wcs.size();
                break;
            }
            std::this_thread::yield();
        }
    }
    std::size_t k = std::min(n, e.wcs.size());
    std::vector<vq::wc> out(e.wcs.begin(), e.wcs.begin() + static_cast<std::ptrdiff_t>(k));
    e.wcs.erase(e.wcs.begin(), e.wcs.begin() + static_cast<std::ptrdiff_t>(k));
    return out;
}

/** Poll for @p ms, return whatever arrived at @p e. */
inline std::vector<vq::wc> drain(ep &e, std::vector<ep *> others = {}, int ms = 100)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
        e.pump();
        for (ep *o : others)
            o->pump();
        std::this_thread::yield();
    }
    std::vector<vq::wc> out(e.wcs.begin(), e.wcs.end());
    e.wcs.clear();
    return out;
}

inline void to_state(vq::qp *q, vq::qp_state s, vq::qp_attr a = {}, unsigned mask = 0)
{
    a.state = s;
    ASSERT_EQ(vq::modify_qp(q, &a, mask | vq::QP_ATTR_STATE), 0) << "modify_qp to " << static_cast<int>(s);
}

/** INIT/RTR/RTS for a UD or RAW_PACKET QP. */
inline void ud_up(vq::qp *q, std::uint32_t qkey = 0x1111)
{
    ASSERT_NE(q, nullptr) << "no QP to bring up";
    vq::qp_attr a;
    a.qkey = qkey;
    to_state(q, vq::qp_state::init, a, q->type == vq::qp_type::ud ? vq::QP_ATTR_QKEY : 0);
    to_state(q, vq::qp_state::rtr);
    to_state(q, vq::qp_state::rts);
}

/** Connect RC/UC QP @p q to @p peer (on context @p pctx). @p extra: attributes for RTR/RTS. */
inline void rc_up(vq::qp *q, vq::qp *peer, vq::qp_attr extra = {}, unsigned extra_mask = 0)
{
    ASSERT_TRUE(q && peer) << "no QP to connect";
    vq::qp_attr a = extra;
    a.qp_access_flags = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;
    to_state(q, vq::qp_state::init, a, vq::QP_ATTR_ACCESS_FLAGS);
    a.dest = peer->ctx->addr;
    a.dest_qp_num = peer->qp_num;
    to_state(q, vq::qp_state::rtr, a, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN | (extra_mask & ~vq::QP_ATTR_STATE));
    to_state(q, vq::qp_state::rts, a, extra_mask & ~vq::QP_ATTR_STATE);
}

inline void fill(std::uint8_t *p, std::size_t n, std::uint32_t seed)
{
    std::mt19937 r(seed);
    for (std::size_t i = 0; i < n; i++)
        p[i] = static_cast<std::uint8_t>(r());
}

/** A UD QP on pair0a with an address handle for one on pair0b, both up. */
struct ud_pair {
    ep a{dev0a}, b{dev0b};
    vq::qp *qa = a.qp(vq::qp_type::ud, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_TSO, {256, 256, 4, 4, 256});
    vq::qp *qb = b.qp(vq::qp_type::ud, vq::OPS_SEND);
    vq::ah *ah = nullptr;
    ud_pair()
    {
        if (!ok())
            return;
        ud_up(qa);
        ud_up(qb);
        vq::ah_attr aa;
        aa.dest = b.ctx->addr;
        EXPECT_EQ(vq::create_ah(a.pd, &aa, &ah), 0);
        a.ahs.push_back(ah);
    }
    /** Both endpoints and both QPs were set up. */
    bool ok() const { return a.ok() && b.ok() && qa && qb; }
};

/* ---- An impairing forwarder between the two ring pairs ---- */

/** Forwards every frame between pair0b and pair1a (RAW_PACKET QPs, own
 *  thread), dropping / duplicating / holding back (reordering) / corrupting
 *  each with the given probabilities, from a fixed seed. An RC QP on pair0a
 *  talking to one on pair1b then crosses it in both directions. */
struct impair_fwd {
    double drop = 0, dup = 0, reorder = 0, corrupt = 0;
    std::uint32_t seed = 1;
    std::int64_t drop_at = -1;     ///< also drop exactly this frame (from 0) of pair0b -> pair1a
    std::atomic<bool> stop{false};
    std::atomic<bool> ready{false};
    std::atomic<bool> cut{false};  ///< drop everything (link cut)
    std::atomic<std::uint64_t> forwarded{0}, dropped{0};
    std::thread th;

    void start()
    {
        th = std::thread([this] { run(); });
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!ready && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_TRUE(ready) << "the forwarder did not start";
    }
    /** Whether the forwarder is running (start() waited for it). */
    bool ok() const { return ready; }
    ~impair_fwd()
    {
        stop = true;
        if (th.joinable())
            th.join();
    }
    void run()
    {
        ep a(dev0b, 1u << 22), b(dev1a, 1u << 22);
        if (!a.ok() || !b.ok())
            return; // reported; start() fails the test
        vq::qp *qa = a.qp(vq::qp_type::raw_packet, vq::OPS_SEND, {512, 512, 1, 1, 0});
        vq::qp *qb = b.qp(vq::qp_type::raw_packet, vq::OPS_SEND, {512, 512, 1, 1, 0});
        ud_up(qa);
        ud_up(qb);
        constexpr std::uint32_t slots = 256, slot = 2048;
        for (std::uint32_t i = 0; i < slots; i++) {
            ASSERT_EQ(a.recv(qa, i, i * slot, slot), 0);
            ASSERT_EQ(b.recv(qb, i, i * slot, slot), 0);
        }
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<double> u(0, 1);
        ready = true;
        struct held {
            bool valid = false;
            std::vector<std::uint8_t> f;
        } hold[2];
        std::int64_t nth0 = 0; // frames seen from pair0b
        auto send = [&](ep &e, vq::qp *q, const std::uint8_t *f, std::uint32_t n) {
            // Copy into the send half of the buffer (after the receive slots).
            static thread_local std::uint32_t next = 0;
            std::size_t off = (slots + (next++ % slots)) * slot;
            std::memcpy(e.buf + off, f, n);
            int rc;
            do {
                rc = vq::post_send(q, 0, e.buf + off, n, e.mr->lkey, 0);
                if (rc == -FI_EAGAIN)
                    e.pump();
            } while (rc == -FI_EAGAIN && !stop);
            forwarded++;
        };
        auto on_frame = [&](int dir, ep &from, vq::qp *fq, ep &to, vq::qp *tq, const vq::wc &w) {
            std::uint8_t *f = from.buf + w.wr_id * slot;
            std::uint32_t n = w.byte_len;
            if (w.status == vq::wc_status::success && !cut) {
                const bool picked = dir == 0 && nth0++ == drop_at;
                double x = picked ? 0 : u(rng);
                if (picked || x < drop) {
                    dropped++;
                } else {
                    if (u(rng) < corrupt && n > 60)
                        f[54 + rng() % (n - 58)] ^= 0x5a; // a byte after the BTH flipped
                    if (u(rng) < reorder && !hold[dir].valid) {
                        hold[dir].valid = true;
                        hold[dir].f.assign(f, f + n); // sent after the next frame
                    } else {
                        send(to, tq, f, n);
                        if (u(rng) < dup)
                            send(to, tq, f, n);
                        if (hold[dir].valid) {
                            send(to, tq, hold[dir].f.data(), static_cast<std::uint32_t>(hold[dir].f.size()));
                            hold[dir].valid = false;
                        }
                    }
                }
            }
            EXPECT_EQ(from.recv(fq, w.wr_id, w.wr_id * slot, slot), 0);
        };
        while (!stop) {
            vq::wc w[32];
            int k = vq::poll_cq(a.cq, 32, w);
            for (int i = 0; i < k; i++)
                if (w[i].opcode == vq::wc_opcode::recv)
                    on_frame(0, a, qa, b, qb, w[i]);
            int k2 = vq::poll_cq(b.cq, 32, w);
            for (int i = 0; i < k2; i++)
                if (w[i].opcode == vq::wc_opcode::recv)
                    on_frame(1, b, qb, a, qa, w[i]);
            if (k <= 0 && k2 <= 0) {
                // A frame held back for reordering goes out when the line is idle.
                for (int dir = 0; dir < 2; dir++)
                    if (hold[dir].valid) {
                        send(dir == 0 ? b : a, dir == 0 ? qb : qa, hold[dir].f.data(),
                             static_cast<std::uint32_t>(hold[dir].f.size()));
                        hold[dir].valid = false;
                    }
                std::this_thread::yield();
            }
        }
    }
};

} // namespace shunt::test
