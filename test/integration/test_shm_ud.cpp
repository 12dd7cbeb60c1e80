// UD between processes: many senders to one receiver (each sender gets its
// own ring, claimed lazily), and TSO segments received by a peer.
#include <map>

#include "shm_peer_client.h"

namespace shunt::test {
namespace {

using vq::wc_status;

TEST(ShmUd, TwoSendersOneReceiver)
{
    local_end me(vq::qp_type::ud);
    shm_peer p1("ud"), p2("ud");
    ASSERT_EQ(me.connect(p1.addr), 0); // UD: the address is ignored
    ASSERT_EQ(p1.connect(vq::get_qp_addr(me.qp)), 0);
    ASSERT_EQ(p2.connect(vq::get_qp_addr(me.qp)), 0);
    const std::uint32_t n = 300, len = 100;
    for (std::uint32_t i = 0; i < 1024; i++)
        ASSERT_EQ(vq::post_recv(me.qp, i, me.addr(i * 128), 128, me.mr->lkey), 0);
    for (auto *p : {&p1, &p2}) {
        pp::request r{};
        r.op = pp::ud_send;
        r.n = n;
        r.a = len;
        r.b = 0x1234; // our Q_Key (local_end sets it)
        r.c = p == &p1 ? 0xa1 : 0xb2;
        r.addr = vq::get_qp_addr(me.qp);
        p->start(r);
    }
    auto w = me.poll(2 * n, 20000);
    EXPECT_EQ(p1.finish().rc, 0);
    EXPECT_EQ(p2.finish().rc, 0);
    ASSERT_EQ(w.size(), 2u * n);
    // QP numbers are unique on the host: the two processes' QPs differ and
    // src_qp names the sender of every datagram (checked against its tag).
    ASSERT_NE(p1.addr.qpn, p2.addr.qpn);
    ASSERT_NE(p1.addr.qpn, vq::get_qp_addr(me.qp).qpn);
    std::map<std::uint8_t, std::uint32_t> next; // per sender tag: next index
    for (auto &x : w) {
        ASSERT_EQ(x.status, wc_status::success);
        ASSERT_EQ(x.byte_len, len);
        const std::uint8_t *m = me.buf.data() + x.wr_id * 128;
        std::uint8_t tag = m[0];
        ASSERT_TRUE(tag == 0xa1 || tag == 0xb2);
        EXPECT_EQ(x.src_qp, tag == 0xa1 ? p1.addr.qpn : p2.addr.qpn) << "src_qp identifies the sender";
        std::uint32_t idx;
        std::memcpy(&idx, m + 1, 4);
        EXPECT_EQ(idx, next[tag]++) << "per-sender order";
        EXPECT_EQ(m[len - 1], tag);
    }
    EXPECT_EQ(next[0xa1], n);
    EXPECT_EQ(next[0xb2], n);
}

TEST(ShmUd, TsoSegmentsReachAPeer)
{
    local_end me(vq::qp_type::ud);
    shm_peer peer("ud");
    ASSERT_EQ(me.connect(peer.addr), 0);
    ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
    ASSERT_EQ(peer.post_recv(8, 2048), 0);
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = peer.addr.dev;
    ASSERT_EQ(vq::create_ah(me.pd, &aa, &ah), 0);
    std::vector<std::uint8_t> hdr(54, 0); // not IP: copied verbatim in front of each segment
    for (std::size_t i = 0; i < hdr.size(); i++)
        hdr[i] = static_cast<std::uint8_t>(0xc0 + i);
    const std::uint32_t payload = 4000, mss = 1000;
    for (std::uint32_t i = 0; i < payload; i++)
        me.buf[i] = static_cast<std::uint8_t>(i * 31);
    vq::wr_start(me.qp);
    me.qp->wr_id = 1;
    me.qp->wr_flags = vq::WR_SIGNALED;
    vq::wr_send_tso(me.qp, hdr.data(), static_cast<std::uint16_t>(hdr.size()), mss);
    vq::wr_set_sge(me.qp, me.mr->lkey, me.addr(), payload);
    vq::wr_set_ud_addr(me.qp, ah, peer.addr.qpn, 0x1234);
    ASSERT_EQ(vq::wr_complete(me.qp), 0);
    auto s = me.poll(1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, wc_status::success);
    auto r = peer.poll(4);
    ASSERT_EQ(r.size(), 4u);
    for (int k = 0; k < 4; k++) {
        EXPECT_EQ(r[k].status, wc_status::success);
        ASSERT_EQ(r[k].byte_len, hdr.size() + mss);
        auto got = peer.read((r[k].wr_id - 1000) * 2048, hdr.size() + mss);
        EXPECT_TRUE(std::equal(hdr.begin(), hdr.end(), got.begin())) << k;
        EXPECT_TRUE(std::equal(me.buf.begin() + k * mss, me.buf.begin() + (k + 1) * mss, got.begin() + 54)) << k;
    }
    EXPECT_EQ(vq::destroy_ah(ah), 0);
}

TEST(ShmUd, SendsToADeadReceiverAreDroppedWithinBoundedTime)
{
    local_end me(vq::qp_type::ud);
    shm_peer peer("ud");
    ASSERT_EQ(me.connect(peer.addr), 0);
    ASSERT_EQ(peer.connect(vq::get_qp_addr(me.qp)), 0);
    vq::ah *ah = nullptr;
    vq::ah_attr aa;
    aa.dest = peer.addr.dev;
    ASSERT_EQ(vq::create_ah(me.pd, &aa, &ah), 0);
    peer.kill();
    // Far more than the receiver's ring holds: the rest waits for credits,
    // then is dropped once the receiver is found dead. Every send completes.
    const int n = 600;
    for (int i = 0; i < n; i++) {
        vq::wr_start(me.qp);
        me.qp->wr_id = static_cast<std::uint64_t>(i);
        me.qp->wr_flags = vq::WR_SIGNALED;
        vq::wr_send(me.qp);
        vq::wr_set_sge(me.qp, me.mr->lkey, me.addr(), 100);
        vq::wr_set_ud_addr(me.qp, ah, peer.addr.qpn, 0x1234);
        ASSERT_EQ(vq::wr_complete(me.qp), 0);
    }
    auto w = me.poll(n, 10000);
    ASSERT_EQ(w.size(), static_cast<std::size_t>(n));
    for (auto &x : w)
        EXPECT_EQ(x.status, wc_status::success);
    EXPECT_EQ(vq::get_qp_state(me.qp), vq::qp_state::rts) << "UD stays up";
    EXPECT_EQ(vq::destroy_ah(ah), 0);
}

} // namespace
} // namespace shunt::test
