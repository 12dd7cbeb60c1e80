// Atomics from two initiator processes at once on the same target words:
// one in private memory (process_vm_* under the target's stripe lock), one
// in the target's shared segment (native atomics). Totals must be exact.
#include "shm_peer_client.h"

namespace shunt::test {
namespace {

TEST(ShmAtomics, TwoInitiatorsReachTheExactTotal)
{
    vq::context *ctx = nullptr;
    ASSERT_EQ(vq::open_device(vq::find_device("shm0"), &ctx), 0);
    vq::pd *pd = nullptr;
    ASSERT_EQ(vq::alloc_pd(ctx, &pd), 0);
    vq::cq_init_attr ca;
    ca.cqe = 64;
    vq::cq *cq = nullptr;
    ASSERT_EQ(vq::create_cq(ctx, &ca, &cq), 0);
    alignas(64) static std::uint64_t priv_word[8];
    void *segp = nullptr;
    ASSERT_EQ(vq::alloc_buf(ctx, 64, &segp), 0);
    auto *seg_word = static_cast<std::uint64_t *>(segp);
    *seg_word = 1000;
    priv_word[0] = 7;
    unsigned acc = vq::ACCESS_LOCAL_WRITE | vq::ACCESS_REMOTE_ATOMIC;
    vq::mr *pm = nullptr, *sm = nullptr;
    ASSERT_EQ(vq::reg_mr(pd, priv_word, sizeof priv_word, acc, &pm), 0);
    ASSERT_EQ(vq::reg_mr(pd, seg_word, 64, acc, &sm), 0);

    shm_peer p1("rc"), p2("rc");
    vq::qp *q[2] = {};
    shm_peer *peers[2] = {&p1, &p2};
    for (int i = 0; i < 2; i++) {
        vq::qp_init_attr ia;
        ia.send_cq = ia.recv_cq = cq;
        ASSERT_EQ(vq::create_qp(pd, &ia, &q[i]), 0);
        vq::qp_attr a;
        a.state = vq::qp_state::init;
        a.qp_access_flags = vq::ACCESS_REMOTE_WRITE | vq::ACCESS_REMOTE_READ | vq::ACCESS_REMOTE_ATOMIC;
        ASSERT_EQ(vq::modify_qp(q[i], &a, vq::QP_ATTR_STATE | vq::QP_ATTR_ACCESS_FLAGS), 0);
        a.state = vq::qp_state::rtr;
        a.dest = peers[i]->addr.dev;
        a.dest_qp_num = peers[i]->addr.qpn;
        ASSERT_EQ(vq::modify_qp(q[i], &a, vq::QP_ATTR_STATE | vq::QP_ATTR_AV | vq::QP_ATTR_DEST_QPN), 0);
        ASSERT_EQ(peers[i]->connect(vq::get_qp_addr(q[i])), 0);
    }
    const std::uint32_t n = 20000;
    for (bool seg : {false, true}) {
        for (int i = 0; i < 2; i++) {
            pp::request r{};
            r.op = pp::atomic_loop;
            r.n = n;
            r.a = static_cast<std::uint64_t>(i + 1); // peer 1 adds 1, peer 2 adds 2
            r.c = seg ? sm->rkey : pm->rkey;
            r.d = seg ? reinterpret_cast<std::uint64_t>(seg_word) : reinterpret_cast<std::uint64_t>(&priv_word[0]);
            peers[i]->start(r);
        }
        EXPECT_EQ(p1.finish().rc, 0);
        EXPECT_EQ(p2.finish().rc, 0);
    }
    EXPECT_EQ(priv_word[0], 7u + 3u * n);
    EXPECT_EQ(*seg_word, 1000u + 3u * n);
    for (auto *x : q)
        EXPECT_EQ(vq::destroy_qp(x), 0);
    EXPECT_EQ(vq::dereg_mr(pm), 0);
    EXPECT_EQ(vq::dereg_mr(sm), 0);
    EXPECT_EQ(vq::free_buf(ctx, segp), 0);
    EXPECT_EQ(vq::destroy_cq(cq), 0);
    EXPECT_EQ(vq::dealloc_pd(pd), 0);
    EXPECT_EQ(vq::close_device(ctx), 0);
}

} // namespace
} // namespace shunt::test
