// Receive completions of one source come out in the order its messages
// were matched, also when one of them is a rendezvous whose fetch finishes
// later (the loop provider's fetches run until the test finishes them);
// other sources are not held up by it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "fixture.h"

using namespace shunt;
using namespace shunt::fabric;
using test::loop_ep;

namespace {

constexpr std::size_t rndv = 1024; // the loop provider's rendezvous size here

struct ep_order : ::testing::Test {
    test::loop_env env;
    loop_ep a, b, c; // a and c send to b
    fi_addr_t a_to_b = 0, c_to_b = 0, in_b_a = 0, in_b_c = 0;
    void SetUp() override
    {
        ASSERT_EQ(env.open(), 0);
        ASSERT_EQ(test::open_ep(env, a), 0);
        ASSERT_EQ(test::open_ep(env, b), 0);
        ASSERT_EQ(test::open_ep(env, c), 0);
        a_to_b = test::add_peer(a, b);
        c_to_b = test::add_peer(c, b);
        in_b_a = test::add_peer(b, a);
        in_b_c = test::add_peer(b, c);
        test::loop_rndv_bytes = rndv;
    }
    void TearDown() override
    {
        test::loop_rndv_bytes = 0;
        (void)test::loop_finish_fetches();
        a.close_all();
        b.close_all();
        c.close_all();
    }
    /** Every receive completion b has now (successful ones). */
    std::vector<cq_tagged_entry> drain_b()
    {
        std::vector<cq_tagged_entry> v;
        cq_tagged_entry e{};
        while (cq_read(b.cq, &e, 1) == 1)
            if (e.flags & FI_RECV)
                v.push_back(e);
        return v;
    }
};

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed)
{
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; i++)
        v[i] = std::uint8_t(seed + i * 7);
    return v;
}

const char *text(const std::vector<std::uint8_t> &v) { return reinterpret_cast<const char *>(v.data()); }

} // namespace

TEST_F(ep_order, ARendezvousHoldsLaterCompletionsFromItsSourceOnly)
{
    std::vector<std::uint8_t> big = pattern(2 * rndv, 1), r0(2 * rndv), r1(16), r2(16);
    int c0, c1, c2;
    ASSERT_EQ(recv(b.ep, r0.data(), r0.size(), nullptr, FI_ADDR_UNSPEC, &c0), 0);
    ASSERT_EQ(recv(b.ep, r1.data(), r1.size(), nullptr, FI_ADDR_UNSPEC, &c1), 0);
    ASSERT_EQ(recv(b.ep, r2.data(), r2.size(), nullptr, FI_ADDR_UNSPEC, &c2), 0);
    ASSERT_EQ(send(a.ep, big.data(), big.size(), nullptr, a_to_b, nullptr), 0);
    ASSERT_EQ(send(a.ep, "from a", 7, nullptr, a_to_b, nullptr), 0);
    ASSERT_EQ(send(c.ep, "from c", 7, nullptr, c_to_b, nullptr), 0);
    ASSERT_EQ(test::loop_fetches_running(), 1u);
    std::vector<cq_tagged_entry> got = drain_b();
    ASSERT_EQ(got.size(), 1u) << "a's small message waits behind a's rendezvous; c's does not";
    EXPECT_EQ(got[0].op_context, &c2);
    EXPECT_STREQ(text(r2), "from c");

    ASSERT_EQ(test::loop_finish_fetches(), 1u);
    got = drain_b();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].op_context, &c0) << "the rendezvous first, as a sent it";
    EXPECT_EQ(got[0].len, big.size());
    EXPECT_EQ(r0, big);
    EXPECT_EQ(got[1].op_context, &c1);
    EXPECT_EQ(got[1].len, 7u);
    EXPECT_STREQ(text(r1), "from a");
}

TEST_F(ep_order, FetchesFinishingInReverseStillReportInMatchingOrder)
{
    std::vector<std::uint8_t> big1 = pattern(rndv, 3), big2 = pattern(3 * rndv, 5);
    std::vector<std::vector<std::uint8_t>> r{std::vector<std::uint8_t>(rndv), std::vector<std::uint8_t>(16),
                                             std::vector<std::uint8_t>(3 * rndv), std::vector<std::uint8_t>(16)};
    int ctx[4];
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(trecv(b.ep, r[i].data(), r[i].size(), nullptr, in_b_a, 40 + i, 0, &ctx[i]), 0);
    ASSERT_EQ(tsend(a.ep, big1.data(), big1.size(), nullptr, a_to_b, 40, nullptr), 0);
    ASSERT_EQ(tsend(a.ep, "one", 4, nullptr, a_to_b, 41, nullptr), 0);
    ASSERT_EQ(tsend(a.ep, big2.data(), big2.size(), nullptr, a_to_b, 42, nullptr), 0);
    ASSERT_EQ(tsend(a.ep, "two", 4, nullptr, a_to_b, 43, nullptr), 0);
    ASSERT_EQ(test::loop_fetches_running(), 2u);
    EXPECT_TRUE(drain_b().empty());
    ASSERT_EQ(test::loop_finish_fetches(true), 2u) << "the second rendezvous finishes first";
    std::vector<cq_tagged_entry> got = drain_b();
    ASSERT_EQ(got.size(), 4u);
    for (int i = 0; i < 4; i++) {
        EXPECT_EQ(got[i].op_context, &ctx[i]) << "completion " << i;
        EXPECT_EQ(got[i].tag, std::uint64_t(40 + i));
    }
    EXPECT_EQ(r[0], big1);
    EXPECT_EQ(r[2], big2);
    EXPECT_STREQ(text(r[3]), "two");
}

TEST_F(ep_order, UnexpectedMessagesTakenAfterARendezvousWaitForIt)
{
    std::vector<std::uint8_t> big = pattern(rndv + 1, 9), r0(rndv + 1), r1(16);
    ASSERT_EQ(send(a.ep, big.data(), big.size(), nullptr, a_to_b, nullptr), 0);
    ASSERT_EQ(send(a.ep, "after", 6, nullptr, a_to_b, nullptr), 0);
    EXPECT_TRUE(drain_b().empty()) << "nothing posted yet";
    int c0, c1;
    ASSERT_EQ(recv(b.ep, r0.data(), r0.size(), nullptr, FI_ADDR_UNSPEC, &c0), 0);
    ASSERT_EQ(recv(b.ep, r1.data(), r1.size(), nullptr, FI_ADDR_UNSPEC, &c1), 0);
    ASSERT_EQ(test::loop_fetches_running(), 1u);
    EXPECT_TRUE(drain_b().empty()) << "the unexpected small message is placed, its completion held";
    ASSERT_EQ(test::loop_finish_fetches(), 1u);
    std::vector<cq_tagged_entry> got = drain_b();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].op_context, &c0);
    EXPECT_EQ(r0, big);
    EXPECT_EQ(got[1].op_context, &c1);
    EXPECT_STREQ(text(r1), "after");
}

TEST_F(ep_order, MultiRecvBufferIsReleasedByTheLastReportedCompletion)
{
    constexpr std::size_t pool_len = 4096, big_len = 1500, small_len = 16;
    // Below the minimum after both messages: the buffer is released then.
    std::size_t min = pool_len - big_len - small_len + 1;
    ASSERT_EQ(setopt(&b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min), 0);
    std::vector<std::uint8_t> pool(pool_len), big = pattern(big_len, 11), small = pattern(small_len, 13);
    iovec v{pool.data(), pool.size()};
    msg m;
    m.msg_iov = &v;
    m.iov_count = 1;
    m.addr = FI_ADDR_UNSPEC;
    m.context = &pool;
    ASSERT_EQ(recvmsg(b.ep, &m, FI_MULTI_RECV), 0);
    ASSERT_EQ(send(a.ep, big.data(), big.size(), nullptr, a_to_b, nullptr), 0);
    ASSERT_EQ(send(a.ep, small.data(), small.size(), nullptr, a_to_b, nullptr), 0);
    EXPECT_TRUE(drain_b().empty());
    ASSERT_EQ(test::loop_finish_fetches(), 1u);
    std::vector<cq_tagged_entry> got = drain_b();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].buf, pool.data());
    EXPECT_EQ(got[0].len, big_len);
    EXPECT_FALSE(got[0].flags & FI_MULTI_RECV) << "a later message is still to be reported from the buffer";
    EXPECT_EQ(got[1].buf, pool.data() + big_len);
    EXPECT_EQ(got[1].len, small_len);
    EXPECT_TRUE(got[1].flags & FI_MULTI_RECV) << "the last completion written into it releases it";
    EXPECT_TRUE(std::equal(big.begin(), big.end(), pool.begin()));
    EXPECT_TRUE(std::equal(small.begin(), small.end(), pool.begin() + big_len));
}

TEST_F(ep_order, AnErrorCompletionWaitsInItsTurnToo)
{
    std::vector<std::uint8_t> big = pattern(rndv, 17), r0(rndv);
    char r1[4];
    int c0, c1;
    ASSERT_EQ(recv(b.ep, r0.data(), r0.size(), nullptr, FI_ADDR_UNSPEC, &c0), 0);
    ASSERT_EQ(recv(b.ep, r1, sizeof r1, nullptr, FI_ADDR_UNSPEC, &c1), 0);
    ASSERT_EQ(send(a.ep, big.data(), big.size(), nullptr, a_to_b, nullptr), 0);
    ASSERT_EQ(send(a.ep, "truncated", 10, nullptr, a_to_b, nullptr), 0);
    cq_tagged_entry e{};
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN) << "the truncation error is held too";
    ASSERT_EQ(test::loop_finish_fetches(), 1u);
    // Both now, in their order: the receive before the error.
    ASSERT_EQ(cq_read(b.cq, &e, 1), 1);
    EXPECT_EQ(e.op_context, &c0);
    EXPECT_EQ(r0, big);
    ASSERT_EQ(cq_read(b.cq, &e, 1), -FI_EAVAIL);
    cq_err_entry err{};
    ASSERT_EQ(cq_readerr(b.cq, &err, 0), 1);
    EXPECT_EQ(err.op_context, &c1);
    EXPECT_EQ(err.err, FI_ETRUNC);
    EXPECT_EQ(err.olen, 6u);
    EXPECT_EQ(cq_read(b.cq, &e, 1), -FI_EAGAIN);
}

TEST_F(ep_order, ClosingWithCompletionsHeldReportsNothingAndOthersGoOn)
{
    std::vector<std::uint8_t> big = pattern(rndv, 19), r0(rndv), r1(16);
    ASSERT_EQ(recv(b.ep, r0.data(), r0.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(recv(b.ep, r1.data(), r1.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
    ASSERT_EQ(send(a.ep, big.data(), big.size(), nullptr, a_to_b, nullptr), 0);
    ASSERT_EQ(send(a.ep, "held", 5, nullptr, a_to_b, nullptr), 0);
    // b closes with one fetch running and one completion held: the fetch
    // is dropped with it, nothing is reported.
    fid_cq *keep = b.cq;
    b.cq = nullptr;
    ASSERT_EQ(close(&b.ep->fid), 0);
    b.ep = nullptr;
    EXPECT_EQ(test::loop_fetches_running(), 0u);
    cq_tagged_entry e;
    EXPECT_EQ(cq_read(keep, &e, 1), -FI_EAGAIN);
    EXPECT_EQ(close(&keep->fid), 0);
    // The other endpoints go on as before.
    fi_addr_t c_to_a = test::add_peer(c, a);
    int rctx;
    ASSERT_EQ(recv(a.ep, r1.data(), r1.size(), nullptr, FI_ADDR_UNSPEC, &rctx), 0);
    ASSERT_EQ(send(c.ep, "still", 6, nullptr, c_to_a, nullptr), 0);
    bool got = false;
    for (int i = 0; i < 10 && !got; i++) // a's CQ also has its two send completions
        got = test::read_one(a.cq, e) == 1 && e.op_context == &rctx;
    EXPECT_TRUE(got);
    EXPECT_STREQ(text(r1), "still");
}
