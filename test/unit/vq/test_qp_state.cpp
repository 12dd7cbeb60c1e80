// The QP state machine and posting in each state.
#include "vq_fixture.h"

namespace shunt::test {
namespace {

struct QpState : ::testing::Test {
    vq_env e;
    vq::cq *c = e.cq();
    vq::qp *q = nullptr, *peer = nullptr;
    void SetUp() override
    {
        vq::qp_init_attr a;
        a.send_cq = a.recv_cq = c;
        a.send_ops_flags = vq::OPS_SEND | vq::OPS_RDMA_WRITE;
        ASSERT_EQ(vq::create_qp(e.pd, &a, &q), 0);
        ASSERT_EQ(vq::create_qp(e.pd, &a, &peer), 0);
    }
    void TearDown() override
    {
        EXPECT_EQ(vq::destroy_qp(q), 0);
        EXPECT_EQ(vq::destroy_qp(peer), 0);
        EXPECT_EQ(vq::destroy_cq(c), 0);
    }
    int to(vq::qp_state s, unsigned extra = 0, vq::qp_attr a = {})
    {
        a.state = s;
        return vq::modify_qp(q, &a, vq::QP_ATTR_STATE | extra);
    }
    int post_one()
    {
        std::uint64_t v = 1;
        return vq::post_send(q, 1, &v, 8, 0, vq::WR_INLINE);
    }
};

// check_dest_qp answers, before any QP of ours exists, what RTR would say
// of the peer QP (the shm driver can tell).
TEST_F(QpState, CheckDestQpAnswersAsRtrWould)
{
    vq::qp_addr d = vq::get_qp_addr(peer);
    EXPECT_EQ(vq::check_dest_qp(e.ctx, &d, vq::qp_type::rc), 0);
    EXPECT_EQ(vq::check_dest_qp(e.ctx, &d, vq::qp_type::uc), -FI_EINVAL) << "a peer QP of another type";
    EXPECT_EQ(vq::check_dest_qp(e.ctx, &d, vq::qp_type::ud), -FI_EINVAL) << "UD does not connect";
    EXPECT_EQ(vq::check_dest_qp(nullptr, &d, vq::qp_type::rc), -FI_EINVAL);
    EXPECT_EQ(vq::check_dest_qp(e.ctx, nullptr, vq::qp_type::rc), -FI_EINVAL);
    vq::qp_addr x = d;
    x.qpn = 0xfff;
    EXPECT_EQ(vq::check_dest_qp(e.ctx, &x, vq::qp_type::rc), -FI_ENOENT) << "no such QP";
    x = d;
    x.dev.len = 5;
    std::memcpy(x.dev.raw, "nope0", 5);
    EXPECT_EQ(vq::check_dest_qp(e.ctx, &x, vq::qp_type::rc), -FI_ENOENT) << "no such segment";
    x.dev.len = 0;
    EXPECT_EQ(vq::check_dest_qp(e.ctx, &x, vq::qp_type::rc), -FI_EINVAL);
    // Once q is connected to it, another QP could not be.
    ASSERT_EQ(to(vq::qp_state::init), 0);
    vq::qp_attr a;
    a.dest = d.dev;
    a.dest_qp_num = d.qpn;
    ASSERT_EQ(to(vq::qp_state::rtr, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN, a), 0);
    EXPECT_EQ(vq::check_dest_qp(e.ctx, &d, vq::qp_type::rc), -FI_EBUSY);
}

TEST_F(QpState, TransitionsFollowVerbs)
{
    EXPECT_EQ(to(vq::qp_state::rtr), -FI_EINVAL);
    EXPECT_EQ(to(vq::qp_state::rts), -FI_EINVAL);
    ASSERT_EQ(to(vq::qp_state::init), 0);
    EXPECT_EQ(vq::get_qp_state(q), vq::qp_state::init);
    EXPECT_EQ(to(vq::qp_state::rts), -FI_EINVAL);
    EXPECT_EQ(to(vq::qp_state::rtr), -FI_EINVAL) << "RTR on RC needs the peer address";
    vq::qp_attr a;
    a.dest = e.ctx->addr;
    a.dest_qp_num = 0xfff; // no such QP
    EXPECT_EQ(to(vq::qp_state::rtr, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN, a), -FI_ENOENT);
    a.dest.len = 5;
    std::memcpy(a.dest.raw, "nope0", 5);
    EXPECT_EQ(to(vq::qp_state::rtr, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN, a), -FI_ENOENT) << "no such segment";
    a.dest.len = 200;
    EXPECT_EQ(to(vq::qp_state::rtr, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN, a), -FI_EINVAL);
    a.dest.len = 3;
    std::memcpy(a.dest.raw, "a/b", 3);
    EXPECT_EQ(to(vq::qp_state::rtr, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN, a), -FI_EINVAL) << "not a segment name";
    a.dest = e.ctx->addr;
    a.dest_qp_num = peer->qp_num;
    ASSERT_EQ(to(vq::qp_state::rtr, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN, a), 0);
    EXPECT_EQ(to(vq::qp_state::init), -FI_EINVAL);
    ASSERT_EQ(to(vq::qp_state::rts), 0);
    ASSERT_EQ(to(vq::qp_state::rts), 0);
    vq::qp_attr got;
    ASSERT_EQ(vq::query_qp(q, &got), 0);
    EXPECT_EQ(got.state, vq::qp_state::rts);
    EXPECT_EQ(got.dest_qp_num, peer->qp_num);
    ASSERT_EQ(to(vq::qp_state::err), 0);
    EXPECT_EQ(vq::get_qp_state(q), vq::qp_state::err);
    EXPECT_EQ(to(vq::qp_state::rts), -FI_EINVAL);
    ASSERT_EQ(to(vq::qp_state::reset), 0);
    ASSERT_EQ(to(vq::qp_state::init), 0);
}

TEST_F(QpState, PeerOfAnotherTypeIsRejected)
{
    vq::qp_init_attr ia;
    ia.type = vq::qp_type::uc;
    ia.send_cq = ia.recv_cq = c;
    vq::qp *uc = nullptr;
    ASSERT_EQ(vq::create_qp(e.pd, &ia, &uc), 0);
    ASSERT_EQ(to(vq::qp_state::init), 0);
    vq::qp_attr a;
    a.dest = e.ctx->addr;
    a.dest_qp_num = uc->qp_num;
    EXPECT_EQ(to(vq::qp_state::rtr, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN, a), -FI_EINVAL);
    EXPECT_EQ(vq::destroy_qp(uc), 0);
}

TEST_F(QpState, PostingBeforeRtsIsABadStateAndDiscarded)
{
    EXPECT_EQ(post_one(), -FI_EOPBADSTATE);
    EXPECT_EQ(vq::post_recv(q, 1, 0, 0, 0), -FI_EOPBADSTATE) << "receives need INIT";
    ASSERT_EQ(to(vq::qp_state::init), 0);
    EXPECT_EQ(post_one(), -FI_EOPBADSTATE);
    EXPECT_EQ(vq::post_recv(q, 1, 0, 0, 0), 0);
    vq::qp_attr a;
    a.dest = e.ctx->addr;
    a.dest_qp_num = peer->qp_num;
    ASSERT_EQ(to(vq::qp_state::rtr, vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN, a), 0);
    vq::wr_start(q);
    q->wr_id = 3;
    vq::wr_send(q);
    EXPECT_EQ(vq::wr_complete(q), -FI_EOPBADSTATE);
    EXPECT_TRUE(drain(c, 20).empty());
}

TEST_F(QpState, ErrFlushesPostedReceivesAndNewSends)
{
    ASSERT_EQ(connect_qp(q, vq::get_qp_addr(peer)), 0);
    ASSERT_EQ(vq::post_recv(q, 11, 0, 0, 0), 0);
    ASSERT_EQ(vq::post_recv(q, 12, 0, 0, 0), 0);
    ASSERT_EQ(to(vq::qp_state::err), 0);
    EXPECT_EQ(post_one(), 0) << "ERR accepts work and flushes it";
    EXPECT_EQ(vq::post_recv(q, 13, 0, 0, 0), 0);
    auto w = poll_n(c, 4);
    ASSERT_EQ(w.size(), 4u);
    int recvs = 0, sends = 0;
    for (auto &x : w) {
        EXPECT_EQ(x.status, vq::wc_status::wr_flush_err);
        EXPECT_EQ(x.qp_num, q->qp_num);
        if (x.opcode == vq::wc_opcode::recv)
            recvs++;
        else
            sends++;
    }
    EXPECT_EQ(recvs, 3);
    EXPECT_EQ(sends, 1);
}

TEST_F(QpState, ResetDiscardsWithoutCompletions)
{
    ASSERT_EQ(connect_qp(q, vq::get_qp_addr(peer)), 0);
    ASSERT_EQ(vq::post_recv(q, 11, 0, 0, 0), 0);
    ASSERT_EQ(to(vq::qp_state::reset), 0);
    EXPECT_TRUE(drain(c, 20).empty());
    EXPECT_EQ(vq::get_qp_state(q), vq::qp_state::reset);
}

// A connection that failed is reset at both ends and connected again, as an
// application recovers: the new connection carries messages both ways,
// whichever end is reset first. (Each end's reset says goodbye into the
// other's ring; a goodbye from the old connection must not reach the new.)
TEST_F(QpState, APairResetAfterAnErrorConnectsAgainWhicheverEndResetsFirst)
{
    vq::mr *mr = nullptr;
    std::uint64_t buf[4] = {};
    ASSERT_EQ(vq::reg_mr(e.pd, buf, sizeof buf, vq::ACCESS_LOCAL_WRITE, &mr), 0);
    auto to_state = [](vq::qp *x, vq::qp_state s) {
        vq::qp_attr a;
        a.state = s;
        return vq::modify_qp(x, &a, vq::QP_ATTR_STATE);
    };
    // Messages both ways on a connected pair: each arrives.
    auto exchange = [&](const char *when) {
        SCOPED_TRACE(when);
        ASSERT_EQ(vq::post_recv(q, 21, reinterpret_cast<std::uint64_t>(&buf[0]), 8, mr->lkey), 0);
        ASSERT_EQ(vq::post_recv(peer, 22, reinterpret_cast<std::uint64_t>(&buf[1]), 8, mr->lkey), 0);
        std::uint64_t v = 7;
        ASSERT_EQ(vq::post_send(q, 31, &v, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
        ASSERT_EQ(vq::post_send(peer, 32, &v, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
        auto w = poll_n(c, 4);
        ASSERT_EQ(w.size(), 4u);
        for (auto &x : w)
            EXPECT_EQ(x.status, vq::wc_status::success)
                << "wr_id " << x.wr_id << " on QP " << x.qp_num << ": " << static_cast<int>(x.status);
        EXPECT_TRUE(drain(c, 20).empty());
    };
    for (int first = 0; first < 2; first++) {
        SCOPED_TRACE(first ? "the peer reset first" : "this end reset first");
        ASSERT_EQ(connect_qp(q, vq::get_qp_addr(peer)), 0);
        ASSERT_EQ(connect_qp(peer, vq::get_qp_addr(q)), 0);
        exchange("the first connection");
        ASSERT_EQ(to_state(q, vq::qp_state::err), 0); // the failure
        drain(c, 50);
        ASSERT_EQ(to_state(first ? peer : q, vq::qp_state::reset), 0);
        ASSERT_EQ(to_state(first ? q : peer, vq::qp_state::reset), 0);
        ASSERT_EQ(connect_qp(q, vq::get_qp_addr(peer)), 0);
        ASSERT_EQ(connect_qp(peer, vq::get_qp_addr(q)), 0);
        EXPECT_TRUE(drain(c, 20).empty()) << "the new connection failed at once";
        EXPECT_EQ(vq::get_qp_state(q), vq::qp_state::rts);
        EXPECT_EQ(vq::get_qp_state(peer), vq::qp_state::rts);
        exchange("the connection made again");
        ASSERT_EQ(to_state(q, vq::qp_state::reset), 0);
        ASSERT_EQ(to_state(peer, vq::qp_state::reset), 0);
    }
    EXPECT_EQ(vq::dereg_mr(mr), 0);
}

} // namespace
} // namespace shunt::test
