// drivers/shm: QP responder access defaults, late notifications and ring /
// region reuse after destroy or deregistration, host-unique QP numbers.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "env/segment.h"
#include "shm.h" // the region table's layout (drivers/shm)
#include "vq_fixture.h"

namespace shunt::test {
namespace {

using vq::wc_status;

/** Post one signaled RDMA write of @p n bytes of @p src to (rkey, raddr) on
 *  @p q and return its completion from @p cq. */
vq::wc write_one(vq::qp *q, vq::cq *cq, std::uint32_t rkey, std::uint64_t raddr, reg_buf &src, std::uint32_t n)
{
    vq::wr_start(q);
    q->wr_id = 5;
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(q, rkey, raddr);
    vq::wr_set_sge(q, src.mr->lkey, src.addr(), n);
    EXPECT_EQ(vq::wr_complete(q), 0);
    auto w = poll_n(cq, 1);
    EXPECT_EQ(w.size(), 1u);
    return w.empty() ? vq::wc{} : w[0];
}

TEST(ShmLifecycle, ResponderAccessDefaultsToNoneAsInVerbs)
{
    vq_env e;
    vq::cq *cq = e.cq();
    vq::qp_init_attr ia;
    ia.send_cq = ia.recv_cq = cq;
    ia.send_ops_flags = vq::OPS_ALL & vq::ops_allowed(vq::qp_type::rc);
    vq::qp *a = nullptr, *b = nullptr;
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &a), 0);
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &b), 0);
    vq::qp_attr qa;
    ASSERT_EQ(vq::query_qp(b, &qa), 0);
    EXPECT_EQ(qa.qp_access_flags, 0u);
    vq::qp_attr fresh;
    EXPECT_EQ(fresh.qp_access_flags, 0u);
    // b never gets QP_ATTR_ACCESS_FLAGS: RDMA and atomics at it are refused.
    ASSERT_EQ(connect_qp(a, vq::get_qp_addr(b)), 0);
    ASSERT_EQ(connect_qp(b, vq::get_qp_addr(a), ~0u), 0);
    reg_buf target(e.pd, 64), src(e.pd, 64);
    std::memset(src.bytes.data(), 7, 64);
    auto w = write_one(a, cq, target.mr->rkey, target.addr(), src, 16);
    EXPECT_EQ(w.status, wc_status::rem_access_err);
    EXPECT_EQ(target.bytes[0], 0);
    EXPECT_EQ(vq::destroy_qp(a), 0);
    EXPECT_EQ(vq::destroy_qp(b), 0);
    // The same with REMOTE_WRITE granted: the write lands.
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &a), 0);
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &b), 0);
    ASSERT_EQ(connect_qp(a, vq::get_qp_addr(b)), 0);
    ASSERT_EQ(connect_qp(b, vq::get_qp_addr(a), vq::ACCESS_REMOTE_WRITE), 0);
    ASSERT_EQ(vq::query_qp(b, &qa), 0);
    EXPECT_EQ(qa.qp_access_flags, vq::ACCESS_REMOTE_WRITE);
    w = write_one(a, cq, target.mr->rkey, target.addr(), src, 16);
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(target.bytes[0], 7);
    EXPECT_EQ(vq::destroy_qp(a), 0);
    EXPECT_EQ(vq::destroy_qp(b), 0);
    EXPECT_EQ(vq::destroy_cq(cq), 0);
}

/** RC QPs on one CQ each, created and connected in pairs by hand. */
struct rc_qps {
    vq_env &e;
    vq::cq *cq;
    explicit rc_qps(vq_env &env) : e(env), cq(env.cq()) {}
    ~rc_qps() { EXPECT_EQ(vq::destroy_cq(cq), 0); }
    vq::qp *make()
    {
        vq::qp_init_attr ia;
        ia.send_cq = ia.recv_cq = cq;
        ia.send_ops_flags = vq::OPS_ALL & vq::ops_allowed(vq::qp_type::rc);
        vq::qp *q = nullptr;
        EXPECT_EQ(vq::create_qp(e.pd, &ia, &q), 0);
        return q;
    }
    void pair(vq::qp *&a, vq::qp *&b)
    {
        a = make();
        b = make();
        ASSERT_TRUE(a && b);
        ASSERT_EQ(connect_qp(a, vq::get_qp_addr(b)), 0);
        ASSERT_EQ(connect_qp(b, vq::get_qp_addr(a)), 0);
    }
};

/** Send @p v from @p from (inline, signaled) into a receive posted on @p to
 *  (buffer @p rb); both completions must succeed and carry the value. */
void ping(vq::cq *cq, vq::qp *from, vq::qp *to, reg_buf &rb, std::uint64_t v)
{
    ASSERT_EQ(vq::post_recv(to, 900 + v, rb.addr(), 64, rb.mr->lkey), 0);
    ASSERT_EQ(vq::post_send(from, 100 + v, &v, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
    auto w = poll_n(cq, 2);
    ASSERT_EQ(w.size(), 2u);
    for (auto &x : w) {
        EXPECT_EQ(x.status, wc_status::success) << "wr_id " << x.wr_id;
        if (x.wr_id == 900 + v || x.wr_id == 999) { // 999: a receive posted earlier
            EXPECT_EQ(x.qp_num, to->qp_num);
            EXPECT_EQ(x.byte_len, 8u);
        } else {
            EXPECT_EQ(x.wr_id, 100 + v);
        }
    }
    std::uint64_t got = 0;
    std::memcpy(&got, rb.bytes.data(), 8);
    EXPECT_EQ(got, v);
}

TEST(ShmLifecycle, LateGoodbyeOfAnOldPeerDoesNotBreakANewConnection)
{
    vq_env e;
    rc_qps r(e);
    reg_buf rb(e.pd, 64);
    vq::qp *a, *b, *c, *d;
    r.pair(a, b);
    ping(r.cq, a, b, rb, 1);
    // b goes away; a has not noticed. c and d are created after it (c's
    // ring may live where b's was) and connected.
    ASSERT_EQ(vq::destroy_qp(b), 0);
    r.pair(c, d);
    ping(r.cq, d, c, rb, 2);
    // a's goodbye (destroy) is meant for b: c and d must not notice it.
    ASSERT_EQ(vq::destroy_qp(a), 0);
    for (std::uint64_t i = 3; i < 6; i++) {
        ping(r.cq, d, c, rb, i);
        ping(r.cq, c, d, rb, i + 10);
    }
    EXPECT_EQ(vq::get_qp_state(c), vq::qp_state::rts);
    EXPECT_EQ(vq::get_qp_state(d), vq::qp_state::rts);
    EXPECT_TRUE(drain(r.cq).empty());
    EXPECT_EQ(vq::destroy_qp(c), 0);
    EXPECT_EQ(vq::destroy_qp(d), 0);
}

TEST(ShmLifecycle, PeerThatHasNotNoticedCannotWriteIntoANewQpsRing)
{
    vq_env e;
    rc_qps r(e);
    reg_buf rb(e.pd, 64);
    vq::qp *a, *b, *c, *d;
    r.pair(a, b);
    ping(r.cq, a, b, rb, 1);
    ASSERT_EQ(vq::destroy_qp(b), 0);
    r.pair(c, d);
    // a has not noticed that b is gone: its next message goes where b's
    // ring was, never into c's.
    std::uint64_t stale = 0x5a5a5a5a;
    ASSERT_EQ(vq::post_send(a, 55, &stale, 8, 0, vq::WR_INLINE), 0);
    ping(r.cq, d, c, rb, 2);
    ASSERT_EQ(vq::post_recv(c, 999, rb.addr(), 64, rb.mr->lkey), 0);
    auto extra = drain(r.cq);
    EXPECT_TRUE(extra.empty()) << "c received a message of a stale peer (wr_id " << extra[0].wr_id << ")";
    ping(r.cq, d, c, rb, 3); // lands in c's receive 999 (first in its queue)
    EXPECT_TRUE(drain(r.cq).empty()); // ...and leaves the receive of ping 3 posted
    EXPECT_EQ(vq::destroy_qp(a), 0);
    EXPECT_EQ(vq::destroy_qp(c), 0);
    EXPECT_EQ(vq::destroy_qp(d), 0);
}

TEST(ShmLifecycle, ParkedRingMemoryIsReclaimedOnceThePeerLeaves)
{
    // Each cycle parks the first-destroyed QP's ring until its peer leaves;
    // without reclaiming, the segment's heap (256 MiB, 64 KiB rings) would
    // run out after ~250 cycles.
    vq_env e;
    rc_qps r(e);
    reg_buf rb(e.pd, 64);
    for (int i = 0; i < 600; i++) {
        vq::qp *a, *b;
        r.pair(a, b);
        if (HasFatalFailure())
            return;
        if (i % 50 == 0)
            ping(r.cq, a, b, rb, static_cast<std::uint64_t>(i));
        ASSERT_EQ(vq::destroy_qp(b), 0);
        ASSERT_EQ(vq::destroy_qp(a), 0);
    }
}

TEST(ShmLifecycle, ResetQpReceivesInFreshMemoryWhileTheOldSenderLingers)
{
    vq_env e;
    rc_qps r(e);
    reg_buf rb(e.pd, 64);
    vq::qp *a, *b;
    r.pair(a, b);
    ping(r.cq, a, b, rb, 1);
    // b is reset and reconnected to a new peer c; a (never told) sends.
    vq::qp_attr at;
    at.state = vq::qp_state::reset;
    ASSERT_EQ(vq::modify_qp(b, &at, vq::QP_ATTR_STATE), 0);
    vq::qp *c = r.make();
    ASSERT_EQ(connect_qp(c, vq::get_qp_addr(b)), 0);
    ASSERT_EQ(connect_qp(b, vq::get_qp_addr(c)), 0);
    std::uint64_t stale = 0x5a5a5a5a;
    ASSERT_EQ(vq::post_send(a, 55, &stale, 8, 0, vq::WR_INLINE), 0);
    ping(r.cq, c, b, rb, 2);
    ASSERT_EQ(vq::post_recv(b, 999, rb.addr(), 64, rb.mr->lkey), 0);
    auto extra = drain(r.cq);
    EXPECT_TRUE(extra.empty()) << "b received a message of its old peer";
    ping(r.cq, c, b, rb, 3);
    EXPECT_TRUE(drain(r.cq).empty());
    EXPECT_EQ(vq::destroy_qp(a), 0);
    EXPECT_EQ(vq::destroy_qp(b), 0);
    EXPECT_EQ(vq::destroy_qp(c), 0);
}

TEST(ShmLifecycle, SecondSenderCannotClaimAConnectedRcQp)
{
    vq_env e;
    rc_qps r(e);
    vq::qp *a, *b;
    r.pair(a, b);
    vq::qp *x = r.make();
    EXPECT_EQ(connect_qp(x, vq::get_qp_addr(b)), -FI_EBUSY);
    EXPECT_EQ(vq::destroy_qp(x), 0);
    EXPECT_EQ(vq::destroy_qp(a), 0);
    EXPECT_EQ(vq::destroy_qp(b), 0);
}

TEST(ShmLifecycle, StaleRkeyNeverMatchesALaterRegion)
{
    vq_env e;
    qp_pair p(e);
    reg_buf src(e.pd, 64);
    std::vector<std::uint8_t> buf(64);
    vq::mr *m = nullptr;
    ASSERT_EQ(vq::reg_mr(e.pd, buf.data(), buf.size(), all_remote | vq::ACCESS_LOCAL_WRITE, &m), 0);
    const std::uint32_t stale = m->rkey;
    ASSERT_EQ(vq::dereg_mr(m), 0);
    // Far more registrations than an 8-bit tag has values.
    std::vector<std::uint32_t> keys;
    for (int i = 0; i < 1200; i++) {
        ASSERT_EQ(vq::reg_mr(e.pd, buf.data(), buf.size(), all_remote | vq::ACCESS_LOCAL_WRITE, &m), 0);
        keys.push_back(m->rkey);
        ASSERT_NE(m->rkey, stale) << "registration " << i << " reissued a deregistered key";
        if (i + 1 < 1200) {
            ASSERT_EQ(vq::dereg_mr(m), 0);
        }
    }
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "a key was issued twice";
    std::memset(src.bytes.data(), 3, 64);
    auto w = write_one(p.a, p.cq_a, stale, reinterpret_cast<std::uint64_t>(buf.data()), src, 8);
    EXPECT_EQ(w.status, wc_status::rem_access_err);
    EXPECT_EQ(buf[0], 0);
    EXPECT_EQ(vq::dereg_mr(m), 0);
}

TEST(ShmLifecycle, DeregWaitsForAnInFlightRemoteWrite)
{
    // An RDMA write of 32 SGEs runs as 32 copies in order, counted in the
    // target entry's users from its key check to its last copy. Deregister
    // the target once that count shows the write in flight, then overwrite
    // the buffer: nothing of the write may land after dereg_mr returned.
    // (The count is read atomically, as the driver writes it; the target
    // bytes are read only after the writer finished.)
    vq_env e;
    vq::qp_cap cap;
    cap.max_send_sge = 32;
    qp_pair p(e, vq::qp_type::rc, vq::OPS_ALL & ~vq::OPS_TSO, cap);
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer's memmove is slow enough that 256 MiB outlasts
    // dereg_mr's bounded wait (20 x SHUNT_SHM_PEER_CHECK_MS, for a peer that
    // died inside an access), which then gives up on a live writer.
    constexpr std::size_t piece = 256u << 10, n = 32 * piece;
#elif defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer's checked memmove at -O0, on a busy machine, has
    // outlasted that wait with 256 MiB too; 64 MiB still keeps the write in
    // flight for tens of milliseconds.
    constexpr std::size_t piece = 2u << 20, n = 32 * piece;
#else
    constexpr std::size_t piece = 8u << 20, n = 32 * piece;
#endif
    reg_buf src(e.pd, n);
    std::memset(src.bytes.data(), 0x11, n);
    std::vector<std::uint8_t> target(n, 0);
    vq::mr *tm = nullptr;
    ASSERT_EQ(vq::reg_mr(e.pd, target.data(), n, all_remote | vq::ACCESS_LOCAL_WRITE, &tm), 0);
    const std::uint32_t rkey = tm->rkey;
    env::segment view; // our own mapping of the context's segment: its region table
    const vq::dev_addr &ca = e.ctx->addr;
    ASSERT_EQ(view.attach(std::string(reinterpret_cast<const char *>(ca.raw), ca.len)), 0);
    const auto *hdr = static_cast<const drv::shm::ctx_hdr *>(view.data());
    auto *entry = reinterpret_cast<drv::shm::mr_entry *>(static_cast<char *>(view.data()) + hdr->mr_off) +
                  drv::shm::key_index(rkey);
    vq::wc done{};
    std::thread writer([&] {
        vq::sge sg[32];
        for (int i = 0; i < 32; i++)
            sg[i] = {src.addr(i * piece), static_cast<std::uint32_t>(piece), src.mr->lkey};
        vq::wr_start(p.a);
        p.a->wr_id = 5;
        p.a->wr_flags = vq::WR_SIGNALED;
        vq::wr_rdma_write(p.a, rkey, reinterpret_cast<std::uint64_t>(target.data()));
        vq::wr_set_sge_list(p.a, 32, sg);
        EXPECT_EQ(vq::wr_complete(p.a), 0);
        auto w = poll_n(p.cq_a, 1);
        if (!w.empty())
            done = w[0];
    });
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto in_flight = [&] { return entry->users.load(std::memory_order_acquire) != 0; };
    while (!in_flight() && std::chrono::steady_clock::now() < end)
        ;
    bool started = in_flight();
    EXPECT_EQ(vq::dereg_mr(tm), 0);
    // dereg_mr returned: the write must have left the entry (a count still
    // held means the wait gave up on it).
    const std::uint32_t held = entry->users.load(std::memory_order_acquire);
    EXPECT_EQ(held, 0u) << "dereg_mr returned while the write still held the region";
    if (held != 0)
        writer.join(); // do not race the write it gave up on: the failure above says it
    // The memory is ours again: reuse it from the end (where a write still
    // in flight would arrive last).
    for (std::size_t k = 32; k-- > 0;)
        std::memset(target.data() + k * piece, 0xee, piece);
    if (writer.joinable())
        writer.join();
    ASSERT_TRUE(started) << "the write was never seen in flight";
    EXPECT_EQ(done.status, wc_status::success);
    std::size_t late = 0;
    for (std::size_t i = 0; i < n; i++)
        late += target[i] != 0xee;
    EXPECT_EQ(late, 0u) << "bytes written after dereg_mr returned";
}

TEST(ShmLifecycle, QpNumbersAreUniqueAcrossContextsAndIdentifyUdSenders)
{
    // Two contexts (as two processes would have) each create their first
    // QP: the numbers differ, fit in 24 bits, and a UD receiver tells the
    // two senders apart by wc.src_qp.
    vq_env e1, e2;
    const vq::qp_cap cap{16, 16, 1, 1, 64};
    auto ud = [&](vq_env &e, vq::cq *cq) {
        vq::qp_init_attr ia;
        ia.type = vq::qp_type::ud;
        ia.send_cq = ia.recv_cq = cq;
        ia.send_ops_flags = vq::OPS_SEND;
        ia.cap = cap;
        vq::qp *q = nullptr;
        EXPECT_EQ(vq::create_qp(e.pd, &ia, &q), 0);
        if (q) {
            EXPECT_EQ(connect_qp(q, {}, ~0u), 0);
        }
        return q;
    };
    vq::cq *c1 = e1.cq(), *c2 = e2.cq(), *c3 = e1.cq();
    vq::qp *s1 = ud(e1, c3), *s2 = ud(e2, c2), *rx = ud(e1, c1);
    ASSERT_TRUE(s1 && s2 && rx);
    EXPECT_NE(s1->qp_num, s2->qp_num);
    EXPECT_LT(s1->qp_num, 1u << 24);
    EXPECT_LT(s2->qp_num, 1u << 24);
    EXPECT_NE(s1->qp_num, 0u);
    reg_buf rb(e1.pd, 128);
    ASSERT_EQ(vq::post_recv(rx, 1, rb.addr(0), 64, rb.mr->lkey), 0);
    ASSERT_EQ(vq::post_recv(rx, 2, rb.addr(64), 64, rb.mr->lkey), 0);
    auto send = [&](vq_env &e, vq::qp *q, std::uint32_t v) {
        vq::ah *ah = nullptr;
        vq::ah_attr aa;
        aa.dest = e1.ctx->addr;
        ASSERT_EQ(vq::create_ah(e.pd, &aa, &ah), 0);
        vq::wr_start(q);
        q->wr_id = v;
        q->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(q);
        vq::wr_set_inline_data(q, &v, 4);
        vq::wr_set_ud_addr(q, ah, rx->qp_num, 0);
        EXPECT_EQ(vq::wr_complete(q), 0);
        auto sw = poll_n(q->send_cq, 1);
        ASSERT_EQ(sw.size(), 1u);
        EXPECT_EQ(sw[0].status, wc_status::success);
        EXPECT_EQ(vq::destroy_ah(ah), 0);
    };
    send(e1, s1, 111);
    auto w = poll_n(c1, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].src_qp, s1->qp_num);
    send(e2, s2, 222);
    w = poll_n(c1, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].src_qp, s2->qp_num);
    std::uint32_t v;
    std::memcpy(&v, rb.bytes.data() + 64, 4);
    EXPECT_EQ(v, 222u);
    EXPECT_EQ(vq::destroy_qp(s1), 0);
    EXPECT_EQ(vq::destroy_qp(s2), 0);
    EXPECT_EQ(vq::destroy_qp(rx), 0);
    EXPECT_EQ(vq::destroy_cq(c1), 0);
    EXPECT_EQ(vq::destroy_cq(c2), 0);
    EXPECT_EQ(vq::destroy_cq(c3), 0);
}

} // namespace
} // namespace shunt::test
