// Every error latched by the session: wr_complete reports it and nothing of
// the batch is executed.
#include <cstring>

#include "vq_fixture.h"

namespace shunt::test {
namespace {

using vq::wc_status;

struct WrErrors : ::testing::Test {
    vq_env e;
    qp_pair p{e, vq::qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_READ | vq::OPS_ATOMIC_FETCH_AND_ADD | vq::OPS_FLUSH,
              vq::qp_cap{16, 64, 2, 1, 32}};
    reg_buf buf{e.pd, 1 << 16};
    std::uint64_t v = 0x42;

    /** A batch of: good send, then @p bad, then good send. */
    template <class F>
    int batch(F bad)
    {
        vq::wr_start(p.a);
        p.a->wr_id = 1;
        p.a->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(p.a);
        vq::wr_set_inline_data(p.a, &v, 8);
        bad(p.a);
        p.a->wr_id = 3;
        p.a->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(p.a);
        vq::wr_set_inline_data(p.a, &v, 8);
        return vq::wr_complete(p.a);
    }
    /** Nothing was executed: no completion at either end, and the QP still works. */
    void expect_nothing_happened()
    {
        ASSERT_EQ(vq::post_recv(p.b, 50, buf.addr(), 64, buf.mr->lkey), 0);
        EXPECT_TRUE(drain(p.cq_a, 50).empty()) << "a discarded batch completed";
        EXPECT_TRUE(drain(p.cq_b, 50).empty()) << "a discarded batch was delivered";
        std::uint64_t marker = 0x77;
        ASSERT_EQ(vq::post_send(p.a, 9, &marker, 8, 0, vq::WR_INLINE | vq::WR_SIGNALED), 0);
        auto r = poll_n(p.cq_b, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].wr_id, 50u);
        std::uint64_t got;
        std::memcpy(&got, buf.bytes.data(), 8);
        EXPECT_EQ(got, 0x77u) << "the first message after a discarded batch must be the next one posted";
        auto s = poll_n(p.cq_a, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].wr_id, 9u);
    }
};

TEST_F(WrErrors, InlineOverTheLimitDiscardsTheBatch)
{
    char big[33] = {};
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_send(q);
                  vq::wr_set_inline_data(q, big, sizeof big);
              }),
              -FI_EMSGSIZE);
    expect_nothing_happened();
}

TEST_F(WrErrors, InlineListOverTheLimit)
{
    char a[20] = {}, b[20] = {};
    vq::data_buf l[2] = {{a, 20}, {b, 20}};
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_send(q);
                  vq::wr_set_inline_data_list(q, 2, l);
              }),
              -FI_EMSGSIZE);
    expect_nothing_happened();
}

TEST_F(WrErrors, TooManySges)
{
    vq::sge s[3] = {{buf.addr(), 1, buf.mr->lkey}, {buf.addr(1), 1, buf.mr->lkey}, {buf.addr(2), 1, buf.mr->lkey}};
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_send(q);
                  vq::wr_set_sge_list(q, 3, s);
              }),
              -FI_E2BIG);
    expect_nothing_happened();
}

TEST_F(WrErrors, OperationNotRequestedAtCreation)
{
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_rdma_write(q, 1, 0); }), -FI_EOPNOTSUPP);
    expect_nothing_happened();
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_send_imm(q, 1); }), -FI_EOPNOTSUPP);
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_atomic_cmp_swp(q, 1, 0, 0, 0); }), -FI_EOPNOTSUPP);
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_bind_mw(q, nullptr, 0, nullptr); }), -FI_EOPNOTSUPP);
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_local_inv(q, 1); }), -FI_EOPNOTSUPP);
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_send_tso(q, &v, 8, 8); }), -FI_EOPNOTSUPP);
    expect_nothing_happened();
}

TEST_F(WrErrors, SetterTheOperationDoesNotTake)
{
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_rdma_read(q, 1, 0);
                  vq::wr_set_inline_data(q, &v, 8);
              }),
              -FI_EOPNOTSUPP);
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_send(q);
                  vq::wr_set_ud_addr(q, nullptr, 1, 1);
              }),
              -FI_EOPNOTSUPP);
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_send(q);
                  vq::wr_set_xrc_srqn(q, 1);
              }),
              -FI_EOPNOTSUPP);
    expect_nothing_happened();
}

TEST_F(WrErrors, InvalidArguments)
{
    // A setter before any builder.
    vq::wr_start(p.a);
    vq::wr_set_inline_data(p.a, &v, 8);
    EXPECT_EQ(vq::wr_complete(p.a), -FI_EINVAL);
    // Two data setters.
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_send(q);
                  vq::wr_set_inline_data(q, &v, 8);
                  vq::wr_set_inline_data(q, &v, 8);
              }),
              -FI_EINVAL);
    // Unknown flags.
    EXPECT_EQ(batch([&](vq::qp *q) {
                  q->wr_flags = 1u << 20;
                  vq::wr_send(q);
              }),
              -FI_EINVAL);
    // Unaligned atomic, result SGE not 8 bytes.
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_atomic_fetch_add(q, 1, 4, 1); }), -FI_EINVAL);
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_atomic_fetch_add(q, 1, 8, 1);
                  vq::wr_set_sge(q, buf.mr->lkey, buf.addr(), 4);
              }),
              -FI_EINVAL);
    // Unknown flush type / level.
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_flush(q, 1, 0, 8, 7, vq::FLUSH_RANGE); }), -FI_EINVAL);
    EXPECT_EQ(batch([&](vq::qp *q) { vq::wr_flush(q, 1, 0, 8, vq::FLUSH_GLOBAL, 9); }), -FI_EINVAL);
    // Null list.
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_send(q);
                  vq::wr_set_sge_list(q, 2, nullptr);
              }),
              -FI_EINVAL);
    // IP_CSUM is for UD only.
    EXPECT_EQ(batch([&](vq::qp *q) {
                  q->wr_flags = vq::WR_IP_CSUM;
                  vq::wr_send(q);
              }),
              -FI_EOPNOTSUPP);
    expect_nothing_happened();
}

TEST_F(WrErrors, TheFirstErrorIsReported)
{
    char big[64] = {};
    EXPECT_EQ(batch([&](vq::qp *q) {
                  vq::wr_send(q);
                  vq::wr_set_inline_data(q, big, sizeof big); // -FI_EMSGSIZE first
                  vq::wr_rdma_write(q, 1, 0);                 // then -FI_EOPNOTSUPP
              }),
              -FI_EMSGSIZE);
}

TEST_F(WrErrors, AbortDiscardsEverything)
{
    vq::wr_start(p.a);
    for (int i = 0; i < 5; i++) {
        p.a->wr_id = static_cast<std::uint64_t>(i);
        p.a->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(p.a);
        vq::wr_set_inline_data(p.a, &v, 8);
    }
    vq::wr_abort(p.a);
    expect_nothing_happened();
}

TEST_F(WrErrors, BatchLargerThanTheSendQueue)
{
    vq::wr_start(p.a);
    for (std::uint32_t i = 0; i <= p.a->cap.max_send_wr; i++) {
        p.a->wr_id = i;
        vq::wr_send(p.a);
        vq::wr_set_inline_data(p.a, &v, 8);
    }
    EXPECT_EQ(vq::wr_complete(p.a), -FI_EAGAIN);
    expect_nothing_happened();
}

TEST_F(WrErrors, FullQueueFailsTheNewBatchButEarlierBatchesComplete)
{
    // Nobody receives: the ring fills, then the send queue; the next batch
    // fails with -FI_EAGAIN; every earlier message is still delivered.
    int posted = 0;
    int rc = 0;
    for (int i = 0; i < 5000; i++) {
        std::uint64_t x = static_cast<std::uint64_t>(i);
        rc = vq::post_send(p.a, x, &x, 8, 0, vq::WR_INLINE);
        if (rc)
            break;
        posted++;
    }
    ASSERT_EQ(rc, -FI_EAGAIN);
    ASSERT_GT(posted, 16);
    int got = 0;
    std::uint64_t next = 0;
    vq::wc w[16];
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got < posted && std::chrono::steady_clock::now() < end) {
        ASSERT_EQ(vq::post_recv(p.b, 0, buf.addr(), 64, buf.mr->lkey), 0);
        int k = 0;
        while ((k = vq::poll_cq(p.cq_b, 1, w)) == 0 && std::chrono::steady_clock::now() < end)
            (void)vq::poll_cq(p.cq_a, 16, w + 1); // sender progress
        ASSERT_EQ(k, 1);
        ASSERT_EQ(w[0].status, wc_status::success);
        std::uint64_t x;
        std::memcpy(&x, buf.bytes.data(), 8);
        ASSERT_EQ(x, next) << "messages out of order or lost";
        next++;
        got++;
    }
    EXPECT_EQ(got, posted);
}

TEST_F(WrErrors, UnsignaledSuccessIsSilentButErrorsComplete)
{
    ASSERT_EQ(vq::post_recv(p.b, 1, buf.addr(), 64, buf.mr->lkey), 0);
    ASSERT_EQ(vq::post_send(p.a, 5, &v, 8, 0, vq::WR_INLINE), 0);
    ASSERT_EQ(poll_n(p.cq_b, 1).size(), 1u);
    EXPECT_TRUE(drain(p.cq_a, 20).empty());
    // A bad lkey is found at execution: error completion although unsignaled.
    ASSERT_EQ(vq::post_send(p.a, 6, buf.bytes.data(), 8, buf.mr->lkey + 0x100, 0), 0);
    auto w = poll_n(p.cq_a, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 6u);
    EXPECT_EQ(w[0].status, wc_status::loc_prot_err);
    EXPECT_EQ(vq::get_qp_state(p.a), vq::qp_state::err);
}

TEST_F(WrErrors, SgeOutsideItsRegionIsALocalProtectionError)
{
    ASSERT_EQ(vq::post_send(p.a, 6, buf.bytes.data() + buf.bytes.size() - 4, 8, buf.mr->lkey, 0), 0);
    auto w = poll_n(p.cq_a, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, wc_status::loc_prot_err);
}

TEST(WrErrorsUd, MissingUdAddressAndMessageOverMtu)
{
    vq_env e;
    qp_pair p(e, vq::qp_type::ud, vq::OPS_SEND | vq::OPS_TSO, vq::qp_cap{16, 16, 1, 1, 64});
    reg_buf buf(e.pd, 1 << 16);
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = e.ctx->addr;
    ASSERT_EQ(vq::create_ah(e.pd, &aa, &ah), 0);
    std::uint64_t v = 1;
    vq::wr_start(p.a);
    vq::wr_send(p.a);
    vq::wr_set_inline_data(p.a, &v, 8);
    EXPECT_EQ(vq::wr_complete(p.a), -FI_EINVAL) << "UD needs set_ud_addr";
    vq::wr_start(p.a);
    vq::wr_send(p.a);
    vq::wr_set_inline_data(p.a, &v, 8);
    vq::wr_send(p.a); // the previous WR lacks its address
    EXPECT_EQ(vq::wr_complete(p.a), -FI_EINVAL);
    vq::wr_start(p.a);
    vq::wr_send(p.a);
    vq::wr_set_sge(p.a, buf.mr->lkey, buf.addr(), 4097);
    vq::wr_set_ud_addr(p.a, ah, p.b->qp_num, 0);
    EXPECT_EQ(vq::wr_complete(p.a), -FI_EMSGSIZE);
    vq::wr_start(p.a);
    vq::wr_send_tso(p.a, &v, 8, 0);
    EXPECT_EQ(vq::wr_complete(p.a), -FI_EINVAL) << "mss 0";
    vq::wr_start(p.a);
    vq::wr_send_tso(p.a, &v, 8, 4095);
    EXPECT_EQ(vq::wr_complete(p.a), -FI_EMSGSIZE) << "header + mss over the MTU";
    vq::device_attr da;
    ASSERT_EQ(vq::query_device(p.a->ctx, &da), 0);
    ASSERT_GT(da.max_tso_hdr, 0u);
    std::vector<std::uint8_t> big(da.max_tso_hdr + 1, 0x45);
    vq::wr_start(p.a);
    vq::wr_send_tso(p.a, big.data(), std::uint16_t(da.max_tso_hdr + 1), 64);
    EXPECT_EQ(vq::wr_complete(p.a), -FI_EINVAL) << "header over device_attr::max_tso_hdr";
    EXPECT_EQ(vq::post_send(p.a, 1, &v, 8, 0, vq::WR_INLINE), -FI_EINVAL) << "single-call post has no UD address";
    EXPECT_TRUE(drain(p.cq_b, 20).empty());
    EXPECT_EQ(vq::destroy_ah(ah), 0);
}

} // namespace
} // namespace shunt::test
