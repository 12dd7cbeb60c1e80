// The model's wire between two ports: RC retransmission after drops and
// corruption (go-back-N, ICRC), retry and RNR limits, stalls; UD with its
// GRH; RAW_PACKET frames, TSO segments and checksums.
#include <arpa/inet.h>

#include "mlx5_fixture.h"

namespace shunt::test {
namespace {

using vq::wc_status;

class Transport : public Mlx5Model {
protected:
    vq::qp *q = nullptr, *peer = nullptr;
    vq::mr *m = nullptr, *pm = nullptr;
    /** An RC pair; @p rts_mask / @p at set retry attributes on our side. */
    void open_rc(unsigned mask = 0, vq::qp_attr at = {})
    {
        q = A.qp(vq::qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE | vq::OPS_RDMA_READ);
        peer = B.qp(vq::qp_type::rc, vq::OPS_SEND);
        connect(q, peer, 0, mask, &at);
        connect(peer, q);
        regs();
    }
    /** A UD pair with Q_Key @p qkey; @p ops on our side. */
    void open_ud(std::uint32_t qkey, std::uint64_t ops = vq::OPS_SEND)
    {
        q = A.qp(vq::qp_type::ud, ops);
        peer = B.qp(vq::qp_type::ud, vq::OPS_SEND);
        connect(q, nullptr, qkey);
        connect(peer, nullptr, qkey);
        regs();
    }
    void regs()
    {
        m = A.reg(1 << 20);
        pm = B.reg(1 << 20);
        for (int i = 0; i < (1 << 20); i++)
            static_cast<std::uint8_t *>(m->addr)[i] = static_cast<std::uint8_t>(i * 31 + 7);
    }
    std::uint64_t pa(std::size_t off = 0) const { return reinterpret_cast<std::uint64_t>(pm->addr) + off; }
};

/** Retry attributes: @p retries after a timeout of 4.096 us << @p timeout
 *  (8: 1 ms, to exhaust retries quickly; 12: 17 ms, for tests that must
 *  recover: a test thread descheduled for a millisecond on a loaded machine
 *  is a timeout, and seven of them would end the QP). */
vq::qp_attr fast_timeout(std::uint8_t retries, std::uint8_t timeout = 8)
{
    vq::qp_attr a;
    a.timeout = timeout;
    a.retry_cnt = retries;
    return a;
}

TEST_F(Transport, DroppedPacketsOfAnRcWriteAreRetransmitted)
{
    open_rc(vq::QP_ATTR_TIMEOUT | vq::QP_ATTR_RETRY_CNT, fast_timeout(7, 12));
    model::fault f;
    f.kind = model::fault_kind::drop;
    f.skip = 2;
    f.count = 3;
    ASSERT_EQ(model::inject(A.ctx, f), 0);
    ASSERT_EQ(vq::post_write(q, 1, m->addr, 40000, m->lkey, pm->rkey, pa(), vq::WR_SIGNALED), 0); // 10 packets
    vq::wc w = one(q->send_cq);
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(std::memcmp(pm->addr, m->addr, 40000), 0);
    EXPECT_GE(stats(A).retransmits, 1u);
    EXPECT_EQ(stats(A).pkts_dropped, 3u);
    EXPECT_GE(stats(B).naks_sent, 1u) << "the gap is NAKed (PSN sequence error)";
}

TEST_F(Transport, APortClosedWhileItsPeerStillHoldsItCanBeOpenedAgain)
{
    // B attaches A's port segment to answer it (the write's ACK), and keeps it
    // until B closes: a context of A's process opened again meanwhile is a new port
    // (the old name is still taken), and it works.
    open_rc();
    ASSERT_EQ(vq::post_write(q, 1, m->addr, 64, m->lkey, pm->rkey, pa(), vq::WR_SIGNALED), 0);
    ASSERT_EQ(one(q->send_cq).status, wc_status::success);
    vq::dev_addr old = A.ctx->addr;
    A.close();
    q = nullptr;
    m = nullptr;
    A.open();
    ASSERT_NE(A.ctx, nullptr);
    EXPECT_NE(std::memcmp(&A.ctx->addr, &old, sizeof old), 0) << "the reopened port reuses the held name";
    vq::qp *q2 = A.qp(vq::qp_type::rc, vq::OPS_SEND | vq::OPS_RDMA_WRITE);
    vq::qp *p2 = B.qp(vq::qp_type::rc, vq::OPS_SEND);
    connect(q2, p2);
    connect(p2, q2);
    vq::mr *m2 = A.reg(4096, vq::ACCESS_LOCAL_WRITE, 0x5a);
    std::memset(pm->addr, 0, 4096);
    ASSERT_EQ(vq::post_write(q2, 3, m2->addr, 4096, m2->lkey, pm->rkey, pa(), vq::WR_SIGNALED), 0);
    vq::wc w = one(q2->send_cq);
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(static_cast<std::uint8_t *>(pm->addr)[4095], 0x5a);
}

TEST_F(Transport, ACorruptedPacketFailsItsIcrcAndIsResent)
{
    open_rc(vq::QP_ATTR_TIMEOUT | vq::QP_ATTR_RETRY_CNT, fast_timeout(7, 12));
    ASSERT_EQ(vq::post_recv(peer, 1, pa(), 1 << 20, pm->lkey), 0);
    model::fault f;
    f.kind = model::fault_kind::corrupt;
    f.skip = 1;
    ASSERT_EQ(model::inject(A.ctx, f), 0);
    ASSERT_EQ(vq::post_send(q, 1, m->addr, 20000, m->lkey, vq::WR_SIGNALED), 0);
    EXPECT_EQ(one(q->send_cq).status, wc_status::success);
    vq::wc r = one(peer->recv_cq);
    EXPECT_EQ(r.status, wc_status::success);
    EXPECT_EQ(r.byte_len, 20000u);
    EXPECT_EQ(std::memcmp(pm->addr, m->addr, 20000), 0) << "no corrupted byte was placed";
    EXPECT_EQ(stats(B).pkts_dropped, 1u) << "the receiver dropped the bad ICRC";
}

TEST_F(Transport, RetriesExhaustedIsRetryExceededAndFlushesTheRest)
{
    open_rc(vq::QP_ATTR_TIMEOUT | vq::QP_ATTR_RETRY_CNT, fast_timeout(2));
    model::fault f;
    f.kind = model::fault_kind::drop;
    f.count = 1000;
    ASSERT_EQ(model::inject(A.ctx, f), 0);
    ASSERT_EQ(vq::post_write(q, 1, m->addr, 100, m->lkey, pm->rkey, pa(), 0), 0);
    ASSERT_EQ(vq::post_write(q, 2, m->addr, 100, m->lkey, pm->rkey, pa(), vq::WR_SIGNALED), 0);
    vq::wc w = one(q->send_cq);
    EXPECT_EQ(w.wr_id, 1u) << "the unsignaled request fails too";
    EXPECT_EQ(w.status, wc_status::retry_exc_err);
    EXPECT_EQ(w.vendor_err, model::vs_retry);
    vq::wc f2 = one(q->send_cq);
    EXPECT_EQ(f2.wr_id, 2u);
    EXPECT_EQ(f2.status, wc_status::wr_flush_err);
    EXPECT_EQ(stats(A).retransmits, 2u) << "retry_cnt 2: two retransmissions, then the error";
}

TEST_F(Transport, NoReceiveWithRnrRetryZeroIsRnrRetryExceeded)
{
    vq::qp_attr at;
    at.rnr_retry = 0;
    open_rc(vq::QP_ATTR_RNR_RETRY, at);
    ASSERT_EQ(vq::post_send(q, 1, m->addr, 64, m->lkey, vq::WR_SIGNALED), 0);
    vq::wc w = one(q->send_cq);
    EXPECT_EQ(w.status, wc_status::rnr_retry_exc_err);
    EXPECT_EQ(w.vendor_err, model::vs_rnr);
    EXPECT_EQ(stats(B).rnr_naks, 1u);
}

TEST_F(Transport, RnrRetrySevenWaitsForTheReceive)
{
    open_rc();
    ASSERT_EQ(vq::post_send(q, 1, m->addr, 5000, m->lkey, vq::WR_SIGNALED), 0);
    run_until([&] { return stats(B).rnr_naks >= 3; });
    EXPECT_GE(stats(B).rnr_naks, 3u) << "RNR NAKs, retried after the responder's timer";
    vq::wc none;
    EXPECT_EQ(vq::poll_cq(q->send_cq, 1, &none), 0);
    ASSERT_EQ(vq::post_recv(peer, 3, pa(), 8192, pm->lkey), 0);
    EXPECT_EQ(one(q->send_cq).status, wc_status::success);
    vq::wc r = one(peer->recv_cq);
    EXPECT_EQ(r.byte_len, 5000u);
    EXPECT_EQ(std::memcmp(pm->addr, m->addr, 5000), 0);
}

TEST_F(Transport, AStalledPortDelaysButLosesNothing)
{
    open_rc();
    ASSERT_EQ(vq::post_recv(peer, 1, pa(), 4096, pm->lkey), 0);
    model::fault f;
    f.kind = model::fault_kind::stall;
    f.stall_ms = 30;
    ASSERT_EQ(model::inject(B.ctx, f), 0);
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(vq::post_send(q, 1, m->addr, 100, m->lkey, vq::WR_SIGNALED), 0);
    EXPECT_EQ(one(q->send_cq).status, wc_status::success);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(25)) << "the stall held the reply";
    EXPECT_EQ(one(peer->recv_cq).byte_len, 100u);
}

TEST_F(Transport, ReadsLargerThanTheMtuComeBackInOrder)
{
    open_rc();
    std::memcpy(pm->addr, m->addr, 100000);
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_rdma_read(q, pm->rkey, pa());
    vq::wr_set_sge(q, m->lkey, reinterpret_cast<std::uint64_t>(m->addr) + 200000, 100000);
    ASSERT_EQ(vq::wr_complete(q), 0);
    vq::wc w = one(q->send_cq);
    EXPECT_EQ(w.status, wc_status::success);
    EXPECT_EQ(w.byte_len, 100000u);
    EXPECT_EQ(std::memcmp(static_cast<std::uint8_t *>(m->addr) + 200000, pm->addr, 100000), 0);
}

TEST_F(Transport, UdDeliversWithAGrhNamingBothPorts)
{
    open_ud(0x99, vq::OPS_SEND | vq::OPS_SEND_WITH_IMM);
    vq::ah *ah = A.ah_to(B.ctx);
    ASSERT_NE(ah, nullptr);
    ASSERT_EQ(vq::post_recv(peer, 1, pa(), 4096, pm->lkey), 0);
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_imm(q, htonl(77));
    vq::wr_set_sge(q, m->lkey, reinterpret_cast<std::uint64_t>(m->addr), 1000);
    vq::wr_set_ud_addr(q, ah, peer->qp_num, 0x99);
    ASSERT_EQ(vq::wr_complete(q), 0);
    EXPECT_EQ(one(q->send_cq).status, wc_status::success);
    vq::wc r = one(peer->recv_cq);
    EXPECT_EQ(r.status, wc_status::success);
    EXPECT_EQ(r.byte_len, 1040u);
    EXPECT_EQ(r.src_qp, q->qp_num);
    EXPECT_EQ(r.wc_flags, vq::WC_GRH | vq::WC_WITH_IMM);
    EXPECT_EQ(r.imm_data, htonl(77));
    const auto *g = static_cast<const std::uint8_t *>(pm->addr);
    EXPECT_EQ(g[0] >> 4, 6) << "GRH IP version";
    EXPECT_EQ(g[6], 0x1b) << "GRH next header: IBA transport";
    EXPECT_EQ(std::memcmp(g + 8, A.ctx->addr.raw, 16), 0) << "source GID: the sending port";
    EXPECT_EQ(std::memcmp(g + 24, B.ctx->addr.raw, 16), 0) << "destination GID: this port";
    EXPECT_EQ(std::memcmp(g + 40, m->addr, 1000), 0);
}

TEST_F(Transport, UdOverTheMtuIsRefusedAtPostAndADroppedDatagramStillCompletes)
{
    open_ud(1);
    vq::ah *ah = A.ah_to(B.ctx);
    ASSERT_NE(ah, nullptr);
    vq::wr_start(q);
    vq::wr_send(q);
    vq::wr_set_sge(q, m->lkey, reinterpret_cast<std::uint64_t>(m->addr), 4097);
    vq::wr_set_ud_addr(q, ah, peer->qp_num, 1);
    EXPECT_EQ(vq::wr_complete(q), -FI_EMSGSIZE);
    model::fault f;
    f.kind = model::fault_kind::drop;
    ASSERT_EQ(model::inject(A.ctx, f), 0);
    ASSERT_EQ(vq::post_recv(peer, 1, pa(), 4096, pm->lkey), 0);
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED;
    vq::wr_send(q);
    vq::wr_set_sge(q, m->lkey, reinterpret_cast<std::uint64_t>(m->addr), 100);
    vq::wr_set_ud_addr(q, ah, peer->qp_num, 1);
    ASSERT_EQ(vq::wr_complete(q), 0);
    EXPECT_EQ(one(q->send_cq).status, wc_status::success) << "UD: lost on the wire, done for the sender";
    EXPECT_TRUE(drain(peer->recv_cq).empty());
}

/* ---- RAW_PACKET ---- */

/** A TCP/IPv4 frame from @p src_mac-less sender to port @p dst (the model's MACs are 02:<port id>). */
std::vector<std::uint8_t> tcp_header(const vq::dev_addr &dst, std::uint16_t payload)
{
    std::vector<std::uint8_t> h(54, 0);
    std::uint32_t pid;
    std::uint16_t tag;
    std::memcpy(&pid, dst.raw + 10, 4);
    std::memcpy(&tag, dst.raw + 14, 2);
    std::uint64_t port = static_cast<std::uint64_t>(be32toh(pid)) << 16 | be16toh(tag);
    h[0] = 0x02;
    for (int i = 0; i < 5; i++)
        h[1 + i] = static_cast<std::uint8_t>(port >> (8 * (4 - i)));
    h[6] = 0x02;
    h[12] = 0x08;
    std::uint8_t *ip = h.data() + 14;
    ip[0] = 0x45;
    std::uint16_t tot = htons(static_cast<std::uint16_t>(40 + payload));
    std::memcpy(ip + 2, &tot, 2);
    ip[4] = 0x12;
    ip[5] = 0x34;
    ip[8] = 64;
    ip[9] = 6;
    ip[12] = 10, ip[15] = 1, ip[16] = 10, ip[19] = 2;
    std::uint8_t *tcp = ip + 20;
    tcp[1] = 80, tcp[3] = 81;
    tcp[4] = 0, tcp[5] = 0, tcp[6] = 0x10, tcp[7] = 0; // seq 4096
    tcp[12] = 0x50;
    tcp[13] = 0x18; // PSH ACK
    return h;
}

std::uint16_t fold(std::uint32_t s)
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return static_cast<std::uint16_t>(s);
}
std::uint32_t sum16(const std::uint8_t *p, std::size_t n, std::uint32_t s = 0)
{
    for (std::size_t i = 0; i + 1 < n; i += 2)
        s += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    if (n & 1)
        s += static_cast<std::uint32_t>(p[n - 1] << 8);
    return s;
}

TEST_F(Transport, RawTsoCutsFramesFixesHeadersAndTheReceiverSeesValidChecksums)
{
    q = A.qp(vq::qp_type::raw_packet, vq::OPS_SEND | vq::OPS_TSO);
    peer = B.qp(vq::qp_type::raw_packet, vq::OPS_SEND, {0, 16, 1, 1, 0});
    connect(q, nullptr);
    connect(peer, nullptr);
    regs();
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(vq::post_recv(peer, static_cast<std::uint64_t>(i), pa(static_cast<std::size_t>(i) * 4096), 4096,
                                pm->lkey),
                  0);
    const std::uint16_t mss = 1000, payload = 2500;
    auto hdr = tcp_header(B.ctx->addr, payload);
    vq::wr_start(q);
    q->wr_flags = vq::WR_SIGNALED | vq::WR_IP_CSUM;
    vq::wr_send_tso(q, hdr.data(), 54, mss);
    vq::wr_set_sge(q, m->lkey, reinterpret_cast<std::uint64_t>(m->addr), payload);
    ASSERT_EQ(vq::wr_complete(q), 0);
    EXPECT_EQ(one(q->send_cq).status, wc_status::success);
    auto r = drain(peer->recv_cq);
    ASSERT_EQ(r.size(), 3u) << "2500 bytes at mss 1000: three segments";
    for (std::size_t s = 0; s < 3; s++) {
        std::uint32_t n = s < 2 ? mss : payload - 2 * mss;
        EXPECT_EQ(r[s].byte_len, 54 + n);
        EXPECT_TRUE(r[s].wc_flags & vq::WC_IP_CSUM_OK) << "segment " << s;
        const std::uint8_t *f = static_cast<const std::uint8_t *>(pm->addr) + r[s].wr_id * 4096;
        const std::uint8_t *ip = f + 14;
        EXPECT_EQ(fold(sum16(ip, 20)), 0xffff) << "IPv4 header checksum, segment " << s;
        EXPECT_EQ((ip[2] << 8 | ip[3]), static_cast<int>(40 + n));
        EXPECT_EQ((ip[4] << 8 | ip[5]), 0x1234 + static_cast<int>(s)) << "IP id advances";
        const std::uint8_t *tcp = ip + 20;
        std::uint32_t seq = static_cast<std::uint32_t>(tcp[4] << 24 | tcp[5] << 16 | tcp[6] << 8 | tcp[7]);
        EXPECT_EQ(seq, 4096 + s * mss);
        EXPECT_EQ(tcp[13] & 0x08, s == 2 ? 0x08 : 0) << "PSH on the last segment only";
        std::uint32_t ps = sum16(ip + 12, 8) + 6 + 20 + n;
        EXPECT_EQ(fold(sum16(tcp, 20 + n, ps)), 0xffff) << "TCP checksum, segment " << s;
        EXPECT_EQ(std::memcmp(tcp + 20, static_cast<std::uint8_t *>(m->addr) + s * mss, n), 0);
    }
}

TEST_F(Transport, RawFramesToAnUnknownStationAreLost)
{
    q = A.qp(vq::qp_type::raw_packet, vq::OPS_SEND);
    connect(q, nullptr);
    regs();
    std::uint8_t *f = static_cast<std::uint8_t *>(m->addr);
    std::memset(f, 0xff, 6); // broadcast: no modelled station
    ASSERT_EQ(vq::post_send(q, 1, f, 60, m->lkey, vq::WR_SIGNALED), 0);
    EXPECT_EQ(one(q->send_cq).status, wc_status::success);
}

} // namespace
} // namespace shunt::test
