// poll_lent on shm: a lent-receive RC or UC QP's messages read in place, in
// order with what poll_cq reports of the same QP, each exactly once; the
// probe; the stub on a QP without lent receives.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "vq_fixture.h"

namespace shunt::test {
using namespace shunt::vq;
namespace {

struct lent_pair {
    vq_env &e;
    cq *cq_a = nullptr, *cq_b = nullptr;
    qp *a = nullptr, *b = nullptr; ///< a sends, b lends
    lent_pair(vq_env &env, qp_type t) : e(env)
    {
        cq_a = e.cq();
        cq_b = e.cq();
        qp_init_attr ia;
        ia.type = t;
        ia.send_cq = ia.recv_cq = cq_a;
        ia.send_ops_flags = OPS_SEND | OPS_SEND_WITH_IMM;
        ia.cap.max_inline_data = 256;
        EXPECT_EQ(create_qp(e.pd, &ia, &a), 0);
        ia.send_cq = ia.recv_cq = cq_b;
        ia.lend_recv = true;
        EXPECT_EQ(create_qp(e.pd, &ia, &b), 0);
        const unsigned access = t == qp_type::uc ? unsigned(ACCESS_REMOTE_WRITE) : all_remote;
        EXPECT_EQ(connect_qp(a, get_qp_addr(b), access), 0);
        EXPECT_EQ(connect_qp(b, get_qp_addr(a), access), 0);
    }
    ~lent_pair()
    {
        EXPECT_EQ(destroy_qp(a), 0);
        EXPECT_EQ(destroy_qp(b), 0);
        EXPECT_EQ(destroy_cq(cq_a), 0);
        EXPECT_EQ(destroy_cq(cq_b), 0);
    }
    int send(std::uint32_t i, std::uint32_t len)
    {
        std::uint8_t buf[200];
        std::memset(buf, int(i & 0xff), sizeof buf);
        data_buf d{buf, len};
        return post_send_imm_inline(a, 0, i, &d, 1, 0);
    }
};

struct PollLent : ::testing::TestWithParam<qp_type> {};

TEST_P(PollLent, ProbeAndStub)
{
    vq_env e;
    lent_pair p(e, GetParam());
    EXPECT_EQ(poll_lent(p.b, 0, nullptr), 0) << "the lent-receive QP offers it";
    EXPECT_EQ(poll_lent(p.b, -1, nullptr), -FI_EINVAL);
    EXPECT_EQ(poll_lent(p.a, 0, nullptr), -FI_EOPNOTSUPP) << "a QP with a receive queue does not";
}

TEST_P(PollLent, InterleavedWithPollCqEveryMessageOnceInOrderBytesInPlace)
{
    vq_env e;
    lent_pair p(e, GetParam());
    constexpr std::uint32_t total = 3000; // several turns of the ring: credits come back
    std::uint32_t sent = 0, seen = 0, lent_calls = 0, via_lent = 0;
    auto check = [&](std::uint32_t imm, std::uint32_t len, const std::uint8_t *d) {
        EXPECT_EQ(imm, seen) << "order";
        EXPECT_EQ(len, 8 + seen % 150);
        ASSERT_NE(d, nullptr);
        for (std::uint32_t k = 0; k < len; k++)
            ASSERT_EQ(d[k], std::uint8_t(seen & 0xff)) << "message " << seen << " byte " << k;
        seen++;
    };
    for (int round = 0; seen < total && round < 100000; round++) {
        while (sent < total && sent - seen < 8 && p.send(sent, 8 + sent % 150) == 0)
            sent++;
        if (round % 3 != 2) {
            lent_msg m[4];
            int n = poll_lent(p.b, 4, m);
            ASSERT_GE(n, 0);
            lent_calls++;
            via_lent += std::uint32_t(n);
            for (int k = 0; k < n; k++) {
                EXPECT_TRUE(m[k].wc_flags & WC_WITH_IMM);
                check(m[k].imm_data, m[k].byte_len, m[k].data);
            }
        } else {
            wc w[4];
            int n = poll_cq(p.cq_b, 4, w);
            ASSERT_GE(n, 0);
            for (int k = 0; k < n; k++) {
                ASSERT_EQ(w[k].status, wc_status::success);
                check(w[k].imm_data, w[k].byte_len, w[k].data);
            }
        }
        wc s[16];
        (void)poll_cq(p.cq_a, 16, s);
    }
    EXPECT_EQ(seen, total);
    EXPECT_GT(via_lent, total / 3) << "poll_lent took its share (" << lent_calls << " calls)";
    wc w[4];
    EXPECT_EQ(poll_cq(p.cq_b, 4, w), 0) << "nothing is reported twice";
}

TEST_P(PollLent, LeavesAnErrorToPollCq)
{
    vq_env e;
    lent_pair p(e, GetParam());
    qp_attr a;
    a.state = qp_state::err;
    ASSERT_EQ(modify_qp(p.b, &a, QP_ATTR_STATE), 0);
    lent_msg m[4];
    EXPECT_EQ(poll_lent(p.b, 4, m), 0) << "ERR: the flush is poll_cq's";
    auto w = poll_n(p.cq_b, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::wr_flush_err);
}

INSTANTIATE_TEST_SUITE_P(Types, PollLent, ::testing::Values(qp_type::rc, qp_type::uc),
                         [](const ::testing::TestParamInfo<qp_type> &i) {
                             return std::string(i.param == qp_type::rc ? "RC" : "UC");
                         });

} // namespace
} // namespace shunt::test
