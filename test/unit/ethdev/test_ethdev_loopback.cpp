// drivers/ethdev: RoCE frames to the port's own address loop back inside
// the driver, as a RoCE NIC's do: QPs of one port (in one context or two)
// reach each other, with RC, UD (an IPv4-only address resolved without
// ARP) and a loop ring that fills up and pushes back. Port net_ring_pair3a
// is these tests' alone: once a port loops, it does for good.
#include <arpa/inet.h>

#include "eth_fixture.h"

namespace shunt::test {
namespace {

using vq::qp_type;
using vq::wc_status;

constexpr const char *dev = "net_ring_pair3a";
constexpr std::uint64_t rc_ops = vq::OPS_SEND | vq::OPS_SEND_WITH_IMM | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ |
                                 vq::OPS_ATOMIC_FETCH_AND_ADD | vq::OPS_ATOMIC_CMP_AND_SWP;

/** The port's frames: to the PMD and looped back. */
struct frames {
    std::uint64_t wire = counter(dev, eth::c_tx_frames), looped = counter(dev, eth::c_tx_loopback);
    std::uint64_t wire_since() const { return counter(dev, eth::c_tx_frames) - wire; }
    std::uint64_t looped_since() const { return counter(dev, eth::c_tx_loopback) - looped; }
};

TEST(Loopback, RcQpsOfOnePortExchangeSendsWritesReadsAndAtomicsWithoutTheWire)
{
    ep a{dev}, b{dev};
    ASSERT_TRUE(a.ok() && b.ok());
    vq::qp *qa = a.qp(qp_type::rc, rc_ops, {1024, 1024, 4, 4, 256});
    vq::qp *qb = b.qp(qp_type::rc, rc_ops, {1024, 1024, 4, 4, 256});
    // A third QP, in a's own context, connected to a fourth there.
    vq::qp *qc = a.qp(qp_type::rc, rc_ops, {64, 64, 4, 4, 64});
    vq::qp *qd = a.qp(qp_type::rc, rc_ops, {64, 64, 4, 4, 64});
    ASSERT_TRUE(qa && qb && qc && qd);
    rc_up(qa, qb);
    rc_up(qb, qa);
    rc_up(qc, qd);
    rc_up(qd, qc);
    frames f;

    const std::uint32_t big = 300000; // about 300 packets of the path MTU
    fill(a.buf, big, 1);
    ASSERT_EQ(b.recv(qb, 1, 0, big), 0);
    ASSERT_EQ(vq::post_send(qa, 10, a.buf, big, a.mr->lkey, vq::WR_SIGNALED), 0);
    auto r = wait_wcs(b, 1, {&a});
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, wc_status::success);
    EXPECT_EQ(r[0].byte_len, big);
    EXPECT_EQ(std::memcmp(a.buf, b.buf, big), 0);
    auto s = wait_wcs(a, 1, {&b});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, wc_status::success);

    // Write, then read it back elsewhere.
    fill(a.buf + 1000000, 70000, 2);
    ASSERT_EQ(vq::post_write(qa, 11, a.buf + 1000000, 70000, a.mr->lkey, b.mr->rkey, b.at(2000000),
                             vq::WR_SIGNALED),
              0);
    vq::wr_start(qa);
    qa->wr_id = 12;
    qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_read(qa, b.mr->rkey, b.at(2000000));
    vq::wr_set_sge(qa, a.mr->lkey, a.at(3000000), 70000);
    ASSERT_EQ(vq::wr_complete(qa), 0);
    auto w = wait_wcs(a, 2, {&b});
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0].status, wc_status::success);
    EXPECT_EQ(w[1].status, wc_status::success);
    EXPECT_EQ(std::memcmp(a.buf + 1000000, b.buf + 2000000, 70000), 0);
    EXPECT_EQ(std::memcmp(a.buf + 1000000, a.buf + 3000000, 70000), 0);

    // Atomics between two QPs of one context, on its own memory.
    auto *word = reinterpret_cast<std::uint64_t *>(a.buf + 4000000);
    *word = 5;
    vq::wr_start(qc);
    qc->wr_id = 13;
    qc->wr_flags = vq::WR_SIGNALED;
    vq::wr_atomic_fetch_add(qc, a.mr->rkey, a.at(4000000), 10);
    vq::wr_set_sge(qc, a.mr->lkey, a.at(4000016), 8);
    qc->wr_id = 14;
    vq::wr_atomic_cmp_swp(qc, a.mr->rkey, a.at(4000000), 15, 99);
    vq::wr_set_sge(qc, a.mr->lkey, a.at(4000024), 8);
    ASSERT_EQ(vq::wr_complete(qc), 0);
    w = wait_wcs(a, 2);
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0].status, wc_status::success);
    EXPECT_EQ(w[1].status, wc_status::success);
    EXPECT_EQ(*reinterpret_cast<std::uint64_t *>(a.buf + 4000016), 5u);
    EXPECT_EQ(*reinterpret_cast<std::uint64_t *>(a.buf + 4000024), 15u);
    EXPECT_EQ(*word, 99u);

    EXPECT_EQ(f.wire_since(), 0u) << "a frame to the port itself went to the PMD";
    // The data packets alone (the send's, the write's and the read's
    // responses), besides acknowledgements and the read request.
    EXPECT_GE(f.looped_since(), big / 1024 + 2 * (70000 / 1024)) << "fewer frames looped than data packets sent";
}

TEST(Loopback, UdToTheOwnPortByIpv4AloneNeedsNoArp)
{
    ep a{dev}, b{dev};
    ASSERT_TRUE(a.ok() && b.ok());
    vq::qp *qa = a.qp(qp_type::ud, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM);
    vq::qp *qb = b.qp(qp_type::ud, vq::OPS_SEND);
    ASSERT_TRUE(qa && qb);
    ud_up(qa);
    ud_up(qb);
    // The port's IPv4 alone: nobody would answer an ARP request for it.
    vq::ah_attr aa;
    aa.dest.len = 4;
    std::memcpy(aa.dest.raw, b.ctx->addr.raw + 6, 4);
    vq::ah *ah = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(vq::create_ah(a.pd, &aa, &ah), 0);
    a.ahs.push_back(ah);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100)) << "an ARP wait";
    frames f;
    ASSERT_EQ(b.recv(qb, 7, 0, 4096), 0);
    fill(a.buf, 700, 3);
    vq::wr_start(qa);
    qa->wr_id = 1;
    qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_imm(qa, htonl(0x01020304));
    vq::wr_set_sge(qa, a.mr->lkey, a.at(0), 700);
    vq::wr_set_ud_addr(qa, ah, qb->qp_num, 0x1111);
    ASSERT_EQ(vq::wr_complete(qa), 0);
    auto r = wait_wcs(b, 1, {&a});
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, wc_status::success);
    EXPECT_EQ(r[0].byte_len, 40u + 700u);
    EXPECT_EQ(r[0].src_qp, qa->qp_num);
    EXPECT_EQ(r[0].imm_data, htonl(0x01020304));
    EXPECT_EQ(std::memcmp(b.buf + 40, a.buf, 700), 0);
    EXPECT_EQ(wait_wcs(a, 1, {&b})[0].status, wc_status::success);
    EXPECT_EQ(f.wire_since(), 0u);
    EXPECT_EQ(f.looped_since(), 1u);
}

TEST(Loopback, AFullLoopRingPushesBackAndNothingIsLost)
{
    // More datagrams than the loop ring holds, all posted before anyone
    // polls (UD has no window to stop them): the ring fills, the QP keeps
    // the rest staged, and polling (which empties the ring) lets them on.
    ep a{dev}, b{dev};
    ASSERT_TRUE(a.ok() && b.ok());
    const std::uint32_t n = 3000;
    vq::qp *qa = a.qp(qp_type::ud, vq::OPS_SEND, {4096, 16, 4, 4, 256});
    vq::qp *qb = b.qp(qp_type::ud, vq::OPS_SEND, {16, 4096, 4, 4, 256});
    ASSERT_TRUE(qa && qb);
    ud_up(qa);
    ud_up(qb);
    vq::ah_attr aa;
    aa.dest = b.ctx->addr;
    vq::ah *ah = nullptr;
    ASSERT_EQ(vq::create_ah(a.pd, &aa, &ah), 0);
    a.ahs.push_back(ah);
    for (std::uint32_t i = 0; i < n; i++)
        ASSERT_EQ(b.recv(qb, i, 64 * i, 64), 0);
    const std::uint64_t busy = counter(dev, eth::c_tx_busy);
    for (std::uint32_t i = 0; i < n; i++) {
        std::memcpy(a.buf + 8 * i, &i, 4);
        vq::wr_start(qa);
        qa->wr_id = i;
        qa->wr_flags = i + 1 == n ? vq::WR_SIGNALED : 0;
        vq::wr_send(qa);
        vq::wr_set_sge(qa, a.mr->lkey, a.at(8 * i), 8);
        vq::wr_set_ud_addr(qa, ah, qb->qp_num, 0x1111);
        ASSERT_EQ(vq::wr_complete(qa), 0) << i;
    }
    EXPECT_GT(counter(dev, eth::c_tx_busy), busy) << "the loop ring never filled: the test proves nothing";
    auto r = wait_wcs(b, n, {&a});
    ASSERT_EQ(r.size(), n);
    for (std::uint32_t i = 0; i < n; i++) {
        ASSERT_EQ(r[i].status, wc_status::success) << i;
        ASSERT_EQ(r[i].wr_id, i) << "the one QP's datagrams in the order sent";
        std::uint32_t v;
        std::memcpy(&v, b.buf + 64 * i + 40, 4);
        ASSERT_EQ(v, i);
    }
    auto s = wait_wcs(a, 1, {&b});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, wc_status::success);
}

} // namespace
} // namespace shunt::test
