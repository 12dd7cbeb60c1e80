// Object model and creation-time checks (devices, PD, MR, MW, CQ, QP).
#include <cstring>

#include "vq/driver.h"
#include "vq_fixture.h"

namespace shunt::test {
namespace {

TEST(ObjectModel, ShmDeviceIsListedAndRegisteredByName)
{
    std::vector<vq::device *> devs;
    ASSERT_GE(vq::get_device_list(devs), 1);
    vq::device *shm = vq::find_device("shm0");
    ASSERT_NE(shm, nullptr);
    ASSERT_NE(shm->drv, nullptr);
    EXPECT_STREQ(shm->drv->name, "shm");
    bool listed = false;
    for (auto *d : devs)
        listed |= d == shm;
    EXPECT_TRUE(listed);
    EXPECT_EQ(vq::find_device("nosuch0"), nullptr);
    EXPECT_EQ(vq::find_device(nullptr), nullptr);
    auto drvs = vq::registered_drivers();
    int n = 0;
    for (auto *d : drvs)
        n += std::strcmp(d->name, "shm") == 0;
    EXPECT_EQ(n, 1) << "registrar and built-in list must not register shm twice";
}

TEST(ObjectModel, NullArgumentsAreRejected)
{
    vq::context *c = nullptr;
    EXPECT_EQ(vq::open_device(nullptr, &c), -FI_EINVAL);
    EXPECT_EQ(vq::open_device(vq::find_device("shm0"), nullptr), -FI_EINVAL);
    EXPECT_EQ(vq::close_device(nullptr), -FI_EINVAL);
    EXPECT_EQ(vq::alloc_pd(nullptr, nullptr), -FI_EINVAL);
    EXPECT_EQ(vq::dealloc_pd(nullptr), -FI_EINVAL);
    EXPECT_EQ(vq::dereg_mr(nullptr), -FI_EINVAL);
    EXPECT_EQ(vq::destroy_cq(nullptr), -FI_EINVAL);
    EXPECT_EQ(vq::destroy_qp(nullptr), -FI_EINVAL);
    EXPECT_EQ(vq::modify_qp(nullptr, nullptr, 0), -FI_EINVAL);
    EXPECT_EQ(vq::create_qp(nullptr, nullptr, nullptr), -FI_EINVAL);
}

TEST(ObjectModel, QueryDeviceReportsTheOperationTable)
{
    vq_env e;
    vq::device_attr a;
    ASSERT_EQ(vq::query_device(e.ctx, &a), 0);
    auto ops = [&](vq::qp_type t) { return a.ops[static_cast<unsigned>(t)]; };
    EXPECT_EQ(ops(vq::qp_type::rc), vq::OPS_ALL & ~vq::OPS_TSO);
    EXPECT_EQ(ops(vq::qp_type::uc), vq::ops_allowed(vq::qp_type::uc));
    EXPECT_EQ(ops(vq::qp_type::ud), vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_TSO);
    EXPECT_EQ(ops(vq::qp_type::raw_packet), 0u);
    EXPECT_EQ(ops(vq::qp_type::xrc_send), 0u);
    EXPECT_GT(a.max_inline_data, 0u);
    EXPECT_GT(a.ud_mtu, 0u);
    EXPECT_GT(a.max_tso_hdr, 0u) << "UD offers TSO";
    EXPECT_LT(a.max_tso_hdr, a.ud_mtu);
    EXPECT_TRUE(a.host_local) << "shm reaches this host only";
    EXPECT_GT(e.ctx->addr.len, 0u);
}

TEST(ObjectModel, RegMrChecksArgumentsAndKeys)
{
    vq_env e;
    std::vector<char> b(4096);
    vq::mr *m = nullptr;
    EXPECT_EQ(vq::reg_mr(e.pd, nullptr, 10, 0, &m), -FI_EINVAL);
    EXPECT_EQ(vq::reg_mr(e.pd, b.data(), 0, 0, &m), -FI_EINVAL);
    EXPECT_EQ(vq::reg_mr(e.pd, b.data(), SIZE_MAX, vq::ACCESS_LOCAL_WRITE, &m), -FI_EINVAL) << "a range that wraps";
    EXPECT_EQ(vq::reg_mr(e.pd, reinterpret_cast<void *>(UINTPTR_MAX - 7), 9, vq::ACCESS_LOCAL_WRITE, &m),
              -FI_EINVAL);
    EXPECT_EQ(vq::reg_mr(e.pd, b.data(), 10, 1u << 20, &m), -FI_EINVAL);
    EXPECT_EQ(vq::reg_mr(e.pd, b.data(), 10, vq::ACCESS_REMOTE_WRITE, &m), -FI_EINVAL);
    EXPECT_EQ(vq::reg_mr(e.pd, b.data(), 10, vq::ACCESS_REMOTE_ATOMIC, &m), -FI_EINVAL);
    EXPECT_EQ(m, nullptr) << "outputs written only on success";
    ASSERT_EQ(vq::reg_mr(e.pd, b.data(), b.size(), vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_READ, &m), 0);
    EXPECT_NE(m->lkey, 0u);
    EXPECT_EQ(m->addr, b.data());
    EXPECT_EQ(m->length, b.size());
    vq::mr *m2 = nullptr;
    ASSERT_EQ(vq::reg_mr(e.pd, b.data(), 100, vq::ACCESS_LOCAL_WRITE, &m2), 0);
    EXPECT_NE(m2->lkey, m->lkey);
    EXPECT_EQ(vq::dealloc_pd(e.pd), -FI_EBUSY);
    EXPECT_EQ(vq::dereg_mr(m2), 0);
    EXPECT_EQ(vq::dereg_mr(m), 0);
}

TEST(ObjectModel, CloseWithLiveObjectsIsBusy)
{
    vq::context *c = nullptr;
    ASSERT_EQ(vq::open_device(vq::find_device("shm0"), &c), 0);
    vq::pd *p = nullptr;
    ASSERT_EQ(vq::alloc_pd(c, &p), 0);
    EXPECT_EQ(vq::close_device(c), -FI_EBUSY);
    EXPECT_EQ(vq::dealloc_pd(p), 0);
    EXPECT_EQ(vq::close_device(c), 0);
}

TEST(ObjectModel, MemoryWindowsAreType2Only)
{
    vq_env e;
    vq::mw *w = nullptr;
    EXPECT_EQ(vq::alloc_mw(e.pd, vq::mw_type::type1, &w), -FI_EOPNOTSUPP);
    ASSERT_EQ(vq::alloc_mw(e.pd, vq::mw_type::type2, &w), 0);
    EXPECT_NE(w->rkey, 0u);
    EXPECT_EQ(vq::inc_rkey(0x1234ff), 0x123400u);
    EXPECT_EQ(vq::inc_rkey(0x123401), 0x123402u);
    EXPECT_EQ(vq::dealloc_mw(w), 0);
}

TEST(ObjectModel, AllocBufIsInTheSharedSegment)
{
    vq_env e;
    void *p = nullptr;
    EXPECT_EQ(vq::alloc_buf(e.ctx, 0, &p), -FI_EINVAL);
    ASSERT_EQ(vq::alloc_buf(e.ctx, 1000, &p), 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
    std::memset(p, 1, 1000);
    EXPECT_EQ(vq::free_buf(e.ctx, p), 0);
    EXPECT_EQ(vq::free_buf(e.ctx, p), -FI_EINVAL);
    EXPECT_EQ(vq::alloc_buf(e.ctx, std::size_t{1} << 40, &p), -FI_ENOMEM);
}

TEST(ObjectModel, CqCreationChecks)
{
    vq_env e;
    vq::cq *c = nullptr;
    vq::cq_init_attr a;
    a.cqe = 0;
    EXPECT_EQ(vq::create_cq(e.ctx, &a, &c), -FI_EINVAL);
    a.cqe = 1 << 30;
    EXPECT_EQ(vq::create_cq(e.ctx, &a, &c), -FI_EMSGSIZE);
    a.cqe = 10;
    ASSERT_EQ(vq::create_cq(e.ctx, &a, &c), 0);
    EXPECT_GE(c->cqe, 10);
    vq::wc w;
    EXPECT_EQ(vq::poll_cq(c, 1, &w), 0);
    EXPECT_EQ(vq::poll_cq(c, -1, &w), -FI_EINVAL);
    EXPECT_EQ(vq::start_poll(c), -FI_EAGAIN);
    EXPECT_EQ(vq::destroy_cq(c), 0);
}

struct QpCreate : ::testing::Test {
    vq_env e;
    vq::cq *c = e.cq();
    void TearDown() override { EXPECT_EQ(vq::destroy_cq(c), 0); }
    int create(vq::qp_type t, std::uint64_t ops, vq::qp_cap cap = {}, vq::qp **out = nullptr)
    {
        vq::qp_init_attr a;
        a.type = t;
        a.send_cq = a.recv_cq = c;
        a.send_ops_flags = ops;
        a.cap = cap;
        vq::qp *q = nullptr;
        int rc = vq::create_qp(e.pd, &a, &q);
        if (rc == 0) {
            if (out)
                *out = q;
            else {
                EXPECT_EQ(vq::destroy_qp(q), 0);
            }
        } else {
            EXPECT_EQ(q, nullptr);
        }
        return rc;
    }
};

TEST_F(QpCreate, OperationsOutsideTheSpecTableAreInvalid)
{
    EXPECT_EQ(create(vq::qp_type::ud, vq::OPS_SEND | vq::OPS_ATOMIC_FETCH_AND_ADD), -FI_EINVAL);
    EXPECT_EQ(create(vq::qp_type::ud, vq::OPS_RDMA_WRITE), -FI_EINVAL);
    EXPECT_EQ(create(vq::qp_type::rc, vq::OPS_TSO), -FI_EINVAL);
    EXPECT_EQ(create(vq::qp_type::uc, vq::OPS_RDMA_READ), -FI_EINVAL);
    EXPECT_EQ(create(vq::qp_type::uc, vq::OPS_ATOMIC_CMP_AND_SWP), -FI_EINVAL);
    EXPECT_EQ(create(vq::qp_type::uc, vq::OPS_FLUSH), -FI_EINVAL);
    EXPECT_EQ(create(vq::qp_type::rc, std::uint64_t{1} << 40), -FI_EINVAL);
    EXPECT_EQ(create(vq::qp_type::xrc_recv, vq::OPS_SEND), -FI_EINVAL);
}

TEST_F(QpCreate, AllowedOperationsSucceedPerType)
{
    EXPECT_EQ(create(vq::qp_type::rc, vq::OPS_ALL & ~vq::OPS_TSO), 0);
    EXPECT_EQ(create(vq::qp_type::uc, vq::ops_allowed(vq::qp_type::uc)), 0);
    EXPECT_EQ(create(vq::qp_type::ud, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_TSO), 0);
}

TEST_F(QpCreate, UnsupportedTypesFailClearly)
{
    EXPECT_EQ(create(vq::qp_type::raw_packet, vq::OPS_SEND), -FI_EOPNOTSUPP);
    EXPECT_EQ(create(vq::qp_type::xrc_send, vq::OPS_SEND), -FI_EOPNOTSUPP);
}

TEST_F(QpCreate, CapacitiesOverTheLimitsAreRejected)
{
    vq::device_attr a;
    ASSERT_EQ(vq::query_device(e.ctx, &a), 0);
    EXPECT_EQ(create(vq::qp_type::rc, vq::OPS_SEND, {a.max_qp_wr + 1, 0, 0, 0, 0}), -FI_EMSGSIZE);
    EXPECT_EQ(create(vq::qp_type::rc, vq::OPS_SEND, {0, 0, a.max_sge + 1, 0, 0}), -FI_EMSGSIZE);
    EXPECT_EQ(create(vq::qp_type::rc, vq::OPS_SEND, {0, 0, 0, 0, a.max_inline_data + 1}), -FI_EMSGSIZE);
    vq::qp *q = nullptr;
    ASSERT_EQ(create(vq::qp_type::rc, vq::OPS_SEND, {100, 50, 3, 2, 100}, &q), 0);
    EXPECT_GE(q->cap.max_send_wr, 100u);
    EXPECT_GE(q->cap.max_recv_wr, 50u);
    EXPECT_EQ(q->cap.max_send_sge, 3u);
    EXPECT_EQ(q->cap.max_inline_data, 100u);
    EXPECT_EQ(vq::get_qp_state(q), vq::qp_state::reset);
    EXPECT_NE(q->qp_num, 0u);
    EXPECT_EQ(vq::destroy_cq(c), -FI_EBUSY) << "CQ in use by a QP";
    EXPECT_EQ(vq::destroy_qp(q), 0);
}

TEST_F(QpCreate, ObjectsOfAnotherContextAreRejected)
{
    vq_env other;
    vq::cq *oc = other.cq();
    vq::qp_init_attr a;
    a.send_cq = c;
    a.recv_cq = oc;
    vq::qp *q = nullptr;
    EXPECT_EQ(vq::create_qp(e.pd, &a, &q), -FI_EINVAL);
    a.recv_cq = nullptr;
    EXPECT_EQ(vq::create_qp(e.pd, &a, &q), -FI_EINVAL);
    EXPECT_EQ(vq::destroy_cq(oc), 0);
}

} // namespace
} // namespace shunt::test
