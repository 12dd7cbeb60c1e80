// Lent receives (qp_init_attr::lend_recv) on every QP type the device offers
// them for, and post_send_imm_inline, between this process and a spawned
// peer: bytes checked at the address each completion lends, the loan checked
// to last until the next poll, and the rules (no posts, no SRQ, one flush,
// messages over max_lend_msg refused at the sender).
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "conf_harness.h"

namespace shunt::conf {
namespace {

using vq::qp_type;
using vq::wc_opcode;
using vq::wc_status;

std::string type_name(const ::testing::TestParamInfo<qp_type> &i)
{
    return i.param == qp_type::rc ? "RC" : i.param == qp_type::uc ? "UC" : "UD";
}

constexpr std::size_t src_size = 256 * 1024;
constexpr std::uint32_t qkey = 0x1e4d;

/** One message the peer sends: bytes [off, off + len) of its pattern region,
 *  imm = its number. */
struct msg_spec {
    std::uint32_t len;
    std::uint64_t off;
};

/** A local QP with lent receives and a peer QP of the same type sending to it. */
class LentReceives : public conf_test, public ::testing::WithParamInterface<qp_type> {
protected:
    local_side L;
    std::unique_ptr<peer_proc> P;
    unsigned lq = 0;
    qp_rep pq{};
    std::uint32_t peer_ah = ~0u;
    reg_rep src{};
    std::vector<std::uint8_t> pattern; ///< the peer region's bytes
    std::string skip_reason;

    /** @return false when skipped (skip_reason set) or failed. */
    bool open(vq::qp_cap peer_cap = {512, 0, 4, 1, 256})
    {
        const qp_type t = GetParam();
        if (!L.ok)
            return false;
        if (!(L.attr.lend_qp_types & (1u << static_cast<unsigned>(t)))) {
            skip_reason = "device does not offer lent receives on this QP type (device_attr::lend_qp_types)";
            return false;
        }
        P = std::make_unique<peer_proc>(&L);
        if (!P->ok()) {
            ADD_FAILURE() << "peer not started";
            return false;
        }
        int rc = L.create_qp(t, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM, {}, &lq, false, nullptr, true);
        if (rc) {
            ADD_FAILURE() << "create_qp with lend_recv: " << rc;
            return false;
        }
        EXPECT_EQ(L.qp(lq)->cap.max_recv_wr, 0u) << "a lent-receive QP has no receive queue";
        if ((rc = P->create_qp(t, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM, peer_cap, &pq)) ||
            (rc = L.connect(lq, {P->addr(), pq.qpn}, qkey)) ||
            (rc = P->connect(pq.index, vq::get_qp_addr(L.qp(lq)), qkey))) {
            ADD_FAILURE() << "connect: " << rc;
            return false;
        }
        if (t == qp_type::ud && P->create_ah(L.ctx->addr, &peer_ah) != 0) {
            ADD_FAILURE() << "peer create_ah";
            return false;
        }
        std::uint64_t seed = rnd(1, ~0ull >> 1);
        if (P->reg(src_size, vq::ACCESS_LOCAL_WRITE, false, seed, &src) != 0) {
            ADD_FAILURE() << "peer reg";
            return false;
        }
        pattern.resize(src_size);
        fill_pattern(pattern.data(), src_size, seed);
        return true;
    }
    vq::cq *cq() { return L.qps[lq].cq; }
    std::uint32_t max_len() const
    {
        return GetParam() == qp_type::ud ? L.attr.ud_mtu : std::min<std::uint32_t>(L.attr.max_lend_msg, 24000);
    }
    wr_desc desc_for(std::uint32_t i, const msg_spec &m, bool inl, unsigned flags = vq::WR_SIGNALED)
    {
        wr_desc d;
        d.wr_id = i;
        d.op = OP_SEND_IMM;
        d.imm = i;
        d.flags = flags;
        if (m.len) {
            d.data = inl ? DATA_INLINE : DATA_SGE;
            d.npieces = 1;
            d.pieces[0] = piece{src.index, m.len, m.off};
        }
        if (GetParam() == qp_type::ud) {
            d.ud_ah = peer_ah;
            d.ud_qpn = L.qp(lq)->qp_num;
            d.ud_qkey = qkey;
        }
        return d;
    }
    /** Random message sizes: a third fit one slot, a third up to 1 KiB, the
     *  rest up to the largest the QP takes (so messages wrap around the ring);
     *  all within what the QP takes. */
    msg_spec random_msg()
    {
        std::uint32_t cap = max_len();
        std::uint32_t len;
        // A UD QP over a 1500-byte Ethernet MTU takes 1024 bytes at most.
        const std::uint32_t mid = std::min<std::uint32_t>(1024, cap), slot = std::min(L.attr.max_inline_slot, mid);
        switch (rnd(0, 2)) {
        case 0: len = static_cast<std::uint32_t>(rnd(0, slot)); break;
        case 1: len = static_cast<std::uint32_t>(rnd(slot, mid)); break;
        default: len = static_cast<std::uint32_t>(rnd(std::min(mid + 1, cap), cap)); break;
        }
        return {len, rnd(0, src_size - len)};
    }
};

/** The consumer: polls the lent-receive CQ and checks each completion's
 *  bytes where it points; before every poll it checks the previous poll's
 *  bytes again, after letting the sender run, so a loan ended early (the
 *  sender writing over lent slots) shows as a difference. */
struct verifier {
    vq::cq *cq;
    const std::vector<std::uint8_t> &pattern;
    const std::vector<msg_spec> &msgs;
    std::atomic<std::uint32_t> seen{0};
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::vector<std::string> errors;
    std::uint32_t wrapped = 0, in_place = 0;

    void fail(const std::string &e)
    {
        std::lock_guard g(mu);
        if (errors.size() < 10)
            errors.push_back(e);
    }
    bool check(const vq::wc &w, bool again)
    {
        if (w.status != wc_status::success) {
            fail("completion " + wc_str(w));
            return false;
        }
        std::uint32_t i = w.imm_data;
        if (!(w.wc_flags & vq::WC_WITH_IMM) || i >= msgs.size() || w.opcode != wc_opcode::recv) {
            fail("unexpected completion " + wc_str(w));
            return false;
        }
        const msg_spec &m = msgs[i];
        if (w.byte_len != m.len || !w.data) {
            fail("message " + std::to_string(i) + ": byte_len " + std::to_string(w.byte_len) + " data " +
                 (w.data ? "set" : "null") + ", want " + std::to_string(m.len));
            return false;
        }
        if (std::memcmp(w.data, pattern.data() + m.off, m.len) != 0) {
            fail("message " + std::to_string(i) + " (" + std::to_string(m.len) + " bytes): lent bytes differ" +
                 (again ? " when checked again before the next poll (loan ended early)" : ""));
            return false;
        }
        return true;
    }
    void run(int ms)
    {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        std::vector<vq::wc> last;
        vq::wc w[16];
        std::uint32_t expect = 0;
        while (!stop.load() && seen.load() < msgs.size() && std::chrono::steady_clock::now() < deadline) {
            if (!last.empty()) {
                // Let the sender run into whatever credits it has, then look again.
                for (int spin = 0; spin < 20000; spin++)
                    __builtin_ia32_pause();
                for (const vq::wc &x : last)
                    check(x, true);
                last.clear();
            }
            int n = vq::poll_cq(cq, 16, w);
            if (n < 0) {
                fail("poll_cq " + std::to_string(n));
                return;
            }
            for (int k = 0; k < n; k++) {
                if (w[k].status == wc_status::success && w[k].imm_data != expect)
                    fail("message " + std::to_string(w[k].imm_data) + " arrived, want " + std::to_string(expect));
                expect++;
                if (check(w[k], false))
                    last.push_back(w[k]);
            }
            seen.fetch_add(static_cast<std::uint32_t>(n));
            if (n == 0)
                sched_yield();
        }
    }
};

TEST_P(LentReceives, EveryMessageIsLentInPlaceUntilTheNextPollAndBytesMatch)
{
    if (!open()) {
        if (!skip_reason.empty())
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::vector<msg_spec> msgs(360);
    for (auto &m : msgs)
        m = random_msg();
    verifier v{cq(), pattern, msgs};
    std::thread consumer([&] { v.run(60000); });
    // Post in batches (the send queue holds 512); the peer's sends block on
    // ring credits until the consumer's next poll gives them back.
    constexpr std::uint32_t batch = 24;
    for (std::uint32_t i = 0; i < msgs.size() && !HasFailure(); i += batch) {
        std::vector<wr_desc> ds;
        for (std::uint32_t k = i; k < std::min<std::uint32_t>(i + batch, std::uint32_t(msgs.size())); k++)
            ds.push_back(desc_for(k, msgs[k], msgs[k].len <= pq.cap.max_inline_data && k % 2));
        ASSERT_EQ(P->post(pq.index, ds), 0);
        auto done = P->wait_wcs(pq.index, static_cast<std::uint32_t>(ds.size()), 20000);
        for (const vq::wc &x : done)
            ASSERT_EQ(x.status, wc_status::success) << wc_str(x);
    }
    consumer.join();
    for (const std::string &e : v.errors)
        ADD_FAILURE() << e;
    EXPECT_EQ(v.seen.load(), msgs.size()) << "every message completes exactly once";
}

TEST_P(LentReceives, PostRecvIsRefusedAndErrFlushesExactlyOnce)
{
    if (!open()) {
        if (!skip_reason.empty())
            GTEST_SKIP() << skip_reason;
        return;
    }
    vq::qp *q = L.qp(lq);
    std::uint64_t scratch = 0;
    EXPECT_EQ(vq::post_recv(q, 1, reinterpret_cast<std::uint64_t>(&scratch), 8, 0), -FI_EINVAL)
        << "nothing is posted to a lent-receive QP";
    // A message first: it arrives, lent.
    ASSERT_EQ(P->post(pq.index, {desc_for(0, {40, 128}, false)}), 0);
    std::vector<msg_spec> one{{40, 128}};
    verifier v{cq(), pattern, one};
    v.run(10000);
    ASSERT_EQ(v.seen.load(), 1u);
    for (const std::string &e : v.errors)
        ADD_FAILURE() << e;
    vq::qp_attr a;
    a.state = vq::qp_state::err;
    ASSERT_EQ(vq::modify_qp(q, &a, vq::QP_ATTR_STATE), 0);
    int flushes = 0, others = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < end) {
        vq::wc w[8];
        int n = vq::poll_cq(cq(), 8, w);
        for (int k = 0; k < n; k++)
            (w[k].status == wc_status::wr_flush_err && w[k].qp_num == q->qp_num && !w[k].data ? flushes : others)++;
    }
    EXPECT_EQ(flushes, 1) << "one wr_flush_err completion tells the consumer the QP is in ERR";
    EXPECT_EQ(others, 0);
}

TEST_P(LentReceives, IteratorFormLendsUntilNextPollOrEndPoll)
{
    if (!open()) {
        if (!skip_reason.empty())
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::vector<msg_spec> msgs{{0, 0}, {48, 1000}, {700, 3000}, {std::min<std::uint32_t>(max_len(), 4000), 9000}};
    std::vector<wr_desc> ds;
    for (std::uint32_t k = 0; k < msgs.size(); k++)
        ds.push_back(desc_for(k, msgs[k], false));
    ASSERT_EQ(P->post(pq.index, ds), 0);
    ASSERT_EQ(P->wait_wcs(pq.index, static_cast<std::uint32_t>(ds.size())).size(), ds.size());
    std::uint32_t got = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got < msgs.size() && std::chrono::steady_clock::now() < end) {
        if (vq::start_poll(cq()) != 0)
            continue;
        do {
            ASSERT_EQ(cq()->status, wc_status::success);
            std::uint32_t i = vq::read_imm_data(cq());
            ASSERT_LT(i, msgs.size());
            ASSERT_EQ(vq::read_byte_len(cq()), msgs[i].len);
            const std::uint8_t *d = vq::read_data(cq());
            ASSERT_NE(d, nullptr);
            EXPECT_EQ(std::memcmp(d, pattern.data() + msgs[i].off, msgs[i].len), 0) << "message " << i;
            got++;
        } while (vq::next_poll(cq()) == 0);
        vq::end_poll(cq());
    }
    EXPECT_EQ(got, msgs.size());
}

TEST_P(LentReceives, CreationWithAnSrqIsInvalid)
{
    if (!L.ok)
        return;
    if (!(L.attr.lend_qp_types & (1u << static_cast<unsigned>(GetParam()))))
        GTEST_SKIP() << "device does not offer lent receives on this QP type";
    vq::srq_init_attr sa;
    sa.max_wr = 16;
    vq::srq *s = nullptr;
    ASSERT_EQ(vq::create_srq(L.pd, &sa, &s), 0);
    vq::cq_init_attr ca;
    ca.cqe = 16;
    vq::cq *c = nullptr;
    ASSERT_EQ(vq::create_cq(L.ctx, &ca, &c), 0);
    vq::qp_init_attr ia;
    ia.type = GetParam();
    ia.send_cq = ia.recv_cq = c;
    ia.srq = s;
    ia.lend_recv = true;
    vq::qp *q = nullptr;
    EXPECT_EQ(vq::create_qp(L.pd, &ia, &q), -FI_EINVAL);
    EXPECT_EQ(q, nullptr);
    EXPECT_EQ(vq::destroy_cq(c), 0);
    EXPECT_EQ(vq::destroy_srq(s), 0);
}

// A device that does not offer lent receives on a type (mlx5 today, every
// type) refuses such a QP instead of creating one with a receive queue.
TEST_P(LentReceives, CreationOnATypeTheDeviceDoesNotLendIsNotSupported)
{
    if (!L.ok)
        return;
    if (L.attr.lend_qp_types & (1u << static_cast<unsigned>(GetParam())))
        GTEST_SKIP() << "the device lends receives on this QP type";
    vq::cq_init_attr ca;
    ca.cqe = 16;
    vq::cq *c = nullptr;
    ASSERT_EQ(vq::create_cq(L.ctx, &ca, &c), 0);
    vq::qp_init_attr ia;
    ia.type = GetParam();
    ia.send_cq = ia.recv_cq = c;
    ia.lend_recv = true;
    ia.send_ops_flags = vq::OPS_SEND;
    vq::qp *q = nullptr;
    EXPECT_EQ(vq::create_qp(L.pd, &ia, &q), -FI_EOPNOTSUPP);
    EXPECT_EQ(q, nullptr);
    EXPECT_EQ(vq::destroy_cq(c), 0);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, LentReceives, ::testing::Values(qp_type::rc, qp_type::uc, qp_type::ud),
                         type_name);

/** Connected types only: what a sender must not do to a lent-receive QP. */
class LentReceivesConnected : public LentReceives {};

TEST_P(LentReceivesConnected, ASendOverMaxLendMsgFailsAtTheSenderAndNothingIsDelivered)
{
    if (!open()) {
        if (!skip_reason.empty())
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::uint32_t too_big = L.attr.max_lend_msg + 1;
    ASSERT_LE(too_big, src_size);
    // The receiver is polled meanwhile: over a network it is the one that
    // refuses the message (an invalid-request NAK), and only while it runs.
    std::atomic<bool> stop{false};
    std::atomic<int> delivered{0};
    std::thread receiver([&] {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!stop.load() && std::chrono::steady_clock::now() < end) {
            vq::wc w[8];
            int n = vq::poll_cq(cq(), 8, w);
            for (int k = 0; k < n; k++)
                delivered += w[k].status == wc_status::success;
        }
    });
    ASSERT_EQ(P->post(pq.index, {desc_for(0, {too_big, 0}, false)}), 0);
    auto done = P->wait_wcs(pq.index, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
    receiver.join();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, wc_status::rem_inv_req_err) << wc_str(done[0]);
    EXPECT_EQ(delivered.load(), 0);
}

TEST_P(LentReceivesConnected, SendsAboveTheRendezvousThresholdArriveThroughTheRing)
{
    // The peer's large SGE sends would use the driver's rendezvous (the
    // receiver copies from the sender's memory into a posted buffer); a
    // lent-receive QP has none, so they must come through its ring.
    ::setenv("SHUNT_SHM_RNDV_BYTES", "4096", 1);
    bool ok = open();
    ::unsetenv("SHUNT_SHM_RNDV_BYTES");
    if (!ok) {
        if (!skip_reason.empty())
            GTEST_SKIP() << skip_reason;
        return;
    }
    std::vector<msg_spec> msgs;
    for (std::uint32_t len : {4096u, 8192u, 16000u, max_len()})
        msgs.push_back({len, rnd(0, src_size - len)});
    verifier v{cq(), pattern, msgs};
    std::thread consumer([&] { v.run(30000); });
    std::vector<wr_desc> ds;
    for (std::uint32_t k = 0; k < msgs.size(); k++)
        ds.push_back(desc_for(k, msgs[k], false));
    EXPECT_EQ(P->post(pq.index, ds), 0);
    auto done = P->wait_wcs(pq.index, static_cast<std::uint32_t>(ds.size()), 20000);
    consumer.join();
    for (const vq::wc &x : done)
        EXPECT_EQ(x.status, wc_status::success) << wc_str(x);
    for (const std::string &e : v.errors)
        ADD_FAILURE() << e;
    EXPECT_EQ(v.seen.load(), msgs.size());
}

INSTANTIATE_TEST_SUITE_P(Connected, LentReceivesConnected, ::testing::Values(qp_type::rc, qp_type::uc), type_name);

/* ---- post_send_imm_inline: a header and a payload in one call ---- */

class SendImmInline : public conf_test, public ::testing::WithParamInterface<qp_type> {
protected:
    /** The pair both send_imm forms are tested on: a QP of the test's type
     *  with room for 512 inline bytes, a 64 KiB source region here and a
     *  destination region at the peer. @return false when the test ends
     *  here (no device, ops not claimed, or a failed step). */
    bool open_pair(conn &c, int &srcmr, reg_rep &dst)
    {
        if (!c.L.ok)
            return false;
        open_pair_steps(c, srcmr, dst);
        return !IsSkipped() && !HasFatalFailure();
    }

private:
    void open_pair_steps(conn &c, int &srcmr, reg_rep &dst)
    {
        const qp_type t = GetParam();
        CONF_REQUIRE_OPS(c.L.attr, t, vq::OPS_SEND_WITH_IMM);
        ASSERT_EQ(c.setup(t, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM, {0, 0, 1, 1, 512}, 0, {0, 0, 1, 1, 0}), 0);
        srcmr = c.L.reg(64 * 1024, vq::ACCESS_LOCAL_WRITE, false, rnd(1, ~0ull >> 1));
        ASSERT_EQ(c.P.reg(64 * 1024, vq::ACCESS_LOCAL_WRITE, false, 0, &dst), 0);
    }
};

TEST_P(SendImmInline, GatheredBuffersArriveConcatenatedWithTheirImmediate)
{
    conn c;
    int srcmr = -1;
    reg_rep dst{};
    if (!open_pair(c, srcmr, dst))
        return;
    const qp_type t = GetParam();
    if (t == qp_type::ud) {
        vq::data_buf b{c.L.mem(srcmr), 8};
        EXPECT_EQ(vq::post_send_imm_inline(c.qp(), 1, 7, &b, 1, 0), -FI_EINVAL) << "UD has no address here";
        return;
    }
    std::uint32_t mi = c.qp()->cap.max_inline_data;
    ASSERT_GE(mi, 512u);
    for (int it = 0; it < 40 && !HasFailure(); it++) {
        // Up to three pieces: a header, a payload, a trailer; sizes around
        // the one-slot bound (first exactly at its edges: nothing, one byte,
        // the bound itself and one past it, where a driver's one-slot branch
        // ends) and up to the inline limit.
        const std::uint32_t slot = c.L.attr.max_inline_slot;
        const std::uint32_t edge[] = {0, 1, slot ? slot - 1 : 0, slot, slot + 1};
        std::uint32_t total = it < 5   ? std::min(edge[it], mi)
                              : it < 8 ? static_cast<std::uint32_t>(rnd(0, slot))
                                       : static_cast<std::uint32_t>(rnd(0, mi));
        unsigned np = static_cast<unsigned>(rnd(1, 3));
        std::vector<vq::data_buf> bufs;
        std::vector<std::uint8_t> want;
        std::uint32_t left = total;
        for (unsigned k = 0; k < np; k++) {
            std::uint32_t l = k + 1 == np ? left : static_cast<std::uint32_t>(rnd(0, left));
            std::uint64_t off = rnd(0, 64 * 1024 - l);
            bufs.push_back({c.L.mem(srcmr) + off, l});
            want.insert(want.end(), c.L.mem(srcmr) + off, c.L.mem(srcmr) + off + l);
            left -= l;
        }
        ASSERT_EQ(c.P.post_recv(c.pq.index, 50 + it, {piece{dst.index, mi + 8, 0}}), 0);
        std::uint32_t imm = static_cast<std::uint32_t>(rnd(0, 0xffffffffu));
        unsigned fl = it % 3 == 0 ? vq::WR_SIGNALED : 0;
        ASSERT_EQ(vq::post_send_imm_inline(c.qp(), 9000 + it, imm, bufs.data(), bufs.size(), fl), 0);
        // The buffers may be reused at return: scribble over them.
        for (auto &b : bufs)
            if (b.length)
                std::memset(const_cast<void *>(b.addr), 0xee, b.length);
        auto r = c.P.wait_wcs(c.pq.index, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, wc_status::success) << wc_str(r[0]);
        EXPECT_EQ(r[0].byte_len, total);
        EXPECT_TRUE(r[0].wc_flags & vq::WC_WITH_IMM);
        EXPECT_EQ(r[0].imm_data, imm);
        EXPECT_EQ(c.P.read_mem(dst.index, 0, total), want) << "iteration " << it;
        if (fl) {
            auto s = c.L.wait_wcs(c.lq, 1);
            ASSERT_EQ(s.size(), 1u);
            EXPECT_EQ(s[0].wr_id, 9000u + it);
        }
        fill_pattern(c.L.mem(srcmr), 64 * 1024, rnd(1, ~0ull >> 1));
    }
    // The rules of the session it stands for.
    vq::data_buf big{c.L.mem(srcmr), mi + 1};
    EXPECT_EQ(vq::post_send_imm_inline(c.qp(), 1, 0, &big, 1, 0), -FI_EMSGSIZE);
    vq::data_buf bad{nullptr, 4};
    EXPECT_EQ(vq::post_send_imm_inline(c.qp(), 1, 0, &bad, 1, 0), -FI_EINVAL);
    // An empty piece, and an empty inline setter, need no address.
    vq::data_buf none{nullptr, 0};
    ASSERT_EQ(c.P.post_recv(c.pq.index, 97, {piece{dst.index, mi + 8, 0}}), 0);
    ASSERT_EQ(vq::post_send_imm_inline(c.qp(), 2, 6, &none, 1, 0), 0);
    ASSERT_EQ(c.P.post_recv(c.pq.index, 98, {piece{dst.index, mi + 8, 0}}), 0);
    vq::wr_start(c.qp());
    c.qp()->wr_id = 3;
    c.qp()->wr_flags = 0;
    vq::wr_send_imm(c.qp(), 7);
    vq::wr_set_inline_data(c.qp(), nullptr, 0);
    ASSERT_EQ(vq::wr_complete(c.qp()), 0);
    auto r = c.P.wait_wcs(c.pq.index, 2);
    ASSERT_EQ(r.size(), 2u);
    for (unsigned k = 0; k < 2; k++) {
        EXPECT_EQ(r[k].status, wc_status::success) << wc_str(r[k]);
        EXPECT_EQ(r[k].wr_id, 97u + k);
        EXPECT_EQ(r[k].byte_len, 0u);
        EXPECT_EQ(r[k].imm_data, 6u + k);
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SendImmInline, ::testing::Values(qp_type::rc, qp_type::uc, qp_type::ud),
                         type_name);

/* ---- post_send_imm_hdr_inline: a word and a payload in one call ---- */

class SendImmHdrInline : public SendImmInline {};

TEST_P(SendImmHdrInline, TheWordThenThePayloadArriveWithTheirImmediate)
{
    conn c;
    int srcmr = -1;
    reg_rep dst{};
    if (!open_pair(c, srcmr, dst))
        return;
    const qp_type t = GetParam();
    if (t == qp_type::ud) {
        EXPECT_EQ(vq::post_send_imm_hdr_inline(c.qp(), 1, 7, 0x1122, c.L.mem(srcmr), 8, 0), -FI_EINVAL)
            << "UD has no address here";
        return;
    }
    const std::uint32_t mi = c.qp()->cap.max_inline_data;
    ASSERT_GE(mi, 512u);
    for (int it = 0; it < 40 && !HasFailure(); it++) {
        // Payload lengths at the edges of one slot with the word in it
        // (where a driver's one-slot branch ends), then any up to the limit.
        const std::uint32_t slot = c.L.attr.max_inline_slot;
        const std::uint32_t room = slot > 8 ? slot - 8 : 0;
        const std::uint32_t edge[] = {0, 1, room ? room - 1 : 0, room, room + 1};
        std::uint32_t len = it < 5   ? std::min(edge[it], mi - 8)
                            : it < 8 ? static_cast<std::uint32_t>(rnd(0, room))
                                     : static_cast<std::uint32_t>(rnd(0, mi - 8));
        std::uint64_t off = rnd(0, 64 * 1024 - len);
        const std::uint8_t *src = c.L.mem(srcmr) + off;
        const std::uint64_t hdr = rnd(0, ~0ull);
        std::vector<std::uint8_t> want(8 + len);
        std::memcpy(want.data(), &hdr, 8);
        if (len)
            std::memcpy(want.data() + 8, src, len);
        ASSERT_EQ(c.P.post_recv(c.pq.index, 50 + it, {piece{dst.index, mi + 8, 0}}), 0);
        std::uint32_t imm = static_cast<std::uint32_t>(rnd(0, 0xffffffffu));
        unsigned fl = it % 3 == 0 ? vq::WR_SIGNALED : 0;
        ASSERT_EQ(vq::post_send_imm_hdr_inline(c.qp(), 9000 + it, imm, hdr, src, len, fl), 0);
        // The payload may be reused at return: scribble over it.
        if (len)
            std::memset(c.L.mem(srcmr) + off, 0xee, len);
        auto r = c.P.wait_wcs(c.pq.index, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, wc_status::success) << wc_str(r[0]);
        EXPECT_EQ(r[0].byte_len, len + 8);
        EXPECT_TRUE(r[0].wc_flags & vq::WC_WITH_IMM);
        EXPECT_EQ(r[0].imm_data, imm);
        EXPECT_EQ(c.P.read_mem(dst.index, 0, len + 8), want) << "iteration " << it << ", " << len << " bytes";
        if (fl) {
            auto s = c.L.wait_wcs(c.lq, 1);
            ASSERT_EQ(s.size(), 1u);
            EXPECT_EQ(s[0].wr_id, 9000u + it);
        }
        fill_pattern(c.L.mem(srcmr), 64 * 1024, rnd(1, ~0ull >> 1));
    }
    // The rules of post_send_imm_inline it stands for: the word counts.
    EXPECT_EQ(vq::post_send_imm_hdr_inline(c.qp(), 1, 0, 0, c.L.mem(srcmr), mi - 7, 0), -FI_EMSGSIZE);
    EXPECT_EQ(vq::post_send_imm_hdr_inline(c.qp(), 1, 0, 0, nullptr, 4, 0), -FI_EINVAL);
    // Nothing of a refused one arrived: the next is the next message.
    ASSERT_EQ(c.P.post_recv(c.pq.index, 99, {piece{dst.index, mi + 8, 0}}), 0);
    ASSERT_EQ(vq::post_send_imm_hdr_inline(c.qp(), 2, 5, 0x0102030405060708ull, nullptr, 0, 0), 0);
    auto r = c.P.wait_wcs(c.pq.index, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 99u);
    EXPECT_EQ(r[0].byte_len, 8u);
    EXPECT_EQ(r[0].imm_data, 5u);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SendImmHdrInline, ::testing::Values(qp_type::rc, qp_type::uc, qp_type::ud),
                         type_name);

} // namespace
} // namespace shunt::conf
