// Every error path of the posting API, each in its own test, between this
// process and a spawned peer: what wr_complete returns, that nothing of a
// failed or aborted batch is executed (target memory and receive queues
// untouched, no completion), remote violations (error completion, target
// untouched, QP in ERR), wrong QP state, full send queue, receive too small.
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>

#include "conf_harness.h"

namespace shunt::conf {
namespace {

using vq::qp_type;
using vq::wc_opcode;
using vq::wc_status;

constexpr std::size_t region = 64 * 1024;

/** A connected pair with a source region here and a pattern-filled target at the peer. */
struct errfix {
    conn c;
    int src = -1;
    reg_rep tgt{};
    std::uint64_t seed = 0x1234567;
    std::string skip;

    bool open(qp_type t, std::uint64_t ops, vq::qp_cap cap = {}, unsigned tgt_access = ACC_ALL_REMOTE,
              unsigned peer_qp_access = ~0u, vq::qp_cap peer_cap = {}, bool thread_domain = false)
    {
        if (!c.L.ok)
            return false;
        if (thread_domain && vq::alloc_td(c.L.ctx, &c.L.td) != 0) {
            ADD_FAILURE() << "alloc_td failed";
            return false;
        }
        std::uint64_t have = c.L.attr.ops[static_cast<unsigned>(t)];
        if ((have & ops) != ops) {
            skip = "device does not claim the operations this test needs (device_attr::ops)";
            return false;
        }
        int rc = c.setup(t, ops, cap, 0, peer_cap, -1, peer_qp_access);
        if (rc) {
            ADD_FAILURE() << "setup: " << rc;
            return false;
        }
        src = c.L.reg(region, ACC_ALL_REMOTE, false, 0xabcdef);
        if (src < 0 || c.P.reg(region, tgt_access, false, seed, &tgt) != 0) {
            ADD_FAILURE() << "registration failed";
            return false;
        }
        return true;
    }
    vq::qp *q() { return c.qp(); }
    std::uint64_t sa(std::size_t off = 0) { return c.L.addr(src, off); }
    std::uint32_t lkey() { return c.L.mr(src)->lkey; }

    /** The peer region still holds its initial pattern. */
    void expect_target_untouched(const char *why)
    {
        std::vector<std::uint8_t> want(region);
        fill_pattern(want.data(), region, seed);
        auto got = c.P.read_mem(tgt.index, 0, region);
        ASSERT_EQ(got.size(), region);
        for (std::size_t i = 0; i < region; i++)
            if (got[i] != want[i]) {
                ADD_FAILURE() << why << ": target memory modified at byte " << i;
                return;
            }
    }
    /** No completion here within @p ms. */
    void expect_no_local_completion(int ms = 150)
    {
        auto w = c.L.drain(c.lq, ms);
        EXPECT_TRUE(w.empty()) << "unexpected completion " << wc_str(w.front());
    }
    void expect_no_peer_completion(int ms = 100)
    {
        auto w = c.P.wait_wcs(c.pq.index, 0, static_cast<std::uint32_t>(ms));
        EXPECT_TRUE(w.empty()) << "unexpected completion at the peer " << wc_str(w.front());
    }
    /** Post a receive of @p len bytes at the peer at offset @p off of its region. */
    void peer_recv(std::uint64_t wr_id, std::uint64_t off, std::uint32_t len)
    {
        ASSERT_EQ(c.P.post_recv(c.pq.index, wr_id, {{tgt.index, len, off}}), 0);
    }
    /** The valid start of a batch: a write of 64 bytes at target offset 0 and a
     *  32-byte send (RC/UC); a 32-byte send (UD). Call after wr_start. */
    void valid_prefix()
    {
        if (c.type != qp_type::ud) {
            q()->wr_id = 1;
            q()->wr_flags = vq::WR_SIGNALED;
            vq::wr_rdma_write(q(), tgt.rkey, tgt.addr);
            vq::wr_set_sge(q(), lkey(), sa(0), 64);
        }
        q()->wr_id = 2;
        q()->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(q());
        vq::wr_set_sge(q(), lkey(), sa(100), 32);
        if (c.type == qp_type::ud)
            vq::wr_set_ud_addr(q(), c.L.o.ahs[c.ah], c.pq.qpn, c.qkey);
    }
    /** After a discarded batch the QP still works: one send of @p len arrives
     *  in the receive posted before (wr_id 500). */
    void expect_qp_still_works(std::uint32_t len = 20)
    {
        vq::wr_start(q());
        q()->wr_id = 77;
        q()->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(q());
        vq::wr_set_sge(q(), lkey(), sa(1000), len);
        if (c.type == qp_type::ud)
            vq::wr_set_ud_addr(q(), c.L.o.ahs[c.ah], c.pq.qpn, c.qkey);
        ASSERT_EQ(vq::wr_complete(q()), 0) << "the QP is unusable after a discarded batch";
        auto s = c.L.wait_wcs(c.lq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].wr_id, 77u) << "a completion of the discarded batch appeared";
        EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
        auto r = c.P.wait_wcs(c.pq.index, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].wr_id, 500u);
        std::uint32_t grh = (r[0].wc_flags & vq::WC_GRH) ? 40 : 0; // UD: a verbs device's GRH area
        EXPECT_EQ(r[0].byte_len, len + grh) << "the receive was consumed by the discarded batch's send";
    }
};

/* ---------------- Batch discarded on error: one test per error ---------------- */

struct batch_case {
    const char *name;
    qp_type type;
    std::uint64_t ops;   ///< local QP's send_ops_flags
    int want;            ///< wr_complete's result (any_error: any negative code)
    std::function<void(errfix &)> fault; ///< appended after the valid prefix (before a valid suffix)
    bool suffix = true;  ///< append a valid write after the fault
    bool prefix = true;
};

constexpr int any_error = 1;

std::uint64_t rc_ops = vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_ATOMIC_FETCH_AND_ADD;

/** Bind a new window over 64 bytes of the fixture's source region with
 *  access @p access and the window's next key with @p key_xor applied. */
void bind_new_window(errfix &f, std::uint32_t key_xor, unsigned access)
{
    vq::mw *w = nullptr;
    ASSERT_EQ(vq::alloc_mw(f.c.L.pd, vq::mw_type::type2, &w), 0);
    f.c.L.o.mws.push_back(w);
    const vq::mw_bind_info bi{f.c.L.o.mrs[static_cast<std::size_t>(f.src)].mr, f.sa(0), 64, access};
    vq::wr_bind_mw(f.q(), w, vq::inc_rkey(w->rkey) ^ key_xor, &bi);
}

std::vector<batch_case> batch_cases()
{
    using F = errfix;
    return {
        {"UnalignedAtomicAddress", qp_type::rc, rc_ops, -FI_EINVAL,
         [](F &f) {
             vq::wr_atomic_fetch_add(f.q(), f.tgt.rkey, f.tgt.addr + 4, 1);
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(2000), 8);
         }},
        {"MoreSgesThanMaxSendSge", qp_type::rc, rc_ops, -FI_E2BIG,
         [](F &f) {
             std::vector<vq::sge> s(f.q()->cap.max_send_sge + 1, vq::sge{f.sa(0), 1, f.lkey()});
             vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr + 256);
             vq::wr_set_sge_list(f.q(), s.size(), s.data());
         }},
        {"InlineDataOverMaxInlineData", qp_type::rc, rc_ops, -FI_EMSGSIZE,
         [](F &f) {
             vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr + 256);
             vq::wr_set_inline_data(f.q(), f.c.L.mem(f.src), f.q()->cap.max_inline_data + 1);
         }},
        {"InlineDataListOverMaxInlineData", qp_type::rc, rc_ops, -FI_EMSGSIZE,
         [](F &f) {
             std::uint32_t h = f.q()->cap.max_inline_data / 2 + 1;
             vq::data_buf b[2] = {{f.c.L.mem(f.src), h}, {f.c.L.mem(f.src) + 4096, h}};
             vq::wr_send(f.q());
             vq::wr_set_inline_data_list(f.q(), 2, b);
         }},
        {"OperationNotInSendOpsFlags", qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE, -FI_EOPNOTSUPP,
         [](F &f) {
             vq::wr_rdma_read(f.q(), f.tgt.rkey, f.tgt.addr);
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(2000), 8);
         }},
        {"InlineDataOnRdmaRead", qp_type::rc, rc_ops | vq::OPS_RDMA_READ, -FI_EOPNOTSUPP,
         [](F &f) {
             vq::wr_rdma_read(f.q(), f.tgt.rkey, f.tgt.addr);
             vq::wr_set_inline_data(f.q(), f.c.L.mem(f.src), 8);
         }},
        {"SetUdAddrOnRc", qp_type::rc, rc_ops, -FI_EOPNOTSUPP,
         [](F &f) {
             vq::wr_send(f.q());
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 8);
             vq::ah *a = nullptr;
             vq::ah_attr at;
             at.dest = f.c.P.addr();
             ASSERT_EQ(vq::create_ah(f.c.L.pd, &at, &a), 0);
             f.c.L.o.ahs.push_back(a);
             vq::wr_set_ud_addr(f.q(), a, f.c.pq.qpn, 0);
         }},
        {"SetXrcSrqnOnRc", qp_type::rc, rc_ops, -FI_EOPNOTSUPP,
         [](F &f) {
             vq::wr_send(f.q());
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 8);
             vq::wr_set_xrc_srqn(f.q(), 1);
         }},
        {"MissingSetUdAddrOnLastUdRequest", qp_type::ud, vq::OPS_SEND, -FI_EINVAL,
         [](F &f) {
             vq::wr_send(f.q());
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 8);
         },
         false},
        {"MissingSetUdAddrBeforeTheNextUdRequest", qp_type::ud, vq::OPS_SEND, -FI_EINVAL,
         [](F &f) {
             vq::wr_send(f.q());
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 8);
             f.q()->wr_id = 3;
             vq::wr_send(f.q());
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 8);
             vq::wr_set_ud_addr(f.q(), f.c.L.o.ahs[f.c.ah], f.c.pq.qpn, f.c.qkey);
         },
         false},
        {"UdMessageOverTheMtu", qp_type::ud, vq::OPS_SEND, -FI_EMSGSIZE,
         [](F &f) {
             vq::wr_send(f.q());
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), f.c.L.attr.ud_mtu + 1);
             vq::wr_set_ud_addr(f.q(), f.c.L.o.ahs[f.c.ah], f.c.pq.qpn, f.c.qkey);
         },
         false},
        {"DataSetterCalledTwice", qp_type::rc, rc_ops, -FI_EINVAL,
         [](F &f) {
             vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr + 256);
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 8);
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(8), 8);
         }},
        {"SetterBeforeAnyBuilder", qp_type::rc, rc_ops, -FI_EINVAL,
         [](F &f) { vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 8); }, true, false},
        {"UnknownWrFlags", qp_type::rc, rc_ops, -FI_EINVAL,
         [](F &f) {
             f.q()->wr_flags = 1u << 20;
             vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr + 256);
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 8);
             f.q()->wr_flags = 0;
         }},
        {"NullSgeListWithNonZeroCount", qp_type::rc, rc_ops, -FI_EINVAL,
         [](F &f) {
             vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr + 256);
             vq::wr_set_sge_list(f.q(), 2, nullptr);
         }},
        {"NullInlineListWithNonZeroCount", qp_type::rc, rc_ops, -FI_EINVAL,
         [](F &f) {
             vq::wr_send(f.q());
             vq::wr_set_inline_data_list(f.q(), 2, nullptr);
         }},
        {"UnknownFlushType", qp_type::rc, rc_ops | vq::OPS_FLUSH, -FI_EINVAL,
         [](F &f) { vq::wr_flush(f.q(), f.tgt.rkey, f.tgt.addr, 64, 7, vq::FLUSH_RANGE); }},
        {"RcMessageOverMaxMsgSz", qp_type::rc, rc_ops, -FI_EMSGSIZE,
         [](F &f) {
             // Lengths are checked against max_msg_sz before any lkey is looked at.
             std::uint32_t half = f.c.L.attr.max_msg_sz / 2 + 1;
             vq::sge s[2] = {{f.sa(0), half, f.lkey()}, {f.sa(0), half, f.lkey()}};
             vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr);
             vq::wr_set_sge_list(f.q(), 2, s);
         }},
        {"InlineDataOnAtomic", qp_type::rc, rc_ops, any_error,
         [](F &f) {
             vq::wr_atomic_fetch_add(f.q(), f.tgt.rkey, f.tgt.addr, 1);
             vq::wr_set_inline_data(f.q(), f.c.L.mem(f.src), 8);
         }},
        {"AtomicResultSgeNotEightBytes", qp_type::rc, rc_ops, any_error,
         [](F &f) {
             vq::wr_atomic_fetch_add(f.q(), f.tgt.rkey, f.tgt.addr, 1);
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(2000), 4);
         }},
        // A bind's key keeps the window's index bits (inc_rkey): another's
        // is the caller's mistake, refused when the batch is posted.
        {"BindWithAKeyOfOtherIndexBits", qp_type::rc, rc_ops | vq::OPS_BIND_MW, -FI_EINVAL,
         [](F &f) { bind_new_window(f, 0x100, vq::ACCESS_REMOTE_READ); }},
        {"BindWithUnknownAccessBits", qp_type::rc, rc_ops | vq::OPS_BIND_MW, -FI_EINVAL,
         [](F &f) { bind_new_window(f, 0, vq::ACCESS_REMOTE_READ | 1u << 20); }},
        {"TsoWithZeroMss", qp_type::ud, vq::OPS_SEND | vq::OPS_TSO, -FI_EINVAL,
         [](F &f) {
             std::uint8_t hdr[54] = {};
             vq::wr_send_tso(f.q(), hdr, sizeof hdr, 0);
             vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 1000);
             vq::wr_set_ud_addr(f.q(), f.c.L.o.ahs[f.c.ah], f.c.pq.qpn, f.c.qkey);
         },
         false},
    };
}

void PrintTo(const batch_case &c, std::ostream *os) { *os << c.name; }

class BatchDiscarded : public conf_test, public ::testing::WithParamInterface<batch_case> {};

void batch_discarded_body(const batch_case &bc)
{
    errfix f;
    if (!f.open(bc.type, bc.ops, {0, 0, 4, 1, 64}))
        return;
    f.peer_recv(500, 8192, 4096); // would be consumed by the batch's send
    vq::wr_start(f.q());
    if (bc.prefix)
        f.valid_prefix();
    f.q()->wr_id = 3;
    f.q()->wr_flags = vq::WR_SIGNALED;
    bc.fault(f);
    if (::testing::Test::HasFatalFailure()) {
        vq::wr_abort(f.q());
        return;
    }
    if (bc.suffix) {
        f.q()->wr_id = 4;
        f.q()->wr_flags = vq::WR_SIGNALED;
        vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr + 1024);
        vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 64);
    }
    int rc = vq::wr_complete(f.q());
    if (bc.want == any_error) {
        EXPECT_LT(rc, 0) << "wr_complete accepted the batch";
    } else {
        EXPECT_EQ(rc, bc.want);
    }
    // Short waits: the probe that follows is the proof. Completions come in
    // order, so a request of the batch that ran would complete (locally, or by
    // taking receive 500 at the peer) before the probe, which checks both.
    f.expect_no_local_completion(30);
    f.expect_target_untouched("discarded batch");
    f.expect_no_peer_completion(30);
    f.expect_qp_still_works();
}

TEST_P(BatchDiscarded, NothingOfTheBatchIsExecuted)
{
    const batch_case &bc = GetParam();
    {
        local_side L;
        ASSERT_TRUE(L.ok);
        std::uint64_t have = L.attr.ops[static_cast<unsigned>(bc.type)];
        if ((have & bc.ops) != bc.ops)
            GTEST_SKIP() << "device does not claim ops 0x" << std::hex << (bc.ops & ~have) << " for this QP type";
    }
    // In a child process (gtest re-executes this binary), so that a driver bug
    // that crashes (a call through a bad function pointer) fails this test only.
    EXPECT_EXIT(
        {
            batch_discarded_body(bc);
            std::fflush(stdout);
            std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
        },
        ::testing::ExitedWithCode(0), "")
        << "the child failed or crashed (its failures are printed above)";
}

INSTANTIATE_TEST_SUITE_P(Conf, BatchDiscarded, ::testing::ValuesIn(batch_cases()),
                         [](const ::testing::TestParamInfo<batch_case> &i) { return std::string(i.param.name); });

/* ---------------- wr_abort ---------------- */

class Errors : public conf_test {};

TEST_F(Errors, WrAbortDiscardsEverythingSinceWrStart)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rc_ops));
    f.peer_recv(500, 8192, 4096);
    vq::wr_start(f.q());
    f.valid_prefix();
    f.q()->wr_id = 9;
    f.q()->wr_flags = 0;
    vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr + 4096);
    vq::wr_set_inline_data(f.q(), f.c.L.mem(f.src), 16);
    vq::wr_abort(f.q());
    f.expect_no_local_completion();
    f.expect_target_untouched("aborted batch");
    f.expect_no_peer_completion();
    f.expect_qp_still_works();
}

TEST_F(Errors, WrAbortClearsALatchedError)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rc_ops));
    f.peer_recv(500, 8192, 4096);
    vq::wr_start(f.q());
    f.valid_prefix();
    vq::wr_atomic_fetch_add(f.q(), f.tgt.rkey, f.tgt.addr + 1, 1); // latches -FI_EINVAL
    vq::wr_abort(f.q());
    f.expect_target_untouched("aborted batch");
    f.expect_qp_still_works();
}

/** Call @p body; when it has not returned after @p secs the process ends
 *  with a message naming @p what (a thread spinning on a lock it holds
 *  cannot be interrupted, and the suite's timeout is minutes away). */
template <class F>
void within(int secs, const char *what, F body)
{
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::thread dog([&] {
        std::unique_lock l(m);
        if (!cv.wait_for(l, std::chrono::seconds(secs), [&] { return done; })) {
            std::fprintf(stderr, "FAILED: %s did not return within %d s (hung)\n", what, secs);
            std::_Exit(1);
        }
    });
    body();
    {
        std::lock_guard l(m);
        done = true;
    }
    cv.notify_one();
    dog.join();
}

/** wr_start, one valid request, then single-call posts from the same thread:
 *  on a locked QP each would wait for the lock the open session holds; with
 *  a thread domain each would rewrite the open batch. */
void single_calls_inside_the_session(errfix &f)
{
    vq::wr_start(f.q());
    f.valid_prefix();
    const std::uint8_t *src = f.c.L.mem(f.src);
    EXPECT_EQ(vq::post_send(f.q(), 7, src, 8, f.lkey(), vq::WR_INLINE), -FI_EOPBADSTATE);
    EXPECT_EQ(vq::post_send(f.q(), 8, src, 64, f.lkey(), vq::WR_SIGNALED), -FI_EOPBADSTATE);
    EXPECT_EQ(vq::post_write(f.q(), 9, src, 8, f.lkey(), f.tgt.rkey, f.tgt.addr, vq::WR_SIGNALED),
              -FI_EOPBADSTATE);
    EXPECT_EQ(vq::wr_complete(f.q()), -FI_EOPBADSTATE) << "the open batch fails with the misuse";
}

/** The session checks on a locked QP and on one with a thread domain (param
 *  true): the same bodies, only the open differs. A QP with a thread domain
 *  has no lock to wait for: without the check a single-call post would
 *  rewrite the open batch (and the inline send of a few bytes would ring
 *  the doorbell over it). It fails like on a locked QP. */
class Session : public conf_test, public ::testing::WithParamInterface<bool> {
protected:
    bool open(errfix &f) { return f.open(qp_type::rc, rc_ops, {}, ACC_ALL_REMOTE, ~0u, {}, GetParam()); }
};

INSTANTIATE_TEST_SUITE_P(Conf, Session, ::testing::Bool(), [](const ::testing::TestParamInfo<bool> &i) {
    return std::string(i.param ? "ThreadDomain" : "Locked");
});

#ifdef NDEBUG
TEST_P(Session, SingleCallPostInsideTheOpenSessionFailsTheCallAndTheBatch)
{
    errfix f;
    ASSERT_TRUE(open(f)) << f.skip;
    f.peer_recv(500, 8192, 4096);
    within(10, "a single-call post inside the open session", [&] { single_calls_inside_the_session(f); });
    f.expect_no_local_completion();
    f.expect_target_untouched("failed batch");
    f.expect_no_peer_completion();
    f.expect_qp_still_works();
    // The single-call posts work again once the session is closed.
    f.peer_recv(501, 16384, 4096);
    ASSERT_EQ(vq::post_send(f.q(), 78, f.c.L.mem(f.src), 8, f.lkey(), vq::WR_INLINE | vq::WR_SIGNALED), 0);
    auto s = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].wr_id, 78u);
    EXPECT_EQ(s[0].status, wc_status::success) << wc_str(s[0]);
    auto r = f.c.P.wait_wcs(f.c.pq.index, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 501u);
    EXPECT_EQ(r[0].byte_len, 8u);
}
#else
// Debug builds: the misuse is an assertion (SIGALRM instead means it hung).
TEST_P(Session, SingleCallPostInsideTheOpenSessionAsserts)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    errfix f;
    ASSERT_TRUE(open(f)) << f.skip;
    EXPECT_DEATH(
        {
            alarm(10);
            single_calls_inside_the_session(f);
        },
        "session API misuse");
}
#endif

/* The rest of the session misuse on a locked QP: a second wr_start would
 * wait for the lock the session holds; an unbalanced wr_complete or wr_abort
 * would release a lock it does not hold. */
#ifdef NDEBUG
TEST_F(Errors, WrStartTwiceFailsTheBatchWithoutHanging)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rc_ops)) << f.skip;
    f.peer_recv(500, 8192, 4096);
    within(10, "a second wr_start inside the open session", [&] {
        vq::wr_start(f.q());
        f.valid_prefix();
        vq::wr_start(f.q());
        EXPECT_EQ(vq::wr_complete(f.q()), -FI_EOPBADSTATE) << "the open batch fails with the misuse";
    });
    f.expect_no_local_completion();
    f.expect_target_untouched("failed batch");
    f.expect_no_peer_completion();
    f.expect_qp_still_works();
}

TEST_F(Errors, UnbalancedCompleteAndAbortLeaveTheNextBatchClean)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rc_ops)) << f.skip;
    f.peer_recv(500, 8192, 4096);
    within(10, "an unbalanced wr_complete or wr_abort", [&] {
        EXPECT_EQ(vq::wr_complete(f.q()), -FI_EOPBADSTATE);
        vq::wr_abort(f.q());
        vq::wr_abort(f.q());
        EXPECT_EQ(vq::wr_complete(f.q()), -FI_EOPBADSTATE);
    });
    f.expect_no_local_completion();
    f.expect_qp_still_works();
}
#else
// On a QP with a thread domain (mlx5, ethdev) these are checked in a debug
// build only: the release build's check would cost every batch (shunt_wr(3)).
TEST_P(Session, WrStartTwiceAsserts)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    errfix f;
    ASSERT_TRUE(open(f)) << f.skip;
    EXPECT_DEATH(
        {
            alarm(10);
            vq::wr_start(f.q());
            vq::wr_start(f.q());
        },
        "session API misuse");
}

TEST_P(Session, UnbalancedCompleteAsserts)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    errfix f;
    ASSERT_TRUE(open(f)) << f.skip;
    EXPECT_DEATH(
        {
            alarm(10);
            (void)vq::wr_complete(f.q());
        },
        "session API misuse");
}

// A balanced batch first: the misuse is the second wr_abort. (A locked QP's
// wr_abort checks the owner word UnbalancedCompleteAsserts checks; the
// release build's UnbalancedCompleteAndAbortLeaveTheNextBatchClean runs it.)
TEST_F(Errors, UnbalancedAbortOnAThreadDomainQpAsserts)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rc_ops, {}, ACC_ALL_REMOTE, ~0u, {}, true)) << f.skip;
    EXPECT_DEATH(
        {
            alarm(10);
            vq::wr_start(f.q());
            vq::wr_abort(f.q());
            vq::wr_abort(f.q());
        },
        "session API misuse");
}
#endif

TEST_F(Errors, EmptyBatchCompletesWithNothing)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rc_ops));
    vq::wr_start(f.q());
    EXPECT_EQ(vq::wr_complete(f.q()), 0);
    f.expect_no_local_completion(50);
}

/* ---------------- Remote violations (RC) ---------------- */

/** Post one unsignaled RDMA write of @p len bytes to (rkey, raddr): it must
 *  complete with rem_access_err, leave the target untouched, move the QP to
 *  ERR, and flush the next request. */
void expect_remote_violation(errfix &f, std::uint8_t op, std::uint32_t rkey, std::uint64_t raddr, std::uint32_t len)
{
    std::vector<std::uint8_t> local_before(f.c.L.mem(f.src), f.c.L.mem(f.src) + region);
    wr_desc d;
    d.op = op;
    d.wr_id = 99;
    d.flags = 0; // unsignaled: an error completes anyway
    d.rkey = rkey;
    d.raddr = raddr;
    d.data = DATA_SGE;
    d.npieces = 1;
    d.pieces[0] = {static_cast<std::uint32_t>(f.src), len, op == OP_READ ? 8192u : 0u};
    if (op == OP_FAA || op == OP_CAS) {
        d.a0 = 5;
        d.a1 = 6;
    }
    ASSERT_EQ(f.c.L.post(f.c.lq, {d}), 0);
    auto w = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(w.size(), 1u) << "an unsignaled request that fails must complete";
    EXPECT_EQ(w[0].wr_id, 99u);
    EXPECT_EQ(w[0].status, wc_status::rem_access_err) << wc_str(w[0]);
    EXPECT_EQ(vq::get_qp_state(f.q()), vq::qp_state::err) << "an RC error moves the QP to ERR";
    f.expect_target_untouched("remote violation");
    EXPECT_EQ(std::memcmp(local_before.data(), f.c.L.mem(f.src), region), 0)
        << "local memory changed by a failed request";
    // The next request is flushed.
    wr_desc n;
    n.op = OP_WRITE;
    n.wr_id = 100;
    n.flags = vq::WR_SIGNALED;
    n.rkey = f.tgt.rkey;
    n.raddr = f.tgt.addr;
    n.data = DATA_SGE;
    n.npieces = 1;
    n.pieces[0] = {static_cast<std::uint32_t>(f.src), 64, 0};
    EXPECT_EQ(f.c.L.post(f.c.lq, {n}), 0) << "posting in ERR is accepted (and flushed)";
    auto fl = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(fl.size(), 1u);
    EXPECT_EQ(fl[0].wr_id, 100u);
    EXPECT_EQ(fl[0].status, wc_status::wr_flush_err) << wc_str(fl[0]);
    f.expect_target_untouched("flushed write");
}

constexpr std::uint64_t rdma_ops = vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ |
                                   vq::OPS_ATOMIC_FETCH_AND_ADD | vq::OPS_ATOMIC_CMP_AND_SWP;

TEST_F(Errors, RemoteWriteWithBadRkeyIsRemoteAccessError)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    expect_remote_violation(f, OP_WRITE, f.tgt.rkey ^ 0x00ab0000, f.tgt.addr, 64);
}

TEST_F(Errors, RemoteWriteCrossingTheRegionEndWritesNothing)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    expect_remote_violation(f, OP_WRITE, f.tgt.rkey, f.tgt.addr + region - 100, 4096);
}

TEST_F(Errors, RemoteWriteBeforeTheRegionStartWritesNothing)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    expect_remote_violation(f, OP_WRITE, f.tgt.rkey, f.tgt.addr - 64, 128);
}

TEST_F(Errors, RemoteWriteWithAddressOverflowWritesNothing)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    expect_remote_violation(f, OP_WRITE, f.tgt.rkey, ~0ull - 16, 64);
}

TEST_F(Errors, RemoteWriteWithoutRemoteWriteAccess)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops, {}, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_READ));
    expect_remote_violation(f, OP_WRITE, f.tgt.rkey, f.tgt.addr, 64);
}

TEST_F(Errors, RemoteReadWithoutRemoteReadAccess)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops, {}, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE));
    expect_remote_violation(f, OP_READ, f.tgt.rkey, f.tgt.addr, 64);
}

TEST_F(Errors, RemoteReadPastTheRegionEnd)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    expect_remote_violation(f, OP_READ, f.tgt.rkey, f.tgt.addr + region - 8, 64);
}

TEST_F(Errors, RemoteAtomicWithoutRemoteAtomicAccess)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops, {}, vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_WRITE |
                                                        vq::ACCESS_REMOTE_READ));
    expect_remote_violation(f, OP_FAA, f.tgt.rkey, f.tgt.addr, 8);
}

TEST_F(Errors, RemoteCompareSwapPastTheRegionEnd)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    expect_remote_violation(f, OP_CAS, f.tgt.rkey, f.tgt.addr + region, 8);
}

TEST_F(Errors, RemoteWriteToADeregisteredRegion)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    ASSERT_EQ(f.c.P.dereg(f.tgt.index), 0);
    expect_remote_violation(f, OP_WRITE, f.tgt.rkey, f.tgt.addr, 64);
}

TEST_F(Errors, ResponderQpAccessFlagsDenyRemoteWrite)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops, {}, ACC_ALL_REMOTE, vq::ACCESS_REMOTE_READ));
    expect_remote_violation(f, OP_WRITE, f.tgt.rkey, f.tgt.addr, 64);
}

TEST_F(Errors, ResponderQpAccessFlagsDenyRemoteAtomic)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops, {}, ACC_ALL_REMOTE, vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_WRITE));
    expect_remote_violation(f, OP_FAA, f.tgt.rkey, f.tgt.addr, 8);
}

/* ---------------- Local protection ---------------- */

void expect_local_protection(errfix &f, std::uint32_t lkey, std::uint64_t addr, std::uint32_t len)
{
    vq::wr_start(f.q());
    f.q()->wr_id = 55;
    f.q()->wr_flags = 0;
    vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr);
    vq::wr_set_sge(f.q(), lkey, addr, len);
    ASSERT_EQ(vq::wr_complete(f.q()), 0) << "lkeys are checked when the request executes";
    auto w = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 55u);
    EXPECT_EQ(w[0].status, wc_status::loc_prot_err) << wc_str(w[0]);
    f.expect_target_untouched("local protection error");
}

TEST_F(Errors, BadLkeyIsLocalProtectionError)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    expect_local_protection(f, f.lkey() ^ 0x00770000, f.sa(0), 64);
}

TEST_F(Errors, SgeOutsideItsRegionIsLocalProtectionError)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    expect_local_protection(f, f.lkey(), f.sa(region - 16), 64);
}

TEST_F(Errors, ReadIntoRegionWithoutLocalWriteIsLocalProtectionError)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    int ro = f.c.L.reg(4096, 0, false, 0x99);
    ASSERT_GE(ro, 0);
    std::vector<std::uint8_t> before(f.c.L.mem(ro), f.c.L.mem(ro) + 4096);
    vq::wr_start(f.q());
    f.q()->wr_id = 56;
    f.q()->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_read(f.q(), f.tgt.rkey, f.tgt.addr);
    vq::wr_set_sge(f.q(), f.c.L.mr(ro)->lkey, f.c.L.addr(ro), 64);
    ASSERT_EQ(vq::wr_complete(f.q()), 0);
    auto w = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::loc_prot_err) << wc_str(w[0]);
    EXPECT_EQ(std::memcmp(before.data(), f.c.L.mem(ro), 4096), 0) << "read wrote into a read-only region";
}

/* ---------------- Wrong QP state ---------------- */

TEST_F(Errors, PostingBeforeRtsIsBadState)
{
    local_side L;
    ASSERT_TRUE(L.ok);
    unsigned q;
    ASSERT_EQ(L.create_qp(qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE, {}, &q), 0);
    int m = L.reg(4096, vq::ACCESS_LOCAL_WRITE);
    auto try_post = [&] {
        vq::wr_start(L.qp(q));
        L.qp(q)->wr_id = 1;
        L.qp(q)->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(L.qp(q));
        vq::wr_set_sge(L.qp(q), L.mr(m)->lkey, L.addr(m), 16);
        return vq::wr_complete(L.qp(q));
    };
    EXPECT_EQ(vq::get_qp_state(L.qp(q)), vq::qp_state::reset);
    EXPECT_EQ(try_post(), -FI_EOPBADSTATE) << "RESET";
    EXPECT_EQ(vq::post_send(L.qp(q), 1, L.mem(m), 16, L.mr(m)->lkey, 0), -FI_EOPBADSTATE);
    EXPECT_EQ(vq::post_recv(L.qp(q), 1, L.addr(m), 16, L.mr(m)->lkey), -FI_EOPBADSTATE) << "receive in RESET";
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    ASSERT_EQ(vq::modify_qp(L.qp(q), &a, vq::QP_ATTR_STATE), 0);
    EXPECT_EQ(try_post(), -FI_EOPBADSTATE) << "INIT";
    EXPECT_EQ(vq::post_recv(L.qp(q), 1, L.addr(m), 16, L.mr(m)->lkey), 0) << "receives are allowed from INIT";
    // RTR needs a peer: use a second local QP as the destination.
    unsigned q2;
    ASSERT_EQ(L.create_qp(qp_type::rc, vq::OPS_SEND, {}, &q2), 0);
    a.state = vq::qp_state::rtr;
    a.dest = L.ctx->addr;
    a.dest_qp_num = L.qp(q2)->qp_num;
    ASSERT_EQ(vq::modify_qp(L.qp(q), &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN), 0);
    EXPECT_EQ(try_post(), -FI_EOPBADSTATE) << "RTR";
    EXPECT_TRUE(L.drain(q, 50).empty());
}

TEST_F(Errors, InvalidStateTransitionsAreRejected)
{
    local_side L;
    ASSERT_TRUE(L.ok);
    unsigned q;
    ASSERT_EQ(L.create_qp(qp_type::rc, vq::OPS_SEND, {}, &q), 0);
    vq::qp_attr a;
    a.state = vq::qp_state::rts;
    EXPECT_EQ(vq::modify_qp(L.qp(q), &a, vq::QP_ATTR_STATE), -FI_EINVAL) << "RESET -> RTS";
    a.state = vq::qp_state::rtr;
    a.dest = L.ctx->addr;
    a.dest_qp_num = L.qp(q)->qp_num;
    EXPECT_EQ(vq::modify_qp(L.qp(q), &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN), -FI_EINVAL)
        << "RESET -> RTR";
    a.state = vq::qp_state::init;
    ASSERT_EQ(vq::modify_qp(L.qp(q), &a, vq::QP_ATTR_STATE), 0);
    a.state = vq::qp_state::rts;
    EXPECT_EQ(vq::modify_qp(L.qp(q), &a, vq::QP_ATTR_STATE), -FI_EINVAL) << "INIT -> RTS";
    a.state = vq::qp_state::rtr;
    EXPECT_EQ(vq::modify_qp(L.qp(q), &a, vq::QP_ATTR_STATE), -FI_EINVAL) << "RTR without AV / DEST_QPN";
    EXPECT_EQ(vq::get_qp_state(L.qp(q)), vq::qp_state::init) << "a failed modify changes nothing";
}

TEST_F(Errors, RtrToANonexistentPeerQpFails)
{
    CONF_REQUIRE_SHM("a device on a wire cannot tell at RTR whether the peer QP exists (requests to it end "
                     "in retry_exc_err)");
    conn c;
    ASSERT_EQ(c.setup(qp_type::rc, vq::OPS_SEND), 0);
    unsigned q;
    ASSERT_EQ(c.L.create_qp(qp_type::rc, vq::OPS_SEND, {}, &q), 0);
    vq::qp_attr a;
    a.state = vq::qp_state::init;
    ASSERT_EQ(vq::modify_qp(c.L.qp(q), &a, vq::QP_ATTR_STATE), 0);
    a.state = vq::qp_state::rtr;
    a.dest = c.P.addr();
    a.dest_qp_num = c.pq.qpn + 1000;
    EXPECT_EQ(vq::modify_qp(c.L.qp(q), &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN), -FI_ENOENT);
    vq::dev_addr bogus{};
    const char name[] = "shunt-shm-nonexistent-1";
    bogus.len = sizeof name - 1;
    std::memcpy(bogus.raw, name, bogus.len);
    a.dest = bogus;
    a.dest_qp_num = c.pq.qpn;
    EXPECT_EQ(vq::modify_qp(c.L.qp(q), &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN), -FI_ENOENT);
}

TEST_F(Errors, PostingInErrFlushesEveryRequestAndReceive)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops));
    ASSERT_EQ(vq::post_recv(f.q(), 71, f.sa(0), 64, f.lkey()), 0);
    ASSERT_EQ(vq::post_recv(f.q(), 72, f.sa(64), 64, f.lkey()), 0);
    vq::qp_attr a;
    a.state = vq::qp_state::err;
    ASSERT_EQ(vq::modify_qp(f.q(), &a, vq::QP_ATTR_STATE), 0);
    auto w = f.c.L.wait_wcs(f.c.lq, 2);
    ASSERT_EQ(w.size(), 2u);
    for (auto &x : w) {
        EXPECT_EQ(x.status, wc_status::wr_flush_err) << wc_str(x);
    }
    EXPECT_EQ(w[0].wr_id, 71u);
    EXPECT_EQ(w[1].wr_id, 72u);
    vq::wr_start(f.q());
    for (int i = 0; i < 3; i++) {
        f.q()->wr_id = 80 + static_cast<std::uint64_t>(i);
        f.q()->wr_flags = i == 1 ? 0 : vq::WR_SIGNALED; // flushed even when unsignaled
        vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr);
        vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 64);
    }
    ASSERT_EQ(vq::wr_complete(f.q()), 0);
    auto fl = f.c.L.wait_wcs(f.c.lq, 3);
    ASSERT_EQ(fl.size(), 3u);
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(fl[static_cast<std::size_t>(i)].wr_id, 80u + static_cast<unsigned>(i));
        EXPECT_EQ(fl[static_cast<std::size_t>(i)].status, wc_status::wr_flush_err);
    }
    ASSERT_EQ(vq::post_recv(f.q(), 73, f.sa(0), 64, f.lkey()), 0);
    auto r = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 73u);
    EXPECT_EQ(r[0].status, wc_status::wr_flush_err);
    f.expect_target_untouched("flushed writes");
}

/* ---------------- Inline limit ---------------- */

TEST_F(Errors, InlineExactlyAtTheLimitIsAcceptedAndOneMoreIsNot)
{
    errfix f;
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops, {0, 0, 1, 1, 200}));
    std::uint32_t mi = f.q()->cap.max_inline_data;
    ASSERT_GE(mi, 200u) << "asked for 200 bytes of inline data";
    vq::wr_start(f.q());
    f.q()->wr_id = 1;
    f.q()->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr);
    vq::wr_set_inline_data(f.q(), f.c.L.mem(f.src), mi + 1);
    EXPECT_EQ(vq::wr_complete(f.q()), -FI_EMSGSIZE);
    f.expect_no_local_completion(50);
    f.expect_target_untouched("inline over the limit");
    vq::wr_start(f.q());
    vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr);
    vq::wr_set_inline_data(f.q(), f.c.L.mem(f.src), mi);
    ASSERT_EQ(vq::wr_complete(f.q()), 0);
    auto w = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::success);
    auto got = f.c.P.read_mem(f.tgt.index, 0, mi);
    EXPECT_EQ(std::memcmp(got.data(), f.c.L.mem(f.src), mi), 0);
}

/* ---------------- Full send queue ---------------- */

TEST_F(Errors, FullSendQueueIsEagainAndEarlierBatchesStillComplete)
{
    errfix f;
    // Sends the peer cannot take (no receive posted, messages far larger than any ring)
    // stay outstanding, so the send queue fills.
    ASSERT_TRUE(f.open(qp_type::rc, rdma_ops, {8, 0, 1, 1, 0}, ACC_ALL_REMOTE, ~0u, {0, 64, 1, 1, 0}));
    std::uint32_t depth = f.q()->cap.max_send_wr;
    ASSERT_GE(depth, 8u);
    ASSERT_LE(depth, 1024u);
    int big = f.c.L.reg(1 << 20, vq::ACCESS_LOCAL_WRITE, false, 0x5151);
    ASSERT_GE(big, 0);
    const std::uint32_t len = 1 << 20;
    std::uint32_t posted = 0;
    int rc = 0;
    for (std::uint32_t i = 0; i < depth + 4; i++) {
        vq::wr_start(f.q());
        f.q()->wr_id = 1000 + i;
        f.q()->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(f.q());
        vq::wr_set_sge(f.q(), f.c.L.mr(big)->lkey, f.c.L.addr(big), len);
        rc = vq::wr_complete(f.q());
        if (rc)
            break;
        posted++;
    }
    EXPECT_EQ(rc, -FI_EAGAIN) << "posted " << posted << " sends on a queue of " << depth << " without EAGAIN";
    EXPECT_GE(posted, 1u);
    EXPECT_LE(posted, depth) << "more requests outstanding than max_send_wr";
    // A batch that overflows in the middle is discarded entirely.
    vq::wr_start(f.q());
    f.q()->wr_id = 7777;
    f.q()->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr);
    vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 64);
    EXPECT_EQ(vq::wr_complete(f.q()), -FI_EAGAIN);
    // Now let the peer receive: every accepted send completes, in order, with all its bytes.
    reg_rep rx{};
    ASSERT_EQ(f.c.P.reg(len, vq::ACCESS_LOCAL_WRITE, false, 0, &rx), 0);
    for (std::uint32_t i = 0; i < posted; i++)
        ASSERT_EQ(f.c.P.post_recv(f.c.pq.index, 2000 + i, {{rx.index, len, 0}}), 0);
    auto s = f.c.L.wait_wcs(f.c.lq, posted, 20000);
    ASSERT_EQ(s.size(), posted);
    for (std::uint32_t i = 0; i < posted; i++) {
        EXPECT_EQ(s[i].wr_id, 1000 + i);
        EXPECT_EQ(s[i].status, wc_status::success) << wc_str(s[i]);
    }
    auto r = f.c.P.wait_wcs(f.c.pq.index, posted, 20000);
    ASSERT_EQ(r.size(), posted);
    for (std::uint32_t i = 0; i < posted; i++) {
        EXPECT_EQ(r[i].wr_id, 2000 + i);
        EXPECT_EQ(r[i].byte_len, len) << wc_str(r[i]);
    }
    auto got = f.c.P.read_mem(rx.index, 0, len);
    EXPECT_EQ(std::memcmp(got.data(), f.c.L.mem(big), len), 0) << "message bytes differ";
    // The queue has room again.
    vq::wr_start(f.q());
    f.q()->wr_id = 7778;
    f.q()->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_write(f.q(), f.tgt.rkey, f.tgt.addr);
    vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 64);
    EXPECT_EQ(vq::wr_complete(f.q()), 0);
    auto w = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 7778u) << "a request of the discarded (EAGAIN) batch completed";
}

/* ---------------- Receive buffer too small ---------------- */

void receive_too_small(qp_type t)
{
    errfix f;
    ASSERT_TRUE(f.open(t, vq::OPS_SEND, {0, 0, 1, 1, 0}, ACC_ALL_REMOTE, ~0u, {0, 0, 1, 2, 0}));
    // Receive: two pieces of 60 + 40 bytes with guard bytes between and after them.
    ASSERT_EQ(f.c.P.post_recv(f.c.pq.index, 31, {{f.tgt.index, 60, 1000}, {f.tgt.index, 40, 2000}}), 0);
    vq::wr_start(f.q());
    f.q()->wr_id = 32;
    f.q()->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(f.q());
    vq::wr_set_sge(f.q(), f.lkey(), f.sa(0), 101);
    if (t == qp_type::ud)
        vq::wr_set_ud_addr(f.q(), f.c.L.o.ahs[f.c.ah], f.c.pq.qpn, f.c.qkey);
    ASSERT_EQ(vq::wr_complete(f.q()), 0);
    auto s = f.c.L.wait_wcs(f.c.lq, 1);
    ASSERT_EQ(s.size(), 1u) << "the sender gets a completion either way";
    auto r = f.c.P.wait_wcs(f.c.pq.index, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 31u);
    EXPECT_EQ(r[0].status, wc_status::loc_len_err) << wc_str(r[0]);
    // Nothing outside the receive's buffers was written.
    std::vector<std::uint8_t> want(region);
    fill_pattern(want.data(), region, f.seed);
    auto got = f.c.P.read_mem(f.tgt.index, 0, region);
    for (std::size_t i = 0; i < region; i++) {
        bool inside = (i >= 1000 && i < 1060) || (i >= 2000 && i < 2040);
        if (!inside && got[i] != want[i]) {
            ADD_FAILURE() << "byte " << i << " outside the receive buffers was written";
            break;
        }
    }
}

TEST_F(Errors, ReceiveBufferTooSmallIsLocalLengthErrorRc) { receive_too_small(qp_type::rc); }
TEST_F(Errors, ReceiveBufferTooSmallIsLocalLengthErrorUc) { receive_too_small(qp_type::uc); }
TEST_F(Errors, ReceiveBufferTooSmallIsLocalLengthErrorUd) { receive_too_small(qp_type::ud); }

} // namespace
} // namespace shunt::conf
