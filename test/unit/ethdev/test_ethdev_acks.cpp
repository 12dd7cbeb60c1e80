// drivers/ethdev RC acknowledgements, counted in frames on the wire (the
// ports' tx_frames counters over a net_ring pair): an 8-byte ping-pong of
// unsignaled sends costs about one frame per message and side, the
// acknowledgements being coalesced; a signaled send still gets its own.
#include "eth_fixture.h"

using namespace shunt::test;
using vq::qp_type;
using vq::wc_status;

namespace {

constexpr std::uint64_t rc_send_ops = vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ;

struct pp_pair {
    ep a{dev0a}, b{dev0b};
    vq::qp *qa = a.qp(qp_type::rc, rc_send_ops, {256, 256, 1, 1, 64});
    vq::qp *qb = b.qp(qp_type::rc, rc_send_ops, {256, 256, 1, 1, 64});
    pp_pair()
    {
        if (!ok())
            return; // reported: the test checks ok()
        rc_up(qa, qb);
        rc_up(qb, qa);
    }
    bool ok() const { return a.ok() && b.ok() && qa && qb; }
};

std::uint64_t tx_frames(const char *dev) { return counter(dev, eth::c_tx_frames); }

/** Wait for one receive completion at @p at (polling @p other too) and
 *  check its 8 bytes. */
void take_pong(ep &at, ep &other, std::size_t off, std::uint64_t want)
{
    auto w = wait_wcs(at, 1, {&other});
    ASSERT_EQ(w.size(), 1u);
    ASSERT_EQ(w[0].status, wc_status::success);
    ASSERT_EQ(w[0].opcode, vq::wc_opcode::recv);
    ASSERT_EQ(w[0].byte_len, 8u);
    std::uint64_t got;
    std::memcpy(&got, at.buf + off, 8);
    ASSERT_EQ(got, want);
}

} // namespace

// N rounds of an 8-byte ping-pong with unsignaled inline sends: each side
// sends N messages and at most N / 8 + 4 acknowledgements (one per 16
// packets, or when an acknowledgement has been deferred for a while), not
// one per message. A signaled send at the end completes, so everything
// before it was acknowledged.
TEST(RcAcks, An8BytePingPongSendsAboutOneFramePerMessagePerSide)
{
    pp_pair p;
    ASSERT_TRUE(p.ok());
    constexpr std::uint32_t rounds = 256, rq = 64;
    for (std::uint32_t i = 0; i < rq; i++) {
        ASSERT_EQ(p.a.recv(p.qa, i, 4096 + i * 64, 64), 0);
        ASSERT_EQ(p.b.recv(p.qb, i, 4096 + i * 64, 64), 0);
    }
    const std::uint64_t fa0 = tx_frames(dev0a), fb0 = tx_frames(dev0b);
    for (std::uint32_t i = 0; i < rounds; i++) {
        std::uint64_t ping = 0x5049000000000000ull | i, pong = 0x504f000000000000ull | i;
        std::memcpy(p.a.buf, &ping, 8);
        ASSERT_EQ(vq::post_send(p.qa, i, p.a.buf, 8, p.a.mr->lkey, vq::WR_INLINE), 0);
        ASSERT_NO_FATAL_FAILURE(take_pong(p.b, p.a, 4096 + (i % rq) * 64, ping)) << "round " << i;
        ASSERT_EQ(p.b.recv(p.qb, i, 4096 + (i % rq) * 64, 64), 0);
        std::memcpy(p.b.buf, &pong, 8);
        ASSERT_EQ(vq::post_send(p.qb, i, p.b.buf, 8, p.b.mr->lkey, vq::WR_INLINE), 0);
        ASSERT_NO_FATAL_FAILURE(take_pong(p.a, p.b, 4096 + (i % rq) * 64, pong)) << "round " << i;
        ASSERT_EQ(p.a.recv(p.qa, i, 4096 + (i % rq) * 64, 64), 0);
    }
    // Deferred acknowledgements leave within a fraction of the timeout.
    EXPECT_TRUE(drain(p.a, {&p.b}, 50).empty()) << "unsignaled sends completed";
    const std::uint64_t fa = tx_frames(dev0a) - fa0, fb = tx_frames(dev0b) - fb0;
    std::printf("%u rounds: %llu frames from a, %llu from b\n", rounds, static_cast<unsigned long long>(fa),
                static_cast<unsigned long long>(fb));
    EXPECT_GE(fa, rounds);
    EXPECT_GE(fb, rounds);
    EXPECT_LE(fa, rounds + rounds / 8 + 4) << "acknowledgements are coalesced";
    EXPECT_LE(fb, rounds + rounds / 8 + 4) << "acknowledgements are coalesced";
    // A signaled send is acknowledged on its own; it completes, and with
    // it every unsignaled send before it.
    ASSERT_EQ(vq::post_send(p.qa, 1000, p.a.buf, 8, p.a.mr->lkey, vq::WR_INLINE | vq::WR_SIGNALED), 0);
    auto w = wait_wcs(p.a, 1, {&p.b});
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].wr_id, 1000u);
    EXPECT_EQ(w[0].status, wc_status::success);
    EXPECT_EQ(wait_wcs(p.b, 1, {&p.a}).size(), 1u);
}

// A stream of unsignaled sends that fills half the send queue asks for an
// acknowledgement, so the queue never stalls waiting for the responder's
// deferred one: 4 x the queue's depth of messages go through without a
// completion being polled, in a bounded time.
TEST(RcAcks, UnsignaledStreamsLongerThanTheSendQueueKeepMoving)
{
    pp_pair p;
    ASSERT_TRUE(p.ok());
    constexpr std::uint32_t msgs = 1024;
    std::uint32_t posted = 0, got = 0, rposted = 0;
    for (; rposted < 200; rposted++)
        ASSERT_EQ(p.b.recv(p.qb, rposted, 4096 + (rposted % 256) * 64, 64), 0);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (got < msgs && std::chrono::steady_clock::now() < end) {
        if (posted < msgs) {
            std::uint64_t v = posted;
            std::memcpy(p.a.buf, &v, 8);
            int rc = vq::post_send(p.qa, posted, p.a.buf, 8, p.a.mr->lkey, vq::WR_INLINE);
            ASSERT_TRUE(rc == 0 || rc == -shunt::FI_EAGAIN) << rc;
            if (rc == 0)
                posted++;
        }
        p.a.pump();
        ASSERT_TRUE(p.a.wcs.empty()) << "an unsignaled send completed";
        vq::wc wc[32];
        int k = vq::poll_cq(p.b.cq, 32, wc);
        ASSERT_GE(k, 0);
        for (int i = 0; i < k; i++) {
            ASSERT_EQ(wc[i].status, wc_status::success);
            std::uint64_t v;
            std::memcpy(&v, p.b.buf + 4096 + (wc[i].wr_id % 256) * 64, 8);
            ASSERT_EQ(v, got) << "in order";
            got++;
            ASSERT_EQ(p.b.recv(p.qb, rposted, 4096 + (rposted % 256) * 64, 64), 0);
            rposted++;
        }
    }
    EXPECT_EQ(got, msgs);
}
