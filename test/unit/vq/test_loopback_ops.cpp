// Operations on loopback QPs of one context (the same code paths as between
// processes): atomics, windows, invalidation, flush, UD with TSO and
// checksums, SRQ, the start/next/end poll form, and locked posting.
#include <arpa/inet.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "vq_fixture.h"

namespace shunt::test {
namespace {

using vq::wc_status;

/** Post one WR built by @p f (signaled), return its completion. */
template <class F>
vq::wc one(qp_pair &p, F f)
{
    vq::wr_start(p.a);
    p.a->wr_id = 77;
    p.a->wr_flags = vq::WR_SIGNALED;
    f(p.a);
    EXPECT_EQ(vq::wr_complete(p.a), 0);
    auto w = poll_n(p.cq_a, 1);
    EXPECT_EQ(w.size(), 1u);
    return w.empty() ? vq::wc{} : w[0];
}

TEST(LoopbackOps, AtomicsReturnTheOldValue)
{
    vq_env e;
    qp_pair p(e);
    reg_buf target(e.pd, 64), result(e.pd, 64);
    std::uint64_t init = 40;
    std::memcpy(target.bytes.data() + 8, &init, 8);
    auto w = one(p, [&](vq::qp *q) {
        vq::wr_atomic_fetch_add(q, target.mr->rkey, target.addr(8), 2);
        vq::wr_set_sge(q, result.mr->lkey, result.addr(), 8);
    });
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(w.opcode, vq::wc_opcode::fetch_add);
    EXPECT_EQ(w.byte_len, 8u);
    std::uint64_t got, now;
    std::memcpy(&got, result.bytes.data(), 8);
    std::memcpy(&now, target.bytes.data() + 8, 8);
    EXPECT_EQ(got, 40u);
    EXPECT_EQ(now, 42u);
    w = one(p, [&](vq::qp *q) {
        vq::wr_atomic_cmp_swp(q, target.mr->rkey, target.addr(8), 41, 100); // no match
        vq::wr_set_sge(q, result.mr->lkey, result.addr(), 8);
    });
    EXPECT_EQ(w.opcode, vq::wc_opcode::comp_swap);
    std::memcpy(&now, target.bytes.data() + 8, 8);
    EXPECT_EQ(now, 42u);
    w = one(p, [&](vq::qp *q) {
        vq::wr_atomic_cmp_swp(q, target.mr->rkey, target.addr(8), 42, 100);
        vq::wr_set_sge(q, result.mr->lkey, result.addr(), 8);
    });
    std::memcpy(&got, result.bytes.data(), 8);
    std::memcpy(&now, target.bytes.data() + 8, 8);
    EXPECT_EQ(got, 42u);
    EXPECT_EQ(now, 100u);
}

TEST(LoopbackOps, AtomicsNeedRemoteAtomicAccess)
{
    vq_env e;
    qp_pair p(e);
    reg_buf target(e.pd, 64, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE);
    auto w = one(p, [&](vq::qp *q) { vq::wr_atomic_fetch_add(q, target.mr->rkey, target.addr(), 1); });
    EXPECT_EQ(w.status, wc_status::rem_access_err);
    EXPECT_EQ(target.bytes[0], 0);
}

TEST(LoopbackOps, WriteNeedsRemoteWriteAndReadNeedsRemoteRead)
{
    vq_env e;
    qp_pair p(e);
    reg_buf ro(e.pd, 64, vq::ACCESS_REMOTE_READ), src(e.pd, 64);
    std::memset(src.bytes.data(), 9, 64);
    auto w = one(p, [&](vq::qp *q) {
        vq::wr_rdma_write(q, ro.mr->rkey, ro.addr());
        vq::wr_set_sge(q, src.mr->lkey, src.addr(), 16);
    });
    EXPECT_EQ(w.status, wc_status::rem_access_err);
    EXPECT_EQ(ro.bytes[0], 0);
    qp_pair p2(e);
    reg_buf wo(e.pd, 64, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE);
    w = one(p2, [&](vq::qp *q) {
        vq::wr_rdma_read(q, wo.mr->rkey, wo.addr());
        vq::wr_set_sge(q, src.mr->lkey, src.addr(), 16);
    });
    EXPECT_EQ(w.status, wc_status::rem_access_err);
    EXPECT_EQ(src.bytes[0], 9);
}

TEST(LoopbackOps, DeregisteredRegionIsNoLongerReachable)
{
    vq_env e;
    qp_pair p(e);
    auto *t = new reg_buf(e.pd, 64);
    std::uint32_t rkey = t->mr->rkey;
    std::uint64_t addr = t->addr();
    ASSERT_EQ(vq::dereg_mr(t->mr), 0);
    t->mr = nullptr;
    std::uint64_t v = 5;
    auto w = one(p, [&](vq::qp *q) {
        vq::wr_rdma_write(q, rkey, addr);
        vq::wr_set_inline_data(q, &v, 8);
    });
    EXPECT_EQ(w.status, wc_status::rem_access_err);
    EXPECT_EQ(t->bytes[0], 0);
    delete t;
}

TEST(LoopbackOps, BindWindowThenRdmaThroughItThenInvalidate)
{
    vq_env e;
    qp_pair p(e);
    reg_buf region(e.pd, 4096, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_MW_BIND); // no remote access of its own
    vq::mw *mw = nullptr;
    ASSERT_EQ(vq::alloc_mw(e.pd, vq::mw_type::type2, &mw), 0);
    std::uint32_t key = vq::inc_rkey(mw->rkey);
    vq::mw_bind_info bi{region.mr, region.addr(1024), 256, vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ};
    auto w = one(p, [&](vq::qp *q) { vq::wr_bind_mw(q, mw, key, &bi); });
    ASSERT_EQ(w.status, wc_status::success);
    EXPECT_EQ(w.opcode, vq::wc_opcode::bind_mw);
    EXPECT_EQ(mw->rkey, key);
    EXPECT_EQ(vq::dereg_mr(region.mr), -FI_EBUSY) << "a window is bound to it";
    std::uint64_t v = 0xfeed;
    w = one(p, [&](vq::qp *q) {
        vq::wr_rdma_write(q, key, region.addr(1024 + 8));
        vq::wr_set_inline_data(q, &v, 8);
    });
    EXPECT_EQ(w.status, wc_status::success);
    std::uint64_t got;
    std::memcpy(&got, region.bytes.data() + 1032, 8);
    EXPECT_EQ(got, 0xfeedu);
    // Outside the window (but inside the region): refused.
    qp_pair p2(e);
    w = one(p2, [&](vq::qp *q) {
        vq::wr_rdma_write(q, key, region.addr(1024 + 256 - 4));
        vq::wr_set_inline_data(q, &v, 8);
    });
    EXPECT_EQ(w.status, wc_status::rem_access_err);
    // Invalidate, then the key is dead.
    qp_pair p3(e);
    w = one(p3, [&](vq::qp *q) { vq::wr_local_inv(q, key); });
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(w.opcode, vq::wc_opcode::local_inv);
    w = one(p3, [&](vq::qp *q) {
        vq::wr_rdma_write(q, key, region.addr(1024));
        vq::wr_set_inline_data(q, &v, 8);
    });
    EXPECT_EQ(w.status, wc_status::rem_access_err);
    EXPECT_EQ(vq::dealloc_mw(mw), 0);
}

TEST(LoopbackOps, BindOutsideTheRegionOrWithoutMwBindFails)
{
    vq_env e;
    reg_buf region(e.pd, 4096, vq::ACCESS_LOCAL_WRITE);
    vq::mw *mw = nullptr;
    ASSERT_EQ(vq::alloc_mw(e.pd, vq::mw_type::type2, &mw), 0);
    {
        qp_pair p(e);
        vq::mw_bind_info bi{region.mr, region.addr(), 64, vq::ACCESS_REMOTE_READ};
        auto w = one(p, [&](vq::qp *q) { vq::wr_bind_mw(q, mw, vq::inc_rkey(mw->rkey), &bi); });
        EXPECT_EQ(w.status, wc_status::mw_bind_err) << "region lacks ACCESS_MW_BIND";
    }
    reg_buf r2(e.pd, 4096, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_MW_BIND);
    {
        qp_pair p(e);
        vq::mw_bind_info bi{r2.mr, r2.addr(4000), 200, vq::ACCESS_REMOTE_READ};
        auto w = one(p, [&](vq::qp *q) { vq::wr_bind_mw(q, mw, vq::inc_rkey(mw->rkey), &bi); });
        EXPECT_EQ(w.status, wc_status::mw_bind_err) << "window past the region's end";
    }
    EXPECT_EQ(vq::dealloc_mw(mw), 0);
}

TEST(LoopbackOps, SendWithInvalidateKillsTheKeyBeforeTheCompletion)
{
    vq_env e;
    qp_pair p(e);
    reg_buf rx(e.pd, 64), victim(e.pd, 64);
    ASSERT_EQ(vq::post_recv(p.b, 1, rx.addr(), 64, rx.mr->lkey), 0);
    std::uint64_t v = 1;
    auto w = one(p, [&](vq::qp *q) {
        vq::wr_send_inv(q, victim.mr->rkey);
        vq::wr_set_inline_data(q, &v, 8);
    });
    EXPECT_EQ(w.status, wc_status::success);
    auto r = poll_n(p.cq_b, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, wc_status::success);
    EXPECT_EQ(r[0].wc_flags & vq::WC_WITH_INV, vq::WC_WITH_INV);
    EXPECT_EQ(r[0].invalidated_rkey, victim.mr->rkey);
    qp_pair p2(e);
    w = one(p2, [&](vq::qp *q) {
        vq::wr_rdma_write(q, victim.mr->rkey, victim.addr());
        vq::wr_set_inline_data(q, &v, 8);
    });
    EXPECT_EQ(w.status, wc_status::rem_access_err);
}

TEST(LoopbackOps, SendWithInvalidateOfAnUnknownKeyFailsTheReceive)
{
    vq_env e;
    qp_pair p(e);
    reg_buf rx(e.pd, 64);
    ASSERT_EQ(vq::post_recv(p.b, 1, rx.addr(), 64, rx.mr->lkey), 0);
    std::uint64_t v = 1;
    one(p, [&](vq::qp *q) {
        vq::wr_send_inv(q, 0xabcd00);
        vq::wr_set_inline_data(q, &v, 8);
    });
    auto r = poll_n(p.cq_b, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, wc_status::rem_inv_req_err);
    EXPECT_EQ(vq::get_qp_state(p.b), vq::qp_state::err);
}

TEST(LoopbackOps, FlushChecksKeyAndFlushAccess)
{
    vq_env e;
    qp_pair p(e);
    reg_buf fl(e.pd, 4096, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE | vq::ACCESS_FLUSH_GLOBAL);
    std::uint64_t v = 3;
    vq::wr_start(p.a);
    p.a->wr_id = 1;
    p.a->wr_flags = 0;
    vq::wr_rdma_write(p.a, fl.mr->rkey, fl.addr(16));
    vq::wr_set_inline_data(p.a, &v, 8);
    p.a->wr_id = 2;
    p.a->wr_flags = vq::WR_SIGNALED;
    vq::wr_flush(p.a, fl.mr->rkey, fl.addr(), 64, vq::FLUSH_GLOBAL, vq::FLUSH_RANGE);
    ASSERT_EQ(vq::wr_complete(p.a), 0);
    auto w = poll_n(p.cq_a, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 2u);
    EXPECT_EQ(w[0].status, wc_status::success);
    EXPECT_EQ(w[0].opcode, vq::wc_opcode::flush);
    std::uint64_t got;
    std::memcpy(&got, fl.bytes.data() + 16, 8);
    EXPECT_EQ(got, 3u) << "the write before the flush is visible when the flush completes";
    auto w2 = one(p, [&](vq::qp *q) { vq::wr_flush(q, fl.mr->rkey, 0, 0, vq::FLUSH_GLOBAL, vq::FLUSH_MR); });
    EXPECT_EQ(w2.status, wc_status::success);
    auto w3 = one(p, [&](vq::qp *q) { vq::wr_flush(q, fl.mr->rkey, fl.addr(), 64, vq::FLUSH_PERSISTENT, vq::FLUSH_RANGE); });
    EXPECT_EQ(w3.status, wc_status::rem_access_err) << "no ACCESS_FLUSH_PERSISTENT";
}

TEST(LoopbackOps, ReadAndImmediateOnUc)
{
    vq_env e;
    qp_pair p(e, vq::qp_type::uc, vq::ops_allowed(vq::qp_type::uc));
    reg_buf rx(e.pd, 64), tgt(e.pd, 64);
    ASSERT_EQ(vq::post_recv(p.b, 3, rx.addr(), 64, rx.mr->lkey), 0);
    std::uint64_t v = 0x55;
    auto w = one(p, [&](vq::qp *q) {
        vq::wr_rdma_write_imm(q, tgt.mr->rkey, tgt.addr(), htonl(7));
        vq::wr_set_inline_data(q, &v, 8);
    });
    EXPECT_EQ(w.status, wc_status::success);
    auto r = poll_n(p.cq_b, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].opcode, vq::wc_opcode::recv_rdma_with_imm);
    EXPECT_EQ(ntohl(r[0].imm_data), 7u);
    EXPECT_EQ(tgt.bytes[0], 0x55);
    // UC: a bad rkey is dropped silently by the responder.
    w = one(p, [&](vq::qp *q) {
        vq::wr_rdma_write(q, 0x999900, tgt.addr());
        vq::wr_set_inline_data(q, &v, 8);
    });
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(vq::get_qp_state(p.a), vq::qp_state::rts);
}

TEST(LoopbackOps, SrqFeedsSeveralQps)
{
    vq_env e;
    vq::cq *c = e.cq();
    vq::srq *s = nullptr;
    vq::srq_init_attr sa;
    sa.max_wr = 8;
    sa.max_sge = 2;
    ASSERT_EQ(vq::create_srq(e.pd, &sa, &s), 0);
    vq::qp_init_attr ia;
    ia.send_cq = ia.recv_cq = c;
    ia.srq = s;
    vq::qp *r1 = nullptr, *r2 = nullptr, *t1 = nullptr, *t2 = nullptr;
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &r1), 0);
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &r2), 0);
    ia.srq = nullptr;
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &t1), 0);
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &t2), 0);
    ASSERT_EQ(connect_qp(r1, vq::get_qp_addr(t1)), 0);
    ASSERT_EQ(connect_qp(t1, vq::get_qp_addr(r1)), 0);
    ASSERT_EQ(connect_qp(r2, vq::get_qp_addr(t2)), 0);
    ASSERT_EQ(connect_qp(t2, vq::get_qp_addr(r2)), 0);
    EXPECT_EQ(vq::post_recv(r1, 1, 0, 0, 0), -FI_EINVAL) << "QP with an SRQ takes no receives";
    reg_buf rx(e.pd, 1024);
    for (int i = 0; i < 4; i++) {
        vq::sge sg[2] = {{rx.addr(i * 100), 4, rx.mr->lkey}, {rx.addr(i * 100 + 50), 40, rx.mr->lkey}};
        ASSERT_EQ(vq::post_srq_recv(s, 10 + i, sg, 2), 0);
    }
    vq::sge three[3] = {};
    EXPECT_EQ(vq::post_srq_recv(s, 1, three, 3), -FI_E2BIG);
    const char m1[] = "from-t1-abcdefgh", m2[] = "from-t2-ABCDEFGH";
    ASSERT_EQ(vq::post_send(t1, 1, m1, sizeof m1, 0, vq::WR_INLINE), 0);
    ASSERT_EQ(vq::post_send(t2, 2, m2, sizeof m2, 0, vq::WR_INLINE), 0);
    auto w = poll_n(c, 2);
    ASSERT_EQ(w.size(), 2u);
    bool seen1 = false, seen2 = false;
    for (auto &x : w) {
        ASSERT_EQ(x.status, wc_status::success);
        ASSERT_EQ(x.byte_len, sizeof m1);
        std::size_t i = x.wr_id - 10;
        char got[sizeof m1];
        std::memcpy(got, rx.bytes.data() + i * 100, 4);
        std::memcpy(got + 4, rx.bytes.data() + i * 100 + 50, sizeof m1 - 4);
        if (x.qp_num == r1->qp_num) {
            EXPECT_EQ(x.src_qp, t1->qp_num);
            EXPECT_STREQ(got, m1);
            seen1 = true;
        } else {
            EXPECT_EQ(x.qp_num, r2->qp_num);
            EXPECT_STREQ(got, m2);
            seen2 = true;
        }
    }
    EXPECT_TRUE(seen1 && seen2);
    EXPECT_EQ(vq::destroy_srq(s), -FI_EBUSY);
    for (auto *q : {r1, r2, t1, t2})
        EXPECT_EQ(vq::destroy_qp(q), 0);
    EXPECT_EQ(vq::destroy_srq(s), 0);
    EXPECT_EQ(vq::destroy_cq(c), 0);
}

TEST(LoopbackOps, StartNextEndPollForm)
{
    vq_env e;
    qp_pair p(e);
    reg_buf rx(e.pd, 1024);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(vq::post_recv(p.b, 100 + i, rx.addr(i * 64), 64, rx.mr->lkey), 0);
    for (int i = 0; i < 3; i++) {
        std::uint32_t v = static_cast<std::uint32_t>(i);
        vq::wr_start(p.a);
        p.a->wr_id = static_cast<std::uint64_t>(i);
        p.a->wr_flags = 0;
        vq::wr_send_imm(p.a, 500 + v);
        vq::wr_set_inline_data(p.a, &v, 4);
        ASSERT_EQ(vq::wr_complete(p.a), 0);
    }
    int rc = -FI_EAGAIN;
    for (int k = 0; k < 1000 && rc == -FI_EAGAIN; k++)
        rc = vq::start_poll(p.cq_b);
    ASSERT_EQ(rc, 0);
    int n = 0;
    do {
        EXPECT_EQ(p.cq_b->wr_id, 100u + n);
        EXPECT_EQ(p.cq_b->status, wc_status::success);
        EXPECT_EQ(vq::read_opcode(p.cq_b), vq::wc_opcode::recv);
        EXPECT_EQ(vq::read_byte_len(p.cq_b), 4u);
        EXPECT_EQ(vq::read_imm_data(p.cq_b), 500u + n);
        EXPECT_EQ(vq::read_wc_flags(p.cq_b) & vq::WC_WITH_IMM, vq::WC_WITH_IMM);
        EXPECT_EQ(vq::read_qp_num(p.cq_b), p.b->qp_num);
        EXPECT_EQ(vq::read_src_qp(p.cq_b), p.a->qp_num);
        EXPECT_EQ(vq::read_vendor_err(p.cq_b), 0u);
        EXPECT_EQ(vq::read_invalidated_rkey(p.cq_b), 0u);
        n++;
    } while (vq::next_poll(p.cq_b) == 0);
    vq::end_poll(p.cq_b);
    EXPECT_EQ(n, 3);
    vq::wc w;
    EXPECT_EQ(vq::poll_cq(p.cq_b, 1, &w), 0) << "every completion was consumed";
}

TEST(LoopbackOps, ConcurrentPostersOnALockedQp)
{
    vq_env e;
    qp_pair p(e, vq::qp_type::rc, vq::OPS_SEND, vq::qp_cap{1024, 4096, 1, 1, 16});
    reg_buf rx(e.pd, 8 * 4096);
    const int per = 1000;
    for (int i = 0; i < 2 * per; i++)
        ASSERT_EQ(vq::post_recv(p.b, i, rx.addr(8 * i), 8, rx.mr->lkey), 0);
    std::atomic<int> failures{0};
    auto poster = [&](std::uint64_t tag) {
        for (int i = 0; i < per; i++) {
            std::uint64_t v = tag << 32 | static_cast<std::uint64_t>(i);
            int rc;
            while ((rc = vq::post_send(p.a, v, &v, 8, 0, vq::WR_INLINE)) == -FI_EAGAIN)
                std::this_thread::yield();
            if (rc)
                failures++;
        }
    };
    std::thread t1(poster, 1), t2(poster, 2);
    std::vector<vq::wc> got;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    vq::wc w[64];
    while (got.size() < 2u * per && std::chrono::steady_clock::now() < end) {
        int k = vq::poll_cq(p.cq_b, 64, w);
        for (int i = 0; i < k; i++)
            got.push_back(w[i]);
        (void)vq::poll_cq(p.cq_a, 64, w);
        if (k == 0)
            std::this_thread::yield();
    }
    t1.join();
    t2.join();
    EXPECT_EQ(failures.load(), 0);
    ASSERT_EQ(got.size(), 2u * per);
    // Each poster's messages arrive whole and in its order.
    std::uint64_t next[3] = {0, 0, 0};
    for (auto &x : got) {
        ASSERT_EQ(x.status, wc_status::success);
        std::uint64_t v;
        std::memcpy(&v, rx.bytes.data() + 8 * x.wr_id, 8);
        std::uint64_t tag = v >> 32;
        ASSERT_TRUE(tag == 1 || tag == 2);
        EXPECT_EQ(v & 0xffffffff, next[tag]++);
    }
}

/* ---- UD ---- */

std::uint16_t csum16(const std::uint8_t *p, std::size_t n, std::uint32_t s = 0)
{
    for (; n > 1; p += 2, n -= 2)
        s += (p[0] << 8) | p[1];
    if (n)
        s += p[0] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return static_cast<std::uint16_t>(s);
}

/** An Ethernet + IPv4 + TCP header template (checksums zero). */
std::vector<std::uint8_t> tcp_header(std::uint32_t seq)
{
    std::vector<std::uint8_t> h(14 + 20 + 20, 0);
    h[12] = 0x08; // IPv4
    std::uint8_t *ip = h.data() + 14;
    ip[0] = 0x45;
    ip[4] = 0x12; // id 0x1200
    ip[8] = 64;
    ip[9] = 6;
    ip[12] = 10, ip[15] = 1, ip[16] = 10, ip[19] = 2;
    std::uint8_t *tcp = ip + 20;
    tcp[0] = 0x30, tcp[1] = 0x39, tcp[2] = 0x01, tcp[3] = 0xbb;
    tcp[4] = static_cast<std::uint8_t>(seq >> 24), tcp[5] = static_cast<std::uint8_t>(seq >> 16);
    tcp[6] = static_cast<std::uint8_t>(seq >> 8), tcp[7] = static_cast<std::uint8_t>(seq);
    tcp[12] = 0x50;
    tcp[13] = 0x18; // PSH|ACK
    return h;
}

/** Valid IPv4 header and TCP checksums over a received frame? */
bool checksums_ok(const std::uint8_t *f, std::size_t len)
{
    const std::uint8_t *ip = f + 14;
    if (csum16(ip, 20) != 0xffff)
        return false;
    std::size_t tot = (ip[2] << 8) | ip[3];
    if (14 + tot != len)
        return false;
    std::uint32_t pseudo = csum16(ip + 12, 8);
    pseudo += 6 + static_cast<std::uint32_t>(tot - 20);
    return csum16(ip + 20, tot - 20, pseudo) == 0xffff;
}

TEST(LoopbackOps, UdSendTsoAndChecksums)
{
    vq_env e;
    qp_pair p(e, vq::qp_type::ud, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_TSO, vq::qp_cap{64, 64, 2, 1, 128});
    vq::qp_attr qa;
    qa.qkey = 0x11;
    ASSERT_EQ(vq::modify_qp(p.b, &qa, vq::QP_ATTR_QKEY), 0);
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = e.ctx->addr;
    ASSERT_EQ(vq::create_ah(e.pd, &aa, &ah), 0);
    reg_buf rx(e.pd, 64 * 2048), tx(e.pd, 8192);
    for (int i = 0; i < 32; i++)
        ASSERT_EQ(vq::post_recv(p.b, i, rx.addr(i * 2048), 2048, rx.mr->lkey), 0);
    // A plain UD send with immediate data.
    const char hello[] = "ud hello";
    vq::wr_start(p.a);
    p.a->wr_id = 1;
    p.a->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_imm(p.a, 99);
    vq::wr_set_inline_data(p.a, hello, sizeof hello);
    vq::wr_set_ud_addr(p.a, ah, p.b->qp_num, 0x11);
    // Wrong Q_Key: dropped silently (still a successful send).
    p.a->wr_id = 2;
    vq::wr_send(p.a);
    vq::wr_set_inline_data(p.a, hello, sizeof hello);
    vq::wr_set_ud_addr(p.a, ah, p.b->qp_num, 0x12);
    ASSERT_EQ(vq::wr_complete(p.a), 0);
    auto s = poll_n(p.cq_a, 2);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].status, wc_status::success);
    EXPECT_EQ(s[1].status, wc_status::success);
    auto r = poll_n(p.cq_b, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].byte_len, sizeof hello);
    EXPECT_EQ(r[0].imm_data, 99u);
    EXPECT_EQ(r[0].src_qp, p.a->qp_num);
    EXPECT_STREQ(reinterpret_cast<const char *>(rx.bytes.data()), hello);
    EXPECT_TRUE(drain(p.cq_b, 20).empty()) << "the wrong-Q_Key send must be dropped";

    // TSO: 5000 bytes of payload, MSS 1400 → 4 segments, each with the header.
    const std::uint32_t payload = 5000, mss = 1400;
    for (std::uint32_t i = 0; i < payload; i++)
        tx.bytes[i] = static_cast<std::uint8_t>(i * 13);
    auto hdr = tcp_header(1000);
    vq::wr_start(p.a);
    p.a->wr_id = 3;
    p.a->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_tso(p.a, hdr.data(), static_cast<std::uint16_t>(hdr.size()), mss);
    vq::sge sg[2] = {{tx.addr(0), 3000, tx.mr->lkey}, {tx.addr(3000), payload - 3000, tx.mr->lkey}};
    vq::wr_set_sge_list(p.a, 2, sg);
    vq::wr_set_ud_addr(p.a, ah, p.b->qp_num, 0x11);
    ASSERT_EQ(vq::wr_complete(p.a), 0);
    auto st = poll_n(p.cq_a, 1);
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0].status, wc_status::success);
    EXPECT_EQ(st[0].opcode, vq::wc_opcode::tso);
    auto segs = poll_n(p.cq_b, 4);
    ASSERT_EQ(segs.size(), 4u);
    std::uint32_t at = 0;
    for (int k = 0; k < 4; k++) {
        std::uint32_t part = std::min(mss, payload - at);
        ASSERT_EQ(segs[k].byte_len, hdr.size() + part) << "segment " << k;
        const std::uint8_t *f = rx.bytes.data() + segs[k].wr_id * 2048;
        EXPECT_TRUE(checksums_ok(f, segs[k].byte_len)) << "segment " << k;
        std::uint32_t seq = (f[38] << 24) | (f[39] << 16) | (f[40] << 8) | f[41];
        EXPECT_EQ(seq, 1000 + at);
        EXPECT_EQ(((f[18] << 8) | f[19]), 0x1200 + k) << "IP id increments";
        EXPECT_EQ((f[47] & 0x08) != 0, k == 3) << "PSH only on the last segment";
        EXPECT_EQ(std::memcmp(f + hdr.size(), tx.bytes.data() + at, part), 0) << "segment " << k;
        at += part;
    }

    // IP_CSUM on a plain send: checksums filled in.
    std::vector<std::uint8_t> frame = tcp_header(5);
    frame.resize(frame.size() + 37, 0xab);
    frame[16] = 0, frame[17] = static_cast<std::uint8_t>(frame.size() - 14);
    vq::wr_start(p.a);
    p.a->wr_id = 4;
    p.a->wr_flags = vq::WR_IP_CSUM;
    vq::wr_send(p.a);
    vq::wr_set_inline_data(p.a, frame.data(), frame.size());
    vq::wr_set_ud_addr(p.a, ah, p.b->qp_num, 0x11);
    ASSERT_EQ(vq::wr_complete(p.a), 0);
    auto cs = poll_n(p.cq_b, 1);
    ASSERT_EQ(cs.size(), 1u);
    EXPECT_TRUE(checksums_ok(rx.bytes.data() + cs[0].wr_id * 2048, cs[0].byte_len));
    EXPECT_EQ(vq::destroy_ah(ah), 0);
}

TEST(LoopbackOps, UdManyDestinations)
{
    vq_env e;
    qp_pair p(e, vq::qp_type::ud, vq::OPS_SEND, vq::qp_cap{64, 64, 1, 1, 64});
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = e.ctx->addr;
    ASSERT_EQ(vq::create_ah(e.pd, &aa, &ah), 0);
    reg_buf rx(e.pd, 64 * 64);
    for (int i = 0; i < 64; i++)
        ASSERT_EQ(vq::post_recv(p.b, i, rx.addr(i * 64), 64, rx.mr->lkey), 0);
    auto send_to = [&](std::uint32_t qpn, std::uint32_t v) {
        vq::wr_start(p.a);
        p.a->wr_id = v;
        p.a->wr_flags = 0;
        vq::wr_send(p.a);
        vq::wr_set_inline_data(p.a, &v, 4);
        vq::wr_set_ud_addr(p.a, ah, qpn, 0);
        return vq::wr_complete(p.a);
    };
    // 1023 destinations that do not exist (dropped, as on a wire) plus the
    // real one, interleaved: each send goes to the right place.
    std::uint32_t real = p.b->qp_num, got = 0;
    for (std::uint32_t i = 0; i < 1023; i++) {
        ASSERT_EQ(send_to(0x800000 + i, i), 0) << i;
        if (i % 100 == 0) {
            ASSERT_EQ(send_to(real, 7000 + i), 0);
            auto r = poll_n(p.cq_b, 1);
            ASSERT_EQ(r.size(), 1u);
            std::uint32_t v;
            std::memcpy(&v, rx.bytes.data() + r[0].wr_id * 64, 4);
            EXPECT_EQ(v, 7000 + i);
            got++;
        }
    }
    EXPECT_EQ(send_to(0x900000, 1), -FI_ENOSPC) << "destination table full (1024)";
    EXPECT_EQ(send_to(0x800000 + 5, 1), 0) << "known destinations still work";
    EXPECT_EQ(got, 11u);
    EXPECT_TRUE(drain(p.cq_b, 20).empty()) << "datagrams to missing QPs must be dropped";
    EXPECT_EQ(vq::destroy_ah(ah), 0);
}

TEST(LoopbackOps, UdReceiverReusesTheRingsOfDestroyedSenders)
{
    // More senders over time than a UD QP has rings (32 by default): each
    // destroyed sender's ring is reclaimed once drained.
    vq_env e;
    vq::cq *c = e.cq();
    vq::qp_init_attr ia;
    ia.type = vq::qp_type::ud;
    ia.send_cq = ia.recv_cq = c;
    vq::qp *rx_qp = nullptr;
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &rx_qp), 0);
    ASSERT_EQ(connect_qp(rx_qp, {}), 0);
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = e.ctx->addr;
    ASSERT_EQ(vq::create_ah(e.pd, &aa, &ah), 0);
    reg_buf rx(e.pd, 64);
    for (std::uint32_t k = 0; k < 100; k++) {
        SCOPED_TRACE("sender " + std::to_string(k));
        vq::qp *tx = nullptr;
        ASSERT_EQ(vq::create_qp(e.pd, &ia, &tx), 0);
        ASSERT_EQ(connect_qp(tx, {}), 0);
        for (int m = 0; m < 3; m++) {
            ASSERT_EQ(vq::post_recv(rx_qp, k, rx.addr(), 64, rx.mr->lkey), 0);
            std::uint32_t v = k * 10 + static_cast<std::uint32_t>(m);
            vq::wr_start(tx);
            tx->wr_id = v;
            tx->wr_flags = 0;
            vq::wr_send(tx);
            vq::wr_set_inline_data(tx, &v, 4);
            vq::wr_set_ud_addr(tx, ah, rx_qp->qp_num, 0);
            ASSERT_EQ(vq::wr_complete(tx), 0);
            auto r = poll_n(c, 1);
            ASSERT_EQ(r.size(), 1u);
            ASSERT_EQ(r[0].status, wc_status::success);
            EXPECT_EQ(r[0].src_qp, tx->qp_num);
            std::uint32_t got;
            std::memcpy(&got, rx.bytes.data(), 4);
            EXPECT_EQ(got, v);
        }
        ASSERT_EQ(vq::destroy_qp(tx), 0);
    }
    EXPECT_EQ(vq::destroy_ah(ah), 0);
    EXPECT_EQ(vq::destroy_qp(rx_qp), 0);
    EXPECT_EQ(vq::destroy_cq(c), 0);
}

TEST(LoopbackOps, UdReceiveTooSmallIsALengthErrorAndTheQpStaysUp)
{
    vq_env e;
    qp_pair p(e, vq::qp_type::ud, vq::OPS_SEND);
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = e.ctx->addr;
    ASSERT_EQ(vq::create_ah(e.pd, &aa, &ah), 0);
    reg_buf rx(e.pd, 64);
    ASSERT_EQ(vq::post_recv(p.b, 1, rx.addr(), 4, rx.mr->lkey), 0);
    ASSERT_EQ(vq::post_recv(p.b, 2, rx.addr(), 64, rx.mr->lkey), 0);
    std::uint64_t v = 1;
    for (int i = 0; i < 2; i++) {
        vq::wr_start(p.a);
        vq::wr_send(p.a);
        vq::wr_set_inline_data(p.a, &v, 8);
        vq::wr_set_ud_addr(p.a, ah, p.b->qp_num, 0);
        ASSERT_EQ(vq::wr_complete(p.a), 0);
    }
    auto r = poll_n(p.cq_b, 2);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].status, wc_status::loc_len_err);
    EXPECT_EQ(r[1].status, wc_status::success);
    EXPECT_EQ(vq::destroy_ah(ah), 0);
}

// Signaled single-call sends, both send_imm forms and the inline post_send
// (which shm writes straight into the ring, their completions at once),
// keep every completion, in posting order, also when the send CQ is full
// and later posts queue behind one whose completion waits for room; every
// message arrives once, in order.
TEST(LoopbackOps, SignaledSingleCallSendsCompleteInOrderThroughAFullSendCq)
{
    vq_env e;
    vq::cq *scq = e.cq(8), *rcq_a = e.cq(), *cq_b = e.cq(1024);
    vq::qp_init_attr ia;
    ia.type = vq::qp_type::rc;
    ia.send_cq = scq;
    ia.recv_cq = rcq_a;
    ia.send_ops_flags = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM;
    ia.cap.max_inline_data = 64;
    vq::qp *a = nullptr, *b = nullptr;
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &a), 0);
    ia.send_cq = ia.recv_cq = cq_b;
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &b), 0);
    ASSERT_EQ(connect_qp(a, vq::get_qp_addr(b)), 0);
    ASSERT_EQ(connect_qp(b, vq::get_qp_addr(a)), 0);
    reg_buf rx(e.pd, 64 * 64);
    constexpr int msgs = 48;
    for (int i = 0; i < msgs; i++)
        ASSERT_EQ(vq::post_recv(b, 500 + std::uint64_t(i), rx.addr(std::size_t(i) * 64), 64, rx.mr->lkey), 0);
    std::vector<std::uint64_t> signaled;
    for (int i = 0; i < msgs; i++) {
        const std::uint64_t word = 0x1000 + std::uint64_t(i);
        const unsigned fl = i % 4 == 3 ? 0u : unsigned(vq::WR_SIGNALED); // three signaled in four
        if (i % 3 == 1)
            ASSERT_EQ(vq::post_send_imm_hdr_inline(a, 100 + std::uint64_t(i), std::uint32_t(i), word, nullptr, 0, fl), 0)
                << i;
        else if (i % 3 == 2)
            ASSERT_EQ(vq::post_send(a, 100 + std::uint64_t(i), &word, sizeof word, 0, fl | vq::WR_INLINE), 0) << i;
        else {
            const vq::data_buf part{&word, sizeof word};
            ASSERT_EQ(vq::post_send_imm_inline(a, 100 + std::uint64_t(i), std::uint32_t(i), &part, 1, fl), 0) << i;
        }
        if (fl)
            signaled.push_back(100 + std::uint64_t(i));
    }
    ASSERT_GT(signaled.size(), 8u) << "more signaled sends than the send CQ holds";
    auto s = poll_n(scq, signaled.size());
    ASSERT_EQ(s.size(), signaled.size());
    for (std::size_t k = 0; k < s.size(); k++) {
        SCOPED_TRACE(k);
        EXPECT_EQ(s[k].wr_id, signaled[k]);
        EXPECT_EQ(s[k].status, wc_status::success);
        EXPECT_EQ(s[k].opcode, vq::wc_opcode::send);
        EXPECT_EQ(s[k].qp_num, a->qp_num);
    }
    EXPECT_TRUE(drain(scq, 20).empty()) << "a completion too many";
    auto r = poll_n(cq_b, msgs);
    ASSERT_EQ(r.size(), std::size_t(msgs));
    for (int i = 0; i < msgs; i++) {
        SCOPED_TRACE(i);
        EXPECT_EQ(r[std::size_t(i)].wr_id, 500u + std::uint64_t(i));
        if (i % 3 == 2)
            EXPECT_EQ(r[std::size_t(i)].wc_flags & vq::WC_WITH_IMM, 0u) << "a plain send with immediate data";
        else
            EXPECT_EQ(r[std::size_t(i)].imm_data, std::uint32_t(i));
        EXPECT_EQ(r[std::size_t(i)].byte_len, 8u);
        std::uint64_t got;
        std::memcpy(&got, rx.bytes.data() + std::size_t(i) * 64, sizeof got);
        EXPECT_EQ(got, 0x1000u + std::uint64_t(i));
    }
    EXPECT_EQ(vq::destroy_qp(a), 0);
    EXPECT_EQ(vq::destroy_qp(b), 0);
    for (vq::cq *c : {scq, rcq_a, cq_b})
        EXPECT_EQ(vq::destroy_cq(c), 0);
}

} // namespace
} // namespace shunt::test
