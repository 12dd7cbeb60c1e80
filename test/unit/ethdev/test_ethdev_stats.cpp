// drivers/ethdev statistics: after a known exchange each QP's block
// ethdev.<port>.qp.<qpn> counts exactly what was sent, received, dropped and
// sent again (a frame dropped on purpose by the impairing forwarder), read
// through the C++ stats API and, from another process, dpdk-telemetry.py;
// the port block ethdev.<port> equals the driver's port counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "env/stats.h"
#include "eth_fixture.h"
#include "telemetry_query.h"

namespace shunt::test {
namespace {

namespace st = shunt::env::stats;
using vq::qp_type;
using vq::wc_status;

constexpr std::uint64_t ops = vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ;

std::string qp_block(const char *dev, const vq::qp *q)
{
    return std::string("ethdev.") + dev + ".qp." + std::to_string(q->qp_num);
}

/** The block @p name read now (fails the test when it is not open). */
st::block_snapshot snap(const std::string &name)
{
    st::block_snapshot b;
    EXPECT_EQ(st::read(name, b), 0) << name;
    return b;
}

std::uint64_t val(const st::block_snapshot &b, const char *f)
{
    const st::field_value *v = b.find(f);
    EXPECT_NE(v, nullptr) << b.name << " has no " << f;
    return v ? (v->k == st::kind::histogram ? v->hist.total : v->value) : ~0ull;
}

/** dpdk-telemetry.py reads fields @p f (names separated by spaces) of
 *  @p name as @p want (values so separated); skipped, visibly, without it. */
void expect_remote(const std::string &name, const char *f, const std::string &want)
{
    if (!have_prog("dpdk-telemetry.py")) {
        std::printf("skip dpdk-telemetry.py (Debian package dpdk-dev) is not installed\n");
        return;
    }
    EXPECT_EQ(telemetry_field(name, f), want) << "dpdk-telemetry.py, " << name << " " << f;
}

struct pair {
    ep a, b;
    vq::qp *qa, *qb;
    pair(const char *da, const char *db, vq::qp_attr x = {}, unsigned mask = 0) : a(da), b(db)
    {
        qa = a.qp(qp_type::rc, ops, {256, 256, 4, 4, 256});
        qb = b.qp(qp_type::rc, ops, {256, 256, 4, 4, 256});
        if (!qa || !qb)
            return; // reported: the test checks ok()
        rc_up(qa, qb, x, mask);
        rc_up(qb, qa, x, mask);
    }
    bool ok() const { return a.ok() && b.ok() && qa && qb; }
};

/** Post @p n signalled sends of @p len bytes (retrying while the queue is full). */
void sends(pair &p, std::uint32_t n, std::uint32_t len)
{
    for (std::uint32_t i = 0; i < n; i++) {
        int rc;
        while ((rc = vq::post_send(p.qa, i, p.a.buf + i * len, len, p.a.mr->lkey, vq::WR_SIGNALED)) == -FI_EAGAIN)
            p.a.pump(), p.b.pump();
        ASSERT_EQ(rc, 0);
    }
}

TEST(EthdevStats, RcCountsMessagesBytesCompletionsAndDepthExactly)
{
    if (!st::enabled())
        GTEST_SKIP() << "SHUNT_TELEMETRY=0: no blocks";
    pair p(dev0a, dev0b);
    ASSERT_TRUE(p.ok());
    constexpr std::uint32_t n = 40, len = 100, wlen = 3000;
    for (std::uint32_t i = 0; i < n; i++)
        ASSERT_EQ(p.b.recv(p.qb, i, i * len, len), 0);
    // An unsignalled write of several packets first: counted when it completes
    // (in order, before the sends), with no latency sample.
    vq::wr_start(p.qa);
    p.qa->wr_id = 99;
    p.qa->wr_flags = 0;
    vq::wr_rdma_write(p.qa, p.b.mr->rkey, p.b.at(1u << 20));
    vq::wr_set_sge(p.qa, p.a.mr->lkey, p.a.at(1u << 20), wlen);
    ASSERT_EQ(vq::wr_complete(p.qa), 0);
    sends(p, n, len);
    ASSERT_EQ(wait_wcs(p.b, n, {&p.a}).size(), n);
    ASSERT_EQ(wait_wcs(p.a, n, {&p.b}).size(), n);

    const std::string na = qp_block(dev0a, p.qa), nb = qp_block(dev0b, p.qb);
    st::block_snapshot a = snap(na), b = snap(nb);
    EXPECT_EQ(a.type, "ethdev.qp");
    EXPECT_EQ(val(a, "tx_msgs"), n + 1);
    EXPECT_EQ(val(a, "tx_bytes"), n * len + wlen);
    EXPECT_EQ(val(a, "completion"), n) << "one latency sample per signalled send";
    const st::field_value *c = a.find("completion");
    ASSERT_NE(c, nullptr);
    EXPECT_GT(c->hist.max, 0u);
    EXPECT_EQ(val(a, "depth"), 0u) << "everything completed";
    EXPECT_GE(val(a, "depth_max"), 1u);
    EXPECT_LE(val(a, "depth_max"), n + 1);
    EXPECT_EQ(val(b, "rx_msgs"), n) << "the write consumed no receive";
    EXPECT_EQ(val(b, "rx_bytes"), n * len);
    for (const auto *blk : {&a, &b})
        for (const char *f : {"errors", "drops", "retransmits", "rx_ring_full", "naks_sent", "rnr_naks_sent",
                              "naks_received", "rnr_naks_received"})
            EXPECT_EQ(val(*blk, f), 0u) << blk->name << " " << f << " on a lossless link";
    EXPECT_EQ(val(a, "rx_msgs"), 0u);
    EXPECT_EQ(val(b, "tx_msgs"), 0u) << "acknowledgements are not messages";

    expect_remote(na, "tx_msgs tx_bytes completion_count",
                  std::to_string(n + 1) + " " + std::to_string(n * len + wlen) + " " + std::to_string(n));

    vq::qp *qa = p.qa;
    std::string gone = qp_block(dev0a, qa);
    EXPECT_EQ(vq::destroy_qp(qa), 0);
    p.a.qps.erase(std::find(p.a.qps.begin(), p.a.qps.end(), qa));
    st::block_snapshot x;
    EXPECT_EQ(st::read(gone, x), -FI_ENOENT) << "the block goes with its QP";
}

TEST(EthdevStats, AFrameDroppedOnTheWireIsSentAgainAndEveryExtraFrameIsADropAtTheResponder)
{
    if (!st::enabled())
        GTEST_SKIP() << "SHUNT_TELEMETRY=0: no blocks";
    impair_fwd f;
    f.drop_at = 5; // the sixth frame from pair0a to pair1b
    f.start();
    ASSERT_TRUE(f.ok());
    vq::qp_attr x;
    x.timeout = 12;
    x.retry_cnt = 7;
    pair p(dev0a, dev1b, x, vq::QP_ATTR_TIMEOUT | vq::QP_ATTR_RETRY_CNT);
    ASSERT_TRUE(p.ok());
    const std::uint64_t full0 = counter(dev0b, eth::c_rx_qp_full);
    constexpr std::uint32_t n = 50, len = 200;
    for (std::uint32_t i = 0; i < n; i++)
        ASSERT_EQ(p.b.recv(p.qb, i, i * len, len), 0);
    fill(p.a.buf, n * len, 7);
    sends(p, n, len);
    auto r = wait_wcs(p.b, n, {&p.a}, 30000);
    ASSERT_EQ(r.size(), n);
    for (std::uint32_t i = 0; i < n; i++)
        ASSERT_EQ(r[i].status, wc_status::success) << i;
    ASSERT_EQ(wait_wcs(p.a, n, {&p.b}, 30000).size(), n);
    drain(p.b, {&p.a}, 50); // a late duplicate reaches the responder's counts
    EXPECT_EQ(f.dropped.load(), 1u);

    st::block_snapshot a = snap(qp_block(dev0a, p.qa)), b = snap(qp_block(dev1b, p.qb));
    const std::uint64_t re = val(a, "retransmits");
    EXPECT_GE(re, 1u) << "the lost frame was sent again";
    EXPECT_EQ(val(a, "tx_msgs"), n);
    EXPECT_EQ(val(b, "rx_msgs"), n);
    EXPECT_EQ(val(b, "rx_bytes"), n * len);
    // Every frame the responder got beyond the n it accepted is a drop (out
    // of sequence behind the gap, or a duplicate): at most n + re sent, one
    // lost. Fewer when a late NAK moved the requester past packets a timeout
    // had put back in line (a loaded machine): then they were not sent again.
    const std::uint64_t lost_in_fwd = counter(dev0b, eth::c_rx_qp_full) - full0;
    const std::uint64_t extra = val(b, "drops") + val(b, "rx_ring_full") + lost_in_fwd;
    EXPECT_GE(extra, 1u) << "the packets behind the gap were refused";
    EXPECT_LE(extra, re - 1);
    if (extra != re - 1)
        std::printf("note: %llu packets put back in line, %llu extra frames at the responder\n",
                    static_cast<unsigned long long>(re), static_cast<unsigned long long>(extra));
    EXPECT_GE(val(b, "naks_sent"), 1u) << "the gap was NAKed";
    EXPECT_LE(val(a, "naks_received"), val(b, "naks_sent"));
    EXPECT_EQ(val(a, "errors") + val(b, "errors"), 0u);
    expect_remote(qp_block(dev0a, p.qa), "retransmits", std::to_string(re));
}

TEST(EthdevStats, RnrNaksAreCountedOnBothSides)
{
    if (!st::enabled())
        GTEST_SKIP() << "SHUNT_TELEMETRY=0: no blocks";
    pair p(dev0a, dev0b);
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(vq::post_send(p.qa, 1, p.a.buf, 100, p.a.mr->lkey, vq::WR_SIGNALED), 0);
    EXPECT_TRUE(drain(p.a, {&p.b}, 30).empty()) << "completed without a receive at the peer";
    ASSERT_EQ(p.b.recv(p.qb, 9, 0, 4096), 0);
    ASSERT_EQ(wait_wcs(p.a, 1, {&p.b}).size(), 1u);
    ASSERT_EQ(wait_wcs(p.b, 1, {&p.a}).size(), 1u);
    st::block_snapshot a = snap(qp_block(dev0a, p.qa)), b = snap(qp_block(dev0b, p.qb));
    EXPECT_GE(val(b, "rnr_naks_sent"), 1u);
    EXPECT_GE(val(a, "rnr_naks_received"), 1u);
    EXPECT_LE(val(a, "rnr_naks_received"), val(b, "rnr_naks_sent"));
    EXPECT_EQ(val(a, "naks_received"), 0u);
    EXPECT_GE(val(a, "retransmits"), 1u) << "the refused send went again";
    EXPECT_EQ(val(b, "drops"), val(b, "rnr_naks_sent")) << "each refused packet is a drop";
    EXPECT_EQ(val(b, "rx_msgs"), 1u);
    EXPECT_EQ(val(a, "tx_msgs"), 1u);
}

/** A signalled 64-byte datagram from u.qa to u.qb with @p qkey. */
void send_ud(ud_pair &u, std::uint32_t qkey)
{
    vq::wr_start(u.qa);
    u.qa->wr_id = qkey;
    u.qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(u.qa);
    vq::wr_set_sge(u.qa, u.a.mr->lkey, u.a.at(0), 64);
    vq::wr_set_ud_addr(u.qa, u.ah, u.qb->qp_num, qkey);
    ASSERT_EQ(vq::wr_complete(u.qa), 0);
}

TEST(EthdevStats, UdCountsPayloadWithoutTheGrhAndAWrongQkeyAsADrop)
{
    if (!st::enabled())
        GTEST_SKIP() << "SHUNT_TELEMETRY=0: no blocks";
    ud_pair u;
    ASSERT_TRUE(u.ok());
    ep &a = u.a, &b = u.b;
    vq::qp *qa = u.qa, *qb = u.qb;
    ASSERT_EQ(b.recv(qb, 7, 0, 4096), 0);
    send_ud(u, 0x2222);
    send_ud(u, 0x1111);
    ASSERT_EQ(wait_wcs(a, 2, {&b}).size(), 2u);
    ASSERT_EQ(wait_wcs(b, 1, {&a}).size(), 1u);
    st::block_snapshot sa = snap(qp_block(dev0a, qa)), sb = snap(qp_block(dev0b, qb));
    EXPECT_EQ(val(sa, "tx_msgs"), 2u) << "a datagram is sent whatever its Q_Key";
    EXPECT_EQ(val(sa, "tx_bytes"), 128u);
    EXPECT_EQ(val(sa, "completion"), 2u);
    EXPECT_EQ(val(sb, "drops"), 1u) << "the wrong Q_Key";
    EXPECT_EQ(val(sb, "rx_msgs"), 1u);
    EXPECT_EQ(val(sb, "rx_bytes"), 64u) << "payload, not the 40-byte GRH area";
    // A failed batch (not -FI_EAGAIN) is an error of the queue.
    vq::wr_start(qa);
    qa->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(qa);
    vq::wr_set_sge(qa, a.mr->lkey, a.at(0), 64); // no set_ud_addr
    EXPECT_EQ(vq::wr_complete(qa), -FI_EINVAL);
    EXPECT_EQ(val(snap(qp_block(dev0a, qa)), "errors"), 1u);
}

TEST(EthdevStats, ThePortBlockIsThePortsCounters)
{
    if (!st::enabled())
        GTEST_SKIP() << "SHUNT_TELEMETRY=0: no blocks";
    {
        ud_pair u; // one datagram with a wrong Q_Key: counted by the port and the QP
        ASSERT_TRUE(u.ok());
        send_ud(u, 0x2222);
        ASSERT_EQ(wait_wcs(u.a, 1, {&u.b}).size(), 1u);
        EXPECT_TRUE(drain(u.b, {&u.a}, 30).empty());
    }
    eth::port_counters pc{};
    ASSERT_EQ(eth::query_counters(device(dev0b), &pc), 0);
    st::block_snapshot b = snap(std::string("ethdev.") + dev0b);
    EXPECT_EQ(b.type, "ethdev.port");
    ASSERT_EQ(b.fields.size(), static_cast<std::size_t>(eth::num_counters));
    for (unsigned c = 0; c < eth::num_counters; c++)
        EXPECT_EQ(val(b, eth::counter_name(c)), pc.drv[c]) << eth::counter_name(c);
    EXPECT_GE(pc.drv[eth::c_rx_qkey], 1u);
    expect_remote(std::string("ethdev.") + dev0b, "rx_qkey rx_no_qp",
                  std::to_string(pc.drv[eth::c_rx_qkey]) + " " + std::to_string(pc.drv[eth::c_rx_no_qp]));
}

} // namespace
} // namespace shunt::test
