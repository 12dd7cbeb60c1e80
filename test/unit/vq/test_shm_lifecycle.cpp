// drivers/shm: QP responder access defaults, late notifications and ring /
// region reuse after destroy or deregistration, host-unique QP numbers.
#include <atomic>
#include <cstring>
#include <thread>

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

} // namespace
} // namespace shunt::test
